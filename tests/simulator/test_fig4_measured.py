"""The twin's cost model against real Flink + RocksDB on this machine.

bench/rocksdb_fig4.sh measured one keyed RocksDB operator (Figure 4 at small
scale) into bench/results/rocksdb-fig4.json; bench/calibrate_fig4.py fitted the
twin's RocksDB parameters to it (bench/results/rocksdb-fig4-fit.json). These tests
hold the model to those measurements: if perf.py changes, the fitted model must
still explain them, or the fit must be redone and reviewed.
"""

from __future__ import annotations

import json
import math

import pytest

from bench.calibrate_fig4 import FIT, MEASURED, bench_operator, log_errors, predict
from simulator.model import RocksDB
from simulator.perf import task_cost


@pytest.fixture(scope="module")
def data():
    return json.loads(MEASURED.read_text()), json.loads(FIT.read_text())


def runs_of(measured, workload, p):
    """The measured runs of one workload at parallelism p, by growing managed memory."""
    return sorted((r for r in measured["runs"]
                   if r["workload"] == workload and r["parallelism"] == p),
                  key=lambda r: r["managedMemoryMb"])


def rates(measured, fit, workload, p, source):
    runs = runs_of(measured, workload, p)
    if source == "measured":
        return [r["recordsPerSecond"] for r in runs]
    return [predict(measured, fit, r) for r in runs]


def test_the_fitted_twin_explains_the_measurements(data):
    measured, fit = data
    errors = log_errors(measured, fit)
    rms = math.sqrt(sum(e * e for e in errors) / len(errors))
    assert rms == pytest.approx(fit["rmsLogError"], abs=1e-3)  # the model did not drift
    assert rms < math.log(1.8)
    assert all(abs(e) < math.log(4) for e in errors)
    assert sum(abs(e) < math.log(2) for e in errors) >= 0.75 * len(errors)


@pytest.mark.parametrize("source", ["measured", "twin"])
@pytest.mark.parametrize("workload", ["read", "update"])
def test_reads_fall_off_a_cliff_without_memory(data, source, workload):
    measured, fit = data
    for p in (1, 2):
        series = rates(measured, fit, workload, p, source)
        assert series[-1] > 10 * series[0], (p, series)


@pytest.mark.parametrize("source", ["measured", "twin"])
def test_writes_only_care_about_the_memtable(data, source):
    measured, fit = data
    series = rates(measured, fit, "write", 1, source)  # 32, 64, 128, 256 MB
    assert series[2] > 2 * series[0]  # 8 MB -> 32 MB MemTable
    assert 0.8 < series[3] / series[2] < 1.25  # 32 MB -> 64 MB: flat


def test_hit_ratios_grow_with_memory_and_writes_see_none(data):
    measured, fit = data
    rocksdb = RocksDB(**fit["rocksdb"])
    for p in (1, 2):
        runs = runs_of(measured, "read", p)
        ours = [task_cost(bench_operator(measured, "read", 1.0), p, r["managedMemoryMb"],
                          rocksdb, forst=None).hit_rate for r in runs]
        assert runs[-1]["cacheHitRatio"] > runs[0]["cacheHitRatio"]
        assert ours == sorted(ours) and ours[-1] > ours[0]  # type: ignore[operator]
    for r in measured["runs"]:
        if r["workload"] == "write":
            twin = task_cost(bench_operator(measured, "write", 1.0), r["parallelism"],
                             r["managedMemoryMb"], rocksdb, forst=None)
            assert r["cacheHitRatio"] < 0.01 and twin.hit_rate == 0.0


def test_fitted_costs_are_physically_ordered(data):
    _, fit = data
    r = fit["rocksdb"]
    assert r["index_miss_us"] > r["miss_us"] > r["hit_us"]
