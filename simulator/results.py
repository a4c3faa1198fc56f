"""What a closed-loop run of a policy against the twin gives, and the oracle it is measured against.

The run itself is the controller's own pass driven in virtual time over the twin
(`controller/simulate.py`, the in-memory ports in `controller/adapters/twin.py`);
this module holds its results: the trajectory sampled every 5 seconds, the steps,
convergence, and the cheapest configuration that sustains the target (the oracle).
The paper's setup (§5) is the controller's default: a 2-minute metrics window, a
1-minute stabilization after the job runs again.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from policies.bill import PodBill
from policies.model import Configuration, VertexConfig
from policies.spec import MemoryScaling
from simulator.model import JobModel, Operator
from simulator.perf import channels, vertex_limit, vertex_shares
from simulator.twin import (
    BASE_MANAGED_MIB,
    HEAP_MIB_PER_TASK,
    NETWORK_MIB_PER_TASK,
    Twin,
    managed_mib,
    paper_resources,
)

PolicyName = Literal["justin", "ds2", "capacity"]
WINDOW_S = 120.0
STABILIZATION_S = 60.0
GRANULARITY_S = 5.0
# A configuration sustains the target when its capacity is at least this share of
# it (the twin's measurement noise is ~2 %).
KEEP_UP = 0.98


def capacity(model: JobModel, configuration: Configuration,
             base: float = BASE_MANAGED_MIB, seed: int = 0) -> float:
    """Highest total source rate the configuration sustains (every task at most 100 % busy),
    with the twin's overheads of parallelism and its key-group imbalance for `seed`."""
    best = math.inf
    load = unit_loads(model)
    parallelism = {vid: vc.parallelism for vid, vc in configuration.items()}
    for op in model.operators:
        if load[op.vertex_id] <= 0:
            continue
        best = min(best, _limit(model, op, configuration[op.vertex_id], parallelism, base, seed)
                   / load[op.vertex_id])
    return best


def busy_cores(model: JobModel, configuration: Configuration, target_rate: float,
               base: float = BASE_MANAGED_MIB) -> dict[str, float]:
    """Per vertex, the cores its tasks need at `target_rate`: records/s through it over one
    task's capacity, the twin's per-record costs with the overheads of its parallelism.
    Below saturation that is the busy time the twin reports for its tasks, summed; on ForSt
    it also counts the I/O threads' share (which Flink's busy time leaves out); where the
    configuration cannot carry the target, it is more than its tasks can get."""
    twin = Twin(model, base_managed_mib=base, configuration=configuration)
    loads = unit_loads(model)
    return {op.vertex_id: loads[op.vertex_id] * target_rate / twin.cost(op.vertex_id).capacity
            for op in model.operators if loads[op.vertex_id] > 0}


def cpu_used(model: JobModel, configuration: Configuration, target_rate: float,
             base: float = BASE_MANAGED_MIB) -> float:
    """Cores the configuration's tasks need at `target_rate` (`busy_cores`, summed),
    whatever pods they are placed in: the pods must request at least this much CPU, or
    their tasks cannot keep up."""
    return sum(busy_cores(model, configuration, target_rate, base).values())


def _limit(model: JobModel, op: Operator, vc: VertexConfig, parallelism: dict[str, int],
           base: float, seed: int) -> float:
    return vertex_limit(op, vc.parallelism, managed_mib(vc.memory_level, base), model.rocksdb,
                        model.scaling, *channels(model, parallelism, op.vertex_id),
                        shares=vertex_shares(model, op, vc.parallelism, seed),
                        forst=model.forst_engine)


def unit_loads(model: JobModel) -> dict[str, float]:
    """Records/s into each vertex (out of each source) per record/s of total target rate."""
    graph = model.job_graph()
    ops = model.by_vertex()
    load: dict[str, float] = {}
    for vid in graph.topological_order():
        op = ops[vid]
        if op.is_source:
            load[vid] = model.source_share(op)
        else:
            load[vid] = sum(load[e.source] * ops[e.source].selectivity for e in graph.inputs(vid))
    return load


@dataclass(frozen=True)
class Sample:
    time: float
    target_rate: float
    rate: float  # records/s the sources produced over the last GRANULARITY_S
    lag: float
    cpu_cores: float
    memory_mib: float
    running: bool

    def as_json(self) -> dict[str, Any]:
        return {
            "t": self.time, "target_rate": round(self.target_rate, 1), "rate": round(self.rate, 1),
            "lag": round(self.lag), "cpu_cores": self.cpu_cores,
            "memory_mb": round(self.memory_mib, 1), "running": self.running,
        }


