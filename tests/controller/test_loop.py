"""The loop's decision logic with hand-written fakes of the cluster, Flink and Prometheus.

The real adapters are tested against the real things (test_collect, test_flink_rest,
e2e/test_controller*); here only the loop's own rules: when to evaluate, when to
refuse, Recommend vs Active, and resuming a committed step after a crash.
"""

from __future__ import annotations

import copy
import json
import tracemalloc
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from controller.api import (
    ConditionType,
    HybridScalingPolicy,
    HybridScalingPolicySpec,
    PodRequest,
    Status,
    StepEnactment,
    parse_policy,
)
from controller.loop import reconcile
from controller.place import slots
from controller.ports import (
    Collected,
    JobSummary,
    MetricsUnavailable,
    OperatorDefaults,
    OperatorDefaultsUnreadable,
    PatchRefused,
    Ports,
)
from controller.realize import (
    OVERRIDES_KEY,
    RESOURCES_KEY,
    SHAPE_KEYS,
    memory_levels,
)
from controller.record import EVENT_REASONS, Pass, Reason, bill_of
from controller.upstream import (
    UPSTREAM_KEYS,
    last_reconciled_configuration,
    upstream_switched_on,
)
from policies import explain
from policies.bill import describe_change
from policies.model import (
    Edge,
    JobGraph,
    Observation,
    ShipStrategy,
    Vertex,
    VertexConfig,
    VertexMetrics,
)
from policies.params import ScalingParams
from policies.restart_cost import Enactment, expected_downtime_s, learned_downtime_s
from policies.spec import MemoryScaling, TaskFootprint, format_memory_mib

SOURCE, COUNTER = "a" * 32, "b" * 32
T0 = 100_000.0


class Killed(BaseException):
    """Stands for `kill -9` at this point of the pass (no `except Exception` sees it)."""


