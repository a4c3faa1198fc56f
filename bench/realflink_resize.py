"""One memory step two ways on real Flink: the counter of the repository's StateJob goes
from 32 to 128 MiB of managed memory (the cache cliff, docs/flink-plugin.md), once resized
in place through flink-plugin's TaskManager endpoint, once by a savepoint restart.

    python -m bench.realflink_resize [--keys 100000] [--rate 1500] [--out FILE.json]
        [--job-module DIR]   (a copy of flink-job/ with its target/, e.g. pinned to a plugin jar)

The job runs with the plugin's resizable RocksDB backend (state.backend.type =
ResizableRocksDBStateBackendFactory) as local JVMs (e2e/realflink.py, no Kubernetes).
Downtime: for the restart, from the request until every task of the new job is RUNNING; in
place, 0 when the job id, every task's attempt and numRestarts are unchanged (checked, not
assumed). Recover: from the request until the source's backlog is under one second of
arrivals. Printed and written as JSON, never asserted (numbers on 2 shared cores).
"""

from __future__ import annotations

import json
import os
import secrets
import time
from pathlib import Path
from typing import Annotated, Any

import requests
import typer

from bench.realflink_common import (
    COUNTER,
    JobModule,
    Keys,
    Out,
    Rate,
    catch_up,
    counter_samples,
    operator_sum,
    start,
    state_job,
    wait_running,
    write,
)
from e2e import realflink

FACTORY = "dev.hybridscaler.flink.resize.ResizableRocksDBStateBackendFactory"
CAPACITY = "_rocksdb_block_cache_capacity"
MIB = 1024 * 1024


def _cache_bytes(managed_mb: int, write_buffer_ratio: float = 0.5) -> int:
    """Flink's block cache for a slot's managed memory: (3 - r)/3 of it (docs/flink-plugin.md)."""
    return int((3 - write_buffer_ratio) * managed_mb * MIB / 3)


def _capacities(deployment: realflink.Deployment) -> list[int]:
    """The counter's block-cache capacity per subtask and column family (RocksDB's metric)."""
    return [int(value) for name, value in counter_samples(deployment) or []
            if name.endswith(CAPACITY)]


def _job(cluster: realflink.Cluster) -> tuple[str, str, float]:
    """The running job's id, its counter vertex's name and numRestarts."""
    jobs = requests.get(f"{cluster.rest}/jobs", timeout=5).json()["jobs"]
    jid = next(j["id"] for j in jobs if j["status"] == "RUNNING")
    detail = requests.get(f"{cluster.rest}/jobs/{jid}", timeout=5).json()
    vertex = next(v["name"] for v in detail["vertices"] if COUNTER in v["name"])
    restarts = requests.get(f"{cluster.rest}/jobs/{jid}/metrics?get=numRestarts",
                            timeout=5).json()
    return jid, vertex, float(restarts[0]["value"]) if restarts else 0.0


class Agent:
    """The controller's side of the TaskManager's resize endpoint."""

    def __init__(self, port: int, token: str) -> None:
        self.url = f"http://127.0.0.1:{port}/v1/"
        self.headers = {"Authorization": f"Bearer {token}"}

    def slots(self) -> list[dict[str, Any]]:
        r = requests.get(self.url + "slots", headers=self.headers, timeout=10)
        r.raise_for_status()
        return list(r.json()["slots"])

    def budget(self, nbytes: int | None) -> None:
        requests.put(self.url + "budget", json={"budgetBytes": nbytes}, headers=self.headers,
                     timeout=10).raise_for_status()

    def resize(self, job: str, task: str, cache: int) -> dict[str, Any]:
        r = requests.post(self.url + "resize", headers=self.headers, timeout=10,
                          json={"targets": [{"jobId": job, "task": task, "cacheBytes": cache}]})
        if r.status_code != 200:
            raise RuntimeError(f"resize refused: HTTP {r.status_code}")
        return dict(r.json())


def _await_capacity(deployment: realflink.Deployment, nbytes: int, timeout_s: float = 60
                    ) -> None:
    """Verifies a step through RocksDB's own block-cache-capacity metric."""
    started = time.monotonic()
    while sorted(set(_capacities(deployment))) != [nbytes]:
        if time.monotonic() - started > timeout_s:
            raise TimeoutError(f"block_cache_capacity {_capacities(deployment)}, "
                               f"wanted {nbytes}")
        time.sleep(0.5)


