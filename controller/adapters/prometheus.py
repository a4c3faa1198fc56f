"""The metrics port on Prometheus: range queries over the window into an `Observation`.

All or nothing: when any signal the core needs is missing or stale for any vertex,
the result is `MetricsUnavailable` with the reason, never a half observation, so the
core never decides on a partial picture.
"""

from __future__ import annotations

import copy
import logging
import math
import ssl
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from controller.adapters import dial, outbound
from controller.adapters.promql import JobQueries, job_queries
from controller.ports import Collected, MetricsError, MetricsUnavailable
from policies.model import JobGraph, Observation, VertexMetrics, estimate_mean_from_quantiles

log = logging.getLogger(__name__)
# An answer past this is the endpoint's fault (reason MetricsAnswerTooLarge): a window
# of every signal of a 100-vertex job at 4 tasks a vertex is well under 1 MiB.
MAX_ANSWER_BYTES = 8 * 2**20
Series = Mapping[str, Any]  # {"metric": {label: value}, "values": [[ts, "value"], ...]}


class MetricsSource(Protocol):
    def query_range(self, query: str, start: float, end: float, step: float) -> Sequence[Series]:
        ...

    def query(self, query: str, time: float) -> Sequence[Series]:
        ...


class Prometheus:
    """`MetricsSource` over Prometheus' HTTP API; every failure becomes `MetricsError`.

    Requests are built from the parsed `Url` (controller.adapters.dial), under one
    deadline for the whole call (from the pass's budget, controller.adapters.outbound)
    and a size limit on the answer. TLS is verified (against `ca_file` when given); no
    retries, no redirects, no proxies. An endpoint that timed out is not dialled again
    until its cool-down ends. Errors name the endpoint by `field` (the user's own
    field), never by what answered, and never quote the answer: a tenant's URL must
    not turn the controller into a proxy that reads back what it got.
    """

    def __init__(self, url: dial.Url | str, timeout_s: float = 10.0, ca_file: str | None = None,
                 token_file: str | None = None, breakers: outbound.Breakers | None = None,
                 field: str = "spec.metrics.prometheusUrl",
                 max_bytes: int = MAX_ANSWER_BYTES,
                 authorization: str | None = None) -> None:
        self.url = url if isinstance(url, dial.Url) else dial.parse_url(url, field)
        self.timeout_s, self.field, self.max_bytes = timeout_s, field, max_bytes
        self.endpoint = self.url.endpoint
        self.breakers = breakers or outbound.BREAKERS
        self.token_file = token_file
        self.authorization = authorization  # the Authorization header, when one is sent
        self.tls = ssl.create_default_context(cafile=ca_file) if ca_file else None

    def authorized(self, header: str | None) -> Prometheus:
        """This client sending `header` as Authorization (a policy's Secret, read this
        pass): a shallow copy, so the cached client and its TLS context are shared."""
        if header is None:
            return self
        other = copy.copy(self)
        other.authorization = header
        return other

    def query_range(self, query: str, start: float, end: float, step: float) -> Sequence[Series]:
        return self._call("/api/v1/query_range", {"query": query, "start": _num(start),
                                                  "end": _num(end), "step": _num(step)})

    def query(self, query: str, time: float) -> Sequence[Series]:
        return self._call("/api/v1/query", {"query": query, "time": _num(time)})

    def _headers(self) -> dict[str, str]:
        if self.token_file:  # re-read per request: a rotated token is picked up
            return {"Authorization": "Bearer " + Path(self.token_file).read_text().strip()}
        return {"Authorization": self.authorization} if self.authorization else {}

    def _call(self, path: str, params: dict[str, str]) -> Sequence[Series]:
        answer = outbound.get_json(self.url, path, params, failed=MetricsError,
                                   breakers=self.breakers, default_s=self.timeout_s,
                                   field=self.field, what="Prometheus",
                                   max_bytes=self.max_bytes, headers=self._headers(),
                                   tls=self.tls)
        try:
            result = answer["data"]["result"] if answer.get("status") == "success" else None
        except (KeyError, TypeError, AttributeError):
            result = None
        if not isinstance(result, list):
            raise MetricsError(f"Prometheus ({self.field}) answered something that is not a "
                               f"Prometheus API response", "malformed")
        return result


def _num(value: float) -> str:
    return repr(float(value))


def _points(series: Series) -> list[tuple[float, float]]:
    return [
        (float(t), float(v)) for t, v in series.get("values", []) if math.isfinite(float(v))
    ]


def _by_task(result: Sequence[Series]) -> dict[str, list[tuple[float, float]]]:
    return {
        str(s["metric"].get("task_id", "")): pts
        for s in result
        if (pts := _points(s))
    }


