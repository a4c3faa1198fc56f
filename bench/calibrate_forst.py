"""Fit the twin's ForSt engine to real Flink 2.2 + ForSt measurements.

Reads bench/results/forst-fig4.json and forst-fig4-1gb-cache.json (bench/forst_fig4.sh, run
alone on the machine: one keyed operator, uniform keys, read/write/update on asynchronous
state and read on synchronous state, several managed-memory sizes, a local directory as the
remote store behind a 32 MB file cache, and asynchronous reads and updates behind 1 GiB) and
searches the terms that best explain the measured records/s (least squares on log rates:
random search, then a local refinement; seeded, so reruns give the same fit). Writes
bench/results/forst-fig4-fit.json, which tests/simulator/test_forst_measured.py checks the
model against.

What is fitted, to the records/s and the block cache's hit ratios together: ForSt's
file-cache and remote read costs, its I/O concurrency, the cache footprint and index/filter
share, the MemTable terms (ForSt's writes behave unlike RocksDB 1.20's here) and each
workload's CPU. A block-cache hit and how much dearer an index/filter read is than a data
block's come from the RocksDB fit (bench/results/rocksdb-fig4-fit.json): ForSt is a RocksDB
fork. The asynchronous model's CPU overhead is not fitted but measured: the JVM's CPU per
record of asynchronous against synchronous reads when every read hits the block cache.
Synchronous runs keep their files local (docs/flink-2.md): the twin prices them as RocksDB
whose misses cost a local file read.

    .venv/bin/python -m bench.calibrate_forst
"""

from __future__ import annotations

import functools
import json
import math
import random
import statistics
from pathlib import Path
from typing import Any

from bench.calibrate_fig4 import FIT as ROCKSDB_FIT
from bench.calibrate_fig4 import bench_operator, fit_search, log_uniform
from simulator.model import ForSt, RocksDB
from simulator.perf import TaskCost, task_cost

ROOT = Path(__file__).resolve().parent.parent
# Two runs of bench/forst_fig4.sh on an idle machine, one per file-cache size: a 32 MB cache
# (most misses read the "remote" directory) and a 1 GiB one (every miss is local).
MEASURED = (ROOT / "bench" / "results" / "forst-fig4.json",
            ROOT / "bench" / "results" / "forst-fig4-1gb-cache.json")
FIT = ROOT / "bench" / "results" / "forst-fig4-fit.json"
WORKLOADS = ("read", "write", "update")
# Search ranges (log-uniform) of the fitted terms.
FORST_RANGES = {"file_hit_us": (1.0, 500.0), "remote_miss_us": (1.0, 3000.0),
                "io_parallelism": (1.0, 32.0)}
ROCKSDB_RANGES = {"put_us": (0.5, 60.0), "small_memtable_penalty": (0.01, 3.0),
                  "misses_per_put": (0.01, 10.0), "footprint_factor": (0.5, 4.0),
                  "index_fraction": (0.005, 0.1), "new_file_misses": (0.01, 3.0)}
# Taken from the RocksDB fit as they are.
SHARED = ("hit_us",)
# The block cache's hit ratio counts as much as the log of the rate: both are measured, and
# the ratio pins the cache's footprint, which the rates alone leave loose.
HIT_WEIGHT = 1.0


def load_measured() -> dict[str, Any]:
    """The measured runs of every MEASURED file, each run carrying its file's file-cache
    limit (the files must agree on the job: keys and value size)."""
    files = [json.loads(path.read_text()) for path in MEASURED]
    job = {(f["keys"], f["valueBytes"]) for f in files}
    if len(job) != 1:
        raise ValueError(f"the measured files ran different jobs: {sorted(job)}")
    return {**files[0], "fileCacheLimit": None,
            "runs": [{**run, "fileCacheLimit": f["fileCacheLimit"]}
                     for f in files for run in f["runs"]]}


def file_cache_mib(run: dict[str, Any]) -> float:
    """The run's state.backend.forst.cache.size-based-limit ("32mb") in MiB."""
    text = str(run["fileCacheLimit"]).lower().removesuffix("b")
    scale = {"k": 1 / 1024, "m": 1.0, "g": 1024.0}[text[-1]]
    return float(text[:-1]) * scale


