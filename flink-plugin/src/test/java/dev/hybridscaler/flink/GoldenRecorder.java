package dev.hybridscaler.flink;

import org.apache.flink.api.common.JobID;
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
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

/**
 * Records real Flink 1.20 REST responses into tests/golden/flink-1.20/ (the twin's contract
 * tests compare their shapes). Not a test: the default build excludes it; the Maven profile
 * {@code record-golden} runs only this class (tests/golden/flink-1.20/README.md has the command).
 *
 * <p>A MiniCluster under the adaptive scheduler runs {@link CounterJob} (a FLIP-27 sequence
 * source); once it has run a while, each endpoint below is fetched under {@code /v1/} and saved
 * unmodified, its HTTP status in {@code statuses.json}. Then the job is rescaled through
 * {@code PUT /jobs/<jid>/resource-requirements} (FLIP-291).
 */
class GoldenRecorder {
    private static final String TM_METRICS = String.join(",",
            "Status.JVM.Memory.Heap.Max", "Status.JVM.Memory.Heap.Used",
            "Status.JVM.Memory.Metaspace.Used", "Status.Flink.Memory.Managed.Used",
            "Status.JVM.GarbageCollector.All.TimeMsPerSecond");
    private static final String ALL_AGGS = "&agg=min,max,avg,sum,skew";
    private static final Duration TIMEOUT = Duration.ofSeconds(120);
    /** Families of the reporter kept in prom-scrape-counters.txt (the whole scrape is 250 kB). */
    private static final List<String> PROM_FAMILIES = List.of(
            "flink_taskmanager_job_task_numRecordsIn", "flink_taskmanager_job_task_numRecordsOut",
            "flink_taskmanager_job_task_operator_numRecordsIn",
            "flink_taskmanager_job_task_operator_numRecordsOut",
            "flink_taskmanager_job_task_operator_numRecordsInPerSecond",
            "flink_taskmanager_job_task_accumulateBusyTimeMs",
            "flink_taskmanager_job_task_accumulateBackPressuredTimeMs",
            "flink_taskmanager_job_task_accumulateIdleTimeMs",
            "flink_taskmanager_Status_JVM_Memory_Heap_Max",
            "flink_taskmanager_Status_JVM_Memory_Heap_Used",
            "flink_taskmanager_Status_JVM_Memory_Metaspace_Used",
            "flink_taskmanager_Status_Flink_Memory_Managed_Used",
            "flink_taskmanager_Status_JVM_GarbageCollector_All_TimeMsPerSecond",
            "flink_jobmanager_taskSlotsTotal", "flink_jobmanager_taskSlotsAvailable");

    private RestCapture capture;

