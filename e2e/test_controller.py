"""The controller end to end: real API server (with the chart's RBAC), real Prometheus,
the real FlinkDeployment CRD, and the twin standing in for Flink and its operator.

Windows are short (20 s window, 10 s stabilization, 5 s resolution) and the twin's
restart downtime is scaled down, so each test takes a minute or two.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from controller.operator.settings import HOLD_APPLY_ENV
from controller.realize import parse_memory_mib as flink_memory_mib
from controller.record import EVENT_REASONS
from e2e.conftest import Cluster, Twin, wait_until
from e2e.demo import ControllerProcess, flink_deployment, policy
from e2e.stack import StackInfo
from policies.spec import parse_memory_mib

pytestmark = pytest.mark.e2e

GROUP, VERSION, PLURAL = "hybridscaler.dev", "v1alpha1", "hybridscalingpolicies"


@pytest.fixture(scope="module")
def controller(e2e_stack: StackInfo, controller_kubeconfig: Path,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControllerProcess]:
    log = tmp_path_factory.mktemp("controller") / "controller.log"
    process = ControllerProcess(str(controller_kubeconfig), e2e_stack.prometheus_url,
                                e2e_stack.controller_env(), log).start()
    yield process
    process.stop()


def hsp(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    obj: Any = cluster.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
    return dict(obj)


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any]:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c["type"] == type_:
            return dict(c)
    return {}


def events(cluster: Cluster, namespace: str, name: str) -> list[tuple[str, str]]:
    found = cluster.core.list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={name},involvedObject.kind="
        "HybridScalingPolicy")
    return [(e.reason or "", e.message or "") for e in found.items]


def generation(cluster: Cluster, namespace: str, name: str) -> int:
    return int(cluster.flink(namespace, name)["metadata"]["generation"])


def deploy(cluster: Cluster, *docs: dict[str, Any]) -> None:
    cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(docs))


def scale_q11(cluster: Cluster, namespace: str, policy_name: str = "q11",
              upgrade_mode: str = "savepoint", **policy_spec: Any) -> dict[str, Any]:
    """Run q11 until the operator reports it stable, then let a policy scale it.

    Returns the FlinkDeployment as it was before the policy existed.
    """
    deploy(cluster, flink_deployment(namespace, "q11", upgrade_mode=upgrade_mode))
    cluster.wait_flink(namespace, "q11")
    before = cluster.flink(namespace, "q11")
    deploy(cluster, policy(namespace, policy_name, "q11", **policy_spec))
    return before


def reasons(cluster: Cluster, namespace: str, name: str) -> list[str]:
    return [r for r, _ in events(cluster, namespace, name)]


def user_owned(deployment: dict[str, Any]) -> dict[str, Any]:
    """Everything of a FlinkDeployment but what its operator writes (status, resourceVersion)."""
    meta = deployment["metadata"]
    return {
        "spec": deployment["spec"], "generation": meta["generation"],
        "labels": meta.get("labels"), "annotations": meta.get("annotations"),
        "managedFields": [m for m in meta["managedFields"] if m.get("subresource") != "status"],
    }


def converged(twin: Twin, namespace: str, name: str) -> dict[str, Any] | None:
    status = twin.status(namespace, name)
    ok = status["state"] == "RUNNING" and status["sourceRate"] >= 0.95 * status["targetRate"]
    return status if ok else None


def assert_steps_are_consecutive(cluster: Cluster, namespace: str, name: str,
                                 initial_generation: int) -> dict[str, Any]:
    """Every step once: history counts 1..k, and each step patched the deployment once."""

    def settled() -> tuple[dict[str, Any], int] | None:
        # The loop may commit a further step at any time: read between two equal
        # generations, and not while a committed step awaits its patch.
        before = generation(cluster, namespace, name)
        obj = hsp(cluster, namespace, name)
        after = generation(cluster, namespace, name)
        applying = condition(obj, "Scaling").get("reason") == "Reconfiguring"
        return None if applying or before != after else (obj["status"], after)

    status, current = wait_until(settled, 60, "a status no step is being applied from")
    steps = [record["step"] for record in status.get("history") or []]
    assert steps == list(range(status["step"] - len(steps) + 1, status["step"] + 1)), steps
    assert current - initial_generation == status["step"]
    announced = [m for reason, m in events(cluster, namespace, name)
                 if reason in EVENT_REASONS.values()]
    per_vertex = [m.split(" p ", 1)[0] for m in announced]  # "step N: <vertex>"
    assert len(per_vertex) == len(set(per_vertex)), "a step was announced twice"
    return dict(status)


def test_q11_converges_in_one_jump_with_the_capacity_policy(
    controller: ControllerProcess, cluster: Cluster, twin: Twin, namespace: str
) -> None:
    """The default policy: memory and parallelism in one step, what it learned in status,
    and every step's pods and downtime in its Events, which `kubectl describe` shows."""
    initial = scale_q11(cluster, namespace)["metadata"]["generation"]

    wait_until(lambda: converged(twin, namespace, "q11"), 420, "q11 at its target rate")
    status = assert_steps_are_consecutive(cluster, namespace, "q11", initial)
    assert 1 <= status["step"] <= 2, status["history"]
    first = status["history"][0]
    session = next(v for v in first["vertices"] if v.get("memoryLevel") not in (None, 0))
    assert session["parallelism"] > 1  # scaled up and out in the same restart
    learned = {v["vertexId"]: v for v in status["learned"]}
    assert learned[session["vertexId"]]["points"], learned
    decision = status["lastDecision"]
    assert decision["vertices"][0]["branch"] in {
        "deficit", "steady", "surplus", "surplus-waiting", "ride-along", "capacity-unknown"}
    assert "applying this" in first["reason"], first  # why the step was taken, kept
    described = cluster.kubectl("describe", "hsp", "-n", namespace, "q11").stdout
    # The step's Events say what it costs: the pods' bill and the expected downtime (the
    # decision's own reason is overwritten by the next evaluation).
    assert re.search(r"step 1: .*; pods .*; .*expected [\d.]+ s of downtime", described), described
    announced = reasons(cluster, namespace, "q11")
    assert "ScaledUp" in announced, announced


