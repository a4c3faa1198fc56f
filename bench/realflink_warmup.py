"""How a RocksDB block cache warms up after a restore on real Flink (issue 22, cold caches):
the block-cache hit rate, the cache's usage and the counter's throughput, sampled every few
seconds from the moment the restored job is RUNNING, on the repository's StateJob run by
e2e/realflink.py (local JobManager/TaskManager JVMs, no Kubernetes needed).

    python -m bench.realflink_warmup [--keys 100000] [--rate 40000] [--managed-mb 128]
        [--restores 3] [--out FILE.json]
        [--flink 2.2 --state-backend forst --job-class dev.hybridscaler.job.AsyncStateJob]
        (ForSt reports its block cache under RocksDB's metric names)

With `--restores 0` it measures the warm capacity only.

The source offers more than the counter can take (a backlog of `max-lag-s` seconds builds),
so the counter runs saturated and its input rate is its capacity at the cache it has at
that moment. Before the first restore the job runs `--warmup` seconds and the last
`--steady` seconds give the warm reference. Each restore is a savepoint upgrade (what a
reconfiguration step is), the configuration unchanged. Printed and written as JSON (the
twin's refill rate, `rocksdb.fill_mib_per_s` in simulator/model.py, is its median:
docs/simulator.md), never asserted: numbers on 2 shared cores.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from bench.realflink_common import (
    Flink,
    JobClass,
    Keys,
    ManagedMb,
    Out,
    Rate,
    StateBackend,
    counter_samples,
    start,
    state_job,
    wait_running,
    write,
)
from e2e import realflink

STATE = "value"  # VerifyingCounter.STATE: the counter's column family


def _scrape(deployment: realflink.Deployment) -> dict[str, float] | None:
    """The counter's cumulative numbers over its subtasks, or None while not reported."""
    samples = counter_samples(deployment)
    if samples is None:
        return None
    sums = {"records": 0.0, "hits": 0.0, "misses": 0.0, "usage": 0.0, "capacity": 0.0,
            "busy": 0.0, "subtasks": 0.0}
    seen = False
    for name, value in samples:
        if name == "flink_taskmanager_job_task_operator_numRecordsIn":
            sums["records"] += value
            seen = True
        elif name == "flink_taskmanager_job_task_operator_rocksdb_block_cache_hit":
            sums["hits"] += value
        elif name == "flink_taskmanager_job_task_operator_rocksdb_block_cache_miss":
            sums["misses"] += value
        elif name.endswith(f"_{STATE}_rocksdb_block_cache_usage"):
            sums["usage"] += value
        elif name.endswith(f"_{STATE}_rocksdb_block_cache_capacity"):
            sums["capacity"] += value
        elif name == "flink_taskmanager_job_task_busyTimeMsPerSecond":
            sums["busy"] += value
            sums["subtasks"] += 1
    return sums if seen else None


def _series(engine: realflink.RealFlink, key: tuple[str, str], seconds: float,
            every_s: float) -> list[dict[str, Any]]:
    """Samples from now for `seconds`: per interval the hit rate, records/s and busyness."""
    start = time.monotonic()
    rows: list[dict[str, Any]] = []
    last: tuple[float, dict[str, float]] | None = None
    while time.monotonic() - start < seconds:
        now = time.monotonic()
        sample = _scrape(engine.deployments[key])
        if sample is not None:
            if last is not None and now > last[0]:
                dt = now - last[0]
                d = {k: sample[k] - last[1][k] for k in ("records", "hits", "misses")}
                lookups = d["hits"] + d["misses"]
                rows.append({
                    "t": round(now - start, 1),
                    "recordsPerS": round(max(0.0, d["records"]) / dt, 1),
                    "hitRate": round(d["hits"] / lookups, 4) if lookups > 0 else None,
                    "lookupsPerS": round(max(0.0, lookups) / dt, 1),
                    "missesPerS": round(max(0.0, d["misses"]) / dt, 1),
                    "cacheUsageBytes": sample["usage"],
                    "cacheCapacityBytes": sample["capacity"],
                    "busyMsPerS": round(sample["busy"] / max(1.0, sample["subtasks"]), 1),
                })
                print(json.dumps(rows[-1]), flush=True)
            last = (now, sample)
        time.sleep(max(0.0, every_s - (time.monotonic() - now)))
    return rows


def main(
    keys: Keys = 100_000,
    rate: Rate = 40_000.0,
    managed_mb: ManagedMb = 128,
    warmup: Annotated[float, typer.Option(help="seconds before the first restore")] = 150,
    steady: Annotated[float, typer.Option(help="last seconds of it: the warm reference")] = 40,
    after: Annotated[float, typer.Option(help="seconds sampled after each restore")] = 120,
    every: Annotated[float, typer.Option(help="sampling interval, seconds")] = 2.0,
    restores: Annotated[int, typer.Option(help="savepoint restores measured")] = 3,
    out: Out = Path("bench/results/realflink-warmup.json"),
    flink: Flink = realflink.DEFAULT_FLINK,
    state_backend: StateBackend = "rocksdb",
    job_class: JobClass = realflink.DEFAULT_JOB_CLASS,
) -> None:
    """Measure the block cache's warm-up after restores on real Flink (the source offers
    more than the counter takes)."""
    engine, flink = start("realflink-warmup-", None, flink)
    key = ("bench", "warmup")
    conf, task_manager = state_job(key, managed_mb=managed_mb, keys=keys, rate=rate, extra={
        "hybridscaler.job.max-lag-s": "20", "state.backend.type": state_backend,
        realflink.JOB_CLASS_KEY: job_class})
    doc: dict[str, Any] = {}
    try:
        engine.add_job(*key, conf, task_manager)
        wait_running(engine, key, 600)
        time.sleep(max(0.0, warmup - steady))
        reference = _series(engine, key, steady, every)
        runs = []
        for i in range(restores):
            conf = {**conf, "hybridscaler.job.max-lag-s": str(21 + i)}  # a new spec, same job
            engine.reconfigure(*key, conf, task_manager)
            wait_running(engine, key, 600)
            step = engine.status(*key)["steps"][-1]
            print(json.dumps(step), flush=True)
            runs.append({"downtimeS": step.get("downtimeS"),
                         "restoredBytes": step.get("stateBytes"),
                         "series": _series(engine, key, after, every)})
        doc = {
            "description": (
                f"block-cache warm-up of StateJob's counter after savepoint restores on real "
                f"Flink {flink} (local JVMs, 2 shared cores, {state_backend} with managed "
                f"memory, {job_class.rsplit('.', 1)[-1]}); "
                f"t: seconds since every task was RUNNING again; the source offers more than "
                f"the counter takes, so recordsPerS is its capacity at that moment"),
            "command": "python -m bench.realflink_warmup " + " ".join(sys.argv[1:]),
            "flink": flink, "stateBackend": state_backend, "keys": keys, "valueBytes": 1000,
            "rate": rate, "managedMb": managed_mb, "everyS": every, "cores": os.cpu_count(),
            "loadAverage": os.getloadavg(), "warm": reference, "restores": runs,
        }
    finally:
        engine.stop()
    write(out, doc, indent=1)


if __name__ == "__main__":
    typer.run(main)
