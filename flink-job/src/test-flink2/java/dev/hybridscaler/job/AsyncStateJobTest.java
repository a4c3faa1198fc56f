package dev.hybridscaler.job;

import org.apache.flink.configuration.Configuration;
import org.apache.flink.core.execution.SavepointFormatType;

import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Path;

/**
 * AsyncStateJob (State V2 futures, Flink 2.x) on StateJobTest's MiniCluster with ForSt: the same counter
 * check across a stop-with-savepoint and restore, and the same failure when the restore loses
 * the counter's state.
 */
class AsyncStateJobTest {
    @BeforeAll
    static void start() throws Exception {
        StateJobTest.start("forst"); // what asynchronous state is for
    }

    @AfterAll
    static void stop() throws Exception {
        StateJobTest.stop();
    }

    @Test
    void asyncCountersSurviveASavepointAndALostRestoreIsCaught(@TempDir Path dir) throws Exception {
        Configuration conf = StateJob.configuration(4000, 1000, 64);
        conf.set(StateJob.KEY_DISTRIBUTION, "zipf");
        conf.set(StateJob.KEY_SEED, 42L);
        // ForSt writes native savepoints only.
        StateJobTest.survivesASavepointAndCatchesALostRestore(AsyncStateJob::build, conf,
                SavepointFormatType.NATIVE, dir, "async zipf");
    }
}