@dataclass(frozen=True)
class Step:
    """One reconfiguration the policy made."""

    time: float
    downtime_s: float
    configuration: Configuration
    cpu_cores: float
    memory_mib: float
    rate_before: float
    capacity: float  # the highest source rate this configuration sustains
    reason: str
    # The cores the TaskManager pods let their tasks use when it was decided (their CPU
    # limit, Twin.cpu_budget); None: as many as the tasks wanted.
    pods_cpu_before: float | None = None


@dataclass(frozen=True)
class PhaseReport:
    """One phase of the load (model.JobModel.boundaries): how the policy did in it."""

    start_s: float
    end_s: float
    peak_target: float
    steady: bool  # the target did not move during the phase
    time_to_target_s: float | None  # from the phase's start until the sources keep up
    restarts: int
    peak_lag: float

    @property
    def restarts_per_hour(self) -> float:
        return 3600.0 * self.restarts / max(1e-9, self.end_s - self.start_s)

    def as_json(self) -> dict[str, Any]:
        return {
            "start_s": self.start_s, "end_s": self.end_s,
            "peak_target": round(self.peak_target, 1), "steady": self.steady,
            "time_to_target_s": self.time_to_target_s, "restarts": self.restarts,
            "restarts_per_hour": round(self.restarts_per_hour, 2),
            "peak_lag": round(self.peak_lag),
        }


def phase_reports(model: JobModel, samples: list[Sample], steps: list[Step]
                  ) -> list[PhaseReport]:
    """Per load phase: time until the sources keep up (rate ≥ KEEP_UP × target with less
    than one sample's worth of backlog), restarts, and the highest backlog."""
    if not samples:
        return []
    end = samples[-1].time
    starts = [t for t in model.boundaries(end) if t < end]
    reports = []
    for start, stop in zip(starts, [*starts[1:], end], strict=True):
        inside = [s for s in samples if start < s.time <= stop]
        if not inside:
            continue
        targets = [s.target_rate for s in inside]
        reached = next((s.time - start for s in inside
                        if s.running and s.rate >= KEEP_UP * s.target_rate
                        and s.lag <= s.target_rate * GRANULARITY_S), None)
        reports.append(PhaseReport(
            start, stop, max(targets), max(targets) - min(targets) <= 1e-6 * max(targets),
            # A resize in place (no downtime) is a step, not a restart.
            reached, sum(start <= st.time < stop and st.downtime_s > 0 for st in steps),
            max(s.lag for s in inside)))
    return reports


@dataclass
class RunResult:
    policy: str
    model: JobModel
    steps: list[Step] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    final: Configuration = field(default_factory=lambda: MappingProxyType({}))
    converged: bool = False
    converged_at_s: float | None = None
    steps_to_target: int | None = None
    achieved_rate: float = 0.0
    capacity: float = 0.0
    cpu_cores: float = 0.0
    memory_mib: float = 0.0
    phases: list[PhaseReport] = field(default_factory=list)
    # Virtual time the controller first named a hot key it cannot scale away (its
    # Skewed condition turned True); None: never.
    skewed_at_s: float | None = None
    # Vertex id → when a decision first named it skewed (Decision.skew, where the policy
    # reports skew findings).
    skew_named: dict[str, float] = field(default_factory=dict)
    # The pods the last step's placement requests (status.placement): its bill, shape name
    # and whether the count is proven minimal; None: no step placed any.
    pods: tuple[PodBill, str, bool] | None = None
    # Each evaluation (a decision, waiting or not): its virtual time and the parallelism
    # it evaluated (key skew shows only at two tasks or more). Not in the JSON.
    evaluations: list[tuple[float, Mapping[str, int]]] = field(default_factory=list)
    # What the cluster bills: from each time on, the price per hour of the TaskManager pods
    # the deployment requests (resource × replicas), a point whenever it changed.
    bill: list[tuple[float, float]] = field(default_factory=list)

    def bill_at(self, time: float, price: float) -> None:
        """The pods cost `price` per hour from `time` on (a point only when it changed)."""
        if not self.bill or abs(self.bill[-1][1] - price) > 1e-9:
            self.bill.append((time, price))

    def pod_bill(self, until_s: float | None = None) -> float | None:
        """Price-hours the pods reserved from the first point until `until_s` (default: the
        last sample): the bill over the run, restarts and catch-up included; None without
        a price."""
        if not self.bill:
            return None
        end = until_s if until_s is not None else (
            self.samples[-1].time if self.samples else self.bill[-1][0])
        ends = [t for t, _ in self.bill[1:]] + [end]
        return sum(price * max(0.0, min(stop, end) - start) for (start, price), stop
                   in zip(self.bill, ends, strict=True)) / 3600.0

    def steady_restarts_per_hour(self) -> float | None:
        """Restarts per hour over the phases whose target did not move (None: none)."""
        steady = [p for p in self.phases if p.steady]
        hours = sum(p.end_s - p.start_s for p in steady) / 3600.0
        return sum(p.restarts for p in steady) / hours if hours > 0 else None

    def as_json(self) -> dict[str, Any]:
        return {
            "steps": len(self.steps),
            "phases": [p.as_json() for p in self.phases],
            "steady_restarts_per_hour": self.steady_restarts_per_hour(),
            "steps_to_target": self.steps_to_target,
            "converged": self.converged,
            "converged_at_s": self.converged_at_s,
            "skewed_at_s": self.skewed_at_s,
            "achieved_rate": round(self.achieved_rate, 1),
            "cpu_cores": self.cpu_cores,
            "memory_mb": round(self.memory_mib, 1),
            "capacity": round(self.capacity, 1),
            "configuration": configuration_json(self.model, self.final),
            "skew_named": dict(self.skew_named),
            "pod_bill": None if (bill := self.pod_bill()) is None else round(bill, 3),
            "trajectory": [s.as_json() for s in self.samples],
        }


