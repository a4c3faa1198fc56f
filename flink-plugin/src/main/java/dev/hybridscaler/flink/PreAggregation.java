package dev.hybridscaler.flink;

import org.apache.flink.api.common.functions.ReduceFunction;
import org.apache.flink.api.java.functions.KeySelector;
import org.apache.flink.metrics.Counter;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.datastream.SingleOutputStreamOperator;
import org.apache.flink.streaming.api.operators.AbstractStreamOperator;
import org.apache.flink.streaming.api.operators.ChainingStrategy;
import org.apache.flink.streaming.api.operators.OneInputStreamOperator;
import org.apache.flink.streaming.api.transformations.PhysicalTransformation;
import org.apache.flink.streaming.api.watermark.Watermark;
import org.apache.flink.streaming.runtime.streamrecord.StreamRecord;

import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.Objects;

/**
 * In-memory pre-aggregation per key before a {@code keyBy}: the remedy for hot keys (a key whose
 * records all go to one subtask, however many there are). Each upstream task folds the records
 * of a key into one partial aggregate with the job's own {@link ReduceFunction}, and emits the
 * partials when it holds {@code maxRecords} records, every {@code maxDelay}, and before every
 * checkpoint or savepoint barrier; the keyed operator behind the {@code keyBy} then merges
 * partials with the same function. A hot key then costs the keyed operator (and RocksDB) one
 * read-update per flush and upstream task instead of one per record.
 *
 * <pre>{@code
 * PreAggregation.of(events, e -> e.key, (a, b) -> a.merge(b), 10_000, Duration.ofMillis(100))
 *     .uid("pre-aggregate")
 *     .keyBy(e -> e.key).reduce((a, b) -> a.merge(b)).uid("aggregate");
 * }</pre>
 *
 * <p>Exact across failures, stop-with-savepoint and restore, without state of its own: the
 * buffer is flushed downstream in {@code prepareSnapshotPreBarrier}, so every record before a
 * barrier is in the keyed operator's state when that snapshot is taken, and nothing buffered
 * is ever part of a snapshot (the job can be rescaled freely). Watermarks flush first, so a
 * partial is never late. The function must be associative (and the job not rely on the order
 * of records of a key across partials), as for Flink SQL's two-phase aggregation.
 *
 * <p>Memory is bounded by {@code maxRecords} distinct keys at most; latency grows by
 * {@code maxDelay} at most.
 */
public final class PreAggregation {
    /** The operator's metric names: records in, partial aggregates out. */
    public static final String RECORDS_IN = "preAggregationRecordsIn";
    public static final String PARTIALS_OUT = "preAggregationPartialsOut";

    private PreAggregation() {}

    /**
     * {@code input}, pre-aggregated per {@code key} with {@code reduce}; chained to its
     * producer (no extra network hop). Set a uid on the result, as for any operator.
     */
    public static <T, K> SingleOutputStreamOperator<T> of(
            DataStream<T> input, KeySelector<T, K> key, ReduceFunction<T> reduce,
            int maxRecords, Duration maxDelay) {
        SingleOutputStreamOperator<T> result = input.transform("pre-aggregate", input.getType(),
                new Operator<>(key, reduce, maxRecords, maxDelay));
        // A per-record fold: chaining it to its producer is the point (operators default to
        // HEAD). Set on the transformation: Flink 2.x operators no longer carry the strategy.
        ((PhysicalTransformation<T>) result.getTransformation())
                .setChainingStrategy(ChainingStrategy.ALWAYS);
        return result;
    }

    /** The operator behind {@link #of}. */
    public static final class Operator<T, K> extends AbstractStreamOperator<T>
            implements OneInputStreamOperator<T, T> {
        private static final long serialVersionUID = 1L;

        private final KeySelector<T, K> key;
        private final ReduceFunction<T> reduce;
        private final int maxRecords;
        private final long maxDelayMs;
        private transient Map<K, StreamRecord<T>> buffer;
        private transient int buffered;
        private transient boolean timerSet;
        private transient Counter in;
        private transient Counter out;

        public Operator(KeySelector<T, K> key, ReduceFunction<T> reduce, int maxRecords,
                        Duration maxDelay) {
            this.key = Objects.requireNonNull(key, "key");
            this.reduce = Objects.requireNonNull(reduce, "reduce");
            if (maxRecords < 1) {
                throw new IllegalArgumentException("maxRecords must be >= 1, got " + maxRecords);
            }
            if (maxDelay == null || maxDelay.isNegative() || maxDelay.isZero()) {
                throw new IllegalArgumentException("maxDelay must be positive, got " + maxDelay);
            }
            this.maxRecords = maxRecords;
            this.maxDelayMs = maxDelay.toMillis() < 1 ? 1 : maxDelay.toMillis();
        }

        @Override
        public void open() throws Exception {
            super.open();
            buffer = new HashMap<>();
            in = getMetricGroup().counter(RECORDS_IN);
            out = getMetricGroup().counter(PARTIALS_OUT);
        }

        @Override
        public void processElement(StreamRecord<T> element) throws Exception {
            in.inc();
            T value = element.getValue();
            K k = key.getKey(value);
            StreamRecord<T> partial = buffer.get(k);
            if (partial == null) {
                buffer.put(k, element.copy(value));
            } else if (partial.hasTimestamp() && element.hasTimestamp()) {
                partial.replace(reduce.reduce(partial.getValue(), value),
                        Math.max(partial.getTimestamp(), element.getTimestamp()));
            } else {
                partial.replace(reduce.reduce(partial.getValue(), value));
            }
            if (++buffered >= maxRecords) {
                flush();
            } else if (!timerSet) {
                timerSet = true;
                long now = getProcessingTimeService().getCurrentProcessingTime();
                getProcessingTimeService().registerTimer(now + maxDelayMs, t -> {
                    timerSet = false;
                    flush();
                });
            }
        }

        @Override
        public void processWatermark(Watermark mark) throws Exception {
            flush();
            super.processWatermark(mark);
        }

        /** Every record before the barrier reaches the keyed operator before its snapshot. */
        @Override
        public void prepareSnapshotPreBarrier(long checkpointId) throws Exception {
            super.prepareSnapshotPreBarrier(checkpointId);
            flush();
        }

        /** End of input (or stop-with-savepoint --drain). */
        @Override
        public void finish() throws Exception {
            flush();
            super.finish();
        }

        private void flush() {
            if (buffer == null || buffer.isEmpty()) {
                buffered = 0;
                return;
            }
            for (StreamRecord<T> partial : buffer.values()) {
                output.collect(partial);
                out.inc();
            }
            buffer.clear();
            buffered = 0;
        }
    }
}
