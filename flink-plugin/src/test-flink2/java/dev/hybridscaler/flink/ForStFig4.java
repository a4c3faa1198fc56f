package dev.hybridscaler.flink;

import org.apache.flink.api.common.JobID;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.v2.ValueState;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.streaming.api.datastream.KeyedStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink;
import org.apache.flink.runtime.util.EnvironmentInformation;
import org.apache.flink.util.Collector;

import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.node.ArrayNode;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.node.ObjectNode;

import java.lang.management.ManagementFactory;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import static dev.hybridscaler.flink.RocksDbFig4.ints;
import static dev.hybridscaler.flink.RocksDbFig4.options;
import static dev.hybridscaler.flink.RocksDbFig4.status;
import static dev.hybridscaler.flink.RocksDbFig4.total;

import dev.hybridscaler.flink.RocksDbFig4.Workload;

/**
 * RocksDbFig4 on Flink 2.x with ForSt: Read, Write and Update on one keyed operator for several
 * managed-memory sizes, with a local directory standing in for the remote primary store and a
 * fixed local file cache in front of it. Mode {@code async} uses State V2 on
 * {@code enableAsyncState()} (its files live in the primary directory); mode {@code sync} the
 * classic API on the same backend (ForSt keeps its files local), the baseline for the
 * asynchronous model's CPU. Besides records/s and the block cache's hit ratio it records the
 * file cache's, the reported busyness, the records in flight and the JVM's CPU per record.
 * Not a test: bench/forst_fig4.sh runs it.
 */
public final class ForStFig4 {
    private static final String OPERATOR = "workload";
    private static final String OP = "flink_taskmanager_job_task_operator_";
    private static final ObjectMapper JSON = new ObjectMapper();

    private ForStFig4() {}

    public static void main(String[] args) throws Exception {
        Map<String, String> opt = options(args);
        long keys = Long.parseLong(opt.getOrDefault("keys", "100000"));
        int valueBytes = Integer.parseInt(opt.getOrDefault("value-bytes", "1000"));
        int[] memoryMb = ints(opt.getOrDefault("memory-mb", "16,64,256"));
        String fileCache = opt.getOrDefault("file-cache", "32mb");
        // Runs as mode:workload[:memory|memory...], e.g. async:read sync:read:16|256.
        List<String> plan = List.of(opt.getOrDefault("runs",
                "async:read,async:update,async:write,sync:read").split(","));
        int warmupS = Integer.parseInt(opt.getOrDefault("warmup-s", "5"));
        int measureS = Integer.parseInt(opt.getOrDefault("measure-s", "10"));
        Path out = Path.of(opt.getOrDefault("out", "bench/results/forst-fig4.json"));
        Path work = Files.createTempDirectory("forst-fig4");

        Map<String, String> flinkConf = ForStGoldenRecorder.forstBackend(work, fileCache, List.of(
                "block-cache-hit", "block-cache-miss", "block-cache-capacity", "estimate-live-data-size"));

        ObjectNode doc = JSON.createObjectNode()
                .put("description", "Justin Fig. 4 at small scale on ForSt: one keyed operator"
                        + " via Flink 2.x, unthrottled source, uniform random keys; a local"
                        + " directory as the remote primary store, a fixed local file cache")
                .put("flinkVersion", EnvironmentInformation.getVersion())
                .put("cores", Runtime.getRuntime().availableProcessors())
                .put("keys", keys).put("valueBytes", valueBytes)
                .put("fileCacheLimit", fileCache)
                .put("warmupSeconds", warmupS).put("measureSeconds", measureS);
        ArrayNode runs = doc.putArray("runs");
        int maxM = Arrays.stream(memoryMb).max().orElse(1);
        System.out.printf("%-6s %-7s %5s %10s %7s %7s %5s %8s %9s%n", "mode", "load", "MB",
                "records/s", "bcHit", "fcHit", "busy", "inFlight", "cpuUs/rec");
        try (FlinkCluster flink = new FlinkCluster(maxM + 64, 3, flinkConf)) {
            doc.put("writeBufferRatio", 0.5);  // ForSt's default state.backend.forst.memory.write-buffer-ratio
            for (String entry : plan) {
                String[] parts = entry.trim().split(":");
                boolean async = parts[0].equals("async");
                Workload w = Workload.valueOf(parts[1].toUpperCase(Locale.ROOT));
                int[] sizes = parts.length > 2 ? ints(parts[2].replace('|', ',')) : memoryMb;
                for (int m : sizes) {
                    ObjectNode r = run(flink, async, w, m, keys, valueBytes, warmupS, measureS);
                    runs.add(r);
                    System.out.printf(Locale.ROOT, "%-6s %-7s %5d %10.0f %7s %7s %5.2f %8s %9.1f%n",
                            r.get("mode").asText(), r.get("workload").asText(), m,
                            r.get("recordsPerSecond").asDouble(), r.get("cacheHitRatio").asText(),
                            r.get("fileCacheHitRatio").asText(), r.get("busyness").asDouble(),
                            r.get("inFlightRecords").asText(), r.get("cpuUsPerRecord").asDouble());
                }
            }
        }
        Files.createDirectories(out.toAbsolutePath().getParent());
        Files.writeString(out, JSON.writerWithDefaultPrettyPrinter().writeValueAsString(doc) + "\n");
        System.out.println("wrote " + out);
    }

