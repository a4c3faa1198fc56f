"""The twin and a Prometheus on the host, for a controller running in a kind pod.

No JobManager runs in the kind cluster, so the stand-in (e2e/standin.py: the twin and
the Flink operator's part) watches the kind API server from the host, and a Prometheus
scrapes the twin there. Both listen on the host's address on kind's podman network
(the node's gateway), which pods reach through the node's masquerading bridge.
`chart_values` is what the chart needs to use them: that Prometheus, and the twin's
HTTP proxy for the FlinkDeployments' REST Service names, as the local tier does
(`e2e.stack.proxy_env`).

    python -m e2e.kind_twin start --kubeconfig K --run-dir D   prints the chart's values file
    python -m e2e.kind_twin wait --run-dir D --job NAMESPACE/NAME   until the job meets its target
    python -m e2e.kind_twin stop --run-dir D
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import requests
import yaml

from e2e.stack import DEFAULT_DOWNTIME_SCALE, find_tools, write_prometheus_config

ROOT = Path(__file__).resolve().parent.parent
# The in-cluster API server's Service address (e2e/kind/cluster.yaml's serviceSubnet).
API_SERVICE_IP = "10.96.0.1"
STATE = "kind-twin.json"
# The host's own proxy settings must not route calls to the gateway address.
_http = requests.Session()
_http.trust_env = False


class KindTwinError(RuntimeError):
    pass


@dataclass
class HostTwin:
    host: str
    twin_port: int
    prometheus_port: int
    run_dir: str
    pids: dict[str, int] = field(default_factory=dict)
    # Each process's start time (clock ticks since boot), so that a stop from a stale
    # state file never signals a process that reuses one of these PIDs.
    started: dict[str, int] = field(default_factory=dict)

    @property
    def twin_url(self) -> str:
        return f"http://{self.host}:{self.twin_port}"

    @property
    def prometheus_url(self) -> str:
        return f"http://{self.host}:{self.prometheus_port}"

    def status(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The twin's view of a job (state, source and target rate), None if it runs none."""
        reply = _http.get(f"{self.twin_url}/control/jobs/{namespace}/{name}", timeout=5)
        return dict(reply.json()) if reply.ok else None

    def converged(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The job's status once it runs at (95 % of) its target rate, else None."""
        status = self.status(namespace, name) or {}
        ok = status.get("state") == "RUNNING" and \
            status["sourceRate"] >= 0.95 * status["targetRate"]
        return status if ok else None

    def tail(self, name: str, lines: int = 25) -> str:
        log = Path(self.run_dir) / f"{name}.log"
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])

    def chart_values(self) -> dict[str, Any]:
        """Values for `helm install`: Prometheus is the host's; the REST Services' names go
        through the twin's proxy; the API server (HTTPS) and Prometheus go direct."""
        direct = f"{self.host},{API_SERVICE_IP},localhost,127.0.0.1"
        return {
            "defaultConfiguration": {"prometheusUrl": self.prometheus_url},
            "operatorPod": {"env": [{"name": "http_proxy", "value": self.twin_url},
                                    {"name": "no_proxy", "value": direct}]},
        }


def host_address_for_pods(network: str = "kind") -> str:
    """The host's IPv4 address on kind's podman network: the nodes' gateway."""
    done = subprocess.run(["podman", "network", "inspect", network], capture_output=True,
                          text=True)
    if done.returncode != 0:
        raise KindTwinError(f"podman network inspect {network}: {done.stderr.strip()} "
                            "(is the kind cluster up? e2e/scripts/kind.sh up)")
    [spec] = json.loads(done.stdout)
    gateways = [s["gateway"] for s in spec.get("subnets") or [] if ":" not in s["gateway"]]
    if not gateways:
        raise KindTwinError(f"podman network {network} has no IPv4 gateway")
    return str(gateways[0])


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _answers(url: str) -> bool:
    try:
        return _http.get(url, timeout=2).ok
    except requests.RequestException:
        return False


