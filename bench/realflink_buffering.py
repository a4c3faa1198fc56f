"""Hot keys on real Flink: StateJob's counter with Zipf keys, with and without flink-plugin's
PreAggregation (in-memory pre-aggregation per key before the keyBy, flushed on size, time
and barriers), as local JobManager/TaskManager JVMs (e2e/realflink.py; issue 22).

    python -m bench.realflink_buffering [--keys 10000] [--exponent 1.2] [--seeds 1 2 3]
        [--flush-records 10000] [--flush-ms 100] [--out FILE.json]

Each run offers far more than the counter takes (the source then runs as fast as the job
lets it), waits `--warmup` seconds, and measures the records the counter verified per
second over `--measure` seconds (`countsVerified`: a record counts only if its key's
counter is exactly what the key schedule says). A buffered run is then stopped with a
savepoint and restored, and must go on with 0 `countMismatches`: nothing buffered was lost
or counted twice. Printed and written as JSON, never asserted (2 shared cores).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from bench.realflink_common import (
    Keys,
    ManagedMb,
    Out,
    Rate,
    counter_samples,
    start,
    state_job,
    write,
)
from e2e import realflink


def _counter(deployment: realflink.Deployment) -> dict[str, float] | None:
    """The counter's countsVerified and countMismatches over its subtasks (None: not yet)."""
    samples = counter_samples(deployment)
    out: dict[str, float] = {}
    for name, value in samples or []:
        for counter in ("countsVerified", "countMismatches"):
            if name == f"flink_taskmanager_job_task_operator_{counter}":
                out[counter] = out.get(counter, 0.0) + value
    return out if "countsVerified" in out else None


def _wait(engine: realflink.RealFlink, key: tuple[str, str], timeout_s: float = 600
          ) -> dict[str, float]:
    """Until the job runs and its counter reports."""
    deadline = time.monotonic() + timeout_s
    while True:
        if engine.status(*key)["state"] == "RUNNING":
            seen = _counter(engine.deployments[key])
            if seen is not None:
                return seen
        if time.monotonic() > deadline:
            raise TimeoutError(f"{key}: not running: {engine.status(*key)}")
        time.sleep(1)


def _rate(engine: realflink.RealFlink, key: tuple[str, str], seconds: float
          ) -> tuple[float, float]:
    """Records verified per second over `seconds`, and the mismatches at the end."""
    first = _wait(engine, key)
    start = time.monotonic()
    time.sleep(seconds)
    last = _wait(engine, key)
    elapsed = time.monotonic() - start
    return ((last["countsVerified"] - first["countsVerified"]) / elapsed,
            last.get("countMismatches", 0.0))


def run_one(engine: realflink.RealFlink, name: str, conf: dict[str, str],
            task_manager: dict[str, Any], warmup: float, measure: float, restore: bool
            ) -> dict[str, Any]:
    key = ("bench", name)
    engine.add_job(*key, conf, task_manager)
    try:
        _wait(engine, key)
        time.sleep(warmup)
        rate, mismatches = _rate(engine, key, measure)
        row: dict[str, Any] = {"recordsPerS": round(rate, 1), "countMismatches": mismatches}
        print(json.dumps({"run": name, **row}), flush=True)
        if restore:
            engine.reconfigure(*key, {**conf, "hybridscaler.job.max-lag-s": "11"}, task_manager)
            time.sleep(2)
            after = _wait(engine, key)
            time.sleep(warmup)
            rate_after, mismatches_after = _rate(engine, key, measure)
            step = engine.status(*key)["steps"][-1]
            row.update({"restoredFrom": bool(step.get("restoredFrom")),
                        "recordsPerSAfterRestore": round(rate_after, 1),
                        "countMismatchesAfterRestore": mismatches_after,
                        "countsVerifiedAtFirstReport": after["countsVerified"]})
            print(json.dumps({"run": name, **row}), flush=True)
        return row
    finally:
        deployment = engine.deployments.pop(key, None)
        if deployment is not None:  # gone before the next run starts: it measures alone
            deployment.close(savepoint=False)


