"""The twin: a Flink job on RocksDB (or Flink 2.x's ForSt) stepped in virtual time.

Each tick is a bottleneck analysis of the job graph: sources offer their target
rate plus whatever lag they can catch up on, every vertex can absorb at most
what its hottest subtask processes, and the sources are throttled (backpressure)
to what the tightest vertex sustains. Busyness, backpressure and idle time per
subtask follow; the unproduced records become source lag (pendingRecords).
A reconfiguration stops the job for as long as the engine's measured step costs say
(policies/restart_cost.py; a savepoint's grows with the state, a last-state restart on
ForSt reads none); lag builds meanwhile and drains afterwards.
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any

from policies import levels
from policies.model import (
    Configuration,
    JobGraph,
    Observation,
    VertexConfig,
    VertexMetrics,
)
from policies.restart_cost import Enactment
from simulator.model import Episodes, JobModel, Operator, vertex_id_for
from simulator.perf import (
    TaskCost,
    channels,
    scaled,
    task_cost,
    vertex_shares,
)

# The paper's TaskManager (§5): 4 cores, 2 GB, 4 slots. Flink 1.20's memory model
# of a 2048 MiB process gives each slot 134 MiB task heap and 40 MiB network
# memory (and 159 MiB managed, which the paper rounds to 158).
HEAP_MIB_PER_TASK = 134.0
NETWORK_MIB_PER_TASK = 40.0
BASE_MANAGED_MIB = 158.0
MIB_BYTES = 1024 * 1024
# Flink's native Kubernetes integration gives a TaskManager container a CPU limit of its
# request times this factor (Flink's default 1.0; Flink refuses one below 1).
CPU_LIMIT_FACTOR_KEY = "kubernetes.taskmanager.cpu.limit-factor"
# One bottleneck analysis per virtual second; metrics are means over ticks.
TICK_S = 1.0
# Prometheus scrapes the reporter every 5 s; observe() averages those samples.
SCRAPE_S = 5.0
# As the controller (controller/collect.py): a series whose last sample is older than
# two scrapes plus slack is stale, and one covering less than half the window is missing.
STALE_AFTER_S = 2 * SCRAPE_S + 5.0
# A refilling block cache is modelled in this many steps (a cost per step, not per tick).
FILL_STEPS = 20


def managed_mib(level: int | None, base: float = BASE_MANAGED_MIB) -> float:
    """`policies.levels.managed_mib` at the paper's base unless told otherwise."""
    return levels.managed_mib(level, base)


def paper_resources(
    model: JobModel, configuration: Configuration, base: float = BASE_MANAGED_MIB
) -> tuple[float, float]:
    """(CPU cores, memory MiB) as the paper counts them: sources excluded, one core
    per task, heap + network + managed memory per task."""
    cores = memory = 0.0
    for op in model.operators:
        if op.is_source:
            continue
        vc = configuration[op.vertex_id]
        cores += vc.parallelism
        memory += vc.parallelism * (
            HEAP_MIB_PER_TASK + NETWORK_MIB_PER_TASK + managed_mib(vc.memory_level, base)
        )
    return cores, memory


@dataclass(frozen=True)
class SubtaskSample:
    """One subtask in one tick: ms-per-second times and record rates."""

    busy: float
    backpressured: float
    idle: float
    records_in: float
    records_out: float
    share: float = 1.0  # of the vertex's records
    # Records in flight (asynchronous state on ForSt; 0 elsewhere).
    in_flight: float = 0.0
    # Cores its records took: the task thread's work and, on ForSt, its I/O threads'
    # (what the TaskManager's Status.JVM.CPU.Time counts, and busy time may not).
    cpu: float = 0.0


@dataclass(frozen=True)
class VertexSample:
    subtasks: tuple[SubtaskSample, ...]
    cost: TaskCost
    pending: float | None  # sources: lag in records

    @property
    def records_in(self) -> float:
        return sum(s.records_in for s in self.subtasks)

    @property
    def records_out(self) -> float:
        return sum(s.records_out for s in self.subtasks)


