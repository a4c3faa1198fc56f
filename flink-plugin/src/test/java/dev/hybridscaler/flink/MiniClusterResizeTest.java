package dev.hybridscaler.flink;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.hybridscaler.flink.resize.ResizableRocksDBStateBackendFactory;

import org.apache.flink.api.common.JobID;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.core.execution.SavepointFormatType;
import org.apache.flink.runtime.jobgraph.JobGraph;
import org.apache.flink.runtime.jobgraph.SavepointRestoreSettings;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink;
import org.apache.flink.util.Collector;

import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.JsonNode;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.ObjectMapper;

import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.net.ServerSocket;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

/**
 * Resizing in place on a real MiniCluster: the state backend is chosen by configuration alone
 * ({@code state.backend.type} = the plugin's factory), the controller's requests go through the
 * TaskManager's authenticated endpoint, and every resize is verified through RocksDB's own
 * {@code block-cache-capacity} metric in the Prometheus scrape, while the job runs.
 */
class MiniClusterResizeTest {
    private static final Duration TIMEOUT = Duration.ofSeconds(90);
    private static final long MIB = 1024 * 1024;
    private static final int MANAGED_MB = 96;
    private static final String TOKEN = "test-token-0123456789abcdef";
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final HttpClient HTTP = HttpClient.newHttpClient();
    private static FlinkCluster flink;
    private static URI agent;

    @BeforeAll
    static void start(@TempDir Path dir) throws Exception {
        Path token = dir.resolve("token");
        Files.writeString(token, TOKEN + "\n");
        int port;
        try (ServerSocket s = new ServerSocket(0)) {
            port = s.getLocalPort();
        }
        Map<String, String> conf = new HashMap<>();
        conf.put("state.backend.type", ResizableRocksDBStateBackendFactory.class.getName());
        conf.put("hybridscaler.resize.token-file", token.toString());
        conf.put("hybridscaler.resize.port", Integer.toString(port));
        conf.put("restart-strategy.type", "fixed-delay");
        conf.put("restart-strategy.fixed-delay.attempts", "1000");
        conf.put("restart-strategy.fixed-delay.delay", "200 ms");
        flink = new FlinkCluster(512, 4, conf);
        agent = URI.create("http://127.0.0.1:" + port + "/v1/");
    }

    @AfterAll
    static void stop() throws Exception {
        flink.close();
    }

    @Test
    void movesAndGrowsALiveJobsCacheWithoutARestartVerifiedByRocksDbsMetric() throws Exception {
        JobID job = submit(null);
        String task = awaitSlots(job);
        long initial = flink.blockCacheBytes(MANAGED_MB);
        assertCapacities(job, Map.of(0, initial, 1, initial));

        // Without the secret nothing is read or changed.
        assertEquals(401, call("GET", "slots", null, null).statusCode());
        assertEquals(401, call("GET", "slots", null, "not-the-token-at-all").statusCode());
        String grow = resizeBody(job, task, 0, initial + 64 * MIB);
        assertEquals(401, call("POST", "resize", grow, "x" + TOKEN).statusCode());

        // Malformed requests are refused as such, naming the field, and change nothing.
        String job16 = "\"jobId\": \"" + job.toHexString() + "\", \"task\": " + JSON.writeValueAsString(task);
        assertBadRequest("{\"targets\": [{" + job16 + ", \"cacheBytes\": 1, \"cachebytes\": 2}]}",
                "unknown target field 'cachebytes'");
        assertBadRequest("{\"targets\": [{" + job16 + ", \"cacheBytes\": \"96Mi\"}]}",
                "cacheBytes must be an integer");
        assertBadRequest("{\"targets\": [{" + job16 + ", \"subtask\": -1, \"cacheBytes\": 1}]}",
                "subtask must be an integer >= 0");
        assertBadRequest("{\"targets\": [{\"jobId\": \"../x\", \"task\": \"t\", \"cacheBytes\": 1}]}",
                "jobId must be a 32-digit hex Flink job id");
        assertBadRequest("{\"targets\": ", "the body is not JSON");
        assertCapacities(job, Map.of(0, initial, 1, initial));

        // Memory freed by one slot goes to the other in one request: within Flink's reservation.
        long processed = ResizeJob.PROCESSED.get();
        HttpResponse<String> moved = call("POST", "resize", "{\"targets\": ["
                + target(job, task, 1, initial + 16 * MIB) + ", "
                + target(job, task, 0, initial - 16 * MIB) + "]}", TOKEN);
        assertEquals(200, moved.statusCode(), moved.body());
        for (JsonNode s : JSON.readTree(moved.body()).get("slots")) {
            assertEquals(s.get("cacheBytes").asLong(), s.get("observedCacheBytes").asLong(), s.toString());
        }
        assertCapacities(job, Map.of(0, initial - 16 * MIB, 1, initial + 16 * MIB));

        // Growth beyond the budget is refused with the reason, and changes nothing.
        HttpResponse<String> refused = call("POST", "resize", grow, TOKEN);
        assertEquals(409, refused.statusCode(), refused.body());
        assertTrue(refused.body().contains("budget"), refused.body());
        assertCapacities(job, Map.of(0, initial - 16 * MIB, 1, initial + 16 * MIB));

        // The controller grants memory (unreserved managed memory, or a pod grown in place).
        assertEquals(200, call("PUT", "budget", "{\"budgetBytes\": " + (2 * initial + 128 * MIB) + "}",
                TOKEN).statusCode());
        HttpResponse<String> grown = call("POST", "resize",
                resizeBody(job, task, null, initial + 64 * MIB), TOKEN);
        assertEquals(200, grown.statusCode(), grown.body());
        assertCapacities(job, Map.of(0, initial + 64 * MIB, 1, initial + 64 * MIB));

        // The same attempt of the same job kept running and processing: no restart.
        FlinkCluster.await("records processed after the resizes", TIMEOUT,
                () -> ResizeJob.PROCESSED.get() > processed + 1000);
        assertEquals(0.0, jobMetric(job, "flink_jobmanager_job_numRestarts"));
        for (JsonNode s : slotsOf(job)) {
            assertEquals(0, s.get("attempt").asInt(), s.toString());
        }
        assertEquals(200, call("PUT", "budget", "{\"budgetBytes\": null}", TOKEN).statusCode());
        flink.mini().cancelJob(job).get(30, TimeUnit.SECONDS);
        FlinkCluster.await("the cancelled job's caches closed", TIMEOUT, () -> slotsOf(job).isEmpty());
    }