def main(
    keys: Keys = 10_000,
    exponent: Annotated[float, typer.Option(help="Zipf exponent s")] = 1.2,
    seeds: Annotated[list[int] | None, typer.Option(help="key-schedule seeds")] = None,
    rate: Rate = 400_000.0,
    managed_mb: ManagedMb = 64,
    flush_records: Annotated[int, typer.Option(help="PreAggregation's maxRecords")] = 10_000,
    flush_ms: Annotated[int, typer.Option(help="PreAggregation's maxDelay, ms")] = 100,
    warmup: Annotated[float, typer.Option(help="seconds before measuring")] = 30,
    measure: Annotated[float, typer.Option(help="seconds measured")] = 30,
    out: Out = Path("bench/results/realflink-buffering.json"),
) -> None:
    """Throughput with and without pre-aggregation on a hot-key job (Zipf keys), and its
    exactness."""
    seeds = seeds or [1, 2, 3]
    engine, flink = start("realflink-buffering-")
    rows: list[dict[str, Any]] = []
    try:
        for seed in seeds:
            for buffered in (False, True):
                zipf = {"hybridscaler.job.key-distribution": "zipf",
                        "hybridscaler.job.zipf-exponent": str(exponent),
                        "hybridscaler.job.key-seed": str(seed),
                        "hybridscaler.job.max-lag-s": "10",
                        "hybridscaler.job.pre-aggregate-records":
                            str(flush_records if buffered else 0),
                        "hybridscaler.job.pre-aggregate-delay-ms": str(flush_ms)}
                conf, task_manager = state_job(("bench", "x"), managed_mb=managed_mb,
                                               keys=keys, rate=rate, extra=zipf)
                name = f"s{seed}-{'buffered' if buffered else 'plain'}"
                row = run_one(engine, name, conf, task_manager, warmup, measure,
                              restore=buffered)
                rows.append({"seed": seed, "buffered": buffered, **row})
    finally:
        engine.stop()
    plain = [r["recordsPerS"] for r in rows if not r["buffered"]]
    buffered_rates = [r["recordsPerS"] for r in rows if r["buffered"]]
    speedups = [b / p for p, b in zip(plain, buffered_rates, strict=False) if p > 0]
    print("\n| seed | records/s plain | records/s buffered | speed-up | mismatches "
          "(buffered, after restore) |\n|---|---|---|---|---|")
    for (p, b), seed in zip(zip(plain, buffered_rates, strict=False), seeds, strict=False):
        r = next(x for x in rows if x["seed"] == seed and x["buffered"])
        print(f"| {seed} | {p:,.0f} | {b:,.0f} | {b / p if p else float('nan'):.1f}x | "
              f"{r['countMismatches']:.0f}, {r.get('countMismatchesAfterRestore', 'n/a')} |")
    doc = {
        "description": (
            f"StateJob's counter on real Flink {flink} (local JVMs, 2 shared cores, RocksDB), "
            f"Zipf keys, with and without flink-plugin's PreAggregation before the keyBy; "
            f"recordsPerS: records the counter verified exactly per second"),
        "command": "python -m bench.realflink_buffering " + " ".join(sys.argv[1:]),
        "keys": keys, "exponent": exponent, "rate": rate, "managedMb": managed_mb,
        "flushRecords": flush_records, "flushMs": flush_ms, "warmupS": warmup,
        "measureS": measure, "cores": os.cpu_count(), "loadAverage": os.getloadavg(),
        "runs": rows,
        "speedup": {"median": round(statistics.median(speedups), 2) if speedups else None,
                    "min": round(min(speedups), 2) if speedups else None,
                    "max": round(max(speedups), 2) if speedups else None},
    }
    write(out, doc, indent=1)


if __name__ == "__main__":
    typer.run(main)