@dataclass(frozen=True)
class Tick:
    time: float
    running: bool
    target_rate: float
    vertices: Mapping[str, VertexSample] = field(default_factory=dict)
    # Each vertex's busy-time measurement error at this tick (model.Noise.busy_bias_sd).
    bias: Mapping[str, float] = field(default_factory=dict)

    @property
    def source_rate(self) -> float:
        """Records/s the sources produced in this tick (the achieved rate)."""
        return sum(v.records_out for v in self.vertices.values() if v.pending is not None)


@dataclass
class Counters:
    """Cumulative per-subtask counters, reset by a restart like Flink's tickers."""

    hits: list[float]
    misses: list[float]
    gets: list[float]
    puts: list[float]
    # ForSt's file cache (zeros on RocksDB).
    file_hits: list[float]
    file_misses: list[float]

    @classmethod
    def zeros(cls, subtasks: int) -> Counters:
        return cls(*([0.0] * subtasks for _ in fields(cls)))


@dataclass
class IoCounters:
    """Flink's accumulated task counters per subtask (numRecordsIn/Out, accumulate*TimeMs),
    reset when the tasks restart. `read` is what the operator reads: for a source, the
    records it fetches (a FLIP-27 source operator counts them in numRecordsIn)."""

    read: list[float]
    written: list[float]
    busy_ms: list[float]
    backpressured_ms: list[float]
    idle_ms: list[float]
    cpu_s: list[float]  # CPU seconds its records took (SubtaskSample.cpu)

    @classmethod
    def zeros(cls, subtasks: int) -> IoCounters:
        return cls(*([0.0] * subtasks for _ in range(6)))


def mean(values: list[float]) -> float:
    return sum(values) / len(values)


class Schedule:
    """Seeded episodes in virtual time (Poisson starts, exponential lengths), drawn lazily."""

    def __init__(self, episodes: Episodes, rng: random.Random) -> None:
        self._episodes, self._rng = episodes, rng
        self._spans: list[tuple[float, float]] = []
        self._drawn_until = 0.0

    def _draw(self, until: float) -> None:
        rate = self._episodes.per_hour / 3600.0
        if rate <= 0:
            return
        while self._drawn_until <= until:
            start = self._drawn_until + self._rng.expovariate(rate)
            length = self._rng.expovariate(1.0 / self._episodes.mean_s)
            self._spans.append((start, start + length))
            self._drawn_until = start + length
        # Spans that ended long ago can go: nobody looks back further than an hour.
        while self._spans and self._spans[0][1] < until - 3600.0:
            self._spans.pop(0)

    def overlap(self, start: float, end: float) -> float:
        """Seconds of [start, end) inside an episode."""
        self._draw(end)
        return sum(max(0.0, min(end, b) - max(start, a)) for a, b in self._spans)

    def active(self, t: float) -> bool:
        self._draw(t)
        return any(a <= t < b for a, b in self._spans)


def cpu_limit_factor(flink_configuration: Mapping[str, Any]) -> float:
    """A deployment's TaskManager CPU limit over its request (`CPU_LIMIT_FACTOR_KEY`):
    Flink's default 1.0 when unset, and when it is no finite number of at least 1 (Flink
    then starts no TaskManager)."""
    try:
        factor = float(flink_configuration.get(CPU_LIMIT_FACTOR_KEY, 1.0))
    except (TypeError, ValueError):
        return 1.0
    return factor if math.isfinite(factor) and factor >= 1.0 else 1.0


