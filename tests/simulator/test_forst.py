"""The twin's ForSt engine (Flink 2.x, asynchronous state): its cost tiers, the metrics it
exposes under Flink 2.2's names (tests/golden/flink-2.2), and its step costs, which are the
policy layer's measured ForSt costs (policies/restart_cost.py)."""

from __future__ import annotations

import json
import tempfile
from collections import defaultdict
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from bench.calibrate_forst import FIT as FORST_FIT
from controller.adapters.twin import TwinDeployments, flink_deployment
from controller.realize import configured_engine
from policies.model import VertexConfig
from policies.restart_cost import (
    MEASURED,
    MEASURED_FORST,
    Enactment,
    Engine,
    expected_downtime_s,
)
from simulator.flink_format import DeployedJob, Scrape, add_job_metrics
from simulator.model import ForSt, JobModel, ModelError, Noise, Reconfiguration, load_model
from simulator.perf import task_cost
from simulator.twin import Twin
from tests.golden import FLINK_2_2


def quiet(model: JobModel) -> JobModel:
    return model.model_copy(update={"noise": Noise.off()})


def session(model: JobModel) -> str:
    return model.operator("q11-session").vertex_id


def test_a_model_says_its_engine_and_the_builtins_on_forst_differ_from_theirs_only_there():
    forst, rocksdb = load_model("q11-forst"), load_model("q11")
    assert forst.engine == Engine.FORST and forst.forst_engine is not None
    assert rocksdb.engine == Engine.ROCKSDB and rocksdb.forst_engine is None
    assert forst.operators == rocksdb.operators and forst.load == rocksdb.load
    assert forst.forst.file_cache_mib == 1024
    with pytest.raises(ModelError, match="engine"):
        load_model_text("engine: leveldb")


def load_model_text(extra: str) -> JobModel:
    text = ("name: x\nload: {pattern: constant, rate: 10}\n" + extra
            + "\noperators:\n  - {uid: s, name: s, cpu_us: 1}\n")
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "x.yaml"
        path.write_text(text)
        return load_model(path)


def test_a_miss_reads_the_file_cache_then_the_remote_store():
    model = load_model("read-forst")
    op = model.operator("bench-read")
    forst = model.forst
    forst = forst.model_copy(update={"file_cache_mib": 128.0})  # 32 MiB of 125 MB a task
    dear = forst.model_copy(update={"remote_miss_us": 10 * forst.file_hit_us})
    small = task_cost(op, 8, 32.0, model.rocksdb, forst=dear)
    assert small.file_hits_per_record is not None and small.file_misses_per_record is not None
    assert small.file_hits_per_record > 0 and small.file_misses_per_record > 0
    # A larger file cache turns remote reads into local ones: the same memory goes further.
    bigger = dear.model_copy(update={"file_cache_mib": 8 * dear.file_cache_mib})
    more_files = task_cost(op, 8, 32.0, model.rocksdb, forst=bigger)
    assert more_files.capacity > small.capacity
    assert more_files.hit_rate == pytest.approx(small.hit_rate)  # the block cache is the same
    # Dearer remote reads make the same miss rate costlier: a steeper cache cliff.
    cheap = task_cost(op, 8, 32.0, model.rocksdb, forst=forst)
    dear_full = task_cost(op, 8, 158.0 * 64, model.rocksdb, forst=dear)
    cheap_full = task_cost(op, 8, 158.0 * 64, model.rocksdb, forst=forst)
    assert dear_full.capacity / small.capacity > cheap_full.capacity / cheap.capacity


def test_asynchronous_state_costs_cpu_and_reports_only_the_task_thread():
    model = load_model("read-forst")
    op = model.operator("bench-read")
    cost = task_cost(op, 8, 158.0, model.rocksdb, forst=model.forst)
    assert cost.get_latency_ns is None and cost.put_latency_ns is None  # no latency metric
    assert 0 < cost.thread_share < 1
    no_io = model.forst.model_copy(update={"file_hit_us": 0, "remote_miss_us": 0})
    hits_only = task_cost(op, 8, 158.0 * 64, model.rocksdb.model_copy(update={"hit_us": 0}),
                          forst=no_io)
    assert hits_only.us_per_record == pytest.approx(
        op.cpu_us * (1 + model.forst.async_cpu_overhead))


