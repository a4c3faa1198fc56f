"""`make demo`: the e2e stack, a q11-like FlinkDeployment with its policy, and the controller.

Prints `kubectl get hsp` and `kubectl describe hsp` as the policy converges, and
writes a PNG of the convergence (achieved vs target rate, parallelism, managed
memory). `ControllerProcess` is also what the e2e tests run.

    python -m e2e.demo [--seconds 300] [--plot out/demo-q11.png] [--keep]
"""

from __future__ import annotations

import itertools
import math
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import requests
import typer
import yaml

from policies.spec import MemoryScaling

REPO = Path(__file__).resolve().parent.parent
HYBRID_SCALER = Path(sys.executable).parent / "hybrid-scaler"


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ControllerProcess:
    """`hybrid-scaler run` as a user starts it, with the controller's own kubeconfig."""

    def __init__(self, kubeconfig: str, prometheus_url: str, proxy_env: Mapping[str, str],
                 log: Path, namespaces: tuple[str, ...] = (),
                 allow_prometheus: tuple[str, ...] = ("127.0.0.1/32",),
                 extra_args: tuple[str, ...] = ()) -> None:
        """`proxy_env` (`StackInfo.controller_env()`) routes the default `--flink-rest-url`
        (each FlinkDeployment's in-cluster REST Service) to the twin, as cluster DNS would."""
        self.kubeconfig, self.log, self.proxy_env = kubeconfig, log, dict(proxy_env)
        self.metrics_port, self.liveness_port = free_port(), free_port()
        self.argv = [
            str(HYBRID_SCALER), "run", "--standalone", "--prometheus-url", prometheus_url,
            "--metrics-port", str(self.metrics_port),
            "--liveness-port", str(self.liveness_port),
            *(arg for ns in namespaces for arg in ("--namespace", ns)),
            # Tests and demos give policies Prometheus instances of their own, on loopback.
            *(arg for a in allow_prometheus for arg in ("--allow-prometheus", a)),
            *extra_args,
        ]
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> ControllerProcess:
        with self.log.open("a") as out:
            self.process = subprocess.Popen(
                self.argv, stdout=out, stderr=subprocess.STDOUT,
                env={**os.environ, "KUBECONFIG": self.kubeconfig, **self.proxy_env},
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the controller exited; see {self.log}")
            try:
                url = f"http://127.0.0.1:{self.liveness_port}/healthz"
                if requests.get(url, timeout=1).status_code == 200:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"the controller's liveness probe never answered; see {self.log}")

    def kill9(self) -> None:
        """`kill -9`: no shutdown handler runs, nothing is flushed."""
        if self.process is not None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)
            self.process = None

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
            self.process = None

    def metrics(self) -> str:
        return requests.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5).text


def flink_deployment(namespace: str, name: str, model: str = "q11",
                     upgrade_mode: str = "savepoint") -> dict[str, Any]:
    """A FlinkDeployment as a Flink operator user writes it; the twin runs `model`."""
    return {
        "apiVersion": "flink.apache.org/v1beta1", "kind": "FlinkDeployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "image": "flink:1.20", "flinkVersion": "v1_20", "serviceAccount": "flink",
            "flinkConfiguration": {"hybridscaler.twin.job-model": model,
                                   "taskmanager.numberOfTaskSlots": "4"},
            "jobManager": {"resource": {"cpu": 1, "memory": "1024m"}},
            "taskManager": {"replicas": 1, "resource": {"cpu": 4, "memory": "2048m"}},
            "job": {"jarURI": "local:///opt/flink/usrlib/job.jar",
                    "upgradeMode": upgrade_mode, "state": "running"},
        },
    }


def policy(namespace: str, name: str, target: str, mode: str = "Active",
           **spec: Any) -> dict[str, Any]:
    """A HybridScalingPolicy with short windows, so a demo or test takes minutes."""
    metrics = {"window": "20s", "stabilization": "10s", "resolution": "5s",
               **spec.pop("metrics", {})}
    return {
        "apiVersion": "hybridscaler.dev/v1alpha1", "kind": "HybridScalingPolicy",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"targetRef": {"name": target}, "mode": mode, "metrics": metrics, **spec},
    }


