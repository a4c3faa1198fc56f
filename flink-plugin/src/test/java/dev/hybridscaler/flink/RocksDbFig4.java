package dev.hybridscaler.flink;

import org.apache.flink.api.common.JobID;
import org.apache.flink.api.common.JobStatus;
import org.apache.flink.api.common.functions.MapFunction;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink;
import org.apache.flink.runtime.util.EnvironmentInformation;
import org.apache.flink.util.Collector;

import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.node.ArrayNode;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.node.ObjectNode;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Random;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;

/**
 * The Justin paper's Figure 4 at this machine's scale: Read, Write and Update workloads on one
 * keyed RocksDB operator, for each managed-memory size and parallelism, on a real MiniCluster.
 * Each run loads every key once, warms up, then measures the operator's input rate and RocksDB's
 * block-cache hit ratio from the Prometheus reporter. Not a test: bench/rocksdb_fig4.sh runs it.
 */
public final class RocksDbFig4 {
    private static final String OPERATOR = "workload";
    private static final ObjectMapper JSON = new ObjectMapper();

    enum Workload { READ, WRITE, UPDATE }

    private RocksDbFig4() {}

    public static void main(String[] args) throws Exception {
        Map<String, String> opt = options(args);
        long keys = Long.parseLong(opt.getOrDefault("keys", "150000"));
        int valueBytes = Integer.parseInt(opt.getOrDefault("value-bytes", "1000"));
        int[] memoryMb = ints(opt.getOrDefault("memory-mb", "32,64,128,256"));
        int[] parallelism = ints(opt.getOrDefault("parallelism", "1,2"));
        List<Workload> workloads = new ArrayList<>();
        for (String w : opt.getOrDefault("workloads", "read,write,update").split(",")) {
            workloads.add(Workload.valueOf(w.trim().toUpperCase(Locale.ROOT)));
        }
        int warmupS = Integer.parseInt(opt.getOrDefault("warmup-s", "5"));
        int measureS = Integer.parseInt(opt.getOrDefault("measure-s", "10"));
        Path out = Path.of(opt.getOrDefault("out", "bench/results/rocksdb-fig4.json"));

        ObjectNode doc = JSON.createObjectNode()
                .put("description", "Justin Fig. 4 at small scale: one keyed RocksDB operator via"
                        + " Flink, unthrottled source, uniform random keys; read runs start once the"
                        + " load's compactions finished (compactionsSettled)")
                .put("flinkVersion", EnvironmentInformation.getVersion())
                .put("cores", Runtime.getRuntime().availableProcessors())
                .put("keys", keys).put("valueBytes", valueBytes)
                .put("warmupSeconds", warmupS).put("measureSeconds", measureS)
                .put("extraFlinkConfiguration", opt.getOrDefault("conf", ""));
        ArrayNode runs = doc.putArray("runs");

        // Compaction metrics let each run wait for the LSM tree to settle after the load.
        Map<String, String> flinkConf = new TreeMap<>(Map.of(
                "state.backend.rocksdb.metrics.compaction-pending", "true",
                "state.backend.rocksdb.metrics.num-running-compactions", "true"));
        // --conf key=value,key=value: more Flink settings, e.g. RocksDB options to compare.
        for (String kv : opt.getOrDefault("conf", "").split(",")) {
            if (!kv.isBlank()) {
                String[] parts = kv.split("=", 2);
                flinkConf.put(parts[0].trim(), parts[1].trim());
            }
        }
        int maxP = Arrays.stream(parallelism).max().orElse(1);
        int maxM = Arrays.stream(memoryMb).max().orElse(1);
        System.out.printf("%-8s %2s %9s %9s %10s %8s %5s %12s%n", "workload", "p", "managedMB",
                "cacheMB/t", "records/s", "hitRatio", "busy", "getLatencyNs");
        try (FlinkCluster flink = new FlinkCluster(maxP * maxM + 64, maxP + 2, flinkConf)) {
            doc.put("writeBufferRatio", flink.writeBufferRatio());
            for (Workload w : workloads) {
                for (int p : parallelism) {
                    for (int m : memoryMb) {
                        Result r = run(flink, w, p, m, keys, valueBytes, warmupS, measureS);
                        System.out.println(r.line());
                        runs.add(r.json());
                    }
                }
            }
        }
        Files.createDirectories(out.toAbsolutePath().getParent());
        Files.writeString(out, JSON.writerWithDefaultPrettyPrinter().writeValueAsString(doc) + "\n");
        System.out.println("wrote " + out);
    }