    /**
     * 200 resizes while the job fails over (restoring from a checkpoint) and is stopped with a
     * savepoint and restored from it: the TaskManager survives, every closed cache leaves the
     * registry, and the process's resident memory stays bounded.
     */
    @Test
    void twoHundredResizesAcrossAFailoverAndASavepointRestoreNeitherCrashNorLeak(@TempDir Path dir)
            throws Exception {
        ResizeJob.COUNTS.clear();
        JobID first = submit(null);
        String task = awaitSlots(first);
        long initial = flink.blockCacheBytes(MANAGED_MB);
        AtomicReference<JobID> job = new AtomicReference<>(first);
        AtomicLong done = new AtomicLong();
        AtomicLong refused = new AtomicLong();
        AtomicBoolean stop = new AtomicBoolean();
        List<String> errors = new ArrayList<>();
        Thread resizer = new Thread(() -> {
            for (int i = 0; done.get() < 200 && !stop.get(); i++) {
                long size = i % 2 == 0 ? initial / 2 : initial;
                try {
                    HttpResponse<String> r = call("POST", "resize",
                            resizeBody(job.get(), task, null, size), TOKEN);
                    if (r.statusCode() == 200) {
                        done.incrementAndGet();
                    } else if (r.statusCode() == 409 && r.body().contains("no live slot")) {
                        refused.incrementAndGet(); // between a failover's close and re-creation
                    } else {
                        errors.add(r.statusCode() + " " + r.body());
                    }
                } catch (Exception e) {
                    errors.add(e.toString());
                }
            }
        }, "resizer");
        System.gc();
        long rssBefore = rssBytes();
        resizer.start();

        FlinkCluster.await("50 resizes", TIMEOUT, () -> done.get() >= 50);
        ResizeJob.FAIL.set(true); // a task failure: Flink restarts it from the last checkpoint
        FlinkCluster.await("the failover", TIMEOUT,
                () -> slotsOf(first).stream().anyMatch(s -> s.get("attempt").asInt() > 0));
        FlinkCluster.await("100 resizes", TIMEOUT, () -> done.get() >= 100);
        String savepoint = flink.mini()
                .stopWithSavepoint(first, dir.toUri().toString(), false, SavepointFormatType.CANONICAL)
                .get(60, TimeUnit.SECONDS);
        Map<Long, Long> atSavepoint = new HashMap<>(ResizeJob.COUNTS); // all counted before the barrier
        ResizeJob.COUNTS.clear();
        JobID second = submit(savepoint);
        job.set(second);
        awaitSlots(second);
        FlinkCluster.await("200 resizes", Duration.ofSeconds(180), () -> done.get() >= 200);
        stop.set(true);
        resizer.join(30_000);

        assertEquals(List.of(), errors);
        FlinkCluster.await("keys counted after the restore", TIMEOUT,
                () -> ResizeJob.COUNTS.size() >= 100);
        for (Map.Entry<Long, Long> e : new HashMap<>(ResizeJob.COUNTS).entrySet()) {
            assertTrue(e.getValue() > atSavepoint.getOrDefault(e.getKey(), 0L),
                    "key " + e.getKey() + " continues from its count in the savepoint");
        }
        // Every cache of the failed attempt and of the stopped job was closed through the lock.
        List<JsonNode> live = slotsOf(null);
        assertEquals(2, live.size(), live.toString());
        for (JsonNode s : live) {
            assertEquals(second.toHexString(), s.get("jobId").asText());
        }
        System.gc();
        long rssAfter = rssBytes();
        System.out.printf("resize cycles: %d done, %d refused mid-failover; RSS %d MiB -> %d MiB%n",
                done.get(), refused.get(), rssBefore / MIB, rssAfter / MIB);
        // Each cache is at most ~80 MiB: a leak of the failed or stopped attempts' four would show.
        assertTrue(rssAfter - rssBefore < 256 * MIB, "RSS " + rssBefore + " -> " + rssAfter);
        flink.mini().cancelJob(second).get(30, TimeUnit.SECONDS);
        FlinkCluster.await("the cancelled job's caches closed", TIMEOUT, () -> slotsOf(second).isEmpty());
    }