@dataclass
class Sample:
    t: float
    achieved: float
    target: float
    parallelism: dict[str, int] = field(default_factory=dict)
    managed_mib: dict[str, float] = field(default_factory=dict)
    step: int = 0


def plot(samples: list[Sample], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (rate, tasks, memory) = plt.subplots(3, 1, figsize=(8, 8), sharex=True)
    ts = [s.t for s in samples]
    rate.plot(ts, [s.achieved for s in samples], label="achieved (source) rate")
    rate.plot(ts, [s.target for s in samples], "--", label="target rate")
    rate.set_ylabel("records/s")
    rate.legend(loc="lower right")
    # An operator not in a sample (not yet in the spec) is a gap, not zero.
    for uid in samples[-1].parallelism if samples else ():
        tasks.step(ts, [s.parallelism.get(uid, math.nan) for s in samples], where="post",
                   label=uid)
        memory.step(ts, [s.managed_mib.get(uid, math.nan) for s in samples], where="post",
                    label=uid)
    tasks.set_ylabel("parallelism")
    tasks.legend(loc="upper left", fontsize="small")
    memory.set_ylabel("managed MiB per task")
    memory.set_xlabel("seconds since the policy was applied")
    for s0, s1 in itertools.pairwise(samples):
        if s1.step != s0.step:
            for ax in (rate, tasks, memory):
                ax.axvline(s1.t, color="grey", alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run_demo(seconds: float, plot_path: Path, keep: bool) -> None:
    from e2e import stack

    info, started = stack.up(echo=lambda line: print(line, flush=True))
    kubectl = stack.find_tools().kubectl

    def k(*args: str, stdin: str | None = None) -> str:
        done = subprocess.run([kubectl, "--kubeconfig", info.kubeconfig, *args], input=stdin,
                              capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    namespace = f"demo-{uuid.uuid4().hex[:6]}"
    k("create", "namespace", namespace)
    k("apply", "-f", "-", stdin=yaml.safe_dump_all([
        flink_deployment(namespace, "q11"), policy(namespace, "q11", "q11")]))
    log = Path(info.log_dir) / f"controller-{namespace}.log"
    controller = ControllerProcess(info.controller_kubeconfig, info.prometheus_url,
                                   info.controller_env(), log).start()
    print(f"controller running (log: {log})", flush=True)
    samples: list[Sample] = []
    t0, last_step, steady_since = time.monotonic(), -1, None
    try:
        while time.monotonic() - t0 < seconds:
            twin = requests.get(f"{info.twin_url}/control/jobs/{namespace}/q11", timeout=5).json()
            hsp = yaml.safe_load(k("get", "hsp", "-n", namespace, "q11", "-o", "yaml"))
            step = int((hsp.get("status") or {}).get("step") or 0)
            samples.append(Sample(
                time.monotonic() - t0, float(twin["sourceRate"]), float(twin["targetRate"]),
                {u: c["parallelism"] for u, c in twin["configuration"].items()},
                {u: MemoryScaling().managed_mib(c["memoryLevel"])
                 for u, c in twin["configuration"].items()},
                step,
            ))
            if step != last_step:
                print(k("get", "hsp", "-n", namespace), flush=True)
                last_step = step
            converged = (twin["state"] == "RUNNING"
                         and twin["sourceRate"] >= 0.95 * twin["targetRate"])
            steady_since = (steady_since or time.monotonic()) if converged else None
            if steady_since is not None and time.monotonic() - steady_since > 40:
                break
            time.sleep(2)
        print(k("describe", "hsp", "-n", namespace, "q11"), flush=True)
        plot(samples, plot_path, f"Nexmark q11 on the twin: {last_step} reconfigurations")
        print(f"convergence plot: {plot_path}", flush=True)
    finally:
        controller.stop()
        if not keep:
            k("delete", "namespace", namespace, "--wait=false")
            if started:
                stack.down()


def main(
    seconds: Annotated[float, typer.Option(help="stop after this long at the latest")] = 420,
    plot_path: Annotated[Path, typer.Option("--plot", help="PNG to write")]
        = Path("out/demo-q11.png"),
    keep: Annotated[bool, typer.Option(help="leave the stack and namespace running")] = False,
) -> None:
    """Run the demo: deploy q11 and its policy, and watch the controller converge."""
    run_demo(seconds, plot_path, keep)


if __name__ == "__main__":
    typer.run(main)
