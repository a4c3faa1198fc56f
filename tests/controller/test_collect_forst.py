"""collect() against a real Prometheus scraping the golden Flink 2.2 exposition of a job on
ForSt (tests/golden/flink-2.2/README.md): one counter with asynchronous state access (State V2)
and one with the synchronous API, both on ForSt with a local file cache."""

from __future__ import annotations

import json
import time
from collections import defaultdict
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from controller.adapters.prometheus import Collected, Prometheus, collect
from controller.realize import (
    enactment_of,
    engine,
    priced_state_bytes,
    step_costs,
    unhonoured_memory,
)
from policies.model import Edge, JobGraph, ShipStrategy, Vertex
from policies.restart_cost import (
    MEASURED,
    MEASURED_FORST,
    Enactment,
    RestartFacts,
    expected_downtime_s,
)
from tests.golden import FLINK_2_2

from .conftest import (
    FILE_HIT_RATE,
    FILE_MISS_RATE,
    HIT_RATE,
    JVM_CPU_CORES,
    MISS_RATE,
    Exporter,
    wait_for,
)
from .promproc import PrometheusProcess

RECORDING = json.loads((FLINK_2_2 / "recording.json").read_text())
JID = RECORDING["jobId"]
VERTICES = RECORDING["vertices"]
SOURCE = VERTICES["Source: gen -> key-map"]
ASYNC = VERTICES["async-counter -> async-sink: Writer"]
SYNC = VERTICES["sync-counter -> sync-sink: Writer"]
WINDOW, RESOLUTION = 8.0, 1.0
MIB = 2**20


def graph() -> JobGraph:
    return JobGraph(
        vertices=(
            Vertex(SOURCE, "source", 128, 1),
            Vertex(ASYNC, "async-counter", 128, 2,
                   operator_uids=("async-counter", "async-sink")),
            Vertex(SYNC, "sync-counter", 128, 2, operator_uids=("sync-counter", "sync-sink")),
        ),
        edges=(Edge(SOURCE, ASYNC, ShipStrategy.HASH), Edge(SOURCE, SYNC, ShipStrategy.HASH)),
    )


def samples() -> dict[str, list[tuple[dict[str, str], float]]]:
    by_name: dict[str, list[tuple[dict[str, str], float]]] = defaultdict(list)
    for family in text_string_to_metric_families((FLINK_2_2 / "prom-scrape.txt").read_text()):
        for s in family.samples:
            by_name[s.name].append((s.labels, s.value))
    return by_name


def of(name: str, task: str) -> list[float]:
    return [v for labels, v in samples()["flink_taskmanager_job_task_" + name]
            if labels["task_id"] == task]


@pytest.fixture(scope="module")
def observed(prometheus: PrometheusProcess, exporter: Exporter) -> Collected:
    # rate() needs its 15 s range filled before the window's first point.
    # From Prometheus' first scrape, not the exporter's start: a slow start under load
    # would leave the window's first points short.
    since = max(exporter.started, prometheus.ready_at)
    wait_for(lambda: time.time() - since > 15 + WINDOW + 2, 60, "a full window")
    result = collect(Prometheus(prometheus.url), graph(), JID, time.time(), WINDOW, RESOLUTION)
    assert isinstance(result, Collected), result
    return result


def test_forst_keeps_rocksdb_block_cache_names(observed: Collected) -> None:
    vertices = observed.observation.vertices
    for task in (ASYNC, SYNC):
        v = vertices[task]
        # Two subtasks each counting HIT_RATE/s, one of them resetting as after a restart
        # (rate() loses part of a reset's step at the range's edge: the ratio is exact).
        assert v.cache_hits_per_s == pytest.approx(2 * HIT_RATE, rel=0.25)
        assert v.cache_misses_per_s == pytest.approx(2 * MISS_RATE, rel=0.25)
        assert v.cache_hit_rate == pytest.approx(HIT_RATE / (HIT_RATE + MISS_RATE), abs=0.03)
        assert v.has_state_backend_metrics
        assert v.busy_ms_per_s == pytest.approx(sum(of("busyTimeMsPerSecond", task)) / 2)
    assert not vertices[SOURCE].has_state_backend_metrics
    assert vertices[SOURCE].cache_hit_rate is None


def test_file_cache_only_behind_asynchronous_state(observed: Collected) -> None:
    v = observed.observation.vertices
    assert v[ASYNC].file_cache_hits_per_s == pytest.approx(2 * FILE_HIT_RATE, rel=0.25)
    assert v[ASYNC].file_cache_misses_per_s == pytest.approx(2 * FILE_MISS_RATE, rel=0.25)
    assert v[ASYNC].file_cache_hit_rate == pytest.approx(
        FILE_HIT_RATE / (FILE_HIT_RATE + FILE_MISS_RATE), abs=0.03)
    # Flink 2.2's synchronous ForSt backend keeps its files local: no file cache.
    assert v[SYNC].file_cache_hit_rate is None and v[SOURCE].file_cache_hit_rate is None


