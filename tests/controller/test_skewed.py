"""The Skewed condition and its Warning Event, on the loop's fakes (test_loop.py)."""

from __future__ import annotations

from controller.api import ConditionType
from controller.record import Reason
from policies.model import VertexMetrics

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
    for words in ("counter", "100% busy", "mean 36%", "mini-batch", "pre-aggregate"):
        assert words in warning[2], words
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
