"""Properties of evaluate() over random DAGs, metrics and parameters, and of Justin's
Algorithm 1 over random vertices and previous steps (hypothesis)."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from hypothesis import assume, event, given, settings
from hypothesis import strategies as st

from policies import PolicyState, ScalingParams, ds2, evaluate, justin, totals
from policies.decision import Action, HistoryRecord, VertexHistory
from policies.explain import action
from policies.model import Edge, JobGraph, Observation, ShipStrategy, Vertex, VertexMetrics
from policies.params import within_limits
from policies.spec import (
    CpuScaling,
    Limits,
    MemoryScaling,
    ParallelismOverride,
    Policy,
    TaskFootprint,
)

NOW = 10_000.0
settings.register_profile("policies", parent=settings.get_profile("untimed"), max_examples=300)
settings.register_profile("policies-thorough", parent=settings.get_profile("untimed"),
                          max_examples=20_000)
# POLICIES_HYPOTHESIS=policies-thorough searches longer (minutes) before a release.
settings.load_profile(os.environ.get("POLICIES_HYPOTHESIS", "policies"))


@dataclass(frozen=True)
class Scenario:
    graph: JobGraph
    observation: Observation
    params: ScalingParams
    state: PolicyState


@st.composite
def cpu_scalings(draw: st.DrawFn) -> CpuScaling:
    u_min = draw(st.floats(0.05, 0.4))
    u_target = draw(st.floats(u_min, 0.7))
    u_max = draw(st.floats(u_target, 1.0))
    low = draw(st.integers(1, 4))
    high = draw(st.integers(low, 40))
    overrides = ()
    if draw(st.booleans()):
        o_low = draw(st.integers(1, 6))
        overrides = (ParallelismOverride(vertex_id="v1", min_parallelism=o_low,
                                         max_parallelism=draw(st.integers(o_low, 12))),)
    return CpuScaling(
        utilization_min=u_min, utilization_target=u_target, utilization_max=u_max,
        min_parallelism=low, max_parallelism=high, overrides=overrides,
        max_scale_up_factor=draw(st.floats(0.1, 10)),
        max_scale_down_factor=draw(st.floats(0.05, 0.95)),
        scale_down_delay=draw(st.sampled_from([0.0, 300.0])),
        catch_up_duration=draw(st.sampled_from([0.0, 300.0])),
    )


@st.composite
def vertex_metrics(draw: st.DrawFn, is_source: bool) -> VertexMetrics:
    busy = draw(st.floats(0, 1000))
    rate_in = 0.0 if is_source else draw(st.floats(0, 50_000))
    rate_out = draw(st.floats(0, 50_000))
    stateful = draw(st.booleans())
    cache = stateful and draw(st.booleans())
    return VertexMetrics(
        busy_ms_per_s=busy, busy_ms_per_s_max=busy, backpressured_ms_per_s=0.0,
        records_in_per_s=rate_in, records_out_per_s=rate_out,
        pending_records=draw(st.floats(0, 1e7)) if is_source else None,
        pending_records_growth_per_s=draw(st.floats(-100, 5000)) if is_source else None,
        cache_hits_per_s=draw(st.floats(0, 1e5)) if cache else None,
        cache_misses_per_s=draw(st.floats(0, 1e5)) if cache else None,
        state_latency_ns=draw(st.floats(1e3, 1e8)) if stateful and draw(st.booleans()) else None,
        has_state_backend_metrics=stateful,
    )


@st.composite
def scenarios(draw: st.DrawFn, with_limits: bool = True) -> Scenario:
    cpu = draw(cpu_scalings())
    memory = MemoryScaling(enabled=draw(st.booleans()), max_level=draw(st.integers(1, 4)))
    n = draw(st.integers(1, 6))
    vertices: list[Vertex] = []
    edges: list[Edge] = []
    for i in range(n):
        vid = f"v{i}"
        max_p = draw(st.sampled_from([1, 7, 12, 16, 30, 128]))
        low, high = cpu.bounds_for(vid, ())
        upper = min(high, max_p)
        p = draw(st.integers(min(low, upper), upper))
        level = draw(st.none() | st.integers(0, memory.max_level - 1))
        vertices.append(Vertex(vid, f"V{i}", max_p, p, level))
        if i > 0 and draw(st.integers(0, 3)) > 0:  # most vertices have inputs; some are sources
            parents = draw(st.sets(st.integers(0, i - 1), min_size=1, max_size=2))
            ship = draw(st.sampled_from(list(ShipStrategy)))
            edges += [Edge(f"v{j}", vid, ship) for j in sorted(parents)]
    graph = JobGraph(tuple(vertices), tuple(edges))
    observation = Observation(
        time=NOW, window_s=120.0,
        vertices={v.id: draw(vertex_metrics(graph.is_source(v.id))) for v in vertices},
    )
    limits = Limits()
    if with_limits and draw(st.booleans()):
        limits = Limits(max_cpu_cores=draw(st.floats(1, 100)),
                        max_memory=draw(st.none() | st.floats(500, 50_000).map(lambda m: f"{m}Mi")))
    params = ScalingParams(
        policy=draw(st.sampled_from(list(Policy))), cpu=cpu, memory=memory, limits=limits,
        footprint=TaskFootprint(cpu_cores=draw(st.sampled_from([0.25, 1.0, 2.0])), heap_mib=100),
    )
    since = {v.id: NOW - draw(st.floats(0, 600)) for v in vertices if draw(st.booleans())}
    history: tuple[HistoryRecord, ...] = ()
    if draw(st.booleans()):  # a previous step, so Justin's "did it help?" branches run too
        history = (HistoryRecord(time=NOW - 300, step=1, vertices=tuple(
            VertexHistory(
                vertex_id=v.id, parallelism=v.parallelism, memory_level=v.memory_level,
                scaled_up=v.memory_level is not None and v.memory_level > 0 and draw(st.booleans()),
                cache_hit_rate=draw(st.none() | st.floats(0, 1)),
                state_latency_ns=draw(st.none() | st.floats(1e3, 1e8)),
            )
            for v in vertices
        )),)
    state = PolicyState(step=len(history), history=history, scale_down_wanted_since=since)
    return Scenario(graph, observation, params, state)


def run(s: Scenario) -> tuple[dict[str, tuple[int, int | None]], bool]:
    e = evaluate(s.graph, s.observation, s.state, s.params, NOW)
    config = {vid: (c.parallelism, c.memory_level) for vid, c in e.configuration.items()}
    return config, e.decision.reconfigures


@given(scenarios())
def test_deterministic(s: Scenario) -> None:
    assert evaluate(s.graph, s.observation, s.state, s.params, NOW) == evaluate(
        s.graph, s.observation, s.state, s.params, NOW)


@given(scenarios())
def test_parallelism_and_memory_levels_stay_in_bounds(s: Scenario) -> None:
    e = evaluate(s.graph, s.observation, s.state, s.params, NOW)
    for v in s.graph.vertices:
        c = e.configuration[v.id]
        low, high = s.params.cpu.bounds_for(v.id, v.operator_uids)
        upper = min(high, v.max_parallelism)
        assert min(low, upper) <= c.parallelism <= upper
        assert c.memory_level is None or 0 <= c.memory_level < s.params.memory.max_level


@given(scenarios())
def test_limits_are_never_exceeded_by_a_decision(s: Scenario) -> None:
    e = evaluate(s.graph, s.observation, s.state, s.params, NOW)
    assert e.decision.after == totals(e.configuration, s.params)
    if e.decision.reconfigures:
        assert within_limits(e.decision.after, s.params.limits)
    else:
        assert dict(e.configuration) == dict(s.graph.configuration())


@given(scenarios())
def test_every_vertex_decision_matches_the_configuration_and_explains_itself(s: Scenario) -> None:
    e = evaluate(s.graph, s.observation, s.state, s.params, NOW)
    assert [d.vertex_id for d in e.decision.vertices] == [v.id for v in s.graph.vertices]
    for d in e.decision.vertices:
        before, after = s.graph.configuration()[d.vertex_id], e.configuration[d.vertex_id]
        assert (d.parallelism_after, d.memory_level_after) == (after.parallelism,
                                                               after.memory_level)
        assert d.action is action(before, after)
        assert d.reason
        if d.scaled_up and s.params.policy is Policy.JUSTIN:  # v: memory instead of tasks
            assert d.action is Action.SCALE_UP and after.parallelism == before.parallelism
    assert e.state.step == s.state.step + int(e.decision.reconfigures)
    assert len(e.state.history) <= 10


@given(scenarios(with_limits=False), st.floats(0, 1e5))
def test_a_higher_source_rate_never_lowers_any_parallelism(s: Scenario, extra: float) -> None:
    """More lag growth at the sources raises every target rate; no parallelism may drop.

    DS2's trigger is a band, so this holds when both rates trigger a rescale: an
    untriggered load leaves every vertex alone that a triggering load would resize in
    either direction. A lower rate can trigger where the higher does not: a scale-down
    alone triggers it, and the lag growth added here blocks scale-downs
    (cpu.backlogLagThreshold, upstream's rule; hypothesis found it: v1 below the band,
    v0 riding along to 2 tasks at the lower rate, nothing triggered at the higher).
    Limits are off: trimming the largest increase first is not monotone by design.
    """
    # The capacity policy may trade tasks for memory as the need grows: DS2 and Justin only.
    s = replace(s, params=replace(s.params, policy=Policy.JUSTIN))
    proposal = ds2.propose(s.graph, s.observation, s.params.cpu,
                           scale_down_wanted_since=s.state.scale_down_wanted_since, now=NOW)
    assume(proposal.triggered)
    busier = replace(s.observation, vertices={
        vid: replace(m, pending_records_growth_per_s=(m.pending_records_growth_per_s or 0) + extra)
        if s.graph.is_source(vid) else m
        for vid, m in s.observation.vertices.items()
    })
    assume(ds2.propose(s.graph, busier, s.params.cpu,
                       scale_down_wanted_since=s.state.scale_down_wanted_since,
                       now=NOW).triggered)
    low, _ = run(s)
    high, _ = run(replace(s, observation=busier))
    for vid in low:
        assert high[vid][0] >= low[vid][0], vid


@dataclass(frozen=True)
class JustinStep:
    """One vertex entering Algorithm 1: its configuration, DS2's p, θ/τ and step t-1."""

    vertex: Vertex
    metrics: VertexMetrics
    ds2_parallelism: int
    previous: HistoryRecord | None
    memory: MemoryScaling


