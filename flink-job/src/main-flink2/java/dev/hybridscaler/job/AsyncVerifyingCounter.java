package dev.hybridscaler.job;

import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.v2.ValueState;
import org.apache.flink.api.common.state.v2.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.PrimitiveArrayTypeInfo;
import org.apache.flink.metrics.Counter;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.util.Collector;

import java.nio.ByteBuffer;
import java.util.SplittableRandom;

/**
 * {@link VerifyingCounter} through State V2 futures: the read and the update of a key's value
 * are asynchronous requests; Flink keeps each key's records in order.
 */
final class AsyncVerifyingCounter extends KeyedProcessFunction<Long, Long, Long> {
    private final KeySchedule schedule;
    private final int valueBytes;
    private transient ValueState<byte[]> value;
    private transient Counter mismatches;
    private transient Counter verified;
    private transient long lastSequence;
    private transient long lastIndex;

    AsyncVerifyingCounter(KeySchedule schedule, int valueBytes) {
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
    public void processElement(Long index, Context ctx, Collector<Long> out) {
        long sequence = schedule.sequence(index);
        long key = ctx.getCurrentKey();
        value.asyncValue().thenCompose(current -> {
            long stored = current == null ? 0 : ByteBuffer.wrap(current).getLong();
            if (stored + 1 == sequence) {
                verified.inc();
            } else {
                mismatches.inc();
            }
            byte[] next = current;
            if (next == null) {
                next = new byte[valueBytes];
                new SplittableRandom(key).nextBytes(next);
            }
            ByteBuffer.wrap(next).putLong(sequence);
            return value.asyncUpdate(next);
        }).thenAccept(done -> {
            lastSequence = Math.max(lastSequence, schedule.round(index));
            lastIndex = Math.max(lastIndex, index);
            out.collect(sequence);
        });
    }
}
