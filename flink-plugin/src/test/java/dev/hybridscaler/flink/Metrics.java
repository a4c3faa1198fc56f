package dev.hybridscaler.flink;

/** The Flink settings docs/metrics.md asks for: RocksDB, its metrics, latency, the reporter. */
final class Metrics {
    static final String[][] CONFIG = {
        {"state.backend.type", "rocksdb"},
        {"metrics.reporter.prom.factory.class",
            "org.apache.flink.metrics.prometheus.PrometheusReporterFactory"},
        {"state.backend.rocksdb.metrics.block-cache-capacity", "true"},
        {"state.backend.rocksdb.metrics.block-cache-usage", "true"},
        {"state.backend.rocksdb.metrics.block-cache-hit", "true"},
        {"state.backend.rocksdb.metrics.block-cache-miss", "true"},
        {"state.latency-track.keyed-state-enabled", "true"},
        {"metrics.job.status.enable", "STATE;CURRENT_TIME;TOTAL_TIME"},
    };

    /** RocksDB's block cache for a slot with {@code managedMb} MiB: M·(3−r)/3 with r = 0.5. */
    static long expectedBlockCacheBytes(int managedMb) {
        double writeBufferRatio = 0.5;
        return (long) ((3 - writeBufferRatio) * managedMb * 1024L * 1024L / 3);
    }

    private Metrics() {}
}