def configuration_json(model: JobModel, config: Configuration) -> dict[str, dict[str, Any]]:
    return {
        o.uid: {"parallelism": config[o.vertex_id].parallelism,
                "memory_level": config[o.vertex_id].memory_level,
                "managed_mb": managed_mib(config[o.vertex_id].memory_level)}
        for o in model.operators
    }


def sample(twin: Twin) -> Sample:
    """The trajectory point the twin is at now."""
    cores, memory = paper_resources(twin.model, twin.configuration)
    return Sample(twin.time, twin.model.target_at(twin.time), twin.achieved_rate(GRANULARITY_S),
                  twin.lag(), cores, memory, twin.running)


def sustained(model: JobModel, configuration: Configuration, pods_cpu: float | None,
              seed: int) -> float:
    """The highest source rate the configuration sustains on pods that let its tasks use
    `pods_cpu` cores (None: as many as its tasks want): its tasks' capacity, and what the
    CPU allows (`cpu_used` is linear in the rate)."""
    tasks = capacity(model, configuration, seed=seed)
    if pods_cpu is None:
        return tasks
    per_record = cpu_used(model, configuration, 1.0)
    return min(tasks, pods_cpu / per_record) if per_record > 0 else tasks


def finish(result: RunResult, twin: Twin, window_s: float = WINDOW_S) -> None:
    """Converged: from some step on, every configuration sustains the target while it runs
    on the CPU its pods gave it (`sustained`), and the first of them ran through a full
    window (one applied in the last seconds has not shown anything yet, so a run whose
    only sustaining configuration is that one has not converged).

    `converged_at_s` is when the first of those configurations ran (its restart
    done); `steps_to_target` counts the reconfigurations up to it. Scale-ins
    afterwards that still sustain the target do not undo convergence, however late; a
    step or square load that rises past what a later configuration sustains does.
    """
    model = twin.model
    result.phases = phase_reports(model, result.samples, result.steps)
    result.final = twin.configuration
    result.cpu_cores, result.memory_mib = paper_resources(model, twin.configuration)
    result.capacity = capacity(model, twin.configuration, seed=twin.seed)
    result.achieved_rate = min(result.capacity, model.target_at(twin.time))
    starts = [0.0] + [s.time + s.downtime_s for s in result.steps]
    configs = [model.job_graph().configuration()] + [s.configuration for s in result.steps]
    # The CPU each configuration ran on: what the pods gave when the next step was
    # decided, and the last one's now.
    cpus = [s.pods_cpu_before for s in result.steps] + [twin.cpu_budget]
    ends = [*starts[1:], math.inf]
    sustains = [
        sustained(model, c, cpu, twin.seed)
        >= KEEP_UP * _highest_target(model, result.samples, start, end)
        for c, cpu, start, end in zip(configs, cpus, starts, ends, strict=True)
    ]
    result.converged, result.converged_at_s, result.steps_to_target = False, None, None
    for n, at in enumerate(starts):
        if all(sustains[n:]):
            if twin.time - at >= window_s:
                result.converged, result.converged_at_s, result.steps_to_target = True, at, n
            break


