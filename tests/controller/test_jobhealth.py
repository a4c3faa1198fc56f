"""Job health (controller/jobhealth.py) and ownership (controller/owner.py) on the loop's
fakes: a restart loop is named, warned about once and never decided from; a second
policy on an owned deployment patches nothing and takes over once the owner is gone."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

import pytest

from controller.api import ConditionType, StepEnactment
from controller.jobhealth import check_job
from controller.owner import OWNER_ANNOTATION
from controller.ports import JobSummary
from controller.record import Run, Stop
from policies.model import JobGraph
from policies.restart_cost import Enactment
from tests.controller.test_loop import T0, FakeFlink, World, graph, policy


@dataclass
class RestartingFlink(FakeFlink):
    """A job that comes back with a new id (and start) whenever `restart` is called."""

    incarnation: int = 0

    def restart(self, at: float) -> None:
        self.incarnation += 1
        self.start_ms = int(at * 1000)

    def job(self) -> JobSummary | None:
        return JobSummary(f"{self.incarnation:032x}", "q", "RUNNING", self.start_ms,
                          self.start_ms)

    def job_graph(self, jid: str, uid_candidates: Iterable[str] = (),
                  operator_ids: Mapping[str, Iterable[str]] | None = None) -> JobGraph:
        return super().job_graph(jid, uid_candidates, operator_ids)


def test_a_restart_loop_is_named_warned_once_and_not_decided_from() -> None:
    flink = RestartingFlink(graph())
    world = World(flink=flink)
    p = policy("Recommend", metrics={"window": "20s", "stabilization": "0s",
                                     "resolution": "5s"})
    world.run(p)
    observed = world.metrics.observed
    for i in range(1, 9):  # a new job every 6 s, as a crash-looping job does
        world.now = T0 + 6 * i
        flink.restart(world.now - 1)
        assert world.run(p).outcome == "job-restarted"
    status = world.store.last
    scaling = status.condition(ConditionType.SCALING)
    assert scaling is not None and scaling.reason == "JobRestarted"
    assert "restarted 8 time(s) in a row" in scaling.message
    assert status.job is not None and status.job.unexplained_restarts == 8
    assert world.events.reasons().count("JobRestarted") == 1
    assert world.metrics.observed == observed  # no window of the loop was evaluated
    # It stays up: once a full window lies after the last restart, evaluation resumes.
    world.now = T0 + 6 * 8 + 25
    assert world.run(p).outcome != "job-restarted"
    assert world.store.last.job is not None and world.store.last.job.unexplained_restarts == 0


def first_sight() -> tuple[Run, RestartingFlink, JobSummary]:
    """A pass of a Recommend policy that has just seen its job for the first time."""
    flink = RestartingFlink(graph())
    world = World(flink=flink)
    p = policy("Recommend", metrics={"window": "20s", "stabilization": "0s",
                                     "resolution": "5s"})
    run = Run(p, 1, world.store.last, world.ports())
    job = flink.job()
    assert job is not None
    return run, flink, job


def in_place_step_seen_done() -> tuple[Run, RestartingFlink, JobSummary]:
    """Our step rescaled in place at T0 + 10 (the same job id and start), seen done at
    T0 + 20."""
    run, flink, job = first_sight()
    check_job(run, job)  # first sight
    run.status = run.status.model_copy(update={
        "last_reconfiguration_time": T0 + 10,
        "enactments": (StepEnactment(step=1, kind=Enactment.IN_PLACE.value,
                                     expected_downtime_s=3.5, applied_time=T0 + 10,
                                     observed_downtime_s=3.5),)})
    run.now = T0 + 20
    check_job(run, job)
    return run, flink, job


def restart_at(run: Run, flink: RestartingFlink, t: float) -> JobSummary:
    """The job comes back with a new id at `t`, seen by a pass one second later."""
    flink.restart(t)
    run.now = t + 1
    restarted = flink.job()
    assert restarted is not None
    return restarted


def test_a_failover_after_an_in_place_step_of_ours_is_not_taken_for_it() -> None:
    run, flink, _ = in_place_step_seen_done()
    # Then the job fails over: a new id that no step of ours explains.
    with pytest.raises(Stop):
        check_job(run, restart_at(run, flink, T0 + 29))
    assert run.status.job is not None and run.status.job.unexplained_restarts == 1


def test_the_restart_of_a_reapply_over_an_in_place_step_is_ours() -> None:
    """After the step, a hand edit undone by a patch of ours (which moves the last
    reconfiguration): the restart that patch causes, seen a pass later, is ours."""
    run, flink, job = in_place_step_seen_done()
    run.status = run.status.model_copy(update={"last_reconfiguration_time": T0 + 25})
    run.now = T0 + 30
    check_job(run, job)  # not restarted yet: the patch is not absorbed as done
    check_job(run, restart_at(run, flink, T0 + 34))  # no Stop: ours
    assert run.status.job is not None and run.status.job.unexplained_restarts == 0


def test_a_restart_of_ours_seen_in_two_stages_is_ours_and_a_failure_after_it_is_not(
) -> None:
    """A stop-with-savepoint step: one pass sees the old job FINISHED, a later one the new
    job. Both are the step's restart; the new job failing in turn is not."""
    run, flink, job = first_sight()
    check_job(run, job)  # first sight, before the step
    run.status = run.status.model_copy(update={
        "last_reconfiguration_time": T0 + 10,
        "enactments": (StepEnactment(step=1, kind=Enactment.SAVEPOINT.value,
                                     expected_downtime_s=40, applied_time=T0 + 10),)})
    run.now = T0 + 12
    check_job(run, replace(job, state="FINISHED"))  # going down: ours
    check_job(run, restart_at(run, flink, T0 + 40))  # the new job: ours too, no Stop
    assert run.status.job is not None and run.status.job.unexplained_restarts == 0
    with pytest.raises(Stop):  # then it fails over: not ours
        check_job(run, restart_at(run, flink, T0 + 60))
    assert run.status.job is not None and run.status.job.unexplained_restarts == 1


