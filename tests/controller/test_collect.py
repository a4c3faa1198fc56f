"""collect() against a real Prometheus scraping the golden Flink 1.20.5 exposition."""

from __future__ import annotations

import re
import time
from collections import defaultdict

import pytest
from prometheus_client.parser import text_string_to_metric_families

from controller.adapters.prometheus import (
    PART_LABEL,
    Collected,
    MetricsUnavailable,
    Prometheus,
    collect,
    operator_ids,
)
from policies.model import Edge, JobGraph, ShipStrategy, Vertex, estimate_mean_from_quantiles

from .conftest import (
    HIT_RATE,
    LONELY_JOB,
    LONELY_TASK,
    MISS_RATE,
    SAMPLES,
    Exporter,
    lonely_job,
    wait_for,
)
from .promproc import PrometheusProcess

JID = "cf36d4c97f3d593e608a9d13dd79ec51"
SOURCE = "855ea4d5a8f6a78f8e07cce575669ad4"
COUNTER = "a54a21bf9142a9afd43421e4154b1409"
WINDOW, RESOLUTION = 8.0, 1.0


def golden_graph(extra: tuple[Vertex, ...] = ()) -> JobGraph:
    return JobGraph(
        vertices=(Vertex(SOURCE, "source", 128, 2), Vertex(COUNTER, "counter", 128, 2), *extra),
        edges=(Edge(SOURCE, COUNTER, ShipStrategy.HASH),),
    )


def golden_samples(name: str = "prom-scrape.txt") -> dict[str, list[tuple[dict[str, str], float]]]:
    by_name: dict[str, list[tuple[dict[str, str], float]]] = defaultdict(list)
    for family in text_string_to_metric_families((SAMPLES / name).read_text()):
        for s in family.samples:
            by_name[s.name].append((s.labels, s.value))
    return by_name


def per_task(samples: list[tuple[dict[str, str], float]], how: str) -> dict[str, float]:
    groups: dict[str, list[float]] = defaultdict(list)
    for labels, value in samples:
        groups[labels["task_id"]].append(value)
    agg = {"sum": sum, "max": max, "avg": lambda xs: sum(xs) / len(xs)}[how]
    return {task: agg(values) for task, values in groups.items()}  # type: ignore[operator]


@pytest.fixture(scope="module")
def source(prometheus: PrometheusProcess, exporter: Exporter) -> Prometheus:
    client = Prometheus(prometheus.url)
    # rate() needs its 15 s range filled before the window's first point.
    # From Prometheus' first scrape, not the exporter's start: a slow start under load
    # would leave the window's first points short.
    since = max(exporter.started, prometheus.ready_at)
    wait_for(lambda: time.time() - since > 15 + WINDOW + 2, 60, "a full window")
    return client


def observe(source: Prometheus, graph: JobGraph, job_id: str = JID) -> Collected:
    result = collect(source, graph, job_id, time.time(), WINDOW, RESOLUTION)
    assert isinstance(result, Collected), result
    return result


