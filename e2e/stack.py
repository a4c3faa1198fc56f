"""The local e2e stack: a real control plane, real Prometheus and the twin, no Docker.

    python -m e2e.stack up       # idempotent: reuses a healthy running stack
    python -m e2e.stack status   # one line per component
    python -m e2e.stack env      # shell exports (KUBECONFIG, URLs) of the running stack
    python -m e2e.stack down     # stops everything, removes the run directory

What runs (all on 127.0.0.1, ports picked free at start; docs/e2e.md has the
details): etcd, kube-apiserver (RBAC, token auth, service-account tokens),
kube-controller-manager, kube-scheduler, kwok (fake nodes whose pods become
Running), Prometheus scraping the twin every 5 s, and the stand-in
(`e2e/standin.py`), which plays the Flink Kubernetes Operator plus Flink for
FlinkDeployments that name a twin job model. The real FlinkDeployment CRD is
extracted from Maven Central's operator-api jar at set-up, never committed.

State (ports, pids, paths) lives in the run directory, `$HYBRID_SCALER_E2E_DIR`
or `${XDG_RUNTIME_DIR:-/tmp}/hybrid-scaler-e2e`; logs in `<run dir>-logs`,
which `down` keeps for post-mortems.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import requests
import typer
import yaml

from e2e import pki

REPO = Path(__file__).resolve().parent.parent
K8S_VERSION = "v1.32.3"
OPERATOR_API = ("org.apache.flink", "flink-kubernetes-operator-api", "1.10.0")
FLINK_CRD_ENTRY = "META-INF/fabric8/flinkdeployments.flink.apache.org-v1.yml"
HSP_CRD = REPO / "crds" / "hybridscalingpolicy.yaml"
CHART = REPO / "charts" / "hybrid-scaler"
CONTROLLER_NAMESPACE = "hybrid-scaler-system"
CONTROLLER_SERVICE_ACCOUNT = "hybrid-scaler"
FLINK_OPERATOR_NAMESPACE = "flink-operator"  # where the e2e tests put its ConfigMap
KWOK_NODES = 4
KWOK_NODE_CAPACITY = {"cpu": "32", "memory": "128Gi", "pods": "110"}
SCRAPE_INTERVAL_S = 5
# Flink restarts take tens of seconds; tests need seconds. The twin's modelled
# downtime is multiplied by this (HYBRID_SCALER_E2E_DOWNTIME_SCALE overrides).
DEFAULT_DOWNTIME_SCALE = 0.1
# Attempts at start-up, each with freshly picked ports (see `_port_taken`).
START_ATTEMPTS = 3
BUILD_HINT = "run: bash e2e/scripts/build-tools.sh all (or: bash scripts/bootstrap.sh all)"


class PrerequisiteMissing(RuntimeError):
    """A program or file the stack needs is absent; the message says how to get it."""


class StackError(RuntimeError):
    """A component did not come up; the message names it and quotes its log."""


# --- where things are -------------------------------------------------------------------


def cache_dir() -> Path:
    explicit = os.environ.get("HYBRID_SCALER_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "flink-hybrid-scaler"


def default_run_dir() -> Path:
    explicit = os.environ.get("HYBRID_SCALER_E2E_DIR")
    if explicit:
        return Path(explicit)
    return Path(os.environ.get("XDG_RUNTIME_DIR") or "/tmp") / "hybrid-scaler-e2e"


def log_dir_for(run_dir: Path) -> Path:
    return run_dir.with_name(run_dir.name + "-logs")


def proxy_env(flink_proxy: str) -> dict[str, str]:
    """Environment for a controller process outside the cluster: its REST calls to the
    in-cluster Service names go through the twin's proxy; loopback (the API server,
    Prometheus) goes direct. Only plain-HTTP calls consult `http_proxy`."""
    direct = "127.0.0.1,localhost"
    return {"http_proxy": flink_proxy, "HTTP_PROXY": flink_proxy,
            "no_proxy": direct, "NO_PROXY": direct}


@dataclass(frozen=True)
class Tools:
    etcd: str
    kube_apiserver: str
    kube_controller_manager: str
    kube_scheduler: str
    kwok: str
    kubectl: str
    prometheus: str
    helm: str | None


def _which(name: str, hint: str, cached: bool = False) -> str:
    if cached:
        built = cache_dir() / "bin" / name
        if os.access(built, os.X_OK):
            return str(built)
    found = shutil.which(name)
    if not found:
        where = f" (looked in {cache_dir() / 'bin'} and PATH)" if cached else ""
        raise PrerequisiteMissing(f"{name} not found{where}: {hint}")
    return found


def find_tools() -> Tools:
    _which("openssl", "apt-get install openssl")
    helm_path = cache_dir() / "bin" / "helm"
    return Tools(
        etcd=_which("etcd", "apt-get install etcd-server"),
        kube_apiserver=_which("kube-apiserver", BUILD_HINT, cached=True),
        kube_controller_manager=_which("kube-controller-manager", BUILD_HINT, cached=True),
        kube_scheduler=_which("kube-scheduler", BUILD_HINT, cached=True),
        kwok=_which("kwok", BUILD_HINT, cached=True),
        kubectl=_which("kubectl", BUILD_HINT + " (builds kubectl when it is missing)", cached=True),
        prometheus=_which("prometheus", "apt-get install prometheus"),
        helm=str(helm_path) if os.access(helm_path, os.X_OK) else shutil.which("helm"),
    )


def flink_crd() -> Path:
    """The FlinkDeployment CRD of operator 1.10.0, extracted once from Maven Central's jar."""
    group, artifact, version = OPERATOR_API
    cached = cache_dir() / f"flinkdeployments.flink.apache.org-{version}.yml"
    if cached.is_file():
        return cached
    m2 = Path(os.environ.get("MAVEN_REPO") or Path.home() / ".m2" / "repository")
    jar = m2 / group.replace(".", "/") / artifact / version / f"{artifact}-{version}.jar"
    if not jar.is_file():
        mvn = _which("mvn", "apt-get install maven (fetches the FlinkDeployment CRD's jar)")
        done = subprocess.run(
            [mvn, "-B", "-q", "dependency:get", f"-Dartifact={group}:{artifact}:{version}",
             "-Dtransitive=false"], capture_output=True, text=True)
        if done.returncode != 0 or not jar.is_file():
            raise PrerequisiteMissing(
                f"could not fetch {group}:{artifact}:{version} with Maven: "
                f"{(done.stdout + done.stderr).strip()[-2000:]}")
    with zipfile.ZipFile(jar) as archive:
        text = archive.read(FLINK_CRD_ENTRY)
    cached.parent.mkdir(parents=True, exist_ok=True)
    tmp = cached.with_suffix(".tmp")
    tmp.write_bytes(text)
    tmp.replace(cached)
    return cached


