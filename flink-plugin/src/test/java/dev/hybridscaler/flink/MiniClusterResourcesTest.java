package dev.hybridscaler.flink;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.apache.flink.api.common.JobID;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.PipelineOptions;
import org.apache.flink.core.execution.SavepointFormatType;
import org.apache.flink.runtime.jobgraph.JobGraph;
import org.apache.flink.runtime.jobgraph.SavepointRestoreSettings;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;

import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.JsonNode;

import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Callable;
import java.util.concurrent.TimeUnit;

/**
 * The plugin on a real MiniCluster with RocksDB and the Prometheus reporter: the slots Flink
 * allocates, RocksDB's cache size and the TaskManager's managed memory follow the configuration,
 * also after a savepoint and a restart with changed values.
 */
class MiniClusterResourcesTest {
    private static final Duration TIMEOUT = Duration.ofSeconds(60);
    private static final int TM_MANAGED_MB = 512;
    private static final long MIB = 1024 * 1024;
    private static FlinkCluster flink;

    @BeforeAll
    static void start() throws Exception {
        // Not Flink's default ratio 0.5, so the cache size shows this configuration was used.
        flink = new FlinkCluster(TM_MANAGED_MB, 4,
                Map.of("state.backend.rocksdb.memory.write-buffer-ratio", "0.25"));
    }

    @AfterAll
    static void stop() throws Exception {
        flink.close();
    }

    @Test
    void slotsCacheAndStateFollowTheConfigurationAcrossASavepointRestart(@TempDir Path dir)
            throws Exception {
        // First run: counter tasks with 96 MiB each, stateless source chain with none.
        CounterJob.reset();
        JobID first = submit(resources(0.5, 64, 96), 2, null);
        assertRunningWith(first, 2, 0.5, 64, 96);
        awaitAllKeysCounted();
        String savepoint = flink.mini()
                .stopWithSavepoint(first, dir.toUri().toString(), false, SavepointFormatType.CANONICAL)
                .get(60, TimeUnit.SECONDS);
        Map<Long, Long> lastCounts = lastCounts(); // all counted before the savepoint barrier

        // Second run from the savepoint, as the controller would start it: more memory and CPU
        // for the counter, and a third counter task through Flink's parallelism override.
        CounterJob.reset();
        JobID second = submit(resources(1.0, 96, 160), 3, savepoint);
        assertRunningWith(second, 3, 1.0, 96, 160);
        awaitAllKeysCounted();
        for (Map.Entry<Long, long[]> e : CounterJob.SEEN.entrySet()) {
            assertEquals(lastCounts.get(e.getKey()) + 1, e.getValue()[0],
                    "key " + e.getKey() + " must continue counting from the savepoint");
        }
        assertDocumentedMetricsEmitted(second);
        flink.mini().cancelJob(second).get(30, TimeUnit.SECONDS);
    }

    @Test
    void chainsInOneNamedGroupRunOneSlotPerSubtaskIndexOfTheGroupsSize() throws Exception {
        // The source chain (p=1) and the counter chain (p=2) in group "shared": Flink needs
        // max(p) = 2 slots of the group's size, subtask 0 of both sharing the first, instead of
        // one slot per chain and subtask; the chains themselves stay as they were.
        CounterJob.reset();
        String value = ResourcesJson.json(ResourcesJson.entry("gen", 0.5, 64, 96, "shared"),
                ResourcesJson.entry("counter", 0.5, 64, 96, "shared"));
        JobID job = submit(value, 2, null);
        FlinkCluster.await("slots for " + job, TIMEOUT, () -> running(job) && slots(job).size() == 2);
        List<String> profiles = new ArrayList<>();
        for (JsonNode r : slots(job)) {
            profiles.add(r.get("cpuCores").asDouble() + "/" + r.get("taskHeapMemory").asInt()
                    + "/" + r.get("managedMemory").asInt());
        }
        assertEquals(List.of("0.5/64/96", "0.5/64/96"), profiles);
        JsonNode vertices = flink.rest("/jobs/" + job.toHexString()).get("vertices");
        List<String> ids = new ArrayList<>();
        vertices.forEach(v -> ids.add(v.get("id").asText()));
        ids.sort(null);
        // Two vertices headed by "counter" and "gen" (Murmur3 of the uids): chains as without
        // the plugin, so the controller's parallelism overrides still name them.
        assertEquals(List.of(CounterJob.COUNTER_VERTEX_ID, "6bf01baa9d2ca23a3ef7ce311722523d"),
                ids, "chaining still works inside the group");
        awaitAllKeysCounted();
        // The counter's RocksDB gets the whole slot's managed memory; the source chain in the
        // same slot reserves none of it, so the TaskManager holds 2 x 96 MiB, not 3.
        String capacity = "flink_taskmanager_job_task_operator_" + CounterJob.STATE
                + "_rocksdb_block_cache_capacity";
        FlinkCluster.await("cache capacity metrics", TIMEOUT, () -> {
            List<PromSample> found = flink.samples(job, capacity);
            return found.size() == 2 && found.stream().allMatch(s -> s.value() > 0);
        });
        for (PromSample s : flink.samples(job, capacity)) {
            assertEquals(flink.blockCacheBytes(96), (long) s.value(), s.toString());
        }
        long used = 2 * 96 * MIB;
        FlinkCluster.poll(TIMEOUT, () -> flink.managedMemoryUsed() == used);
        assertEquals(used, flink.managedMemoryUsed());
        flink.mini().cancelJob(job).get(30, TimeUnit.SECONDS);
        FlinkCluster.await("slots of " + job + " released", TIMEOUT, () -> slots(job).isEmpty());
    }