def printer_columns(cluster: Cluster, namespace: str, name: str) -> dict[str, str]:
    """`kubectl get hsp NAME` as a user reads it: the API server's table of the CRD's
    printer columns, each value under its header (tabwriter aligns them)."""
    header, row = cluster.kubectl("get", "hsp", "-n", namespace, name).stdout.splitlines()
    # A header starts after at least two blanks ("LAST DECISION" has one inside).
    starts = [i for i, c in enumerate(header)
              if c != " " and (i == 0 or header[max(0, i - 2):i] == "  ")]
    bounds = [*starts[1:], max(len(header), len(row))]
    return {header[a:b].strip(): row[a:b].strip() for a, b in zip(starts, bounds, strict=True)}


def test_printer_columns_are_what_the_task_manager_pods_request(
    controller: ControllerProcess, cluster: Cluster, twin: Twin, namespace: str
) -> None:
    """CPU and MEMORY of `kubectl get hsp` equal spec.taskManager.resource × replicas of
    the FlinkDeployment, what the cluster reserves; `kubectl describe` also shows what the
    tasks use."""
    started = scale_q11(cluster, namespace)
    initial = started["metadata"]["generation"]
    wait_until(lambda: converged(twin, namespace, "q11"), 420, "q11 at its target rate")
    status = assert_steps_are_consecutive(cluster, namespace, "q11", initial)
    assert status["step"] >= 1

    def consistent() -> tuple[dict[str, str], dict[str, Any]] | None:
        # Between two equal generations of the deployment, after its status caught up.
        before = cluster.flink(namespace, "q11")
        columns = printer_columns(cluster, namespace, "q11")
        after = cluster.flink(namespace, "q11")
        same = before["metadata"]["generation"] == after["metadata"]["generation"]
        tm = after["spec"]["taskManager"]
        replicas = int(tm["replicas"])
        pods_cpu = float(tm["resource"]["cpu"]) * replicas
        # Flink's memory syntax ('2048m' is MiB) on the deployment, Kubernetes' on the column.
        pods_mib = (flink_memory_mib(tm["resource"]["memory"]) or 0) * replicas
        shown = (float(columns["CPU"]), parse_memory_mib(columns["MEMORY"]))
        return (columns, tm) if same and shown == (pods_cpu, pods_mib) else None

    columns, tm = wait_until(consistent, 60, "printer columns equal to the pods' requests")
    # q11's step changed the pods it started with (a shape fitted to its slots, or more of
    # them): the columns follow what runs, not the starting spec.
    first = started["spec"]["taskManager"]
    assert (tm["resource"], tm.get("replicas")) != (first["resource"], first.get("replicas")), tm
    summary = hsp(cluster, namespace, "q11")["status"]["summary"]
    assert summary["taskManagers"] == int(tm["replicas"])
    # What the tasks use is kept beside it.
    assert float(columns["CPU"]) == summary["cpu"] and summary["taskCpu"] > 0, (columns, summary)
    described = cluster.kubectl("describe", "hsp", "-n", namespace, "q11").stdout
    # Requested by the pods, and used by the tasks, side by side.
    assert re.search(rf"Task Managers:\s+{tm['replicas']}\n", described), described
    assert "Task Cpu:" in described and "Task Memory:" in described, described
    announced = [m for r, m in events(cluster, namespace, "q11") if r in EVENT_REASONS.values()]
    assert announced and all("TaskManager" in m and "/h" in m for m in announced), announced


