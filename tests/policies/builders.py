"""Small constructors for job graphs and observations, so tests read like the scenario."""

from __future__ import annotations

import itertools

from policies.model import Edge, JobGraph, Observation, ShipStrategy, Vertex, VertexMetrics

NOW = 1_000.0


def vertex(
    vid: str, p: int = 2, level: int | None = 0, *, max_p: int = 128, uids: tuple[str, ...] = ()
) -> Vertex:
    return Vertex(id=vid, name=vid.capitalize(), max_parallelism=max_p, parallelism=p,
                  memory_level=level, operator_uids=uids)


def chain(*vertices: Vertex, ship: ShipStrategy = ShipStrategy.FORWARD) -> JobGraph:
    edges = tuple(Edge(a.id, b.id, ship) for a, b in itertools.pairwise(vertices))
    return JobGraph(vertices=vertices, edges=edges)


def metrics(
    busy: float,
    rate_in: float,
    rate_out: float | None = None,
    *,
    hits: float | None = None,
    misses: float | None = None,
    latency_ns: float | None = None,
    stateful: bool | None = None,
    lag: float | None = None,
    lag_growth: float | None = None,
) -> VertexMetrics:
    """busy in ms/s; a stateful vertex is one with any cache or latency metric unless told."""
    if stateful is None:
        stateful = hits is not None or misses is not None or latency_ns is not None
    return VertexMetrics(
        busy_ms_per_s=busy,
        busy_ms_per_s_max=busy,
        backpressured_ms_per_s=0.0,
        records_in_per_s=rate_in,
        records_out_per_s=rate_in if rate_out is None else rate_out,
        pending_records=lag,
        pending_records_growth_per_s=lag_growth,
        cache_hits_per_s=hits,
        cache_misses_per_s=misses,
        state_latency_ns=latency_ns,
        has_state_backend_metrics=stateful,
    )


def source(busy: float, rate_out: float, **kw: float) -> VertexMetrics:
    """A source task: no records in (as Flink reports it), output rate only."""
    return metrics(busy, 0.0, rate_out, **kw)  # type: ignore[arg-type]


def observe(now: float = NOW, **per_vertex: VertexMetrics) -> Observation:
    return Observation(time=now, window_s=120.0, vertices=per_vertex)
