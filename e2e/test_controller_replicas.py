"""One writer per policy status, on the real API server (issue 16.5).

Two controller replicas whose peering is misconfigured (each `--standalone`, so
both are Active) run the same policy. Status writes are conditional on the
policy's resourceVersion, and a pass whose write conflicts runs again on the
re-read status: the history must read as if one controller had written it.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config, watch

from controller.adapters.kube import KubeStatusStore
from controller.api import Status
from controller.ports import StatusConflict
from e2e.conftest import Cluster, wait_until
from e2e.demo import ControllerProcess, policy
from e2e.stack import StackInfo
from e2e.test_controller import (
    GROUP,
    PLURAL,
    VERSION,
    assert_steps_are_consecutive,
    deploy,
    events,
    hsp,
    scale_q11,
)

pytestmark = pytest.mark.e2e


@pytest.fixture
def replicas(e2e_stack: StackInfo, controller_kubeconfig: Path, namespace: str,
             tmp_path: Path) -> Iterator[list[ControllerProcess]]:
    started: list[ControllerProcess] = []
    try:
        for i in range(2):  # ControllerProcess runs `--standalone`: no peering, both Active
            started.append(ControllerProcess(
                str(controller_kubeconfig), e2e_stack.prometheus_url,
                e2e_stack.controller_env(), tmp_path / f"replica-{i}.log",
                namespaces=(namespace,)).start())
        yield started
    finally:
        for process in started:
            process.stop()


class StatusWatch:
    """Every version of a policy's status the API server stores, in order (a watch)."""

    def __init__(self, cluster: Cluster, namespace: str, name: str) -> None:
        self.versions: list[dict[str, Any]] = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.run, args=(cluster, namespace, name),
                                       daemon=True)
        self.thread.start()

    def run(self, cluster: Cluster, namespace: str, name: str) -> None:
        version = None
        while not self.stopping.is_set():
            stream = watch.Watch().stream(  # type: ignore[no-untyped-call]
                cluster.custom.list_namespaced_custom_object, GROUP, VERSION, namespace,
                PLURAL, field_selector=f"metadata.name={name}", timeout_seconds=2,
                **({"resource_version": version} if version else {}))
            for event in stream:
                obj = event["object"]
                version = obj["metadata"]["resourceVersion"]
                if obj.get("status") and (not self.versions
                                          or self.versions[-1] != obj["status"]):
                    self.versions.append(obj["status"])

    def stop(self) -> list[dict[str, Any]]:
        self.stopping.set()
        self.thread.join(timeout=10)
        return self.versions


def test_two_active_replicas_write_one_history(
    replicas: list[ControllerProcess], cluster: Cluster, namespace: str
) -> None:
    seen = StatusWatch(cluster, namespace, "q11")
    try:
        # Justin takes several steps to q11's target: races over more than one step.
        initial = scale_q11(cluster, namespace, policy="justin")["metadata"]["generation"]
        wait_until(lambda: int((hsp(cluster, namespace, "q11").get("status") or {})
                               .get("step") or 0) >= 2, 420, "two steps")
        status = assert_steps_are_consecutive(cluster, namespace, "q11", initial)
    finally:
        versions = seen.stop()
    # In every stored version, in order: the step counter goes up by one at a time,
    # and a step, once recorded, is the same decision in every later version.
    steps = [int(v.get("step") or 0) for v in versions]
    assert all(0 <= b - a <= 1 for a, b in itertools.pairwise(steps)), steps
    first: dict[int, Any] = {}
    for v in versions:
        for record in v.get("history") or []:
            assert first.setdefault(record["step"], record) == record, (
                f"step {record['step']} was decided twice")
    targets = [v["target"]["step"] for v in versions if v.get("target")]
    assert targets == sorted(targets), targets
    assert status["step"] >= 2 and set(first) >= {1, 2}
    # Both replicas were Active: each wrote, and some write lost a race and was re-run.
    logs = [p.log.read_text() for p in replicas]
    assert all("q11" in log for log in logs)
    assert sum(log.count("status changed under pass") for log in logs) >= 1
    # A replica may finish the other's committed step (`Resumed`) when it reads the
    # status between that step's commit and its patch. That is the same target, applied
    # once (the generation check above): it must name a step of the one history.
    resumed = [m for r, m in events(cluster, namespace, "q11") if r == "Resumed"]
    assert all(int(m.split()[1]) in first for m in resumed), resumed


def test_a_status_write_from_an_old_resource_version_conflicts(
    cluster: Cluster, controller_kubeconfig: Path, namespace: str
) -> None:
    # The controller's own identity (the chart's RBAC): it may read and write status.
    objects = client.CustomObjectsApi(
        config.new_client_from_config(config_file=str(controller_kubeconfig)))  # type: ignore[no-untyped-call]
    deploy(cluster, policy(namespace, "p", "nowhere"))
    obj: Any = objects.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "p")
    first, second = KubeStatusStore(objects, obj), KubeStatusStore(objects, obj)
    first.save(Status(step=1))
    with pytest.raises(StatusConflict):
        second.confirm()  # about to act on the status before first's write
    with pytest.raises(StatusConflict):
        KubeStatusStore(objects, obj).save(Status(step=7))  # decided from that status
    assert hsp(cluster, namespace, "p")["status"]["step"] == 1
    _, reread = second.latest()  # the conflict re-read the policy
    assert reread.step == 1
    version = second.version
    second.confirm()  # current: passes, and stores nothing
    assert hsp(cluster, namespace, "p")["metadata"]["resourceVersion"] == version
    second.save(reread.model_copy(update={"step": 2}))
    assert hsp(cluster, namespace, "p")["status"]["step"] == 2
    with pytest.raises(StatusConflict):
        first.save(Status(step=3))
    # A change outside status (a spec edit) leaves the status current: the write goes
    # through at the new resourceVersion, with no conflict for the pass to handle.
    deploy(cluster, policy(namespace, "p", "nowhere", metrics={"window": "30s"}))
    second.save(Status(step=3))
    assert hsp(cluster, namespace, "p")["status"]["step"] == 3
