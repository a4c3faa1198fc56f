package dev.hybridscaler.flink;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.apache.flink.api.common.JobID;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.runtime.jobgraph.JobGraph;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;

import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.JsonNode;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

/**
 * The plugin on Flink 2.x with ForSt (a local file:// directory as the remote store): each
 * counter gets the slot the plugin asked for, ForSt sizes its block cache from that slot's
 * managed memory by its own write-buffer ratio, and the metric names docs/metrics.md maps for
 * Flink 2.x are emitted: the block cache's under RocksDB's names, the file cache and in-flight
 * records for asynchronous state only, state latency for synchronous state only.
 */
class ForStResourcesTest {
    private static final Duration TIMEOUT = Duration.ofSeconds(120);
    private static final long MIB = 1024 * 1024;
    private static final String OP = "flink_taskmanager_job_task_operator_";

    @Test
    void forstSizesItsBlockCacheFromEachOperatorsManagedMemory(@TempDir Path work) throws Exception {
        Map<String, String> config = new HashMap<>(ForStGoldenRecorder.forstConfig(work));
        // Not ForSt's default 0.5, so the capacity shows ForSt's own key was honoured.
        config.put("state.backend.forst.memory.write-buffer-ratio", "0.25");
        try (FlinkCluster flink = new FlinkCluster(ForStGoldenRecorder.TM_MANAGED_MB, 6, config)) {
            Configuration conf = Configuration.fromMap(config);
            conf.set(HybridResources.OPERATOR_RESOURCES, ForStGoldenRecorder.resources());
            StreamExecutionEnvironment env = new StreamExecutionEnvironment(conf);
            ForStJob.build(env, 50);
            HybridResources.apply(env);
            JobGraph graph = env.getStreamGraph().getJobGraph();
            JobID job = flink.mini().submitJob(graph).get(30, TimeUnit.SECONDS).getJobID();

            List<String> profiles = new ArrayList<>();
            FlinkCluster.await("five slots", TIMEOUT,
                    () -> FlinkCluster.unchecked(() -> flink.allocatedSlots(job)).size() == 5);
            for (JsonNode r : flink.allocatedSlots(job)) {
                profiles.add(r.get("cpuCores").asDouble() + "/" + r.get("managedMemory").asInt());
            }
            profiles.sort(null);
            assertEquals(List.of("0.25/0", "0.5/" + ForStGoldenRecorder.SYNC_MANAGED_MB,
                    "0.5/" + ForStGoldenRecorder.SYNC_MANAGED_MB,
                    "0.5/" + ForStGoldenRecorder.ASYNC_MANAGED_MB,
                    "0.5/" + ForStGoldenRecorder.ASYNC_MANAGED_MB), profiles);

            String asyncCapacity = OP + "blob_async_rocksdb_block_cache_capacity";
            String syncCapacity = OP + "blob_sync_rocksdb_block_cache_capacity";
            String syncLatency = OP + "state_name_valueStateGetLatency";
            List<String> documented = List.of(asyncCapacity, syncCapacity,
                    OP + "rocksdb_block_cache_hit", OP + "rocksdb_block_cache_miss",
                    OP + "forst_fileCache_hit", OP + "forst_fileCache_miss",
                    OP + "asyncStateProcessing_numInFlightRecords", syncLatency,
                    "flink_taskmanager_job_task_busyTimeMsPerSecond");
            // Native metrics are views refreshed every 5 s; latency appears at its first sample.
            FlinkCluster.poll(TIMEOUT, () -> missing(flink, job, documented).isEmpty()
                    && positive(flink, job, asyncCapacity) && positive(flink, job, syncCapacity));
            assertEquals(List.of(), missing(flink, job, documented), "documented, not emitted");

            // capacity = managed · (3 − r)/3 with r = state.backend.forst.memory.write-buffer-ratio
            for (PromSample s : flink.samples(job, asyncCapacity)) {
                assertEquals(ForStGoldenRecorder.ASYNC_MANAGED_MB * MIB * 2.75 / 3, s.value(), 1.0,
                        s.toString());
            }
            for (PromSample s : flink.samples(job, syncCapacity)) {
                assertEquals(ForStGoldenRecorder.SYNC_MANAGED_MB * MIB * 2.75 / 3, s.value(), 1.0,
                        s.toString());
            }
            // Which operator has what: file cache and in-flight records only with async state,
            // state latency only with sync state.
            assertOnly(flink, job, OP + "forst_fileCache_hit", ForStJob.ASYNC);
            assertOnly(flink, job, OP + "asyncStateProcessing_numInFlightRecords", ForStJob.ASYNC);
            assertOnly(flink, job, syncLatency, ForStJob.SYNC);
            // ForSt reserves its slots' managed memory up front, as RocksDB does.
            long used = 2L * (ForStGoldenRecorder.ASYNC_MANAGED_MB + ForStGoldenRecorder.SYNC_MANAGED_MB) * MIB;
            FlinkCluster.poll(TIMEOUT, () -> flink.managedMemoryUsed() == used);
            assertEquals(used, flink.managedMemoryUsed());
            flink.mini().cancelJob(job).get(30, TimeUnit.SECONDS);
        }
    }

    private static void assertOnly(FlinkCluster flink, JobID job, String name, String operator) {
        List<PromSample> found = flink.samples(job, name);
        assertFalse(found.isEmpty(), name);
        assertTrue(found.stream().allMatch(s -> s.label("operator_name").equals(operator.replace('-', '_'))),
                name + " " + found);
    }

    private static boolean positive(FlinkCluster flink, JobID job, String name) {
        List<PromSample> found = flink.samples(job, name);
        return found.size() == 2 && found.stream().allMatch(s -> s.value() > 0);
    }

    private static List<String> missing(FlinkCluster flink, JobID job, List<String> names) {
        List<String> emitted = flink.samples(job).stream().map(PromSample::name).toList();
        return names.stream().filter(n -> !emitted.contains(n)).toList();
    }
}