def _highest_target(model: JobModel, samples: list[Sample], start: float, end: float) -> float:
    """The highest target rate from `start` until `end` (at the trajectory's sample times)."""
    during = [s.target_rate for s in samples if start <= s.time < end]
    return max([model.target_at(start), *during])


@dataclass(frozen=True)
class OracleResult:
    configuration: Configuration
    feasible: bool
    capacity: float
    cpu_cores: float
    memory_mib: float
    model: JobModel
    target_rate: float  # the peak it is sized for
    utilization: float  # the busyness each task is sized to

    def as_json(self) -> dict[str, Any]:
        return {
            "steps": 0, "steps_to_target": 0, "converged": self.feasible,
            "converged_at_s": 0.0 if self.feasible else None,
            "utilization": self.utilization, "target_rate": round(self.target_rate, 1),
            "achieved_rate": round(min(self.capacity, self.target_rate), 1),
            "cpu_cores": self.cpu_cores, "memory_mb": round(self.memory_mib, 1),
            "capacity": round(self.capacity, 1),
            "configuration": configuration_json(self.model, self.configuration),
            "trajectory": [],
        }


def oracle(model: JobModel, target_rate: float | None = None, *, utilization: float = 1.0,
           horizon_s: float = 1200.0, seed: int = 0) -> OracleResult:
    """The cheapest per-operator (parallelism, memory level) sustaining the target in the twin.

    The target is the load's peak over `horizon_s` unless given. Every task is sized
    to `utilization` busyness: 1.0 is the physical limit; a policy's utilization
    target gives the configuration that policy aims for. Vertex loads follow from the
    target alone (no feedback), so each vertex is sized on its own, upstream first
    (its network channels depend on its inputs' sizes): fewest tasks first, then least
    memory, over the levels the policy may reach (the spec's maxLevel). Stateless
    vertices get ⊥; pinned vertices keep their parallelism. Noise is not in it: the
    oracle knows the true costs, including the overheads of parallelism and the seed's
    key-group imbalance.
    """
    max_level = MemoryScaling().max_level
    target = model.peak_target(horizon_s) if target_rate is None else target_rate
    loads = unit_loads(model)
    config: dict[str, VertexConfig] = {}
    parallelism = {o.vertex_id: o.initial_parallelism for o in model.operators}
    feasible = True
    for vid in model.job_graph().topological_order():
        op = model.by_vertex()[vid]
        # Pinned vertices cannot be resized to a utilization: they only have to keep up.
        need = loads[vid] * target / (1.0 if op.fixed_parallelism else utilization)
        levels: list[int | None] = [None] if op.state is None else list(range(max_level))
        best: tuple[int, float, VertexConfig] | None = None
        for level in levels:
            p = _fewest_tasks(model, op, level, need, parallelism, seed)
            if p is None:
                continue
            mem = p * (HEAP_MIB_PER_TASK + NETWORK_MIB_PER_TASK + managed_mib(level))
            if best is None or (p, mem) < best[:2]:
                best = (p, mem, VertexConfig(p, level))
        if best is None:
            feasible = False
            best = (op.max_parallelism, 0.0, VertexConfig(op.max_parallelism, levels[-1]))
        config[vid] = best[2]
        parallelism[vid] = best[2].parallelism
    frozen = MappingProxyType(config)
    cores, memory = paper_resources(model, frozen)
    return OracleResult(frozen, feasible, capacity(model, frozen, seed=seed), cores, memory,
                        model, target, utilization)


def _fewest_tasks(model: JobModel, op: Operator, level: int | None, need: float,
                  parallelism: dict[str, int], seed: int) -> int | None:
    if op.fixed_parallelism:
        candidates: range = range(op.initial_parallelism, op.initial_parallelism + 1)
    else:
        candidates = range(1, op.max_parallelism + 1)
    for p in candidates:
        trial = {**parallelism, op.vertex_id: p}
        if _limit(model, op, VertexConfig(p, level), trial, BASE_MANAGED_MIB, seed) >= need:
            return p
    return None