def async_cpu_overhead(measured: dict[str, Any]) -> float:
    """Extra CPU per record of asynchronous state, measured: the JVM's CPU per record of the
    asynchronous read against the synchronous one at the largest memory (all hits, so
    neither waits for I/O)."""
    def at_top(mode: str) -> float:
        runs = [r for r in measured["runs"] if r["mode"] == mode and r["workload"] == "read"]
        top = max(r["managedMemoryMb"] for r in runs)
        return statistics.fmean(float(r["cpuUsPerRecord"]) for r in runs
                                if r["managedMemoryMb"] == top)
    return float(at_top("async") / at_top("sync") - 1.0)


@functools.cache
def rocksdb_fit() -> dict[str, float]:
    """The RocksDB fit's terms (read once: the search prices thousands of fits)."""
    return dict(json.loads(ROCKSDB_FIT.read_text())["rocksdb"])


def engines(measured: dict[str, Any], fit: dict[str, Any]) -> tuple[RocksDB, ForSt, RocksDB]:
    """(ForSt's LSM terms, ForSt's own, the synchronous runs' RocksDB) under the fit.

    The benchmark's TaskManager runs one stateful task: it has the whole file cache."""
    base = rocksdb_fit()
    index_scale = base["index_miss_us"] / base["miss_us"]
    forst = ForSt(stateful_tasks_per_taskmanager=1,
                  async_cpu_overhead=async_cpu_overhead(measured), **fit["forst"])
    terms = {**{k: base[k] for k in SHARED}, **fit["rocksdb"]}
    lsm = RocksDB(**terms, miss_us=base["miss_us"], index_miss_us=base["index_miss_us"])
    # Synchronous state on ForSt reads its local files: a miss is a local file read.
    local = RocksDB(**terms, miss_us=forst.file_hit_us,
                    index_miss_us=forst.file_hit_us * index_scale)
    return lsm, forst, local


def costs(measured: dict[str, Any], fit: dict[str, Any],
          runs: list[dict[str, Any]] | None = None) -> list[TaskCost]:
    """The twin's cost of each measured run's task (or of `runs`) under the fit."""
    lsm, forst, local = engines(measured, fit)
    out = []
    for run in measured["runs"] if runs is None else runs:
        op = bench_operator(measured, run["workload"], fit["cpu_us"][run["workload"]])
        if run["mode"] == "async":
            files = forst.model_copy(update={"file_cache_mib": file_cache_mib(run)})
            out.append(task_cost(op, run["parallelism"], run["managedMemoryMb"], lsm,
                                 forst=files))
        else:
            out.append(task_cost(op, run["parallelism"], run["managedMemoryMb"], local,
                                 forst=None))
    return out


def cost(measured: dict[str, Any], fit: dict[str, Any], run: dict[str, Any]) -> TaskCost:
    """The twin's cost of one measured run's task under the fit."""
    return costs(measured, fit, [run])[0]


def rate(run: dict[str, Any], cost: TaskCost) -> float:
    """Records/s of one run's tasks at this cost (p = 1: one task)."""
    return float(run["parallelism"]) * cost.capacity


def predict(measured: dict[str, Any], fit: dict[str, Any], run: dict[str, Any]) -> float:
    """Records/s the twin predicts for one measured run."""
    return rate(run, cost(measured, fit, run))


def log_errors(measured: dict[str, Any], fit: dict[str, Any],
               priced: list[TaskCost] | None = None) -> list[float]:
    """log(predicted/measured) records/s per run; `priced`: costs(measured, fit), if known."""
    priced = costs(measured, fit) if priced is None else priced
    return [math.log(rate(r, c) / r["recordsPerSecond"])
            for r, c in zip(measured["runs"], priced, strict=True)]


def rms(errors: list[float]) -> float:
    return math.sqrt(sum(e * e for e in errors) / len(errors))


