"""The real Flink autoscaler (`org.apache.flink:flink-autoscaler`) as our peer.

The Java side is the Maven project in this directory (README.md); this module builds it
and runs its two entry points:

* `evaluate_upstream(payload)`: recorded metric windows through upstream's evaluator and
  executor (`dev.hybridscaler.peer.Evaluate`), for conformance tests against our DS2;
* `peer_command(...)`: the live peer (`dev.hybridscaler.peer.Peer`) against twins served
  by `simulator.serve.TwinServer`, used by `python -m bench.peer`.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
POM = HERE / "pom.xml"
TARGET = HERE / "target"
CLASSPATH_FILE = TARGET / "classpath.txt"


class UpstreamError(RuntimeError):
    """The Java side refused the input (exit 2) or failed (exit 1); the message says why."""


def build(force: bool = False) -> None:
    """`mvn package` once (writes target/classpath.txt); later calls reuse the build."""
    if CLASSPATH_FILE.exists() and (TARGET / "classes").exists() and not force:
        return
    if shutil.which("mvn") is None:
        raise UpstreamError("mvn not found: install Maven (scripts/bootstrap.sh all) to build "
                            f"{POM}")
    subprocess.run(["mvn", "-B", "-q", "-f", str(POM), "package", "-DskipTests"], check=True)


def classpath() -> str:
    build()
    return CLASSPATH_FILE.read_text().strip() + ":" + str(TARGET / "classes")


def java_command(main: str, *args: str, log_level: str = "warn") -> list[str]:
    return ["java", f"-Dorg.slf4j.simpleLogger.defaultLogLevel={log_level}", "-cp", classpath(),
            f"dev.hybridscaler.peer.{main}", *args]


def evaluate_upstream(payload: dict[str, Any], timeout_s: float = 120.0) -> dict[str, Any]:
    """Upstream's decision on recorded windows: `{"rescale", "parallelism", ...}`.

    `payload` is the input contract of README.md (graph, windows, options)."""
    done = subprocess.run(java_command("Evaluate", "-"), input=json.dumps(payload),
                          capture_output=True, text=True, timeout=timeout_s, check=False)
    if done.returncode != 0:
        raise UpstreamError(f"Evaluate exited {done.returncode}: {done.stderr.strip()}")
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def peer_command(rest_urls: list[str], *, time_scale: float, clock_anchor_ms: int,
                 interval_s: float, duration_s: float, options: dict[str, str],
                 warmup_url: str | None = None, lockstep: bool = False,
                 log_level: str = "warn") -> list[str]:
    """The live peer's command line (`--rest` for each URL, or stdin after `--warmup`).

    `lockstep`: upstream's clock is set from stdin, one control loop per line (the epoch
    ms of a TwinServer with manual_clock), answered by `{"done": ms}`."""
    args = ["--time-scale", f"{time_scale:g}", "--clock-anchor-ms", str(clock_anchor_ms),
            "--interval-s", f"{interval_s:g}", "--duration-s", f"{duration_s:g}",
            "--lockstep", str(lockstep).lower()]
    if warmup_url is not None:
        args += ["--warmup", warmup_url]
    for url in rest_urls:
        args += ["--rest", url]
    args += [f"-D{key}={value}" for key, value in options.items()]
    return java_command("Peer", *args, log_level=log_level)
