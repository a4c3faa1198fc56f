"""The twin: a Flink job on RocksDB stepped in virtual time.

Each tick is a bottleneck analysis of the job graph: sources offer their target
rate plus whatever lag they can catch up on, every vertex can absorb at most
what its hottest subtask processes, and the sources are throttled (backpressure)
to what the tightest vertex sustains. Busyness, backpressure and idle time per
subtask follow; the unproduced records become source lag (pendingRecords).
A reconfiguration stops the job for a savepoint + restore whose length grows with
the state size; lag builds meanwhile and drains afterwards.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from policies import levels
from policies.model import (
    Configuration,
    JobGraph,
    Observation,
    VertexConfig,
    VertexMetrics,
)
from simulator.model import JobModel, Operator, vertex_id_for
from simulator.perf import TaskCost, subtask_shares, task_cost

# The paper's TaskManager (§5): 4 cores, 2 GB, 4 slots. Flink 1.20's memory model
# of a 2048 MiB process gives each slot 134 MiB task heap and 40 MiB network
# memory (and 159 MiB managed, which the paper rounds to 158).
HEAP_MIB_PER_TASK = 134.0
NETWORK_MIB_PER_TASK = 40.0
BASE_MANAGED_MIB = 158.0
MIB_BYTES = 1024 * 1024
# One bottleneck analysis per virtual second; metrics are means over ticks.
TICK_S = 1.0


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


def mean(values: list[float]) -> float:
    return sum(values) / len(values)


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
        self._rng = random.Random(seed)
        self._ops = model.by_vertex()
        self._graph = model.job_graph()
        self._order = self._graph.topological_order()
        self._config: dict[str, VertexConfig] = dict(self._graph.configuration())
        self._costs: dict[str, TaskCost] = {}
        self._share_cache: dict[str, tuple[float, ...]] = {}
        if configuration is not None:
            self._set(configuration)
        self._lag = {o.vertex_id: 0.0 for o in model.sources()}
        self._history: deque[Tick] = deque(maxlen=max(1, int(history_s / TICK_S)))
        self._reset_counters()

    # ---- configuration -------------------------------------------------

    @property
    def configuration(self) -> Configuration:
        return MappingProxyType(dict(self._config))

    def job_graph(self) -> JobGraph:
        return self._graph.with_configuration(self._config)

    @property
    def running(self) -> bool:
        return self.time >= self.down_until

    def downtime_s(self) -> float:
        """Savepoint + restore time for the model's state, plus a fixed restart cost."""
        r = self.model.reconfiguration
        state_mb = self.model.state_bytes / 1e6
        seconds = r.fixed_s + state_mb / r.savepoint_mb_per_s + state_mb / r.restore_mb_per_s
        return seconds * self.downtime_scale

    def apply(self, configuration: Configuration, *, restart: bool = False) -> float:
        """Restart the job with `configuration` (vertices not named keep theirs).

        `restart`: restart even if the configuration stays (new TaskManagers, as a
        stateful upgrade of the deployment's resources does). Returns the downtime in
        seconds (0 if nothing changes).
        """
        before = dict(self._config)
        self._set(configuration)
        if self._config == before and not restart:
            return 0.0
        downtime = self.downtime_s()
        self.down_until = self.time + downtime
        self.restarts += 1
        self._reset_counters()
        return downtime

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
            vid: Counters(*([0.0] * self._config[vid].parallelism for _ in range(4)))
            for vid in self._config
        }

    def managed_mib_of(self, vertex_id: str) -> float:
        return managed_mib(self._config[vertex_id].memory_level, self.base_managed_mib)

    def slot_sharing_group(self, vertex_id: str) -> str:
        """flink-plugin puts each stateful operator in its own group, stateless ones together."""
        op = self._ops[vertex_id]
        key = op.uid if op.state is not None else "stateless"
        return vertex_id_for(f"ssg/{key}")

    def cost(self, vertex_id: str) -> TaskCost:
        if vertex_id not in self._costs:
            vc = self._config[vertex_id]
            self._costs[vertex_id] = task_cost(
                self._ops[vertex_id],
                vc.parallelism,
                managed_mib(vc.memory_level, self.base_managed_mib),
                self.model.rocksdb,
            )
        return self._costs[vertex_id]

    # ---- time ----------------------------------------------------------

    def advance(self, seconds: float) -> None:
        """Run for `seconds` of virtual time, one tick at a time."""
        end = self.time + seconds
        while self.time + 1e-9 < end:
            dt = min(TICK_S, end - self.time)
            self._tick(dt)

    def _tick(self, dt: float) -> None:
        target = self.model.load.rate_at(self.time)
        if not self.running:
            for op in self.model.sources():
                self._lag[op.vertex_id] += target * self.model.source_share(op) * dt
            self.time += dt
            self._history.append(Tick(self.time, False, target))
            return
        flows = self._flows(target, dt)
        self.time += dt
        self._history.append(Tick(self.time, True, target, MappingProxyType(flows)))

    def _shares(self, vid: str) -> tuple[float, ...]:
        if vid not in self._share_cache:
            op = self._ops[vid]
            self._share_cache[vid] = subtask_shares(self._config[vid].parallelism, op.subtask_skew)
        return self._share_cache[vid]

    def _vertex_limit(self, op: Operator) -> float:
        """Most records/s the vertex absorbs: its hottest subtask saturates first."""
        return self.cost(op.vertex_id).capacity / max(self._shares(op.vertex_id))

    def _flows(self, target: float, dt: float) -> dict[str, VertexSample]:
        model = self.model
        offered: dict[str, float] = {}
        for op in model.sources():
            want = target * model.source_share(op) + self._lag[op.vertex_id] / dt
            offered[op.vertex_id] = min(want, self._vertex_limit(op))
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
                ratio = self._vertex_limit(self._ops[vid]) / load[vid]
                if ratio < alpha:
                    alpha, bottleneck = ratio, vid
        blocked = self._ancestors(bottleneck) if bottleneck else set()

        samples: dict[str, VertexSample] = {}
        for vid in self._order:
            op = self._ops[vid]
            rate = alpha * load[vid]
            cost = self.cost(vid)
            subtasks: list[SubtaskSample] = []
            for i, share in enumerate(self._shares(vid)):
                if i == 0 or share != subtasks[-1].share:
                    busy = min(1.0, rate * share / cost.capacity)
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
                    )
                subtasks.append(sample)
                self._count(vid, i, rate * share * dt, cost)
            pending = None
            if op.is_source:
                produced = rate * dt
                due = target * model.source_share(op) * dt
                self._lag[vid] = max(0.0, self._lag[vid] + due - produced)
                pending = self._lag[vid]
            samples[vid] = VertexSample(tuple(subtasks), cost, pending)
        return samples

    def _count(self, vid: str, subtask: int, records: float, cost: TaskCost) -> None:
        op = self._ops[vid]
        if op.state is None:
            return
        c = self.counters[vid]
        c.hits[subtask] += records * cost.hits_per_record
        c.misses[subtask] += records * cost.misses_per_record
        c.gets[subtask] += records * op.state.access.gets_per_record
        c.puts[subtask] += records * op.state.access.puts_per_record

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
        """A measurement of `value` with the model's seeded relative noise."""
        if self.model.noise <= 0 or value == 0:
            return value
        return max(0.0, value * (1.0 + self._rng.gauss(0.0, self.model.noise)))

    def observe(self, window_s: float) -> Observation:
        """The policies' view of the last `window_s` seconds (running ticks only).

        Mean over ticks of each signal; measurement noise is applied per tick, as a
        5-second Prometheus sample would carry it. A window without a running tick
        (the job is restarting) has no vertices.
        """
        ticks = [t for t in self.ticks(window_s) if t.running]
        vertices: dict[str, VertexMetrics] = {}
        if not ticks:
            return Observation(self.time, window_s, MappingProxyType(vertices))
        n = len(ticks)
        for vid, op in self._ops.items():
            samples = [t.vertices[vid] for t in ticks]
            busy = mean([self.noisy(mean([s.busy for s in v.subtasks])) for v in samples])
            busy_max = mean([self.noisy(max(s.busy for s in v.subtasks)) for v in samples])
            bp = mean([mean([s.backpressured for s in v.subtasks]) for v in samples])
            r_in = mean([self.noisy(v.records_in) for v in samples])
            r_out = mean([self.noisy(v.records_out) for v in samples])
            pending = growth = None
            if op.is_source:
                first, last = samples[0].pending or 0.0, samples[-1].pending or 0.0
                pending = last
                span = ticks[-1].time - ticks[0].time
                growth = (last - first) / span if n > 1 and span > 0 else 0.0
            hits = misses = latency = None
            if op.state is not None:
                hits = mean([self.noisy(v.records_in * v.cost.hits_per_record) for v in samples])
                misses = mean(
                    [self.noisy(v.records_in * v.cost.misses_per_record) for v in samples]
                )
                lat = samples[-1].cost.get_latency_ns or samples[-1].cost.put_latency_ns
                latency = self.noisy(lat) if lat is not None else None
            vertices[vid] = VertexMetrics(
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
            )
        return Observation(self.time, window_s, MappingProxyType(vertices))

    def achieved_rate(self, window_s: float) -> float:
        """Mean records/s the sources produced over the window (0 while down)."""
        ticks = self.ticks(window_s)
        return sum(t.source_rate for t in ticks) / len(ticks) if ticks else 0.0

    def lag(self) -> float:
        return sum(self._lag.values())
