"""evaluate(): DS2, Justin and the limits together, over several steps with persisted state."""

from __future__ import annotations

from dataclasses import replace

import pytest

from policies import Evaluation, PolicyState, ScalingParams, evaluate, limits
from policies.decision import HISTORY_REASON_LIMIT, Action, Branch, HistoryRecord
from policies.evaluate import _record
from policies.model import JobGraph, Observation, VertexConfig, VertexMetrics
from policies.params import totals
from policies.spec import CpuScaling, Limits, MemoryScaling, Policy
from tests.policies.builders import NOW, chain, metrics, observe, source, vertex

# Justin over several steps: the capacity policy has its own tests (test_capacity.py).
PARAMS = ScalingParams(policy=Policy.JUSTIN, cpu=CpuScaling(scale_down_delay=0))
GRAPH = chain(vertex("src", 2), vertex("counter", 2, 0), vertex("sink", 2))


def counter(theta: float, busy: float = 900) -> VertexMetrics:
    return metrics(busy, 1000, hits=theta * 1000, misses=(1 - theta) * 1000)


def job(theta: float, busy: float = 900, now: float = NOW) -> Observation:
    """The counter runs at `busy` (0.9: above 0.8, DS2 wants 2→4) with hit rate θ."""
    return observe(now, src=source(500, 1000), counter=counter(theta, busy),
                   sink=metrics(500, 1000, 0))


def step(graph: JobGraph, obs: Observation, state: PolicyState,
         params: ScalingParams = PARAMS) -> tuple[JobGraph, Evaluation]:
    e = evaluate(graph, obs, state, params, obs.time)
    return graph.with_configuration(e.configuration), e


def test_missing_metrics_mean_no_decision_and_name_the_vertices() -> None:
    obs = observe(src=source(500, 1000), sink=metrics(900, 1000, 0))
    state = PolicyState(step=3)
    e = evaluate(GRAPH, obs, state, PARAMS, NOW)
    assert not e.decision.reconfigures
    assert "no metrics for 1 vertices (Counter)" in e.decision.reason
    assert e.decision.vertex("counter").branch is Branch.NO_METRICS
    assert e.state == state
    assert dict(e.configuration) == dict(GRAPH.configuration())


def test_not_triggered_changes_nothing() -> None:
    e = evaluate(GRAPH, job(0.3, busy=500), PolicyState(), PARAMS, NOW)
    assert not e.decision.reconfigures
    assert {d.branch for d in e.decision.vertices} == {Branch.NOT_TRIGGERED}
    assert e.state.step == 0 and e.state.history == ()
    assert e.decision.before == e.decision.after


def test_memory_disabled_is_plain_ds2_and_leaves_memory_levels_alone() -> None:
    params = replace(PARAMS, memory=MemoryScaling(enabled=False))
    e = evaluate(GRAPH, job(0.3), PolicyState(), params, NOW)
    assert {d.branch for d in e.decision.vertices} == {Branch.MEMORY_DISABLED}
    assert {vid: (c.parallelism, c.memory_level) for vid, c in e.configuration.items()} == {
        "src": (2, 0), "counter": (4, 0), "sink": (2, 0)}


def test_a_memory_only_change_is_a_decision_like_any_other() -> None:  # flaw 2
    e = evaluate(GRAPH, job(0.42), PolicyState(), PARAMS, NOW)
    d = e.decision
    assert d.reconfigures and d.step == 1
    c = d.vertex("counter")
    assert (c.action, c.branch, c.parallelism_after, c.memory_level_after) == (
        Action.SCALE_UP, Branch.MEMORY_PRESSURE, 2, 1)
    # the stateless vertices lose their managed memory in the same step
    assert d.vertex("src").action is Action.STRIP_MEMORY
    assert d.after.memory_mib == 2 * 316  # only the counter keeps managed memory
    assert e.state.step == 1 and e.state.last_reconfiguration_time == NOW
    (record,) = e.state.history
    h = record.vertex("counter")
    assert h is not None and h.scaled_up and h.memory_level == 1
    assert h.cache_hit_rate == pytest.approx(0.42)


def test_a_vertex_ds2_leaves_alone_keeps_its_memory_level() -> None:  # flaw 3
    graph = chain(vertex("src", 1, None), vertex("counter", 2, 2), vertex("sink", 2, None))
    obs = observe(src=source(1000, 1000),  # the source is overloaded: DS2 triggers
                  counter=counter(0.3, busy=500), sink=metrics(500, 1000, 0))
    e = evaluate(graph, obs, PolicyState(), PARAMS, NOW)
    c = e.decision.vertex("counter")
    assert (c.branch, c.parallelism_after, c.memory_level_after) == (Branch.UNCHANGED, 2, 2)
    assert e.decision.vertex("src").action is Action.SCALE_OUT


