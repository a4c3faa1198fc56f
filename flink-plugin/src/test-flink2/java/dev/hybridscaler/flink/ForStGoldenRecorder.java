package dev.hybridscaler.flink;

import org.apache.flink.api.common.JobID;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.runtime.jobgraph.JobGraph;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;

import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.JsonNode;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.node.ObjectNode;

import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;

/**
 * Records real Flink 2.2 responses of a job on ForSt into tests/golden/flink-2.2/ (its README.md
 * has the command). Not a test: the default build excludes it; the Maven profiles
 * {@code flink-2,record-golden-forst} run only this class.
 *
 * <p>A MiniCluster with ForSt (a local {@code file://} directory as the "remote" primary store, a
 * small local file cache in front of it) runs {@link ForStJob} with per-operator managed memory
 * set by the plugin. Once every key has state and the meters have filled, the reporter's
 * {@code /metrics} and the REST metric endpoints of both counters are saved unmodified;
 * {@code recording.json} has the settings the tests need to interpret them.
 */
class ForStGoldenRecorder {
    private static final String ALL_AGGS = "&agg=min,max,avg,sum,skew";
    private static final Duration TIMEOUT = Duration.ofSeconds(300);
    static final int TM_MANAGED_MB = 256;
    static final int ASYNC_MANAGED_MB = 64;
    static final int SYNC_MANAGED_MB = 48;
    static final String FILE_CACHE_LIMIT = "16mb";

    private RestCapture capture;

    /** The Flink settings a ForSt job needs for the metrics docs/metrics.md maps. */
    static Map<String, String> forstConfig(Path work) {
        Map<String, String> c = forstBackend(work, FILE_CACHE_LIMIT, List.of("block-cache-hit",
                "block-cache-miss", "block-cache-capacity", "block-cache-usage", "bytes-read",
                "estimate-live-data-size"));
        c.put("execution.checkpointing.interval", "10s");
        c.put("execution.checkpointing.dir", work.resolve("checkpoints").toUri().toString());
        return c;
    }

    /**
     * ForSt with a local directory as the remote primary store, a local file cache of the given
     * limit in front of it, managed memory, these ForSt metrics and state latency tracking (also
     * ForStFig4's setup).
     */
    static Map<String, String> forstBackend(Path work, String fileCacheLimit, List<String> metrics) {
        Map<String, String> c = new LinkedHashMap<>();
        c.put("state.backend.type", "forst");
        c.put("state.backend.forst.primary-dir", work.resolve("remote").toUri().toString());
        c.put("state.backend.forst.local-dir", work.resolve("local").toString());
        c.put("state.backend.forst.cache.dir", work.resolve("cache").toString());
        c.put("state.backend.forst.cache.size-based-limit", fileCacheLimit);
        c.put("state.backend.forst.memory.managed", "true");
        for (String m : metrics) {
            c.put("state.backend.forst.metrics." + m, "true");
        }
        c.put("state.latency-track.keyed-state-enabled", "true");
        return c;
    }

    static String resources() {
        return ResourcesJson.json(ResourcesJson.entry(ForStJob.SOURCE, 0.25, 32, 0),
                ResourcesJson.entry(ForStJob.ASYNC, 0.5, 64, ASYNC_MANAGED_MB),
                ResourcesJson.entry(ForStJob.SYNC, 0.5, 64, SYNC_MANAGED_MB));
    }

