"""Justin's Algorithm 1 (paper §4.2) over a DS2 proposal: scale up instead of out.

Per vertex o, with p/m/v/θ/τ of the previous step taken from the current job
graph and the last history record:

- no state-backend metrics at all -> stateless: m = ⊥, DS2's p (lines 3-4);
- DS2 keeps p -> memory stays (line 6 false);
- o was scaled up last step (v) -> if θ or τ improved by `min_improvement`
  (footnote 3's hysteresis) scale up again when below maxLevel (lines 8-12),
  otherwise roll back one level and let DS2's p apply (line 14);
- otherwise, if θ < Δθ or τ > Δτ and below maxLevel -> cancel the scale-out
  and scale up one level (lines 16-19).

Three flaws of the public Justin code are not reproduced: statelessness is the
absence of any state-backend metric (a cache that never misses is stateful);
a memory-only change is an ordinary decision; a vertex DS2 leaves alone keeps
its memory level.

Deviation (ours): Algorithm 1 tests p_t ≠ p_{t-1}, which also matches a DS2
*scale-in*. Capacity is then already sufficient, so a scale-in never becomes a
scale-up: DS2's p applies, memory stays, or, right after a scale-up that did not
help, memory rolls back one level.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from policies import explain
from policies.decision import Branch, HistoryRecord, VertexDecision, VertexHistory
from policies.ds2 import Proposal, VertexProposal
from policies.model import JobGraph, Observation, Vertex, VertexConfig, VertexMetrics
from policies.spec import MemoryScaling


@dataclass(frozen=True)
class Result:
    vertices: tuple[VertexDecision, ...]
    configuration: Mapping[str, VertexConfig]


def helped(
    metrics: VertexMetrics, previous: VertexHistory, min_improvement: float
) -> tuple[bool, str]:
    """Line 8 with the hysteresis: did θ rise or τ fall by more than `min_improvement`?

    A side missing now or then (None) does not count as an improvement.
    """
    theta, tau = metrics.cache_hit_rate, metrics.state_latency_ns
    theta0, tau0 = previous.cache_hit_rate, previous.state_latency_ns
    gain = min_improvement
    better_theta = theta is not None and theta0 is not None and theta > theta0 * (1 + gain)
    better_tau = tau is not None and tau0 is not None and tau < tau0 * (1 - gain)
    text = (
        f"cache hit rate {explain.ratio(theta0)}→{explain.ratio(theta)}, "
        f"state latency {explain.latency(tau0)}→{explain.latency(tau)} "
        f"(min improvement {min_improvement:.0%})"
    )
    return better_theta or better_tau, text


def memory_pressure(metrics: VertexMetrics, memory: MemoryScaling) -> tuple[bool, str]:
    """Line 16's first half: θ < Δθ or τ > Δτ (Δτ is in seconds, Flink's τ in ns)."""
    theta, tau = metrics.cache_hit_rate, metrics.state_latency_ns
    tau_limit_ns = memory.state_latency_threshold * 1e9
    low_theta = theta is not None and theta < memory.cache_hit_rate_threshold
    high_tau = tau is not None and tau > tau_limit_ns
    parts = [
        f"cache hit rate {explain.ratio(theta)} "
        f"{'<' if low_theta else '>='} Δθ {memory.cache_hit_rate_threshold:.2f}",
        f"state latency {explain.latency(tau)} "
        f"{'>' if high_tau else '<='} Δτ {explain.latency(tau_limit_ns)}",
    ]
    return low_theta or high_tau, ", ".join(parts)


def _decide(
    vertex: Vertex,
    metrics: VertexMetrics,
    ds2: VertexProposal,
    previous: VertexHistory | None,
    memory: MemoryScaling,
) -> tuple[VertexConfig, Branch, str, bool]:
    """One vertex through Algorithm 1: (new config, branch, reason, v)."""
    p_prev, p_t = vertex.parallelism, ds2.parallelism
    lvl = memory.max_level
    move = f"{p_prev}→{p_t}"

    if not metrics.has_state_backend_metrics:
        return (
            VertexConfig(p_t, None),
            Branch.STATELESS,
            # The change (p, ⊥) is in the record and its Event: say why, once.
            "no state-backend metrics, so it is stateless and takes DS2's parallelism",
            False,
        )

    # A stateful vertex needs a level; ⊥ (it looked stateless before) restarts at 0,
    # and a level above a lowered maxLevel comes down to the highest one allowed.
    m_prev = min(vertex.memory_level if vertex.memory_level is not None else 0, lvl - 1)
    can_scale_up = m_prev + 1 < lvl
    keep = explain.level(memory, m_prev)
    up = explain.level(memory, m_prev + 1)

    if p_t == p_prev:
        why = f"DS2 keeps {p_prev}: {keep} stays"
        return VertexConfig(p_prev, m_prev), Branch.UNCHANGED, why, False

    scaled_up_last = previous is not None and previous.scaled_up
    if scaled_up_last:
        assert previous is not None
        it_helped, change = helped(metrics, previous, memory.min_improvement)
        if not it_helped:
            rollback = explain.level(memory, max(m_prev - 1, 0))
            return (
                VertexConfig(p_t, max(m_prev - 1, 0)),
                Branch.SCALED_UP_NO_GAIN,
                f"last scale-up did not help ({change}): roll back to {rollback}, "
                f"DS2's parallelism {move}",
                False,
            )
        if p_t < p_prev:
            return (
                VertexConfig(p_t, m_prev),
                Branch.SCALE_IN,
                f"last scale-up helped ({change}); DS2 scales in {move}, {keep} stays",
                False,
            )
        if can_scale_up:
            return (
                VertexConfig(p_prev, m_prev + 1),
                Branch.SCALED_UP_HELPED,
                f"last scale-up helped ({change}): scale up to {up} instead of scaling out {move}",
                True,
            )
        return (
            VertexConfig(p_t, m_prev),
            Branch.SCALED_UP_HELPED_AT_MAX,
            f"last scale-up helped ({change}) but {keep} is the highest (maxLevel {lvl}): "
            f"scale out {move}",
            False,
        )

    if p_t < p_prev:
        return (
            VertexConfig(p_t, m_prev),
            Branch.SCALE_IN,
            f"DS2 scales in {move}: capacity suffices, {keep} stays",
            False,
        )
    pressure, signals = memory_pressure(metrics, memory)
    if pressure and can_scale_up:
        return (
            VertexConfig(p_prev, m_prev + 1),
            Branch.MEMORY_PRESSURE,
            f"{signals}: scale up to {up} instead of scaling out {move}",
            True,
        )
    if pressure:
        return (
            VertexConfig(p_t, m_prev),
            Branch.MEMORY_PRESSURE_AT_MAX,
            f"{signals} but {keep} is the highest (maxLevel {lvl}): scale out {move}",
            False,
        )
    return (
        VertexConfig(p_t, m_prev),
        Branch.NO_MEMORY_PRESSURE,
        f"{signals}: memory is not short, scale out {move} at {keep}",
        False,
    )


def apply(
    graph: JobGraph,
    observation: Observation,
    proposal: Proposal,
    memory: MemoryScaling,
    previous: HistoryRecord | None,
) -> Result:
    """Algorithm 1 over DS2's proposal; `previous` is the last history record (step t-1)."""
    decisions: list[VertexDecision] = []
    config: dict[str, VertexConfig] = {}
    for v in graph.vertices:
        metrics = observation.vertices[v.id]
        ds2 = proposal.vertices[v.id]
        last = previous.vertex(v.id) if previous is not None else None
        after, branch, why, scaled_up = _decide(v, metrics, ds2, last, memory)
        config[v.id] = after
        decisions.append(
            explain.vertex_decision(
                v, metrics, after, branch, f"{why}. DS2: {ds2.reason}",
                scaled_up=scaled_up, target_rate=ds2.target_rate, utilization=ds2.utilization,
            )
        )
    return Result(tuple(decisions), MappingProxyType(config))
