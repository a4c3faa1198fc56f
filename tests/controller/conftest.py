"""A real Prometheus (Debian's binary) scraping exposition text served by the test.

One Prometheus per test session, scraping every second; each test registers the
text it wants scraped under a path of its own and waits for samples to arrive.
"""

from __future__ import annotations

import re
import shutil
import socket
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.controller.promproc import PrometheusProcess
from tests.golden import FLINK_1_20, FLINK_2_2

SAMPLES = FLINK_1_20
TARGET_PATHS = ("/golden", "/cfvar", "/forst", "/dynamic", "/hostile", "/namesake")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


HIT_RATE, MISS_RATE, RESET_EVERY_S = 1000.0, 250.0, 12.0
# ForSt's file cache (Flink 2.x): hits and misses of the local disk behind the block cache.
FILE_HIT_RATE, FILE_MISS_RATE = 60.0, 40.0
_TICKER = re.compile(
    r"^(flink_taskmanager_job_task_operator_(?:rocksdb_block_cache|forst_fileCache)_(hit|miss)"
    r'\{.*subtask_index="(\d+)".*\}) \S+$',
    re.MULTILINE,
)
# A TaskManager JVM's CPU time (ns) counts up at this many cores; the JobManager's stays.
JVM_CPU_CORES = 1.5
_JVM_CPU = re.compile(r"^(flink_taskmanager_Status_JVM_CPU_Time\{.*\}) (\S+)$", re.MULTILINE)


def golden_scrape(name: str, t0: float, samples: Path = SAMPLES) -> Callable[[], str]:
    """A golden scrape whose cache tickers count up at a known rate per subtask, and
    its TaskManagers' JVM CPU time at JVM_CPU_CORES.

    Subtask 1's tickers reset every RESET_EVERY_S seconds, as after a restart. Each ticker
    carries the timestamp its value was computed for: Prometheus would otherwise stamp it
    with the scrape's start, and on a loaded machine the gap skews rate() by over 10 %.
    """
    text = (samples / name).read_text()

    def body() -> str:
        now = time.time()
        elapsed = now - t0

        def value(m: re.Match[str]) -> str:
            file_cache = "forst_fileCache" in m.group(1)
            rate = {(False, "hit"): HIT_RATE, (False, "miss"): MISS_RATE,
                    (True, "hit"): FILE_HIT_RATE, (True, "miss"): FILE_MISS_RATE}[
                (file_cache, m.group(2))]
            t = elapsed % RESET_EVERY_S if m.group(3) == "1" else elapsed
            return f"{m.group(1)} {rate * t} {int(now * 1000)}"

        def cpu_time(m: re.Match[str]) -> str:
            return f"{m.group(1)} {float(m.group(2)) + JVM_CPU_CORES * 1e9 * elapsed} " \
                   f"{int(now * 1000)}"

        return _JVM_CPU.sub(cpu_time, _TICKER.sub(value, text))

    return body


def namesake_taskmanager(samples: Path, t0: float) -> Callable[[], str]:
    """Another scrape target's TaskManager with the golden one's tm_id (a pod name, unique
    only within its namespace), burning NAMESAKE_CPU_CORES: not the golden job's CPU."""
    tm = re.search(r'^flink_taskmanager_Status_JVM_CPU_Time\{(.*)\} ',
                   (samples / "prom-scrape.txt").read_text(), re.MULTILINE)
    assert tm is not None

    def body() -> str:
        now = time.time()
        return (f"flink_taskmanager_Status_JVM_CPU_Time{{{tm.group(1)}}} "
                f"{NAMESAKE_CPU_CORES * 1e9 * (now - t0)} {int(now * 1000)}\n")

    return body


NAMESAKE_CPU_CORES = 7.0
LONELY_JOB, LONELY_TASK = "f" * 32, "e" * 32


def lonely_job() -> str:
    """A one-vertex job with just the signals collect() needs."""
    names = ("busyTimeMsPerSecond", "backPressuredTimeMsPerSecond",
             "numRecordsInPerSecond", "numRecordsOutPerSecond")
    return "".join(
        f'flink_taskmanager_job_task_{m}{{job_id="{LONELY_JOB}",task_id="{LONELY_TASK}",'
        f'subtask_index="0",}} 500.0\n'
        for m in names
    )


class Exporter:
    """Serves `bodies[path]()` as Prometheus text; tests swap the callables at will."""

    def __init__(self) -> None:
        self.bodies: dict[str, Callable[[], str]] = {p: lambda: "" for p in TARGET_PATHS}
        self.started = time.time()
        self.bodies["/golden"] = golden_scrape("prom-scrape.txt", self.started)
        self.bodies["/forst"] = golden_scrape("prom-scrape.txt", self.started, FLINK_2_2)
        self.bodies["/dynamic"] = lonely_job
        self.bodies["/namesake"] = namesake_taskmanager(FLINK_2_2, self.started)
        self.bodies["/cfvar"] = golden_scrape(
            "prom-scrape-column-family-as-variable.txt", self.started
        )
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = exporter.bodies.get(self.path, lambda: "")().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture(scope="session")
def exporter() -> Iterator[Exporter]:
    e = Exporter()
    yield e
    e.server.shutdown()


@pytest.fixture(scope="session")
def prometheus(
    tmp_path_factory: pytest.TempPathFactory, exporter: Exporter
) -> Iterator[PrometheusProcess]:
    if shutil.which("prometheus") is None:
        pytest.fail("'prometheus' is missing: apt-get install prometheus (scripts/bootstrap.sh)")
    jobs = [
        {"job_name": path.strip("/"), "metrics_path": path, "honor_labels": True,
         "static_configs": [{"targets": [f"127.0.0.1:{exporter.port}"]}]}
        for path in TARGET_PATHS
    ]
    p = PrometheusProcess(tmp_path_factory.mktemp("prometheus"), jobs, interval_s=1)
    yield p
    p.stop()


def wait_for(predicate: Callable[[], bool], timeout_s: float = 30.0, what: str = "it") -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