def test_golden_observation(source: Prometheus) -> None:
    collected = observe(source, golden_graph())
    obs = collected.observation
    golden = golden_samples()
    busy = golden["flink_taskmanager_job_task_busyTimeMsPerSecond"]
    rates_in = per_task(golden["flink_taskmanager_job_task_numRecordsInPerSecond"], "sum")
    rates_out = per_task(golden["flink_taskmanager_job_task_numRecordsOutPerSecond"], "sum")
    pending = per_task(golden["flink_taskmanager_job_task_operator_pendingRecords"], "sum")

    counter, src = obs.vertices[COUNTER], obs.vertices[SOURCE]
    assert counter.busy_ms_per_s == pytest.approx(per_task(busy, "avg")[COUNTER])
    assert counter.busy_ms_per_s_max == pytest.approx(1000.0)
    # The busiest subtask's records in, from the per-subtask numRecordsInPerSecond.
    assert counter.records_in_per_s_max == pytest.approx(
        per_task(golden["flink_taskmanager_job_task_numRecordsInPerSecond"], "max")[COUNTER])
    assert src.backpressured_ms_per_s == pytest.approx(1000.0)
    assert counter.records_in_per_s == pytest.approx(rates_in[COUNTER])
    assert src.records_out_per_s == pytest.approx(rates_out[SOURCE])
    assert src.pending_records == pytest.approx(pending[SOURCE])
    assert src.pending_records_growth_per_s == pytest.approx(0.0)

    # Two subtasks each counting HIT_RATE/s, one of them resetting as after a restart.
    assert counter.cache_hits_per_s == pytest.approx(2 * HIT_RATE, rel=0.1)
    assert counter.cache_misses_per_s == pytest.approx(2 * MISS_RATE, rel=0.1)
    assert counter.cache_hit_rate == pytest.approx(HIT_RATE / (HIT_RATE + MISS_RATE), abs=0.02)
    assert counter.has_state_backend_metrics
    assert not src.has_state_backend_metrics and src.cache_hit_rate is None

    # Every column family repeats the slot's cache size: max, not sum.
    capacity = golden["flink_taskmanager_job_task_operator_count_rocksdb_block_cache_capacity"]
    assert collected.cache_capacity_bytes == {COUNTER: pytest.approx(capacity[0][1])}
    # Each column family holds its own data: the state size sums them over all subtasks.
    live = [v for name, samples in golden.items()
            if name.endswith("_rocksdb_estimate_live_data_size")
            for labels, v in samples if labels["task_id"] == COUNTER]
    assert live and counter.state_bytes == pytest.approx(sum(live))
    assert src.state_bytes is None

    quantiles: dict[float, list[float]] = defaultdict(list)
    for name, samples in golden.items():
        if re.fullmatch(r"flink_taskmanager_job_task_operator_state_name_\w+Latency", name):
            for labels, value in samples:
                quantiles[float(labels["quantile"])].append(value)
    mean = estimate_mean_from_quantiles({q: sum(v) / len(v) for q, v in quantiles.items()})
    assert counter.state_latency_ns == pytest.approx(mean)
    assert src.state_latency_ns is None


def test_column_family_as_variable(source: Prometheus) -> None:
    golden = golden_samples("prom-scrape-column-family-as-variable.txt")
    busy = golden["flink_taskmanager_job_task_busyTimeMsPerSecond"]
    job_id = busy[0][0]["job_id"]
    tasks = sorted({labels["task_id"] for labels, _ in busy})
    graph = JobGraph(tuple(Vertex(t, t, 128, 2) for t in tasks))
    collected = observe(source, graph, job_id)
    capacity = golden[
        "flink_taskmanager_job_task_operator_column_family_rocksdb_block_cache_capacity"
    ]
    stateful = {labels["task_id"] for labels, _ in capacity}
    assert collected.cache_capacity_bytes == {
        t: pytest.approx(max(v for labels, v in capacity if labels["task_id"] == t))
        for t in stateful
    }
    for t in tasks:
        assert collected.observation.vertices[t].has_state_backend_metrics == (t in stateful)


def test_one_vertex_without_metrics_makes_all_unavailable(source: Prometheus) -> None:
    ghost = Vertex("0" * 32, "ghost", 128, 1)
    result = collect(source, golden_graph((ghost,)), JID, time.time(), WINDOW, RESOLUTION)
    assert isinstance(result, MetricsUnavailable)
    assert "ghost" in result.reason and "no busyTimeMsPerSecond series" in result.reason


def test_stale_series_are_reported(source: Prometheus, exporter: Exporter) -> None:
    graph = JobGraph((Vertex(LONELY_TASK, "lonely", 8, 1),))
    fresh = collect(source, graph, LONELY_JOB, time.time(), 20.0, RESOLUTION)
    assert isinstance(fresh, Collected), fresh
    exporter.bodies["/dynamic"] = lambda: ""  # the exporter stops reporting the job
    results: list[Collected | MetricsUnavailable] = []

    def unavailable() -> bool:
        results.append(collect(source, graph, LONELY_JOB, time.time(), 20.0, RESOLUTION))
        return isinstance(results[-1], MetricsUnavailable)

    # The stale limit is 7 s here; the window (20 s) still holds older samples, so the
    # first refusal must be for staleness, not for an empty window.
    wait_for(unavailable, 30, "the lonely job's metrics to turn stale")
    result = results[-1]
    assert isinstance(result, MetricsUnavailable)
    assert "lonely" in result.reason and "stale" in result.reason, result.reason


def test_prometheus_unreachable() -> None:
    result = collect(Prometheus("http://127.0.0.1:9", timeout_s=1), golden_graph(), JID,
                     time.time(), WINDOW, RESOLUTION)
    assert isinstance(result, MetricsUnavailable) and "unreachable" in result.reason


