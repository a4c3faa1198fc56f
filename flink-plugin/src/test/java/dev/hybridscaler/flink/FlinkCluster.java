package dev.hybridscaler.flink;

import org.apache.flink.api.common.JobID;
import org.apache.flink.configuration.ConfigOption;
import org.apache.flink.configuration.ConfigOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.MemorySize;
import org.apache.flink.configuration.RestOptions;
import org.apache.flink.configuration.TaskManagerOptions;
import org.apache.flink.runtime.minicluster.MiniCluster;
import org.apache.flink.runtime.minicluster.MiniClusterConfiguration;

import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.JsonNode;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.ObjectMapper;

import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Callable;
import java.util.function.BooleanSupplier;

/**
 * A real Flink MiniCluster (from flink-runtime) with one TaskManager, RocksDB and the Prometheus
 * reporter, seen through its REST API and the reporter's /metrics, as a user would see it.
 */
final class FlinkCluster implements AutoCloseable {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final int PROM_FIRST_PORT = 9250;
    private static final int PROM_PORTS = 100;
    private final HttpClient http =
            HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(2)).build();
    /** Flink's option and default; RocksDB keeps the rest of a slot's managed memory as cache. */
    private static final ConfigOption<Double> WRITE_BUFFER_RATIO =
            ConfigOptions.key("state.backend.rocksdb.memory.write-buffer-ratio")
                    .doubleType().defaultValue(0.5);
    private final Configuration conf = new Configuration();
    private final MiniCluster cluster;
    private final URI rest;
    private final URI metrics;

    FlinkCluster(int managedMemoryMb, int slots) throws Exception {
        this(managedMemoryMb, slots, Map.of());
    }

    /** {@code extra}: more Flink settings on top of {@link Metrics#CONFIG}. */
    FlinkCluster(int managedMemoryMb, int slots, Map<String, String> extra) throws Exception {
        conf.set(TaskManagerOptions.MANAGED_MEMORY_SIZE, MemorySize.ofMebiBytes(managedMemoryMb));
        conf.set(TaskManagerOptions.NUM_TASK_SLOTS, slots);
        conf.set(RestOptions.BIND_PORT, "0");
        for (String[] kv : Metrics.CONFIG) {
            conf.setString(kv[0], kv[1]);
        }
        conf.setString("metrics.reporter.prom.port",
                PROM_FIRST_PORT + "-" + (PROM_FIRST_PORT + PROM_PORTS - 1));
        extra.forEach(conf::setString);
        cluster = new MiniCluster(new MiniClusterConfiguration.Builder()
                .setConfiguration(conf)
                .setNumTaskManagers(1)
                .setNumSlotsPerTaskManager(slots)
                .build());
        cluster.start();
        rest = cluster.getRestAddress().get();
        metrics = ownMetricsEndpoint();
    }

    /**
     * The reporter binds the first free port of its range at start; other processes may hold
     * ports of it, so ours is the one that reports this cluster's TaskManager.
     */
    private URI ownMetricsEndpoint() throws InterruptedException {
        URI[] found = new URI[1];
        await("this cluster's Prometheus reporter", Duration.ofSeconds(60), () -> {
            try {
                JsonNode tms = rest("/taskmanagers").get("taskmanagers");
                if (tms.isEmpty()) {
                    return false;
                }
                String tmId = tms.get(0).get("id").asText().replaceAll("[^a-zA-Z0-9_:]", "_");
                for (int port = PROM_FIRST_PORT; port < PROM_FIRST_PORT + PROM_PORTS; port++) {
                    URI uri = URI.create("http://localhost:" + port + "/metrics");
                    if (reports(uri, "tm_id=\"" + tmId + "\"")) {
                        found[0] = uri;
                        return true;
                    }
                }
                return false;
            } catch (IOException e) {
                return false;
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return false;
            }
        });
        return found[0];
    }

    private boolean reports(URI uri, String label) throws InterruptedException {
        try {
            return get(uri).contains(label);
        } catch (IOException notOurs) {
            return false;
        }
    }

    /**
     * The block-cache capacity RocksDB takes from a slot with {@code managedMb} MiB of managed
     * memory under this cluster's configuration: (3 − r)/3 of it for write-buffer ratio r.
     */
    long blockCacheBytes(int managedMb) {
        return (long) ((3 - writeBufferRatio()) * managedMb * 1024L * 1024L / 3);
    }

    double writeBufferRatio() {
        return conf.get(WRITE_BUFFER_RATIO);
    }

    MiniCluster mini() {
        return cluster;
    }

    /** The REST endpoint, {@code http://localhost:<port>/}. */
    URI restAddress() {
        return rest;
    }

    /** The reporter's {@code /metrics} of this cluster. */
    URI metricsAddress() {
        return metrics;
    }

    JsonNode rest(String path) throws IOException, InterruptedException {
        return JSON.readTree(get(rest.resolve(path)));
    }

    List<PromSample> scrape() throws IOException, InterruptedException {
        return PromSample.parse(get(metrics));
    }

    /** The scrape's samples of one job; unchecked, for polling lambdas. */
    List<PromSample> samples(JobID job) {
        return unchecked(this::scrape).stream()
                .filter(s -> s.label("job_id").equals(job.toHexString())).toList();
    }

    /** One metric's samples of one job. */
    List<PromSample> samples(JobID job, String name) {
        return samples(job).stream().filter(s -> s.name().equals(name)).toList();
    }

    /** Managed memory in use on all TaskManagers, as the reporter says; unchecked. */
    long managedMemoryUsed() {
        return (long) unchecked(this::scrape).stream()
                .filter(s -> s.name().equals("flink_taskmanager_Status_Flink_Memory_Managed_Used"))
                .mapToDouble(PromSample::value).sum();
    }

    /** {@code allocatedSlots[].resource} of every TaskManager, for one job. */
    List<JsonNode> allocatedSlots(JobID job) throws IOException, InterruptedException {
        List<JsonNode> out = new ArrayList<>();
        for (JsonNode tm : rest("/taskmanagers").get("taskmanagers")) {
            for (JsonNode slot : rest("/taskmanagers/" + tm.get("id").asText()).get("allocatedSlots")) {
                if (slot.get("jobId").asText().equals(job.toHexString())) {
                    out.add(slot.get("resource"));
                }
            }
        }
        return out;
    }

    private String get(URI uri) throws IOException, InterruptedException {
        HttpResponse<String> r = http.send(
                HttpRequest.newBuilder(uri).timeout(Duration.ofSeconds(10)).build(),
                HttpResponse.BodyHandlers.ofString());
        if (r.statusCode() != 200) {
            throw new IOException(uri + " -> HTTP " + r.statusCode() + ": " + r.body());
        }
        return r.body();
    }

    static void await(String what, Duration timeout, BooleanSupplier done) throws InterruptedException {
        if (!poll(timeout, done)) {
            throw new AssertionError("timed out waiting for " + what);
        }
    }

    /** Polls {@code done} every 200 ms; false if it did not hold within {@code timeout}. */
    static boolean poll(Duration timeout, BooleanSupplier done) throws InterruptedException {
        long deadline = System.nanoTime() + timeout.toNanos();
        while (!done.getAsBoolean()) {
            if (System.nanoTime() > deadline) {
                return false;
            }
            Thread.sleep(200);
        }
        return true;
    }

    /** For polling lambdas, which cannot throw: the call's result, or an unchecked failure. */
    static <T> T unchecked(Callable<T> call) {
        try {
            return call.call();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException(e);
        } catch (Exception e) {
            throw new IllegalStateException(e);
        }
    }

    @Override
    public void close() throws Exception {
        cluster.close();
    }
}
