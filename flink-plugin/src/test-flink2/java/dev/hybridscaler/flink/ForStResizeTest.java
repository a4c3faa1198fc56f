package dev.hybridscaler.flink;

import static dev.hybridscaler.flink.MiniClusterResizeTest.target;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.hybridscaler.flink.resize.ResizableForStStateBackendFactory;

import org.apache.flink.api.common.JobID;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.runtime.jobgraph.JobGraph;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;

import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.JsonNode;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.ObjectMapper;

import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestMethodOrder;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.net.ServerSocket;
import java.net.URI;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

/**
 * Resizing ForSt's block cache in place on a real Flink 2.2 MiniCluster: the state backend is
 * chosen by configuration alone ({@code state.backend.type} = the plugin's ForSt factory), the
 * requests go through the TaskManager's authenticated endpoint, and every resize is verified
 * through ForSt's own {@code block-cache-capacity} metric while the same job keeps running. Then,
 * on a ForSt whose hook is not what 2.2.0 has, every resize is refused with the reason and the
 * job runs on ForSt's own caches.
 *
 * <p>The agent is one per JVM (as on a TaskManager): the refusal disables it for the rest of this
 * JVM's life, so it runs last.
 */
@TestMethodOrder(MethodOrderer.OrderAnnotation.class)
class ForStResizeTest {
    private static final Duration TIMEOUT = Duration.ofSeconds(120);
    private static final long MIB = 1024 * 1024;
    private static final String TOKEN = "forst-test-token-0123456789abcdef";
    private static final String OP = "flink_taskmanager_job_task_operator_";
    private static final String ASYNC_CAPACITY = OP + "blob_async_rocksdb_block_cache_capacity";
    private static final String SYNC_CAPACITY = OP + "blob_sync_rocksdb_block_cache_capacity";
    private static final ObjectMapper JSON = new ObjectMapper();
    private static Path token;
    private static int port;
    private static URI agent;

    @BeforeAll
    static void endpoint(@TempDir Path dir) throws Exception {
        token = dir.resolve("token");
        Files.writeString(token, TOKEN + "\n");
        try (ServerSocket s = new ServerSocket(0)) {
            port = s.getLocalPort();
        }
        agent = URI.create("http://127.0.0.1:" + port + "/v1/");
    }

    private static Map<String, String> config(Path work, String backendFactory) {
        Map<String, String> config = new HashMap<>(ForStGoldenRecorder.forstConfig(work));
        config.put("state.backend.type", backendFactory);
        config.put("hybridscaler.resize.token-file", token.toString());
        config.put("hybridscaler.resize.port", Integer.toString(port));
        return config;
    }

    /** ForSt's cache from a slot's managed memory: managed · (3 − r)/3, r = 0.5 (ForSt's default). */
    private static long forstCache(int managedMb) {
        return (long) ((3 - 0.5) * managedMb * MIB / 3);
    }

