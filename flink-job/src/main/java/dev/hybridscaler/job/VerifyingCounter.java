package dev.hybridscaler.job;

import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.PrimitiveArrayTypeInfo;
import org.apache.flink.util.Collector;

/**
 * Reads and updates one value per key in RocksDB ({@link CheckedCounter}). Record i must find its
 * key's counter at the number of records before it of that key ({@link KeySchedule#sequence});
 * otherwise state was lost.
 */
final class VerifyingCounter extends CheckedCounter<Long> {
    private transient ValueState<byte[]> value;

    VerifyingCounter(KeySchedule schedule, int valueBytes) {
        super(schedule, valueBytes);
    }

    @Override
    public void open(OpenContext context) throws Exception {
        super.open(context);
        value = getRuntimeContext().getState(new ValueStateDescriptor<>(
                STATE, PrimitiveArrayTypeInfo.BYTE_PRIMITIVE_ARRAY_TYPE_INFO));
    }

    @Override
    public void processElement(Long index, Context ctx, Collector<Long> out) throws Exception {
        long sequence = schedule.sequence(index);
        value.update(count(value.value(), ctx.getCurrentKey(), 1, sequence));
        stored(index);
        out.collect(sequence);
    }
}
