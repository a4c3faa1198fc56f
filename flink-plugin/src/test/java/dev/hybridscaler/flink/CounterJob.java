package dev.hybridscaler.flink;

import org.apache.flink.api.common.functions.MapFunction;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink;
import org.apache.flink.util.Collector;

import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

/**
 * The test job: a throttled sequence (p=1) keyed into a RocksDB counter (p=2) with a stateless
 * map and a sink chained behind it. Every operator has a uid, as the plugin requires.
 */
final class CounterJob {
    static final String SOURCE = "gen";
    static final String KEY_MAP = "key-map";
    static final String COUNTER = "counter";
    static final String FORMAT = "format";
    static final String SINK = "sink";
    static final int KEYS = 50;
    /** The counter chain's JobVertexID: Murmur3-128 of its uid "counter" (docs/metrics.md). */
    static final String COUNTER_VERTEX_ID = "0da08f51eaa85fc298e176a139b3649a";
    /** Name of the counter's ValueState, hence RocksDB's column family in metric names. */
    static final String STATE = "count";

    /** Per key: the first and the last count the counter produced since {@link #reset()}. */
    static final Map<Long, long[]> SEEN = new ConcurrentHashMap<>();

    private CounterJob() {}

    static void reset() {
        SEEN.clear();
    }

    static void build(StreamExecutionEnvironment env) {
        env.setParallelism(2);
        env.fromSequence(0, Long.MAX_VALUE).uid("gen").name("gen").setParallelism(1)
                .map(new Throttle(KEYS, 5)).uid("key-map").name(KEY_MAP).setParallelism(1)
                .keyBy(k -> k)
                .process(new Counter()).uid("counter").name(COUNTER)
                .map(c -> "count " + c).uid("format").name(FORMAT)
                .sinkTo(new DiscardingSink<>()).uid("sink").name(SINK);
    }

    /**
     * Record i's key is {@code i mod keys}; one 1 ms sleep every {@code recordsPerSleep} records
     * (5: about a thousand records a second), so the job leaves CPU for the test.
     */
    static final class Throttle implements MapFunction<Long, Long> {
        private final int keys;
        private final int recordsPerSleep;

        Throttle(int keys, int recordsPerSleep) {
            this.keys = keys;
            this.recordsPerSleep = recordsPerSleep;
        }

        @Override
        public Long map(Long i) throws Exception {
            if (i % recordsPerSleep == 0) {
                Thread.sleep(1);
            }
            return i % keys;
        }
    }

    static final class Counter extends KeyedProcessFunction<Long, Long, Long> {
        private transient ValueState<Long> count;

        @Override
        public void open(OpenContext context) {
            count = getRuntimeContext().getState(new ValueStateDescriptor<>(STATE, Types.LONG));
        }

        @Override
        public void processElement(Long key, Context ctx, Collector<Long> out) throws Exception {
            Long before = count.value();
            long now = before == null ? 1 : before + 1;
            count.update(now);
            SEEN.compute(key, (k, v) -> v == null ? new long[] {now, now} : new long[] {v[0], now});
            out.collect(now);
        }
    }
}
