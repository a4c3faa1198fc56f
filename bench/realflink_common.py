"""What the real-Flink benches share (bench.realflink_steps, _resize, _warmup, _buffering):
starting local Flink JVMs for the repository's StateJob (e2e/realflink.py), reading the
TaskManagers' Prometheus reporters, waiting for RUNNING and for the backlog to clear, the
common command-line options, and writing the result.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import requests
import typer

from e2e import realflink

COUNTER = "counter"  # StateJob's keyed counter: its operator name and uid
_LINE = re.compile(r'^(\w+)\{(.*)\} (\S+)$')

# The options every bench takes the same way.
Keys = Annotated[int, typer.Option(help="keys of StateJob's counter")]
Rate = Annotated[float, typer.Option(help="records/s offered")]
ManagedMb = Annotated[int, typer.Option(help="managed MB of the counter")]
Out = Annotated[Path, typer.Option(help="JSON to write")]
JobModule = Annotated[Path | None, typer.Option(
    help="the job module whose build to run (default flink-job/)")]
Flink = Annotated[str, typer.Option(
    help="the Flink to run: the job module's 1.20 build (target/) or its 2.2 build "
         "(-P flink-2, target-flink2/)")]
StateBackend = Annotated[str, typer.Option(
    help="rocksdb, or forst (Flink 2.x; a local directory as the remote store)")]
JobClass = Annotated[str, typer.Option(
    help="the job's main class; dev.hybridscaler.job.AsyncStateJob: asynchronous state "
         "(Flink 2.x), which ForSt keeps in the remote directory")]


def start(prefix: str, job_module: Path | None = None, flink: str = realflink.DEFAULT_FLINK
          ) -> tuple[realflink.RealFlink, str]:
    """A RealFlink engine in a fresh run directory (every JVM it starts stops with it, also
    on SIGTERM) that runs every deployment on `flink`, and the Flink version on the job's
    classpath. `job_module`: a copy of flink-job/ to run instead (e.g. pinned to a jar)."""
    if job_module is not None:
        realflink.JOB_MODULE = job_module.resolve()
    if flink not in realflink.BUILDS:
        raise typer.BadParameter(f"--flink: one of {', '.join(realflink.BUILDS)}")
    realflink.DEFAULT_FLINK = flink
    classpath, _ = realflink.job_build()
    runtime = next((p for p in classpath.split(os.pathsep)
                    if Path(p).name.startswith("flink-runtime-")), "flink-runtime-?.jar")
    flink = Path(runtime).name.removeprefix("flink-runtime-").removesuffix(".jar")
    # SIGTERM too runs the callers' `finally: engine.stop()`, which stops every JVM.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    return realflink.RealFlink(Path(tempfile.mkdtemp(prefix=prefix))).start(), flink


def state_job(key: tuple[str, str], *, managed_mb: int, keys: int, rate: float,
              extra: Mapping[str, str] | None = None) -> tuple[dict[str, str], dict[str, Any]]:
    """StateJob's Flink configuration (its counter's managed memory, key count and offered
    rate, then `extra`) and its TaskManager spec."""
    spec = realflink.state_job_deployment(*key, managed_mb=managed_mb)["spec"]
    return ({**spec["flinkConfiguration"], "hybridscaler.job.keys": str(keys),
             "hybridscaler.job.rate": str(rate), **(extra or {})}, spec["taskManager"])


Sample = tuple[str, str, float]  # metric name, its labels as written, value


def parse(text: str) -> list[Sample]:
    """The labelled series of a Prometheus text exposition (comments and the rest skipped)."""
    return [(m.group(1), m.group(2), float(m.group(3)))
            for m in map(_LINE.match, text.splitlines()) if m is not None]


def _samples(deployment: realflink.Deployment) -> list[Sample] | None:
    """Every labelled series on every TaskManager's reporter; None without a cluster or
    when a reporter did not answer."""
    cluster = deployment.cluster
    if cluster is None:
        return None
    found: list[Sample] = []
    for port in cluster.metrics_ports[1:]:
        try:
            found += parse(requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text)
        except requests.RequestException:
            return None
    return found


def operator_total(samples: list[Sample], metric: str) -> float | None:
    """The sum of one operator metric over all subtasks (None: not reported)."""
    name = f"flink_taskmanager_job_task_operator_{metric}"
    values = [value for n, _, value in samples if n == name]
    return sum(values) if values else None


def of_counter(samples: list[Sample]) -> list[tuple[str, float]]:
    """(metric name, value) of the counter's series: its operator metrics and the task
    metrics of the chain it heads. Not the operator metrics of what is chained behind it:
    the chained sink's numRecordsIn equals the counter's and would count every record
    twice."""
    return [(name, value) for name, labels, value in samples
            if f'operator_name="{COUNTER}"' in labels
            or (f'task_name="{COUNTER}' in labels and "operator_name=" not in labels)]


def operator_sum(deployment: realflink.Deployment, metric: str) -> float | None:
    """`operator_total` read from the TaskManagers (None: unreadable or not reported)."""
    return operator_total(_samples(deployment) or [], metric)


def counter_samples(deployment: realflink.Deployment) -> list[tuple[str, float]] | None:
    """`of_counter` read from the TaskManagers; None when a reporter did not answer."""
    samples = _samples(deployment)
    return None if samples is None else of_counter(samples)


def wait_running(engine: realflink.RealFlink, key: tuple[str, str], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    time.sleep(1)
    while engine.status(*key)["state"] != "RUNNING":
        if time.monotonic() > deadline:
            raise TimeoutError(f"not RUNNING: {engine.status(*key)}")
        time.sleep(0.5)


def catch_up(engine: realflink.RealFlink, key: tuple[str, str], rate: float,
             timeout_s: float = 300) -> float | None:
    """Seconds from now until the source's backlog is under one second of arrivals."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        pending = operator_sum(engine.deployments[key], "pendingRecords")
        if pending is not None and pending < rate:
            return round(time.monotonic() - started, 1)
        time.sleep(1)
    return None


def write(out: Path, doc: dict[str, Any], indent: int = 2) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=indent) + "\n")
    print(f"wrote {out}")
