"""Faults the controller must ride out: Prometheus going away and coming back.

The policy reads a Prometheus of its own (spec.metrics.prometheusUrl) that scrapes
the twin, so stopping it does not disturb the shared stack.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml

from e2e.conftest import Cluster, wait_until
from e2e.demo import ControllerProcess, flink_deployment, policy
from e2e.stack import StackInfo
from e2e.test_controller import condition, controller, events, hsp
from tests.controller.promproc import PrometheusProcess

pytestmark = pytest.mark.e2e
__all__ = ["controller"]  # the module-scoped controller fixture, shared


@pytest.fixture
def own_prometheus(e2e_stack: StackInfo, tmp_path: Path) -> Iterator[PrometheusProcess]:
    twin = urlparse(e2e_stack.twin_url).netloc
    process = PrometheusProcess(
        tmp_path, [{"job_name": "twin", "static_configs": [{"targets": [twin]}]}], interval_s=5)
    yield process
    process.stop()


def test_prometheus_stopped_then_restarted(
    controller: ControllerProcess, cluster: Cluster, namespace: str,
    own_prometheus: PrometheusProcess,
) -> None:
    cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all((
        flink_deployment(namespace, "q11"),
        policy(namespace, "q11", "q11", mode="Recommend",
               metrics={"prometheusUrl": own_prometheus.url}))))

    def metrics_available() -> str:
        return str(condition(hsp(cluster, namespace, "q11"), "MetricsAvailable").get("status"))

    wait_until(lambda: metrics_available() == "True", 120, "MetricsAvailable=True")
    own_prometheus.stop()
    wait_until(lambda: metrics_available() == "False", 60, "MetricsAvailable=False")
    c = condition(hsp(cluster, namespace, "q11"), "MetricsAvailable")
    assert c["reason"] == "MetricsUnavailable" and "unreachable" in c["message"]
    # kopf posts the warning off the loop's thread, maybe after the status is saved.
    wait_until(lambda: "MetricsUnavailable" in [r for r, _ in events(cluster, namespace, "q11")],
               30, "a MetricsUnavailable event")
    decided = (hsp(cluster, namespace, "q11")["status"].get("lastDecision") or {}).get("time")

    own_prometheus.start()
    wait_until(lambda: metrics_available() == "True", 120, "MetricsAvailable=True again")
    wait_until(lambda: (hsp(cluster, namespace, "q11")["status"].get("lastDecision") or {})
               .get("time") != decided, 120, "a decision after the restart")