# --- the running stack's description ------------------------------------------------------


@dataclass
class StackInfo:
    """Everything a client of the stack needs; saved as `state.json` in the run directory."""

    run_dir: str
    log_dir: str
    api_server: str
    kubeconfig: str  # admin (system:masters)
    controller_kubeconfig: str  # ServiceAccount hybrid-scaler-system/hybrid-scaler
    controller_rbac: bool  # whether the chart's RBAC was granted to that ServiceAccount
    ca_file: str
    admin_token: str
    prometheus_url: str
    prometheus_targets_dir: str  # file_sd: drop <name>.json here to add a scrape target
    twin_url: str  # the twin: /metrics, /control/jobs/..., and the proxy to each REST API
    downtime_scale: float
    started_at: float
    pids: dict[str, int] = field(default_factory=dict)

    def flink_rest_url(self, namespace: str, name: str) -> str:
        """A FlinkDeployment's JobManager REST address (`http://127.0.0.1:<port>`, no path):
        the twin gives each deployment a listener of its own, as each Flink cluster has."""
        reply = requests.get(f"{self.twin_url}/control/jobs/{namespace}/{name}", timeout=5)
        reply.raise_for_status()
        return str(reply.json()["restUrl"])

    @property
    def flink_proxy(self) -> str:
        """An HTTP proxy that answers for every FlinkDeployment's in-cluster REST Service
        (`http://<name>-rest.<namespace>.svc:8081`, the controller's default), standing in
        for cluster DNS: a controller given `http_proxy` needs no e2e-specific URL."""
        return self.twin_url

    def controller_env(self) -> dict[str, str]:
        return proxy_env(self.flink_proxy)

    def env(self) -> dict[str, str]:
        return {
            "KUBECONFIG": self.kubeconfig,
            "HYBRID_SCALER_E2E_DIR": self.run_dir,
            "HYBRID_SCALER_E2E_CONTROLLER_KUBECONFIG": self.controller_kubeconfig,
            "HYBRID_SCALER_E2E_PROMETHEUS_URL": self.prometheus_url,
            "HYBRID_SCALER_E2E_TWIN_URL": self.twin_url,
            "HYBRID_SCALER_E2E_FLINK_PROXY": self.flink_proxy,
        }

    def save(self) -> None:
        path = Path(self.run_dir) / "state.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2))
        tmp.replace(path)

    @classmethod
    def load(cls, run_dir: Path) -> StackInfo | None:
        try:
            return cls(**json.loads((run_dir / "state.json").read_text()))
        except (OSError, ValueError, TypeError):
            return None