@st.composite
def justin_steps(draw: st.DrawFn) -> JustinStep:
    memory = MemoryScaling(max_level=draw(st.integers(1, 4)),
                           min_improvement=draw(st.sampled_from([0.0, 0.05, 0.5])))
    # ⊥, a reachable level, or one above a lowered maxLevel
    level = draw(st.none() | st.integers(0, memory.max_level - 1) | st.just(memory.max_level))
    p = draw(st.integers(1, 20))
    stateful = draw(st.integers(0, 4)) > 0  # mostly stateful: that is where the branches are
    theta = draw(st.floats(0, 1)) if stateful and draw(st.integers(0, 4)) > 0 else None
    tau = draw(st.none() | st.floats(1e4, 1e8)) if stateful else None
    metrics = VertexMetrics(
        busy_ms_per_s=900, busy_ms_per_s_max=900, backpressured_ms_per_s=0,
        records_in_per_s=1000, records_out_per_s=1000,
        cache_hits_per_s=None if theta is None else theta * 1000,
        cache_misses_per_s=None if theta is None else (1 - theta) * 1000,
        state_latency_ns=tau, has_state_backend_metrics=stateful,
    )
    previous = None
    if draw(st.booleans()):
        previous = HistoryRecord(time=NOW - 300, step=1, vertices=(VertexHistory(
            vertex_id="op", parallelism=p, memory_level=level, scaled_up=draw(st.booleans()),
            cache_hit_rate=draw(st.floats(0, 1)) if draw(st.integers(0, 4)) > 0 else None,
            state_latency_ns=draw(st.none() | st.floats(1e4, 1e8)),
        ),))
    return JustinStep(Vertex("op", "Op", 128, p, level), metrics,
                      draw(st.integers(1, 40)), previous, memory)