    @Test
    @Order(1)
    void growsARunningForStJobsCachesWithoutARestartVerifiedByForStsMetric(@TempDir Path work)
            throws Exception {
        Map<String, String> config = config(work, ResizableForStStateBackendFactory.class.getName());
        try (FlinkCluster flink = new FlinkCluster(ForStGoldenRecorder.TM_MANAGED_MB, 6, config)) {
            JobID job = submit(flink, config);
            String async = awaitSlots(flink, job, ForStJob.ASYNC);
            String sync = awaitSlots(flink, job, ForStJob.SYNC);
            long asyncInitial = forstCache(ForStGoldenRecorder.ASYNC_MANAGED_MB);
            long syncInitial = forstCache(ForStGoldenRecorder.SYNC_MANAGED_MB);
            assertCapacities(flink, job, ASYNC_CAPACITY, Map.of(0, asyncInitial, 1, asyncInitial));
            assertCapacities(flink, job, SYNC_CAPACITY, Map.of(0, syncInitial, 1, syncInitial));
            JsonNode before = JSON.readTree(call("GET", "slots", null, TOKEN).body());
            assertTrue(before.get("enabled").asBoolean(), before.toString());
            assertEquals(4, slotsOf(job).size(), before.toString());
            double inBefore = recordsIn(flink, job, ForStJob.ASYNC);

            // Memory moves from the synchronous counter to the asynchronous one, in one request,
            // within Flink's reservation (the TaskManager's budget by default).
            HttpResponse<String> moved = call("POST", "resize", "{\"targets\": ["
                    + target(job, async, null, asyncInitial + 16 * MIB) + ", "
                    + target(job, sync, null, syncInitial - 16 * MIB) + "]}", TOKEN);
            assertEquals(200, moved.statusCode(), moved.body());
            for (JsonNode s : JSON.readTree(moved.body()).get("slots")) {
                assertEquals(s.get("cacheBytes").asLong(), s.get("observedCacheBytes").asLong(), s.toString());
                assertEquals(s.get("writeBufferBytes").asLong(), s.get("observedWriteBufferBytes").asLong(),
                        "ForSt's write buffers are resized with Flink's ratio: " + s);
            }
            assertCapacities(flink, job, ASYNC_CAPACITY,
                    Map.of(0, asyncInitial + 16 * MIB, 1, asyncInitial + 16 * MIB));
            assertCapacities(flink, job, SYNC_CAPACITY,
                    Map.of(0, syncInitial - 16 * MIB, 1, syncInitial - 16 * MIB));

            // Growth beyond the budget is refused whole with the reason.
            HttpResponse<String> over = call("POST", "resize",
                    "{\"targets\": [" + target(job, async, 0, asyncInitial + 64 * MIB) + "]}", TOKEN);
            assertEquals(409, over.statusCode(), over.body());
            assertTrue(over.body().contains("budget"), over.body());

            // The controller grants memory; the asynchronous counter's caches grow by 64 MiB.
            long budget = 2 * (asyncInitial + syncInitial) + 128 * MIB;
            assertEquals(200, call("PUT", "budget", "{\"budgetBytes\": " + budget + "}", TOKEN).statusCode());
            HttpResponse<String> grown = call("POST", "resize",
                    "{\"targets\": [" + target(job, async, null, asyncInitial + 64 * MIB) + "]}", TOKEN);
            assertEquals(200, grown.statusCode(), grown.body());
            assertCapacities(flink, job, ASYNC_CAPACITY,
                    Map.of(0, asyncInitial + 64 * MIB, 1, asyncInitial + 64 * MIB));
            System.out.printf("ForSt resize: async-counter cache %d B -> %d B per subtask, sync-counter"
                    + " %d B -> %d B, same job%n", asyncInitial, asyncInitial + 64 * MIB, syncInitial,
                    syncInitial - 16 * MIB);

            // The same attempts of the same job kept running and processing: no restart.
            FlinkCluster.await("records processed after the resizes", TIMEOUT,
                    () -> recordsIn(flink, job, ForStJob.ASYNC) > inBefore + 1000);
            assertEquals(0.0, jobMetric(flink, job, "flink_jobmanager_job_numRestarts"));
            assertEquals("RUNNING", flink.rest("/jobs/" + job.toHexString()).get("state").asText());
            for (JsonNode s : slotsOf(job)) {
                assertEquals(0, s.get("attempt").asInt(), s.toString());
            }
            assertEquals(200, call("PUT", "budget", "{\"budgetBytes\": null}", TOKEN).statusCode());
            flink.mini().cancelJob(job).get(30, TimeUnit.SECONDS);
            FlinkCluster.await("the cancelled job's caches closed", TIMEOUT, () -> slotsOf(job).isEmpty());
        }
    }

    @Test
    @Order(2)
    void aForStWithoutTheHookRunsOnItsOwnCachesAndEveryResizeIsRefusedWithTheReason(@TempDir Path work)
            throws Exception {
        Map<String, String> config = config(work, "dev.hybridscaler.flink.resize.UnusableHookForStFactory");
        try (FlinkCluster flink = new FlinkCluster(ForStGoldenRecorder.TM_MANAGED_MB, 6, config)) {
            JobID job = submit(flink, config);
            long asyncInitial = forstCache(ForStGoldenRecorder.ASYNC_MANAGED_MB);
            assertCapacities(flink, job, ASYNC_CAPACITY, Map.of(0, asyncInitial, 1, asyncInitial));

            String reason = "the ForSt memory hook is unusable: org.apache.flink.state.forst.ForStStateBackend"
                    + " has no field 'memoryFactoryOfAnotherFlink' (Flink 2.2.0 keeps its ForStMemoryFactory"
                    + " there): not the ForSt this plugin was built for";
            JsonNode slots = JSON.readTree(call("GET", "slots", null, TOKEN).body());
            assertFalse(slots.get("enabled").asBoolean(), slots.toString());
            assertEquals(reason, slots.get("disabledReason").asText());
            assertEquals(List.of(), slotsOf(job), "no ForSt cache of this job is registered");

            String task = vertex(flink, job, ForStJob.ASYNC);
            HttpResponse<String> refused = call("POST", "resize",
                    "{\"targets\": [" + target(job, task, null, asyncInitial + 16 * MIB) + "]}", TOKEN);
            assertEquals(409, refused.statusCode(), refused.body());
            assertEquals("resizing is disabled on this TaskManager: " + reason,
                    JSON.readTree(refused.body()).get("error").asText());
            // ForSt's own caches, unchanged; the job runs.
            assertCapacities(flink, job, ASYNC_CAPACITY, Map.of(0, asyncInitial, 1, asyncInitial));
            assertEquals("RUNNING", flink.rest("/jobs/" + job.toHexString()).get("state").asText());
            flink.mini().cancelJob(job).get(30, TimeUnit.SECONDS);
        }
    }