# --- processes ----------------------------------------------------------------------------

# Popen objects of children started by this interpreter, so they are reaped (pytest
# brings the stack up in-process) and not garbage-collected while running.
_children: dict[int, subprocess.Popen[bytes]] = {}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _spawn(name: str, argv: Sequence[str], logs: Path, cwd: Path | None = None,
           env: Mapping[str, str] | None = None) -> int:
    # Own session and process group: survives the CLI's exit, and `down` can kill
    # the whole group (Prometheus or Python may fork helpers).
    with open(logs / f"{name}.log", "ab") as log:
        proc = subprocess.Popen(list(argv), stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True,
                                cwd=cwd, env=None if env is None else dict(env))
    _children[proc.pid] = proc
    return proc.pid


def _alive(pid: int) -> bool:
    child = _children.get(pid)
    if child is not None:
        return child.poll() is None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie is dead for our purposes.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def is_stack_process(pid: int, run_dir: str) -> bool:
    """The pid still runs a process of this stack (guards against pid reuse)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return False
    return run_dir in cmdline


def _stop(pids: Mapping[str, int], run_dir: str, grace_s: float = 10.0) -> None:
    mine = {name: pid for name, pid in pids.items()
            if _alive(pid) and is_stack_process(pid, run_dir)}
    for pid in mine.values():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(_alive(p) for p in mine.values()):
        time.sleep(0.1)
    for pid in mine.values():
        if _alive(pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        child = _children.pop(pid, None)
        if child is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=5)


def _tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _wait(what: str, ready: Callable[[], bool], pid: int | None, logs: Path,
          timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pid is not None and not _alive(pid):
            raise StackError(f"{what} exited during start-up; last lines of "
                             f"{logs / (what + '.log')}:\n{_tail(logs / (what + '.log'))}")
        with contextlib.suppress(requests.RequestException, OSError):
            if ready():
                return
        time.sleep(0.2)
    raise StackError(f"{what} not ready after {timeout_s:.0f} s; last lines of "
                     f"{logs / (what + '.log')}:\n{_tail(logs / (what + '.log'))}")


def _http_ok(url: str, **kwargs: Any) -> bool:
    return requests.get(url, timeout=2, **kwargs).status_code == 200


# --- kubectl ------------------------------------------------------------------------------


def kubectl(kubeconfig: str, *args: str, stdin: str | None = None,
            check: bool = True) -> subprocess.CompletedProcess[str]:
    kubectl_bin = find_tools().kubectl
    done = subprocess.run([kubectl_bin, "--kubeconfig", kubeconfig, *args], input=stdin,
                          capture_output=True, text=True, timeout=120)
    if check and done.returncode != 0:
        raise StackError(f"kubectl {' '.join(args)} failed: {done.stderr.strip()}")
    return done


def _kwok_nodes() -> str:
    nodes = []
    for i in range(KWOK_NODES):
        name = f"kwok-node-{i}"
        nodes.append({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
                "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                           "kubernetes.io/arch": "amd64", "type": "kwok"},
            },
            "status": {"capacity": KWOK_NODE_CAPACITY, "allocatable": KWOK_NODE_CAPACITY},
        })
    return yaml.safe_dump_all(nodes)


# --- up / down / status ---------------------------------------------------------------------


def health(info: StackInfo) -> dict[str, bool]:
    """Each component: its process is alive and, where it serves, it answers."""
    result = {name: _alive(pid) and is_stack_process(pid, info.run_dir)
              for name, pid in info.pids.items()}
    checks: dict[str, Callable[[], bool]] = {
        "kube-apiserver": lambda: _http_ok(
            info.api_server + "/readyz", verify=info.ca_file,
            headers={"Authorization": f"Bearer {info.admin_token}"}),
        "prometheus": lambda: _http_ok(info.prometheus_url + "/-/ready"),
        "standin": lambda: _http_ok(info.twin_url + "/metrics"),
    }
    for name, check in checks.items():
        if result.get(name):
            try:
                result[name] = check()
            except requests.RequestException:
                result[name] = False
    return result


def healthy(info: StackInfo) -> bool:
    states = health(info)
    return bool(states) and all(states.values())


def _register_user(run_dir: Path) -> None:
    """Note that this process uses the stack, so `down` from a shell will not pull it
    from under a test session or demo that is still running on it."""
    users = run_dir / "users"
    users.mkdir(exist_ok=True)
    (users / str(os.getpid())).write_text(" ".join(sys.argv))


def users(run_dir: Path) -> dict[int, str]:
    """Processes other than this one that use the stack and are still alive."""
    found = {}
    for entry in (run_dir / "users").glob("*"):
        pid = int(entry.name) if entry.name.isdigit() else 0
        if pid and pid != os.getpid() and Path(f"/proc/{pid}").exists():
            found[pid] = entry.read_text(errors="replace")
    return found


def down(run_dir: Path | None = None) -> None:
    run_dir = run_dir or default_run_dir()
    info = StackInfo.load(run_dir)
    if info is not None:
        # Stop clients before the API server, and etcd last, so nothing logs storms.
        order = ["standin", "prometheus", "kwok", "kube-scheduler", "kube-controller-manager",
                 "kube-apiserver", "etcd"]
        for name in order:
            if name in info.pids:
                _stop({name: info.pids[name]}, info.run_dir)
        _stop(info.pids, info.run_dir)
    shutil.rmtree(run_dir, ignore_errors=True)


def pytest_run_dir(pid: int) -> Path:
    """Where a pytest session (process `pid`) keeps a stack of its own."""
    shared = default_run_dir()
    return shared.with_name(f"{shared.name}-pytest-{pid}")


def reap_orphans() -> list[Path]:
    """Take down stacks of pytest sessions that died without tearing them down."""
    prefix = pytest_run_dir(0).name[:-1]
    reaped = []
    for run_dir in default_run_dir().parent.glob(prefix + "*"):
        pid = run_dir.name[len(prefix):]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            down(run_dir)
            reaped.append(run_dir)
    return reaped


def up(run_dir: Path | None = None, echo: Callable[[str], None] = print) -> tuple[StackInfo, bool]:
    """Bring the stack up; returns (info, started). A healthy running stack is reused."""
    run_dir = (run_dir or default_run_dir()).resolve()
    existing = StackInfo.load(run_dir)
    if existing is not None and healthy(existing):
        echo(f"e2e stack already up in {run_dir}; logs in {existing.log_dir}")
        _register_user(run_dir)
        return existing, False
    down(run_dir)  # whatever is left of a broken one
    tools = find_tools()
    crd = flink_crd()
    logs = log_dir_for(run_dir)
    shutil.rmtree(logs, ignore_errors=True)
    logs.mkdir(parents=True)
    echo(f"e2e stack: run dir {run_dir}; logs in {logs}")
    started = time.monotonic()
    for attempt in range(1, START_ATTEMPTS + 1):
        run_dir.mkdir(parents=True, mode=0o700)  # holds the admin token
        try:
            info = _start(tools, crd, run_dir, logs, echo)
            break
        except BaseException as error:
            partial = StackInfo.load(run_dir)
            if partial is not None:
                _stop(partial.pids, partial.run_dir)
            shutil.rmtree(run_dir, ignore_errors=True)
            if not (_port_taken(error) and attempt < START_ATTEMPTS):
                raise
            echo(f"a port picked for the stack was taken meanwhile; starting again ({error})")
    echo(f"e2e stack up in {time.monotonic() - started:.1f} s")
    _register_user(run_dir)
    return info, True


def _port_taken(error: BaseException) -> bool:
    """Whether a component failed because another process bound its port first: ports
    are picked free before the components bind them, and concurrent stacks (or any
    other program) may take one in between."""
    return isinstance(error, StackError) and "address already in use" in str(error).lower()


def _start(tools: Tools, crd: Path, run_dir: Path, logs: Path,
           echo: Callable[[str], None]) -> StackInfo:
    """etcd, then the API server (Prometheus meanwhile), then every client of the API
    server at once, then the cluster's objects (nodes, CRDs, the controller's identity),
    and last a wait until everything answers."""
    pki_dir = run_dir / "pki"
    pki.make_pki(pki_dir)
    tokens = pki.make_tokens(run_dir / "tokens.csv")
    ports = {name: free_port() for name in ("etcd", "etcd-peer", "apiserver", "prometheus", "twin")}
    ca = str(pki_dir / "ca.crt")
    api = f"https://127.0.0.1:{ports['apiserver']}"
    scale = float(os.environ.get("HYBRID_SCALER_E2E_DOWNTIME_SCALE", DEFAULT_DOWNTIME_SCALE))
    targets = run_dir / "prometheus-targets"
    targets.mkdir()
    info = StackInfo(
        run_dir=str(run_dir), log_dir=str(logs), api_server=api,
        kubeconfig=str(run_dir / "admin.kubeconfig"),
        controller_kubeconfig=str(run_dir / "controller.kubeconfig"), controller_rbac=False,
        ca_file=ca, admin_token=tokens["admin"],
        prometheus_url=f"http://127.0.0.1:{ports['prometheus']}",
        prometheus_targets_dir=str(targets),
        twin_url=f"http://127.0.0.1:{ports['twin']}", downtime_scale=scale,
        started_at=time.time(),
    )
    for who, (user, _) in pki.TOKEN_USERS.items():
        pki.write_kubeconfig(run_dir / f"{who}.kubeconfig", api, Path(ca), tokens[who], user)

    def start(name: str, argv: Sequence[str], **kw: Any) -> int:
        info.pids[name] = _spawn(name, argv, logs, **kw)
        info.save()
        return info.pids[name]

    etcd_url = f"http://127.0.0.1:{ports['etcd']}"
    peer_url = f"http://127.0.0.1:{ports['etcd-peer']}"
    pid = start("etcd", [
        tools.etcd, "--name", "e2e", "--data-dir", str(run_dir / "etcd"),
        "--listen-client-urls", etcd_url, "--advertise-client-urls", etcd_url,
        "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
        "--initial-cluster", f"e2e={peer_url}", "--log-level", "warn",
    ])
    _wait("etcd", lambda: _http_ok(etcd_url + "/health"), pid, logs)

    # Prometheus needs nothing else: start it now so it is ready with the API server.
    prom_config = write_prometheus_config(run_dir, ports["twin"], targets)
    prom_pid = start("prometheus", [
        tools.prometheus, f"--config.file={prom_config}",
        f"--storage.tsdb.path={run_dir / 'prometheus-data'}",
        f"--web.listen-address=127.0.0.1:{ports['prometheus']}", "--web.enable-lifecycle",
        "--storage.tsdb.retention.time=1d", "--log.level=warn",
    ])

    pid = start("kube-apiserver", [
        tools.kube_apiserver, "--etcd-servers", etcd_url,
        "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
        f"--secure-port={ports['apiserver']}",
        f"--cert-dir={run_dir / 'apiserver-certs'}",
        f"--tls-cert-file={pki_dir / 'apiserver.crt'}",
        f"--tls-private-key-file={pki_dir / 'apiserver.key'}",
        f"--client-ca-file={ca}",
        f"--token-auth-file={run_dir / 'tokens.csv'}",
        "--authorization-mode=Node,RBAC",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-account-key-file={pki_dir / 'sa.pub'}",
        f"--service-account-signing-key-file={pki_dir / 'sa.key'}",
        "--service-cluster-ip-range=10.96.0.0/16",
        # No node runs the API server, so it must not publish itself as the
        # `kubernetes` Service's endpoint (a loopback endpoint is refused anyway).
        "--endpoint-reconciler-type=none",
        # etcd 3.4 lacks RequestWatchProgress: tell clients not to try watch-lists.
        "--feature-gates=WatchList=false",
        "--allow-privileged=true", "--profiling=false", "--v=0",
    ])
    admin_headers = {"Authorization": f"Bearer {tokens['admin']}"}
    _wait("kube-apiserver",
          lambda: _http_ok(api + "/readyz", verify=ca, headers=admin_headers), pid, logs, 120)

    start("kube-controller-manager", [
        tools.kube_controller_manager,
        f"--kubeconfig={run_dir / 'kube-controller-manager.kubeconfig'}",
        f"--service-account-private-key-file={pki_dir / 'sa.key'}",
        f"--root-ca-file={ca}", "--use-service-account-credentials=true",
        "--leader-elect=false", "--secure-port=0", "--v=0",
        # Fake nodes need no cloud, no IPAM, no persistent-volume plumbing.
        "--controllers=*,-nodeipam,-cloud-node-lifecycle,-service-lb-controller,"
        "-persistentvolume-binder,-attachdetach,-persistentvolume-expander",
    ])
    start("kube-scheduler", [
        tools.kube_scheduler, f"--kubeconfig={run_dir / 'kube-scheduler.kubeconfig'}",
        "--leader-elect=false", "--secure-port=0", "--v=0",
    ])
    start("kwok", [
        tools.kwok, f"--kubeconfig={run_dir / 'kwok.kubeconfig'}",
        "--manage-all-nodes=false",
        "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
        "--node-ip=127.0.0.1", "--cidr=10.244.0.1/16",
        # Renew node leases as a kubelet does (every 10 s). Without them kwok's status
        # heartbeat (~55 s apart) outlives the node monitor's 50 s grace: every node
        # flapped NotReady each minute, the node controller marked its pods NotReady,
        # and kwok never marks a pod Ready again once it has an IP (a helm --wait hung).
        "--node-lease-duration-seconds=40",
        f"--config={_write_kwok_config(run_dir)}",
    ])
    # The stand-in retries the API server and the CRD; start it early.
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
    standin_pid = start("standin", [
        sys.executable, "-m", "e2e.standin", "--kubeconfig", str(run_dir / "admin.kubeconfig"),
        "--port", str(ports["twin"]), "--downtime-scale", str(scale),
        "--run-dir", str(run_dir),
    ], cwd=REPO, env=env)

    admin = info.kubeconfig
    kubectl(admin, "apply", "-f", "-", stdin=_kwok_nodes())
    kubectl(admin, "apply", "--server-side", "--force-conflicts", "-f", str(crd))
    crd_names = ["flinkdeployments.flink.apache.org"]
    if HSP_CRD.is_file():
        kubectl(admin, "apply", "--server-side", "--force-conflicts", "-f", str(HSP_CRD))
        crd_names.append(_crd_name(HSP_CRD))
    else:
        echo(f"note: {HSP_CRD.relative_to(REPO)} does not exist yet (make crds); not applied")
    for crd_name in crd_names:
        _wait("kube-apiserver", functools.partial(_established, info, crd_name), None, logs)
    info.controller_rbac = _controller_identity(info, tools, echo)
    info.save()

    _wait("prometheus", lambda: _http_ok(info.prometheus_url + "/-/ready"), prom_pid, logs)
    _wait("standin", lambda: _http_ok(info.twin_url + "/metrics"), standin_pid, logs)
    _wait("kwok", lambda: _ready_nodes(info) >= KWOK_NODES, info.pids["kwok"], logs)
    # A component that lost its port may have exited after another process on that
    # port answered its readiness check in its place.
    for name, pid in info.pids.items():
        if not _alive(pid):
            raise StackError(f"{name} exited during start-up; last lines of "
                             f"{logs / (name + '.log')}:\n{_tail(logs / (name + '.log'))}")
    return info


def _api_get(info: StackInfo, path: str) -> Any:
    reply = requests.get(info.api_server + path, verify=info.ca_file, timeout=5,
                         headers={"Authorization": f"Bearer {info.admin_token}"})
    reply.raise_for_status()
    return reply.json()


def _true(obj: Mapping[str, Any], condition: str) -> bool:
    conditions = obj.get("status", {}).get("conditions") or []
    return any(c["type"] == condition and c["status"] == "True" for c in conditions)


def _established(info: StackInfo, crd_name: str) -> bool:
    return _true(_api_get(
        info, f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd_name}"), "Established")


def _ready_nodes(info: StackInfo) -> int:
    nodes = _api_get(info, "/api/v1/nodes?labelSelector=type%3Dkwok")["items"]
    return sum(_true(node, "Ready") for node in nodes)


def _crd_name(path: Path) -> str:
    doc = yaml.safe_load(path.read_text())
    return str(doc["metadata"]["name"])


def _controller_identity(info: StackInfo, tools: Tools, echo: Callable[[str], None]) -> bool:
    """The controller's ServiceAccount, a TokenRequest kubeconfig, and the chart's RBAC."""
    admin = info.kubeconfig
    kubectl(admin, "create", "namespace", CONTROLLER_NAMESPACE)
    kubectl(admin, "-n", CONTROLLER_NAMESPACE, "create", "serviceaccount",
            CONTROLLER_SERVICE_ACCOUNT)
    token = kubectl(admin, "-n", CONTROLLER_NAMESPACE, "create", "token",
                    CONTROLLER_SERVICE_ACCOUNT, "--duration=48h").stdout.strip()
    pki.write_kubeconfig(Path(info.controller_kubeconfig), info.api_server, Path(info.ca_file),
                         token, f"system:serviceaccount:{CONTROLLER_NAMESPACE}:"
                         f"{CONTROLLER_SERVICE_ACCOUNT}", CONTROLLER_NAMESPACE)
    # The rights are the chart's own RBAC, so e2e tests exercise exactly what users get.
    if tools.helm is None or not (CHART / "templates" / "rbac.yaml").is_file():
        echo("note: helm or the chart's RBAC is missing; the controller's ServiceAccount "
             "has no rights")
        return False
    rendered = subprocess.run(
        [tools.helm, "template", "hybrid-scaler", str(CHART), "--namespace",
         CONTROLLER_NAMESPACE, "--show-only", "templates/rbac.yaml",
         "--set", "operatorServiceAccount.create=false",
         "--set", f"operatorServiceAccount.name={CONTROLLER_SERVICE_ACCOUNT}",
         # What a user who opts in to resizing in place grants (e2e/test_realflink.py).
         "--set", "resize.enabled=true",
         # And who tells it where the Flink operator's ConfigMap is
         # (e2e/test_controller_upstream.py).
         "--set", f"flinkOperator.configMap.namespace={FLINK_OPERATOR_NAMESPACE}"],
        capture_output=True, text=True)
    if rendered.returncode != 0:
        echo(f"warning: helm template of the chart's RBAC failed, the controller's "
             f"ServiceAccount has no rights: {rendered.stderr.strip()}")
        return False
    kubectl(admin, "create", "namespace", FLINK_OPERATOR_NAMESPACE)
    kubectl(admin, "apply", "-f", "-", stdin=rendered.stdout)
    return True


def write_prometheus_config(run_dir: Path, twin_port: int, targets: Path,
                            twin_host: str = "127.0.0.1") -> Path:
    config = {
        "global": {"scrape_interval": f"{SCRAPE_INTERVAL_S}s",
                   "evaluation_interval": f"{SCRAPE_INTERVAL_S}s"},
        "scrape_configs": [
            {"job_name": "twin", "static_configs": [{"targets": [f"{twin_host}:{twin_port}"]}]},
            # Other scrape targets (the controller's metrics endpoint): one JSON file each.
            {"job_name": "e2e", "file_sd_configs": [
                {"files": [str(targets / "*.json")], "refresh_interval": "5s"}]},
        ],
    }
    path = run_dir / "prometheus.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def _write_kwok_config(run_dir: Path) -> Path:
    # An empty configuration: kwok then uses its built-in stages (nodes Ready, pods Running).
    path = run_dir / "kwok.yaml"
    path.write_text("")
    return path


def add_scrape_target(info: StackInfo, job: str, address: str) -> Path:
    """Make Prometheus scrape `address` (host:port, path /metrics) as job `job`."""
    path = Path(info.prometheus_targets_dir) / f"{job}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps([{"targets": [address], "labels": {"job": job}}]))
    tmp.replace(path)
    return path


# --- command line ---------------------------------------------------------------------------

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="The local e2e stack (control plane, Prometheus, twin); see docs/e2e.md.")


def _fail(error: Exception) -> typer.Exit:
    typer.echo(f"e2e stack: {error}", err=True)
    return typer.Exit(1)


@app.command("up")
def up_command() -> None:
    """Start the stack, or reuse it if it is already up and healthy."""
    try:
        info, _ = up(echo=typer.echo)
    except (PrerequisiteMissing, StackError) as error:
        raise _fail(error) from error
    for key, value in info.env().items():
        typer.echo(f"  {key}={value}")


@app.command("down")
def down_command(
    force: bool = typer.Option(False, "--force", help="even while others still use it"),
) -> None:
    """Stop every process of the stack and remove its run directory (logs are kept);
    also take down stacks left by pytest sessions that were killed."""
    in_use = users(default_run_dir())
    if in_use and not force:
        for pid, command in in_use.items():
            typer.echo(f"e2e stack in use by pid {pid}: {command}", err=True)
        raise _fail(StackError("not taken down while in use; --force to do it anyway"))
    down()
    typer.echo(f"e2e stack down; logs kept in {log_dir_for(default_run_dir())}")
    for run_dir in reap_orphans():
        typer.echo(f"also took down {run_dir}, left by a pytest session that is gone")


@app.command("status")
def status_command() -> None:
    """One line per component; exit 1 unless all are healthy."""
    info = StackInfo.load(default_run_dir())
    if info is None:
        typer.echo(f"e2e stack: not running (no state in {default_run_dir()})")
        raise typer.Exit(1)
    states = health(info)
    for name, ok in states.items():
        typer.echo(f"{name:26} {'up' if ok else 'DOWN'}  pid {info.pids[name]}")
    typer.echo(f"logs: {info.log_dir}")
    if not all(states.values()):
        raise typer.Exit(1)


@app.command("env")
def env_command() -> None:
    """Shell exports for the running stack: eval "$(python -m e2e.stack env)"."""
    info = StackInfo.load(default_run_dir())
    if info is None:
        raise _fail(StackError(f"not running (no state in {default_run_dir()})"))
    for key, value in info.env().items():
        typer.echo(f"export {key}={value}")


if __name__ == "__main__":
    app()