    @Test
    void record() throws Exception {
        Path out = RestCapture.goldenDir("<repo>/tests/golden/flink-1.20");
        try (FlinkCluster flink = new FlinkCluster(256, 4, Map.of("jobmanager.scheduler", "adaptive"))) {
            capture = new RestCapture(out, flink.restAddress());
            StreamExecutionEnvironment env = new StreamExecutionEnvironment();
            CounterJob.build(env);
            JobGraph graph = env.getStreamGraph().getJobGraph();
            JobID job = flink.mini().submitJob(graph).get(30, TimeUnit.SECONDS).getJobID();
            String jid = job.toHexString();
            // While it initializes, the job has no vertices yet.
            FlinkCluster.await("the job to run", TIMEOUT, () -> "RUNNING".equals(state(jid)));
            String source = null;
            String counter = null;
            for (JsonNode v : flink.rest("/jobs/" + jid).get("vertices")) {
                if (v.get("name").asText().startsWith("Source")) {
                    source = v.get("id").asText();
                } else {
                    counter = v.get("id").asText();
                }
            }
            String counterVertex = counter;
            FlinkCluster.await("records counted", TIMEOUT, () -> capture.counted(jid, counterVertex) > 1000);
            Thread.sleep(12_000); // a few metric-fetcher rounds (every 10 s), so meters are filled

            save("job-running.json", "GET", "/v1/jobs/" + jid, null);
            save("job-jobmanager-config.json", "GET", "/v1/jobs/" + jid + "/jobmanager/config", null);
            save("jobmanager-metrics-list.json", "GET", "/v1/jobmanager/metrics", null);
            save("jobmanager-metrics.json", "GET",
                    "/v1/jobmanager/metrics?get=taskSlotsTotal,taskSlotsAvailable", null);
            save("jobmanager-metrics-unknown.json", "GET",
                    "/v1/jobmanager/metrics?get=taskSlotsTotal,noSuchMetric", null);
            save("taskmanagers-metrics-list.json", "GET", "/v1/taskmanagers/metrics", null);
            save("taskmanagers-metrics.json", "GET",
                    "/v1/taskmanagers/metrics?get=" + TM_METRICS + ALL_AGGS, null);
            save("taskmanagers-metrics-unknown.json", "GET",
                    "/v1/taskmanagers/metrics?get=" + TM_METRICS + ",noSuchMetric" + ALL_AGGS, null);
            String vertexMetrics = "/v1/jobs/" + jid + "/vertices/";
            JsonNode sourceList = save("subtasks-metrics-list-source.json", "GET",
                    vertexMetrics + source + "/subtasks/metrics", null);
            List<String> sourceIds = new ArrayList<>(List.of(
                    "numRecordsIn", "numRecordsOut", "accumulateBusyTimeMs"));
            for (JsonNode m : sourceList) {
                String id = m.get("id").asText();
                if (id.startsWith("Source__") && (id.endsWith(".numRecordsIn")
                        || id.endsWith(".numRecordsOut") || id.endsWith(".numRecordsInPerSecond"))) {
                    sourceIds.add(id);
                }
            }
            save("subtasks-metrics-source.json", "GET", vertexMetrics + source
                    + "/subtasks/metrics?get=" + String.join(",", sourceIds) + ALL_AGGS, null);
            save("subtasks-metrics-default-agg.json", "GET", vertexMetrics + counter
                    + "/subtasks/metrics?get=busyTimeMsPerSecond,numRecordsIn", null);
            save("subtasks-metrics-unknown.json", "GET", vertexMetrics + counter
                    + "/subtasks/metrics?get=busyTimeMsPerSecond,noSuchMetric" + ALL_AGGS, null);
            save("subtasks-metrics-unknown-vertex.json", "GET", vertexMetrics + "0".repeat(32)
                    + "/subtasks/metrics?get=busyTimeMsPerSecond", null);
            save("job-status.json", "GET", "/v1/jobs/" + jid + "/status", null);
            save("overview.json", "GET", "/v1/overview", null);
            save("not-found.json", "GET", "/v1/no/such/path", null);
            save("job-unknown.json", "GET", "/v1/jobs/" + "0".repeat(32), null);
            String requirements = "/v1/jobs/" + jid + "/resource-requirements";
            JsonNode before = save("resource-requirements-adaptive.json", "GET", requirements, null);
            Files.writeString(out.resolve("prom-scrape-counters.txt"),
                    families(capture.body(flink.metricsAddress())));

            ObjectNode bad = before.deepCopy();
            bad.set("0".repeat(32), before.get(counter));
            save("resource-requirements-put-unknown-vertex.json", "PUT", requirements, bad.toString());
            ObjectNode wanted = before.deepCopy();
            ((ObjectNode) wanted.get(counter).get("parallelism")).put("upperBound", 3);
            save("resource-requirements-put.json", "PUT", requirements, wanted.toString());
            save("job-rescaling.json", "GET", "/v1/jobs/" + jid, null);
            FlinkCluster.await("the rescale to 3", TIMEOUT, () -> parallelism(jid, counterVertex) == 3
                    && "RUNNING".equals(state(jid)));
            Thread.sleep(5_000);
            save("job-rescaled.json", "GET", "/v1/jobs/" + jid, null);
            save("jobs-overview-rescaled.json", "GET", "/v1/jobs/overview", null);
            save("resource-requirements-rescaled.json", "GET", requirements, null);
            capture.writeStatuses();
            flink.mini().cancelJob(job).get(30, TimeUnit.SECONDS);
        }
    }

    private JsonNode save(String file, String method, String path, String body)
            throws IOException, InterruptedException {
        return capture.save(file, method, path, body);
    }

    private int parallelism(String jid, String vertex) {
        for (JsonNode v : capture.get("/v1/jobs/" + jid).path("vertices")) {
            if (v.get("id").asText().equals(vertex)) {
                return v.get("parallelism").asInt();
            }
        }
        return -1;
    }

    private String state(String jid) {
        return capture.state(jid);
    }

    /** The reporter's text for {@link #PROM_FAMILIES} only: their HELP, TYPE and sample lines. */
    private static String families(String scrape) {
        StringBuilder kept = new StringBuilder();
        for (String line : scrape.split("\n")) {
            String name = line.startsWith("# ") ? line.split(" ")[2] : line.split("[{ ]")[0];
            if (PROM_FAMILIES.contains(name)) {
                kept.append(line).append('\n');
            }
        }
        return kept.toString();
    }
}