class Twin:
    """A job model running under a configuration, in virtual time (seconds)."""

    def __init__(
        self,
        model: JobModel,
        *,
        seed: int = 0,
        base_managed_mib: float = BASE_MANAGED_MIB,
        downtime_scale: float = 1.0,
        configuration: Configuration | None = None,
        history_s: float = 3600.0,
    ) -> None:
        self.model = model
        self.base_managed_mib = base_managed_mib
        self.downtime_scale = downtime_scale
        self.time = 0.0
        self.restarts = 0
        self.down_until = 0.0
        # How the last step was enacted, and the downtime it cost (None: no step yet).
        self.last_step: tuple[Enactment, float] | None = None
        self._ops = model.by_vertex()
        # vertex id -> slot sharing group written in hybridscaler.operator-resources
        self.groups: dict[str, str] = {}
        # The cores the TaskManager pods may use: their CPU limit, replicas × resource.cpu
        # × `cpu_limit_factor` (an uncontended node lends CPU up to the limit): tasks that
        # want more are throttled (`_flows`). None: as many as the tasks want.
        self.cpu_budget: float | None = None
        self._graph = model.job_graph()
        self._order = self._graph.topological_order()
        self._config: dict[str, VertexConfig] = dict(self._graph.configuration())
        self._costs: dict[str, TaskCost] = {}
        self._share_cache: dict[str, tuple[float, ...]] = {}
        # Stateful vertices whose block caches are refilling since a restart, and how far.
        self._filling: dict[str, float] = {}
        self._init_noise(seed)
        if configuration is not None:
            self._set(configuration)
        self._sources = model.sources()
        self._lag = {o.vertex_id: 0.0 for o in self._sources}
        self._history: deque[Tick] = deque(maxlen=max(1, int(history_s / TICK_S)))
        self._reset_counters()

    def _init_noise(self, seed: int) -> None:
        """One random stream per part of the noise (model.Noise), so that switching a
        part off leaves the others' draws as they were."""
        noise = self.model.noise

        def rng(part: str) -> random.Random:
            return random.Random(f"{seed}/{part}")

        self._rng = rng("samples")
        self._latency_rng = rng("latency")
        self._bias_rng = rng("bias")
        self._bias = {vid: self._bias_rng.gauss(0.0, noise.busy_bias_sd) for vid in self._ops}
        self._pauses = {vid: Schedule(noise.pauses, rng(f"pause/{op.uid}"))
                        for vid, op in self._ops.items()}
        self._stale = {vid: Schedule(noise.stale_series, rng(f"stale/{op.uid}"))
                       for vid, op in self._ops.items()}
        self._gaps = Schedule(noise.scrape_gaps, rng("gaps"))
        self.seed = seed

    # ---- configuration -------------------------------------------------

    @property
    def configuration(self) -> Configuration:
        return MappingProxyType(dict(self._config))

    def job_graph(self) -> JobGraph:
        return self._graph.with_configuration(self._config)

    @property
    def running(self) -> bool:
        return self.time >= self.down_until

    def downtime_s(self, kind: Enactment = Enactment.SAVEPOINT) -> float:
        """The step's downtime for the model's state, enacted as `kind` (the model's
        `reconfiguration`, by default what real Flink measured; policies/restart_cost.py)."""
        costs = self.model.reconfiguration.costs(self.model.engine)
        return costs[kind].downtime_s(self.model.state_bytes) * self.downtime_scale

    def apply(self, configuration: Configuration, *, restart: bool = False,
              kind: Enactment = Enactment.SAVEPOINT) -> float:
        """Restart the job with `configuration` (vertices not named keep theirs), enacted as
        `kind` (a savepoint upgrade unless said otherwise).

        `restart`: restart even if the configuration stays (new TaskManagers, as a
        stateful upgrade of the deployment's resources does). Returns the downtime in
        seconds (0 if nothing changes).
        """
        before = dict(self._config)
        self._set(configuration)
        if self._config == before and not restart:
            return 0.0
        downtime = self.downtime_s(kind)
        self.down_until = self.time + downtime
        self.restarts += 1
        self.last_step = (kind, downtime)
        self._reset_counters()
        # The restored tasks open RocksDB with empty block caches (policies/warmup.py).
        self._filling = {vid: 0.0 for vid, op in self._ops.items() if op.state is not None}
        self._costs = {}
        return downtime

    def resize(self, configuration: Configuration) -> None:
        """Set memory levels without a restart, as flink-plugin's agent resizes live block
        caches (docs/flink-plugin.md): no downtime, the same tasks and counters; a cache
        keeps what it holds (a grown one fills on from there, a shrunk one evicts)."""
        if any(configuration[vid].parallelism != self._config[vid].parallelism
               for vid in configuration):
            raise ValueError("a resize changes memory levels only")
        self._set(configuration)
        self.last_step = (Enactment.RESIZE, 0.0)

    def _set(self, configuration: Configuration) -> None:
        """Validate the whole configuration first: a rejected one changes nothing."""
        for vid, vc in configuration.items():
            if vid not in self._ops:
                raise KeyError(f"unknown vertex id {vid} for job {self.model.name}")
            op = self._ops[vid]
            if not 1 <= vc.parallelism <= op.max_parallelism:
                raise ValueError(
                    f"{op.uid}: parallelism {vc.parallelism} outside 1..{op.max_parallelism}"
                )
        self._config.update(configuration)
        self._costs = {}
        self._share_cache = {}

    def _reset_counters(self) -> None:
        self.counters = {
            vid: Counters.zeros(vc.parallelism) for vid, vc in self._config.items()
        }
        self.io = {vid: IoCounters.zeros(vc.parallelism) for vid, vc in self._config.items()}

    def managed_mib_of(self, vertex_id: str) -> float:
        return managed_mib(self._config[vertex_id].memory_level, self.base_managed_mib)

    def slot_sharing_group(self, vertex_id: str) -> str:
        """The group written for the vertex; unwritten, flink-plugin's default: each stateful
        operator in its own group, stateless ones together."""
        op = self._ops[vertex_id]
        if vertex_id in self.groups:
            return vertex_id_for(f"ssg/{self.groups[vertex_id]}")
        key = op.uid if op.state is not None else "stateless"
        return vertex_id_for(f"ssg/{key}")

    def cost(self, vertex_id: str) -> TaskCost:
        """Per-record cost of one task, with the overheads of its parallelism."""
        if vertex_id not in self._costs:
            vc = self._config[vertex_id]
            base = task_cost(
                self._ops[vertex_id],
                vc.parallelism,
                managed_mib(vc.memory_level, self.base_managed_mib),
                self.model.rocksdb,
                forst=self.model.forst_engine,
                fill=self._filling.get(vertex_id, 1.0),
            )
            parallelism = {vid: c.parallelism for vid, c in self._config.items()}
            self._costs[vertex_id] = scaled(base, vc.parallelism, self.model.scaling,
                                            *channels(self.model, parallelism, vertex_id))
        return self._costs[vertex_id]

    # ---- time ----------------------------------------------------------

    def advance(self, seconds: float) -> None:
        """Run for `seconds` of virtual time, one tick at a time."""
        end = self.time + seconds
        while self.time + 1e-9 < end:
            dt = min(TICK_S, end - self.time)
            self._tick(dt)

    def _tick(self, dt: float) -> None:
        self._drift_bias(dt)
        due = {op.vertex_id: self.model.source_rate(op, self.time) for op in self._sources}
        target = sum(due.values())
        if not self.running:
            for vid, rate in due.items():
                self._lag[vid] += rate * dt
            self.time += dt
            self._history.append(Tick(self.time, False, target))
            return
        flows = self._flows(due, dt)
        self._refill(dt)
        self.time += dt
        self._history.append(Tick(self.time, True, target, MappingProxyType(flows),
                                  MappingProxyType(dict(self._bias))))

    def cache_fill(self, vertex_id: str) -> float:
        """Share of the vertex's block caches filled since the last restart (1: warm)."""
        return self._filling.get(vertex_id, 1.0)

    def _refill(self, dt: float) -> None:
        """A restored task reads its blocks back into the cache at the rate real Flink
        showed (`RocksDB.fill_mib_per_s`) until the cache, or the task's share of the
        state, is full; so the hit rate climbs. The cost follows in `FILL_STEPS` steps."""
        for vid in list(self._filling):
            state = self._ops[vid].state
            assert state is not None  # only stateful vertices have caches to refill
            full = min(self.cost(vid).cache_bytes,
                       state.total_bytes * self.model.rocksdb.footprint_factor
                       / self._config[vid].parallelism)
            filled = (self.time + dt - self.down_until) * self.model.rocksdb.fill_mib_per_s \
                * MIB_BYTES / max(full, 1.0)
            step = min(1.0, math.floor(filled * FILL_STEPS) / FILL_STEPS)
            if step >= 1.0:
                del self._filling[vid]
                self._costs.pop(vid, None)
            elif step > self._filling[vid]:
                self._filling[vid] = step
                self._costs.pop(vid, None)

    def _drift_bias(self, dt: float) -> None:
        """AR(1) step of each vertex's busy-time error: it persists for busy_bias_time_s,
        so averaging a window does not remove it."""
        noise = self.model.noise
        if noise.busy_bias_sd <= 0:
            return
        rho = math.exp(-dt / noise.busy_bias_time_s)
        spread = noise.busy_bias_sd * math.sqrt(1.0 - rho * rho)
        for vid in self._bias:
            self._bias[vid] = rho * self._bias[vid] + self._bias_rng.gauss(0.0, spread)

    def _shares(self, vid: str) -> tuple[float, ...]:
        """Share of the vertex's records per subtask: its key groups (hashed inputs),
        times the model's subtask_skew."""
        if vid not in self._share_cache:
            self._share_cache[vid] = vertex_shares(
                self.model, self._ops[vid], self._config[vid].parallelism, self.seed)
        return self._share_cache[vid]

    def _available(self, vid: str, dt: float) -> float:
        """Share of this tick the vertex could work (not stalled by a GC or checkpoint pause)."""
        return 1.0 - min(dt, self._pauses[vid].overlap(self.time, self.time + dt)) / dt

    def _vertex_limit(self, op: Operator, available: float = 1.0) -> float:
        """Most records/s the vertex absorbs: its hottest subtask saturates first."""
        return available * self.cost(op.vertex_id).capacity / max(self._shares(op.vertex_id))

    def _flows(self, due: dict[str, float], dt: float) -> dict[str, VertexSample]:
        """One tick of the bottleneck analysis; `due`: records/s each source should produce."""
        available = {vid: self._available(vid, dt) for vid in self._order}
        offered: dict[str, float] = {}
        for op in self._sources:
            want = due[op.vertex_id] + self._lag[op.vertex_id] / dt
            offered[op.vertex_id] = min(want, self._vertex_limit(op, available[op.vertex_id]))
        # Load on each vertex if the sources produced what they offer.
        load: dict[str, float] = {}
        for vid in self._order:
            op = self._ops[vid]
            if op.is_source:
                load[vid] = offered[vid]
            else:
                load[vid] = sum(
                    load[e.source] * self._ops[e.source].selectivity
                    for e in self._graph.inputs(vid)
                )
        alpha, bottleneck = 1.0, None
        for vid in self._order:
            if load[vid] > 0 and not self._ops[vid].is_source:
                ratio = self._vertex_limit(self._ops[vid], available[vid]) / load[vid]
                if ratio < alpha:
                    alpha, bottleneck = ratio, vid
        # The pods' CPU limit: past it every task is throttled alike, so the same vertex
        # (or source) saturates first, at what the CPU allows.
        speed = self._cpu_speed(alpha, load)
        alpha *= speed
        blocked = self._ancestors(bottleneck) if bottleneck else set()

        samples: dict[str, VertexSample] = {}
        for vid in self._order:
            op = self._ops[vid]
            rate = alpha * load[vid]
            cost = self.cost(vid)
            subtasks: list[SubtaskSample] = []
            for i, share in enumerate(self._shares(vid)):
                if i == 0 or share != subtasks[-1].share:
                    # A stalled task counts the stall as busy time, as a GC pause does; a
                    # throttled one the time it waits for CPU.
                    work = rate * share / (cost.capacity * speed)
                    busy = min(1.0, work + 1.0 - available[vid])
                    saturated = busy >= 1.0 - 1e-9
                    if not saturated:
                        # Only the task thread's work shows (asynchronous state runs on
                        # ForSt's I/O threads); a saturated task blocks on its full
                        # in-flight buffer, and that is busy time.
                        busy = work * cost.thread_share + 1.0 - available[vid]
                    free = 1.0 - busy
                    bp = free if vid in blocked else 0.0
                    records = rate * share
                    sample = SubtaskSample(
                        busy=1000.0 * busy,
                        backpressured=1000.0 * bp,
                        idle=1000.0 * (free - bp),
                        records_in=0.0 if op.is_source else records,
                        records_out=records * (1.0 if op.is_source else op.selectivity),
                        share=share,
                        in_flight=self._in_flight(cost, records, saturated),
                        cpu=records / cost.capacity,
                    )
                subtasks.append(sample)
                self._count(vid, i, rate * share * dt, cost)
                self._accumulate(vid, i, rate * share * dt, sample, dt)
            pending = None
            if op.is_source:
                produced = rate * dt
                self._lag[vid] = max(0.0, self._lag[vid] + due[vid] * dt - produced)
                pending = self._lag[vid]
            samples[vid] = VertexSample(tuple(subtasks), cost, pending)
        return samples

    def _cpu_speed(self, alpha: float, load: Mapping[str, float]) -> float:
        """The share of the CPU its tasks want at this flow that the pods give them: 1
        within `cpu_budget`, else budget / want (the CFS quota throttles them alike, a
        pool over all TaskManagers). A task's CPU is its busy time at the flow."""
        if self.cpu_budget is None:
            return 1.0
        want = sum(alpha * load[vid] / self.cost(vid).capacity for vid in self._order
                   if load[vid] > 0)
        return 1.0 if want <= self.cpu_budget else self.cpu_budget / want

    def _in_flight(self, cost: TaskCost, records_per_s: float, saturated: bool) -> float:
        """Records in flight in one task with asynchronous state: each waits for its
        batch (ForSt's active buffer runs when `buffer_size` records are in it or after
        `buffer_timeout_ms`) and then for its state (Little's law); a saturated task keeps
        its in-flight buffer full."""
        forst = self.model.forst_engine
        if forst is None or cost.file_hits_per_record is None:
            return 0.0
        if saturated:
            return float(forst.in_flight_limit)
        batch = min(records_per_s * forst.buffer_timeout_ms / 1000.0, forst.buffer_size) / 2.0
        return min(float(forst.in_flight_limit), batch + records_per_s * cost.state_us / 1e6)

    def _count(self, vid: str, subtask: int, records: float, cost: TaskCost) -> None:
        op = self._ops[vid]
        if op.state is None:
            return
        c = self.counters[vid]
        if cost.file_hits_per_record is not None and cost.file_misses_per_record is not None:
            c.file_hits[subtask] += records * cost.file_hits_per_record
            c.file_misses[subtask] += records * cost.file_misses_per_record
        c.hits[subtask] += records * cost.hits_per_record
        c.misses[subtask] += records * cost.misses_per_record
        c.gets[subtask] += records * op.state.access.gets_per_record
        c.puts[subtask] += records * op.state.access.puts_per_record

    def _accumulate(self, vid: str, subtask: int, read: float, sample: SubtaskSample,
                    dt: float) -> None:
        io = self.io[vid]
        io.read[subtask] += read
        io.written[subtask] += sample.records_out * dt
        io.busy_ms[subtask] += sample.busy * dt
        io.backpressured_ms[subtask] += sample.backpressured * dt
        io.idle_ms[subtask] += sample.idle * dt
        io.cpu_s[subtask] += sample.cpu * dt

    def _ancestors(self, vid: str) -> set[str]:
        seen: set[str] = set()
        todo = [e.source for e in self._graph.inputs(vid)]
        while todo:
            current = todo.pop()
            if current not in seen:
                seen.add(current)
                todo.extend(e.source for e in self._graph.inputs(current))
        return seen

    # ---- what a metrics system sees ------------------------------------

    def ticks(self, window_s: float) -> list[Tick]:
        """The ticks of the last `window_s` seconds, oldest first."""
        start = self.time - window_s - 1e-9
        return [t for t in self._history if t.time > start]

    def last_tick(self) -> Tick | None:
        return self._history[-1] if self._history else None

    def noisy(self, value: float) -> float:
        """One sample of `value` with the model's seeded white noise (Noise.sample_sd)."""
        sd = self.model.noise.sample_sd
        if sd <= 0 or value == 0:
            return value
        return max(0.0, value * (1.0 + self._rng.gauss(0.0, sd)))

    # Serve mode asks these at each scrape (simulator/flink_format.py).

    def scrape_missing(self) -> bool:
        """Whether a scrape now returns nothing for this job (Noise.scrape_gaps)."""
        return self._gaps.active(self.time)

    def series_stale(self, vertex_id: str) -> bool:
        """Whether the vertex's series are not updating now (Noise.stale_series)."""
        return self._stale[vertex_id].active(self.time)

    def measured_busy(self, vertex_id: str, busy_ms: float, bias: float | None = None) -> float:
        """busyTimeMsPerSecond as measured: the vertex's drifting error, then white noise."""
        factor = 1.0 + (self._bias[vertex_id] if bias is None else bias)
        return min(1000.0, self.noisy(busy_ms * factor))

    def sampled_latency_ns(self, cost: TaskCost) -> float | None:
        """Mean state-access latency of one histogram: the last `latency_history` sampled
        accesses, a mix of hits and misses, so it varies from scrape to scrape."""
        history = self.model.noise.latency_history
        if cost.get_latency_ns is not None:
            if history <= 0:
                return cost.get_latency_ns
            spread = self._latency_rng.gauss(0.0, cost.get_sd_ns / math.sqrt(history))
            return max(0.1 * cost.get_latency_ns, cost.get_latency_ns + spread)
        if cost.put_latency_ns is not None:
            return self.noisy(cost.put_latency_ns) if history > 0 else cost.put_latency_ns
        return None

    def scrapes(self, window_s: float) -> list[Tick]:
        """The running ticks a 5-s scrape saw in the last `window_s` (the last tick before
        each scrape), minus scrapes lost to a gap."""
        last: dict[int, Tick] = {}
        for tick in self.ticks(window_s):
            if tick.running:
                last[math.ceil(tick.time / SCRAPE_S - 1e-9)] = tick
        return [t for k, t in sorted(last.items()) if not self._gaps.active(k * SCRAPE_S)]

    def observe(self, window_s: float) -> Observation:
        """The policies' view of the last `window_s` seconds, as Prometheus would give it.

        Mean over the window's 5-s scrapes of each signal, each sample carrying the
        model's noise (model.Noise): white noise, the vertex's drifting busy-time error,
        a latency histogram's sampling error. Scrapes lost to gaps are missing; a
        vertex whose series went stale, or whose samples cover less than half the
        window, is left out, as the controller leaves it out (MetricsUnavailable),
        and the policies then do not decide. A window without a running tick (the job
        is restarting) has no vertices.
        """
        scrapes = self.scrapes(window_s)
        vertices: dict[str, VertexMetrics] = {}
        start = max(0.0, self.time - window_s)
        for vid, op in self._ops.items():
            ticks = [t for t in scrapes if not self._stale[vid].active(t.time)]
            if (not ticks or self.time - ticks[-1].time > STALE_AFTER_S
                    or ticks[0].time - start > (self.time - start) / 2 + SCRAPE_S):
                continue
            vertices[vid] = self._measure(op, ticks)
        # The TaskManagers' JVM CPU, summed over the job, at the window's scrapes:
        # Status.JVM.CPU.Time counts the process's CPU time, with no sampling noise.
        cpu = mean([sum(s.cpu for v in t.vertices.values() for s in v.subtasks)
                    for t in scrapes]) if scrapes and vertices else None
        return Observation(self.time, window_s, MappingProxyType(vertices),
                           cpu_cores_used=cpu)

    def _measure(self, op: Operator, ticks: list[Tick]) -> VertexMetrics:
        vid = op.vertex_id
        samples = [t.vertices[vid] for t in ticks]
        bias = [t.bias.get(vid, 0.0) for t in ticks]
        busy = mean([self.measured_busy(vid, mean([s.busy for s in v.subtasks]), b)
                     for v, b in zip(samples, bias, strict=True)])
        busy_max = mean([self.measured_busy(vid, max(s.busy for s in v.subtasks), b)
                         for v, b in zip(samples, bias, strict=True)])
        bp = mean([mean([s.backpressured for s in v.subtasks]) for v in samples])
        r_in = mean([self.noisy(v.records_in) for v in samples])
        # The busiest subtask's numRecordsInPerSecond (a source's task reads no records).
        # Shares are fixed within a configuration, so the busiest subtask is the same one
        # at every scrape: the mean of each scrape's max is the max of the means.
        r_in_max = None if op.is_source else mean(
            [self.noisy(max(s.records_in for s in v.subtasks)) for v in samples])
        r_out = mean([self.noisy(v.records_out) for v in samples])
        pending = growth = None
        if op.is_source:
            first, last = samples[0].pending or 0.0, samples[-1].pending or 0.0
            pending = last
            span = ticks[-1].time - ticks[0].time
            growth = (last - first) / span if len(ticks) > 1 and span > 0 else 0.0
        hits = misses = latency = file_hits = file_misses = in_flight = None
        if op.state is not None:
            hits = mean([self.noisy(v.records_in * v.cost.hits_per_record) for v in samples])
            misses = mean([self.noisy(v.records_in * v.cost.misses_per_record) for v in samples])
            if self.model.forst_engine is not None:
                file_hits = mean([self.noisy(v.records_in * (v.cost.file_hits_per_record or 0.0))
                                  for v in samples])
                file_misses = mean([self.noisy(v.records_in
                                               * (v.cost.file_misses_per_record or 0.0))
                                    for v in samples])
                in_flight = mean([mean([s.in_flight for s in v.subtasks]) for v in samples])
            sampled = [self.sampled_latency_ns(v.cost) for v in samples]
            known = [x for x in sampled if x is not None]
            latency = mean(known) if known else None
        return VertexMetrics(
            busy_ms_per_s=min(1000.0, busy),
            busy_ms_per_s_max=min(1000.0, max(busy, busy_max)),
            backpressured_ms_per_s=bp,
            records_in_per_s=r_in,
            records_out_per_s=r_out,
            pending_records=pending,
            pending_records_growth_per_s=growth,
            cache_hits_per_s=hits,
            cache_misses_per_s=misses,
            state_latency_ns=latency,
            has_state_backend_metrics=op.state is not None,
            records_in_per_s_max=r_in_max,
            # RocksDB's estimate-live-data-size summed over subtasks (flink_format emits it).
            state_bytes=None if op.state is None else op.state.total_bytes,
            file_cache_hits_per_s=file_hits,
            file_cache_misses_per_s=file_misses,
            async_in_flight_records=in_flight,
        )

    def achieved_rate(self, window_s: float) -> float:
        """Mean records/s the sources produced over the window (0 while down)."""
        ticks = self.ticks(window_s)
        return sum(t.source_rate for t in ticks) / len(ticks) if ticks else 0.0

    def lag(self) -> float:
        return sum(self._lag.values())
