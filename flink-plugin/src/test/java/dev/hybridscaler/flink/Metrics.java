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

    private Metrics() {}
}