def test_q11_reaches_its_target_rate_with_justins_decisions(
    controller: ControllerProcess, cluster: Cluster, twin: Twin, namespace: str
) -> None:
    initial = scale_q11(cluster, namespace, policy="justin")["metadata"]["generation"]

    wait_until(lambda: converged(twin, namespace, "q11"), 420, "q11 at its target rate")
    status = assert_steps_are_consecutive(cluster, namespace, "q11", initial)
    assert status["step"] >= 2
    announced = reasons(cluster, namespace, "q11")
    # Justin answered the session window's short cache with memory before parallelism.
    assert "ScaledUp" in announced, announced
    # kubectl created the deployment, so it owned spec.taskManager.replicas: the first
    # change of replicas met a server-side apply conflict and took over that field only.
    assert "FieldsTakenOver" in announced, announced
    # One pass may fail transiently on a loaded machine: Ready comes back at the next.
    wait_until(lambda: condition(hsp(cluster, namespace, "q11"), "Ready").get("status")
               == "True", 60, "Ready=True")
    described = cluster.kubectl("describe", "hsp", "-n", namespace, "q11").stdout
    assert "ScaledUp" in described and "cache hit rate" in described
    managed = cluster.flink(namespace, "q11")["metadata"]["managedFields"]
    ours = [m for m in managed if m["manager"] == "hybrid-scaler"]
    assert ours and all(m["operation"] == "Apply" for m in ours)
    decided = {"namespace": namespace, "policy": "q11", "kind": "scale-up", "mode": "Active"}
    assert any(s.name == "hybridscaler_decisions_total" and s.labels == decided and s.value >= 1
               for f in text_string_to_metric_families(controller.metrics()) for s in f.samples)


def test_recommend_patches_nothing_and_a_kubectl_apply_retunes_the_next_decision(
    controller: ControllerProcess, cluster: Cluster, namespace: str
) -> None:
    # Justin's branches: a scale-up under cache pressure, a scale-out without it.
    before = scale_q11(cluster, namespace, "rec", mode="Recommend", policy="justin")

    def session_action() -> str | None:
        decision = (hsp(cluster, namespace, "rec").get("status") or {}).get("lastDecision")
        if not decision:
            return None
        return str(next(v["action"] for v in decision["vertices"]
                        if v["vertexName"].startswith("SessionWindow")))

    assert wait_until(session_action, 120, "a first recommendation") == "scale-up"
    # The pass posts its Events before it saves the status; the wait only covers the
    # API server's list lagging its write.
    wait_until(lambda: "Recommended" in reasons(cluster, namespace, "rec"), 30,
               "a Recommended event")
    # No cache pressure at these thresholds: Justin lets DS2 scale out instead.
    deploy(cluster, policy(namespace, "rec", "q11", mode="Recommend", policy="justin",
                           memory={"cacheHitRateThreshold": 0.1, "stateLatencyThreshold": "1s"}))
    assert wait_until(lambda: session_action() == "scale-out" and "scale-out", 120,
                      "the retuned recommendation")
    obj = hsp(cluster, namespace, "rec")
    assert obj["status"]["observedGeneration"] == obj["metadata"]["generation"] == 2
    assert condition(obj, "Scaling")["reason"] == "Recommended"
    assert obj["spec"]["memory"]["cacheHitRateThreshold"] == 0.1  # spec is the user's
    # Two decisions that would have reconfigured, and the deployment is as the user left it.
    after = cluster.flink(namespace, "q11")
    assert user_owned(after) == user_owned(before)
    assert all(m["manager"] != "hybrid-scaler" for m in after["metadata"]["managedFields"])


