"""One controller process, many policies: CPU, RSS and evaluation latency.

Brings up (or reuses) the e2e stack's API server, serves N twins from one
`hybrid-scaler twin serve` process, scrapes them with a Prometheus of its own,
creates N FlinkDeployments and N HybridScalingPolicies (Recommend mode, one
evaluation every 15 s each), runs `hybrid-scaler run` and measures it after a
warm-up. Evaluation latency "excluding network" is the controller's own
`hybridscaler_decide_seconds` histogram (DS2 + Justin + placement); the whole pass,
network included, is reported beside it.

    python -m bench.controller [--policies 200] [--interval 15] [--seconds 120]
                               [--hostile 12] [--json]

Targets (issue 7): < 0.5 core and < 300 MB RSS for 200 policies at 15 s.

Then (issue 16) `--hostile` policies in a namespace of their own, each pointing its
`spec.metrics.prometheusUrl` at a loopback address that accepts and never answers,
join for a second measurement of the same length: the healthy policies' decision gap
(time between two `status.lastDecision`s of one policy) is reported for both phases.
Printed, never asserted.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any

import requests
import typer
import yaml
from prometheus_client.parser import text_string_to_metric_families

from e2e import stack
from e2e.demo import ControllerProcess, flink_deployment, free_port, policy
from policies.decision import epoch_seconds
from tests.controller.netfaults import Blackhole
from tests.controller.promproc import PrometheusProcess

MODELS = ("q11", "q5", "q3", "read")


def proc_cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def histogram(text: str, name: str) -> list[tuple[float, float]]:
    """(upper bound, cumulative count) of one histogram in exposition text."""
    for family in text_string_to_metric_families(text):
        if family.name == name:
            return sorted((float(s.labels["le"]), s.value) for s in family.samples
                          if s.name.endswith("_bucket"))
    return []


def delta(after: list[tuple[float, float]], before: list[tuple[float, float]]
          ) -> list[tuple[float, float]]:
    old = dict(before)
    return [(le, n - old.get(le, 0.0)) for le, n in after]


def quantile(buckets: list[tuple[float, float]], q: float) -> float | None:
    """histogram_quantile(), as PromQL interpolates within a bucket."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank, lower, below = q * buckets[-1][1], 0.0, 0.0
    for le, count in buckets:
        if count >= rank:
            if le == float("inf"):
                return lower
            return lower + (le - lower) * (rank - below) / max(count - below, 1e-12)
        lower, below = le, count
    return lower


class Gaps:
    """Decision gaps of a namespace's policies, from `status.lastDecision.time`."""

    def __init__(self, kubectl: list[str], namespace: str) -> None:
        self.kubectl, self.namespace = kubectl, namespace
        self.last: dict[str, str] = {}
        self.stamps: dict[str, list[float]] = {}

    def poll(self) -> None:
        done = subprocess.run([*self.kubectl, "get", "hsp", "-n", self.namespace, "-o", "json"],
                              capture_output=True, text=True)
        if done.returncode != 0:
            return
        for item in json.loads(done.stdout)["items"]:
            stamp = ((item.get("status") or {}).get("lastDecision") or {}).get("time")
            name = item["metadata"]["name"]
            if stamp and self.last.get(name) != stamp:
                self.last[name] = stamp
                self.stamps.setdefault(name, []).append(float(epoch_seconds(stamp)))

    def reset(self) -> None:
        """Forget the stamps so far; the next poll's are the phase's first."""
        self.stamps = {name: ts[-1:] for name, ts in self.stamps.items()}

    def summary(self) -> dict[str, float | int | None]:
        gaps = sorted(b - a for ts in self.stamps.values() for a, b in itertools.pairwise(ts))

        def pick(q: float) -> float | None:
            return round(gaps[min(len(gaps) - 1, int(q * len(gaps)))], 1) if gaps else None

        return {"gaps": len(gaps), "p50_s": pick(0.5), "p95_s": pick(0.95),
                "max_s": round(gaps[-1], 1) if gaps else None}



def measure(seconds: float, pid: int, gaps: Gaps) -> tuple[float, float, list[float]]:
    """Poll decisions and RSS for `seconds`; (cpu seconds used, elapsed, rss samples)."""
    cpu0, t0 = proc_cpu_seconds(pid), time.monotonic()
    rss = []
    while time.monotonic() - t0 < seconds:
        rss.append(proc_rss_mb(pid))
        gaps.poll()
        time.sleep(2)
    return proc_cpu_seconds(pid) - cpu0, time.monotonic() - t0, rss