def start(kubeconfig: str, run_dir: Path, timeout_s: float = 120) -> HostTwin:
    """Start the stand-in and Prometheus on the host; return once both answer."""
    host = host_address_for_pods()
    run_dir.mkdir(parents=True, exist_ok=True)
    twin = HostTwin(host, _free_port(host), _free_port(host), str(run_dir))
    targets = run_dir / "targets"
    targets.mkdir(exist_ok=True)
    config = write_prometheus_config(run_dir, twin.twin_port, targets, twin_host=host)
    argvs = {
        # No pods: a real kubelet would pull a Flink image for them, and TaskManager-sized
        # requests do not fit the node. The controller needs none of them.
        "standin": [sys.executable, "-m", "e2e.standin", "--kubeconfig", kubeconfig,
                    "--host", host, "--port", str(twin.twin_port), "--no-pods",
                    "--downtime-scale", str(DEFAULT_DOWNTIME_SCALE)],
        "prometheus": [find_tools().prometheus, f"--config.file={config}",
                       f"--storage.tsdb.path={run_dir / 'prometheus-data'}",
                       f"--web.listen-address={host}:{twin.prometheus_port}",
                       "--log.level=warn"],
    }
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    processes = {}
    try:
        for name, argv in argvs.items():
            with (run_dir / f"{name}.log").open("w") as log:
                processes[name] = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log,
                                                   stderr=subprocess.STDOUT,
                                                   start_new_session=True)
            twin.pids[name] = processes[name].pid
            twin.started[name] = _start_time(processes[name].pid) or 0
            (run_dir / STATE).write_text(json.dumps(asdict(twin)))
    except OSError as error:
        stop(twin)
        raise KindTwinError(f"could not start {name}: {error}") from error
    deadline = time.monotonic() + timeout_s
    for name, url in (("standin", f"{twin.twin_url}/metrics"),
                      ("prometheus", f"{twin.prometheus_url}/-/ready")):
        while not _answers(url):
            if processes[name].poll() is not None or time.monotonic() > deadline:
                stop(twin)
                raise KindTwinError(f"{name} did not answer on {url}; its log ends:\n"
                                    f"{twin.tail(name)}")
            time.sleep(1)
    return twin


def stop(twin: HostTwin, grace_s: float = 20) -> None:
    ours = [pid for name, pid in twin.pids.items()
            if _start_time(pid) == twin.started.get(name)]
    for pid in ours:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for pid in ours:
        while time.monotonic() < deadline and _running(pid):
            time.sleep(0.2)
        if _running(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    (Path(twin.run_dir) / STATE).unlink(missing_ok=True)


def _start_time(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat (after the command name, which may hold spaces)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


def _running(pid: int) -> bool:
    with contextlib.suppress(ChildProcessError):  # not ours: started by the CLI's start
        if os.waitpid(pid, os.WNOHANG)[0]:  # ours, and reaped now
            return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["start", "wait", "stop"])
    parser.add_argument("--run-dir", required=True, type=Path)
    parser.add_argument("--kubeconfig", help="the kind cluster's (start)")
    parser.add_argument("--job", help="NAMESPACE/NAME of a FlinkDeployment (wait)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds (wait)")
    args = parser.parse_args()
    state = args.run_dir / STATE
    try:
        if args.action == "start":
            if not args.kubeconfig:
                parser.error("start needs --kubeconfig")
            twin = start(args.kubeconfig, args.run_dir)
            values = args.run_dir / "chart-values.yaml"
            values.write_text(yaml.safe_dump(twin.chart_values()))
            print(values)
        elif args.action == "wait":
            if not args.job or "/" not in args.job:
                parser.error("wait needs --job NAMESPACE/NAME")
            twin = HostTwin(**json.loads(state.read_text()))
            namespace, name = args.job.split("/", 1)
            deadline = time.monotonic() + args.timeout
            while (status := twin.converged(namespace, name)) is None:
                if time.monotonic() > deadline:
                    sys.exit(f"kind_twin: {args.job} did not reach its target rate in "
                             f"{args.timeout:.0f} s: {twin.status(namespace, name)}")
                time.sleep(5)
            print(f"{args.job}: {status['sourceRate']:,.0f}/s for a target of "
                  f"{status['targetRate']:,.0f}/s")
        elif state.is_file():
            stop(HostTwin(**json.loads(state.read_text())))
    except (KindTwinError, OSError) as error:
        sys.exit(f"kind_twin: {error}")


if __name__ == "__main__":
    main()