    /** One measured configuration; latencies are means in ns, null when not measured. */
    private record Result(Workload workload, int parallelism, int managedMb, long cacheBytes, double rate,
                          Double hitRatio, double busyness, Double getLatencyNs,
                          Double updateLatencyNs, boolean compactionsSettled) {
        String line() {
            return String.format(Locale.ROOT, "%-8s %2d %9d %9.1f %10.0f %8s %5.2f %12s",
                    name(), parallelism, managedMb, cacheBytes / 1048576.0, rate,
                    hitRatio == null ? "-" : String.format(Locale.ROOT, "%.3f", hitRatio),
                    busyness, getLatencyNs == null ? "-" : String.format(Locale.ROOT, "%.0f", getLatencyNs));
        }

        ObjectNode json() {
            return JSON.createObjectNode()
                    .put("workload", name()).put("parallelism", parallelism)
                    .put("managedMemoryMb", managedMb).put("blockCacheBytesPerTask", cacheBytes)
                    .put("recordsPerSecond", rate).put("cacheHitRatio", hitRatio)
                    .put("busyness", busyness).put("stateGetLatencyNsMean", getLatencyNs)
                    .put("stateUpdateLatencyNsMean", updateLatencyNs)
                    .put("compactionsSettled", compactionsSettled);
        }

        private String name() {
            return workload.name().toLowerCase(Locale.ROOT);
        }
    }

    private static Result run(FlinkCluster flink, Workload w, int p, int managedMb, long keys,
                              int valueBytes, int warmupS, int measureS) throws Exception {
        Configuration conf = new Configuration();
        conf.set(HybridResources.OPERATOR_RESOURCES, ResourcesJson.json(
                ResourcesJson.entry("gen", 0.5, 64, 0), ResourcesJson.entry(OPERATOR, 1, 128, managedMb)));
        StreamExecutionEnvironment env = new StreamExecutionEnvironment(conf);
        env.fromSequence(0, Long.MAX_VALUE).uid("gen").name("gen").setParallelism(1)
                .map(new ToKey(keys)).uid("to-key").name("to-key").setParallelism(1)
                .keyBy(k -> k[0], Types.LONG)
                .process(new StateAccess(w, keys, valueBytes)).uid(OPERATOR).name(OPERATOR)
                .setParallelism(p)
                .sinkTo(new DiscardingSink<>()).uid("sink").name("sink").setParallelism(p);
        HybridResources.apply(env);
        JobID job = flink.mini().submitJob(env.getStreamGraph().getJobGraph()).get().getJobID();
        try {
            Duration load = Duration.ofMinutes(5);
            long started = System.nanoTime();
            FlinkCluster.await("all keys loaded", load, () -> {
                double n = sum(flink, job, "numRecordsIn");
                if (System.getenv("FIG4_DEBUG") != null) {
                    System.err.printf("load: %.0f records after %.1f s%n", n, (System.nanoTime() - started) / 1e9);
                }
                return n >= keys;
            });
            // Reads are measured on the settled tree the load left behind; writes never settle.
            boolean settled = false;
            if (w == Workload.READ) {
                Thread.sleep(5000); // one refresh of RocksDB's metric views
                settled = FlinkCluster.poll(Duration.ofSeconds(30), () -> compacting(flink, job) == 0);
            }
            Thread.sleep(warmupS * 1000L);
            Snapshot a = Snapshot.take(flink, job);
            Thread.sleep(measureS * 1000L);
            Snapshot b = Snapshot.take(flink, job);
            double rate = (b.records - a.records) / ((b.nanos - a.nanos) / 1e9);
            double hits = b.hits - a.hits;
            double misses = b.misses - a.misses;
            Double ratio = hits + misses > 0 ? hits / (hits + misses) : null;
            return new Result(w, p, managedMb, flink.blockCacheBytes(managedMb), rate, ratio,
                    b.busyness, b.getLatency,
                    b.updateLatency, settled);
        } finally {
            flink.mini().cancelJob(job).get(30, TimeUnit.SECONDS);
            FlinkCluster.await("job cancelled", Duration.ofMinutes(1), () -> status(flink, job).isGloballyTerminalState());
        }
    }

