"""The kopf operator: a thin shell between Kubernetes/Prometheus/Flink and the core."""
