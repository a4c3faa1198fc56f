package dev.hybridscaler.job;

import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.PrimitiveArrayTypeInfo;
import org.apache.flink.api.java.tuple.Tuple3;
import org.apache.flink.util.Collector;

/**
 * {@link VerifyingCounter} behind flink-plugin's PreAggregation: each input is a partial
 * (key, records, index of its last record) folded upstream, and one read-update adds it. The
 * stored counter plus the partial's records must be exactly the number of records of the key up
 * to its last one ({@link KeySchedule#sequence}): a partial lost or counted twice (a flush that
 * missed a barrier) shows as {@code countMismatches}. {@code countsVerified} counts records.
 */
final class BufferedCounter extends CheckedCounter<Tuple3<Long, Long, Long>> {
    private transient ValueState<byte[]> value;

    BufferedCounter(KeySchedule schedule, int valueBytes) {
        super(schedule, valueBytes);
    }

    @Override
    public void open(OpenContext context) throws Exception {
        super.open(context);
        value = getRuntimeContext().getState(new ValueStateDescriptor<>(
                STATE, PrimitiveArrayTypeInfo.BYTE_PRIMITIVE_ARRAY_TYPE_INFO));
    }

    @Override
    public void processElement(Tuple3<Long, Long, Long> partial, Context ctx, Collector<Long> out)
            throws Exception {
        long sequence = schedule.sequence(partial.f2);
        value.update(count(value.value(), ctx.getCurrentKey(), partial.f1, sequence));
        stored(partial.f2);
        out.collect(sequence);
    }
}
