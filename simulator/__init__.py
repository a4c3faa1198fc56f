"""A digital twin of a Flink job on RocksDB, for testing and comparing policies."""