def _mean(points: Sequence[tuple[float, float]]) -> float:
    return sum(v for _, v in points) / len(points)


def _busiest_subtask(result: Sequence[Series]) -> dict[str, float]:
    """Per task_id, the highest window mean among its subtasks' series (max of means)."""
    top: dict[str, float] = {}
    for s in result:
        if pts := _points(s):
            task = str(s["metric"].get("task_id", ""))
            top[task] = max(top.get(task, -math.inf), _mean(pts))
    return top


def _freshness_problem(
    sample_times: Sequence[tuple[float, float]], start: float, end: float, stale_after: float
) -> str | None:
    """Why a vertex's busyness series cannot be trusted over [start, end], or None."""
    if not sample_times:
        return "no busyTimeMsPerSecond series"
    fresh = [t for t, sampled in sample_times if t - sampled <= stale_after]
    last_eval = sample_times[-1][0]
    if end - last_eval > stale_after or last_eval - sample_times[-1][1] > stale_after:
        age = end - sample_times[-1][1]
        return f"busyTimeMsPerSecond is stale (last sample {age:.0f}s old)"
    if not fresh or fresh[0] - start > (end - start) / 2:
        return "busyTimeMsPerSecond covers less than half of the window"
    return None


# The window's signals: one series per task_id, one per subtask (the collector takes the
# max of their means), and the state latency per quantile. All in one range query.
TASK_SIGNALS = ("busy_avg", "busy_sample_time", "backpressure", "records_in", "records_out",
                "pending", "cache_hits", "cache_misses", "cache_capacity", "state_bytes",
                "file_cache_hits", "file_cache_misses", "async_in_flight")
SUBTASK_SIGNALS = ("busy_max", "records_in_max")
WINDOW_SIGNALS = (*TASK_SIGNALS, *SUBTASK_SIGNALS, "state_latency", "cpu_used")
# The label that tells the parts of a combined query apart (no Flink metric carries it).
PART_LABEL = "hybridscaler_part"


def combined_range(source: MetricsSource, queries: Mapping[str, str], start: float,
                   end: float, step: float) -> dict[str, list[Series]]:
    """Several range queries as one request: each part labelled with its name and joined
    by `or` (distinct labels, so no part hides another's series), then split apart.

    One round trip instead of one per signal: at 1,000 policies the per-request cost
    (HTTP, JSON, Prometheus' own per-query work) dominated the controller's passes.
    """
    query = " or ".join(f'label_replace({expr}, "{PART_LABEL}", "{name}", "", "")'
                        for name, expr in queries.items())
    parts: dict[str, list[Series]] = {name: [] for name in queries}
    for series in source.query_range(query, start, end, step):
        metric = dict(series.get("metric") or {})
        name = metric.pop(PART_LABEL, None)
        if name in parts:
            parts[name].append({**series, "metric": metric})
    return parts


