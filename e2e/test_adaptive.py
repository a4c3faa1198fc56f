"""Adaptive realization (issue 7): with `jobmanager.scheduler: adaptive` the Flink
operator rescales a parallelism-only change in place; anything else still upgrades.

The stand-in models the operator's rule (`e2e.standin.rescales_in_place`); these tests
write the overrides as the controller does, by server-side apply with its field
manager and its own apply document.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from controller.realize import FIELD_MANAGER, OwnedFields, apply_body
from e2e import stack
from e2e.conftest import (
    Cluster,
    FlinkDeploymentFactory,
    Prometheus,
    Twin,
    transitions,
    vertex_id,
    wait_until,
)

pytestmark = pytest.mark.e2e

ADAPTIVE = {"jobmanager.scheduler": "adaptive"}
BUSY = "flink_taskmanager_job_task_busyTimeMsPerSecond"
ONE_SCRAPE_S = stack.SCRAPE_INTERVAL_S + 3.0


def _apply_as_controller(cluster: Cluster, namespace: str, name: str,
                         fields: OwnedFields) -> int:
    """Server-side apply of the controller's document; returns the new generation."""
    cluster.kubectl("apply", "--server-side", f"--field-manager={FIELD_MANAGER}",
                    "--force-conflicts", "-f", "-",
                    stdin=yaml.safe_dump(apply_body(name, namespace, fields)))
    return int(cluster.flink(namespace, name)["metadata"]["generation"])


def _attempts(cluster: Cluster, namespace: str, name: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for pod in cluster.pods(namespace, f"app={name}"):
        attempt = pod["metadata"]["labels"]["hybridscaler.dev/attempt"]
        counts[attempt] = counts.get(attempt, 0) + 1
    return counts


def _parallelism(twin: Twin, namespace: str, name: str, vertex: str) -> int:
    configuration: dict[str, Any] = twin.status(namespace, name)["configuration"]
    return next(int(v["parallelism"]) for v in configuration.values() if v["vertexId"] == vertex)


def test_a_parallelism_override_rescales_the_running_job_in_place(
    cluster: Cluster, namespace: str, flink_deployment: FlinkDeploymentFactory,
    twin: Twin, prometheus: Prometheus
) -> None:
    obj = flink_deployment("elastic", replicas=2, configuration=ADAPTIVE)
    job_id = obj["status"]["jobStatus"]["jobId"]
    vertex = vertex_id(twin, namespace, "elastic", job_id, "Read State")
    assert _parallelism(twin, namespace, "elastic", vertex) != 3
    wait_until(lambda: _attempts(cluster, namespace, "elastic") == {"1": 3}, 30,
               "1 JobManager and 2 TaskManager pods")

    generation = _apply_as_controller(cluster, namespace, "elastic",
                                      OwnedFields(overrides={vertex: 3}))
    assert generation == 2
    seen = transitions(cluster, namespace, "elastic", obj["metadata"]["resourceVersion"],
                       generation)
    assert seen == [("STABLE", "RUNNING")]  # never UPGRADING, never RESTARTING

    status = cluster.flink(namespace, "elastic")["status"]
    assert status["jobStatus"]["jobId"] == job_id
    assert f"{vertex}:3" in status["reconciliationStatus"]["lastReconciledSpec"]
    assert twin.status(namespace, "elastic")["jobId"] == job_id
    assert _parallelism(twin, namespace, "elastic", vertex) == 3
    # The same job reports three subtasks of the vertex; its pods were not replaced.
    prometheus.wait_for(
        f'count({BUSY}{{job_id="{job_id}",task_id="{vertex}"}})',
        lambda r: len(r) == 1 and r[0]["value"][1] == "3", timeout_s=4 * ONE_SCRAPE_S,
        what="the same job's 3 busy-time series")
    assert _attempts(cluster, namespace, "elastic") == {"1": 3}


def test_a_task_manager_memory_change_still_upgrades_the_job(
    cluster: Cluster, namespace: str, flink_deployment: FlinkDeploymentFactory, twin: Twin
) -> None:
    obj = flink_deployment("elastic", replicas=1, configuration=ADAPTIVE, memory="2048m")
    job_id = obj["status"]["jobStatus"]["jobId"]
    vertex = vertex_id(twin, namespace, "elastic", job_id, "Read State")
    unchanged = _parallelism(twin, namespace, "elastic", vertex)

    generation = _apply_as_controller(cluster, namespace, "elastic", OwnedFields(
        overrides={vertex: unchanged}, tm_memory_mib=3072))
    seen = transitions(cluster, namespace, "elastic", obj["metadata"]["resourceVersion"],
                       generation)
    assert seen == [("STABLE", "RUNNING"), ("UPGRADING", "RESTARTING"), ("STABLE", "RUNNING")]
    new_job = cluster.flink(namespace, "elastic")["status"]["jobStatus"]["jobId"]
    assert new_job != job_id
    assert twin.status(namespace, "elastic")["jobId"] == new_job

    def new_pods() -> list[dict[str, Any]] | None:
        pods = cluster.pods(namespace, "app=elastic,component=taskmanager")
        return pods if {p["metadata"]["labels"]["hybridscaler.dev/attempt"]
                        for p in pods} == {"2"} else None

    pods = wait_until(new_pods, 30, "the TaskManager pods of the upgrade's attempt")
    # The API server writes the stand-in's "3072Mi" in canonical form.
    assert {p["spec"]["containers"][0]["resources"]["requests"]["memory"]
            for p in pods} == {"3Gi"}
