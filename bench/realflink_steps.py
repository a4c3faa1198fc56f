"""What a reconfiguration step costs on real Flink (issue 15): downtime and catch-up of a
savepoint upgrade, a last-state upgrade and an in-place rescale (adaptive scheduler), on
the repository's StateJob run by e2e/realflink.py (no Kubernetes needed).

    python -m bench.realflink_steps [--keys 100000] [--rate 1500] [--out FILE.json]
        [--job-module DIR]   (a copy of flink-job/ built with -P flink-2: Flink 2.x)
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
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any

import requests
import typer

from e2e import realflink


def _operator_sum(deployment: realflink.Deployment, metric: str) -> float | None:
    """The sum of one operator metric over the TaskManagers' reporters (None: unreadable)."""
    cluster = deployment.cluster
    if cluster is None:
        return None
    total = None
    for port in cluster.metrics_ports[1:]:
        try:
            text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        except requests.RequestException:
            return None
        for line in text.splitlines():
            if line.startswith(f"flink_taskmanager_job_task_operator_{metric}{{"):
                total = (total or 0.0) + float(line.rsplit(" ", 1)[1])
    return total


def _pending(deployment: realflink.Deployment) -> float | None:
    return _operator_sum(deployment, "pendingRecords")


def _wait_running(engine: realflink.RealFlink, key: tuple[str, str], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    time.sleep(1)
    while engine.status(*key)["state"] != "RUNNING":
        if time.monotonic() > deadline:
            raise TimeoutError(f"not RUNNING: {engine.status(*key)}")
        time.sleep(0.5)


def _catch_up(engine: realflink.RealFlink, key: tuple[str, str], rate: float,
              timeout_s: float = 300) -> float | None:
    """Seconds from RUNNING until the backlog is under one second of arrivals."""
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        pending = _pending(engine.deployments[key])
        if pending is not None and pending < rate:
            return round(time.monotonic() - start, 1)
        time.sleep(1)
    return None


def main(
    keys: Annotated[int, typer.Option(help="keys of StateJob's counter")] = 100_000,
    rate: Annotated[float, typer.Option(help="records/s offered")] = 1500.0,
    managed_mb: Annotated[int, typer.Option(help="managed MB of the counter")] = 256,
    warmup_s: Annotated[float, typer.Option(help="run this long before the first step")] = 90,
    out: Annotated[Path, typer.Option(help="JSON to write")]
        = Path("bench/results/realflink-steps.json"),
    job_module: Annotated[Path | None, typer.Option(
        help="the job module whose target/ to run (default flink-job/)")] = None,
    state_backend: Annotated[str, typer.Option(
        help="rocksdb, or forst (Flink 2.x; a local directory as the remote store)")] = "rocksdb",
    job_class: Annotated[str, typer.Option(
        help="the job's main class; dev.hybridscaler.job.AsyncStateJob: asynchronous state "
             "(Flink 2.x), which ForSt keeps in the remote directory"),
    ] = realflink.DEFAULT_JOB_CLASS,
) -> None:
    """Measure the three ways a step can be enacted on real Flink."""
    if job_module is not None:
        realflink.JOB_MODULE = job_module.resolve()
    classpath, _ = realflink.job_build()
    runtime = next((p for p in classpath.split(os.pathsep)
                    if Path(p).name.startswith("flink-runtime-")), "flink-runtime-?.jar")
    flink = Path(runtime).name.removeprefix("flink-runtime-").removesuffix(".jar")
    # SIGTERM too runs the `finally` below, which stops every JVM this run started.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    run_dir = Path(tempfile.mkdtemp(prefix="realflink-steps-"))
    engine = realflink.RealFlink(run_dir).start()
    key = ("bench", "state")
    manifest = realflink.state_job_deployment(*key, managed_mb=managed_mb)
    conf = {**manifest["spec"]["flinkConfiguration"], "hybridscaler.job.keys": str(keys),
            "hybridscaler.job.rate": str(rate), "jobmanager.scheduler": "adaptive",
            "state.backend.type": state_backend, realflink.JOB_CLASS_KEY: job_class}
    task_manager = manifest["spec"]["taskManager"]
    results: list[dict[str, Any]] = []
    try:
        engine.add_job(*key, conf, task_manager)
        _wait_running(engine, key, 600)
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
            _wait_running(engine, key, 600)
            step = engine.status(*key)["steps"][-1]
            downtime = step["downtimeS"] if kind != "in-place" else round(
                time.monotonic() - started, 1)
            catch_up = _catch_up(engine, key, rate)
            # StateJob's own check: records that found their key's counter wrong (lost state).
            mismatches = _operator_sum(engine.deployments[key], "countMismatches")
            row = {**step, "kind": kind, "downtimeS": downtime, "catchUpS": catch_up,
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
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    typer.run(main)