def test_justin_over_several_steps_scales_up_while_it_helps_then_out() -> None:
    graph, state = GRAPH, PolicyState()
    branches = []
    for i, theta in enumerate([0.42, 0.60, 0.70, 0.70]):
        graph, e = step(graph, job(theta, now=NOW + 300 * i), state)
        state = e.state
        branches.append(e.decision.vertex("counter").branch)
    assert branches == [
        Branch.MEMORY_PRESSURE,  # level 0 -> 1, p stays 2
        Branch.SCALED_UP_HELPED,  # θ 0.42 -> 0.60: level 1 -> 2
        Branch.SCALED_UP_HELPED_AT_MAX,  # θ 0.60 -> 0.70 but level 2 is maxLevel-1: scale out
        Branch.MEMORY_PRESSURE_AT_MAX,  # last step was no scale-up; θ < Δθ; at max: scale out
    ]
    assert graph.vertex("counter").memory_level == 2
    assert state.step == 4 and len(state.history) == 4


def test_a_scale_up_that_did_not_help_is_rolled_back() -> None:
    graph, first = step(GRAPH, job(0.42), PolicyState())
    graph, second = step(graph, job(0.42, now=NOW + 300), first.state)
    c = second.decision.vertex("counter")
    assert (c.action, c.branch) == (Action.MEMORY_ROLLBACK, Branch.SCALED_UP_NO_GAIN)
    assert (graph.vertex("counter").parallelism, graph.vertex("counter").memory_level) == (4, 0)


def test_history_is_bounded() -> None:
    graph, state = GRAPH, PolicyState()
    for i in range(12):  # alternate overload and idle-ish load: every step reconfigures
        busy = 900 if i % 2 == 0 else 100
        graph, e = step(graph, job(0.95, busy=busy, now=NOW + 60 * i), state)
        assert e.decision.reconfigures
        state = e.state
    assert state.step == 12
    assert [r.step for r in state.history] == list(range(3, 13))


def test_each_step_keeps_why_it_was_taken_cut_to_the_records_bound() -> None:
    _, first = step(GRAPH, job(0.95), PolicyState())
    [record] = first.state.history
    assert record.reason == first.decision.reason and "Counter scale-out" in record.reason
    # A reason past what a record holds (hundreds of vertices) is cut in the middle, not
    # refused: it keeps the trigger and the forecast it ends with.
    ends = "; applying this saves 3 cores, expected 60 s of downtime"
    reason = "DS2 triggered: " + "x" * HISTORY_REASON_LIMIT + ends
    long = first.decision.model_copy(update={"reason": reason, "step": 2})
    [_, cut] = _record(first.state, long, job(0.95), NOW + 60).history
    assert len(cut.reason) == HISTORY_REASON_LIMIT and cut.reason.count("…") == 1
    assert cut.reason.startswith("DS2 triggered: x") and cut.reason.endswith("x" + ends)
    # A status stored before the field reads as no reason.
    assert HistoryRecord.model_validate({"time": NOW, "step": 1, "vertices": []}).reason == ""


def test_scale_down_delay_survives_between_evaluations() -> None:
    params = ScalingParams(policy=Policy.JUSTIN, cpu=CpuScaling(scale_down_delay=120))
    graph = chain(vertex("src", 1, None), vertex("sink", 8, None))
    calm = {"src": source(500, 1000), "sink": metrics(50, 1000, 0)}  # sink wants fewer than 8
    first = evaluate(graph, observe(NOW, **calm), PolicyState(), params, NOW)
    assert not first.decision.reconfigures
    assert dict(first.state.scale_down_wanted_since) == {"sink": NOW}
    later = evaluate(graph, observe(NOW + 120, **calm), first.state, params, NOW + 120)
    assert later.decision.reconfigures
    assert later.configuration["sink"].parallelism == 4  # ceil(8 * 0.4): max scale-down factor
    assert dict(later.state.scale_down_wanted_since) == {}


def test_clipping_is_reported_on_the_decision_and_the_vertex() -> None:
    params = replace(PARAMS, limits=Limits(max_cpu_cores=7), memory=MemoryScaling(enabled=False))
    e = evaluate(GRAPH, job(0.95, busy=1000), PolicyState(), params, NOW)  # counter wants 2→4
    assert e.decision.clipped
    assert "max 7 cores" in e.decision.clip_reason and e.decision.clip_reason in e.decision.reason
    c = e.decision.vertex("counter")
    assert c.branch is Branch.CLIPPED
    assert c.parallelism_after == 3 and e.configuration["counter"].parallelism == 3
    assert "scale-out 2→4 trimmed to 2→3" in c.reason and "was memory-disabled" in c.reason
    assert e.decision.after.cpu_cores == 7