def test_asynchronous_state_has_in_flight_records_and_no_latency(observed: Collected) -> None:
    v = observed.observation.vertices
    in_flight = of("operator_asyncStateProcessing_numInFlightRecords", ASYNC)
    assert len(in_flight) == 2
    assert v[ASYNC].async_in_flight_records == pytest.approx(sum(in_flight) / 2)
    assert v[ASYNC].state_latency_ns is None  # latency tracking wraps synchronous state only
    assert v[SYNC].async_in_flight_records is None
    assert v[SYNC].state_latency_ns is not None and v[SYNC].state_latency_ns > 0


def test_the_jobs_taskmanagers_cpu_is_their_jvms_cpu_time_rate(observed: Collected) -> None:
    """Status.JVM.CPU.Time (ns, a gauge that counts up) of the TaskManagers the job's tasks
    report from (their scrape target and tm_id): its rate in cores. A namesake pod of
    another target (tests/controller/conftest.py, /namesake) is not the job's."""
    assert observed.observation.cpu_cores_used == pytest.approx(JVM_CPU_CORES, rel=0.1)


def test_managed_memory_sizes_forsts_block_cache(observed: Collected) -> None:
    """Measured: capacity = managed · (3 − r)/3 with ForSt's default r = 0.5, per operator."""
    managed = RECORDING["managedMemoryMiB"]
    capacity = observed.cache_capacity_bytes
    assert capacity[ASYNC] == pytest.approx(managed["async-counter"] * MIB * 2.5 / 3, abs=1)
    assert capacity[SYNC] == pytest.approx(managed["sync-counter"] * MIB * 2.5 / 3, abs=1)
    assert SOURCE not in capacity


def deployment(conf: dict[str, str], async_mb: int) -> dict[str, object]:
    resources = {"async-counter": {"cpuCores": 0.5, "taskHeapMb": 64, "managedMemoryMb": async_mb},
                 "sync-counter": {"cpuCores": 0.5, "taskHeapMb": 64,
                                  "managedMemoryMb": RECORDING["managedMemoryMiB"]["sync-counter"]}}
    return {"spec": {"flinkConfiguration": {
        **conf, "hybridscaler.operator-resources": json.dumps(resources)}}}


def test_unhonoured_memory_reads_forsts_write_buffer_ratio(observed: Collected) -> None:
    forst = {"state.backend.type": "forst"}
    honoured = deployment(forst, RECORDING["managedMemoryMiB"]["async-counter"])
    assert unhonoured_memory(honoured, graph(), observed.cache_capacity_bytes) == []
    # Twice the memory written as Flink gave: reported.
    assert len(unhonoured_memory(deployment(forst, 128), graph(),
                                 observed.cache_capacity_bytes)) == 1
    # ForSt's own ratio counts, RocksDB's does not: r = 0.95 makes 64 MiB a 43 MiB cache.
    skewed = {**forst, "state.backend.forst.memory.write-buffer-ratio": "0.95"}
    assert len(unhonoured_memory(deployment(skewed, 64), graph(),
                                 observed.cache_capacity_bytes)) == 2
    ignored = {**forst, "state.backend.rocksdb.memory.write-buffer-ratio": "0.95"}
    assert unhonoured_memory(deployment(ignored, 64), graph(), observed.cache_capacity_bytes) == []


def test_a_forst_deployment_is_costed_with_forsts_measured_steps() -> None:
    def with_backend(backend: str) -> dict[str, object]:
        return {"spec": {"job": {"upgradeMode": "last-state"},
                         "flinkConfiguration": {"state.backend.type": backend}}}

    assert step_costs(with_backend("forst")) is MEASURED_FORST
    assert step_costs(with_backend("rocksdb")) is MEASURED
    big = 10e9  # a last-state restart reads this back on RocksDB, nothing on ForSt

    def restart_downtime_s(deployment: dict[str, Any]) -> float:
        # What the policy layer prices a restart at, before it knows the step's fields.
        return RestartFacts(enactment_of(deployment, [], big), big, (),
                            engine(deployment)).downtime_s

    assert restart_downtime_s(with_backend("forst")) == expected_downtime_s(
        Enactment.LAST_STATE, 0.0, MEASURED_FORST)
    assert restart_downtime_s(with_backend("rocksdb")) > restart_downtime_s(
        with_backend("forst")) + 100


def test_a_forst_savepoint_is_priced_with_the_live_state_not_the_checkpoint() -> None:
    forst = {"spec": {"flinkConfiguration": {"state.backend.type": "forst"}}}
    rocksdb = {"spec": {"flinkConfiguration": {"state.backend.type": "rocksdb"}}}
    # Measured: a ForSt checkpoint of 429 MB of asynchronous state was 19 KB.
    assert priced_state_bytes(forst, 19e3, 429e6) == 429e6
    assert priced_state_bytes(forst, 19e3, None) == 19e3
    assert priced_state_bytes(forst, None, 429e6) is None  # no checkpoint: stays unknown
    assert priced_state_bytes(rocksdb, 19e3, 429e6) == 19e3