def test_busy_time_is_under_reported_until_the_task_saturates():
    model = quiet(load_model("q11-forst"))
    vid = session(model)
    # Enough tasks: not saturated; the reported busyness is the task thread's share.
    twin = Twin(model, configuration={vid: VertexConfig(24, 2)})
    twin.advance(60)
    m = twin.observe(60).vertices[vid]
    cost = twin.cost(vid)
    true_busy = m.records_in_per_s / 24 / cost.capacity
    assert m.busyness == pytest.approx(true_busy * cost.thread_share, rel=0.02)
    assert m.busyness < true_busy
    # The policies' true processing rate is optimistic by the thread's share, as on Flink 2.2.
    assert m.true_processing_rate == pytest.approx(24 * cost.capacity / cost.thread_share,
                                                   rel=0.03)
    assert m.state_latency_ns is None and m.has_state_backend_metrics
    assert m.file_cache_hits_per_s is not None and m.file_cache_misses_per_s is not None
    assert m.async_in_flight_records is not None
    assert 0 < m.async_in_flight_records < model.forst.in_flight_limit
    # Too few tasks: saturated, the in-flight buffer full, and the task thread blocks on it.
    slow = Twin(model, configuration={vid: VertexConfig(2, 0)})
    slow.advance(60)
    s = slow.observe(60).vertices[vid]
    assert s.busy_ms_per_s > 990
    assert s.async_in_flight_records == model.forst.in_flight_limit
    assert s.true_processing_rate == pytest.approx(2 * slow.cost(vid).capacity, rel=0.03)


def test_in_flight_records_match_the_golden_asynchronous_counter():
    """Flink 2.2's async counter (tests/golden/flink-2.2) held 551 records in flight per
    subtask on average (409 and 693) at 1,587 records/s: mostly records waiting for their
    batch (execution.async-state.active-buffer-size 1000, active-buffer-timeout 1 s: Flink
    2.2's defaults)."""
    store = json.loads((FLINK_2_2 / "subtasks-metrics-async.json").read_text())
    by_id = {m["id"]: m for m in store}
    rate = by_id["numRecordsInPerSecond"]["avg"]
    measured = by_id["async-counter.asyncStateProcessing.numInFlightRecords"]["avg"]
    model = quiet(load_model("q11-forst"))
    twin = Twin(model)
    cost = twin.cost(session(model))
    assert twin._in_flight(cost, rate, saturated=False) == pytest.approx(measured, rel=0.2)


def scraped(twin: Twin) -> dict[str, tuple[str, str, set[frozenset[str]]]]:
    """name -> (type, help, label-name sets) of a twin scrape."""
    job = DeployedJob("ns", twin.model.name, "j" * 32, twin.model.name, 0, 4, 1, 4.0, 2048.0, 0)
    scrape = Scrape()
    add_job_metrics(scrape, job, twin, 0)
    return families(scrape.render())


def families(text: str) -> dict[str, tuple[str, str, set[frozenset[str]]]]:
    out: dict[str, tuple[str, str, set[frozenset[str]]]] = {}
    labels: dict[str, set[frozenset[str]]] = defaultdict(set)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels[family.name].add(frozenset(sample.labels) - {"quantile"})
        out[family.name] = (family.type, family.documentation, labels[family.name])
    return out


def test_the_twin_speaks_flink_2_2s_forst_metric_names():
    golden = families((FLINK_2_2 / "prom-scrape.txt").read_text())
    model = quiet(load_model("q11-forst"))
    twin = Twin(model, configuration={session(model): VertexConfig(24, 1)})
    twin.advance(30)
    ours = scraped(twin)
    forst_names = [n for n in ours if "forst" in n or "asyncState" in n]
    assert sorted(forst_names) == [
        "flink_taskmanager_job_task_operator_asyncStateProcessing_numInFlightRecords",
        "flink_taskmanager_job_task_operator_forst_fileCache_hit",
        "flink_taskmanager_job_task_operator_forst_fileCache_miss",
    ]
    for name in [*forst_names, "flink_taskmanager_job_task_operator_rocksdb_block_cache_hit",
                 "flink_taskmanager_job_task_operator_rocksdb_block_cache_miss",
                 "flink_taskmanager_job_task_busyTimeMsPerSecond"]:
        kind, help_text, label_sets = ours[name]
        assert (kind, help_text) == golden[name][:2], name
        assert label_sets <= golden[name][2], name
    # Asynchronous state has no latency histogram, on Flink 2.2 as in the twin.
    assert not any("Latency" in n for n in ours)
    # The same job on RocksDB has latency and no ForSt series.
    rocksdb = Twin(quiet(load_model("q11")), configuration={session(model): VertexConfig(24, 1)})
    rocksdb.advance(30)
    theirs = scraped(rocksdb)
    assert any("Latency" in n for n in theirs) and not any("forst" in n for n in theirs)


