"""DS2 with the semantics of the Flink Kubernetes Operator autoscaler (`flink-autoscaler`).

For every vertex: the *true processing rate* (TPR, records/s the whole vertex could
handle if never idle), the *target rate* it must sustain (source rates propagated
through the DAG by output ratios, so cascades are solved in one step) and the
*utilization* it would run at (target ÷ TPR). When any vertex leaves
[utilization_min, utilization_max], every vertex is resized to run at
utilization_target, within the scale factors and parallelism bounds, aligned to
key groups for hash inputs, and scale-downs wait out `scale_down_delay`.

Deliberate differences from flink-autoscaler, kept small and explicit:
- the lag catch-up rate is part of a source's target rate (and so is divided by
  the utilization target like the rest of it);
- [min, max] parallelism are hard bounds (flink-autoscaler widens them to include
  the current parallelism);
- a vertex whose capacity is unknown (not busy at all) neither triggers nor moves.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from policies import explain
from policies.model import JobGraph, Observation, ShipStrategy, Vertex, VertexConfig
from policies.spec import CpuScaling


@dataclass(frozen=True)
class VertexProposal:
    vertex_id: str
    parallelism_before: int
    parallelism: int  # DS2's proposal, after the scale-down delay
    wanted: int  # what sizing asks for, before the scale-down delay
    target_rate: float
    true_processing_rate: float  # inf when the vertex was not busy (capacity unknown)
    utilization: float | None  # target rate / TPR; None when the capacity is unknown
    reason: str


@dataclass(frozen=True)
class Proposal:
    triggered: bool
    reason: str
    vertices: Mapping[str, VertexProposal]
    scale_down_wanted_since: Mapping[str, float]  # the delay's bookkeeping after this step

    def configuration(self, graph: JobGraph) -> dict[str, VertexConfig]:
        """DS2's parallelism with every memory level left as it is."""
        return {
            v.id: VertexConfig(self.vertices[v.id].parallelism, v.memory_level)
            for v in graph.vertices
        }


def output_ratio(graph: JobGraph, observation: Observation, vertex_id: str) -> float:
    """Records out per record in; 1 for sources, whose target rate is already an output rate."""
    if graph.is_source(vertex_id):
        return 1.0
    m = observation.vertices[vertex_id]
    # Below one record per ~12 days the input is noise, and dividing by it overflows.
    return m.records_out_per_s / m.records_in_per_s if m.records_in_per_s > 1e-6 else 0.0


def target_rates(graph: JobGraph, observation: Observation, cpu: CpuScaling) -> dict[str, float]:
    """Records/s each vertex must sustain, propagated from the sources in topological order."""
    rates: dict[str, float] = {}
    for vid in graph.topological_order():
        m = observation.vertices[vid]
        if graph.is_source(vid):
            rate = m.records_out_per_s + (m.pending_records_growth_per_s or 0.0)
            lag = m.pending_records or 0.0
            if cpu.catch_up_duration > 0 and lag > 0:
                rate += lag / cpu.catch_up_duration
        else:
            rate = sum(
                rates[e.source] * output_ratio(graph, observation, e.source)
                for e in graph.inputs(vid)
            )
        rates[vid] = max(rate, 0.0)
    return rates


def _known(tpr: float) -> bool:
    return math.isfinite(tpr) and tpr > 0


def _align(current: int, new: int, upper: int, max_parallelism: int) -> int:
    """Smallest divisor of max parallelism in [new, upper], so key groups spread evenly.

    Keeps `new` when no divisor fits or when the divisor would undo a scale-down.
    """
    for candidate in range(new, upper + 1):
        if max_parallelism % candidate == 0:
            if new < current <= candidate:
                return new
            return candidate
    return new