@pytest.mark.parametrize("policy", [Policy.JUSTIN, Policy.CAPACITY])
def test_a_lowered_quota_takes_effect_with_a_reason_naming_it(policy: Policy) -> None:
    """A GitOps edit lowers spec.limits below what runs, in a window where the policy would
    keep everything: memory levels come down first while memory is over, then tasks."""
    graph = chain(vertex("src", 2), vertex("counter", 6, 2), vertex("sink", 2))
    quiet = observe(src=source(500, 1000), counter=counter(0.9, busy=500),
                    sink=metrics(500, 1000, 0))
    base = replace(PARAMS, policy=policy)
    running = totals(graph.configuration(), base)
    cores = replace(base, limits=Limits(max_cpu_cores=running.cpu_cores - 3))
    e = evaluate(graph, quiet, PolicyState(), cores, NOW)
    assert e.decision.reconfigures
    assert e.configuration["counter"] == VertexConfig(3, 2)  # the most tasks to spare
    assert e.decision.vertex("counter").branch is Branch.OUT_OF_BOUNDS
    assert f"spec.limits maxCpuCores is {running.cpu_cores - 3:g}" in e.decision.reason
    memory = replace(base, limits=Limits(max_memory=f"{running.memory_mib - 1000:.0f}Mi"))
    e = evaluate(graph, quiet, PolicyState(), memory, NOW)
    assert e.configuration["counter"] == VertexConfig(6, 1)  # a level, not tasks
    assert "spec.limits maxMemory is" in e.decision.reason
    assert totals(e.configuration, memory).memory_mib <= running.memory_mib - 1000
    # Within them again, the next window decides as the policy would.
    again = evaluate(graph.with_configuration(e.configuration), quiet, e.state, memory,
                     NOW + 300)
    assert all(d.branch is not Branch.OUT_OF_BOUNDS for d in again.decision.vertices)


def test_a_quota_not_even_the_minimum_meets_moves_nothing() -> None:
    graph = chain(vertex("src", 2), vertex("counter", 6, 2), vertex("sink", 2))
    params = replace(PARAMS, limits=Limits(max_cpu_cores=2))  # 3 vertices need 3 tasks
    assert limits.bounded(graph, params) is None


def test_evaluate_is_deterministic() -> None:
    a = evaluate(GRAPH, job(0.42), PolicyState(), PARAMS, NOW)
    b = evaluate(GRAPH, job(0.42), PolicyState(), PARAMS, NOW)
    assert a == b


@pytest.mark.parametrize("policy", [Policy.JUSTIN, Policy.CAPACITY])
def test_a_lowered_bound_takes_effect_with_a_reason_naming_it(policy: Policy) -> None:
    """A GitOps edit lowers maxParallelism below what runs, in a window where the policy
    itself would keep everything: the step moves the job within it, naming the bound."""
    graph = chain(vertex("src", 2), vertex("counter", 6, 2), vertex("sink", 2))
    quiet = observe(src=source(500, 1000), counter=counter(0.9, busy=500),
                    sink=metrics(500, 1000, 0))
    params = replace(PARAMS, policy=policy, cpu=CpuScaling(scale_down_delay=0,
                                                           max_parallelism=4),
                     memory=MemoryScaling(max_level=2))
    e = evaluate(graph, quiet, PolicyState(), params, NOW)
    assert e.decision.reconfigures
    assert (e.configuration["counter"].parallelism, e.configuration["counter"].memory_level) \
        == (4, 1)
    assert e.decision.vertex("counter").branch is Branch.OUT_OF_BOUNDS
    assert "spec.cpu maxParallelism is 4" in e.decision.reason
    assert "spec.memory.maxLevel is 2" in e.decision.reason
    # Within the bounds again, the next window decides as the policy would.
    after = graph.with_configuration(e.configuration)
    again = evaluate(after, quiet, e.state, params, NOW + 300)
    assert all(d.branch is not Branch.OUT_OF_BOUNDS for d in again.decision.vertices)


def test_ds2_does_not_scale_in_back_to_where_it_was_short_at_the_same_load() -> None:
    # The flip-flop of docs/simulator.md in three windows: the counter runs 2 tasks at 90 %
    # (DS2: 4), at 4 tasks it runs at 95 % (fewer tasks miss the cache less: DS2: 8), and
    # at 8 it runs at 10 %, which DS2's linear estimate reads as "2 are enough" (4 after
    # the scale-down cap). 2 and 4 were short at this load: halfway from 5 to 8 is 6.
    params = replace(PARAMS, policy=Policy.DS2, memory=MemoryScaling(enabled=False))
    g, e1 = step(GRAPH, job(0.3), PolicyState(), params)
    assert e1.configuration["counter"].parallelism == 4
    stored = e1.state.history[-1].vertex("counter")
    assert (stored.parallelism_before, stored.target_rate, stored.utilization) == (2, 1000, 0.9)
    g, e2 = step(g, job(0.3, busy=950, now=NOW + 300), e1.state, params)
    assert e2.configuration["counter"].parallelism == 8
    g, e3 = step(g, job(0.3, busy=100, now=NOW + 600), e2.state, params)
    counter_ = e3.decision.vertex("counter")
    assert e3.configuration["counter"].parallelism == 6
    assert "scaled out from 4 tasks, short at this load, so not back there: halfway, 6" \
        in counter_.reason