    private static void assertBadRequest(String body, String error) throws Exception {
        HttpResponse<String> r = call("POST", "resize", body, TOKEN);
        assertEquals(400, r.statusCode(), r.body());
        assertEquals(error, JSON.readTree(r.body()).get("error").asText());
    }

    // ---- the job ----

    /** gen (p=1) ⇒ keyed RocksDB counter (p=2, its own slot-sharing group) → sink. */
    static final class ResizeJob {
        static final int KEYS = 5000;
        static final AtomicLong PROCESSED = new AtomicLong();
        static final AtomicBoolean FAIL = new AtomicBoolean();
        static final Map<Long, Long> COUNTS = new java.util.concurrent.ConcurrentHashMap<>();

        static void build(StreamExecutionEnvironment env) {
            env.enableCheckpointing(500);
            env.fromSequence(0, Long.MAX_VALUE).uid("gen").name("gen").setParallelism(1)
                    .map(new CounterJob.Throttle(KEYS, 20)).uid("key-map").name("key-map").setParallelism(1)
                    .keyBy(k -> k)
                    .process(new Count()).uid("counter").name("counter").setParallelism(2)
                    .sinkTo(new DiscardingSink<>()).uid("sink").name("sink").setParallelism(2);
        }

        static final class Count extends KeyedProcessFunction<Long, Long, Long> {
            private transient ValueState<Long> count;

            @Override
            public void open(OpenContext context) {
                count = getRuntimeContext().getState(new ValueStateDescriptor<>("count", Types.LONG));
            }

            @Override
            public void processElement(Long key, Context ctx, Collector<Long> out) throws Exception {
                if (FAIL.compareAndSet(true, false)) {
                    throw new IllegalStateException("injected failure: a failover during resizes");
                }
                Long before = count.value();
                long now = before == null ? 1 : before + 1;
                count.update(now);
                COUNTS.put(key, now);
                PROCESSED.incrementAndGet();
                out.collect(now);
            }
        }
    }

    private static JobID submit(String savepoint) throws Exception {
        Configuration conf = new Configuration();
        conf.set(HybridResources.OPERATOR_RESOURCES, ResourcesJson.json(
                ResourcesJson.entry("gen", 0.25, 32, 0),
                ResourcesJson.entry("counter", 0.5, 64, MANAGED_MB)));
        StreamExecutionEnvironment env = new StreamExecutionEnvironment(conf);
        ResizeJob.build(env);
        HybridResources.apply(env);
        JobGraph graph = env.getStreamGraph().getJobGraph();
        if (savepoint != null) {
            graph.setSavepointRestoreSettings(SavepointRestoreSettings.forPath(savepoint, false));
        }
        return flink.mini().submitJob(graph).get(30, TimeUnit.SECONDS).getJobID();
    }

    // ---- the controller's side of the endpoint ----