def main(
    keys: Keys = 100_000,
    rate: Rate = 1500.0,
    low_mb: Annotated[int, typer.Option(help="managed MB before the step")] = 32,
    high_mb: Annotated[int, typer.Option(help="managed MB after the step")] = 128,
    warmup_s: Annotated[float, typer.Option(help="run at low_mb this long before a step")] = 90,
    out: Out = Path("bench/results/realflink-resize.json"),
    job_module: JobModule = None,
) -> None:
    """Measure a memory step in place and by a savepoint restart on real Flink."""
    engine, _ = start("realflink-resize-", job_module)
    token = secrets.token_hex(24)
    (engine.run_dir / "token").write_text(token + "\n")
    port = realflink.free_port()
    key = ("bench", "resize")
    conf, task_manager = state_job(key, managed_mb=low_mb, keys=keys, rate=rate, extra={
        "state.backend.type": FACTORY,
        "classloader.parent-first-patterns.additional": "dev.hybridscaler.flink.resize.",
        "hybridscaler.resize.token-file": str(engine.run_dir / "token"),
        "hybridscaler.resize.port": str(port)})
    agent = Agent(port, token)
    results: list[dict[str, Any]] = []
    try:
        engine.add_job(*key, conf, task_manager)
        wait_running(engine, key, 600)
        time.sleep(warmup_s)

        # In place: the controller grants the TaskManager's unreserved managed memory, then grows.
        cluster = engine.deployments[key].cluster
        assert cluster is not None
        jid, vertex, restarts = _job(cluster)
        slots = [s for s in agent.slots() if s["jobId"] == jid]
        backlog = operator_sum(engine.deployments[key], "pendingRecords")
        agent.budget(sum(_cache_bytes(high_mb) for _ in slots))
        started = time.monotonic()
        answer = agent.resize(jid, vertex, _cache_bytes(high_mb))
        request_s = round(time.monotonic() - started, 3)
        caught_up = catch_up(engine, key, rate)
        recover = round(time.monotonic() - started, 1) if caught_up is not None else None
        _await_capacity(engine.deployments[key], _cache_bytes(high_mb))
        metric_s = round(time.monotonic() - started, 1)  # Flink refreshes the metric periodically
        jid_after, _, restarts_after = _job(cluster)
        attempts = {s["attempt"] for s in agent.slots() if s["jobId"] == jid}
        results.append({
            "kind": "in-place", "fromMb": low_mb, "toMb": high_mb, "backlogAtStep": backlog,
            "requestS": request_s, "metricVisibleS": metric_s,
            "downtimeS": 0.0 if (jid_after == jid and restarts_after == restarts
                                 and attempts == {s["attempt"] for s in slots}) else None,
            "recoverS": recover, "sameJob": jid_after == jid,
            "restarts": restarts_after - restarts,
            "observedCacheBytes": [s["observedCacheBytes"] for s in answer["slots"]]})
        print(json.dumps(results[-1]), flush=True)

        # Back to the low level in place, and let the backlog build again.
        agent.resize(jid, vertex, _cache_bytes(low_mb))
        agent.budget(None)
        _await_capacity(engine.deployments[key], _cache_bytes(low_mb))
        time.sleep(warmup_s)

        # The same step by a savepoint restart with the counter's managed memory raised.
        backlog = operator_sum(engine.deployments[key], "pendingRecords")
        resources = json.loads(conf[realflink.OPERATOR_RESOURCES_KEY])
        resources[COUNTER]["managedMemoryMb"] = high_mb
        conf = {**conf, realflink.OPERATOR_RESOURCES_KEY: json.dumps(resources, sort_keys=True)}
        started = time.monotonic()
        engine.reconfigure(*key, conf, task_manager)
        wait_running(engine, key, 600)
        step = engine.status(*key)["steps"][-1]
        caught_up = catch_up(engine, key, rate)
        recover = round(time.monotonic() - started, 1) if caught_up is not None else None
        _await_capacity(engine.deployments[key], _cache_bytes(high_mb))
        results.append({
            "kind": "savepoint", "fromMb": low_mb, "toMb": high_mb, "backlogAtStep": backlog,
            "downtimeS": step["downtimeS"], "recoverS": recover,
            "metricVisibleS": round(time.monotonic() - started, 1)})
        print(json.dumps(results[-1]), flush=True)
    finally:
        engine.stop()
    doc = {"description": "a memory step of StateJob's counter on real Flink (local JVMs, 2 shared "
                          "cores), in place through flink-plugin's resize endpoint and by a "
                          "savepoint restart; recover: request until the backlog is under 1 s "
                          "of arrivals",
           "keys": keys, "valueBytes": 1000, "rate": rate, "cores": os.cpu_count(),
           "loadAverage": os.getloadavg(), "steps": results}
    write(out, doc)


if __name__ == "__main__":
    typer.run(main)
