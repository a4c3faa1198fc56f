package dev.hybridscaler.job;

import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.metrics.Counter;
import org.apache.flink.metrics.MetricGroup;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;

import java.nio.ByteBuffer;
import java.util.SplittableRandom;

/**
 * What the job's keyed counters share (VerifyingCounter, BufferedCounter and, on Flink 2.x,
 * AsyncVerifyingCounter): one value per key, 8 bytes of counter then random (incompressible)
 * payload, checked against {@link KeySchedule#sequence}, and the metrics that report the check.
 * The counters differ only in how they read and store the value (synchronous or State V2) and in
 * how many records one input stands for. Compiles against Flink 1.20 and 2.x alike.
 */
abstract class CheckedCounter<IN> extends KeyedProcessFunction<Long, IN, Long> {
    /** The ValueState's name, hence RocksDB's column family in metric names. */
    static final String STATE = "value";

    final KeySchedule schedule;
    private final int valueBytes;
    private transient Counter mismatches;
    private transient Counter verified;
    private transient long lastSequence;
    private transient long lastIndex;

    CheckedCounter(KeySchedule schedule, int valueBytes) {
        this.schedule = schedule;
        this.valueBytes = valueBytes;
    }

    /** Registers the check's metrics; subclasses then create their state. */
    @Override
    public void open(OpenContext context) throws Exception {
        MetricGroup metrics = getRuntimeContext().getMetricGroup();
        mismatches = metrics.counter("countMismatches");
        verified = metrics.counter("countsVerified");
        metrics.gauge("lastSequence", () -> lastSequence);
        // The source's position as this task saw it: a restart that restored nothing starts
        // over at 0, which lastSequence cannot tell while the first round is not done.
        metrics.gauge("lastIndex", () -> lastIndex);
    }

    /**
     * Adds {@code records} records of {@code key} to its stored value {@code current} (null: none
     * yet): their counter plus the stored one must be {@code sequence}, the schedule's count up to
     * the last of them, else the mismatch is counted. Returns the value to store, holding
     * {@code sequence}; {@code current} itself when there was one.
     */
    final byte[] count(byte[] current, long key, long records, long sequence) {
        long stored = current == null ? 0 : ByteBuffer.wrap(current).getLong();
        if (stored + records == sequence) {
            verified.inc(records);
        } else {
            mismatches.inc();
        }
        byte[] next = current;
        if (next == null) {
            next = new byte[valueBytes];
            new SplittableRandom(key).nextBytes(next);
        }
        ByteBuffer.wrap(next).putLong(sequence);
        return next;
    }

    /** After the value of the input ending at record {@code index} was stored. */
    final void stored(long index) {
        // The round: with uniform keys, every key's counter; it starts over if nothing was restored.
        lastSequence = Math.max(lastSequence, schedule.round(index));
        lastIndex = Math.max(lastIndex, index);
    }
}
