"""`make demo FLINK=real`: the demo on real Flink instead of the twin.

The e2e stack, the repository's job (flink-job/, StateJob) as a real Flink application
cluster of local JVMs (e2e/realflink.py), its HybridScalingPolicy, and the controller:
on Flink 1.20 with RocksDB, short of memory (the default), or with
`make demo FLINK=real FLINK_VERSION=2.2` on Flink 2.2 with ForSt and asynchronous state,
over-provisioned (realflink.state_job). Prints `kubectl get hsp` at every step and
`kubectl describe hsp` at the end, and writes a PNG of the convergence (the counter's
input rate against the target, parallelism and managed memory per operator, from the
FlinkDeployment's spec).

    python -m e2e.demo_real [--flink 2.2] [--build] [--seconds 900]
                            [--plot out/demo-real.png] [--keep]
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from pathlib import Path
from typing import Annotated, Any

import mmh3
import requests
import typer
import yaml

from e2e import realflink
from e2e.demo import ControllerProcess, Sample, plot

NAME = "state"


def _spec_view(deployment: dict[str, Any]) -> tuple[dict[str, int], dict[str, float]]:
    """Parallelism and managed MiB per operator uid, as the spec asks for them."""
    conf = deployment["spec"].get("flinkConfiguration") or {}
    resources = json.loads(conf.get(realflink.OPERATOR_RESOURCES_KEY) or "{}")
    overrides = dict(pair.split(":") for pair in
                     filter(None, conf.get(realflink.OVERRIDES_KEY, "").split(",")))
    # Vertex ids are Murmur3 of the chain head's uid (docs/flink-contract.md); a uid that
    # is no vertex's (the sink chained behind the counter) is drawn as its chain head.
    vertex = {uid: mmh3.hash_bytes(uid.encode(), 0).hex() for uid in resources}
    heads = [uid for uid in resources if not overrides or vertex[uid] in overrides]
    return ({uid: int(overrides.get(vertex[uid], 1)) for uid in heads},
            {uid: float(resources[uid]["managedMemoryMb"]) for uid in heads})


def surface(hsp: dict[str, Any], held: set[tuple[str | None, str | None]]) -> str:
    """The learned capacity points (status.learned) and the windows held back as cold."""
    lines = [f"windows held back while a block cache refilled: {len(held)}"
             + "".join(f"\n  {t} {v}" for t, v in sorted(held, key=str))]
    for v in (hsp.get("status") or {}).get("learned") or []:
        warmup = v.get("warmup") or {}
        lines.append(f"vertex {v.get('vertexId')}: warm-up {warmup}")
        for p in v.get("points") or []:
            tpr = p["parallelism"] * 1e6 / p["serviceUs"]
            miss = p.get("missRatio")
            lines.append(f"  p={p['parallelism']} level={p.get('memoryLevel')} "
                         f"windows={p['windows']} capacity={tpr:,.0f}/s "
                         f"hit={'-' if miss is None else f'{1 - miss:.2f}'} at {p['time']}")
    return "\n".join(lines)


def run(flink: str, seconds: float, plot_path: Path, keep: bool, build: bool) -> None:
    from e2e import stack

    namespace = f"demo-{uuid.uuid4().hex[:6]}"
    deployment, policy = realflink.state_job(namespace, NAME, flink)
    if not build:
        try:
            realflink.job_build(flink)
        except FileNotFoundError:
            build = True
    if build:
        print(f"building the job and flink-plugin for Flink {flink} (Maven)...", flush=True)
        realflink.build_job(flink)
    info, started = stack.up(echo=lambda line: print(line, flush=True))
    kubectl = stack.find_tools().kubectl

    def k(*args: str, stdin: str | None = None) -> str:
        done = subprocess.run([kubectl, "--kubeconfig", info.kubeconfig, *args], input=stdin,
                              capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    def prom(query: str) -> float:
        result = requests.get(f"{info.prometheus_url}/api/v1/query", params={"query": query},
                              timeout=5).json()["data"]["result"]
        return float(result[0]["value"][1]) if result else 0.0

    rest_url = json.loads((Path(info.run_dir) / realflink.STATE_FILE).read_text())["restUrl"]
    k("create", "namespace", namespace)
    k("apply", "-f", "-", stdin=yaml.safe_dump(deployment))
    print("waiting for the real Flink cluster (a minute or two on 2 cores)...", flush=True)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        obj = yaml.safe_load(k("get", "flinkdeployment", "-n", namespace, NAME, "-o", "yaml"))
        if ((obj.get("status") or {}).get("jobStatus") or {}).get("state") == "RUNNING":
            break
        time.sleep(3)
    print(k("get", "flinkdeployment", "-n", namespace), flush=True)
    k("apply", "-f", "-", stdin=yaml.safe_dump(policy))
    log = Path(info.log_dir) / f"controller-{namespace}.log"
    controller = ControllerProcess(info.controller_kubeconfig, info.prometheus_url,
                                   stack.proxy_env(rest_url), log,
                                   namespaces=(namespace,)).start()
    print(f"controller running (log: {log})", flush=True)
    selector = f'namespace="{namespace}",flinkdeployment="{NAME}"'
    target = float(realflink.STATE_JOB_CONF["hybridscaler.job.rate"])
    samples: list[Sample] = []
    held: set[tuple[str | None, str | None]] = set()  # (decision time, vertex) held back
    hsp: dict[str, Any] = {}
    t0, last_step, steady_since = time.monotonic(), -1, None
    try:
        while time.monotonic() - t0 < seconds:
            achieved = prom("sum(rate(flink_taskmanager_job_task_operator_numRecordsIn"
                            f'{{{selector},operator_name="counter"}}[20s]))')
            deployment = yaml.safe_load(
                k("get", "flinkdeployment", "-n", namespace, NAME, "-o", "yaml"))
            hsp = yaml.safe_load(k("get", "hsp", "-n", namespace, NAME, "-o", "yaml"))
            step = int((hsp.get("status") or {}).get("step") or 0)
            parallelism, managed = _spec_view(deployment)
            samples.append(Sample(time.monotonic() - t0, achieved, target, parallelism,
                                  managed, step))
            decision = (hsp.get("status") or {}).get("lastDecision") or {}
            for v in decision.get("vertices") or []:
                if v.get("branch") == "cache-warming":
                    held.add((decision.get("time"), v.get("vertexName") or v.get("vertexId")))
            if step != last_step:
                print(k("get", "hsp", "-n", namespace), flush=True)
                last_step = step
            running = ((deployment.get("status") or {}).get("jobStatus") or {}).get(
                "state") == "RUNNING"
            converged = (running and achieved >= 0.95 * target
                         and realflink.settled(hsp.get("status") or {}))
            steady_since = (steady_since or time.monotonic()) if converged else None
            if steady_since is not None and time.monotonic() - steady_since > 60:
                break
            time.sleep(5)
        print(k("describe", "hsp", "-n", namespace, NAME), flush=True)
        print(surface(hsp, held), flush=True)
        plot(samples, plot_path,
             f"StateJob on real Flink {flink}: {last_step} reconfigurations")
        print(f"convergence plot: {plot_path}", flush=True)
    finally:
        controller.stop()
        if not keep:
            k("delete", "namespace", namespace, "--wait=false")
            if started:
                stack.down()


def main(
    flink: Annotated[str, typer.Option(help="the Flink to run: 1.20 (RocksDB) or 2.2 (ForSt)")]
        = realflink.DEFAULT_FLINK,
    build: Annotated[bool, typer.Option(help="build the job and flink-plugin first")] = False,
    seconds: Annotated[float, typer.Option(help="stop after this long at the latest")] = 900,
    plot_path: Annotated[Path, typer.Option("--plot", help="PNG to write")]
        = Path("out/demo-real.png"),
    keep: Annotated[bool, typer.Option(help="leave the stack and namespace running")] = False,
) -> None:
    """Run the demo on real Flink: deploy StateJob and its policy, watch the controller."""
    if flink not in realflink.BUILDS:
        raise typer.BadParameter(f"one of {', '.join(realflink.BUILDS)}", param_hint="--flink")
    run(flink, seconds, plot_path, keep, build)


if __name__ == "__main__":
    typer.run(main)