def run(policies: int, interval: float, seconds: float, warmup: float,
        hostile: int = 12) -> dict[str, Any]:
    info, started = stack.up(echo=lambda line: print(line, file=sys.stderr, flush=True))
    work = Path(tempfile.mkdtemp(prefix="bench-controller-"))
    names = [f"p{i:03d}" for i in range(policies)]
    # A fresh namespace: the last run's may still be terminating.
    namespace = f"bench-controller-{os.getpid()}"
    hostile_namespace = f"{namespace}-hostile"
    twin_port = free_port()
    twin_log = (work / "twin.log").open("w")
    twin = subprocess.Popen(
        [str(Path(sys.executable).parent / "hybrid-scaler"), "twin", "serve", "--port",
         str(twin_port), *(a for i, n in enumerate(names)
                           for a in ("--job", f"{namespace}/{n}={MODELS[i % len(MODELS)]}")),
         "--job", f"{hostile_namespace}/victim=read"],
        stdout=twin_log, stderr=subprocess.STDOUT)
    twin_url = f"http://127.0.0.1:{twin_port}"
    prometheus: PrometheusProcess | None = None
    controller: ControllerProcess | None = None
    holes = [Blackhole() for _ in range(hostile)]
    kubectl = [stack.find_tools().kubectl, "--kubeconfig", info.kubeconfig]
    try:
        for _ in range(100):
            try:
                if requests.get(f"{twin_url}/control/jobs", timeout=2).ok:
                    break
            except requests.RequestException:
                pass
            time.sleep(0.3)
        else:
            raise RuntimeError(f"the twins never answered; see {work / 'twin.log'}")
        prometheus = PrometheusProcess(work, [{"job_name": "twins", "static_configs": [
            {"targets": [f"127.0.0.1:{twin_port}"]}]}], interval_s=5)
        for ns in (namespace, hostile_namespace):
            subprocess.run([*kubectl, "create", "namespace", ns], check=True,
                           capture_output=True)
        docs: list[dict[str, Any]] = []
        for n in names:
            deployment = flink_deployment(namespace, n)
            # Not a twin model the stand-in runs: this benchmark's twins are served above.
            del deployment["spec"]["flinkConfiguration"]["hybridscaler.twin.job-model"]
            docs += [deployment, policy(namespace, n, n, mode="Recommend", metrics={
                "prometheusUrl": prometheus.url, "window": f"{interval:g}s",
                "resolution": f"{interval:g}s", "stabilization": "0s"})]
        applied = subprocess.run([*kubectl, "apply", "--server-side", "-f", "-"],
                                 input=yaml.safe_dump_all(docs), capture_output=True, text=True)
        if applied.returncode != 0:
            raise RuntimeError(f"kubectl apply failed: {applied.stderr[-2000:]}")
        controller = ControllerProcess(info.controller_kubeconfig, prometheus.url,
                                       stack.proxy_env(twin_url), work / "controller.log",
                                       namespaces=(namespace, hostile_namespace)).start()
        assert controller.process is not None
        pid = controller.process.pid
        gaps = Gaps(kubectl, namespace)
        time.sleep(warmup)
        gaps.poll()
        before_text = controller.metrics()
        cpu, elapsed, rss = measure(seconds, pid, gaps)
        after_text = controller.metrics()
        healthy_alone = gaps.summary()
        hostile_result: dict[str, Any] = {}
        if hostile:
            victim = flink_deployment(hostile_namespace, "victim")
            del victim["spec"]["flinkConfiguration"]["hybridscaler.twin.job-model"]
            docs = [victim, *(policy(hostile_namespace, f"h{i:02d}", "victim", mode="Recommend",
                                     metrics={"prometheusUrl": hole.url,
                                              "window": f"{interval:g}s",
                                              "resolution": f"{interval:g}s",
                                              "stabilization": "0s"})
                              for i, hole in enumerate(holes))]
            subprocess.run([*kubectl, "apply", "--server-side", "-f", "-"], check=True,
                           input=yaml.safe_dump_all(docs), capture_output=True, text=True)
            time.sleep(interval * 2)  # their first evaluations are due
            gaps.reset()
            hostile_cpu, hostile_elapsed, hostile_rss = measure(seconds, pid, gaps)
            hostile_result = {
                "hostile_policies": hostile,
                "healthy_gap_with_hostile": gaps.summary(),
                "blackhole_connections": sum(h.accepted for h in holes),
                "cpu_cores_with_hostile": round(hostile_cpu / hostile_elapsed, 3),
                "rss_mb_max_with_hostile": round(max(hostile_rss), 1),
            }
        decide = delta(histogram(after_text, "hybridscaler_decide_seconds"),
                       histogram(before_text, "hybridscaler_decide_seconds"))
        passes = delta(histogram(after_text, "hybridscaler_reconcile_seconds"),
                       histogram(before_text, "hybridscaler_reconcile_seconds"))
        return {
            "policies": policies, "interval_s": interval, "measured_s": round(elapsed, 1),
            "cpu_cores": round(cpu / elapsed, 3),
            "rss_mb_max": round(max(rss), 1),
            "evaluations": int(decide[-1][1]) if decide else 0,
            "evaluations_expected": int(policies * elapsed / interval),
            "healthy_gap_alone": healthy_alone,
            **hostile_result,
            "decide_p50_ms": _ms(quantile(decide, 0.5)),
            "decide_p99_ms": _ms(quantile(decide, 0.99)),
            "pass_p50_ms": _ms(quantile(passes, 0.5)), "pass_p99_ms": _ms(quantile(passes, 0.99)),
            "logs": str(work),
        }
    finally:
        if controller is not None:
            controller.stop()
        for ns in (namespace, hostile_namespace):
            subprocess.run([*kubectl, "delete", "namespace", ns, "--wait=false"],
                           capture_output=True)
        for hole in holes:
            hole.close()
        if prometheus is not None:
            prometheus.stop()
        twin.terminate()
        twin.wait(timeout=20)
        if started:
            stack.down()


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 2)


def main(
    policies: Annotated[int, typer.Option(help="policies (and twins)")] = 200,
    interval: Annotated[float, typer.Option(help="seconds between evaluations")] = 15,
    seconds: Annotated[float, typer.Option(help="measurement time after warm-up")] = 120,
    warmup: Annotated[float, typer.Option(help="seconds before measuring")] = 60,
    hostile: Annotated[int, typer.Option(
        help="policies pointing at hung Prometheus addresses, added for a second phase")] = 12,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Measure one controller process running many policies."""
    result = run(policies, interval, seconds, warmup, hostile)
    if as_json:
        typer.echo(json.dumps(result))
        return
    for key, value in result.items():
        typer.echo(f"{key:>22}: {value}")
    typer.echo("targets: cpu_cores < 0.5, rss_mb_max < 300")


if __name__ == "__main__":
    typer.run(main)