    /** The names docs/metrics.md tells the controller and the twin to use, from a real scrape. */
    private static void assertDocumentedMetricsEmitted(JobID job) throws Exception {
        String task = "flink_taskmanager_job_task_";
        String latency = task + "operator_state_name_valueStateGetLatency";
        List<String> documented = List.of(
                task + "busyTimeMsPerSecond", task + "backPressuredTimeMsPerSecond",
                task + "idleTimeMsPerSecond", task + "numRecordsInPerSecond",
                task + "numRecordsOutPerSecond", task + "operator_numRecordsInPerSecond",
                task + "operator_numRecordsOutPerSecond",
                task + "operator_rocksdb_block_cache_hit", task + "operator_rocksdb_block_cache_miss",
                task + "operator_count_rocksdb_block_cache_capacity",
                task + "operator_count_rocksdb_block_cache_usage",
                latency, latency + "_count", task + "operator_state_name_valueStateUpdateLatency",
                "flink_jobmanager_job_uptime", "flink_jobmanager_job_numRestarts",
                "flink_jobmanager_job_runningState");
        // Flink registers each state latency summary at its first sample, not at state creation.
        FlinkCluster.poll(TIMEOUT, () -> notEmitted(job, documented).isEmpty());
        assertEquals(List.of(), notEmitted(job, documented), "documented, not emitted by Flink");
        List<String> emitted = flink.samples(job).stream().map(PromSample::name).distinct().toList();
        // State latency is a summary in nanoseconds with these quantiles and no _sum.
        assertEquals(List.of("0.5", "0.75", "0.95", "0.98", "0.99", "0.999"),
                flink.samples(job, latency).stream().map(s -> s.label("quantile")).distinct().sorted().toList());
        assertFalse(emitted.contains(latency + "_sum"));
        assertTrue(flink.samples(job, latency).stream().allMatch(s -> s.label("state_name").equals(CounterJob.STATE)));
        assertEquals(TM_MANAGED_MB * MIB,
                (long) onlyValue("flink_taskmanager_Status_Flink_Memory_Managed_Total"));
    }

    private static List<String> notEmitted(JobID job, List<String> names) {
        List<String> emitted = flink.samples(job).stream().map(PromSample::name).toList();
        return names.stream().filter(n -> !emitted.contains(n)).toList();
    }

    private static String resources(double cpu, int heap, int managed) {
        return ResourcesJson.json(ResourcesJson.entry("gen", 0.25, 32, 0),
                ResourcesJson.entry("counter", cpu, heap, managed));
    }

    private static JobID submit(String value, int counterTasks, String savepoint)
            throws Exception {
        Configuration conf = new Configuration();
        conf.set(HybridResources.OPERATOR_RESOURCES, value);
        StreamExecutionEnvironment env = new StreamExecutionEnvironment(conf);
        CounterJob.build(env);
        HybridResources.apply(env);
        JobGraph graph = env.getStreamGraph().getJobGraph();
        // Keyed by the vertex id, i.e. murmur3 of the chain head's uid (docs/metrics.md).
        graph.getJobConfiguration().set(PipelineOptions.PARALLELISM_OVERRIDES,
                Map.of(CounterJob.COUNTER_VERTEX_ID, Integer.toString(counterTasks)));
        if (savepoint != null) {
            graph.setSavepointRestoreSettings(SavepointRestoreSettings.forPath(savepoint, false));
        }
        return flink.mini().submitJob(graph).get(30, TimeUnit.SECONDS).getJobID();
    }

