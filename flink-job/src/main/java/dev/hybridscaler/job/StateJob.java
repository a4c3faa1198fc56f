package dev.hybridscaler.job;

import dev.hybridscaler.flink.HybridResources;

import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.configuration.ConfigOption;
import org.apache.flink.configuration.ConfigOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.ReadableConfig;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink;

/**
 * A Nexmark-like RocksDB job (docs/e2e.md, "Real Flink"): a generator source paced at
 * {@code hybridscaler.job.rate} records/s, a keyed operator that reads and updates one
 * {@code value-bytes} ValueState per key (the Justin paper's Update workload) and verifies a per-key
 * counter, and a discarding sink. Every operator has a uid (flink-plugin's contract).
 *
 * <p>Record i carries key {@code i mod keys} and sequence {@code i / keys + 1}: every key is visited
 * once per round, so the counter stored for a key must be exactly the sequence before it. Losing
 * keyed state (a restart that did not restore it) shows as {@code countMismatches}; losing the
 * whole job's state shows as {@code lastIndex} (the source's position) going back, and from the
 * second round on as {@code lastSequence} starting over.
 */
public final class StateJob {
    public static final String SOURCE = "events";
    public static final String COUNTER = "counter";
    public static final String SINK = "sink";

    static final ConfigOption<Double> RATE = ConfigOptions.key("hybridscaler.job.rate")
            .doubleType().defaultValue(1000.0).withDescription("records/s the source offers");
    static final ConfigOption<Long> KEYS = ConfigOptions.key("hybridscaler.job.keys")
            .longType().defaultValue(100_000L);
    static final ConfigOption<Integer> VALUE_BYTES = ConfigOptions.key("hybridscaler.job.value-bytes")
            .intType().defaultValue(1000);
    static final ConfigOption<Double> MAX_LAG_S = ConfigOptions.key("hybridscaler.job.max-lag-s")
            .doubleType().defaultValue(60.0)
            .withDescription("the backlog the source keeps at most, in seconds of its rate");
    static final ConfigOption<Integer> MAX_PARALLELISM =
            ConfigOptions.key("hybridscaler.job.max-parallelism").intType().defaultValue(8);

    private StateJob() {}

    public static void main(String[] args) throws Exception {
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment();
        build(env, env.getConfiguration());
        HybridResources.apply(env);
        env.execute("state-job");
    }

    static void build(StreamExecutionEnvironment env, ReadableConfig conf) {
        long keys = conf.get(KEYS);
        if (keys < 1) {
            throw new IllegalArgumentException(KEYS.key() + " must be >= 1, got " + keys);
        }
        int valueBytes = conf.get(VALUE_BYTES);
        if (valueBytes < 8) {
            throw new IllegalArgumentException(VALUE_BYTES.key() + " must be >= 8, got " + valueBytes);
        }
        // One ordered sequence: with one source task, each key's records arrive in order.
        env.fromSource(new PacedSequenceSource(conf.get(RATE), conf.get(MAX_LAG_S)),
                        WatermarkStrategy.noWatermarks(), SOURCE)
                .uid(SOURCE).setParallelism(1).setMaxParallelism(1)
                .keyBy(i -> i % keys, Types.LONG)
                .process(new VerifyingCounter(keys, valueBytes)).uid(COUNTER).name(COUNTER)
                .setMaxParallelism(conf.get(MAX_PARALLELISM))
                .sinkTo(new DiscardingSink<>()).uid(SINK).name(SINK);
    }

    /** For tests: a configuration with the job's keys set. */
    static Configuration configuration(double rate, long keys, int valueBytes) {
        Configuration conf = new Configuration();
        conf.set(RATE, rate);
        conf.set(KEYS, keys);
        conf.set(VALUE_BYTES, valueBytes);
        return conf;
    }
}