    private static JobID submit(FlinkCluster flink, Map<String, String> config) throws Exception {
        Configuration conf = Configuration.fromMap(config);
        conf.set(HybridResources.OPERATOR_RESOURCES, ForStGoldenRecorder.resources());
        StreamExecutionEnvironment env = new StreamExecutionEnvironment(conf);
        ForStJob.build(env, 20);
        HybridResources.apply(env);
        JobGraph graph = env.getStreamGraph().getJobGraph();
        return flink.mini().submitJob(graph).get(30, TimeUnit.SECONDS).getJobID();
    }

    /** Waits for the operator's two registered slots; returns its task name as REST shows it. */
    private static String awaitSlots(FlinkCluster flink, JobID job, String operator) throws Exception {
        String task = vertex(flink, job, operator);
        boolean ok = FlinkCluster.poll(TIMEOUT,
                () -> slotsOf(job).stream().filter(s -> s.get("task").asText().equals(task)).count() == 2);
        assertTrue(ok, "two registered slots of REST vertex '" + task + "' in " + slotsOf(job));
        return task;
    }

    /** The REST name of the vertex the operator heads (its chain: "op -> sink: Writer"). */
    private static String vertex(FlinkCluster flink, JobID job, String operator) throws Exception {
        List<String> names = new ArrayList<>();
        FlinkCluster.poll(TIMEOUT, () -> { // the job graph shows once the job is initialised
            names.clear();
            for (JsonNode v : FlinkCluster.unchecked(() -> flink.rest("/jobs/" + job.toHexString())).get("vertices")) {
                names.add(v.get("name").asText());
            }
            return !names.isEmpty();
        });
        for (String name : names) {
            if (name.startsWith(operator + " ")) {
                return name;
            }
        }
        throw new AssertionError("no vertex of " + operator + " in " + names);
    }

    private static List<JsonNode> slotsOf(JobID job) {
        try {
            HttpResponse<String> r = call("GET", "slots", null, TOKEN);
            assertEquals(200, r.statusCode(), r.body());
            List<JsonNode> out = new ArrayList<>();
            for (JsonNode s : JSON.readTree(r.body()).get("slots")) {
                if (s.get("jobId").asText().equals(job.toHexString())) {
                    out.add(s);
                }
            }
            return out;
        } catch (java.net.ConnectException notYet) {
            return List.of(); // the endpoint starts with the first ForSt slot in this JVM
        } catch (IOException e) {
            throw new IllegalStateException(e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException(e);
        }
    }

    /** ForSt's block-cache-capacity metric per subtask must reach exactly these values. */
    private static void assertCapacities(FlinkCluster flink, JobID job, String name,
                                         Map<Integer, Long> expected) throws Exception {
        Map<Integer, Long> seen = new HashMap<>();
        boolean ok = FlinkCluster.poll(TIMEOUT, () -> {
            seen.clear();
            for (PromSample s : flink.samples(job, name)) {
                seen.put(Integer.parseInt(s.label("subtask_index")), (long) s.value());
            }
            return seen.equals(expected);
        });
        assertTrue(ok, name + " " + seen + ", expected " + expected);
    }

    private static double recordsIn(FlinkCluster flink, JobID job, String operator) {
        return flink.samples(job, "flink_taskmanager_job_task_numRecordsIn").stream()
                .filter(s -> s.label("task_name").contains(operator.replace('-', '_')))
                .mapToDouble(PromSample::value).sum();
    }

    private static double jobMetric(FlinkCluster flink, JobID job, String name) {
        return flink.samples(job, name).stream().mapToDouble(PromSample::value).findFirst()
                .orElseThrow(() -> new AssertionError("no " + name + " for " + job));
    }

    private static HttpResponse<String> call(String method, String path, String body, String token)
            throws IOException, InterruptedException {
        return MiniClusterResizeTest.call(agent, method, path, body, token);
    }
}
