"""Value objects shared by the scaling core, the packer's callers, the twin and the controller.

Everything here is immutable and free of I/O. Vertex ids are Flink JobVertexIDs
(the `task_id` label in Prometheus), stable across restarts once operator uids are
set; all maps in this module are keyed by them.

Vocabulary follows the Justin paper (§4): a vertex's *parallelism* p is its number
of tasks; its *memory level* m gives each task ``base × 2**m`` managed memory, and
``None`` stands for the paper's ⊥ (no managed memory: a stateless vertex).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from types import MappingProxyType


class ShipStrategy(StrEnum):
    """How records travel along an edge (Flink's `ship_strategy` in /jobs/<jid>/plan)."""

    HASH = "HASH"
    FORWARD = "FORWARD"
    REBALANCE = "REBALANCE"
    RESCALE = "RESCALE"
    BROADCAST = "BROADCAST"
    OTHER = "OTHER"

    @classmethod
    def parse(cls, text: str) -> ShipStrategy:
        upper = text.strip().upper()
        return cls(upper) if upper in cls.__members__ else cls.OTHER


@dataclass(frozen=True)
class Vertex:
    """One JobVertex: a chain of operators that runs as `parallelism` tasks."""

    id: str
    name: str
    max_parallelism: int
    parallelism: int
    memory_level: int | None = 0
    operator_uids: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.parallelism < 1:
            raise ValueError(f"vertex {self.id}: parallelism must be >= 1, got {self.parallelism}")
        if self.max_parallelism < self.parallelism:
            raise ValueError(
                f"vertex {self.id}: parallelism {self.parallelism} exceeds "
                f"max parallelism {self.max_parallelism}"
            )
        if self.memory_level is not None and self.memory_level < 0:
            raise ValueError(f"vertex {self.id}: memory level must be >= 0 or None")


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    ship_strategy: ShipStrategy = ShipStrategy.FORWARD


@dataclass(frozen=True)
class VertexConfig:
    """What the scaler controls for one vertex: tasks, and managed memory level (None = ⊥)."""

    parallelism: int
    memory_level: int | None


Configuration = Mapping[str, VertexConfig]


def memory_only(before: Configuration, after: Configuration) -> bool:
    """Whether a step changes managed memory and nothing else: the kind of step
    flink-plugin's agent can enact without a restart (policies/restart_cost.py)."""
    return (any(after[vid].memory_level != c.memory_level for vid, c in before.items())
            and all(after[vid].parallelism == c.parallelism for vid, c in before.items()))


@dataclass(frozen=True)
class JobGraph:
    vertices: tuple[Vertex, ...]
    edges: tuple[Edge, ...] = ()

    def __post_init__(self) -> None:
        ids = [v.id for v in self.vertices]
        if len(set(ids)) != len(ids):
            raise ValueError("duplicate vertex ids in job graph")
        known = set(ids)
        for e in self.edges:
            if e.source not in known or e.target not in known:
                raise ValueError(f"edge {e.source}->{e.target} names an unknown vertex")
        self.topological_order()  # raises on cycles

    def vertex(self, vertex_id: str) -> Vertex:
        for v in self.vertices:
            if v.id == vertex_id:
                return v
        raise KeyError(vertex_id)

    def inputs(self, vertex_id: str) -> tuple[Edge, ...]:
        return tuple(e for e in self.edges if e.target == vertex_id)

    def outputs(self, vertex_id: str) -> tuple[Edge, ...]:
        return tuple(e for e in self.edges if e.source == vertex_id)

    def is_source(self, vertex_id: str) -> bool:
        return not self.inputs(vertex_id)

    def topological_order(self) -> tuple[str, ...]:
        """Vertex ids, sources first; ties keep declaration order (determinism)."""
        indegree = {v.id: 0 for v in self.vertices}
        for e in self.edges:
            indegree[e.target] += 1
        order: list[str] = []
        ready = [v.id for v in self.vertices if indegree[v.id] == 0]
        while ready:
            current = ready.pop(0)
            order.append(current)
            for e in self.outputs(current):
                indegree[e.target] -= 1
                if indegree[e.target] == 0:
                    ready.append(e.target)
        if len(order) != len(self.vertices):
            raise ValueError("job graph has a cycle")
        return tuple(order)

    def configuration(self) -> Configuration:
        return MappingProxyType(
            {v.id: VertexConfig(v.parallelism, v.memory_level) for v in self.vertices}
        )

    def with_configuration(self, config: Configuration) -> JobGraph:
        return JobGraph(
            vertices=tuple(
                replace(v, parallelism=config[v.id].parallelism,
                        memory_level=config[v.id].memory_level)
                if v.id in config else v
                for v in self.vertices
            ),
            edges=self.edges,
        )


@dataclass(frozen=True)
class VertexMetrics:
    """One vertex's signals, aggregated over the metrics window and its subtasks.

    Rates are whole-vertex sums (records/s over all subtasks); times are ms per
    second as Flink reports them (0..1000), averaged over subtasks, with the
    busiest subtask's value kept too (`busy_ms_per_s_max`: the highest of the
    subtasks' window means, not the mean of each step's max, which noise inflates).
    """

    busy_ms_per_s: float
    busy_ms_per_s_max: float
    backpressured_ms_per_s: float
    records_in_per_s: float
    records_out_per_s: float
    # Sources only: pending records (lag) at the end of the window and its growth
    # rate; None when the connector reports no lag.
    pending_records: float | None = None
    pending_records_growth_per_s: float | None = None
    # RocksDB block cache hits and misses per second over the window; both None
    # when the backend exposes no cache ticker for this vertex.
    cache_hits_per_s: float | None = None
    cache_misses_per_s: float | None = None
    # Mean keyed-state access latency in nanoseconds (Flink reports ns), None
    # when latency tracking is off.
    state_latency_ns: float | None = None
    # True when any RocksDB/state-backend metric exists for this vertex: the
    # paper's test for "stateful" (Algorithm 1, line 3). A cache that never
    # misses still has this set.
    has_state_backend_metrics: bool = False
    # The busiest subtask's records in/s (max over subtasks of each one's window mean;
    # Flink's per-subtask numRecordsInPerSecond); None when not collected. Its share of
    # records_in_per_s is how unevenly the keys spread (policies/skew.py).
    records_in_per_s_max: float | None = None
    # RocksDB's estimate-live-data-size over all subtasks and column families (bytes),
    # None when not reported: the working set the cache model's prior needs.
    state_bytes: float | None = None
    # ForSt (Flink 2.x) only, None elsewhere. Hits and misses per second of the local-disk
    # file cache behind the block cache: a file-cache miss reads the remote primary store.
    file_cache_hits_per_s: float | None = None
    file_cache_misses_per_s: float | None = None
    # Records in flight per subtask of an operator with asynchronous state access (mean over
    # the window). Such an operator reports no state latency (docs/metrics.md, Flink 2.x).
    async_in_flight_records: float | None = None

    @property
    def busyness(self) -> float:
        """Fraction of time spent processing, 0..1 (the paper's busyness)."""
        return min(max(self.busy_ms_per_s / 1000.0, 0.0), 1.0)

    @property
    def cache_hit_rate(self) -> float | None:
        """θ: hits / (hits + misses). A stateful vertex with no misses has θ = 1."""
        if self.cache_hits_per_s is None and self.cache_misses_per_s is None:
            return 1.0 if self.has_state_backend_metrics else None
        hits = self.cache_hits_per_s or 0.0
        misses = self.cache_misses_per_s or 0.0
        total = hits + misses
        return 1.0 if total <= 0 else hits / total

    @property
    def file_cache_hit_rate(self) -> float | None:
        """ForSt's local-disk cache hit rate (of block-cache misses), None without one."""
        if self.file_cache_hits_per_s is None and self.file_cache_misses_per_s is None:
            return None
        hits = self.file_cache_hits_per_s or 0.0
        total = hits + (self.file_cache_misses_per_s or 0.0)
        return 1.0 if total <= 0 else hits / total

    @property
    def asynchronous_state(self) -> bool:
        """Its state is accessed asynchronously (ForSt, State V2): busy time counts the
        task thread only, not the I/O threads that do the state's work."""
        return self.async_in_flight_records is not None

    @property
    def processed_per_s(self) -> float:
        """Records/s it took in; a source, which has no input records, its output."""
        return self.records_in_per_s if self.records_in_per_s > 0 else self.records_out_per_s

    @property
    def true_processing_rate(self) -> float:
        """Records/s the vertex could process if never idle (DS2): input rate / busyness.

        Sources have no input records: their output rate stands in. Returns inf
        when the vertex was not busy at all (capacity unknown, but not binding).
        """
        if self.busyness <= 0:
            return math.inf
        return self.processed_per_s / self.busyness


@dataclass(frozen=True)
class Observation:
    """What the scaler saw for one job over one metrics window ending at `time`."""

    time: float
    window_s: float
    vertices: Mapping[str, VertexMetrics] = field(default_factory=dict)
    # When the job's tasks last (re)started, their block caches empty (policies.warmup);
    # None when not known.
    restarted: float | None = None
    # Cores the job's TaskManager JVMs used (Status.JVM.CPU.Time's rate, summed): every
    # thread's CPU, also the I/O threads of asynchronous state that busy time leaves
    # out. None when not measured.
    cpu_cores_used: float | None = None

    @property
    def jvm_cpu_cores(self) -> float | None:
        """`cpu_cores_used` where it is a number: a reading of inf or NaN measures nothing
        (taken for the JVMs' CPU, it would leave the tasks no share of theirs)."""
        used = self.cpu_cores_used
        return used if used is not None and math.isfinite(used) else None

    def missing(self, graph: JobGraph) -> tuple[str, ...]:
        """Vertex ids of `graph` this observation has no metrics for."""
        return tuple(v.id for v in graph.vertices if v.id not in self.vertices)


def estimate_mean_from_quantiles(quantiles: Mapping[float, float]) -> float | None:
    """Mean of a distribution from a few of its quantiles (Flink summaries have no _sum).

    Integrates the quantile function piecewise-linearly; below the lowest quantile
    the lowest value is used, above the highest the highest. Flink exports
    0.5..0.999, so this is close to, and never far above, the true mean.
    """
    points = sorted((q, v) for q, v in quantiles.items() if 0.0 <= q <= 1.0 and math.isfinite(v))
    if not points:
        return None
    total = points[0][0] * points[0][1]
    for (q0, v0), (q1, v1) in itertools.pairwise(points):
        total += (q1 - q0) * (v0 + v1) / 2.0
    total += (1.0 - points[-1][0]) * points[-1][1]
    return total
