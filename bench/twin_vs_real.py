"""The twin against real Flink (issues 15.7 and 24): the same policy steers the
repository's StateJob on real Flink (the e2e stack's real mode, as `make demo FLINK=real`)
and its twin model (through the controller's own passes as `hybrid-scaler simulate` runs
them): on Flink 1.20 with RocksDB (`simulator/jobs/statejob.yaml`), or with `--flink 2.2`
on Flink 2.2 with ForSt and asynchronous state (`statejob-forst.yaml`;
realflink.state_job). Prints steps, final configuration, rate and each step's downtime
side by side, and writes them to JSON.

    python -m bench.twin_vs_real [--flink 2.2] [--seconds 900] [--out FILE.json]
    python -m bench.twin_vs_real --twin-only [--model FILE.yaml]  # seconds, no Flink
    python -m bench.twin_vs_real --real-from bench/results/twin-vs-real.json  # the twin
        # again (say, recalibrated) beside the real run recorded there

The real run takes minutes of both cores (a JobManager and a TaskManager per attempt):
run it alone. Numbers are printed, never asserted.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Annotated, Any

import requests
import typer
import yaml

from controller.adapters.twin import twin_ports
from controller.api import Status, parse_policy
from controller.loop import reconcile
from e2e import realflink
from policies.levels import level_of
from policies.model import VertexConfig
from simulator.model import JobModel, load_model
from simulator.serve import JOB_MODEL_KEY
from simulator.twin import Twin

NAME = "state"
# Per Flink: the real column's name, the twin's model and where the runs are written.
REAL = {"1.20": "real Flink 1.20.5", "2.2": "real Flink 2.2.0, ForSt"}
MODEL = {"1.20": "statejob", "2.2": "statejob-forst"}
OUT = {"1.20": Path("bench/results/twin-vs-real.json"),
       "2.2": Path("bench/results/twin-vs-real-forst.json")}
COUNTER = "0da08f51eaa85fc298e176a139b3649a"  # Murmur3-128 of uid "counter"
BASE_MIB = 32.0  # the policy's memory.baseManagedMemory: level 0
# The counter before the first step where a recorded run does not say (the 1.20 job's).
START = {"counterParallelism": 1, "counterManagedMib": BASE_MIB}
TICK_S = 5.0


def _history_steps(status: dict[str, Any]) -> list[dict[str, Any]]:
    """Each step of a policy status (camelCase, as `kubectl get -o yaml` gives it)."""
    enactments = {e["step"]: e for e in status.get("enactments") or []}
    steps = []
    for record in status.get("history") or []:
        counter: dict[str, Any] = next(
            (v for v in record["vertices"] if v["vertexId"] == COUNTER), {})
        enactment = enactments.get(record["step"], {})
        steps.append({
            "step": record["step"], "time": record.get("time"),
            "counter": {"parallelism": counter.get("parallelism"),
                        "memoryLevel": counter.get("memoryLevel"),
                        "scaledUp": counter.get("scaledUp"),
                        "cacheHitRateBefore": counter.get("cacheHitRate")},
            "kind": enactment.get("kind"),
            "expectedDowntimeS": enactment.get("expectedDowntimeS"),
            "observedDowntimeS": enactment.get("observedDowntimeS"),
            "stateBytes": enactment.get("stateBytes")})
    return steps


def _start(deployment: dict[str, Any]) -> dict[str, Any]:
    """The counter before the first step: p1 at the managed memory the deployment writes."""
    operators = json.loads(deployment["spec"]["flinkConfiguration"][
        realflink.OPERATOR_RESOURCES_KEY])
    return {"counterParallelism": 1,
            "counterManagedMib": operators["counter"]["managedMemoryMb"]}


def _final(parallelism: int, level: int | None, rate: float) -> dict[str, Any]:
    managed = None if level is None else BASE_MIB * 2**level
    return {"counterParallelism": parallelism, "counterManagedMib": managed,
            "rate": round(rate, 1)}


# ---- the twin ---------------------------------------------------------------------------

def run_twin(model: JobModel, seconds: float, flink: str = realflink.DEFAULT_FLINK,
             seed: int = 0) -> dict[str, Any]:
    """The controller's passes on a twin of `model`, with the real run's policy and
    deployment (managed memory written per operator, fineGrained, Active), the counter
    starting at the deployment's managed memory."""
    deployment, policy_object = realflink.state_job("twin", NAME, flink)
    conf = deployment["spec"]["flinkConfiguration"]
    conf.pop(realflink.ENGINE_KEY)
    conf[JOB_MODEL_KEY] = model.name
    deployment["metadata"]["generation"] = 1
    deployment["status"] = {"lifecycleState": "STABLE", "jobStatus": {"state": "RUNNING"}}
    start = _start(deployment)
    start_level = level_of(start["counterManagedMib"], BASE_MIB)
    twin = Twin(model, seed=seed, base_managed_mib=BASE_MIB,
                configuration={COUNTER: VertexConfig(1, start_level)})
    ports, deployments, _ = twin_ports(twin, deployment, base_managed_mib=BASE_MIB)
    policy = parse_policy(policy_object)
    status, t0 = Status(), twin.time
    while twin.time - t0 < seconds:
        twin.advance(TICK_S)
        status = reconcile(policy, 1, status, ports).status
    raw = status.model_dump(mode="json", by_alias=True, exclude_none=True)
    steps = _history_steps(raw)
    for step, downtime in zip(steps, deployments.downtimes, strict=False):
        step["twinDowntimeS"] = round(downtime, 1)
    config = twin.configuration[COUNTER]
    counter: dict[str, Any] = next(
        (o for o in raw.get("operators") or [] if o["vertexId"] == COUNTER), {})
    return {"steps": steps, "start": start,
            "final": _final(config.parallelism, config.memory_level, twin.achieved_rate(60.0)),
            "measured": _measured([], counter),
            "capacityAtLevel": {str(level): round(Twin(
                model, base_managed_mib=BASE_MIB,
                configuration={COUNTER: config.__class__(1, level)}).cost(COUNTER).capacity)
                for level in range(4)}}


