package dev.hybridscaler.job;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.apache.flink.api.common.JobID;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.ReadableConfig;
import org.apache.flink.configuration.RestOptions;
import org.apache.flink.core.execution.SavepointFormatType;
import org.apache.flink.runtime.jobgraph.JobGraph;
import org.apache.flink.runtime.jobgraph.SavepointRestoreSettings;
import org.apache.flink.runtime.minicluster.MiniCluster;
import org.apache.flink.runtime.minicluster.MiniClusterConfiguration;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;

import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.JsonNode;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.ObjectMapper;

import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Path;
import java.time.Duration;
import java.util.concurrent.TimeUnit;

/**
 * StateJob on a real Flink MiniCluster with RocksDB, read through Flink's REST API: with zipf
 * and with uniform keys, the counter check passes across a stop-with-savepoint and restore, and fails when the
 * restore loses the counter's state (the source resumes, the counters start empty).
 */
class StateJobTest {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final Duration TIMEOUT = Duration.ofSeconds(120);
    private static final HttpClient HTTP = HttpClient.newHttpClient();
    private static MiniCluster flink;
    private static URI rest;

    @BeforeAll
    static void start() throws Exception {
        start("rocksdb");
    }

    /** The MiniCluster, with {@code state.backend.type} {@code stateBackend}. */
    static void start(String stateBackend) throws Exception {
        Configuration conf = new Configuration();
        conf.setString("state.backend.type", stateBackend);
        conf.setString("metrics.fetcher.update-interval", "200");
        conf.set(RestOptions.BIND_PORT, "0");
        flink = new MiniCluster(new MiniClusterConfiguration.Builder()
                .setConfiguration(conf).setNumTaskManagers(1).setNumSlotsPerTaskManager(2).build());
        flink.start();
        rest = flink.getRestAddress().get();
    }

    @AfterAll
    static void stop() throws Exception {
        flink.close();
    }

    @ParameterizedTest
    @ValueSource(strings = {"zipf", "uniform", "zipf-buffered"})
    void countersSurviveASavepointAndALostRestoreIsCaught(String variant, @TempDir Path dir)
            throws Exception {
        Configuration conf = StateJob.configuration(4000, 1000, 64);
        String keys = variant.split("-")[0];
        conf.set(StateJob.KEY_DISTRIBUTION, keys);
        if (variant.endsWith("-buffered")) {
            // flink-plugin's PreAggregation before the keyBy: partials flushed at barriers.
            conf.set(StateJob.PRE_AGGREGATE_RECORDS, 5000);
            conf.set(StateJob.PRE_AGGREGATE_DELAY_MS, 50);
        }
        conf.set(StateJob.KEY_SEED, 42L);
        survivesASavepointAndCatchesALostRestore(StateJob::build, conf, SavepointFormatType.CANONICAL,
                dir, variant);
    }

    /** How a test builds the job: StateJob, or AsyncStateJob on Flink 2.x. */
    interface Job {
        void build(StreamExecutionEnvironment env, ReadableConfig conf, String counterUid);
    }

    /**
     * The counter check passes across a stop-with-savepoint and restore of {@code job}, and fails
     * when the restore loses the counter's state; {@code label} names the case in the output.
     */
    static void survivesASavepointAndCatchesALostRestore(
            Job job, Configuration conf, SavepointFormatType format, Path dir, String label)
            throws Exception {
        JobID first = submit(job, conf, StateJob.COUNTER, null);
        await(first, "countsVerified", 8000);
        String savepoint = flink.stopWithSavepoint(first, dir.toUri().toString(), false, format)
                .get(60, TimeUnit.SECONDS);

        // Restored: every key seen before continues its counter (8,000 records are 8 rounds of
        // uniform keys; with zipf keys the hottest is ~13 % of the records), and the source
        // resumes where it stopped.
        JobID restored = submit(job, conf, StateJob.COUNTER,
                SavepointRestoreSettings.forPath(savepoint));
        long verified = await(restored, "countsVerified", 8000);
        assertEquals(0, metric(restored, "countMismatches"), "keyed state lost across the restore");
        assertTrue(metric(restored, "lastIndex") > 8000, "the source resumed");
        System.out.printf("%s restore: %d counts verified, 0 mismatches%n", label, verified);
        flink.cancelJob(restored).get(60, TimeUnit.SECONDS);

        // The same savepoint into a counter that does not own the state: the source resumes,
        // every counter starts at 0, and the check must say so.
        JobID lost = submit(job, conf, "counter-without-its-state",
                SavepointRestoreSettings.forPath(savepoint, true));
        long mismatches = await(lost, "countMismatches", 1000);
        System.out.printf("%s lost restore: %d mismatches, %d verified%n", label, mismatches, metric(lost, "countsVerified"));
        flink.cancelJob(lost).get(60, TimeUnit.SECONDS);
    }

    private static JobID submit(Job job, Configuration conf, String counterUid,
                                SavepointRestoreSettings restore) throws Exception {
        StreamExecutionEnvironment env = new StreamExecutionEnvironment(conf);
        env.setParallelism(2);
        job.build(env, conf, counterUid);
        JobGraph graph = env.getStreamGraph().getJobGraph();
        if (restore != null) {
            graph.setSavepointRestoreSettings(restore);
        }
        return flink.submitJob(graph).get(30, TimeUnit.SECONDS).getJobID();
    }

    /** Waits until the counter's metric (summed over its tasks) reaches {@code atLeast}. */
    private static long await(JobID job, String name, long atLeast) throws Exception {
        long deadline = System.nanoTime() + TIMEOUT.toNanos();
        long value = -1;
        while (System.nanoTime() < deadline) {
            value = metric(job, name);
            if (value >= atLeast) {
                return value;
            }
            Thread.sleep(200);
        }
        throw new AssertionError(name + " of " + job + " stayed at " + value + " < " + atLeast);
    }

    /** The counter operator's metric, summed over its subtasks; -1 while not reported yet. */
    private static long metric(JobID job, String name) throws IOException, InterruptedException {
        String vertex = null;
        JsonNode vertices = get("jobs/" + job.toHexString()).get("vertices");
        for (JsonNode v : vertices == null ? JSON.createArrayNode() : vertices) {
            if (v.get("name").asText().contains(StateJob.COUNTER)) {
                vertex = v.get("id").asText();
            }
        }
        if (vertex == null) {
            return -1;  // the job is not scheduled yet
        }
        String base = "jobs/" + job.toHexString() + "/vertices/" + vertex + "/subtasks/metrics";
        for (JsonNode m : get(base)) {
            String id = m.get("id").asText();
            if (id.endsWith("." + name)) {
                JsonNode values = get(base + "?get=" + id + "&agg=sum");
                return values.isEmpty() ? -1 : (long) values.get(0).get("sum").asDouble();
            }
        }
        return -1;
    }

    private static JsonNode get(String path) throws IOException, InterruptedException {
        HttpResponse<String> response = HTTP.send(
                HttpRequest.newBuilder(rest.resolve(path)).timeout(Duration.ofSeconds(10)).build(),
                HttpResponse.BodyHandlers.ofString());
        return JSON.readTree(response.body());
    }
}
