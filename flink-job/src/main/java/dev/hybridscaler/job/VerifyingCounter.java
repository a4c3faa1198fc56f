package dev.hybridscaler.job;

import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.PrimitiveArrayTypeInfo;
import org.apache.flink.metrics.Counter;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.util.Collector;

import java.nio.ByteBuffer;
import java.util.SplittableRandom;

/**
 * Reads and updates one value per key in RocksDB: 8 bytes of counter, then random (incompressible)
 * payload. Record i must find its key's counter at the number of records before it of that key
 * ({@link KeySchedule#sequence}); otherwise state was lost.
 */
final class VerifyingCounter extends KeyedProcessFunction<Long, Long, Long> {
    /** The ValueState's name, hence RocksDB's column family in metric names. */
    static final String STATE = "value";

    private final KeySchedule schedule;
    private final int valueBytes;
    private transient ValueState<byte[]> value;
    private transient Counter mismatches;
    private transient Counter verified;
    private transient long lastSequence;
    private transient long lastIndex;

    VerifyingCounter(KeySchedule schedule, int valueBytes) {
        this.schedule = schedule;
        this.valueBytes = valueBytes;
    }

    @Override
    public void open(OpenContext context) {
        value = getRuntimeContext().getState(new ValueStateDescriptor<>(
                STATE, PrimitiveArrayTypeInfo.BYTE_PRIMITIVE_ARRAY_TYPE_INFO));
        mismatches = getRuntimeContext().getMetricGroup().counter("countMismatches");
        verified = getRuntimeContext().getMetricGroup().counter("countsVerified");
        getRuntimeContext().getMetricGroup().gauge("lastSequence", () -> lastSequence);
        // The source's position as this task saw it: a restart that restored nothing starts
        // over at 0, which lastSequence cannot tell while the first round is not done.
        getRuntimeContext().getMetricGroup().gauge("lastIndex", () -> lastIndex);
    }

    @Override
    public void processElement(Long index, Context ctx, Collector<Long> out) throws Exception {
        long sequence = schedule.sequence(index);
        byte[] current = value.value();
        long stored = current == null ? 0 : ByteBuffer.wrap(current).getLong();
        if (stored + 1 == sequence) {
            verified.inc();
        } else {
            mismatches.inc();
        }
        if (current == null) {
            current = new byte[valueBytes];
            new SplittableRandom(ctx.getCurrentKey()).nextBytes(current);
        }
        ByteBuffer.wrap(current).putLong(sequence);
        value.update(current);
        // The round: with uniform keys, every key's counter; it starts over if nothing was restored.
        lastSequence = Math.max(lastSequence, schedule.round(index));
        lastIndex = Math.max(lastIndex, index);
        out.collect(sequence);
    }
}