def test_a_failure_long_after_an_in_place_step_seen_in_two_stages_is_not_ours() -> None:
    """An in-place rescale keeps the job's start: a later failure caught going down, then
    back under a new id, is no restart of that step's."""
    run, flink, job = in_place_step_seen_done()
    run.now = T0 + 500
    with pytest.raises(Stop):
        check_job(run, replace(job, state="RESTARTING"))
    with pytest.raises(Stop):
        check_job(run, restart_at(run, flink, T0 + 520))
    assert run.status.job is not None and run.status.job.unexplained_restarts == 2


def test_a_failover_in_place_long_after_an_in_place_step_keeps_its_quiet_window() -> None:
    run, _, job = in_place_step_seen_done()
    job = replace(job, restarts=0)
    run.now = T0 + 400
    check_job(run, job)
    run.now = T0 + 500
    with pytest.raises(Stop):
        check_job(run, replace(job, state="RESTARTING", restarts=1))
    run.now = T0 + 505  # running again after a second failover: same id and start
    with pytest.raises(Stop):
        check_job(run, replace(job, restarts=2))


def test_a_failover_of_the_job_our_pending_step_will_replace_is_not_ours() -> None:
    """A savepoint step applied, but the job that ran before it fails over in place (same
    start, numRestarts up) before the Flink operator stops it: no job started since."""
    run, _, job = first_sight()
    job = replace(job, restarts=0)
    check_job(run, job)
    run.status = run.status.model_copy(update={
        "last_reconfiguration_time": T0 + 10,
        "enactments": (StepEnactment(step=1, kind=Enactment.SAVEPOINT.value,
                                     expected_downtime_s=40, applied_time=T0 + 10),)})
    run.now = T0 + 12
    check_job(run, replace(job, state="RESTARTING"))  # ours, as far as a pass can tell
    run.now = T0 + 17
    with pytest.raises(Stop):
        check_job(run, replace(job, restarts=1))
    assert run.status.job is not None and run.status.job.unexplained_restarts == 1


def test_a_reapply_over_an_in_place_step_seen_in_two_stages_is_ours() -> None:
    run, flink, job = in_place_step_seen_done()
    run.status = run.status.model_copy(update={"last_reconfiguration_time": T0 + 25})
    run.now = T0 + 27
    check_job(run, replace(job, state="FINISHED"))  # the re-apply's stop-with-savepoint
    check_job(run, restart_at(run, flink, T0 + 40))  # no Stop: ours
    assert run.status.job is not None and run.status.job.unexplained_restarts == 0


@pytest.mark.parametrize("answered", [True, False])
def test_a_failover_in_place_shows_only_in_num_restarts(answered: bool) -> None:
    """The same id and start, the job RUNNING at both passes: numRestarts one higher is an
    unexplained restart; unanswered (None), nothing is concluded."""
    run, _, job = first_sight()
    check_job(run, replace(job, restarts=0 if answered else None))  # first sight
    run.now = T0 + 10
    check_job(run, replace(job, restarts=0 if answered else None))  # nothing new
    run.now = T0 + 20
    later = replace(job, restarts=1 if answered else None)
    if not answered:
        check_job(run, later)
        assert run.status.job is not None and run.status.job.unexplained_restarts == 0
        return
    with pytest.raises(Stop):
        check_job(run, later)
    assert run.status.job is not None and run.status.job.unexplained_restarts == 1
    assert run.status.job.restarts == 1
    assert run.status.job.last_unexplained_restart_time == T0 + 20


@dataclass
class FakeOwners:
    live: set[str] = field(default_factory=set)  # "name/uid"
    claims: list[str] = field(default_factory=list)
    world: World | None = None

    def alive(self, namespace: str, policy: str, uid: str, deployment: str) -> bool:
        return f"{policy}/{uid}" in self.live

    def claim(self, namespace: str, deployment: str, owner: str,
              resource_version: str | None) -> bool:
        self.claims.append(owner)
        assert self.world is not None
        meta = self.world.deployments.deployment["metadata"]  # type: ignore[index]
        meta.setdefault("annotations", {})[OWNER_ANNOTATION] = owner
        return True


def test_a_second_policy_patches_nothing_until_the_owner_is_gone() -> None:
    world = World()
    owners = FakeOwners(live={"first/u1"}, world=world)
    meta = world.deployments.deployment["metadata"]  # type: ignore[index]
    meta["annotations"] = {OWNER_ANNOTATION: "first/u1"}
    second = policy(metrics={"window": "20s", "stabilization": "0s", "resolution": "5s"})
    second = second.model_copy(update={"metadata": second.metadata.model_copy(
        update={"name": "second", "uid": "u2"})})

    def run() -> str:
        ports = world.ports()
        ports.owners = owners
        from controller.loop import reconcile
        return reconcile(second, 1, world.store.last, ports).outcome

    for i in range(4):
        world.now = T0 + 30 * i
        assert run() == "owned-elsewhere"
    ready = world.store.last.condition(ConditionType.READY)
    assert ready is not None and (ready.status, ready.reason) == ("False",
                                                                  "TargetOwnedElsewhere")
    assert "first" in ready.message
    assert world.events.reasons() == ["TargetOwnedElsewhere"]  # one Event
    assert world.deployments.applied == [] and owners.claims == []
    owners.live.clear()  # the owner is deleted
    world.now += 30
    assert run() != "owned-elsewhere"
    assert owners.claims == ["second/u2"]
