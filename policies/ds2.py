"""DS2 with the semantics of the Flink Kubernetes Operator autoscaler (`flink-autoscaler` 1.10).

For every vertex: the *true processing rate* (TPR, records/s the whole vertex could
handle if never idle), the *target rate* it must sustain (source rates propagated
through the DAG by output ratios, so cascades are solved in one step), the lag
catch-up rate on top of it, and the parallelism that runs it at utilization_target
(within the scale factors and parallelism bounds, aligned to key groups for hash
inputs). As upstream (`ScalingExecutor.computeScalingSummary`):
- a vertex whose parallelism would not change (sized to its current value, pinned,
  excluded) never triggers;
- the job rescales only if a vertex whose parallelism changes is outside its
  utilization band; then every changing vertex rescales, also those inside the band;
- a scale-down waits `scale_down_delay` from when it was first wanted, but rides
  along when another vertex triggers; any rescale restarts every wait;
- while a source processes backlog (lag above `backlog_lag_threshold` seconds of its
  input), the band is [0, 1]: nothing scales down, scale-ups wait for full load.

One guard upstream 1.10 does not have (its 1-h scale-down interval plays that part): a
scale-down never returns a vertex to a parallelism it was scaled out from for being short
on the target alone, nor below, while the load is what it was then; it stops halfway
instead (`scale_outs`, `scale_in_floor`, `above_floor`). DS2's estimate is linear in the
tasks, so where fewer tasks each hold more state and miss the cache, it sizes a scale-in
that falls short and the next window scales out again, for ever.

Deliberate differences from flink-autoscaler are data in `policies/upstream.py`
(mirrored in docs/policies.md).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from policies import explain
from policies.decision import HistoryRecord
from policies.model import JobGraph, Observation, ShipStrategy, Vertex, VertexConfig
from policies.spec import CpuScaling

# A scale-out's lower parallelism stays a floor while the vertex's target rate is at least
# this share of the rate it was short at (rates are noisy by a few percent).
SAME_LOAD = 0.9


@dataclass(frozen=True)
class ScaleOut:
    """One scale-out in the stored history: the parallelism it left, the target rate (lag's
    catch-up excluded) and the utilization that rate put on it, and the memory level after."""

    parallelism: int
    target_rate: float
    utilization: float
    memory_level: int | None


def scale_outs(history: Iterable[HistoryRecord]) -> dict[str, tuple[ScaleOut, ...]]:
    """Per vertex, every scale-out the stored history records in full (statuses stored
    before these fields existed record none)."""
    out: dict[str, list[ScaleOut]] = {}
    for record in history:
        for vh in record.vertices:
            if (vh.parallelism_before is not None and vh.parallelism > vh.parallelism_before
                    and vh.target_rate is not None and vh.target_rate > 0
                    and vh.utilization is not None):
                out.setdefault(vh.vertex_id, []).append(ScaleOut(
                    vh.parallelism_before, vh.target_rate, vh.utilization, vh.memory_level))
    return {vid: tuple(steps) for vid, steps in out.items()}


def scale_in_floor(scaled_out: Iterable[ScaleOut], target: float, high_u: float,
                   memory_level: int | None) -> int | None:
    """The highest parallelism the vertex left because it was short on the target alone
    (above `high_u`; a step sized only for a backlog's catch-up sets no floor), at about
    this load and no more memory than now. None: no floor."""
    def level(x: int | None) -> int:
        return -1 if x is None else x
    floors = [s.parallelism for s in scaled_out
              if target >= SAME_LOAD * s.target_rate and s.utilization > high_u
              and level(memory_level) <= level(s.memory_level)]
    return max(floors) if floors else None


def above_floor(vertex: Vertex, cpu: CpuScaling, floor: int, hash_input: bool) -> int:
    """Where a scale-down stops that would go back to `floor` or below: halfway from the
    floor to the current parallelism (so settling takes a logarithmic number of steps, not
    one task per cycle), within the bounds and aligned to the key groups as `size` does;
    the current parallelism when nothing in between qualifies."""
    p = vertex.parallelism
    low, upper = cpu.parallelism_range(vertex.id, vertex.operator_uids, vertex.max_parallelism)
    raised = min(max(floor + 1 + (p - floor - 1) // 2, low), upper)
    if hash_input:
        raised = align(p, raised, upper, low, vertex.max_parallelism)
    return p if raised <= floor or raised >= p else raised


@dataclass(frozen=True)
class VertexProposal:
    vertex_id: str
    parallelism_before: int
    parallelism: int  # DS2's proposal: `wanted` if the job rescales, else parallelism_before
    wanted: int  # what sizing asks for (after clamps and alignment)
    target_rate: float
    true_processing_rate: float  # inf when the vertex was not busy (capacity unknown)
    utilization: float | None  # target rate / TPR; None when the capacity is unknown
    reason: str
    outside_band: bool = False  # TPR outside the band's processing-rate thresholds
    delayed: bool = False  # a scale-down still inside scale_down_delay


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


def _propagate(
    graph: JobGraph, observation: Observation, at_source: Mapping[str, float]
) -> dict[str, float]:
    """A per-source rate carried downstream, scaled by each upstream's output ratio."""
    rates: dict[str, float] = {}
    for vid in graph.topological_order():
        if graph.is_source(vid):
            rates[vid] = at_source[vid]
        else:
            rates[vid] = sum(
                rates[e.source] * output_ratio(graph, observation, e.source)
                for e in graph.inputs(vid)
            )
    return rates


def target_rates(graph: JobGraph, observation: Observation) -> dict[str, float]:
    """Records/s each vertex must sustain: sources' input rate plus lag growth, propagated."""
    at_source = {}
    for vid in graph.vertices:
        if graph.is_source(vid.id):
            m = observation.vertices[vid.id]
            rate = _source_input_rate(m.records_in_per_s, m.records_out_per_s)
            at_source[vid.id] = max(0.0, rate + (m.pending_records_growth_per_s or 0.0))
    return _propagate(graph, observation, at_source)


def catch_up_rates(graph: JobGraph, observation: Observation, cpu: CpuScaling) -> dict[str, float]:
    """Extra records/s that drain the sources' lag within catch_up_duration, propagated."""
    at_source = {}
    for vid in graph.vertices:
        if graph.is_source(vid.id):
            lag = observation.vertices[vid.id].pending_records or 0.0
            at_source[vid.id] = lag / cpu.catch_up_duration if cpu.catch_up_duration > 0 else 0.0
    return _propagate(graph, observation, at_source)


def _source_input_rate(records_in: float, records_out: float) -> float:
    # A FLIP-27 source counts what it reads in numRecordsIn; older ones only emit.
    return records_in if records_in > 0 else records_out


def processing_backlog(graph: JobGraph, observation: Observation, cpu: CpuScaling) -> bool:
    """Some source's lag is more than backlog_lag_threshold seconds of its input."""
    for v in graph.vertices:
        if not graph.is_source(v.id):
            continue
        m = observation.vertices[v.id]
        lag = m.pending_records or 0.0
        rate = _source_input_rate(m.records_in_per_s, m.records_out_per_s)
        if lag > 0 and (rate <= 0 or lag / rate > cpu.backlog_lag_threshold):
            return True
    return False


def capacity(
    target: float, catch_up: float, utilization: float, cpu: CpuScaling, *, restart: bool
) -> float:
    """Records/s a vertex needs to run the target rate at `utilization`, drain the lag
    within catch_up_duration and (with `restart`) make up for the restart it causes."""
    utilization = min(max(utilization, 0.0), 1.0)
    if utilization == 0:
        return math.inf
    restart_rate = (
        target * cpu.restart_time / cpu.catch_up_duration
        if restart and cpu.catch_up_duration > 0 else 0.0
    )
    # Java's Math.round, as upstream rounds it.
    return float(math.floor(catch_up + restart_rate + target / utilization + 0.5))


def _known(tpr: float) -> bool:
    return math.isfinite(tpr) and tpr > 0


def align(current: int, new: int, upper: int, lower: int, max_parallelism: int) -> int:
    """flink-autoscaler 1.10's key-group alignment for a vertex with a HASH input.

    The smallest divisor of max parallelism from `new` up to `upper` (only up to half
    the key groups while `new` is at most half); failing that, the smallest
    parallelism whose busiest task gets no more key groups than at `new`. Unlike
    1.10 (and like 1.11+), a result that would not move in `new`'s direction from
    `current` keeps `current`.
    """
    if new == current:
        return current
    groups = max_parallelism
    limit = min(groups if new > groups // 2 else groups // 2, upper)
    aligned = next((c for c in range(new, limit + 1) if groups % c == 0), None)
    if aligned is None:
        p = new
        while p > 0:
            if groups // p > groups // new:
                if groups % p != 0:
                    p += 1
                break
            p -= 1
        aligned = max(p, lower)
    if (new > current) != (aligned > current) or aligned == current:
        return current
    return aligned


def size(
    vertex: Vertex, cpu: CpuScaling, tpr: float, needed: float, hash_input: bool
) -> tuple[int, str]:
    """New parallelism for a vertex that needs `needed` records/s, and how the clamps shaped it."""
    p = vertex.parallelism
    notes: list[str] = []
    factor = needed / tpr  # tpr * target could underflow to 0
    low_factor, high_factor = 1 - cpu.max_scale_down_factor, 1 + cpu.max_scale_up_factor
    if factor < low_factor:
        factor = low_factor
        notes.append(f"capped by max scale-down factor {cpu.max_scale_down_factor:g}")
    elif factor > high_factor:
        factor = high_factor
        notes.append(f"capped by max scale-up factor {cpu.max_scale_up_factor:g}")
    # Rounding first keeps float noise (2.0000000000000004) from adding a task.
    raw = math.ceil(round(p * factor, 9))
    low, upper = cpu.parallelism_range(vertex.id, vertex.operator_uids, vertex.max_parallelism)
    new = min(max(raw, low), upper)
    if new != raw:
        notes.append(f"bounded to [{low}, {upper}]")
    if hash_input:
        aligned = align(p, new, upper, low, vertex.max_parallelism)
        if aligned != new:
            notes.append(
                f"aligned {new}→{aligned} to the {vertex.max_parallelism} key groups"
            )
            new = aligned
    return new, "; ".join(notes)


@dataclass(frozen=True)
class _Sized:
    wanted: int
    text: str
    outside: bool
    delayed: bool


def propose(
    graph: JobGraph,
    observation: Observation,
    cpu: CpuScaling,
    *,
    scale_down_wanted_since: Mapping[str, float] | None = None,
    now: float | None = None,
    scaled_out: Mapping[str, tuple[ScaleOut, ...]] | None = None,
) -> Proposal:
    """DS2's parallelism for every vertex. `observation` must cover every vertex of `graph`.

    `now` defaults to the observation's time; `scale_down_wanted_since` is the
    delay's bookkeeping from the previous call (PolicyState); `scaled_out`, the
    scale-outs in the stored history (`scale_outs`), floors for scale-downs.
    """
    now = observation.time if now is None else now
    since_before = scale_down_wanted_since or {}
    rates = target_rates(graph, observation)
    catch_up = catch_up_rates(graph, observation, cpu)
    backlog = processing_backlog(graph, observation, cpu)
    low_u, high_u = (0.0, 1.0) if backlog else (cpu.utilization_min, cpu.utilization_max)
    band = f"[{low_u:.2f}, {high_u:.2f}]" + (" (sources processing backlog)" if backlog else "")
    tprs = {v.id: observation.vertices[v.id].true_processing_rate for v in graph.vertices}

    since: dict[str, float] = {}
    sized: dict[str, _Sized] = {}
    for v in graph.vertices:
        tpr, target, p = tprs[v.id], rates[v.id], v.parallelism
        numbers = f"target rate {explain.rate(target)}, true processing rate {explain.rate(tpr)}"
        if catch_up[v.id] > 0:
            numbers += f", lag catch-up {explain.rate(catch_up[v.id])}"
        if cpu.excludes(v.id, v.operator_uids):
            sized[v.id] = _Sized(p, f"excluded from scaling ({numbers}): keeps {p}", False, False)
            continue
        if not _known(tpr):
            sized[v.id] = _Sized(p, f"capacity unknown ({numbers}): keeps {p}", False, False)
            continue
        u = target / tpr
        # Upstream's band test, on rates: TPR below what the upper utilization needs
        # (no restart term) or above what the lower one needs (with it).
        outside = (
            tpr < capacity(target, catch_up[v.id], high_u, cpu, restart=False)
            or tpr > capacity(target, catch_up[v.id], low_u, cpu, restart=True)
        )
        needed = capacity(target, catch_up[v.id], cpu.utilization_target, cpu, restart=True)
        hashed = _has_hash_input(graph, v.id)
        sized_to, notes = size(v, cpu, tpr, needed, hashed)
        wanted = sized_to
        floor = scale_in_floor((scaled_out or {}).get(v.id, ()), target, cpu.utilization_max,
                               v.memory_level)
        if floor is not None and sized_to <= floor and sized_to < p:
            wanted = above_floor(v, cpu, floor, hashed)
        where = "outside" if outside else "within"
        text = f"utilization {u:.2f} {where} {band} ({numbers}): "
        if sized_to == p:
            text += f"sized to {p} for utilization {cpu.utilization_target:.2f}"
        else:
            text += f"DS2 sizes {p}→{sized_to} for utilization {cpu.utilization_target:.2f}"
        if notes:
            text += f" ({notes})"
        if wanted != sized_to:
            text += (f"; it was scaled out from {floor} tasks, short at this load, so not "
                     f"back there: {'held at' if wanted == p else 'halfway,'} {wanted}")
        if wanted == p:
            text += f", keeps {p}"
        delayed = False
        if wanted < p and cpu.scale_down_delay > 0:
            # Kept until a rescale happens (evaluate clears every wait then).
            first = since[v.id] = since_before.get(v.id, now)
            waited = now - first
            if waited < cpu.scale_down_delay:
                delayed = True
                text += (
                    f"; scale-down delayed: wanted for {waited:.0f}s of "
                    f"{cpu.scale_down_delay:.0f}s"
                )
        sized[v.id] = _Sized(wanted, text, outside, delayed)

    triggers = [
        v for v in graph.vertices
        if (s := sized[v.id]).wanted != v.parallelism and s.outside and not s.delayed
    ]
    if triggers:
        reason = "DS2 triggered: " + ", ".join(
            f"{v.name or v.id} utilization {rates[v.id] / tprs[v.id]:.2f} outside {band}"
            f" and sized {v.parallelism}→{sized[v.id].wanted}"
            for v in triggers
        )
    else:
        reason = (
            f"no vertex whose parallelism would change is outside utilization {band}:"
            " DS2 not triggered"
        )

    vertices: dict[str, VertexProposal] = {}
    for v in graph.vertices:
        s, p = sized[v.id], v.parallelism
        proposed = s.wanted if triggers else p
        text = s.text
        if s.wanted != p:
            if triggers and s.delayed:
                text += ", rides along with the rescale"
            elif not triggers:
                text += f", keeps {p}"
        tpr = tprs[v.id]
        vertices[v.id] = VertexProposal(
            vertex_id=v.id,
            parallelism_before=p,
            parallelism=proposed,
            wanted=s.wanted,
            target_rate=rates[v.id],
            true_processing_rate=tpr,
            utilization=rates[v.id] / tpr if _known(tpr) else None,
            reason=text,
            outside_band=s.outside,
            delayed=s.delayed,
        )
    return Proposal(
        triggered=bool(triggers),
        reason=reason,
        vertices=MappingProxyType(vertices),
        scale_down_wanted_since=MappingProxyType(since),
    )


def _has_hash_input(graph: JobGraph, vertex_id: str) -> bool:
    return any(e.ship_strategy == ShipStrategy.HASH for e in graph.inputs(vertex_id))
