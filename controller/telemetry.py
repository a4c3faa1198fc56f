"""The controller's own Prometheus metrics (served by `hybrid-scaler run --metrics-port`).

Counters carry the policy (`namespace`, `policy`: the HybridScalingPolicy's own
namespace and name), so a dashboard shows them per job; a few series per policy.
Histograms do not: 12 buckets per policy and histogram would cost more than the
per-policy latency tells (per-policy outcomes are in its status and Events), and
their quantiles are about the controller as a whole.

The ServiceMonitor sets `honorLabels: true`, so Prometheus keeps our `namespace`
(the policy's) instead of renaming it `exported_namespace` for the target's.
"""

from __future__ import annotations

import contextlib
import threading

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

REGISTRY = CollectorRegistry(auto_describe=True)

EVALUATIONS = Counter(
    "hybridscaler_evaluations", "Policy evaluations that reached the core, by policy and outcome",
    ["namespace", "policy", "outcome"], registry=REGISTRY,
)
DECISIONS = Counter(
    "hybridscaler_decisions",
    "Per-vertex decisions that change something, by policy, kind and mode",
    ["namespace", "policy", "kind", "mode"], registry=REGISTRY,
)
ERRORS = Counter(
    "hybridscaler_errors", "Loop passes that ended in an error, by policy and stage",
    ["namespace", "policy", "stage"], registry=REGISTRY,
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
WORKERS = Gauge("hybridscaler_workers", "Threads running loop passes (--workers)",
                registry=REGISTRY)
# By namespace: shows (and e2e checks) that one tenant holds at most its share of the
# threads while others wait. A series exists only while the namespace holds a thread.
WORKERS_BUSY = Gauge(
    "hybridscaler_workers_busy", "Threads running a loop pass, by the policy's namespace",
    ["namespace"], registry=REGISTRY,
)

# The label values each policy's counters have been given, so `forget` can drop its series.
_SEEN: dict[tuple[str, str], set[tuple[Counter, tuple[str, ...]]]] = {}
_SEEN_LOCK = threading.Lock()


def count(counter: Counter, namespace: str, policy: str, *labels: str) -> None:
    """Increment one of the per-policy counters (EVALUATIONS, DECISIONS, ERRORS)."""
    counter.labels(namespace, policy, *labels).inc()
    with _SEEN_LOCK:
        _SEEN.setdefault((namespace, policy), set()).add((counter, labels))


def forget(namespace: str, policy: str) -> None:
    """Drop a policy's series when its loop ends (deleted, or served by another replica),
    so policies that come and go do not pile up series; Prometheus reads the reset."""
    with _SEEN_LOCK:
        seen = _SEEN.pop((namespace, policy), set())
    for counter, labels in seen:
        with contextlib.suppress(KeyError):  # already gone
            counter.remove(namespace, policy, *labels)


def serve(port: int, address: str = "0.0.0.0") -> None:
    from prometheus_client import start_http_server

    start_http_server(port, addr=address, registry=REGISTRY)