    private static ObjectNode run(FlinkCluster flink, boolean async, Workload w, int managedMb,
                                  long keys, int valueBytes, int warmupS, int measureS) throws Exception {
        Configuration conf = new Configuration();
        conf.set(HybridResources.OPERATOR_RESOURCES, ResourcesJson.json(
                ResourcesJson.entry("gen", 0.5, 64, 0), ResourcesJson.entry(OPERATOR, 1, 128, managedMb)));
        StreamExecutionEnvironment env = new StreamExecutionEnvironment(conf);
        KeyedStream<long[], Long> keyed = env.fromSequence(0, Long.MAX_VALUE).uid("gen").name("gen")
                .setParallelism(1)
                .map(new RocksDbFig4.ToKey(keys)).uid("to-key").name("to-key").setParallelism(1)
                .keyBy(k -> k[0], Types.LONG);
        if (async) {
            keyed.enableAsyncState().process(new AsyncAccess(w, keys, valueBytes))
                    .uid(OPERATOR).name(OPERATOR).setParallelism(1)
                    .sinkTo(new DiscardingSink<>()).uid("sink").name("sink").setParallelism(1);
        } else {
            keyed.process(new RocksDbFig4.StateAccess(w, keys, valueBytes))
                    .uid(OPERATOR).name(OPERATOR).setParallelism(1)
                    .sinkTo(new DiscardingSink<>()).uid("sink").name("sink").setParallelism(1);
        }
        HybridResources.apply(env);
        JobID job = flink.mini().submitJob(env.getStreamGraph().getJobGraph()).get().getJobID();
        try {
            FlinkCluster.await("all keys loaded", Duration.ofMinutes(5),
                    () -> sum(flink, job, "numRecordsIn") >= keys);
            Thread.sleep(warmupS * 1000L);
            Snapshot a = Snapshot.take(flink, job);
            Thread.sleep(measureS * 1000L);
            Snapshot b = Snapshot.take(flink, job);
            double seconds = (b.nanos - a.nanos) / 1e9;
            double records = b.records - a.records;
            ObjectNode r = JSON.createObjectNode()
                    .put("mode", async ? "async" : "sync")
                    .put("workload", w.name().toLowerCase(Locale.ROOT))
                    .put("parallelism", 1).put("managedMemoryMb", managedMb)
                    .put("blockCacheBytesPerTask", flink.blockCacheBytes(managedMb))
                    .put("recordsPerSecond", records / seconds)
                    .put("busyness", b.busyness)
                    .put("cpuUsPerRecord", (b.cpuNanos - a.cpuNanos) / 1e3 / Math.max(1, records));
            ratio(r, "cacheHitRatio", b.hits - a.hits, b.misses - a.misses);
            ratio(r, "fileCacheHitRatio", b.fileHits - a.fileHits, b.fileMisses - a.fileMisses);
            r.put("blockCacheMissesPerRecord", (b.misses - a.misses) / Math.max(1, records));
            r.put("fileCacheMissesPerRecord", (b.fileMisses - a.fileMisses) / Math.max(1, records));
            if (b.inFlight == null) {
                r.putNull("inFlightRecords");
            } else {
                r.put("inFlightRecords", b.inFlight);
            }
            if (b.getLatency == null) {
                r.putNull("stateGetLatencyNsMean");
            } else {
                r.put("stateGetLatencyNsMean", b.getLatency);
            }
            return r;
        } finally {
            flink.mini().cancelJob(job).get(30, TimeUnit.SECONDS);
            FlinkCluster.await("job cancelled", Duration.ofMinutes(1), () -> status(flink, job).isGloballyTerminalState());
        }
    }