    @Test
    void record() throws Exception {
        Path out = RestCapture.goldenDir("<repo>/tests/golden/flink-2.2");
        Path work = Files.createTempDirectory("forst-golden");
        Map<String, String> config = forstConfig(work);
        try (FlinkCluster flink = new FlinkCluster(TM_MANAGED_MB, 6, config)) {
            capture = new RestCapture(out, flink.restAddress());
            // The job's own configuration decides checkpointing, as in application mode.
            Configuration conf = Configuration.fromMap(config);
            conf.set(HybridResources.OPERATOR_RESOURCES, resources());
            StreamExecutionEnvironment env = new StreamExecutionEnvironment(conf);
            ForStJob.build(env, 20);
            HybridResources.apply(env);
            JobGraph graph = env.getStreamGraph().getJobGraph();
            JobID job = flink.mini().submitJob(graph).get(30, TimeUnit.SECONDS).getJobID();
            String jid = job.toHexString();
            FlinkCluster.await("the job to run", TIMEOUT, () -> "RUNNING".equals(capture.state(jid)));
            Map<String, String> vertex = new TreeMap<>();
            for (JsonNode v : flink.rest("/jobs/" + jid).get("vertices")) {
                vertex.put(v.get("name").asText(), v.get("id").asText());
            }
            String async = vertexStartingWith(vertex, ForStJob.ASYNC);
            String sync = vertexStartingWith(vertex, ForStJob.SYNC);
            // Every key has had its blob written twice, so reads now hit existing state.
            FlinkCluster.await("every key written twice", TIMEOUT,
                    () -> capture.counted(jid, async) > 2 * ForStJob.KEYS
                            && capture.counted(jid, sync) > 2 * ForStJob.KEYS);
            Thread.sleep(25_000); // a checkpoint or two, and metric-fetcher rounds (every 10 s)

            save("job-running.json", "/v1/jobs/" + jid);
            save("job-config.json", "/v1/jobs/" + jid + "/config");
            save("job-jobmanager-config.json", "/v1/jobs/" + jid + "/jobmanager/config");
            save("taskmanagers-metrics-list.json", "/v1/taskmanagers/metrics");
            save("taskmanagers-metrics.json", "/v1/taskmanagers/metrics?get="
                    + "Status.Flink.Memory.Managed.Used,Status.Flink.Memory.Managed.Total" + ALL_AGGS);
            String base = "/v1/jobs/" + jid + "/vertices/";
            for (Map.Entry<String, String> e : Map.of("async", async, "sync", sync).entrySet()) {
                JsonNode list = save("subtasks-metrics-list-" + e.getKey() + ".json",
                        base + e.getValue() + "/subtasks/metrics");
                List<String> ids = new ArrayList<>(List.of("busyTimeMsPerSecond",
                        "backPressuredTimeMsPerSecond", "idleTimeMsPerSecond",
                        "numRecordsInPerSecond"));
                for (JsonNode m : list) {
                    String id = m.get("id").asText();
                    if (id.contains("forst") || id.contains("rocksdb") || id.contains("Latency")
                            || id.contains("InFlight") || id.contains("Buffer")
                            || id.contains("BlockingKeys")) {
                        ids.add(id);
                    }
                }
                save("subtasks-metrics-" + e.getKey() + ".json", base + e.getValue()
                        + "/subtasks/metrics?get=" + String.join(",", ids) + ALL_AGGS);
            }
            save("checkpoints.json", "/v1/jobs/" + jid + "/checkpoints");
            Files.writeString(out.resolve("prom-scrape.txt"),
                    ownJob(jid, capture.body(flink.metricsAddress())));
            capture.writeStatuses();

            ObjectNode recording = RestCapture.JSON.createObjectNode();
            recording.put("flinkVersion", org.apache.flink.runtime.util.EnvironmentInformation
                    .getVersion());
            recording.put("jobId", jid);
            recording.put("taskManagerManagedMemoryMiB", TM_MANAGED_MB);
            recording.put("fileCacheSizeLimit", FILE_CACHE_LIMIT);
            recording.put("keys", ForStJob.KEYS);
            recording.put("blobBytes", ForStJob.BLOB);
            ObjectNode vertices = recording.putObject("vertices");
            vertex.forEach(vertices::put);
            ObjectNode managed = recording.putObject("managedMemoryMiB");
            managed.put(ForStJob.ASYNC, ASYNC_MANAGED_MB);
            managed.put(ForStJob.SYNC, SYNC_MANAGED_MB);
            ObjectNode settings = recording.putObject("flinkConfiguration");
            config.forEach((k, v) -> settings.put(k, v.replace(work.toString(), "<work>")));
            Files.writeString(out.resolve("recording.json"),
                    RestCapture.JSON.writerWithDefaultPrettyPrinter().writeValueAsString(recording) + "\n");
            flink.mini().cancelJob(job).get(30, TimeUnit.SECONDS);
        }
    }

    private static String vertexStartingWith(Map<String, String> vertex, String prefix) {
        return vertex.entrySet().stream().filter(e -> e.getKey().startsWith(prefix))
                .findFirst().orElseThrow(() -> new AssertionError("no vertex " + prefix + " in " + vertex))
                .getValue();
    }

    private JsonNode save(String file, String path) throws IOException, InterruptedException {
        return capture.save(file, "GET", path, null);
    }

    /**
     * The scrape without other clusters' noise: HELP/TYPE lines, and samples that are either
     * this job's or have no job at all (TaskManager and JobManager scope).
     */
    private static String ownJob(String jid, String scrape) {
        StringBuilder kept = new StringBuilder();
        for (String line : scrape.split("\n")) {
            if (line.startsWith("#") || !line.contains("job_id=\"") || line.contains("job_id=\"" + jid + "\"")) {
                kept.append(line).append('\n');
            }
        }
        return kept.toString();
    }
}
