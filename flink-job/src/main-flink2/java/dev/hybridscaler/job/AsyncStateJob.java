package dev.hybridscaler.job;

import dev.hybridscaler.flink.HybridResources;

import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.configuration.ReadableConfig;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink;

/**
 * {@link StateJob} with asynchronous state access (Flink 2.x only: {@code enableAsyncState()} and
 * the State V2 API), the mode ForSt keeps its state in the remote primary directory in. Same
 * source, keys, uids and checks, so a step on it compares with one on StateJob. Built by the
 * {@code flink-2} profile only; run it with {@code hybridscaler.standin.job-class}.
 */
public final class AsyncStateJob {
    private AsyncStateJob() {}

    public static void main(String[] args) throws Exception {
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment();
        build(env, env.getConfiguration());
        HybridResources.apply(env);
        env.execute("async-state-job");
    }

    static void build(StreamExecutionEnvironment env, ReadableConfig conf) {
        KeySchedule schedule = StateJob.schedule(conf);
        int valueBytes = conf.get(StateJob.VALUE_BYTES);
        if (valueBytes < 8) {
            throw new IllegalArgumentException(
                    StateJob.VALUE_BYTES.key() + " must be >= 8, got " + valueBytes);
        }
        env.fromSource(new PacedSequenceSource(conf.get(StateJob.RATE), conf.get(StateJob.MAX_LAG_S)),
                        WatermarkStrategy.noWatermarks(), StateJob.SOURCE)
                .uid(StateJob.SOURCE).setParallelism(1).setMaxParallelism(1)
                .keyBy(schedule::key, Types.LONG)
                .enableAsyncState()
                .process(new AsyncVerifyingCounter(schedule, valueBytes))
                .uid(StateJob.COUNTER).name(StateJob.COUNTER)
                .setMaxParallelism(conf.get(StateJob.MAX_PARALLELISM))
                .sinkTo(new DiscardingSink<>()).uid(StateJob.SINK).name(StateJob.SINK);
    }
}