    /** Waits for both counter slots; returns their task (JobVertex) name as REST shows it. */
    private static String awaitSlots(JobID job) throws Exception {
        FlinkCluster.await("two registered counter slots of " + job, TIMEOUT,
                () -> slotsOf(job).size() == 2);
        String vertex = null;
        for (JsonNode v : flink.rest("/jobs/" + job.toHexString()).get("vertices")) {
            if (v.get("name").asText().contains("counter")) {
                vertex = v.get("name").asText();
            }
        }
        for (JsonNode s : slotsOf(job)) {
            assertEquals(vertex, s.get("task").asText(), "slots are keyed by the REST vertex name");
        }
        return vertex;
    }

    /** The agent's live slots of one job (all jobs for null). */
    private static List<JsonNode> slotsOf(JobID job) {
        try {
            HttpResponse<String> r = call("GET", "slots", null, TOKEN);
            assertEquals(200, r.statusCode(), r.body());
            JsonNode body = JSON.readTree(r.body());
            assertTrue(body.get("slots").isEmpty() || body.get("enabled").asBoolean(), body.toString());
            List<JsonNode> out = new ArrayList<>();
            for (JsonNode s : body.get("slots")) {
                if (job == null || s.get("jobId").asText().equals(job.toHexString())) {
                    out.add(s);
                }
            }
            return out;
        } catch (java.net.ConnectException notYet) {
            return List.of(); // the endpoint starts with the first RocksDB backend in this JVM
        } catch (IOException e) {
            throw new IllegalStateException(e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException(e);
        }
    }

    /** RocksDB's block-cache-capacity metric per subtask must reach exactly these values. */
    private static void assertCapacities(JobID job, Map<Integer, Long> expected) throws Exception {
        String name = "flink_taskmanager_job_task_operator_count_rocksdb_block_cache_capacity";
        Map<Integer, Long> seen = new HashMap<>();
        boolean ok = FlinkCluster.poll(TIMEOUT, () -> {
            seen.clear();
            try {
                for (PromSample s : flink.scrape()) {
                    if (s.name().equals(name) && s.label("job_id").equals(job.toHexString())) {
                        seen.put(Integer.parseInt(s.label("subtask_index")), (long) s.value());
                    }
                }
            } catch (IOException e) {
                return false;
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return false;
            }
            return seen.equals(expected);
        });
        assertTrue(ok, "block_cache_capacity " + seen + ", expected " + expected);
    }

    private static double jobMetric(JobID job, String name) throws Exception {
        for (PromSample s : flink.scrape()) {
            if (s.name().equals(name) && s.label("job_id").equals(job.toHexString())) {
                return s.value();
            }
        }
        throw new AssertionError("no " + name + " for " + job);
    }

    private static String resizeBody(JobID job, String task, Integer subtask, long bytes)
            throws IOException {
        return "{\"targets\": [" + target(job, task, subtask, bytes) + "]}";
    }

    /** One resize target of the endpoint's request body (ForStResizeTest's too). */
    static String target(JobID job, String task, Integer subtask, long bytes) throws IOException {
        return "{\"jobId\": \"" + job.toHexString() + "\", \"task\": " + JSON.writeValueAsString(task)
                + (subtask == null ? "" : ", \"subtask\": " + subtask) + ", \"cacheBytes\": " + bytes + "}";
    }

    private static HttpResponse<String> call(String method, String path, String body, String token)
            throws IOException, InterruptedException {
        return call(agent, method, path, body, token);
    }

    /** A request to a TaskManager's resize endpoint at {@code agent} (ForStResizeTest's too). */
    static HttpResponse<String> call(URI agent, String method, String path, String body, String token)
            throws IOException, InterruptedException {
        HttpRequest.Builder b = HttpRequest.newBuilder(agent.resolve(path)).timeout(Duration.ofSeconds(10))
                .method(method, body == null ? HttpRequest.BodyPublishers.noBody()
                        : HttpRequest.BodyPublishers.ofString(body));
        if (token != null) {
            b.header("Authorization", "Bearer " + token);
        }
        return HTTP.send(b.build(), HttpResponse.BodyHandlers.ofString());
    }

    private static long rssBytes() throws IOException {
        for (String line : Files.readAllLines(Path.of("/proc/self/status"))) {
            if (line.startsWith("VmRSS:")) {
                return Long.parseLong(line.replaceAll("[^0-9]", "")) * 1024;
            }
        }
        throw new IllegalStateException("no VmRSS");
    }
}
