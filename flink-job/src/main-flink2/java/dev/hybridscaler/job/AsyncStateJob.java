package dev.hybridscaler.job;

import dev.hybridscaler.flink.HybridResources;

import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.configuration.ReadableConfig;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;

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
        build(env, conf, StateJob.COUNTER);
    }

    /** {@code counterUid}: as {@link StateJob}'s, for tests. */
    static void build(StreamExecutionEnvironment env, ReadableConfig conf, String counterUid) {
        KeySchedule schedule = StateJob.schedule(conf);
        int valueBytes = StateJob.valueBytes(conf);
        StateJob.counted(StateJob.events(env, conf)
                .keyBy(schedule::key, Types.LONG)
                .enableAsyncState()
                .process(new AsyncVerifyingCounter(schedule, valueBytes)), counterUid, conf);
    }
}
