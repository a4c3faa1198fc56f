"""The controller's own Prometheus metrics (served by `hybrid-scaler run --metrics-port`)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

REGISTRY = CollectorRegistry(auto_describe=True)

EVALUATIONS = Counter(
    "hybridscaler_evaluations", "Policy evaluations that reached the core, by outcome",
    ["outcome"], registry=REGISTRY,
)
DECISIONS = Counter(
    "hybridscaler_decisions", "Per-vertex decisions that change something, by kind and mode",
    ["kind", "mode"], registry=REGISTRY,
)
ERRORS = Counter(
    "hybridscaler_errors", "Loop passes that ended in an error, by stage", ["stage"],
    registry=REGISTRY,
)
RECONCILE_SECONDS = Histogram(
    "hybridscaler_reconcile_seconds", "Wall time of one loop pass (collect to record)",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30), registry=REGISTRY,
)
DECIDE_SECONDS = Histogram(
    "hybridscaler_decide_seconds", "CPU-bound part of a pass: the core's evaluation and placement",
    buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5),
    registry=REGISTRY,
)
SOLVER_SECONDS = Histogram(
    "hybridscaler_solver_seconds", "Time the packer spent placing tasks",
    buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5), registry=REGISTRY,
)


def serve(port: int, address: str = "0.0.0.0") -> None:
    from prometheus_client import start_http_server

    start_http_server(port, addr=address, registry=REGISTRY)