@dataclass
class FakeDeployments:
    deployment: dict[str, Any] | None
    applied: list[dict[str, Any]] = field(default_factory=list)
    kill_on_apply: bool = False

    def get(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        return copy.deepcopy(self.deployment)

    def apply(self, namespace: str, name: str, body: Mapping[str, Any]) -> str:
        if self.kill_on_apply:
            raise Killed()
        assert self.deployment is not None
        self.applied.append(copy.deepcopy(dict(body)))
        spec = self.deployment.setdefault("spec", {})
        spec.setdefault("flinkConfiguration", {}).update(body["spec"]["flinkConfiguration"])
        tm = spec.setdefault("taskManager", {})
        tm.update({k: v for k, v in body["spec"]["taskManager"].items() if k != "resource"})
        tm.setdefault("resource", {}).update(body["spec"]["taskManager"]["resource"])
        return ""


@dataclass
class RefusingDeployments(FakeDeployments):
    """Admission refuses every apply with `code` while it is set."""

    code: int | None = 403

    def apply(self, namespace: str, name: str, body: Mapping[str, Any]) -> str:
        if self.code is not None:
            raise PatchRefused(self.code)
        return super().apply(namespace, name, body)


@dataclass
class FakeStore:
    saved: list[Status] = field(default_factory=list)
    kill_on_save: int | None = None  # die on the n-th save

    def save(self, status: Status) -> None:
        if self.kill_on_save is not None and len(self.saved) + 1 == self.kill_on_save:
            raise Killed()
        self.saved.append(status)

    @property
    def last(self) -> Status:
        return self.saved[-1] if self.saved else Status()

    def confirm(self) -> None:
        pass  # one replica: its status is always current

    def latest(self) -> tuple[Mapping[str, Any], Status]:
        return {}, self.last


@dataclass
class FakeEvents:
    events: list[tuple[str, str, str]] = field(default_factory=list)

    def emit(self, type_: str, reason: str, message: str) -> None:
        self.events.append((type_, reason, message))

    def reasons(self) -> list[str]:
        return [r for _, r, _ in self.events]


@dataclass
class FakeFlink:
    graph: JobGraph
    start_ms: int = 0
    graph_reads: int = 0
    # The JobManager's configuration (None: not answered), and the keys asked of it.
    job_manager: dict[str, str] | None = field(default_factory=dict)
    configuration_asks: list[tuple[str, ...]] = field(default_factory=list)

    def job(self) -> JobSummary | None:
        return JobSummary("j" * 32, "q", "RUNNING", self.start_ms, self.start_ms)

    def job_graph(self, jid: str, uid_candidates: Iterable[str] = (),
                  operator_ids: Mapping[str, Iterable[str]] | None = None) -> JobGraph:
        self.graph_reads += 1
        return self.graph

    def configuration(self, jid: str, keys: Iterable[str]) -> Mapping[str, str] | None:
        self.configuration_asks.append(tuple(keys))
        if self.job_manager is None:
            return None
        return {k: v for k, v in self.job_manager.items() if k in self.configuration_asks[-1]}


@dataclass
class FakeMetrics:
    counter: VertexMetrics | None
    observed: int = 0
    chain_reads: int = 0
    cache_capacity_bytes: dict[str, float] = field(default_factory=dict)
    checkpoint_bytes: float | None = None

    def observe(self, graph: JobGraph, job_id: str, now: float, window_s: float,
                resolution_s: float) -> Collected | MetricsUnavailable:
        self.observed += 1
        if self.counter is None:
            return MetricsUnavailable("metrics unavailable: Prometheus unreachable")
        source = VertexMetrics(300, 300, 0, 0, 10_000)
        return Collected(Observation(now, window_s, {SOURCE: source, COUNTER: self.counter}),
                         self.cache_capacity_bytes, self.checkpoint_bytes)

    def operator_ids(self, job_id: str, now: float) -> Mapping[str, Iterable[str]]:
        self.chain_reads += 1
        return {}


def overloaded(hit_rate: float) -> VertexMetrics:
    """The counter at 95 % busy: DS2 wants more capacity; the cache decides how."""
    hits = 1000 * hit_rate
    return VertexMetrics(950, 990, 0, 10_000, 0, cache_hits_per_s=hits,
                         cache_misses_per_s=1000 - hits, state_latency_ns=50_000,
                         has_state_backend_metrics=True)


def graph(p: int = 2, counter_name: str = "counter") -> JobGraph:
    return JobGraph(
        (Vertex(SOURCE, "source", 128, 2, 0, ("src",)),
         Vertex(COUNTER, counter_name, 128, p, 0, ("counter",))),
        (Edge(SOURCE, COUNTER, ShipStrategy.HASH),),
    )


def flink_deployment(upgrade_mode: str = "savepoint", state: str = "RUNNING",
                     lifecycle: str = "STABLE") -> dict[str, Any]:
    return {
        "metadata": {"name": "q11", "namespace": "ns"},
        "spec": {"job": {"upgradeMode": upgrade_mode},
                 "flinkConfiguration": {"taskmanager.numberOfTaskSlots": "4"}},
        "status": {"lifecycleState": lifecycle, "jobStatus": {"state": state}},
    }


def policy(mode: str = "Active", **spec: Any) -> HybridScalingPolicy:
    """These tests follow Justin's branches (a scale-up, then a scale-out): policy justin."""
    spec.setdefault("policy", "justin")
    return parse_policy({
        "apiVersion": "hybridscaler.dev/v1alpha1", "kind": "HybridScalingPolicy",
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {"targetRef": {"name": "q11"}, "mode": mode,
                 "metrics": {"window": "20s", "stabilization": "10s", "resolution": "5s"},
                 **spec},
    })


@dataclass
class World:
    deployments: FakeDeployments = field(default_factory=lambda: FakeDeployments(
        flink_deployment()))
    store: FakeStore = field(default_factory=FakeStore)
    events: FakeEvents = field(default_factory=FakeEvents)
    flink: FakeFlink = field(default_factory=lambda: FakeFlink(graph()))
    metrics: FakeMetrics = field(default_factory=lambda: FakeMetrics(overloaded(0.5)))
    now: float = T0
    operator_defaults: OperatorDefaults | None = None

    def ports(self) -> Ports:
        return Ports(self.deployments, self.store, self.events,
                     flink=lambda ns, name: self.flink, metrics=lambda url: self.metrics,
                     clock=lambda: self.now, operator_defaults=self.operator_defaults)

    def run(self, p: HybridScalingPolicy | None = None, generation: int = 1) -> Pass:
        return reconcile(p or policy(), generation, self.store.last, self.ports())


def scaling_reason(status: Status) -> str | None:
    c = status.condition(ConditionType.SCALING)
    return None if c is None else c.reason


def test_target_not_found_is_reported_once() -> None:
    world = World(deployments=FakeDeployments(None))
    assert world.run().outcome == "target-not-found"
    ready = world.store.last.condition(ConditionType.READY)
    assert ready is not None and (ready.status, ready.reason) == ("False", "TargetNotFound")
    world.now += 5
    world.run()
    assert world.events.reasons() == ["TargetNotFound"]


def test_active_scale_up_commits_before_it_applies() -> None:
    world = World()
    result = world.run()
    assert result.outcome == "reconfigured"
    # The first save is the commit: decision and history recorded, not yet applied.
    commit = world.store.saved[0]
    assert scaling_reason(commit) == Reason.RECONFIGURING and commit.step == 1
    assert len(commit.history) == 1 and commit.placement is not None
    assert scaling_reason(world.store.last) == Reason.STABILIZING
    [body] = world.deployments.applied
    assert set(body["spec"]) == {"flinkConfiguration", "taskManager"}
    conf = body["spec"]["flinkConfiguration"]
    # The TaskManager shape is fitted to the slots: its managed and network fractions
    # and slots per TaskManager are written with it.
    assert set(conf) == {OVERRIDES_KEY, RESOURCES_KEY, *SHAPE_KEYS}
    # Justin: a short cache turns DS2's scale-out into a scale-up at the same parallelism.
    assert conf[OVERRIDES_KEY] == f"{SOURCE}:2,{COUNTER}:2"
    resources = json.loads(conf[RESOURCES_KEY])
    assert resources["counter"]["managedMemoryMb"] == 316
    # The source has no RocksDB metrics: stateless, its managed memory is stripped, and
    # it rides in the counter's slots (its entry is one slot of the counter's group).
    assert resources["src"] == resources["counter"] == {
        "cpuCores": 1.0, "taskHeapMb": 134, "managedMemoryMb": 316, "slotSharingGroup": COUNTER}
    levels = memory_levels(world.deployments.deployment or {}, graph(), 158.0)
    assert levels == {SOURCE: None, COUNTER: 1}
    assert {"ScaledUp", "MemoryStripped"} <= set(world.events.reasons())
    assert world.store.last.last_decision is not None
    assert world.store.last.last_decision.reconfigures


def test_scale_out_when_the_cache_is_fine() -> None:
    world = World(metrics=FakeMetrics(overloaded(0.99)))
    world.run()
    conf = world.deployments.applied[0]["spec"]["flinkConfiguration"]
    assert conf[OVERRIDES_KEY] == f"{SOURCE}:2,{COUNTER}:4"  # DS2's scale-out, not a scale-up
    assert "ScaledOut" in world.events.reasons()


def test_recommend_patches_nothing_and_keeps_history() -> None:
    world = World()
    result = world.run(policy("Recommend"))
    assert result.outcome == "recommended"
    assert world.deployments.applied == []
    last = world.store.last
    assert last.history == () and last.step == 0
    assert last.placement is None and last.last_reconfiguration_time is None
    assert last.last_decision is not None and last.last_decision.reconfigures
    assert scaling_reason(last) == "Recommended"
    assert world.events.reasons() == ["Recommended"]
    # The same advice a window later is recorded, not posted again as an Event.
    world.now += 40
    assert world.run(policy("Recommend")).outcome == "recommended"
    assert world.store.last.last_decision.time == world.now  # type: ignore[union-attr]
    assert world.events.reasons() == ["Recommended"]
    # Other advice is.
    world.metrics.counter = overloaded(0.99)  # the cache is fine now: a scale-out
    world.now += 40
    world.run(policy("Recommend"))
    assert world.events.reasons() == ["Recommended", "Recommended"]


# Back at once, or long after an evaluation would have been due (10 s + a 20 s window).
@pytest.mark.parametrize("down_s", [3, 600])
def test_kill_between_commit_and_apply_resumes_without_deciding_again(down_s: float) -> None:
    world = World()
    world.deployments.kill_on_apply = True
    with pytest.raises(Killed):
        world.run()
    committed = world.store.last
    assert scaling_reason(committed) == Reason.RECONFIGURING and world.deployments.applied == []

    world.deployments.kill_on_apply = False
    world.now += down_s
    world.metrics.observed = 0
    result = world.run()
    assert result.outcome == "resumed" and world.metrics.observed == 0
    assert world.store.last.step == committed.step
    assert world.store.last.history == committed.history
    [body] = world.deployments.applied
    assert json.loads(body["spec"]["flinkConfiguration"][RESOURCES_KEY])["counter"][
        "managedMemoryMb"] == 316
    assert "Resumed" in world.events.reasons()
    # Stabilization counts from the patch, not from the commit before the outage.
    assert world.store.last.last_reconfiguration_time == world.now
    world.now += 15
    assert world.run().outcome == "window-filling"


def test_kill_after_apply_resumes_without_patching_again() -> None:
    world = World()
    world.store.kill_on_save = 2  # the save after the patch
    with pytest.raises(Killed):
        world.run()
    assert len(world.deployments.applied) == 1
    world.store.kill_on_save = None
    result = world.run()
    assert result.outcome == "stabilizing" and result.applied == []
    assert len(world.deployments.applied) == 1
    assert scaling_reason(world.store.last) == Reason.STABILIZING


def test_the_committed_target_is_the_applied_step() -> None:
    world = World()
    world.deployments.kill_on_apply = True
    with pytest.raises(Killed):
        world.run()
    target = world.store.last.target
    assert target is not None and target.step == world.store.last.step == 1
    world.deployments.kill_on_apply = False
    reads = world.flink.graph_reads
    world.now += 3
    world.run()
    [body] = world.deployments.applied
    assert body["spec"]["flinkConfiguration"] == target.flink_configuration
    assert body["spec"]["taskManager"]["replicas"] == target.task_manager_replicas
    assert world.flink.graph_reads == reads  # applying a target needs no job graph


def test_every_active_pass_reapplies_the_target_where_the_deployment_drifted() -> None:
    world = World()
    world.run()
    assert world.deployments.deployment is not None
    conf = world.deployments.deployment["spec"]["flinkConfiguration"]
    wanted = conf[OVERRIDES_KEY]
    conf[OVERRIDES_KEY] = f"{SOURCE}:1,{COUNTER}:1"  # a hand edit of an owned field
    world.now += 4  # still stabilizing: no evaluation, but the target holds
    result = world.run()
    assert result.outcome == "reapplied" and result.applied == [OVERRIDES_KEY]
    assert conf[OVERRIDES_KEY] == wanted and len(world.deployments.applied) == 2
    assert world.events.reasons()[-1] == "Reapplied"
    assert world.store.last.step == 1  # nothing decided again
    world.now += 1
    assert world.run().applied == []  # no difference, no patch
    assert len(world.deployments.applied) == 2


def patch_then_die_on_save(world: World) -> None:
    """A pass whose patch lands and which dies on the next save (`kill -9` after it)."""
    patch = world.deployments.apply

    def apply_then_arm(*args: Any) -> str | None:
        world.store.kill_on_save = len(world.store.saved) + 1
        return patch(*args)

    world.deployments.apply = apply_then_arm  # type: ignore[method-assign]
    with pytest.raises(Killed):
        world.run()
    world.deployments.apply = patch  # type: ignore[method-assign]
    world.store.kill_on_save = None


def step_applied_then_due() -> tuple[World, dict[str, Any]]:
    """A step applied at T0 and seen at T0 + 4; at T0 + 35 a full window lies after its
    stabilization, so an evaluation is due. Also the deployment's flinkConfiguration."""
    world = World()
    world.run()
    assert world.deployments.deployment is not None
    conf = world.deployments.deployment["spec"]["flinkConfiguration"]
    world.now = T0 + 4
    world.run()
    world.now = T0 + 35
    return world, conf


@pytest.mark.parametrize("edit", [
    '{"counter": {"cpuCores": 1, "taskHeapMb": 1, "managedMemoryMb": 0}}',  # other levels
    '{"counter": {"cpuCores": true}}',  # what flink-plugin refuses: levels unknown
])
def test_no_decision_from_a_window_the_deployment_drifted_in(edit: str) -> None:
    world, conf = step_applied_then_due()
    wanted = conf[RESOURCES_KEY]
    conf[RESOURCES_KEY] = edit
    reads, decided = world.metrics.observed, world.store.last.last_decision
    result = world.run()
    # The window ran at the hand edit's levels, or at the step's, or across both: it
    # judges nothing, and the step is applied again.
    assert result.outcome == "reapplied" and result.applied == [RESOURCES_KEY]
    assert conf[RESOURCES_KEY] == wanted
    assert world.metrics.observed == reads and world.store.last.last_decision == decided
    assert world.store.last.step == 1
    # Changed back: a reconfiguration of ours, and the next windows wait for it to settle.
    assert world.store.last.last_reconfiguration_time == world.now
    assert scaling_reason(world.store.last) == Reason.STABILIZING
    assert world.events.reasons()[-1] == "Reapplied"
    world.now += 1
    assert world.run().outcome == "stabilizing"
    assert world.store.last.last_decision == decided


def test_a_reapply_is_saved_before_its_patch_so_a_crash_after_it_decides_nothing() -> None:
    """The controller dies after the patch that undoes a drift, before the pass's record
    is saved: the deployment then carries the target again, and only the status can say
    the job restarted for it. Saved before the patch, it does, and the next window waits."""
    world, conf = step_applied_then_due()
    wanted = conf[OVERRIDES_KEY]
    conf[OVERRIDES_KEY] = f"{SOURCE}:1,{COUNTER}:1"
    decided = world.store.last.last_decision
    patch_then_die_on_save(world)
    assert conf[OVERRIDES_KEY] == wanted  # patched, and the record lost
    assert world.store.last.last_reconfiguration_time == world.now
    world.now += 1
    assert world.run().outcome == "stabilizing"
    assert world.store.last.last_decision == decided


def drifted_and_refused(key: str = OVERRIDES_KEY,
                        edit: str = f"{SOURCE}:1,{COUNTER}:1") -> World:
    """A step applied, then a hand edit of an owned field that admission keeps (403)."""
    deployments = RefusingDeployments(flink_deployment(), code=None)
    world = World(deployments=deployments)
    world.run()
    world.now = T0 + 4
    world.run()
    assert deployments.deployment is not None
    deployments.deployment["spec"]["flinkConfiguration"][key] = edit
    deployments.code = 403
    return world


@pytest.mark.parametrize("key,edit", [
    (OVERRIDES_KEY, f"{SOURCE}:1,{COUNTER}:1"),
    (RESOURCES_KEY, '{"counter": {"cpuCores": true}}'),  # levels unknown
])
def test_a_refused_reapply_holds_decisions_until_the_policy_is_edited(key: str,
                                                                      edit: str) -> None:
    """Admission refuses the patch that would undo a hand edit: the job runs the edit, which
    the history does not name, so nothing is decided (as for a step never applied) and the
    condition says so; an edit of the policy may be the fix, and lets the next pass decide,
    unless the deployment's memory levels cannot be read: no window says what ran."""
    world = drifted_and_refused(key, edit)
    observed = world.metrics.observed
    for _ in range(3):
        world.now += 40
        assert world.run().outcome == "patch-refused"
    assert world.metrics.observed == observed  # no window read while held
    scaling = world.store.last.condition(ConditionType.SCALING)
    assert scaling is not None and scaling.reason == Reason.PATCH_REFUSED
    assert scaling.message.endswith("no new step is decided until it lands or the policy "
                                    "is edited")
    assert world.store.last.step == 1
    world.now += 40
    world.run(generation=2)
    last = world.store.last
    if key == RESOURCES_KEY:
        assert world.metrics.observed == observed and last.step == 1
        return
    assert last.last_decision is not None and last.last_decision.time == world.now


def test_a_refused_reapply_writes_nothing_on_passes_that_change_nothing() -> None:
    world = drifted_and_refused()
    world.now += 40
    assert world.run().outcome == "patch-refused"
    saves = len(world.store.saved)
    for _ in range(5):
        world.now += 5
        assert world.run().outcome == "patch-refused"
    assert len(world.store.saved) == saves


def test_a_policy_edit_during_a_job_restart_still_lets_a_pass_decide_once_it_is_over(
) -> None:
    """The hand edit restarted the job, and the policy is edited (maybe the refusal's fix)
    while that restart's window runs: one Warning, the refused generation kept, and the
    first pass after the window decides."""
    world = drifted_and_refused()
    world.now += 40
    world.flink.start_ms = int((world.now - 2) * 1000)  # the edit restarted the job
    world.run()
    for _ in range(4):  # inside the JobRestarted window (10 s + 20 s)
        world.now += 5
        world.run(generation=2)
    assert world.events.reasons().count("PatchRefused") == 1, world.events.reasons()
    scaling = world.store.last.condition(ConditionType.SCALING)
    assert scaling is not None and scaling.reason == Reason.PATCH_REFUSED
    assert scaling.observed_generation == 1
    world.now += 60
    world.run(generation=2)
    last = world.store.last.last_decision
    assert last is not None and last.time == world.now


def test_a_reapply_that_lands_after_a_refusal_in_a_pass_that_died_is_found() -> None:
    """Admission stops refusing, the patch lands, and the controller dies before saving:
    the next pass finds the step on the deployment and PatchRefused in the status, so the
    job restarted for it at a time nobody knows; no window across it decides."""
    world = drifted_and_refused()
    world.now += 40
    assert world.run().outcome == "patch-refused"
    decided = world.store.last.last_decision
    world.now += 5
    world.deployments.code = None  # the webhook is fixed
    patch_then_die_on_save(world)
    world.now += 30  # a window after the last save's stabilization: one would be due
    world.run()
    last = world.store.last
    assert last.last_reconfiguration_time == world.now and last.last_decision == decided
    assert scaling_reason(last) == Reason.STABILIZING
    assert last.enactments[-1].applied_unseen


def test_a_drift_undone_after_a_refusal_is_reapplied_not_resumed() -> None:
    world = drifted_and_refused()
    deployments = world.deployments
    assert isinstance(deployments, RefusingDeployments) and deployments.deployment
    step = world.store.last.enactments[-1]
    conf = deployments.deployment["spec"]["flinkConfiguration"]
    wanted = world.store.last.target.flink_configuration[OVERRIDES_KEY]
    world.now += 40
    assert world.run().outcome == "patch-refused"
    deployments.code = None  # the quota was raised
    world.now += 5
    assert world.run().outcome == "reapplied" and conf[OVERRIDES_KEY] == wanted
    assert world.events.reasons()[-1] == "Reapplied" and "Resumed" not in world.events.reasons()
    scaling = world.store.last.condition(ConditionType.SCALING)
    assert scaling is not None and scaling.reason == Reason.STABILIZING
    assert "applied again" in scaling.message
    assert world.store.last.last_reconfiguration_time == world.now
    # The step's own record stays: applied when it was.
    assert world.store.last.enactments[-1].applied_time == step.applied_time


def test_a_drift_undone_before_the_steps_downtime_was_seen_is_not_learned_as_it() -> None:
    """A GitOps tool reverts our patch at once: the downtime a pass would observe from the
    step's patch now holds the revert's restart and ours, so it is never observed."""
    world = World()
    world.run()
    assert world.deployments.deployment is not None
    world.deployments.deployment["spec"]["flinkConfiguration"][OVERRIDES_KEY] = (
        f"{SOURCE}:1,{COUNTER}:1")
    world.now += 1
    assert world.run().outcome == "reapplied"
    entry = world.store.last.enactments[-1]
    assert entry.applied_unseen and entry.observed_downtime_s is None


def test_an_edit_after_a_refusal_is_not_used_up_by_a_pass_that_decides_nothing() -> None:
    deployments = RefusingDeployments(flink_deployment())
    world = World(deployments=deployments)
    world.run()  # step 1 committed, its patch refused
    decided = world.store.last.last_decision
    # Edited at once: the next pass is not due (a window must pass since the last
    # evaluation), decides nothing, and its re-try is refused again ...
    world.now += 1
    assert world.run(generation=2).outcome == "patch-refused"
    assert world.store.last.last_decision == decided
    scaling = world.store.last.condition(ConditionType.SCALING)
    assert scaling is not None and scaling.observed_generation == 1
    # ... so the edit still counts when a pass is due: it decides afresh.
    world.now += 40
    world.run(generation=2)
    last = world.store.last.last_decision
    assert last is not None and last.time == world.now


def test_recommend_writes_no_target_and_drops_an_active_one() -> None:
    world = World()
    world.run(policy("Recommend"))
    assert world.store.last.target is None
    world = World()
    world.run()
    assert world.store.last.target is not None
    assert world.deployments.deployment is not None
    conf = world.deployments.deployment["spec"]["flinkConfiguration"]
    conf[OVERRIDES_KEY] = f"{SOURCE}:1,{COUNTER}:1"
    world.now += 4
    world.run(policy("Recommend"))
    # Handed back to the user: no patch, and a later switch to Active starts from what runs.
    assert world.store.last.target is None and len(world.deployments.applied) == 1
    world.now += 1
    assert world.run().applied == []
    assert conf[OVERRIDES_KEY] == f"{SOURCE}:1,{COUNTER}:1"


def test_stabilization_then_a_full_window_before_the_next_step() -> None:
    world = World()
    world.run()
    world.now = T0 + 4
    world.run()
    saves = len(world.store.saved)
    world.now = T0 + 6
    assert world.run().outcome == "stabilizing"
    assert len(world.store.saved) == saves  # waiting again writes nothing new
    decided = world.store.last.step
    reads = (world.flink.graph_reads, world.metrics.chain_reads, world.metrics.observed)
    for dt, outcome in ((5, "stabilizing"), (10 + 19, "window-filling")):
        world.now = T0 + dt
        assert world.run().outcome == outcome
    assert world.store.last.step == decided
    # Waiting passes read neither the job graph nor Prometheus.
    assert (world.flink.graph_reads, world.metrics.chain_reads, world.metrics.observed) == reads
    world.now = T0 + 10 + 20
    world.run()
    graph_reads, chain_reads, observed = reads
    assert (world.flink.graph_reads, world.metrics.chain_reads,
            world.metrics.observed) == (graph_reads + 1, chain_reads + 1, observed + 1)


def test_refuses_a_stateless_upgrade_mode() -> None:
    world = World(deployments=FakeDeployments(flink_deployment("stateless")))
    assert world.run().outcome == "refused"
    assert world.deployments.applied == []
    assert world.store.last.history == ()
    assert "stateless" in world.events.events[-1][2]
    world.now += 20
    world.run()
    assert world.events.reasons().count("Refused") == 1  # not repeated every pass


def test_refuses_a_deployment_whose_resources_the_operator_reads_before_ours() -> None:
    """The operator's newer spec.taskManager.resources wins over spec.taskManager.resource,
    which the steps write: a step would be priced and recorded but never run."""
    deployment = flink_deployment()
    deployment["spec"]["taskManager"] = {
        "resources": {"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"cpu": "4"}}}
    world = World(deployments=FakeDeployments(deployment))
    assert world.run().outcome == "refused"
    assert world.deployments.applied == []
    assert "spec.taskManager.resources" in world.events.events[-1][2]


UPSTREAM_ON = "job.autoscaler.enabled"
UPSTREAM_OLD = "kubernetes.operator.job.autoscaler.enabled"


@pytest.mark.parametrize("spec, job_manager, where", [
    ({UPSTREAM_ON: "true"}, {}, f'spec.flinkConfiguration["{UPSTREAM_ON}"]'),
    ({UPSTREAM_OLD: "TRUE"}, {}, f'spec.flinkConfiguration["{UPSTREAM_OLD}"]'),
    ({"job": {"autoscaler": {"enabled": True}}}, {},  # operator 1.13's nested YAML
     f'spec.flinkConfiguration["{UPSTREAM_ON}"]'),
    # Scaling switched off still applies the overrides it stored: still refused.
    ({UPSTREAM_ON: "true", "job.autoscaler.scaling.enabled": "false"}, {}, "spec"),
    # The operator's default configuration, or a key the spec dropped since it deployed
    # (autoscaler keys redeploy nothing): only the JobManager's shows it.
    ({}, {UPSTREAM_ON: "true"}, f'"{UPSTREAM_ON}" in the JobManager\'s configuration'),
    # Merged key by key, then the key before its fallback, as Flink reads them.
    ({UPSTREAM_OLD: "false"}, {UPSTREAM_ON: "true"}, f'"{UPSTREAM_ON}" in the JobManager'),
])
def test_refuses_a_step_the_flink_operators_autoscaler_would_write_over(
        spec: dict[str, Any], job_manager: dict[str, str], where: str) -> None:
    """On, the upstream autoscaler writes its own parallelism overrides into the spec the
    operator deploys, on every reconcile: a step would be recorded but never run."""
    deployment = flink_deployment()
    deployment["spec"]["flinkConfiguration"].update(spec)
    flink = FakeFlink(graph(), job_manager=job_manager)
    world = World(deployments=FakeDeployments(deployment), flink=flink)
    assert world.run().outcome == "refused"
    assert world.deployments.applied == [] and world.store.last.target is None
    scaling = world.store.last.condition(ConditionType.SCALING)
    assert scaling is not None and scaling.reason == Reason.REFUSED
    assert where in scaling.message and "job.autoscaler.enabled: \"false\"" in scaling.message
    assert world.events.reasons().count("Refused") == 1
    world.now += 40  # refused again, not announced again
    assert world.run().outcome == "refused"
    assert world.events.reasons().count("Refused") == 1


def last_reconciled(flink_configuration: Any) -> str:
    """status.reconciliationStatus.lastReconciledSpec as the Flink operator writes it."""
    return json.dumps({"spec": {"job": {"upgradeMode": "savepoint"},
                                "flinkConfiguration": flink_configuration},
                       "resource_metadata": {"apiVersion": "flink.apache.org/v1beta1"}})


@pytest.mark.parametrize("job_manager", [{UPSTREAM_ON: "true"}, None])
def test_refuses_where_the_last_deployed_spec_switched_the_flink_operators_autoscaler_on(
        job_manager: dict[str, str] | None) -> None:
    """The key dropped from the spec since the operator deployed it (autoscaler keys
    redeploy nothing): still on. The spec the operator last reconciled says so, also
    when the JobManager does not answer."""
    deployment = flink_deployment()
    deployment["status"]["reconciliationStatus"] = {
        "lastReconciledSpec": last_reconciled({UPSTREAM_ON: "true"})}
    world = World(deployments=FakeDeployments(deployment),
                  flink=FakeFlink(graph(), job_manager=job_manager))
    assert world.run().outcome == "refused"
    assert world.deployments.applied == []
    scaling = world.store.last.condition(ConditionType.SCALING)
    assert scaling is not None
    assert "lastReconciledSpec" in scaling.message and UPSTREAM_ON in scaling.message


@pytest.mark.parametrize("spec, reconciled", [
    ({UPSTREAM_ON: "false"}, {UPSTREAM_ON: "true"}),  # the current spec goes over it
    ({}, {UPSTREAM_ON: "false"}),  # over the JobManager's "true", as deployed (older)
])
def test_the_last_deployed_spec_is_one_layer_of_the_switch(
        spec: dict[str, str], reconciled: dict[str, str]) -> None:
    deployment = flink_deployment()
    deployment["spec"]["flinkConfiguration"].update(spec)
    deployment["status"]["reconciliationStatus"] = {
        "lastReconciledSpec": last_reconciled(reconciled)}
    world = World(deployments=FakeDeployments(deployment),
                  flink=FakeFlink(graph(), job_manager={UPSTREAM_ON: "true"}))
    assert world.run().outcome != "refused"
    assert len(world.deployments.applied) == 1


@pytest.mark.parametrize("flink_configuration", [
    {UPSTREAM_ON: "true", "job": {"autoscaler": {"enabled": False}}},
    {"job": {"autoscaler": {"enabled": False}}, UPSTREAM_ON: "true"},
    {"job": {"autoscaler": {"enabled": "TRUE"}}, UPSTREAM_ON: "false"},
])
def test_a_switch_written_flat_and_nested_is_on_if_either_says_so(
        flink_configuration: dict[str, Any]) -> None:
    """Which copy the operator reads depends on its parsing; on is the safe side."""
    deployment = flink_deployment()
    deployment["spec"]["flinkConfiguration"] = flink_configuration
    assert upstream_switched_on(deployment, None) == f'spec.flinkConfiguration["{UPSTREAM_ON}"]'


@pytest.mark.parametrize("flink_configuration", ["job.autoscaler.enabled=true", ["x"], None])
def test_a_flink_configuration_that_is_no_map_switches_nothing_on(
        flink_configuration: Any) -> None:
    deployment = flink_deployment()
    deployment["spec"]["flinkConfiguration"] = flink_configuration
    assert upstream_switched_on(deployment, {}) is None


def test_a_hostile_last_deployed_spec_costs_its_size_not_its_depth_times_its_keys() -> None:
    """Flattening every key of a chain 100 maps deep, of 2,000-character keys with 10,000
    leaves (320 kB of JSON), took 65 s and 3.9 GB; only the maps on the way to the
    autoscaler's keys are walked now."""
    chain: dict[str, Any] = {f"leaf{i}": "x" for i in range(10_000)}
    for depth in range(100):
        chain = {f"{depth:04d}" + "k" * 1_996: chain}
    text = last_reconciled({**chain, "job": {"autoscaler": {"enabled": "TRUE"}}})
    deployment = flink_deployment()
    deployment["status"]["reconciliationStatus"] = {"lastReconciledSpec": text}
    tracemalloc.start()
    try:
        found = last_reconciled_configuration(deployment)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert found == {UPSTREAM_ON: "TRUE"}
    assert peak < 16 * len(text)  # the parsed JSON, not a key per leaf per level


@pytest.mark.parametrize("text", [
    "{not json", "[]", '{"spec": []}', '{"spec": {"flinkConfiguration": "x"}}',
    "[" * 100_000 + "]" * 100_000,  # past Python's recursion limit
    last_reconciled({"pad": "x" * (1 << 20), UPSTREAM_ON: "true"}),  # past the size read
])
def test_an_unreadable_last_deployed_spec_counts_for_nothing(text: str) -> None:
    deployment = flink_deployment()
    deployment["status"]["reconciliationStatus"] = {"lastReconciledSpec": text}
    assert last_reconciled_configuration(deployment) == {}
    assert upstream_switched_on(deployment, None) is None


@pytest.mark.parametrize("spec, job_manager", [
    ({}, {}),
    ({UPSTREAM_ON: "false"}, {UPSTREAM_ON: "true"}),  # the spec's wins, key by key
    ({UPSTREAM_ON: "False"}, {UPSTREAM_OLD: "true"}),
    ({UPSTREAM_ON: "1"}, {}),  # not a boolean the operator reads as true
    ({UPSTREAM_ON: " true"}, {}),
    ({}, None),  # the JobManager did not answer: the spec's switch alone
])
def test_steps_where_the_flink_operators_autoscaler_is_off(
        spec: dict[str, str], job_manager: dict[str, str] | None) -> None:
    deployment = flink_deployment()
    deployment["spec"]["flinkConfiguration"].update(spec)
    flink = FakeFlink(graph(), job_manager=job_manager)
    world = World(deployments=FakeDeployments(deployment), flink=flink)
    assert world.run().outcome != "refused"
    assert len(world.deployments.applied) == 1
    assert flink.configuration_asks == [UPSTREAM_KEYS]  # asked once, before the step only


class Defaults:
    """The Flink operator's default configuration as the port gives it; `error` raised."""

    def __init__(self, found: dict[str, dict[str, Any]], error: Exception | None = None
                 ) -> None:
        self.found, self.error, self.reads = found, error, 0

    def __call__(self) -> dict[str, dict[str, Any]]:
        self.reads += 1
        if self.error is not None:
            raise self.error
        return self.found


def test_refuses_where_the_operators_default_configuration_switched_its_autoscaler_on() -> None:
    """Switched on in the operator's ConfigMap for this namespace since the JobManager was
    deployed: the operator reads it at its next reconcile, so the step is refused."""
    key = f"kubernetes.operator.default-configuration.namespace.ns.{UPSTREAM_ON}"
    defaults = Defaults({"flink-conf.yaml": {key: "true"}})
    world = World(flink=FakeFlink(graph(), job_manager={UPSTREAM_ON: "false"}),
                  operator_defaults=defaults)
    assert world.run().outcome == "refused"
    scaling = world.store.last.condition(ConditionType.SCALING)
    assert scaling is not None and scaling.reason == Reason.REFUSED
    assert f'"{key}" in the Flink operator\'s default configuration' in scaling.message
    defaults.found = {"flink-conf.yaml": {key: "false"}}
    world.now += 40
    assert world.run().outcome != "refused" and len(world.deployments.applied) == 1


def test_an_unreadable_operator_configuration_refuses_the_step_naming_where_and_the_code() -> None:
    """Told to read it and unable to: a step could run beside the operator's autoscaler."""
    defaults = Defaults({}, OperatorDefaultsUnreadable("ConfigMap ops/cm: HTTP 403"))
    world = World(operator_defaults=defaults)
    assert world.run().outcome == "refused"
    assert world.deployments.applied == []
    scaling = world.store.last.condition(ConditionType.SCALING)
    assert scaling is not None and scaling.reason == Reason.REFUSED
    assert "ConfigMap ops/cm: HTTP 403" in scaling.message
    assert "--flink-operator-config" in scaling.message and "403: not granted" in scaling.message


def test_the_operators_defaults_are_read_only_before_a_step() -> None:
    defaults = Defaults({"flink-conf.yaml": {UPSTREAM_ON: "true"}})
    world = World(operator_defaults=defaults)
    assert world.run(policy("Recommend")).outcome != "refused"
    assert defaults.reads == 0


def test_the_jobmanager_is_not_asked_where_the_spec_is_refused_already() -> None:
    flink = FakeFlink(graph(), job_manager={UPSTREAM_ON: "true"})
    world = World(deployments=FakeDeployments(flink_deployment("stateless")), flink=flink)
    assert world.run().outcome == "refused"
    assert "stateless" in world.events.events[-1][2] and flink.configuration_asks == []


def test_recommend_does_not_ask_for_the_flink_operators_autoscaler() -> None:
    """Recommend applies nothing, so nothing is written over: no refusal, no read."""
    flink = FakeFlink(graph(), job_manager={UPSTREAM_ON: "true"})
    world = World(flink=flink)
    assert world.run(policy("Recommend")).outcome != "refused"
    assert flink.configuration_asks == []


@pytest.mark.parametrize("mode", ["Recommend", "Active"])
def test_no_decision_from_per_operator_resources_flink_plugin_cannot_read(mode: str) -> None:
    """The tenant's value would read as level 0 everywhere: the levels the job runs are not
    known, so nothing is decided (and no window read) until it is fixed; it is not echoed."""
    deployment = flink_deployment()
    deployment["spec"]["flinkConfiguration"][RESOURCES_KEY] = '{"counter": "<b>x</b>"}'
    world = World(deployments=FakeDeployments(deployment))
    observed = world.metrics.observed
    assert world.run(policy(mode)).outcome == "refused"
    assert world.metrics.observed == observed and world.store.last.history == ()
    scaling = world.store.last.condition(ConditionType.SCALING)
    assert scaling is not None and scaling.reason == Reason.REFUSED
    assert RESOURCES_KEY in scaling.message and "<b>" not in scaling.message
    del deployment["spec"]["flinkConfiguration"][RESOURCES_KEY]  # removed: Flink's defaults
    world.now += 40
    assert world.run(policy(mode)).outcome != "refused"
    assert world.store.last.last_decision is not None


def test_refuses_while_the_job_is_not_running() -> None:
    world = World(deployments=FakeDeployments(flink_deployment(state="RESTARTING",
                                                               lifecycle="UPGRADING")))
    assert world.run().outcome == "refused"
    assert "RESTARTING" in world.events.events[-1][2]


def test_metrics_unavailable_means_no_action() -> None:
    world = World(metrics=FakeMetrics(None))
    assert world.run().outcome == "metrics-unavailable"
    c = world.store.last.condition(ConditionType.METRICS_AVAILABLE)
    assert c is not None and c.status == "False" and "unreachable" in c.message
    assert world.deployments.applied == [] and world.store.last.last_decision is None


def test_a_spec_edit_changes_the_next_decision_and_keeps_history() -> None:
    world = World(metrics=FakeMetrics(overloaded(0.99)))
    world.run(policy("Recommend"), generation=1)
    assert world.store.last.last_decision is not None
    assert world.store.last.last_decision.reconfigures
    world.now += 20
    relaxed = policy("Recommend", cpu={"utilizationMax": 1.0, "utilizationTarget": 0.96})
    world.run(relaxed, generation=2)
    last = world.store.last
    assert last.observed_generation == 2
    assert last.last_decision is not None and not last.last_decision.reconfigures


def test_disabled_mode_does_nothing() -> None:
    world = World()
    assert world.run(policy("Disabled")).outcome == "disabled"
    assert world.metrics.observed == 0 and world.deployments.applied == []


def test_adaptive_mode_writes_no_per_operator_resources() -> None:
    world = World(metrics=FakeMetrics(overloaded(0.99)))
    world.run(policy(taskManager={"realization": "adaptive"}))
    [body] = world.deployments.applied
    assert set(body["spec"]["flinkConfiguration"]) == {OVERRIDES_KEY}
    assert body["spec"]["flinkConfiguration"][OVERRIDES_KEY] == f"{SOURCE}:2,{COUNTER}:4"


def memory_world(cache_mib: float, write_buffer_ratio: str | None = None) -> World:
    """The counter runs with 316 MiB written for it (level 1) and wants a scale-up."""
    deployment = flink_deployment()
    conf = deployment["spec"]["flinkConfiguration"]
    conf[RESOURCES_KEY] = json.dumps({
        "src": {"cpuCores": 1, "taskHeapMb": 64, "managedMemoryMb": 0},
        "counter": {"cpuCores": 1, "taskHeapMb": 64, "managedMemoryMb": 316}})
    if write_buffer_ratio is not None:
        conf["state.backend.rocksdb.memory.write-buffer-ratio"] = write_buffer_ratio
    metrics = FakeMetrics(overloaded(0.5), cache_capacity_bytes={COUNTER: cache_mib * 2**20})
    return World(deployments=FakeDeployments(deployment), metrics=metrics)


def test_a_scale_up_goes_ahead_when_flink_runs_the_written_memory() -> None:
    world = memory_world(316 * 2.5 / 3)
    assert world.run().outcome == "reconfigured"
    assert "ScaledUp" in world.events.reasons()


def test_the_write_buffer_ratio_comes_from_the_job() -> None:
    world = memory_world(316 * 2.75 / 3, write_buffer_ratio="0.25")
    assert world.run().outcome == "reconfigured"


def test_memory_steps_are_held_back_while_flink_ignores_the_written_memory() -> None:
    # 158 MiB of managed memory behind the cache: the job ignores the 316 written for it.
    world = memory_world(158 * 2.5 / 3)
    assert world.run().outcome == "refused"
    world.now += 60
    assert world.run().outcome == "refused"
    assert world.deployments.applied == []
    assert world.events.reasons() == ["Refused"]  # once, not every pass
    [(kind, _, message)] = world.events.events
    assert kind == "Warning"
    assert "counter: block cache 132 MiB per task, 263 MiB expected" in message
    assert "HybridResources.apply" in message
    assert scaling_reason(world.store.last) == "MemoryNotHonoured"


def adaptive_world(mode: str = "native") -> World:
    deployment = flink_deployment()
    deployment["spec"]["mode"] = mode
    deployment["spec"]["flinkConfiguration"]["jobmanager.scheduler"] = "adaptive"
    deployment["spec"]["taskManager"] = {"replicas": 1,
                                         "resource": {"cpu": 4.0, "memory": "2048m"}}
    return World(deployments=FakeDeployments(deployment),
                 metrics=FakeMetrics(overloaded(0.99)))


def test_adaptive_parallelism_only_step_is_left_to_rescale_in_place() -> None:
    world = adaptive_world()
    world.run(policy(taskManager={"realization": "adaptive"}))
    [body] = world.deployments.applied
    # More tasks than one TaskManager holds, yet replicas stays: a replicas change would
    # make the operator restart the job; natively, Flink asks for TaskManagers itself.
    assert world.store.last.placement is not None
    assert world.store.last.placement.task_managers > 1
    assert body["spec"]["taskManager"]["replicas"] == 1
    stabilizing = world.store.last.condition(ConditionType.SCALING)
    assert stabilizing is not None and "in place" in stabilizing.message
    # Its Events say so too, with the in-place downtime, not the forecast's restart.
    enacted = world.store.last.enactment(world.store.last.step)
    assert enacted is not None and enacted.kind == "in-place"
    step_events = [m for _, r, m in world.events.events if r in EVENT_REASONS.values()]
    assert step_events and all(m.endswith("; in place, " + explain.downtime(
        enacted.expected_downtime_s)) for m in step_events)


def test_a_long_step_event_is_cut_in_its_vertex_sentence_never_in_what_it_costs() -> None:
    long_name = "GroupAggregate(groupBy=[" + ", ".join(f"k{i}" for i in range(400)) + "])"
    world = World(flink=FakeFlink(graph(counter_name=long_name)))
    world.run()
    step_events = [m for _, r, m in world.events.events if r in EVENT_REASONS.values()]
    assert step_events
    for m in step_events:
        assert len(m) <= 1000 and " s of downtime" in m[-80:]
    assert any("…; pods " in m for m in step_events)


def test_adaptive_in_standalone_mode_scales_the_replicas() -> None:
    world = adaptive_world("standalone")
    world.run(policy(taskManager={"realization": "adaptive"}))
    [body] = world.deployments.applied
    assert world.store.last.placement is not None
    assert body["spec"]["taskManager"]["replicas"] == world.store.last.placement.task_managers > 1
    stabilizing = world.store.last.condition(ConditionType.SCALING)
    assert stabilizing is not None and "in place" not in stabilizing.message


def test_adaptive_slots_are_uniform_and_sized_for_the_largest_task() -> None:
    config = {SOURCE: VertexConfig(2, None), COUNTER: VertexConfig(3, 1)}
    task = TaskFootprint(cpu_cores=1.0, heap_mib=100, network_mib=40)
    uniform = slots(graph(), config, MemoryScaling(), task, uniform=True)
    fine = slots(graph(), config, MemoryScaling(), task, uniform=False)
    assert [s.vertex_id for s in fine] == [SOURCE] * 2 + [COUNTER] * 3  # Flink's request order
    assert {s.managed_mib for s in uniform} == {316.0}
    assert [s.managed_mib for s in fine] == [0.0, 0.0, 316.0, 316.0, 316.0]


def test_counters_name_the_policy_and_are_forgotten_with_it() -> None:
    from controller import telemetry

    def value(name: str, **labels: str) -> float:
        return telemetry.REGISTRY.get_sample_value(name, labels) or 0.0

    who = {"namespace": "ns", "policy": "metered"}
    metered = policy().model_copy(update={"metadata": policy().metadata.model_copy(
        update={"name": "metered"})})
    before = value("hybridscaler_decisions_total", **who, kind="scale-up", mode="Active")
    World().run(metered)
    assert value("hybridscaler_evaluations_total", **who, outcome="reconfigure") >= 1
    assert value("hybridscaler_decisions_total", **who, kind="scale-up",
                 mode="Active") == before + 1
    World(metrics=FakeMetrics(None)).run(metered)
    assert value("hybridscaler_errors_total", **who, stage="metrics") >= 1
    telemetry.forget("ns", "metered")
    exposition = telemetry.REGISTRY.collect()
    assert not any(s.labels.get("policy") == "metered" for m in exposition for s in m.samples)


def test_a_step_records_its_enactment_expected_then_observed_downtime() -> None:
    world = World(deployments=FakeDeployments(flink_deployment("last-state")))
    world.metrics.checkpoint_bytes = 100e6  # a checkpoint completed: last-state can restore it
    world.run()
    [planned] = world.store.saved[0].enactments  # committed before the patch
    assert planned.kind == "last-state" and planned.state_bytes == 100_000_000
    assert planned.expected_downtime_s == expected_downtime_s(Enactment.LAST_STATE, 100e6)
    assert planned.applied_time is None
    [applied] = world.store.last.enactments
    assert applied.applied_time == T0 and applied.observed_downtime_s is None

    # The operator restarts the job: while it is not back, nothing is observed.
    assert world.deployments.deployment is not None
    world.deployments.deployment["status"] = {"lifecycleState": "UPGRADING",
                                              "jobStatus": {"state": "RESTARTING"}}
    world.now += 20
    world.run()
    assert world.store.last.enactments[-1].observed_downtime_s is None
    # The JobManager runs the old job still (the operator has not reacted): not yet either.
    world.deployments.deployment["status"] = {"lifecycleState": "STABLE",
                                              "jobStatus": {"state": "RUNNING"}}
    world.now += 5
    world.run()
    assert world.store.last.enactments[-1].observed_downtime_s is None
    # The new job started after the patch and runs: observed, once.
    world.flink.start_ms = int((T0 + 40) * 1000)
    world.now += 25
    world.run()
    assert world.store.last.enactments[-1].observed_downtime_s == 50.0
    world.now += 5
    world.run()
    assert world.store.last.enactments[-1].observed_downtime_s == 50.0


def test_the_next_step_is_priced_from_the_observed_downtime_of_the_last() -> None:
    """Restart costs are learned per deployment: status.enactments' observed downtimes
    move the policy's price and the next step's expected downtime off the model."""
    seen: list[float] = []

    def spy(*args: Any) -> Any:
        seen.append(args[3].restart_downtime_s)
        return evaluate(*args)

    from controller import decide as decide_stage
    from policies import evaluate

    model = expected_downtime_s(Enactment.SAVEPOINT, None)
    slow = [StepEnactment(step=s, kind="savepoint", expected_downtime_s=model,
                          applied_time=T0 - 3600 + s, observed_downtime_s=3 * model)
            for s in (1, 2)]
    world = World()
    world.store.saved.append(Status(enactments=tuple(slow)))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(decide_stage, "evaluate", spy)
        world.run()
    learned = learned_downtime_s(Enactment.SAVEPOINT, None, Status(
        enactments=tuple(slow)).observed_steps())
    assert learned > 1.5 * model
    assert seen == [learned]
    assert world.store.last.enactments[-1].expected_downtime_s == learned


def test_an_admission_refusal_has_its_own_reason_with_the_code_and_is_retried() -> None:
    deployments = RefusingDeployments(flink_deployment())
    world = World(deployments=deployments)
    assert world.run().outcome == "patch-refused"
    scaling = world.store.last.condition(ConditionType.SCALING)
    assert scaling is not None and (scaling.status, scaling.reason) == ("False",
                                                                        "PatchRefused")
    assert "HTTP 403" in scaling.message
    assert world.store.last.target is not None  # still committed: retried every pass
    assert world.store.last.enactments[-1].applied_time is None
    assert "ScaledUp" not in world.events.reasons()  # nothing was applied
    world.now += 5
    assert world.run().outcome == "patch-refused"
    assert world.events.reasons().count("PatchRefused") == 1  # once, not every pass
    deployments.code = None  # the quota was raised
    world.now += 5
    world.run()
    assert deployments.applied and "Resumed" in world.events.reasons()
    assert scaling_reason(world.store.last) == Reason.STABILIZING
    assert world.store.last.enactments[-1].applied_time == world.now


@pytest.mark.parametrize("unreadable", [False, True])
def test_a_refused_step_is_not_replaced_by_steps_decided_from_a_job_it_never_changed(
        unreadable: bool) -> None:
    deployments = RefusingDeployments(flink_deployment())
    world = World(deployments=deployments)
    world.run()
    committed = world.store.last
    if unreadable:  # the tenant's own value, which flink-plugin refuses: levels unknown
        assert deployments.deployment is not None
        deployments.deployment["spec"]["flinkConfiguration"][RESOURCES_KEY] = "[1]"
    # Windows go by, each one due by the waiting rule: the job still runs what it ran.
    for _ in range(4):
        world.now += 40
        assert world.run().outcome == "patch-refused"
    last = world.store.last
    assert last.step == committed.step == 1 and last.history == committed.history
    assert last.target == committed.target
    assert world.events.reasons().count("PatchRefused") == 1
    # An edit of the policy may be the refusal's fix: the next pass decides afresh, from
    # levels it can read.
    world.now += 40
    world.run(generation=2)
    if unreadable:
        assert world.store.last.last_decision == last.last_decision
        return
    assert world.store.last.last_decision is not None
    assert world.store.last.last_decision.time == world.now


@pytest.mark.parametrize("back_after_s", [15, 120])
def test_a_step_found_applied_after_a_crash_is_not_learned_as_a_restart(
        back_after_s: float) -> None:
    world = World(deployments=FakeDeployments(flink_deployment("last-state")))
    deployment = world.deployments.deployment
    assert deployment is not None
    deployment["metadata"]["uid"] = "u1"
    world.metrics.checkpoint_bytes = 100e6
    world.store.kill_on_save = 2  # dies after the patch, before record saves it
    with pytest.raises(Killed):
        world.run()
    world.store.kill_on_save = None
    world.flink.start_ms = int((T0 + 40) * 1000)  # the job is back 40 s after the patch
    if back_after_s < 40:  # the controller is back while the job restarts
        deployment["status"] = {"lifecycleState": "UPGRADING",
                                "jobStatus": {"state": "RESTARTING"}}
    world.now = T0 + back_after_s
    world.run()
    [entry] = world.store.last.enactments
    assert entry.applied_time == world.now and entry.applied_unseen
    deployment["status"] = {"lifecycleState": "STABLE", "jobStatus": {"state": "RUNNING"}}
    outcomes = []
    for _ in range(4):  # within the stabilization and window after it was found
        world.now = max(world.now + 5, T0 + 45)
        outcomes.append(world.run().outcome)
    # Downtime counted from when a pass found the step is not the step's (40 s): nothing
    # is learned, and no pass waits to learn it (found after the job's start, the quiet
    # passes' due time is bound without reading the job).
    [entry] = world.store.last.enactments
    assert entry.observed_downtime_s is None and world.store.last.observed_steps() == ()
    assert ("quiet" in outcomes) == (back_after_s > 40), outcomes


@pytest.mark.parametrize("outage", [False, True])
def test_a_scale_down_wait_starts_over_after_a_gap_in_the_evaluations(outage: bool) -> None:
    calm = VertexMetrics(100, 110, 0, 10_000, 10_000)  # 10 % busy: DS2 wants fewer tasks
    world = World(metrics=FakeMetrics(calm))
    ds2 = policy(policy="ds2", cpu={"scaleDownDelay": "300s"})
    scaled_in = None
    for t in range(0, 1_200, 5):
        world.now = T0 + t
        if outage:  # Prometheus (or the controller) is down from 30 s to 600 s
            world.metrics.counter = None if 30 <= t < 600 else calm
        if world.run(ds2).outcome == "reconfigured":
            scaled_in = t
            break
    assert scaled_in is not None
    # The load during the outage was never seen: the 300 s wait counts from after it.
    assert scaled_in >= (600 + 300 if outage else 300), scaled_in


def test_without_a_checkpoint_a_last_state_step_is_priced_as_a_savepoint() -> None:
    world = World(deployments=FakeDeployments(flink_deployment("last-state")))
    world.run()
    [enactment] = world.store.last.enactments
    assert enactment.kind == "savepoint" and enactment.state_bytes is None
    assert enactment.expected_downtime_s == expected_downtime_s(Enactment.SAVEPOINT, None)


def test_a_savepoint_step_says_what_last_state_would_save_and_keeps_upgrade_mode() -> None:
    world = World(deployments=FakeDeployments(flink_deployment("savepoint")))
    world.metrics.checkpoint_bytes = 2e9  # a completed checkpoint of 2 GB
    world.run()
    [e] = world.store.last.enactments
    assert e.kind == "savepoint"
    assert e.last_state_downtime_s == expected_downtime_s(Enactment.LAST_STATE, 2e9)
    assert e.last_state_downtime_s < e.expected_downtime_s
    scaling = world.store.last.condition(ConditionType.SCALING)
    assert scaling is not None
    assert f"last-state would take ~{e.last_state_downtime_s:g} s" in scaling.message
    # The signal is all: the user's upgradeMode is not the controller's to change.
    assert world.deployments.deployment is not None
    assert world.deployments.deployment["spec"]["job"]["upgradeMode"] == "savepoint"


def test_an_adaptive_parallelism_only_step_is_priced_in_place() -> None:
    world = adaptive_world()
    world.metrics.checkpoint_bytes = 100e6
    world.run(policy(taskManager={"realization": "adaptive"}))
    [enactment] = world.store.last.enactments
    assert enactment.kind == "in-place"
    assert enactment.expected_downtime_s == expected_downtime_s(Enactment.IN_PLACE, 100e6)


def test_a_policy_weighs_the_measured_restart_downtime_unless_the_spec_says() -> None:
    seen: list[float] = []

    def spy(*args: Any) -> Any:
        seen.append(args[3].restart_downtime_s)
        return evaluate(*args)

    from controller import decide as decide_stage
    from policies import evaluate

    world = World(deployments=FakeDeployments(flink_deployment("last-state")))
    world.metrics.checkpoint_bytes = 200e6
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(decide_stage, "evaluate", spy)
        world.run()
        assert seen == [expected_downtime_s(Enactment.LAST_STATE, 200e6)]
        other = World()
        other.run(policy(cost={"restartDowntime": "5m"}))
        assert seen[-1] == 300.0
    # ... and what the step is recorded to expect is what the policy weighed.
    assert other.store.last.enactments[-1].expected_downtime_s == 300.0


def with_pods(deployment: dict[str, Any], cpu: float, memory: str, replicas: int
              ) -> dict[str, Any]:
    deployment["spec"]["taskManager"] = {"resource": {"cpu": cpu, "memory": memory},
                                         "replicas": replicas}
    return deployment


def test_columns_and_events_speak_of_what_the_pods_request() -> None:
    # 3 TaskManagers of 4 cores and 2 GiB run the job; the step places it anew.
    world = World(deployments=FakeDeployments(with_pods(flink_deployment(), 4, "2048m", 3)))
    world.run()
    [body] = world.deployments.applied
    tm = body["spec"]["taskManager"]
    replicas, cpu = tm["replicas"], tm["resource"]["cpu"]
    memory_mib = int(tm["resource"]["memory"].removesuffix("m"))
    status = world.store.last
    summary = status.summary
    # The printer columns: the pods' requests as written to the FlinkDeployment.
    assert (summary.task_managers, summary.cpu) == (replicas, cpu * replicas)
    assert summary.memory == format_memory_mib(memory_mib * replicas)
    assert summary.price == pytest.approx(cpu * replicas + memory_mib * replicas / 1024 * 0.134,
                                          abs=1e-4)
    # Beside them, what the tasks use (the paper's accounting): 4 tasks of a quarter TM's
    # CPU fill its cores, but not its memory.
    assert (summary.task_cpu, summary.task_memory) == (4.0, "1328Mi")
    placement = status.placement
    assert placement is not None and placement.pods is not None
    assert placement.pods_before == PodRequest(task_managers=3, cpu=12, memory="6Gi",
                                               price=12.804)
    assert placement.pods.cpu == summary.cpu and placement.pods.price == summary.price
    change = describe_change(bill_of(placement.pods_before), bill_of(placement.pods))
    assert change.startswith("pods 3 TaskManagers: 12 cores, 6 GiB, 12.80/h → ")
    step_events = [m for _, r, m in world.events.events if r in ("ScaledUp", "MemoryStripped")]
    # Each step Event ends with the bill's change, then how the step is enacted with its
    # expected downtime: the next evaluation overwrites status.lastDecision, the Events
    # keep what the step cost.
    decision = status.last_decision
    enacted = status.enactment(status.step)
    assert decision is not None and enacted is not None
    how = enacted.describe()
    assert how.startswith("by ") and " s of downtime" in how
    assert step_events and all(m.endswith(f"; {change}; {how}") for m in step_events)
    # The step's record keeps its reason after the next evaluation replaces lastDecision.
    assert status.history[-1].reason == decision.reason
    reconfiguring = world.store.saved[0].condition(ConditionType.SCALING)
    assert reconfiguring is not None and reconfiguring.message.endswith(change)


def test_recommend_states_the_predicted_pod_bill_and_columns_show_what_runs() -> None:
    world = World(deployments=FakeDeployments(with_pods(flink_deployment(), 4, "2048m", 5)))
    world.run(policy("Recommend"))
    [(_, reason, message)] = world.events.events
    assert reason == "Recommended"
    assert "; pods 5 TaskManagers: 20 cores, 10 GiB, 21.34/h → " in message
    assert message.endswith("/h") and ("saving" in message or "more" in message
                                       or "same price" in message)
    scaling = world.store.last.condition(ConditionType.SCALING)
    assert scaling is not None and "pods 5 TaskManagers" in scaling.message
    summary = world.store.last.summary
    assert (summary.task_managers, summary.cpu, summary.memory) == (5, 20.0, "10Gi")


def test_an_event_says_each_vertex_change_once() -> None:
    world = World()
    world.run()
    [stripped] = [m for _, r, m in world.events.events if r == "MemoryStripped"]
    # 'step 1: source p 2, level 0 (158 MiB)→⊥ (no managed memory): <why>; pods …'
    assert stripped.startswith("step 1: source p 2, level 0 (")
    assert stripped.count("p 2") == 1 and stripped.count("no managed memory") == 1


def test_a_pass_builds_the_scaling_params_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """decide, place and desired share one ScalingParams (in fine-grained mode it holds
    the pod pricing: the packer's bounds and prices), built once per pass."""
    built: list[object] = []
    original = HybridScalingPolicySpec.scaling_params

    def counting(self: HybridScalingPolicySpec) -> ScalingParams:
        built.append(self)
        return original(self)

    monkeypatch.setattr(HybridScalingPolicySpec, "scaling_params", counting)
    world = World()
    assert world.run().outcome == "reconfigured"
    assert len(built) == 1