    private record Snapshot(long nanos, double records, double hits, double misses, double busyness,
                            Double getLatency, Double updateLatency) {
        static Snapshot take(FlinkCluster flink, JobID job) throws Exception {
            List<PromSample> all = ours(flink, job);
            String op = "flink_taskmanager_job_task_operator_";
            double busy = all.stream()
                    .filter(s -> s.name().equals("flink_taskmanager_job_task_busyTimeMsPerSecond"))
                    .mapToDouble(PromSample::value).average().orElse(Double.NaN) / 1000.0;
            return new Snapshot(System.nanoTime(), total(all, op + "numRecordsIn"),
                    total(all, op + "rocksdb_block_cache_hit"), total(all, op + "rocksdb_block_cache_miss"),
                    busy, meanLatency(all, op + "state_name_valueStateGetLatency"),
                    meanLatency(all, op + "state_name_valueStateUpdateLatency"));
        }
    }

    /** Mean over subtasks of the latency summary's mean estimated from its quantiles. */
    private static Double meanLatency(List<PromSample> all, String name) {
        Map<String, TreeMap<Double, Double>> bySubtask = new TreeMap<>();
        for (PromSample s : all) {
            if (s.name().equals(name) && Double.isFinite(s.value())) {
                bySubtask.computeIfAbsent(s.label("subtask_index"), k -> new TreeMap<>())
                        .put(Double.parseDouble(s.label("quantile")), s.value());
            }
        }
        if (bySubtask.isEmpty()) {
            return null;
        }
        double sum = 0;
        for (TreeMap<Double, Double> q : bySubtask.values()) {
            // Same integration as policies.model.estimate_mean_from_quantiles.
            Map.Entry<Double, Double> prev = q.firstEntry();
            double mean = prev.getKey() * prev.getValue();
            for (Map.Entry<Double, Double> e : q.tailMap(prev.getKey(), false).entrySet()) {
                mean += (e.getKey() - prev.getKey()) * (prev.getValue() + e.getValue()) / 2;
                prev = e;
            }
            sum += mean + (1 - prev.getKey()) * prev.getValue();
        }
        return sum / bySubtask.size();
    }

    private static List<PromSample> ours(FlinkCluster flink, JobID job) throws Exception {
        return flink.scrape().stream()
                .filter(s -> s.label("job_id").equals(job.toHexString())
                        && s.label("operator_name").equals(OPERATOR) || s.name().endsWith("busyTimeMsPerSecond")
                        && s.label("job_id").equals(job.toHexString())
                        && s.label("task_name").startsWith(OPERATOR))
                .toList();
    }

    static double total(List<PromSample> all, String name) {
        return all.stream().filter(s -> s.name().equals(name)).mapToDouble(PromSample::value).sum();
    }

    private static double sum(FlinkCluster flink, JobID job, String metric) {
        try {
            return total(ours(flink, job), "flink_taskmanager_job_task_operator_" + metric);
        } catch (Exception e) {
            return 0;
        }
    }

    private static double compacting(FlinkCluster flink, JobID job) {
        try {
            return ours(flink, job).stream()
                    .filter(s -> s.name().endsWith("_rocksdb_compaction_pending")
                            || s.name().endsWith("_rocksdb_num_running_compactions"))
                    .mapToDouble(PromSample::value).sum();
        } catch (Exception e) {
            return 1;
        }
    }