    /** Checks what a user of the REST API and of Prometheus sees for a running job. */
    private static void assertRunningWith(JobID job, int counterTasks, double cpu, int heapMb,
                                          int managedMb) throws Exception {
        FlinkCluster.await("slots for " + job, TIMEOUT,
                () -> slots(job).size() == counterTasks + 1 && running(job));

        // Slot profiles: one source-chain slot without managed memory, one per counter task.
        List<String> profiles = new ArrayList<>();
        for (JsonNode r : slots(job)) {
            profiles.add(r.get("cpuCores").asDouble() + "/" + r.get("taskHeapMemory").asInt()
                    + "/" + r.get("managedMemory").asInt());
        }
        profiles.sort(null);
        String counter = cpu + "/" + heapMb + "/" + managedMb;
        List<String> expected = new ArrayList<>(Collections.nCopies(counterTasks, counter));
        expected.add("0.25/32/0");
        expected.sort(null);
        assertEquals(expected, profiles);

        // RocksDB sizes its block cache from the slot's managed memory, in each counter task.
        String capacity = "flink_taskmanager_job_task_operator_" + CounterJob.STATE
                + "_rocksdb_block_cache_capacity";
        // RocksDB's native metrics are Flink "views", refreshed every 5 s and 0 before that.
        FlinkCluster.await("cache capacity metrics", TIMEOUT, () -> {
            List<PromSample> found = flink.samples(job, capacity);
            return found.size() == counterTasks && found.stream().allMatch(s -> s.value() > 0);
        });
        for (PromSample s : flink.samples(job, capacity)) {
            assertEquals(CounterJob.COUNTER, s.label("operator_name"));
            assertEquals(flink.blockCacheBytes(managedMb), (long) s.value(), s.toString());
        }
        // Only the counter has RocksDB: the stateless chain has no state-backend metric at all.
        for (PromSample s : flink.samples(job)) {
            if (s.name().contains("rocksdb")) {
                assertEquals(CounterJob.COUNTER, s.label("operator_name"), s.toString());
            }
        }
        // The controller learns uids from the job's user config.
        JsonNode userConfig = flink.rest("/jobs/" + job.toHexString() + "/config")
                .get("execution-config").get("user-config");
        assertEquals("gen,key-map,counter,format,sink",
                userConfig.get(HybridResources.OPERATOR_UIDS).asText());

        // RocksDB reserves its slot's managed memory up front; nothing else reserves any. The
        // previous job's slots may still be releasing theirs.
        long used = counterTasks * managedMb * MIB;
        FlinkCluster.poll(TIMEOUT, () -> flink.managedMemoryUsed() == used);
        assertEquals(used, flink.managedMemoryUsed());
    }

    private static boolean running(JobID job) {
        JsonNode j = unchecked(() -> flink.rest("/jobs/" + job.toHexString()));
        boolean running = "RUNNING".equals(j.get("state").asText());
        for (JsonNode v : j.get("vertices")) {
            running &= "RUNNING".equals(v.get("status").asText());
        }
        return running;
    }

    private static List<JsonNode> slots(JobID job) {
        return unchecked(() -> flink.allocatedSlots(job));
    }

    private static <T> T unchecked(Callable<T> call) {
        return FlinkCluster.unchecked(call);
    }

    private static double onlyValue(String name) throws Exception {
        List<PromSample> found = flink.scrape().stream().filter(s -> s.name().equals(name)).toList();
        assertEquals(1, found.size(), name);
        return found.get(0).value();
    }

    private static void awaitAllKeysCounted() throws InterruptedException {
        FlinkCluster.await("all keys counted", TIMEOUT,
                () -> CounterJob.SEEN.size() == CounterJob.KEYS);
    }

    private static Map<Long, Long> lastCounts() {
        Map<Long, Long> out = new HashMap<>();
        CounterJob.SEEN.forEach((k, v) -> out.put(k, v[1]));
        assertFalse(out.isEmpty());
        assertTrue(out.values().stream().allMatch(c -> c >= 1));
        return out;
    }
}
