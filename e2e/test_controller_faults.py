"""Faults the controller must ride out: Prometheus going away and coming back, a pass
that fails on something nobody mapped, and a shutdown in the middle of a pass.

The policy reads a Prometheus of its own (spec.metrics.prometheusUrl) that scrapes
the twin, so stopping it does not disturb the shared stack.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml

from controller.operator.settings import HOLD_APPLY_ENV
from e2e.conftest import Cluster, wait_until
from e2e.demo import ControllerProcess, flink_deployment, policy
from e2e.stack import StackInfo
from e2e.test_controller import condition, controller, events, generation, hsp, scale_q11
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
    # The pass posts the warning before it saves the status.
    wait_until(lambda: "MetricsUnavailable" in [r for r, _ in events(cluster, namespace, "q11")],
               30, "a MetricsUnavailable event")
    decided = (hsp(cluster, namespace, "q11")["status"].get("lastDecision") or {}).get("time")

    own_prometheus.start()
    wait_until(lambda: metrics_available() == "True", 120, "MetricsAvailable=True again")
    wait_until(lambda: (hsp(cluster, namespace, "q11")["status"].get("lastDecision") or {})
               .get("time") != decided, 120, "a decision after the restart")



def test_a_pass_running_at_shutdown_finishes_with_its_events_and_status(
    controller: ControllerProcess, cluster: Cluster, namespace: str, tmp_path: Path,
) -> None:
    """SIGTERM while a pass is between its commit and its patch (held by the test hook,
    controller/operator/settings.py): kopf stops and closes its event loop, then the pass
    goes on. It must apply its step, post its Events and save its status, with no error.
    Before, its Events went to kopf's closed loop: `RuntimeError: Event loop is closed`,
    a logged InternalError, and the status never marked the step applied."""
    hold = tmp_path / "hold"
    hold.mkdir()
    held, release = hold / f"{namespace}.q11.held", hold / f"{namespace}.q11.release"
    controller.kill9()
    controller.proxy_env[HOLD_APPLY_ENV] = str(hold)
    try:
        controller.start()
        initial = scale_q11(cluster, namespace)["metadata"]["generation"]
        wait_until(held.exists, 180, "the first step's patch, held by the test hook")
        assert condition(hsp(cluster, namespace, "q11"), "Scaling")["reason"] == "Reconfiguring"
        since = controller.log.stat().st_size
        process = controller.process
        assert process is not None
        process.terminate()

        def log_tail() -> str:
            with controller.log.open() as f:
                f.seek(since)
                return f.read()

        wait_until(lambda: "operator stopped" in log_tail(), 60, "kopf to stop")
        release.touch()
        assert process.wait(timeout=60) == 0
        controller.process = None
        # Read before the controller restarts and moves the policy on.
        told, obj = log_tail(), hsp(cluster, namespace, "q11")
        announced = [m for _, m in events(cluster, namespace, "q11") if m.startswith("step 1:")]
        applied = generation(cluster, namespace, "q11")
    finally:
        del controller.proxy_env[HOLD_APPLY_ENV]
        if controller.process is not None:
            controller.kill9()
        controller.start()
    for bad in ("Traceback", "Event loop is closed", "pass failed", "could not post"):
        assert bad not in told, told
    scaling, ready = condition(obj, "Scaling"), condition(obj, "Ready")
    assert scaling["reason"] == "Stabilizing" and "step 1 applied" in scaling["message"], scaling
    assert ready.get("reason") != "InternalError", ready
    assert applied == initial + 1
    assert announced, "the step's Events"
