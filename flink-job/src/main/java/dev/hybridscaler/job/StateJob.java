package dev.hybridscaler.job;

import dev.hybridscaler.flink.HybridResources;
import dev.hybridscaler.flink.PreAggregation;

import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.tuple.Tuple3;
import org.apache.flink.configuration.ConfigOption;
import org.apache.flink.configuration.ConfigOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.ReadableConfig;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.datastream.SingleOutputStreamOperator;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink;

import java.time.Duration;

/**
 * A Nexmark-like RocksDB job (docs/e2e.md, "Real Flink"): a generator source paced at
 * {@code hybridscaler.job.rate} records/s, a keyed operator that reads and updates one
 * {@code value-bytes} ValueState per key (the Justin paper's Update workload) and verifies a per-key
 * counter, and a discarding sink. Every operator has a uid (flink-plugin's contract).
 *
 * <p>Record i updates the key {@link KeySchedule} names for it (uniform: round-robin; zipf: seeded,
 * skewed), and the schedule also says how many records before i updated that key: the counter
 * stored for the key must be exactly that. Losing keyed state (a restart that did not restore it)
 * shows as {@code countMismatches} as soon as a key seen before comes again; losing the whole
 * job's state shows as {@code lastIndex} (the source's position) going back, and from the second
 * round on as {@code lastSequence} (the round) starting over.
 */
public final class StateJob {
    public static final String SOURCE = "events";
    public static final String COUNTER = "counter";
    public static final String SINK = "sink";
    public static final String PRE_AGGREGATE = "pre-aggregate";

    static final ConfigOption<Double> RATE = ConfigOptions.key("hybridscaler.job.rate")
            .doubleType().defaultValue(1000.0).withDescription("records/s the source offers");
    static final ConfigOption<Long> KEYS = ConfigOptions.key("hybridscaler.job.keys")
            .longType().defaultValue(100_000L);
    static final ConfigOption<String> KEY_DISTRIBUTION =
            ConfigOptions.key("hybridscaler.job.key-distribution").stringType().defaultValue("uniform")
            .withDescription("uniform (round-robin) or zipf (seeded; see KeySchedule)");
    static final ConfigOption<Double> ZIPF_EXPONENT = ConfigOptions.key("hybridscaler.job.zipf-exponent")
            .doubleType().defaultValue(1.0);
    static final ConfigOption<Long> KEY_SEED = ConfigOptions.key("hybridscaler.job.key-seed")
            .longType().defaultValue(0L)
            .withDescription("the zipf schedule's seed: a restored job must run with the same one");
    static final ConfigOption<Integer> VALUE_BYTES = ConfigOptions.key("hybridscaler.job.value-bytes")
            .intType().defaultValue(1000);
    static final ConfigOption<Double> MAX_LAG_S = ConfigOptions.key("hybridscaler.job.max-lag-s")
            .doubleType().defaultValue(60.0)
            .withDescription("the backlog the source keeps at most, in seconds of its rate");
    static final ConfigOption<Integer> MAX_PARALLELISM =
            ConfigOptions.key("hybridscaler.job.max-parallelism").intType().defaultValue(8);

    static final ConfigOption<Integer> PRE_AGGREGATE_RECORDS =
            ConfigOptions.key("hybridscaler.job.pre-aggregate-records").intType().defaultValue(0)
            .withDescription("0: every record reads and updates its key; n > 0: records are "
                    + "pre-aggregated per key before the keyBy (flink-plugin's PreAggregation), "
                    + "flushed every n records, every pre-aggregate-delay-ms and at barriers");
    static final ConfigOption<Integer> PRE_AGGREGATE_DELAY_MS =
            ConfigOptions.key("hybridscaler.job.pre-aggregate-delay-ms").intType()
            .defaultValue(100);

    private StateJob() {}

    public static void main(String[] args) throws Exception {
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment();
        build(env, env.getConfiguration());
        HybridResources.apply(env);
        env.execute("state-job");
    }

    static void build(StreamExecutionEnvironment env, ReadableConfig conf) {
        build(env, conf, COUNTER);
    }

    /** {@code counterUid}: tests restore a savepoint into a counter that does not own its state. */
    static void build(StreamExecutionEnvironment env, ReadableConfig conf, String counterUid) {
        KeySchedule schedule = schedule(conf);
        int valueBytes = valueBytes(conf);
        DataStream<Long> events = events(env, conf);
        int buffered = conf.get(PRE_AGGREGATE_RECORDS);
        if (buffered <= 0) {
            counted(events.keyBy(schedule::key, Types.LONG)
                    .process(new VerifyingCounter(schedule, valueBytes)), counterUid, conf);
            return;
        }
        // (key, records, index of the last record): folded per key in the source's task, so
        // a hot key costs the counter one read-update per flush, not one per record.
        DataStream<Tuple3<Long, Long, Long>> partials = events
                .map(i -> Tuple3.of(schedule.key(i), 1L, i))
                .returns(Types.TUPLE(Types.LONG, Types.LONG, Types.LONG))
                .uid("partial").name("partial").setParallelism(1).setMaxParallelism(1);
        counted(PreAggregation.of(partials, p -> p.f0,
                        (a, b) -> Tuple3.of(a.f0, a.f1 + b.f1, Math.max(a.f2, b.f2)), buffered,
                        Duration.ofMillis(Math.max(1, conf.get(PRE_AGGREGATE_DELAY_MS))))
                .uid(PRE_AGGREGATE).name(PRE_AGGREGATE).setParallelism(1).setMaxParallelism(1)
                .keyBy(p -> p.f0, Types.LONG)
                .process(new BufferedCounter(schedule, valueBytes)), counterUid, conf);
    }

    /** {@code hybridscaler.job.value-bytes}: at least the counter's 8 bytes. */
    static int valueBytes(ReadableConfig conf) {
        int valueBytes = conf.get(VALUE_BYTES);
        if (valueBytes < 8) {
            throw new IllegalArgumentException(VALUE_BYTES.key() + " must be >= 8, got " + valueBytes);
        }
        return valueBytes;
    }

    /** The source: record indexes at {@code hybridscaler.job.rate}. */
    static DataStream<Long> events(StreamExecutionEnvironment env, ReadableConfig conf) {
        // One ordered sequence: with one source task, each key's records arrive in order.
        return env.fromSource(new PacedSequenceSource(conf.get(RATE), conf.get(MAX_LAG_S)),
                        WatermarkStrategy.noWatermarks(), SOURCE)
                .uid(SOURCE).setParallelism(1).setMaxParallelism(1);
    }

    /** Names the keyed counter and puts the discarding sink behind it. */
    static void counted(SingleOutputStreamOperator<Long> counter, String counterUid,
                        ReadableConfig conf) {
        counter.uid(counterUid).name(COUNTER).setMaxParallelism(conf.get(MAX_PARALLELISM))
                .sinkTo(new DiscardingSink<>()).uid(SINK).name(SINK);
    }

    static KeySchedule schedule(ReadableConfig conf) {
        return new KeySchedule(conf.get(KEYS), KeySchedule.distribution(conf.get(KEY_DISTRIBUTION)),
                conf.get(ZIPF_EXPONENT), conf.get(KEY_SEED));
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