@given(justin_steps())
def test_justin_either_takes_ds2s_parallelism_or_scales_up_one_level_instead(
        s: JustinStep) -> None:
    """Algorithm 1's invariants, whichever branch fires (every branch is reached here)."""
    graph = JobGraph((s.vertex,))
    proposal = ds2.Proposal(
        triggered=True, reason="", scale_down_wanted_since={},
        vertices={"op": ds2.VertexProposal(
            vertex_id="op", parallelism_before=s.vertex.parallelism,
            parallelism=s.ds2_parallelism, wanted=s.ds2_parallelism, target_rate=1.0,
            true_processing_rate=1.0, utilization=1.0, reason="DS2")},
    )
    observation = Observation(time=NOW, window_s=120.0, vertices={"op": s.metrics})
    result = justin.apply(graph, observation, proposal, s.memory, s.previous)
    decision, after = result.vertices[0], result.configuration["op"]
    p0, p_t = s.vertex.parallelism, s.ds2_parallelism
    event(f"branch {decision.branch}")

    if not s.metrics.has_state_backend_metrics:  # lines 3-4
        assert (after.parallelism, after.memory_level) == (p_t, None)
        assert not decision.scaled_up
        return
    m0 = min(s.vertex.memory_level or 0, s.memory.max_level - 1)
    assert after.memory_level is not None
    assert 0 <= after.memory_level < s.memory.max_level
    if p_t == p0:  # line 6: capacity sufficient, nothing changes
        assert (after.parallelism, after.memory_level) == (p0, m0)
    if decision.scaled_up:  # lines 10-12 and 17-19: the scale-out is cancelled, one level up
        assert p_t > p0
        assert (after.parallelism, after.memory_level) == (p0, m0 + 1)
    else:  # DS2's parallelism applies, memory stays or rolls back one level (line 14)
        assert after.parallelism == p_t
        assert after.memory_level in (m0, max(m0 - 1, 0))
    last = s.previous.vertex("op") if s.previous is not None else None
    can_scale_up = m0 + 1 < s.memory.max_level
    if p_t != p0 and last is not None and last.scaled_up:  # lines 7-14
        it_helped, _ = justin.helped(s.metrics, last, s.memory.min_improvement)
        assert decision.scaled_up == (it_helped and p_t > p0 and can_scale_up)
        if not it_helped:
            assert after.memory_level == max(m0 - 1, 0)
    elif p_t != p0:  # lines 16-19: the thresholds decide
        pressure, _ = justin.memory_pressure(s.metrics, s.memory)
        assert decision.scaled_up == (p_t > p0 and pressure and can_scale_up)
        assert after.memory_level == m0 + int(decision.scaled_up)