def test_the_twins_jvm_cpu_counts_what_busy_time_leaves_out_on_forst():
    """Each TaskManager's Status.JVM.CPU.Time (golden names and labels) counts all of its
    tasks' work: on ForSt more than their busy time (the I/O threads'), on RocksDB the
    same. The window's view (`Observation.cpu_cores_used`) is its rate, summed."""
    golden = families((FLINK_2_2 / "prom-scrape.txt").read_text())
    for name, more in (("q11-forst", True), ("q11", False)):
        model = quiet(load_model(name))
        twin = Twin(model, configuration={session(model): VertexConfig(24, 1)})
        twin.advance(120)
        obs = twin.observe(60)
        busy = sum(twin.configuration[vid].parallelism * m.busyness
                   for vid, m in obs.vertices.items())
        assert obs.cpu_cores_used is not None
        assert (obs.cpu_cores_used > 1.2 * busy) if more else (
            obs.cpu_cores_used == pytest.approx(busy, rel=0.1))
        first = cpu_time_s(twin)
        twin.advance(60)
        assert (cpu_time_s(twin) - first) / 60 == pytest.approx(obs.cpu_cores_used, rel=0.05)
        kind, help_text, labels = scraped(twin)["flink_taskmanager_Status_JVM_CPU_Time"]
        assert (kind, help_text) == golden["flink_taskmanager_Status_JVM_CPU_Time"][:2]
        assert labels <= golden["flink_taskmanager_Status_JVM_CPU_Time"][2]


def cpu_time_s(twin: Twin) -> float:
    """The TaskManagers' JVM CPU time summed, in seconds, as the reporter shows it."""
    job = DeployedJob("ns", twin.model.name, "j" * 32, twin.model.name, 0, 4, 1, 4.0, 2048.0, 0)
    scrape = Scrape()
    add_job_metrics(scrape, job, twin, 0)
    return sum(s.value for f in text_string_to_metric_families(scrape.render())
               if f.name == "flink_taskmanager_Status_JVM_CPU_Time" for s in f.samples) / 1e9


def test_a_forst_step_costs_what_restart_cost_measured_on_forst():
    """One source of truth: the twin prices a step with policies/restart_cost.py's costs for
    its engine; on ForSt a last-state restart reads no state, so its downtime does not grow
    with the state, while a savepoint's still does."""
    forst, rocksdb = load_model("q11-forst"), load_model("q11")
    assert dict(Reconfiguration().costs(Engine.FORST)) == dict(MEASURED_FORST)
    assert dict(Reconfiguration().costs(Engine.ROCKSDB)) == dict(MEASURED)
    for kind in Enactment:
        assert Twin(forst).downtime_s(kind) == pytest.approx(
            expected_downtime_s(kind, forst.state_bytes, MEASURED_FORST), abs=0.05)
    small = forst.model_copy(update={"operators": tuple(
        o.model_copy(update={"state": o.state.model_copy(update={"keys": 1000})})
        if o.state else o for o in forst.operators)})
    assert small.state_bytes < forst.state_bytes / 100
    assert Twin(small).downtime_s(Enactment.LAST_STATE) == Twin(forst).downtime_s(
        Enactment.LAST_STATE)
    assert Twin(small).downtime_s(Enactment.SAVEPOINT) < Twin(forst).downtime_s(
        Enactment.SAVEPOINT)
    assert Twin(rocksdb).downtime_s(Enactment.LAST_STATE) > Twin(small).downtime_s(
        Enactment.LAST_STATE) + rocksdb.state_bytes / 1e6 / 50
    # A job's own term overrides the engine's; the engine's composition stays.
    own = Reconfiguration(fixed_s=10).costs(Engine.FORST)
    assert own[Enactment.LAST_STATE].downtime_s(forst.state_bytes) == pytest.approx(
        10 + MEASURED_FORST[Enactment.LAST_STATE].fixed_s
        - MEASURED_FORST[Enactment.SAVEPOINT].fixed_s)


def test_the_twins_forst_deployment_restarts_from_its_last_checkpoint():
    model = load_model("q11-forst")
    deployment = flink_deployment(model, "q11", "ns")
    conf = deployment["spec"]["flinkConfiguration"]
    assert conf["state.backend.type"] == "forst"
    resizable = flink_deployment(model, "q11", "ns", resizable=True)
    assert configured_engine(resizable["spec"]["flinkConfiguration"]) == Engine.FORST
    assert conf["state.backend.forst.memory.write-buffer-ratio"] == "0.5"
    assert "state.backend.rocksdb.memory.write-buffer-ratio" not in conf
    assert deployment["spec"]["job"]["upgradeMode"] == "last-state"
    twin = Twin(model)
    port = TwinDeployments(twin, deployment)
    port.apply("ns", "q11", {"spec": {"flinkConfiguration": {}}})
    assert twin.last_step == (Enactment.LAST_STATE, pytest.approx(
        MEASURED_FORST[Enactment.LAST_STATE].fixed_s))
    rocksdb = flink_deployment(load_model("q11"), "q11", "ns")
    assert rocksdb["spec"]["job"]["upgradeMode"] == "savepoint"


def test_forst_defaults_are_the_fit():
    fit = json.loads(FORST_FIT.read_text())
    defaults = ForSt()
    for key, value in fit["forst"].items():
        assert getattr(defaults, key) == pytest.approx(value, rel=0.01), key
    assert defaults.async_cpu_overhead == pytest.approx(fit["asyncCpuOverheadMeasured"],
                                                        rel=0.01)