# ---- real Flink -------------------------------------------------------------------------

def run_real(seconds: float, flink: str = realflink.DEFAULT_FLINK) -> dict[str, Any]:
    from e2e import stack
    from e2e.demo import ControllerProcess

    realflink.job_build(flink)
    info, started = stack.up(echo=lambda line: print(line, flush=True))

    def k(*args: str, stdin: str | None = None) -> str:
        return stack.kubectl(info.kubeconfig, *args, stdin=stdin).stdout

    def prom(query: str) -> float | None:
        result = requests.get(f"{info.prometheus_url}/api/v1/query", params={"query": query},
                              timeout=5).json()["data"]["result"]
        return float(result[0]["value"][1]) if result else None

    rest_url = json.loads((Path(info.run_dir) / realflink.STATE_FILE).read_text())["restUrl"]
    namespace = f"twinreal-{uuid.uuid4().hex[:6]}"
    deployment, policy = realflink.state_job(namespace, NAME, flink)
    k("create", "namespace", namespace)
    controller = None
    selector = f'namespace="{namespace}",flinkdeployment="{NAME}"'
    rate_query = ("sum(rate(flink_taskmanager_job_task_operator_numRecordsIn"
                  f'{{{selector},operator_name="counter"}}[60s]))')
    samples: list[dict[str, Any]] = []
    try:
        k("apply", "-f", "-", stdin=yaml.safe_dump(deployment))
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            obj = yaml.safe_load(k("get", "flinkdeployment", "-n", namespace, NAME, "-o",
                                   "yaml"))
            if ((obj.get("status") or {}).get("jobStatus") or {}).get("state") == "RUNNING":
                break
            time.sleep(3)
        else:
            raise TimeoutError("the real job did not start in 10 min")
        # As the e2e test does: the cliff shows once every key was read back.
        time.sleep(90)
        k("apply", "-f", "-", stdin=yaml.safe_dump(policy))
        log = Path(info.log_dir) / f"controller-{namespace}.log"
        controller = ControllerProcess(info.controller_kubeconfig, info.prometheus_url,
                                       stack.proxy_env(rest_url), log,
                                       namespaces=(namespace,)).start()
        t0, steady_since = time.monotonic(), None
        target = float(realflink.STATE_JOB_CONF["hybridscaler.job.rate"])
        while time.monotonic() - t0 < seconds:
            rate = prom(rate_query) or 0.0
            hsp = yaml.safe_load(k("get", "hsp", "-n", namespace, NAME, "-o", "yaml"))
            status = hsp.get("status") or {}
            samples.append({"t": round(time.monotonic() - t0), "rate": round(rate, 1),
                            "step": status.get("step", 0)})
            print(json.dumps(samples[-1]), flush=True)
            settled = rate >= 0.95 * target and realflink.settled(status)
            steady_since = (steady_since or time.monotonic()) if settled else None
            if steady_since is not None and time.monotonic() - steady_since > 90:
                break
            time.sleep(TICK_S)
        described = k("describe", "hsp", "-n", namespace, NAME)
        print(described, flush=True)
        hsp = yaml.safe_load(k("get", "hsp", "-n", namespace, NAME, "-o", "yaml"))
        status = hsp.get("status") or {}
        counter: dict[str, Any] = next(
            (o for o in status.get("operators") or [] if o["vertexId"] == COUNTER), {})
        return {"steps": _history_steps(status), "measured": _measured(samples, counter),
                "start": _start(deployment),
                "final": _final(int(counter.get("parallelism", 1)), counter.get("memoryLevel"),
                                prom(rate_query) or 0.0),
                "operators": status.get("operators"), "samples": samples,
                "describe": described, "loadAverage": os.getloadavg()}
    finally:
        if controller is not None:
            controller.stop()
        k("delete", "namespace", namespace, "--wait=false")
        if started:
            stack.down()