def test_kill_9_mid_run_neither_repeats_nor_forgets_a_step(
    controller: ControllerProcess, cluster: Cluster, twin: Twin, namespace: str,
    tmp_path: Path,
) -> None:
    # The test hook (controller/operator/settings.py) holds every FlinkDeployment patch
    # after its step is committed: the kill lands inside the commit-to-apply window.
    hold = tmp_path / "hold"
    hold.mkdir()
    held = hold / f"{namespace}.q11.held"
    controller.kill9()
    controller.proxy_env[HOLD_APPLY_ENV] = str(hold)
    try:
        controller.start()
        # Justin takes several steps to q11's target: a step after the resumed one too.
        initial = scale_q11(cluster, namespace, policy="justin")["metadata"]["generation"]
        wait_until(held.exists, 180, "the first step's patch, held by the test hook")
        committed = hsp(cluster, namespace, "q11")["status"]
        assert committed["step"] == 1 and committed["target"]["step"] == 1
        assert condition({"status": committed}, "Scaling")["reason"] == "Reconfiguring"
        assert generation(cluster, namespace, "q11") == initial  # not applied yet
        controller.kill9()
    finally:
        del controller.proxy_env[HOLD_APPLY_ENV]
        if controller.process is None:
            controller.start()
    # The restarted controller applies the committed step once, and says so.
    resumed = wait_until(
        lambda: [m for r, m in events(cluster, namespace, "q11") if r == "Resumed"], 60,
        "a Resumed event")
    assert resumed[0].startswith("step 1 was committed but not applied"), resumed
    assert hsp(cluster, namespace, "q11")["status"]["history"][0] == committed["history"][0]
    wait_until(lambda: converged(twin, namespace, "q11"), 420, "q11 at its target rate")
    status = assert_steps_are_consecutive(cluster, namespace, "q11", initial)
    assert status["step"] >= 2
    announced = [m for r, m in events(cluster, namespace, "q11") if r in EVENT_REASONS.values()]
    # The pass that committed step 1 died before announcing it; the restart announced
    # a resume, not a second decision.
    assert not any(m.startswith("step 1:") for m in announced), announced
    history = status["history"]
    # Justin's memory of the previous step survived: each record after a scale-up
    # names the hit rate it compared against.
    assert all(v.get("cacheHitRate") is not None for r in history for v in r["vertices"]
               if v.get("memoryLevel") is not None)


def test_invalid_policies_are_rejected_naming_the_field(
    controller: ControllerProcess, cluster: Cluster, namespace: str
) -> None:
    bad = policy(namespace, "bad", "q11", cpu={"utilizationMin": 0.9, "utilizationMax": 0.5})
    done = cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(bad), check=False)
    assert done.returncode != 0 and "spec.cpu.utilizationMin" in done.stderr, done.stderr
    bad = policy(namespace, "bad", "q11", memory={"maxLevel": 0})
    done = cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(bad), check=False)
    assert done.returncode != 0 and "maxLevel" in done.stderr, done.stderr