    private static void ratio(ObjectNode r, String name, double hits, double misses) {
        if (hits + misses > 0) {
            r.put(name, hits / (hits + misses));
        } else {
            r.putNull(name);
        }
    }

    private record Snapshot(long nanos, long cpuNanos, double records, double hits, double misses,
                            double fileHits, double fileMisses, double busyness, Double inFlight,
                            Double getLatency) {
        static Snapshot take(FlinkCluster flink, JobID job) throws Exception {
            List<PromSample> all = ours(flink, job);
            double busy = all.stream()
                    .filter(s -> s.name().equals("flink_taskmanager_job_task_busyTimeMsPerSecond"))
                    .mapToDouble(PromSample::value).average().orElse(Double.NaN) / 1000.0;
            List<PromSample> flight = all.stream()
                    .filter(s -> s.name().equals(OP + "asyncStateProcessing_numInFlightRecords")).toList();
            List<PromSample> latency = all.stream()
                    .filter(s -> s.name().equals(OP + "state_name_valueStateGetLatency")
                            && "0.5".equals(s.label("quantile"))).toList();
            return new Snapshot(System.nanoTime(), processCpuNanos(), total(all, OP + "numRecordsIn"),
                    total(all, OP + "rocksdb_block_cache_hit"), total(all, OP + "rocksdb_block_cache_miss"),
                    total(all, OP + "forst_fileCache_hit"), total(all, OP + "forst_fileCache_miss"),
                    busy, flight.isEmpty() ? null : total(flight, flight.get(0).name()),
                    latency.isEmpty() ? null : latency.get(0).value());
        }
    }

    /** CPU time of this JVM (the whole MiniCluster: source, operator, ForSt's threads). */
    private static long processCpuNanos() {
        return ((com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean())
                .getProcessCpuTime();
    }

    private static List<PromSample> ours(FlinkCluster flink, JobID job) throws Exception {
        return flink.scrape().stream()
                .filter(s -> s.label("job_id").equals(job.toHexString())
                        && s.label("operator_name").equals(OPERATOR) || s.name().endsWith("busyTimeMsPerSecond")
                        && s.label("job_id").equals(job.toHexString())
                        && s.label("task_name").startsWith(OPERATOR))
                .toList();
    }

    private static double sum(FlinkCluster flink, JobID job, String metric) {
        try {
            return total(ours(flink, job), OP + metric);
        } catch (Exception e) {
            return 0;
        }
    }

    /** The measured operator on State V2: loads every key, then reads, writes or updates one
     * (the synchronous baseline is RocksDbFig4.StateAccess, on ForSt here). */
    static final class AsyncAccess extends RocksDbFig4.Access {
        private transient ValueState<byte[]> value;

        AsyncAccess(Workload workload, long keys, int valueBytes) {
            super(workload, keys, valueBytes);
        }

        @Override
        public void open(OpenContext context) throws Exception {
            super.open(context);
            value = getRuntimeContext().getState(
                    new org.apache.flink.api.common.state.v2.ValueStateDescriptor<>(
                            "value", ForStJob.BLOB_TYPE));
        }

        @Override
        public void processElement(long[] in, Context ctx, Collector<Long> out) {
            byte[] payload = payload(in);
            if (writesOnly(in)) {
                value.asyncUpdate(payload);
                return;
            }
            if (workload == Workload.UPDATE) {
                value.asyncValue().thenCompose(current -> {
                    checksum += current == null ? 0 : current[0];
                    return value.asyncUpdate(payload);
                });
            } else {
                value.asyncValue().thenAccept(current -> checksum += current == null ? 0 : current[0]);
            }
        }
    }
}