def test_operator_ids_of_each_chain(source: Prometheus) -> None:
    chains = operator_ids(source, JID, time.time())
    assert chains == {
        SOURCE: tuple(sorted((SOURCE, "eb8adfa29a499c04cb21f456def833f2"))),
        COUNTER: tuple(sorted((COUNTER, "944a180b15f418fe526e0a41072d55d4"))),
    }


class Alternating:
    """A MetricsSource whose two subtasks per vertex take turns at 900 and 100 (busy ms/s,
    records/s); every whole-vertex signal is flat and fresh."""

    def query_range(self, query: str, start: float, end: float, step: float) -> list[dict]:
        # The collector asks for every signal at once (combined_range): answer each part.
        return [{**series, "metric": {**series["metric"], PART_LABEL: name}}
                for expr, name in re.findall(
                    rf'label_replace\((.*?), "{PART_LABEL}", "(\w+)", "", ""\)', query)
                for series in self.one(expr, start, end, step)]

    def one(self, query: str, start: float, end: float, step: float) -> list[dict]:
        times = [start + i * step for i in range(int((end - start) / step) + 1)]
        if "subtask_index" in query:
            return [{"metric": {"task_id": t, "subtask_index": str(i)},
                     "values": [[x, str(900.0 if (n + i) % 2 else 100.0)]
                                for n, x in enumerate(times)]}
                    for t in (SOURCE, COUNTER) for i in (0, 1)]
        fresh = "timestamp(" in query  # the sample times: each point sampled just now
        return [{"metric": {"task_id": t},
                 "values": [[x, str(x if fresh else 500.0)] for x in times]}
                for t in (SOURCE, COUNTER)]

    def query(self, query: str, time: float) -> list[dict]:
        return []


def test_the_busiest_subtask_is_the_max_of_window_means() -> None:
    """Two subtasks equally busy over the window, each ahead at every other step: the
    mean of each step's max would read 900 (and call noise skew); the busiest mean is 500."""
    result = collect(Alternating(), golden_graph(), JID, 1_000.0, WINDOW, RESOLUTION)
    assert isinstance(result, Collected), result
    counter = result.observation.vertices[COUNTER]
    assert counter.busy_ms_per_s_max == pytest.approx(500.0, rel=0.1)
    assert counter.records_in_per_s_max == pytest.approx(500.0, rel=0.1)


def test_a_twin_hot_key_through_prometheus(source: Prometheus, exporter: Exporter) -> None:
    """The twin's exposition (per-subtask series, Flink's names and labels) through a real
    Prometheus: the busiest subtask's busyness and records in are the twin's, and the hot
    key is named from them."""
    from policies import skew
    from policies.spec import CpuScaling
    from simulator.flink_format import DeployedJob, Scrape, add_job_metrics
    from simulator.model import Noise
    from simulator.twin import Twin

    from .test_skewed import keyed_job

    model = keyed_job({"kind": "zipf", "s": 1.4}, 50)
    # Noise on measurements only: no gaps, stale series or pauses while the twin stands still.
    model = model.model_copy(update={"noise": Noise.off().model_copy(update={
        "sample_sd": 0.02, "key_groups": True})})
    twin = Twin(model, seed=0)
    twin.advance(30)  # the twin stands still from here: every scrape shows this tick
    job = DeployedJob("ns", "hot", "a1" * 16, "hot", 0, 4, 2, 4.0, 2048.0, 0)

    def body() -> str:
        scrape = Scrape()
        add_job_metrics(scrape, job, twin, int(time.time() * 1000))
        return scrape.render()

    started = time.time()
    exporter.bodies["/dynamic"] = body
    try:
        wait_for(lambda: time.time() - started > WINDOW + 3, 30, "a window of the twin")
        graph = twin.job_graph()
        result = collect(source, graph, job.job_id, time.time(), WINDOW, RESOLUTION)
    finally:
        exporter.bodies["/dynamic"] = lonely_job
    assert isinstance(result, Collected), result
    count = next(v.id for v in graph.vertices if v.name == "Count")
    got = result.observation.vertices[count]
    subtasks = twin.last_tick().vertices[count].subtasks  # type: ignore[union-attr]
    assert got.busy_ms_per_s_max == pytest.approx(max(s.busy for s in subtasks), rel=0.05)
    assert got.records_in_per_s_max == pytest.approx(max(s.records_in for s in subtasks),
                                                     rel=0.05)
    assert got.records_in_per_s == pytest.approx(sum(s.records_in for s in subtasks), rel=0.05)
    [finding] = skew.detect(graph, result.observation, CpuScaling())
    assert finding.vertex_id == count and finding.from_records and finding.saturated