def test_a_recreated_target_starts_a_fresh_history(
    controller: ControllerProcess, cluster: Cluster, twin: Twin, namespace: str
) -> None:
    scale_q11(cluster, namespace)
    old = wait_until(lambda: (hsp(cluster, namespace, "q11").get("status") or {})
                     .get("step", 0) >= 1 and hsp(cluster, namespace, "q11")["status"], 180,
                     "the first step")
    old_uid = cluster.flink(namespace, "q11")["metadata"]["uid"]
    assert old["targetUid"] == old_uid
    cluster.kubectl("delete", "flinkdeployment", "-n", namespace, "q11", "--wait")
    missing = wait_until(lambda: condition(hsp(cluster, namespace, "q11"), "Ready").get(
        "reason") == "TargetNotFound" and hsp(cluster, namespace, "q11")["status"], 60,
        "TargetNotFound")
    assert missing["step"] == old["step"] and missing["targetUid"] == old_uid  # kept
    deploy(cluster, flink_deployment(namespace, "q11"))  # the same name, a new object
    cluster.wait_flink(namespace, "q11")
    new_uid = cluster.flink(namespace, "q11")["metadata"]["uid"]
    told = wait_until(
        lambda: [m for r, m in events(cluster, namespace, "q11") if r == "TargetReplaced"],
        60, "a TargetReplaced event")
    assert old_uid in told[0] and new_uid in told[0], told
    # The Event is sent during the pass, the status written at its end: wait for both.
    fresh = wait_until(lambda: (hsp(cluster, namespace, "q11").get("status") or {}).get(
        "targetUid") == new_uid and hsp(cluster, namespace, "q11")["status"], 30,
        "the status of the new target")
    assert fresh["replacedTarget"]["uid"] == old_uid
    assert fresh["replacedTarget"]["step"] == missing["step"]
    # The new job's first step is step 1 again, decided from its own window.
    assert fresh.get("step", 0) <= 1 and all(r["step"] == 1 for r in fresh.get("history", []))


def test_a_missing_target_is_reported(
    controller: ControllerProcess, cluster: Cluster, namespace: str
) -> None:
    deploy(cluster, policy(namespace, "orphan", "nowhere"))
    ready = wait_until(lambda: condition(hsp(cluster, namespace, "orphan"), "Ready") or None,
                       60, "the Ready condition")
    assert (ready["status"], ready["reason"]) == ("False", "TargetNotFound")
    # Posted by the pass before its status write; a failed post is only logged.
    wait_until(lambda: "TargetNotFound" in reasons(cluster, namespace, "orphan"), 30,
               "a TargetNotFound event")


def refusal(cluster: Cluster, namespace: str, name: str) -> str:
    """The first Refused event's message, once the status says Scaling=Refused too."""
    refused = wait_until(
        lambda: [m for r, m in events(cluster, namespace, name) if r == "Refused"], 120,
        "a Refused event")
    # The pass posts the event first and saves the status after it.
    wait_until(lambda: condition(hsp(cluster, namespace, name), "Scaling").get("reason")
               == "Refused", 30, "Scaling=Refused")
    return str(refused[0])


def test_refuses_a_stateless_upgrade_mode(
    controller: ControllerProcess, cluster: Cluster, namespace: str
) -> None:
    initial = scale_q11(cluster, namespace, upgrade_mode="stateless")["metadata"]["generation"]
    assert "upgradeMode is stateless" in refusal(cluster, namespace, "q11")
    assert generation(cluster, namespace, "q11") == initial


def test_refuses_a_deployment_the_flink_operators_autoscaler_scales(
    controller: ControllerProcess, cluster: Cluster, namespace: str
) -> None:
    """Both autoscalers on one job: the operator's would write its own parallelism
    overrides over every step. Refused, naming the key; switched off, the step lands."""
    deployment = flink_deployment(namespace, "q11")
    deployment["spec"]["flinkConfiguration"]["job.autoscaler.enabled"] = "true"
    deploy(cluster, deployment)
    cluster.wait_flink(namespace, "q11")
    deploy(cluster, policy(namespace, "q11", "q11"))
    assert ('spec.flinkConfiguration["job.autoscaler.enabled"] is true'
            in refusal(cluster, namespace, "q11"))
    assert hsp(cluster, namespace, "q11")["status"].get("target") is None
    deployment["spec"]["flinkConfiguration"]["job.autoscaler.enabled"] = "false"
    deploy(cluster, deployment)  # the stand-in restarts the job (the operator would not)
    wait_until(lambda: (hsp(cluster, namespace, "q11")["status"].get("target") or {})
               .get("step"), 240, "a step committed once the operator's is off")