def collect(
    source: MetricsSource,
    graph: JobGraph,
    job_id: str,
    now: float,
    window_s: float,
    resolution_s: float,
) -> Collected | MetricsUnavailable:
    """Query every signal over [now - window, now] and build one observation, or say why not."""
    q: JobQueries = job_queries(job_id, resolution_s)
    start, step = now - window_s, resolution_s
    try:
        parts = combined_range(source, {name: getattr(q, name) for name in WINDOW_SIGNALS},
                               start, now, step)
    except MetricsError as e:
        return MetricsUnavailable(str(e), e.kind)
    rows = {name: _by_task(parts[name]) for name in TASK_SIGNALS}
    busiest = {name: _busiest_subtask(parts[name]) for name in SUBTASK_SIGNALS}
    latency_rows = parts["state_latency"]
    # Two scrapes plus slack: one lost scrape is tolerated, a stopped exporter is not.
    stale_after = 2 * resolution_s + 5.0
    latency: dict[str, dict[float, float]] = {}
    for s in latency_rows:
        pts = _points(s)
        quantile = s["metric"].get("quantile")
        if pts and quantile is not None:
            task = str(s["metric"].get("task_id", ""))
            latency.setdefault(task, {})[float(quantile)] = _mean(pts)

    problems: list[str] = []
    vertices: dict[str, VertexMetrics] = {}
    for v in graph.vertices:
        why = _freshness_problem(rows["busy_sample_time"].get(v.id, []), start, now, stale_after)
        needed = ("busy_avg", "backpressure", "records_in", "records_out")
        absent = [name for name in needed if v.id not in rows[name]]
        if v.id not in busiest["busy_max"]:
            absent.append("busy_max")
        if why or absent:
            problems.append(f"vertex {v.name!r} ({v.id}): {why or 'no ' + ', '.join(absent)}")
            continue
        pending = rows["pending"].get(v.id)
        hits, misses = rows["cache_hits"].get(v.id), rows["cache_misses"].get(v.id)
        state_bytes = rows["state_bytes"].get(v.id)
        file_hits = rows["file_cache_hits"].get(v.id)
        file_misses = rows["file_cache_misses"].get(v.id)
        in_flight = rows["async_in_flight"].get(v.id)
        vertices[v.id] = VertexMetrics(
            busy_ms_per_s=_mean(rows["busy_avg"][v.id]),
            busy_ms_per_s_max=busiest["busy_max"][v.id],
            backpressured_ms_per_s=_mean(rows["backpressure"][v.id]),
            records_in_per_s=_mean(rows["records_in"][v.id]),
            records_out_per_s=_mean(rows["records_out"][v.id]),
            pending_records=pending[-1][1] if pending else None,
            pending_records_growth_per_s=_growth(pending) if pending else None,
            cache_hits_per_s=_mean(hits) if hits else None,
            cache_misses_per_s=_mean(misses) if misses else None,
            state_latency_ns=estimate_mean_from_quantiles(latency.get(v.id, {})),
            records_in_per_s_max=busiest["records_in_max"].get(v.id),
            has_state_backend_metrics=any(
                v.id in rows[name] for name in ("cache_hits", "cache_misses", "cache_capacity")
            ) or v.id in latency,
            state_bytes=state_bytes[-1][1] if state_bytes else None,
            file_cache_hits_per_s=_mean(file_hits) if file_hits else None,
            file_cache_misses_per_s=_mean(file_misses) if file_misses else None,
            async_in_flight_records=_mean(in_flight) if in_flight else None,
        )
    if problems:
        return MetricsUnavailable("metrics unavailable: " + "; ".join(problems))
    capacity = {vid: _mean(pts) for vid, pts in rows["cache_capacity"].items() if vid in vertices}
    return Collected(Observation(time=now, window_s=window_s, vertices=vertices,
                                 cpu_cores_used=_cpu_used(parts["cpu_used"])),
                     capacity, checkpoint_bytes(source, q, now))


def _cpu_used(result: Sequence[Series]) -> float | None:
    """The job's TaskManagers' CPU over the window (cores); None when not reported (a
    reporter without JVM metrics) or not a sane number (an endpoint may answer anything)."""
    points = [p for s in result for p in _points(s)]
    if not points:
        return None
    cores = _mean(points)
    return cores if 0.0 <= cores < 1e6 else None


def checkpoint_bytes(source: MetricsSource, q: JobQueries, now: float) -> float | None:
    """The last completed checkpoint's full size; None when none completed or unknown (it
    only prices a restart, so a failed query costs no decision)."""
    try:
        rows = source.query(q.checkpoint_size, now)
    except MetricsError:
        return None
    values = [float(r["value"][1]) for r in rows if r.get("value")]
    return values[0] if values and values[0] > 0 else None


def _growth(points: Sequence[tuple[float, float]]) -> float:
    (t0, v0), (t1, v1) = points[0], points[-1]
    return 0.0 if t1 <= t0 else (v1 - v0) / (t1 - t0)


def operator_ids(source: MetricsSource, job_id: str, now: float) -> dict[str, tuple[str, ...]]:
    """Per vertex, the operator ids of its chain (to map operator uids; see flink_rest)."""
    result = source.query(job_queries(job_id, 5.0).operator_ids, now)
    chains: dict[str, set[str]] = {}
    for s in result:
        labels = s["metric"]
        chains.setdefault(str(labels.get("task_id", "")), set()).add(str(labels.get("operator_id")))
    return {vid: tuple(sorted(ids)) for vid, ids in chains.items()}


class PrometheusMetrics:
    """The loop's view of one Prometheus: observations and chain operator ids."""

    def __init__(self, source: MetricsSource) -> None:
        self.source = source

    def observe(self, graph: JobGraph, job_id: str, now: float, window_s: float,
                resolution_s: float) -> Collected | MetricsUnavailable:
        return collect(self.source, graph, job_id, now, window_s, resolution_s)

    def operator_ids(self, job_id: str, now: float) -> dict[str, tuple[str, ...]]:
        return operator_ids(self.source, job_id, now)


class RefusedMetrics:
    """The loop's view of a Prometheus the controller may not dial (or whose credentials
    it cannot read, `kind` "credentials"): every read says why."""

    def __init__(self, reason: str, kind: str = "refused") -> None:
        self.reason, self.kind = reason, kind

    def observe(self, graph: JobGraph, job_id: str, now: float, window_s: float,
                resolution_s: float) -> MetricsUnavailable:
        return MetricsUnavailable(self.reason, self.kind)

    def operator_ids(self, job_id: str, now: float) -> dict[str, tuple[str, ...]]:
        raise MetricsError(self.reason, self.kind)
