"""Quiet passes (issue 16.7): while no evaluation can be due, a pass reads only what
its mode needs, and says when the evaluation can be due; any doubt means a full pass.

The loop with the fakes of test_loop, counting what each pass reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from controller.api import ConditionType
from controller.ports import FlinkRestError, JobSummary
from controller.realize import OVERRIDES_KEY
from controller.record import Reason
from tests.controller.test_loop import (
    COUNTER,
    SOURCE,
    T0,
    FakeDeployments,
    FakeFlink,
    FakeMetrics,
    VertexMetrics,
    World,
    flink_deployment,
    graph,
    policy,
    scaling_reason,
)

WINDOW = 20.0  # test_loop's policy: window 20 s, stabilization 10 s, resolution 5 s


@dataclass
class CountingDeployments(FakeDeployments):
    reads: int = 0

    def get(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        self.reads += 1
        return super().get(namespace, name)


@dataclass
class CountingFlink(FakeFlink):
    reads: int = 0
    down: bool = False

    def job(self) -> JobSummary | None:
        self.reads += 1
        if self.down:
            raise FlinkRestError("Flink REST did not answer within 4.0s")
        return super().job()


def with_uid(uid: str = "uid-1") -> dict[str, Any]:
    deployment = flink_deployment()
    deployment["metadata"]["uid"] = uid
    return deployment


@dataclass
class Counted(World):
    deployments: FakeDeployments = field(
        default_factory=lambda: CountingDeployments(with_uid()))
    flink: FakeFlink = field(default_factory=lambda: CountingFlink(graph()))

    def reads(self) -> tuple[int, int]:
        assert isinstance(self.deployments, CountingDeployments)
        assert isinstance(self.flink, CountingFlink)
        return self.deployments.reads, self.flink.reads


def steady() -> FakeMetrics:
    """The counter comfortably within its utilization band: decisions change nothing."""
    return FakeMetrics(VertexMetrics(300, 600, 0, 0, 0))


def test_a_recommend_pass_reads_nothing_until_the_evaluation_can_be_due() -> None:
    world = Counted()
    first = world.run(policy("Recommend"))
    assert first.outcome == "recommended" and world.reads() == (1, 1)
    saves = len(world.store.saved)
    for dt in (5, 10, 19.9):
        world.now = T0 + dt
        result = world.run(policy("Recommend"))
        assert result.outcome == "quiet" and result.due == T0 + WINDOW
    assert world.reads() == (1, 1) and world.metrics.observed == 1
    assert len(world.store.saved) == saves  # nothing changed, nothing written
    world.now = T0 + WINDOW
    assert world.run(policy("Recommend")).outcome == "recommended"
    assert world.reads() == (2, 2) and world.metrics.observed == 2


def test_a_quiet_pass_reports_the_earliest_due_time_and_a_full_pass_the_exact_one() -> None:
    world = Counted()
    world.run(policy("Recommend"))
    assert isinstance(world.flink, FakeFlink)
    world.run(policy("Recommend"))
    world.now = T0 + 5
    world.run(policy("Recommend"), generation=2)  # a spec edit: a full pass
    world.now = T0 + 6
    # Quiet knows only the last evaluation: the earliest the evaluation can be due.
    result = world.run(policy("Recommend"), generation=2)
    assert result.outcome == "quiet" and result.due == T0 + WINDOW
    # The job restarted without a step of ours (controller/jobhealth.py): no decision
    # before a full window after stabilization from the restart, and no quiet pass.
    world.flink.start_ms = int((T0 + 3) * 1000)
    world.now = T0 + WINDOW
    result = world.run(policy("Recommend"), generation=2)
    assert result.outcome == "job-restarted" and result.due == T0 + 3 + 10 + WINDOW
    world.now = T0 + WINDOW + 1
    result = world.run(policy("Recommend"), generation=2)
    assert result.outcome == "job-restarted" and result.due == T0 + 3 + 10 + WINDOW
    world.now = T0 + 3 + 10 + WINDOW
    assert world.run(policy("Recommend"), generation=2).outcome == "recommended"


def test_doubt_means_a_full_pass() -> None:
    world = Counted()
    world.run(policy("Recommend"))
    world.now = T0 + 5
    # A spec edit (a new generation) is read whole, even before the window is up.
    assert world.run(policy("Recommend"), generation=2).outcome == "window-filling"
    assert world.reads() == (2, 2)
    world.now = T0 + 6
    assert world.run(policy("Recommend"), generation=2).outcome == "quiet"
    # An error the last pass recorded is retried every resolution.
    assert isinstance(world.flink, CountingFlink)
    world.flink.down = True
    world.now = T0 + WINDOW
    assert world.run(policy("Recommend"), generation=2).outcome == "job-unavailable"
    ready = world.store.last.condition(ConditionType.READY)
    assert ready is not None and ready.reason == Reason.JOB_UNAVAILABLE
    world.flink.down = False
    world.now = T0 + WINDOW + 5
    assert world.run(policy("Recommend"), generation=2).outcome == "recommended"


def test_a_recommend_target_deleted_or_replaced_is_seen_when_the_evaluation_is_due() -> None:
    world = Counted()
    world.run(policy("Recommend"))
    world.deployments.deployment = with_uid("uid-2")
    world.now = T0 + 5
    assert world.run(policy("Recommend")).outcome == "quiet"
    world.now = T0 + WINDOW
    world.run(policy("Recommend"))
    assert world.store.last.target_uid == "uid-2"
    assert world.store.last.replaced_target is not None
    assert Reason.TARGET_REPLACED in world.events.reasons()


def test_an_active_pass_reads_the_deployment_but_not_the_job() -> None:
    world = Counted()
    world.metrics = steady()
    first = world.run()
    assert first.outcome == "unchanged" and scaling_reason(world.store.last) == Reason.STEADY
    world.now = T0 + 5
    assert world.run().outcome == "quiet" and world.reads() == (2, 1)
    # A replaced target is noticed within one resolution in Active mode.
    world.deployments.deployment = with_uid("uid-2")
    world.now = T0 + 10
    assert world.run().outcome == "unchanged"  # a fresh history evaluates at once
    assert world.reads() == (3, 2)
    assert Reason.TARGET_REPLACED in world.events.reasons()


def test_an_applied_step_is_watched_until_observed_then_drift_is_reapplied_quietly() -> None:
    world = Counted()
    world.run()  # a step, committed and applied: Scaling=Stabilizing
    assert scaling_reason(world.store.last) == Reason.STABILIZING
    world.now = T0 + 3
    assert world.run().outcome == "stabilizing"  # not quiet: a step in flight
    # The job restarts with the step; once stabilized and observed, passes go quiet.
    assert isinstance(world.flink, FakeFlink)
    world.flink.start_ms = int((T0 + 1) * 1000)
    world.now = T0 + 4
    assert world.run().outcome == "stabilizing"
    assert world.store.last.enactments[-1].observed_downtime_s is not None
    world.now = T0 + 5  # observed, but stabilizing: Scaling turns Stable by a full pass
    assert world.run().outcome == "stabilizing"
    world.now = T0 + 12
    world.run()
    assert scaling_reason(world.store.last) == Reason.STABLE
    world.now = T0 + 13
    job_reads = world.reads()[1]
    assert world.run().outcome == "quiet"
    # A hand edit of an owned field is re-applied by a quiet pass, without the job.
    assert world.deployments.deployment is not None
    conf = world.deployments.deployment["spec"]["flinkConfiguration"]
    wanted = conf[OVERRIDES_KEY]
    conf[OVERRIDES_KEY] = f"{SOURCE}:1,{COUNTER}:1"
    world.now = T0 + 14
    result = world.run()
    assert result.outcome == "reapplied" and conf[OVERRIDES_KEY] == wanted
    assert world.reads()[1] == job_reads


def test_quiet_and_full_passes_serve_one_due_time_after_a_step() -> None:
    """The waiting rule's due time is computed once (gate.due_time): after a step, a quiet
    pass counts the stabilization too, rather than waking a window after the decision."""
    world = Counted()
    world.run()  # a step at T0, committed and applied
    assert isinstance(world.flink, FakeFlink)
    world.flink.start_ms = int(T0 * 1000)  # the job restarted with it at once
    world.now = T0 + 4
    world.run()
    world.now = T0 + 12
    full = world.run()  # Stable: a full pass waits for the window after stabilization
    assert full.outcome == "window-filling" and full.due == T0 + 10 + WINDOW
    world.now = T0 + 13
    quiet = world.run()
    assert quiet.outcome == "quiet" and quiet.due == full.due