def _measured(samples: list[dict[str, Any]], counter: dict[str, Any]) -> dict[str, float]:
    """The counter's rate before the first step (achieved: it was the bottleneck) and its
    true processing rate at the end."""
    before = sorted(s["rate"] for s in samples if s["step"] == 0)
    level = counter.get("memoryLevel")
    found = {}
    if before:
        found[f"{BASE_MIB:g} MiB achieved"] = before[len(before) // 2]
    if counter.get("trueProcessingRate") is not None and level is not None:
        found[f"{BASE_MIB * 2**level:g} MiB true processing rate"] = counter[
            "trueProcessingRate"]
    return found


# ---- the table ----------------------------------------------------------------------------

def _describe_steps(steps: list[dict[str, Any]], start: dict[str, Any]) -> str:
    """Each step's change to the counter, against the configuration before it."""
    parts = []
    parallelism, mib = start["counterParallelism"], start["counterManagedMib"]
    for s in steps:
        c = s["counter"]
        level = c.get("memoryLevel")
        after = None if level is None else BASE_MIB * 2**level
        tasks = c.get("parallelism", parallelism)
        what = [word for changed, word in (
            ((after or 0) > (mib or 0), "scale-up"), ((after or 0) < (mib or 0), "memory down"),
            (tasks > parallelism, "scale-out"), (tasks < parallelism, "scale-in")) if changed]
        parts.append(f"{s['step']}: {' + '.join(what) or 'no change'} → p{c.get('parallelism')}, "
                     f"{'⊥' if after is None else f'{after:g}'} MiB")
        parallelism, mib = tasks, after
    return "; ".join(parts) or "none"


def table(runs: dict[str, dict[str, Any]]) -> str:
    names = list(runs)
    lines = ["| | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]

    def row(label: str, cell: Any) -> None:
        lines.append(f"| {label} | " + " | ".join(str(cell(runs[n])) for n in names) + " |")

    row("steps", lambda r: len(r["steps"]))
    row("the steps (counter)", lambda r: _describe_steps(r["steps"], r.get("start", START)))
    row("counter cache hit rate before each step", lambda r: ", ".join(
        f"{s['counter']['cacheHitRateBefore']:.2f}" for s in r["steps"]
        if s["counter"].get("cacheHitRateBefore") is not None) or "-")
    row("final counter", lambda r: f"p{r['final']['counterParallelism']}, "
                                   f"{r['final']['counterManagedMib']:g} MiB")
    row("final rate (records/s, last 60 s)", lambda r: f"{r['final']['rate']:,.0f}")
    row("expected downtime per step (s)", lambda r: ", ".join(
        str(s.get("expectedDowntimeS")) for s in r["steps"]) or "-")
    row("downtime per step (s): twin's / observed by the controller", lambda r: ", ".join(
        str(s.get("twinDowntimeS", s.get("observedDowntimeS"))) for s in r["steps"]) or "-")
    row("counter's true processing rate as the controller read it, at the end (records/s)",
        lambda r: ", ".join(f"{k} {v:,.0f}" for k, v in r.get("measured", {}).items()
                            if k.endswith("true processing rate")) or "-")
    row("counter capacity at 32 / 64 / 128 / 256 MiB (records/s)", lambda r: " / ".join(
        f"{c:,}" for c in r["capacityAtLevel"].values()) if "capacityAtLevel" in r else
        "measured: " + ", ".join(f"{k} {v:,.0f}" for k, v in r.get("measured", {}).items()))
    return "\n".join(lines)


def commit_of_this_checkout() -> str | None:
    """The commit a run was made at (`+dirty`: with local changes to tracked files), so a
    result file says which code produced it; None outside a git checkout."""
    here = Path(__file__).resolve().parent
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True,
                              text=True, check=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=here, capture_output=True, text=True, check=True,
                               timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{head}+dirty" if dirty else head


def main(
    flink: Annotated[str, typer.Option(help="1.20 (RocksDB) or 2.2 (ForSt)")]
        = realflink.DEFAULT_FLINK,
    seconds: Annotated[float, typer.Option(help="longest closed-loop run, each side")] = 900,
    twin_only: Annotated[bool, typer.Option(help="run the twin side only")] = False,
    model: Annotated[str | None, typer.Option(
        help="the twin's job model (default: statejob, or statejob-forst on 2.2)")] = None,
    out: Annotated[Path | None, typer.Option(
        help="JSON to write, real runs only (default: bench/results/twin-vs-real.json, or "
             "twin-vs-real-forst.json on 2.2)")] = None,
    real_from: Annotated[Path | None, typer.Option(
        help="keep the runs recorded in this JSON; run only the twin (as `--label`)")] = None,
    label: Annotated[str, typer.Option(help="the twin run's column")] = "twin",
) -> None:
    """Run the StateJob's closed loop on the twin (and real Flink) and compare."""
    if flink not in REAL:
        raise typer.BadParameter(f"one of {', '.join(REAL)}", param_hint="--flink")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # the `finally` stops the JVMs
    job, real, out = load_model(model or MODEL[flink]), REAL[flink], out or OUT[flink]
    runs: dict[str, dict[str, Any]] = (
        json.loads(real_from.read_text()) if real_from is not None else {})
    commit = commit_of_this_checkout()
    runs[label] = {**run_twin(job, seconds, flink), "commit": commit}
    if not twin_only and real_from is None:
        runs[real] = {**run_real(seconds, flink), "commit": commit}
    runs = {**{k: v for k, v in runs.items() if k != real}, **(
        {real: runs[real]} if real in runs else {})}
    print(table(runs))
    if not twin_only:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(runs, indent=2, default=str) + "\n")
        print(f"wrote {out}")


if __name__ == "__main__":
    typer.run(main)
