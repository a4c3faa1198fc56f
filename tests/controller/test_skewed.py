"""The Skewed condition and its Warning Event, on the loop's fakes (test_loop.py)."""

from __future__ import annotations

from typing import Any

import pytest

from controller import simulate
from controller.adapters.twin import MemoryEvents, twin_ports
from controller.adapters.twin import flink_deployment as twin_deployment
from controller.api import ConditionType, Status
from controller.loop import reconcile
from controller.record import Reason
from controller.simulate import NAME, NAMESPACE, closed_loop_policy
from policies.model import VertexMetrics
from simulator.model import JobModel
from simulator.results import GRANULARITY_S, STABILIZATION_S, WINDOW_S, PolicyName
from simulator.twin import Twin

from .test_loop import FakeFlink, FakeMetrics, World, graph, policy


def hot_key() -> VertexMetrics:
    """The counter at 4 tasks: one subtask takes 70 % of the records and is saturated."""
    return VertexMetrics(357, 1000, 0, 10_000, 10_000, records_in_per_s_max=7_000)


def balanced() -> VertexMetrics:
    return VertexMetrics(500, 520, 0, 10_000, 10_000, records_in_per_s_max=2_600)


def test_skewed_condition_and_one_warning_per_change() -> None:
    world = World(flink=FakeFlink(graph(4)), metrics=FakeMetrics(hot_key()))
    recommend = policy("Recommend")
    world.run(recommend)
    skewed = world.store.last.condition(ConditionType.SKEWED)
    assert skewed is not None and (skewed.status, skewed.reason) == ("True", Reason.HOT_SUBTASK)
    assert "counter" in skewed.message and "100% busy" in skewed.message
    [warning] = [e for e in world.events.events if e[1] == Reason.SKEWED]
    assert warning[0] == "Warning"
    for words in ("counter", "100% busy", "mean 36%", "pre-aggregate"):
        assert words in warning[2], words
    # A DataStream vertex is told its remedy once, not SQL settings beside it.
    assert "mini-batch" not in warning[2] and warning[2].count("pre-aggregate") == 1
    decision = world.store.last.last_decision
    assert decision is not None and [f.vertex_name for f in decision.skew] == ["counter"]

    world.now += 20  # the same skew on the next window: no second Event
    world.run(recommend)
    assert world.events.reasons().count(Reason.SKEWED) == 1

    world.metrics.counter = balanced()
    world.now += 20
    world.run(recommend)
    skewed = world.store.last.condition(ConditionType.SKEWED)
    assert skewed is not None and (skewed.status, skewed.reason) == ("False", Reason.BALANCED)

    world.metrics.counter = hot_key()  # back: turning True again is news
    world.now += 20
    world.run(recommend)
    assert world.events.reasons().count(Reason.SKEWED) == 2


def test_skew_that_more_tasks_spread_is_reported_but_balanced() -> None:
    # 40 % of the records on one of 4 subtasks; alone, its hot key group is about half busy.
    spread = VertexMetrics(625, 1000, 0, 10_000, 10_000, records_in_per_s_max=4_000)
    world = World(flink=FakeFlink(graph(4)), metrics=FakeMetrics(spread))
    world.run(policy("Recommend"))
    skewed = world.store.last.condition(ConditionType.SKEWED)
    assert skewed is not None and (skewed.status, skewed.reason) == ("False", Reason.BALANCED)
    assert "more tasks can spread it" in skewed.message
    assert Reason.SKEWED not in world.events.reasons()


# --- the closed loop: the controller's pass over the twin (controller/simulate.py) -------


def keyed_job(distribution: dict[str, Any], keys: int) -> JobModel:
    """Source → keyed count (HASH) → sink at 30,000 records/s; a count task does ~8,000/s."""
    return JobModel.model_validate({
        "name": "hot-key", "load": {"pattern": "constant", "rate": 30_000},
        "operators": [
            {"uid": "src", "name": "Source", "cpu_us": 1.0},
            {"uid": "count", "name": "Count", "cpu_us": 80.0, "initial_parallelism": 4,
             "inputs": [{"from": "src", "ship": "HASH"}],
             "state": {"keys": keys, "value_bytes": 100, "distribution": distribution,
                       "access": {"update": 1.0}}},
            {"uid": "sink", "name": "Sink", "cpu_us": 1.0, "selectivity": 0.0,
             "fixed_parallelism": True, "inputs": [{"from": "count", "ship": "REBALANCE"}]},
        ],
    })


def closed_loop(model: JobModel, duration_s: float, seed: int = 0
                ) -> tuple[list[tuple[float, Status]], MemoryEvents]:
    """`controller.simulate.run`'s loop, keeping every pass's status and the Events."""
    twin = Twin(model, seed=seed)
    ports, _, _ = twin_ports(twin, twin_deployment(model, NAME, NAMESPACE),
                          job_started_s=-STABILIZATION_S)
    hsp = closed_loop_policy(model, "ds2")
    status, passes = Status(), []
    while twin.time + 1e-9 < duration_s:
        twin.advance(GRANULARITY_S)
        status = reconcile(hsp, 1, status, ports).status
        passes.append((twin.time, status))
    assert isinstance(ports.events, MemoryEvents)
    return passes, ports.events


def test_a_hot_key_is_named_within_two_windows_on_the_twin() -> None:
    # Zipf s = 1.4 over 50 keys: the hottest key carries a third of the records, more
    # than one count task can process wherever it goes.
    passes, events = closed_loop(keyed_job({"kind": "zipf", "s": 1.4}, 50), 2 * WINDOW_S)
    skewed = [(t, s.condition(ConditionType.SKEWED)) for t, s in passes]
    first = next(t for t, c in skewed if c is not None and c.status == "True")
    assert first <= 2 * WINDOW_S
    condition = passes[-1][1].condition(ConditionType.SKEWED)
    assert condition is not None and condition.reason == Reason.HOT_SUBTASK
    assert "Count" in condition.message
    warnings = [e for e in events.events if e[2] == Reason.SKEWED]
    assert len(warnings) == 1 and warnings[0][1] == "Warning"
    decision = passes[-1][1].last_decision
    assert decision is not None
    [finding] = decision.skew
    assert finding.vertex_name == "Count" and finding.from_records
    assert not finding.scale_out_helps and finding.hottest_busyness > 0.9


@pytest.mark.parametrize("policy", ["ds2", "justin", "capacity"])
def test_simulate_reports_when_each_policy_named_the_hot_key(policy: PolicyName) -> None:
    hot = simulate.run(keyed_job({"kind": "zipf", "s": 1.4}, 50), policy, 2 * WINDOW_S)
    assert hot.skewed_at_s is not None and hot.skewed_at_s <= 2 * WINDOW_S
    assert hot.as_json()["skewed_at_s"] == hot.skewed_at_s
    even = simulate.run(keyed_job({"kind": "uniform"}, 1_000_000), policy, 2 * WINDOW_S)
    assert even.skewed_at_s is None


def test_uniform_keys_are_never_called_skewed_on_the_twin() -> None:
    """The same job with a million uniform keys, 20 minutes of DS2 under the twin's noise."""
    passes, events = closed_loop(keyed_job({"kind": "uniform"}, 1_000_000), 1_200.0)
    assert all(s.last_decision is None or s.last_decision.skew == () for _, s in passes)
    assert all((c := s.condition(ConditionType.SKEWED)) is None or c.status == "False"
               for _, s in passes)
    assert Reason.SKEWED not in [e[2] for e in events.events]
