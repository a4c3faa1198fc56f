package dev.hybridscaler.job;

import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.v2.ValueState;
import org.apache.flink.api.common.state.v2.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.PrimitiveArrayTypeInfo;
import org.apache.flink.util.Collector;

/**
 * {@link VerifyingCounter} through State V2 futures: the read and the update of a key's value
 * are asynchronous requests; Flink keeps each key's records in order.
 */
final class AsyncVerifyingCounter extends CheckedCounter<Long> {
    private transient ValueState<byte[]> value;

    AsyncVerifyingCounter(KeySchedule schedule, int valueBytes) {
        super(schedule, valueBytes);
    }

    @Override
    public void open(OpenContext context) throws Exception {
        super.open(context);
        value = getRuntimeContext().getState(new ValueStateDescriptor<>(
                STATE, PrimitiveArrayTypeInfo.BYTE_PRIMITIVE_ARRAY_TYPE_INFO));
    }

    @Override
    public void processElement(Long index, Context ctx, Collector<Long> out) {
        long sequence = schedule.sequence(index);
        long key = ctx.getCurrentKey();
        value.asyncValue()
                .thenCompose(current -> value.asyncUpdate(count(current, key, 1, sequence)))
                .thenAccept(done -> {
                    stored(index);
                    out.collect(sequence);
                });
    }
}
