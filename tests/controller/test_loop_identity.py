"""One history per job and one writer per status (issue 16.5), and a failing pass made
visible (16.3): the loop with the fakes of test_loop, plus a store whose saves are
conditional on a version, as the API server's resourceVersion makes them.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from controller.api import ConditionType, HybridScalingPolicy, Status
from controller.loop import CONFLICT_ATTEMPTS, ERRORS_LOGGED, reconcile
from controller.ports import Collected, MetricsUnavailable, Ports, StatusConflict
from controller.record import Reason
from policies.model import JobGraph
from tests.controller.test_loop import (
    FakeDeployments,
    FakeEvents,
    FakeFlink,
    FakeMetrics,
    World,
    flink_deployment,
    graph,
    overloaded,
    policy,
    scaling_reason,
)

POLICY_DOC: dict[str, Any] = {
    "apiVersion": "hybridscaler.dev/v1alpha1", "kind": "HybridScalingPolicy",
    "metadata": {"name": "p", "namespace": "ns", "generation": 1},
    "spec": {"targetRef": {"name": "q11"}, "mode": "Active",
             "metrics": {"window": "20s", "stabilization": "10s", "resolution": "5s"}},
}


@dataclass
class Server:
    """The policy object on the API server: its status and resourceVersion."""

    status: Status = field(default_factory=Status)
    version: int = 1
    writes: list[Status] = field(default_factory=list)

    def write(self, status: Status) -> None:
        self.status, self.version = status, self.version + 1
        self.writes.append(status)


@dataclass
class ConditionalStore:
    """One replica's view (KubeStatusStore's contract): saves succeed only at the version
    last read or written; a conflict re-reads."""

    server: Server
    seen: int = 1
    last: Status = field(default_factory=Status)
    conflicts: int = 0

    def save(self, status: Status) -> None:
        self.confirm()
        self.server.write(status)
        self.seen, self.last = self.server.version, status

    def confirm(self) -> None:
        if self.seen != self.server.version:
            self.conflicts += 1
            self.seen, self.last = self.server.version, self.server.status
            raise StatusConflict("changed")

    def latest(self) -> tuple[Mapping[str, Any], Status]:
        return POLICY_DOC, self.last


@dataclass
class Replica:
    """One controller process: its own store and in-memory status, as the kopf daemon."""

    store: ConditionalStore
    world: World
    events: FakeEvents = field(default_factory=FakeEvents)
    status: Status = field(default_factory=Status)

    def run(self, p: HybridScalingPolicy | None = None) -> str:
        w = self.world
        ports = Ports(w.deployments, self.store, self.events,
                      flink=lambda ns, name: w.flink, metrics=lambda url: w.metrics,
                      clock=lambda: w.now)
        result = reconcile(p or policy(), 1, self.status, ports)
        self.status = result.status
        return result.outcome


def test_two_active_replicas_never_interleave_the_history() -> None:
    world, server = World(), Server()
    a, b = Replica(ConditionalStore(server), world), Replica(ConditionalStore(server), world)
    for _ in range(40):  # both replicas pass every 5 s for 200 s
        world.now += 5
        a.run()
        b.run()
    steps = [s.step for s in server.writes]
    assert steps == sorted(steps) and max(steps) >= 2, steps
    assert all(n - m <= 1 for m, n in itertools.pairwise(steps)), steps
    # Each step was decided once: its history record is the same in every later write.
    first: dict[int, Any] = {}
    for s in server.writes:
        for r in s.history:
            assert first.setdefault(r.step, r) == r, f"step {r.step} decided twice"
    # Each committed target was applied once, and only a committed one.
    assert len(world.deployments.applied) == max(steps)
    announced = [m for _, r, m in a.events.events + b.events.events if r == "ScaledUp"]
    assert len(announced) == len(set(announced)) >= 1
    assert a.store.conflicts + b.store.conflicts >= 1


def test_a_commit_decided_from_stale_history_is_never_applied() -> None:
    world, server = World(), Server()
    a, b = Replica(ConditionalStore(server), world), Replica(ConditionalStore(server), world)
    assert a.run() == "reconfigured"  # step 1 committed and applied by a
    world.deployments.deployment = flink_deployment()  # as if step 1 had not landed yet
    # b still holds the status it read before a's step: it decides step 1 again, its
    # commit conflicts, and the pass runs again on a's history (stabilizing: no step).
    assert b.run() == "reapplied" and b.store.conflicts == 1
    assert [s.step for s in server.writes if s.target is not None][-1] == 1
    assert server.status.step == 1 and len(server.status.history) == 1
    # b finished a's target (the deployment lacked it); its own decision went nowhere.
    assert world.deployments.applied[0] == world.deployments.applied[1]


def test_a_stale_target_is_never_reapplied_over_a_newer_one() -> None:
    world, server = World(), Server()
    a = Replica(ConditionalStore(server), world)
    a.run()  # step 1, committed and applied
    b = Replica(ConditionalStore(server, seen=server.version, last=server.status), world,
                status=server.status)  # b read the policy here, then stopped writing
    while server.status.step < 2:
        world.now += 5
        a.run()
    assert len(world.deployments.applied) == 2
    # b's status still holds step 1's target, which differs from the deployment (step
    # 2): applying it would roll the job back. b's pass stops before deciding (no
    # metrics), so no write of its own would catch the staleness before the patch:
    # realize checks that its status is current first.
    world.metrics.counter = None
    world.now += 5
    assert b.run() == "stabilizing"  # re-run on the current status: step 2 settles
    assert len(world.deployments.applied) == 2 and b.store.conflicts == 1
    assert "Reapplied" not in b.events.reasons()


def test_a_pass_that_keeps_conflicting_gives_up_without_applying() -> None:
    world, server = World(), Server()

    class Interloper(ConditionalStore):
        def save(self, status: Status) -> None:
            self.server.write(self.server.status)  # someone writes first, every time
            super().save(status)

    replica = Replica(Interloper(server), world)
    assert replica.run() == "conflict"
    assert replica.store.conflicts == CONFLICT_ATTEMPTS
    assert world.deployments.applied == [] and server.status.step == 0


def with_uid(uid: str) -> dict[str, Any]:
    deployment = flink_deployment()
    deployment["metadata"]["uid"] = uid
    return deployment


def test_a_recreated_target_starts_a_fresh_history() -> None:
    world = World(deployments=FakeDeployments(with_uid("uid-1")))
    world.run()
    first = world.store.last
    assert first.target_uid == "uid-1" and first.step == 1 and first.target is not None
    world.now += 5
    world.deployments.deployment = None  # deleted: the target is missing, history kept
    assert world.run().outcome == "target-not-found"
    assert world.store.last.step == 1 and world.store.last.target_uid == "uid-1"
    world.now += 5
    world.deployments.deployment = with_uid("uid-2")  # recreated under the same name
    world.flink.start_ms = int(world.now * 1000)  # its job just started
    applied = len(world.deployments.applied)
    assert world.run().outcome == "stabilizing"  # the new job's own wait, from its start
    fresh = world.store.last
    assert fresh.target_uid == "uid-2" and fresh.step == 0 and fresh.history == ()
    assert fresh.target is None and fresh.last_decision is None
    assert fresh.last_reconfiguration_time is None and fresh.scale_down_wanted_since == ()
    assert fresh.replaced_target is not None
    assert (fresh.replaced_target.uid, fresh.replaced_target.step) == ("uid-1", 1)
    assert scaling_reason(fresh) == Reason.STABILIZING  # the new job's start
    [told] = [m for _, r, m in world.events.events if r == Reason.TARGET_REPLACED]
    assert "uid-1" in told and "uid-2" in told
    assert len(world.deployments.applied) == applied  # the old job's target is not applied
    # Its first step is step 1 again.
    world.now += 40
    world.run()
    assert world.store.last.step == 1 and world.store.last.history[0].step == 1


def test_a_status_without_a_uid_adopts_the_target_without_forgetting() -> None:
    world = World(deployments=FakeDeployments(flink_deployment()))  # no uid: nothing tracked
    world.run()
    assert world.store.last.target_uid is None and world.store.last.step == 1
    world.deployments.deployment["metadata"]["uid"] = "uid-1"  # type: ignore[index]
    world.now += 5
    world.run()
    assert world.store.last.target_uid == "uid-1" and world.store.last.step == 1
    assert Reason.TARGET_REPLACED not in world.events.reasons()


class BrokenMetrics(FakeMetrics):
    """A metrics port that fails the way a buggy adapter would, echoing remote text."""

    error: Exception = RuntimeError("upstream said: <html>secret-token-123</html>")

    def observe(self, graph: JobGraph, job_id: str, now: float, window_s: float,
                resolution_s: float) -> Collected | MetricsUnavailable:
        raise self.error


def test_an_exception_in_a_pass_is_a_condition_an_event_and_one_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ERRORS_LOGGED.clear()
    world = World(metrics=BrokenMetrics(overloaded(0.5)), flink=FakeFlink(graph()))
    caplog.set_level(logging.DEBUG, logger="controller.loop")
    for _ in range(3):
        assert world.run().outcome == "internal-error"
        world.now += 5
    ready = world.store.last.condition(ConditionType.READY)
    assert ready is not None and (ready.status, ready.reason) == ("False", "InternalError")
    assert "RuntimeError" in ready.message and "collect" in ready.message
    assert "secret" not in ready.message and "Traceback" not in ready.message
    warnings = [(t, m) for t, r, m in world.events.events if r == "InternalError"]
    assert warnings == [("Warning", ready.message)]
    assert all("secret" not in m for _, _, m in world.events.events)
    tracebacks = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(tracebacks) == 1 and tracebacks[0].exc_info is not None
    assert world.store.last.step == 0 and world.deployments.applied == []

    # A different error is announced and logged again.
    world.metrics.error = KeyError("x")  # type: ignore[attr-defined]
    world.run()
    assert len([r for _, r, _ in world.events.events if r == "InternalError"]) == 2
    assert len([r for r in caplog.records if r.levelno == logging.ERROR]) == 2

    # Fixed: the next pass evaluates, Ready again.
    world.metrics = FakeMetrics(overloaded(0.5))
    world.now += 5
    assert world.run().outcome == "reconfigured"
    ready = world.store.last.condition(ConditionType.READY)
    assert ready is not None and ready.status == "True"


def test_an_exception_after_the_commit_keeps_the_step_for_the_next_pass() -> None:
    ERRORS_LOGGED.clear()
    world = World()

    def broken(namespace: str, name: str, body: Mapping[str, Any]) -> str:
        raise ValueError("a bug in the patch")

    world.deployments.apply = broken  # type: ignore[method-assign]
    assert world.run().outcome == "internal-error"
    committed = world.store.last
    assert committed.step == 1 and committed.target is not None
    ready = committed.condition(ConditionType.READY)
    assert ready is not None and "realize" in ready.message
    del world.deployments.apply  # the fake's own method again
    world.now += 5
    assert world.run().outcome == "resumed" and world.store.last.step == 1