def hit_errors(measured: dict[str, Any], fit: dict[str, Any],
               priced: list[TaskCost] | None = None) -> list[float]:
    """Twin minus measured block-cache hit ratio, for the runs that read."""
    priced = costs(measured, fit) if priced is None else priced
    return [(c.hit_rate or 0.0) - r["cacheHitRatio"]
            for r, c in zip(measured["runs"], priced, strict=True) if r["workload"] != "write"]


def score(measured: dict[str, Any], fit: dict[str, Any]) -> float:
    priced = costs(measured, fit)
    return math.sqrt(rms(log_errors(measured, fit, priced)) ** 2
                     + HIT_WEIGHT * rms(hit_errors(measured, fit, priced)) ** 2)


def search(measured: dict[str, Any], samples: int = 6000, refine: int = 4000,
           seed: int = 1) -> dict[str, Any]:
    rng = random.Random(seed)

    def ordered(fit: dict[str, Any]) -> dict[str, Any]:
        """The remote store is behind the file cache: a read there is no cheaper."""
        f = fit["forst"]
        f["remote_miss_us"] = max(f["remote_miss_us"], f["file_hit_us"])
        f["io_parallelism"] = max(1.0, f["io_parallelism"])
        return fit

    def candidate() -> dict[str, Any]:
        return ordered({
            "forst": {k: log_uniform(rng, *r) for k, r in FORST_RANGES.items()},
            "rocksdb": {k: log_uniform(rng, *r) for k, r in ROCKSDB_RANGES.items()},
            "cpu_us": {w: log_uniform(rng, 2.0, 150.0) for w in WORKLOADS}})

    def perturb(trial: dict[str, Any]) -> dict[str, Any]:
        for group in ("forst", "rocksdb", "cpu_us"):
            for k in trial[group]:
                trial[group][k] *= math.exp(rng.gauss(0.0, 0.1))
        return ordered(trial)

    return fit_search(lambda f: score(measured, f), candidate, perturb, samples, refine)


def main() -> None:
    measured = load_measured()
    fit = search(measured)
    rate_rms, hit_rms = rms(log_errors(measured, fit)), rms(hit_errors(measured, fit))
    doc = {
        "description": "twin ForSt terms fitted to the measured files (bench/calibrate_forst.py); "
                       "rms of log(predicted/measured); the shared LSM terms are "
                       "rocksdb-fig4-fit.json's",
        "measured": [path.name for path in MEASURED],
        "rmsLogError": round(rate_rms, 4),
        "rmsHitRatioError": round(hit_rms, 4),
        "asyncCpuOverheadMeasured": round(async_cpu_overhead(measured), 4),
        "forst": {k: round(v, 4) for k, v in fit["forst"].items()},
        "rocksdb": {k: round(v, 4) for k, v in fit["rocksdb"].items()},
        "cpu_us": {k: round(v, 3) for k, v in fit["cpu_us"].items()},
    }
    FIT.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"rms log error {rate_rms:.3f} (typical factor {math.exp(rate_rms):.2f}), "
          f"hit ratio rms {hit_rms:.3f}; wrote {FIT}")
    print(f"{'mode':5} {'workload':8} {'MB':>4} {'files':>6} {'measured':>9} {'twin':>9} "
          f"{'θ meas':>6} {'θ twin':>6} {'file θ meas':>11} {'file θ twin':>11}")
    for r in measured["runs"]:
        c = cost(measured, doc, r)
        file_lookups = (c.file_hits_per_record or 0.0) + (c.file_misses_per_record or 0.0)
        file_twin = ("-" if c.file_hits_per_record is None or not file_lookups
                     else f"{c.file_hits_per_record / file_lookups:.2f}")
        file_meas = r["fileCacheHitRatio"]
        print(f"{r['mode']:5} {r['workload']:8} {r['managedMemoryMb']:>4} "
              f"{r['fileCacheLimit']:>6} "
              f"{r['recordsPerSecond']:>9,.0f} {predict(measured, doc, r):>9,.0f} "
              f"{r['cacheHitRatio']:>6.2f} {c.hit_rate or 0:>6.2f} "
              f"{'-' if file_meas is None else f'{file_meas:.2f}':>11} {file_twin:>11}")


if __name__ == "__main__":
    main()
