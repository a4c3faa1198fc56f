package dev.hybridscaler.job;

import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.PrimitiveArrayTypeInfo;
import org.apache.flink.api.java.tuple.Tuple3;
import org.apache.flink.metrics.Counter;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.util.Collector;

import java.nio.ByteBuffer;
import java.util.SplittableRandom;

/**
 * {@link VerifyingCounter} behind flink-plugin's PreAggregation: each input is a partial
 * (key, records, index of its last record) folded upstream, and one read-update adds it. The
 * stored counter plus the partial's records must be exactly the number of records of the key up
 * to its last one ({@link KeySchedule#sequence}): a partial lost or counted twice (a flush that
 * missed a barrier) shows as {@code countMismatches}. {@code countsVerified} counts records.
 */
final class BufferedCounter extends KeyedProcessFunction<Long, Tuple3<Long, Long, Long>, Long> {
    private final KeySchedule schedule;
    private final int valueBytes;
    private transient ValueState<byte[]> value;
    private transient Counter mismatches;
    private transient Counter verified;
    private transient long lastSequence;
    private transient long lastIndex;

    BufferedCounter(KeySchedule schedule, int valueBytes) {
        this.schedule = schedule;
        this.valueBytes = valueBytes;
    }

    @Override
    public void open(OpenContext context) {
        value = getRuntimeContext().getState(new ValueStateDescriptor<>(
                VerifyingCounter.STATE, PrimitiveArrayTypeInfo.BYTE_PRIMITIVE_ARRAY_TYPE_INFO));
        mismatches = getRuntimeContext().getMetricGroup().counter("countMismatches");
        verified = getRuntimeContext().getMetricGroup().counter("countsVerified");
        getRuntimeContext().getMetricGroup().gauge("lastSequence", () -> lastSequence);
        getRuntimeContext().getMetricGroup().gauge("lastIndex", () -> lastIndex);
    }

    @Override
    public void processElement(Tuple3<Long, Long, Long> partial, Context ctx, Collector<Long> out)
            throws Exception {
        long sequence = schedule.sequence(partial.f2);
        byte[] current = value.value();
        long stored = current == null ? 0 : ByteBuffer.wrap(current).getLong();
        if (stored + partial.f1 == sequence) {
            verified.inc(partial.f1);
        } else {
            mismatches.inc();
        }
        if (current == null) {
            current = new byte[valueBytes];
            new SplittableRandom(ctx.getCurrentKey()).nextBytes(current);
        }
        ByteBuffer.wrap(current).putLong(sequence);
        value.update(current);
        lastSequence = Math.max(lastSequence, schedule.round(partial.f2));
        lastIndex = Math.max(lastIndex, partial.f2);
        out.collect(sequence);
    }
}
