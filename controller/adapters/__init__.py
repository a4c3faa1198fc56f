"""The real adapters: the ports (controller/ports.py) on a real API server,
Prometheus and Flink REST."""