    static JobStatus status(FlinkCluster flink, JobID job) {
        try {
            return flink.mini().getJobStatus(job).get();
        } catch (Exception e) {
            return JobStatus.FAILED;
        }
    }

    /** Keys 0..K-1 once in order (the load), then uniformly random keys; [key, sequence]. */
    static final class ToKey implements MapFunction<Long, long[]> {
        private final long keys;

        ToKey(long keys) {
            this.keys = keys;
        }

        @Override
        public long[] map(Long i) {
            long key = i < keys ? i : Math.floorMod(mix(i), keys);
            return new long[] {key, i};
        }

        /** SplitMix64's finaliser: a cheap, well-spread hash of the sequence number. */
        private static long mix(long z) {
            z = (z ^ (z >>> 30)) * 0xbf58476d1ce4e5b9L;
            z = (z ^ (z >>> 27)) * 0x94d049bb133111ebL;
            return z ^ (z >>> 31);
        }
    }

    /** Incompressible payloads, so the caches hold what the data really weighs. */
    static byte[][] payloads(int subtask, int valueBytes) {
        Random random = new Random(subtask);
        byte[][] payloads = new byte[64][valueBytes];
        for (byte[] p : payloads) {
            random.nextBytes(p);
        }
        return payloads;
    }

    /**
     * A measured operator's common part (this synchronous one and ForStFig4's on State V2): it
     * loads every key, then reads, writes or updates one per record with these payloads.
     */
    abstract static class Access extends KeyedProcessFunction<Long, long[], Long> {
        final Workload workload;
        final long keys;
        private final int valueBytes;
        transient byte[][] payloads;
        transient long checksum;

        Access(Workload workload, long keys, int valueBytes) {
            this.workload = workload;
            this.keys = keys;
            this.valueBytes = valueBytes;
        }

        @Override
        public void open(OpenContext context) throws Exception {
            payloads = payloads(getRuntimeContext().getTaskInfo().getIndexOfThisSubtask(), valueBytes);
        }

        /** The record's payload. */
        final byte[] payload(long[] in) {
            return payloads[(int) (in[1] & 63)];
        }

        /** Whether the record only writes: it loads its key, or the workload is Write. */
        final boolean writesOnly(long[] in) {
            return in[1] < keys || workload == Workload.WRITE;
        }

        @Override
        public void close() {
            // Keeps the reads observable so the JIT cannot drop them.
            if (checksum == 42) {
                System.out.print("");
            }
        }
    }

    /** The measured operator: loads every key, then reads, writes or updates one per record. */
    static final class StateAccess extends Access {
        private transient ValueState<byte[]> value;

        StateAccess(Workload workload, long keys, int valueBytes) {
            super(workload, keys, valueBytes);
        }

        @Override
        public void open(OpenContext context) throws Exception {
            super.open(context);
            value = getRuntimeContext().getState(
                    new ValueStateDescriptor<>("value", byte[].class));
        }

        @Override
        public void processElement(long[] in, Context ctx, Collector<Long> out) throws Exception {
            byte[] payload = payload(in);
            if (writesOnly(in)) {
                value.update(payload);
                return;
            }
            byte[] current = value.value();
            checksum += current == null ? 0 : current[0];
            if (workload == Workload.UPDATE) {
                value.update(payload);
            }
        }
    }

    static int[] ints(String csv) {
        return Arrays.stream(csv.split(",")).map(String::trim).mapToInt(Integer::parseInt).toArray();
    }

    static Map<String, String> options(String[] args) {
        Map<String, String> out = new LinkedHashMap<>();
        for (int i = 0; i < args.length; i++) {
            if (!args[i].startsWith("--") || i + 1 >= args.length) {
                throw new IllegalArgumentException("usage: --name value ...; got " + args[i]);
            }
            out.put(args[i].substring(2), args[++i]);
        }
        return out;
    }
}
