"""What a reconfiguration step costs on real Flink (issue 15): downtime and catch-up of a
savepoint upgrade, a last-state upgrade and an in-place rescale (adaptive scheduler), on
the repository's StateJob run by e2e/realflink.py (no Kubernetes needed).

    python -m bench.realflink_steps [--keys 100000] [--rate 1500] [--out FILE.json]
        [--flink 2.2]   (the job module's -P flink-2 build: Flink 2.2)
        [--state-backend forst]   (Flink 2.x's ForSt, a local directory as the remote store)
        [--job-class dev.hybridscaler.job.AsyncStateJob]   (State V2: ForSt's remote mode)

Downtime: from the request until every task of the new job is RUNNING (what the stand-in
reports as the step's `downtimeS`). Catch-up: from then until the source's backlog is
back under one second of arrivals. State size: bytes of the savepoint or checkpoint
restored. Printed and written as JSON, never asserted (numbers on 2 shared cores).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from bench.realflink_common import (
    Flink,
    JobClass,
    JobModule,
    Keys,
    ManagedMb,
    Out,
    Rate,
    StateBackend,
    catch_up,
    operator_sum,
    start,
    state_job,
    wait_running,
    write,
)
from e2e import realflink


def main(
    keys: Keys = 100_000,
    rate: Rate = 1500.0,
    managed_mb: ManagedMb = 256,
    warmup_s: Annotated[float, typer.Option(help="run this long before the first step")] = 90,
    out: Out = Path("bench/results/realflink-steps.json"),
    job_module: JobModule = None,
    flink: Flink = realflink.DEFAULT_FLINK,
    state_backend: StateBackend = "rocksdb",
    job_class: JobClass = realflink.DEFAULT_JOB_CLASS,
) -> None:
    """Measure the three ways a step can be enacted on real Flink."""
    engine, flink = start("realflink-steps-", job_module, flink)
    key = ("bench", "state")
    conf, task_manager = state_job(key, managed_mb=managed_mb, keys=keys, rate=rate, extra={
        "jobmanager.scheduler": "adaptive", "state.backend.type": state_backend,
        realflink.JOB_CLASS_KEY: job_class})
    results: list[dict[str, Any]] = []
    try:
        engine.add_job(*key, conf, task_manager)
        wait_running(engine, key, 600)
        print(json.dumps({**engine.status(*key)["steps"][-1], "catchUpS": None}), flush=True)
        time.sleep(warmup_s)  # the first round writes every key once
        counter = "0da08f51eaa85fc298e176a139b3649a"  # Murmur3 of uid "counter"
        for kind, change in (
            ("savepoint", {"hybridscaler.job.max-lag-s": "31"}),
            ("last-state", {"hybridscaler.job.max-lag-s": "32"}),
            ("in-place", {realflink.OVERRIDES_KEY: f"{counter}:2"}),
        ):
            engine.upgrade_modes[key] = "last-state" if kind == "last-state" else "savepoint"
            conf = {**conf, **change}
            started = time.monotonic()
            engine.reconfigure(*key, conf, task_manager, in_place=kind == "in-place")
            wait_running(engine, key, 600)
            step = engine.status(*key)["steps"][-1]
            downtime = step["downtimeS"] if kind != "in-place" else round(
                time.monotonic() - started, 1)
            caught_up = catch_up(engine, key, rate)
            # StateJob's own check: records that found their key's counter wrong (lost state).
            mismatches = operator_sum(engine.deployments[key], "countMismatches")
            row = {**step, "kind": kind, "downtimeS": downtime, "catchUpS": caught_up,
                   "countMismatches": mismatches}
            print(json.dumps(row), flush=True)
            results.append(row)
            time.sleep(30)
    finally:
        engine.stop()
    doc = {"description": f"step costs of StateJob on real Flink {flink} (local JVMs, 2 shared "
                          "cores); downtime: request to all tasks RUNNING; catch-up: then "
                          "until the backlog is under 1 s of arrivals",
           "keys": keys, "valueBytes": 1000, "rate": rate, "managedMb": managed_mb,
           "stateBackend": state_backend, "jobClass": job_class,
           "cores": os.cpu_count(), "loadAverage": os.getloadavg(), "steps": results}
    write(out, doc)


if __name__ == "__main__":
    typer.run(main)
