"""Faults the controller must ride out: Prometheus going away and coming back, a pass
that fails on something nobody mapped, and a shutdown in the middle of a pass.

The policy reads a Prometheus of its own (spec.metrics.prometheusUrl) that scrapes
the twin, so stopping it does not disturb the shared stack.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from controller.operator.settings import HOLD_APPLY_ENV
from e2e.conftest import Cluster, wait_until
from e2e.demo import ControllerProcess, flink_deployment, policy
from e2e.stack import StackInfo
from e2e.test_controller import (
    assert_steps_are_consecutive,
    condition,
    controller,
    deploy,
    events,
    generation,
    hsp,
    scale_q11,
)
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


def change_freeze(namespace: str, marker: str) -> list[dict[str, Any]]:
    """A cluster admin's change freeze: no update may change a FlinkDeployment's spec in
    `namespace` (a ValidatingAdmissionPolicy, as an admission controller or policy engine
    would enforce it). Its message is remote text the controller must not repeat."""
    name = f"change-freeze-{namespace}"
    return [
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
         "metadata": {"name": name},
         "spec": {"failurePolicy": "Fail",
                  "matchConstraints": {"resourceRules": [{
                      "apiGroups": ["flink.apache.org"], "apiVersions": ["*"],
                      "operations": ["UPDATE"], "resources": ["flinkdeployments"]}]},
                  "validations": [{"expression": "object.spec == oldObject.spec",
                                   "message": f"{marker}: change freeze, no spec changes"}]}},
        {"apiVersion": "admissionregistration.k8s.io/v1",
         "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": name},
         "spec": {"policyName": name, "validationActions": ["Deny"],
                  "matchResources": {"namespaceSelector": {"matchLabels": {
                      "kubernetes.io/metadata.name": namespace}}}}},
    ]


def stage_errors(controller: ControllerProcess, namespace: str, name: str, stage: str) -> float:
    """hybridscaler_errors_total{stage=...} of one policy: its passes that failed there."""
    for family in text_string_to_metric_families(controller.metrics()):
        if family.name == "hybridscaler_errors":
            return sum(s.value for s in family.samples if s.name.endswith("_total")
                       and s.labels == {"namespace": namespace, "policy": name,
                                        "stage": stage})
    return 0.0


def test_an_admission_refusal_of_our_patch_is_named_once_and_the_step_lands_after(
    controller: ControllerProcess, cluster: Cluster, namespace: str,
) -> None:
    """The API server refuses the controller's patch of the FlinkDeployment (an admission
    rule the controller knows nothing of): Scaling=False/PatchRefused with the HTTP code and
    a message of our own (never the rule's text), one Warning Event however many passes are
    refused, and the committed step is applied, once, when the rule goes."""
    marker = f"FREEZE-{uuid.uuid4().hex[:8]}"
    freeze = change_freeze(namespace, marker)
    deploy(cluster, flink_deployment(namespace, "q11"))
    cluster.wait_flink(namespace, "q11")
    initial = generation(cluster, namespace, "q11")
    deploy(cluster, *freeze)
    try:
        edit = ("patch", "flinkdeployment", "q11", "-n", namespace, "--type=merge", "-p",
                '{"spec":{"taskManager":{"replicas":3}}}', "--dry-run=server")
        # The API server loads a new admission policy asynchronously.
        wait_until(lambda: marker in cluster.kubectl(*edit, check=False).stderr or None, 60,
                   "the change freeze to take effect")
        deploy(cluster, policy(namespace, "q11", "q11"))

        def refused() -> dict[str, Any] | None:
            scaling = condition(hsp(cluster, namespace, "q11"), "Scaling")
            return scaling if scaling.get("reason") == "PatchRefused" else None

        scaling = wait_until(refused, 180, "Scaling=False, PatchRefused")
        assert scaling["status"] == "False", scaling
        # The HTTP code and our own words: nothing of the rule's answer.
        assert re.search(rf"step 1: the API server refused the patch of FlinkDeployment "
                         rf"{namespace}/q11 with HTTP (400|403|422) ", scaling["message"]), scaling
        assert scaling["message"].endswith(
            "retried every pass, and no new step is decided until it lands or the policy "
            "is edited"), scaling
        # Several passes are refused (every 5 s) ...
        wait_until(lambda: stage_errors(controller, namespace, "q11", "realize") >= 4 or None,
                   60, "four refused passes")
        # ... and say so once: one Event, the condition as the first left it.
        again = condition(hsp(cluster, namespace, "q11"), "Scaling")
        assert (again["reason"], again["message"]) == (scaling["reason"], scaling["message"])
        warned = [m for r, m in events(cluster, namespace, "q11") if r == "PatchRefused"]
        assert warned == [scaling["message"]], warned
        status = yaml.safe_dump(hsp(cluster, namespace, "q11")["status"])
        told = " ".join(m for _, m in events(cluster, namespace, "q11"))
        for remote in (marker, f"change-freeze-{namespace}", "denied", "Forbidden", "Invalid"):
            assert remote not in status and remote not in told, remote
        assert generation(cluster, namespace, "q11") == initial  # nothing got through
    finally:
        for doc in reversed(freeze):
            cluster.kubectl("delete", doc["kind"], doc["metadata"]["name"],
                            "--ignore-not-found")

    def recovered() -> dict[str, Any] | None:
        obj = hsp(cluster, namespace, "q11")
        return obj if condition(obj, "Scaling").get("reason") != "PatchRefused" else None

    wait_until(recovered, 120, "the PatchRefused condition cleared")
    # One pass may fail transiently on a loaded machine: Ready comes back at the next.
    wait_until(lambda: condition(hsp(cluster, namespace, "q11"), "Ready").get("status")
               == "True", 60, "Ready=True")
    # The step committed before the first failure is applied once, not decided again.
    settled = assert_steps_are_consecutive(cluster, namespace, "q11", initial)
    assert settled["history"][0]["step"] == 1