def size(
    vertex: Vertex, cpu: CpuScaling, tpr: float, target: float, hash_input: bool
) -> tuple[int, str]:
    """New parallelism for a vertex at the utilization target, and how the clamps shaped it."""
    p = vertex.parallelism
    notes: list[str] = []
    factor = target / tpr / cpu.utilization_target  # tpr * target could underflow to 0
    low_factor, high_factor = 1 - cpu.max_scale_down_factor, 1 + cpu.max_scale_up_factor
    if factor < low_factor:
        factor = low_factor
        notes.append(f"capped by max scale-down factor {cpu.max_scale_down_factor:g}")
    elif factor > high_factor:
        factor = high_factor
        notes.append(f"capped by max scale-up factor {cpu.max_scale_up_factor:g}")
    # Rounding first keeps float noise (2.0000000000000004) from adding a task.
    raw = math.ceil(round(p * factor, 9))
    low, high = cpu.bounds_for(vertex.id, vertex.operator_uids)
    upper = min(high, vertex.max_parallelism)
    low = min(low, upper)
    new = min(max(raw, low), upper)
    if new != raw:
        notes.append(f"bounded to [{low}, {upper}]")
    if new != p and hash_input:
        aligned = _align(p, new, upper, vertex.max_parallelism)
        if aligned != new:
            notes.append(
                f"aligned {new}→{aligned}, a divisor of max parallelism {vertex.max_parallelism}"
            )
            new = aligned
    return new, "; ".join(notes)


def propose(
    graph: JobGraph,
    observation: Observation,
    cpu: CpuScaling,
    *,
    scale_down_wanted_since: Mapping[str, float] | None = None,
    now: float | None = None,
) -> Proposal:
    """DS2's parallelism for every vertex. `observation` must cover every vertex of `graph`.

    `now` defaults to the observation's time; `scale_down_wanted_since` is the
    delay's bookkeeping from the previous call (PolicyState).
    """
    now = observation.time if now is None else now
    since_before = scale_down_wanted_since or {}
    rates = target_rates(graph, observation, cpu)
    tprs = {v.id: observation.vertices[v.id].true_processing_rate for v in graph.vertices}
    utilization = {vid: rates[vid] / tpr if _known(tpr) else None for vid, tpr in tprs.items()}

    outside = [
        (v, u) for v in graph.vertices
        if (u := utilization[v.id]) is not None
        and not cpu.utilization_min <= u <= cpu.utilization_max
    ]
    bounds = f"[{cpu.utilization_min:.2f}, {cpu.utilization_max:.2f}]"
    if outside:
        reason = "DS2 triggered: " + ", ".join(
            f"{v.name or v.id} utilization {u:.2f} outside {bounds}" for v, u in outside
        )
    else:
        reason = f"every vertex within utilization {bounds}: DS2 not triggered"

    since: dict[str, float] = {}
    vertices: dict[str, VertexProposal] = {}
    for v in graph.vertices:
        tpr, target, u = tprs[v.id], rates[v.id], utilization[v.id]
        p = v.parallelism
        numbers = (
            f"target rate {explain.rate(target)}, true processing rate {explain.rate(tpr)}"
        )
        if u is None:
            wanted, text = p, f"capacity unknown ({numbers}): keeps {p}"
        elif not outside:
            wanted, text = p, f"utilization {u:.2f} ({numbers}): keeps {p}"
        else:
            wanted, notes = size(v, cpu, tpr, target, _has_hash_input(graph, v.id))
            text = (
                f"utilization {u:.2f} ({numbers}): DS2 sizes {p}→{wanted} "
                f"for utilization {cpu.utilization_target:.2f}"
            ) + (f" ({notes})" if notes else "")
        proposed = wanted
        if wanted < p:
            # Kept until the scale-down happens (evaluate clears it then).
            first = since[v.id] = since_before.get(v.id, now)
            waited = now - first
            if waited < cpu.scale_down_delay:
                proposed = p
                text += (
                    f"; scale-down delayed: wanted for {waited:.0f}s of "
                    f"{cpu.scale_down_delay:.0f}s, keeps {p}"
                )
        vertices[v.id] = VertexProposal(
            vertex_id=v.id,
            parallelism_before=p,
            parallelism=proposed,
            wanted=wanted,
            target_rate=target,
            true_processing_rate=tpr,
            utilization=u,
            reason=text,
        )
    return Proposal(
        triggered=bool(outside),
        reason=reason,
        vertices=MappingProxyType(vertices),
        scale_down_wanted_since=MappingProxyType(since),
    )


def _has_hash_input(graph: JobGraph, vertex_id: str) -> bool:
    return any(e.ship_strategy == ShipStrategy.HASH for e in graph.inputs(vertex_id))
