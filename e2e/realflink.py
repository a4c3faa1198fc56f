"""Real Flink for the e2e stack: a FlinkDeployment that asks for it runs as a Flink 1.20
application cluster on this machine, and the stand-in plays the Flink Kubernetes Operator
for it (docs/e2e.md, "Real Flink").

A deployment whose `spec.flinkConfiguration` has `hybridscaler.standin.engine: flink` gets
one JobManager (`dev.hybridscaler.job.ApplicationLauncher`: application mode, the job's
`main()` runs in it against the cluster's configuration) and `spec.taskManager.replicas`
TaskManagers (`TaskManagerRunner`, sized by Flink's own `BashJavaUtils` from
`spec.taskManager.resource`), as local JVMs on the classpath `mvn package` writes for the
job module `flink-job/` (Maven Central's Flink 1.20.5, RocksDB, the 1.20.3 Prometheus
reporter, flink-plugin). The job is `hybridscaler.standin.job-class` (default: the
repository's `StateJob`).

Each cluster runs RocksDB with managed memory, its native block-cache metrics, keyed
state latency tracking and the Prometheus reporter (one port per process, handed to the
stack's Prometheus through its file-discovered targets), checkpoints every 10 s
(retained on cancellation), and `HybridResources.apply` (in `StateJob`).

What the operator does, done here:
* deploy: a new cluster, from the savepoint or checkpoint of the previous one if any;
* a spec change, `upgradeMode: savepoint`: stop-with-savepoint (`POST /jobs/<id>/stop`),
  then a new cluster restored from it with the new configuration;
* `upgradeMode: last-state`: the cluster is killed (as the operator deletes the
  JobManager deployment) and the new one restores the latest retained checkpoint (the
  operator's HA metadata points at the same checkpoint);
* an overrides-only change under `jobmanager.scheduler: adaptive` (the stand-in decides
  that with `rescales_in_place`): `PUT /jobs/<id>/resource-requirements` on the running
  job, Flink's own in-place rescale;
* suspend or delete: stop-with-savepoint (kept for a later resume), the cluster goes.

The JobManager REST APIs are served under one port, `/{namespace}/{name}/...`, like the
twin's (`RestProxy`); its URL is written to `<run dir>/realflink.json`. Deployments it
does not run are forwarded to the twin, so one controller can be given this URL for both.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import requests

from controller.realize import configured_engine
from controller.record import Reason
from policies.restart_cost import Engine
from simulator.serve import ConfigError, operator_resources, parse_memory_mib

log = logging.getLogger("realflink")

ENGINE_KEY = "hybridscaler.standin.engine"
JOB_CLASS_KEY = "hybridscaler.standin.job-class"
# Which Flink runs the cluster: where the job module's and flink-plugin's builds for it are,
# and the Maven profile that writes them. The FlinkDeployment CRD of operator 1.10.0 has no
# 2.x flinkVersion to say it with.
FLINK_KEY = "hybridscaler.standin.flink"
BUILDS = {"1.20": ("target", ()), "2.2": ("target-flink2", ("-P", "flink-2"))}
DEFAULT_FLINK = "1.20"  # without FLINK_KEY (the real-Flink benches' --flink sets it)
OPERATOR_RESOURCES_KEY = "hybridscaler.operator-resources"
OVERRIDES_KEY = "pipeline.jobvertex-parallelism-overrides"
SAVEPOINT_FORMAT_KEY = "kubernetes.operator.savepoint.format.type"
DEFAULT_JOB_CLASS = "dev.hybridscaler.job.StateJob"
LAUNCHER = "dev.hybridscaler.job.ApplicationLauncher"
REPO = Path(__file__).resolve().parent.parent
JOB_MODULE = REPO / "flink-job"
STATE_FILE = "realflink.json"
MAX_RELAUNCHES = 3

# Java 17 needs these for Flink 1.20's serializers (Flink's own env.java.opts.all).
JAVA_OPENS = [f"--add-opens=java.base/{p}=ALL-UNNAMED" for p in (
    "java.util", "java.lang", "java.net", "java.io", "java.nio", "sun.nio.ch",
    "java.lang.reflect", "java.text", "java.time", "java.util.concurrent",
    "java.util.concurrent.atomic", "java.util.concurrent.locks")]

# What every real cluster runs with: docs/metrics.md's settings, RocksDB, checkpoints.
CLUSTER_DEFAULTS: dict[str, str] = {
    "state.backend.type": "rocksdb",
    "state.backend.rocksdb.memory.managed": "true",
    "state.backend.rocksdb.metrics.block-cache-capacity": "true",
    "state.backend.rocksdb.metrics.block-cache-usage": "true",
    "state.backend.rocksdb.metrics.block-cache-hit": "true",
    "state.backend.rocksdb.metrics.block-cache-miss": "true",
    "state.latency-track.keyed-state-enabled": "true",
    "metrics.job.status.enable": "STATE;CURRENT_TIME;TOTAL_TIME",
    "metrics.reporter.prom.factory.class":
        "org.apache.flink.metrics.prometheus.PrometheusReporterFactory",
    "execution.checkpointing.interval": "10s",
    "execution.checkpointing.externalized-checkpoint-retention": "RETAIN_ON_CANCELLATION",
    "taskmanager.numberOfTaskSlots": "1",
    # Under backpressure a savepoint's barrier queues behind the in-flight buffers (~25k of
    # StateJob's small records at default sizes: a minute at the slow rate); debloating
    # keeps about a second of data in flight, so a stop-with-savepoint takes seconds.
    "taskmanager.network.memory.buffer-debloat.enabled": "true",
    # On 2 shared cores under load, Pekko's actor system took longer than its default 10 s.
    "pekko.startup-timeout": "120 s",
    "restart-strategy.type": "fixed-delay",
    "restart-strategy.fixed-delay.attempts": "3",
    "restart-strategy.fixed-delay.delay": "2s",
}


# Flink 2.x with `state.backend.type: forst` (docs/metrics.md, "Flink 2.x on ForSt"): its
# native metrics under their own switches; the primary ("remote") store is a local directory
# of the attempt unless the deployment names one.
FORST_DEFAULTS: dict[str, str] = {
    "state.backend.forst.memory.managed": "true",
    **{f"state.backend.forst.metrics.{m}": "true" for m in (
        "block-cache-capacity", "block-cache-usage", "block-cache-hit", "block-cache-miss",
        "estimate-live-data-size")},
}


def forst_settings(config: Mapping[str, str], directory: Path) -> dict[str, str]:
    """What a cluster on ForSt, Flink's or flink-plugin's resizable one, adds to `config`
    (nothing on another backend)."""
    if configured_engine(config) is not Engine.FORST:
        return {}
    return {**FORST_DEFAULTS,
            "state.backend.forst.primary-dir": f"file://{directory / 'forst-primary'}",
            "state.backend.forst.local-dir": str(directory / "forst-local"),
            **{k: v for k, v in config.items() if k.startswith("state.backend.forst.")}}


def wanted(flink_configuration: Mapping[str, Any]) -> bool:
    """Whether a FlinkDeployment asks to run on real Flink."""
    return str(flink_configuration.get(ENGINE_KEY, "")).strip().lower() == "flink"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def job_build(flink: str | None = None) -> tuple[str, Path]:
    """The cluster classpath and job jar of the job module's build for `flink`. The cluster
    runs flink-plugin's own build for that Flink, not the jar Maven resolved from ~/.m2 (the
    one `install` put there, a 1.20 build)."""
    directory, _ = BUILDS[flink or DEFAULT_FLINK]
    classpath = JOB_MODULE / directory / "flink.classpath"
    jars = sorted((JOB_MODULE / directory).glob("flink-hybrid-scaler-e2e-job-*.jar"))
    plugins = sorted((REPO / "flink-plugin" / directory).glob("flink-hybrid-scaler-plugin-*.jar"))
    if not classpath.exists() or not jars or not plugins:
        raise FileNotFoundError(
            f"the real-Flink job is not built for Flink {flink or DEFAULT_FLINK}: run "
            f"{' && '.join('`' + ' '.join(argv) + '`' for argv in _maven(flink))} "
            "(scripts/test.sh does)")
    entries = [str(plugins[-1]) if Path(e).name.startswith("flink-hybrid-scaler-plugin-") else e
               for e in classpath.read_text().strip().split(os.pathsep)]
    return os.pathsep.join([*entries, str(jars[-1])]), jars[-1]


def _maven(flink: str | None) -> list[list[str]]:
    """The builds job_build(flink) needs: flink-plugin installed (the job module depends on
    it), then both modules' builds for that Flink."""
    _, profile = BUILDS[flink or DEFAULT_FLINK]
    plugin, job = str(REPO / "flink-plugin" / "pom.xml"), str(JOB_MODULE / "pom.xml")
    return [["mvn", "-B", "-q", "-f", plugin, "install", "-DskipTests"],
            *([["mvn", "-B", "-q", "-f", plugin, *profile, "package", "-DskipTests"]]
              if profile else []),
            ["mvn", "-B", "-q", "-f", job, *profile, "package", "-DskipTests"]]


def build_job(flink: str | None = None) -> None:
    """Build what job_build(flink) needs (a few minutes the first time: Maven Central's
    Flink artifacts are downloaded into ~/.m2)."""
    for argv in _maven(flink):
        subprocess.run(argv, check=True, timeout=1800)


def flink_memory(value: Any, default: str) -> str:
    """A Flink or Kubernetes memory size as Flink's MiB ('2Gi' and '2048m' -> '2048m')."""
    text = str(value if value is not None else default)
    if text.endswith(("Ki", "Mi", "Gi", "Ti")):
        factor = {"Ki": 1 / 1024, "Mi": 1, "Gi": 1024, "Ti": 1024**2}[text[-2:]]
        return f"{int(float(text[:-2]) * factor)}m"
    return f"{int(parse_memory_mib(text))}m"


@dataclass
class Cluster:
    """One attempt's JobManager and TaskManagers (local JVMs)."""

    directory: Path
    job_id: str
    rest_port: int
    metrics_ports: list[int]
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def rest(self) -> str:
        return f"http://127.0.0.1:{self.rest_port}"

    def alive(self) -> bool:
        return bool(self.processes) and self.processes[0].poll() is None

    def kill(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGKILL)
        for process in self.processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                log.warning("pid %d did not exit", process.pid)


@dataclass
class Step:
    """How one reconfiguration was enacted and what it cost (for bench/ and status)."""

    kind: str  # deploy | savepoint | last-state | in-place
    started: float
    stopped: float | None = None  # the old job stopped (savepoint taken / cluster killed)
    running: float | None = None  # every task of the new job RUNNING
    restored_from: str | None = None
    state_bytes: int | None = None
    expect: dict[str, int] = field(default_factory=dict)  # in-place: vertex -> parallelism

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "downtimeS": None if self.running is None
                else round(self.running - self.started, 2),
                "stopS": None if self.stopped is None else round(self.stopped - self.started, 2),
                "restoredFrom": self.restored_from, "stateBytes": self.state_bytes}


class Deployment:
    """The real Flink of one FlinkDeployment: its current cluster and upgrade worker."""

    def __init__(self, engine: RealFlink, namespace: str, name: str) -> None:
        self.engine, self.namespace, self.name = engine, namespace, name
        self.directory = engine.work_dir / f"{namespace}.{name}"
        self.directory.mkdir(parents=True, exist_ok=True)
        self.cluster: Cluster | None = None
        self.state = "CREATED"
        self.job_id = ""
        self.conf: dict[str, str] = {}
        self.task_manager: dict[str, Any] = {}
        self.upgrade_mode = "savepoint"
        self.restore_from: str | None = None
        self.relaunches = 0  # of the current step: a JobManager that died before running
        self.steps: list[Step] = []
        self.error: str | None = None
        self._lock = threading.Lock()
        self._queue: list[tuple[str, dict[str, str], dict[str, Any]]] = []
        self._wake = threading.Event()
        self._stopped = False
        self._thread = threading.Thread(target=self._work, name=f"realflink {namespace}/{name}",
                                        daemon=True)
        self._thread.start()

    # ---- requests from the stand-in (never block) ------------------------------------------

    def request(self, kind: str, conf: dict[str, str], task_manager: dict[str, Any]) -> str:
        """Queue a deploy/upgrade/rescale/stop; returns the job id the new job will have."""
        with self._lock:
            if kind in ("deploy", "upgrade"):
                self.job_id = uuid.uuid4().hex
                self.state = "CREATED" if kind == "deploy" else "RESTARTING"
            elif kind == "stop":
                self.state = "FINISHED"
            else:  # rescale: the adaptive scheduler restarts the tasks, same job id
                self.state = "RESTARTING"
            self._queue.append((kind, dict(conf), dict(task_manager)))
            self._wake.set()
            return self.job_id

    def close(self, timeout_s: float = 120, savepoint: bool = True) -> None:
        """Stop the worker and the cluster (with a savepoint if it runs and `savepoint`)."""
        if not savepoint and self.cluster is not None:
            self.cluster.kill()
        self.request("stop", {}, {})
        with self._lock:
            self._stopped = True
            self._wake.set()
        self._thread.join(timeout=timeout_s)
        if self.cluster is not None:
            self.cluster.kill()

    def status(self) -> dict[str, Any]:
        with self._lock:
            return {"state": self.state, "jobId": self.job_id, "configuration": {},
                    "error": self.error, "steps": [s.as_dict() for s in self.steps],
                    "rest": None if self.cluster is None else self.cluster.rest}

    # ---- the worker ----------------------------------------------------------------------

    def _work(self) -> None:
        while True:
            self._wake.wait(1.0)
            with self._lock:
                self._wake.clear()
                queue, self._queue = self._queue, []
                stopped = self._stopped
            for kind, conf, task_manager in _coalesce(queue):
                try:
                    self._enact(kind, conf, task_manager)
                except Exception as error:  # report, keep serving the next request
                    log.exception("%s/%s: %s failed", self.namespace, self.name, kind)
                    with self._lock:
                        self.error = f"{type(error).__name__}: {error}"
            if stopped:
                return
            self._watch_running()

    def _enact(self, kind: str, conf: dict[str, str], task_manager: dict[str, Any]) -> None:
        if kind == "rescale":
            self._rescale(conf)
            return
        step = Step(kind="deploy" if self.cluster is None else self.upgrade_mode,
                    started=time.monotonic())
        if self.cluster is not None:
            self.restore_from = self._stop_cluster(self.upgrade_mode)
            step.stopped = time.monotonic()
        if kind == "stop":
            with self._lock:
                self.state = "FINISHED"
            return
        step.restored_from = self.restore_from
        step.state_bytes = _size(self.restore_from)
        self.conf, self.task_manager = conf, task_manager
        with self._lock:
            self.steps.append(step)
            self.error = None
        self.relaunches = 0
        self.cluster = self.engine.launch(self, conf, task_manager, self.restore_from)

    def _watch_running(self) -> None:
        cluster = self.cluster
        if cluster is None or self.state in ("RUNNING", "FINISHED"):
            return
        if not cluster.alive():
            # Kubernetes restarts a crashed JobManager pod; so do we, a few times.
            cluster.kill()
            if self.relaunches < MAX_RELAUNCHES:
                self.relaunches += 1
                log.warning("%s/%s: the JobManager exited before the job ran (see %s); "
                            "starting it again", self.namespace, self.name, cluster.directory)
                self.cluster = self.engine.launch(self, self.conf, self.task_manager,
                                                  self.restore_from)
                return
            with self._lock:
                self.state, self.error = "FAILED", "the JobManager exited; see its log in " + str(
                    cluster.directory)
            return
        try:
            job = requests.get(f"{cluster.rest}/jobs/{cluster.job_id}", timeout=5).json()
        except (requests.RequestException, ValueError):
            return
        vertices = job.get("vertices", [])
        expect = self.steps[-1].expect if self.steps else {}
        if (job.get("state") == "RUNNING" and vertices
                and all(v["status"] == "RUNNING" for v in vertices)
                and all(v["parallelism"] == expect.get(v["id"], v["parallelism"])
                        for v in vertices)):
            with self._lock:
                self.state = "RUNNING"
                if self.steps and self.steps[-1].running is None:
                    self.steps[-1].running = time.monotonic()
                    log.info("%s/%s running: %s", self.namespace, self.name,
                             self.steps[-1].as_dict())

    def _stop_cluster(self, upgrade_mode: str) -> str | None:
        """Stop the running cluster as the operator would; returns what to restore from."""
        cluster = self.cluster
        assert cluster is not None
        self.cluster = None
        path: str | None = None
        try:
            if upgrade_mode == "savepoint" and cluster.alive():
                path = self._stop_with_savepoint(cluster)
        finally:
            cluster.kill()
        self.engine.forget_targets(self)
        if path is None:  # last-state, or no savepoint could be taken
            path = _latest_checkpoint(cluster.directory / "checkpoints") or self.restore_from
        return path

    def _stop_with_savepoint(self, cluster: Cluster) -> str | None:
        target = f"file://{cluster.directory / 'savepoints'}"
        # The operator's key: NATIVE restores by copying RocksDB's files instead of
        # re-inserting every key, CANONICAL (its default) is portable.
        form = self.conf.get(SAVEPOINT_FORMAT_KEY, "CANONICAL").upper()
        try:
            trigger = requests.post(f"{cluster.rest}/jobs/{cluster.job_id}/stop",
                                    json={"drain": False, "targetDirectory": target,
                                          "formatType": form},
                                    timeout=10).json()["request-id"]
        except (requests.RequestException, KeyError, ValueError) as error:
            log.warning("%s/%s: stop-with-savepoint refused: %s", self.namespace, self.name, error)
            return None
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            try:
                answer = requests.get(
                    f"{cluster.rest}/jobs/{cluster.job_id}/savepoints/{trigger}", timeout=5).json()
            except (requests.RequestException, ValueError):
                time.sleep(0.5)
                continue
            if answer.get("status", {}).get("id") == "COMPLETED":
                operation = answer.get("operation") or {}
                if "location" in operation:
                    return str(operation["location"])
                log.warning("%s/%s: savepoint failed: %s", self.namespace, self.name,
                            str(operation.get("failure-cause"))[:500])
                return None
            time.sleep(0.5)
        return None

    def _rescale(self, conf: dict[str, str]) -> None:
        """Flink's in-place rescale (adaptive scheduler): new upper bounds per vertex."""
        cluster = self.cluster
        if cluster is None:
            return
        step = Step(kind="in-place", started=time.monotonic())
        base = f"{cluster.rest}/jobs/{cluster.job_id}/resource-requirements"
        requirements = requests.get(base, timeout=10).json()
        for pair in filter(None, conf.get(OVERRIDES_KEY, "").split(",")):
            vertex, _, parallelism = pair.partition(":")
            if vertex.strip() in requirements:
                requirements[vertex.strip()]["parallelism"]["upperBound"] = int(parallelism)
                step.expect[vertex.strip()] = int(parallelism)
        answer = requests.put(base, json=requirements, timeout=10)
        answer.raise_for_status()
        self.conf = conf
        with self._lock:
            self.steps.append(step)
            self.state = "RESTARTING"  # the adaptive scheduler restarts the tasks itself


def _coalesce(queue: list[tuple[str, dict[str, str], dict[str, Any]]]
              ) -> list[tuple[str, dict[str, str], dict[str, Any]]]:
    """Of several queued requests only the last matters (the operator acts on the latest spec),
    except that a restart already requested stays a restart."""
    if not queue:
        return []
    kind, conf, task_manager = queue[-1]
    if kind == "rescale" and any(k in ("deploy", "upgrade") for k, _, _ in queue):
        kind = "upgrade"
    return [(kind, conf, task_manager)]


def _latest_checkpoint(root: Path) -> str | None:
    """The newest completed checkpoint under `root/<job id>/chk-<n>` (it has `_metadata`)."""
    found = [(int(p.parent.name.removeprefix("chk-")), p.parent)
             for p in root.glob("*/chk-*/_metadata")]
    return f"file://{max(found)[1]}" if found else None


def _size(location: str | None) -> int | None:
    if location is None:
        return None
    path = Path(location.removeprefix("file:"))
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.exists() else None


class RealFlink:
    """The stand-in's engine for real Flink deployments (same calls as the twin's server)."""

    def __init__(self, run_dir: Path, targets_dir: Path | None = None,
                 fallback_url: str | None = None) -> None:
        self.run_dir = run_dir
        self.fallback_url = fallback_url  # the twin's: deployments not on real Flink
        self.work_dir = run_dir / "realflink"
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.targets_dir = targets_dir or run_dir / "prometheus-targets"
        self.deployments: dict[tuple[str, str], Deployment] = {}
        self.upgrade_modes: dict[tuple[str, str], str] = {}
        self.proxy = RestProxy(self)

    def start(self) -> RealFlink:
        self.proxy.start()
        (self.run_dir / STATE_FILE).write_text(json.dumps({"restUrl": self.proxy.url}))
        return self

    def stop(self) -> None:
        # Shutting down: no savepoints, every JVM goes at once.
        for deployment in list(self.deployments.values()):
            deployment.close(timeout_s=10, savepoint=False)
        self.proxy.stop()

    # ---- the twin server's calls, as the stand-in makes them --------------------------------

    def observe(self, key: tuple[str, str], spec: Mapping[str, Any]) -> None:
        """The stand-in shows each spec it sees: its upgrade mode decides how to restart."""
        self.upgrade_modes[key] = str((spec.get("job") or {}).get("upgradeMode") or "savepoint")

    def jobs(self) -> list[tuple[str, str]]:
        return [k for k, d in self.deployments.items() if d.state != "FINISHED"]

    def add_job(self, namespace: str, name: str, flink_configuration: dict[str, str],
                task_manager: Mapping[str, Any] | None = None) -> dict[str, Any]:
        _validate(flink_configuration)
        key = (namespace, name)
        deployment = self.deployments.get(key) or Deployment(self, namespace, name)
        self.deployments[key] = deployment
        deployment.upgrade_mode = self.upgrade_modes.get(key, "savepoint")
        kind = "deploy" if deployment.cluster is None else "upgrade"
        deployment.request(kind, flink_configuration, dict(task_manager or {}))
        return deployment.status()

    def reconfigure(self, namespace: str, name: str, flink_configuration: dict[str, str],
                    task_manager: Mapping[str, Any] | None = None, *,
                    in_place: bool = False) -> dict[str, Any]:
        _validate(flink_configuration)
        deployment = self.deployments[(namespace, name)]
        deployment.upgrade_mode = self.upgrade_modes.get((namespace, name), "savepoint")
        if in_place:
            deployment.request("rescale", flink_configuration, deployment.task_manager)
        else:
            deployment.request("upgrade", flink_configuration, dict(task_manager or {}))
        return deployment.status()

    def remove_job(self, namespace: str, name: str) -> None:
        deployment = self.deployments.pop((namespace, name), None)
        if deployment is not None:
            threading.Thread(target=deployment.close, daemon=True).start()

    def status(self, namespace: str, name: str) -> dict[str, Any]:
        return self.deployments[(namespace, name)].status()

    # ---- clusters --------------------------------------------------------------------------

    def launch(self, deployment: Deployment, conf: Mapping[str, str],
               task_manager: Mapping[str, Any], restore_from: str | None) -> Cluster:
        classpath, _ = job_build(conf.get(FLINK_KEY))
        attempt = len(deployment.steps)
        directory = deployment.directory / (f"attempt-{attempt}" + (
            f"-{deployment.relaunches}" if deployment.relaunches else ""))
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True)
        resource = task_manager.get("resource") or {}
        replicas = int(task_manager.get("replicas") or 1)
        cluster = Cluster(directory, deployment.job_id, free_port(),
                          [free_port() for _ in range(replicas + 1)])
        config = {
            **CLUSTER_DEFAULTS,
            **{k: str(v) for k, v in conf.items()},
            "taskmanager.memory.process.size": flink_memory(resource.get("memory"), "2048m"),
            "taskmanager.cpu.cores": str(float(resource.get("cpu", 1.0))),
            "jobmanager.rpc.address": "127.0.0.1", "jobmanager.rpc.port": str(free_port()),
            "jobmanager.bind-host": "127.0.0.1", "taskmanager.host": "127.0.0.1",
            "taskmanager.bind-host": "127.0.0.1",
            "rest.address": "127.0.0.1", "rest.bind-address": "127.0.0.1",
            "rest.port": str(cluster.rest_port),
            "state.checkpoints.dir": f"file://{directory / 'checkpoints'}",
            "state.savepoints.dir": f"file://{directory / 'savepoints'}",
            "io.tmp.dirs": str(directory / "tmp"),
            "$internal.pipeline.job-id": deployment.job_id,
            "high-availability.type": "NONE",
            "metrics.reporter.prom.port": str(cluster.metrics_ports[0]),  # the JobManager's
        }
        config.update(forst_settings(config, directory))
        config.pop(ENGINE_KEY, None)
        config.pop(FLINK_KEY, None)
        job_class = config.pop(JOB_CLASS_KEY, DEFAULT_JOB_CLASS)
        if restore_from:
            config["execution.savepoint.path"] = restore_from
        (directory / "tmp").mkdir()
        conf_dir = directory / "conf"
        conf_dir.mkdir()
        (conf_dir / "config.yaml").write_text(
            "".join(f"{k}: {json.dumps(v)}\n" for k, v in sorted(config.items())))
        (conf_dir / "log4j.properties").write_text(LOG4J)
        java = shutil.which("java") or "java"
        common = [java, *JAVA_OPENS, "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                  f"-Dlog4j.configurationFile={conf_dir / 'log4j.properties'}",
                  f"-Dhybridscaler.e2e.run-dir={self.run_dir}"]

        def spawn(name: str, argv: list[str]) -> subprocess.Popen[bytes]:
            with (directory / f"{name}.out").open("ab") as out:
                return subprocess.Popen(
                    [*common, f"-Dlog.file={directory / (name + '.log')}", "-cp", classpath,
                     *argv], stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

        jm_mib = int(flink_memory(conf.get("jobmanager.memory.process.size"), "1024m")[:-1])
        cluster.processes.append(spawn("jobmanager", [
            f"-Xmx{max(256, jm_mib // 2)}m", LAUNCHER, str(conf_dir), job_class]))
        jvm, memory = self._tm_parameters(java, classpath, conf_dir)
        for i in range(replicas):
            # Dynamic properties win over the file: each TaskManager reports on its own port.
            cluster.processes.append(spawn(f"taskmanager-{i + 1}", [
                *jvm, "org.apache.flink.runtime.taskexecutor.TaskManagerRunner",
                "--configDir", str(conf_dir), *memory,
                "-D", f"taskmanager.resource-id={deployment.name}-tm-{attempt}-{i + 1}",
                "-D", f"metrics.reporter.prom.port={cluster.metrics_ports[i + 1]}"]))
        self.write_targets(deployment, cluster)
        log.info("%s/%s attempt %d: JobManager %s, %d TaskManager(s), restore %s",
                 deployment.namespace, deployment.name, attempt, cluster.rest, replicas,
                 restore_from)
        return cluster

    def _tm_parameters(self, java: str, classpath: str,
                       conf_dir: Path) -> tuple[list[str], list[str]]:
        """JVM options and memory settings for a TaskManager, from Flink's BashJavaUtils (what
        taskmanager.sh does): TaskManagerRunner refuses to start without them."""
        done = subprocess.run(
            [java, "-cp", classpath, "org.apache.flink.runtime.util.bash.BashJavaUtils",
             "GET_TM_RESOURCE_PARAMS", "--configDir", str(conf_dir)],
            capture_output=True, text=True, timeout=120, check=False)
        prefix = "BASH_JAVA_UTILS_EXEC_RESULT:"
        lines = [ln.removeprefix(prefix) for ln in done.stdout.splitlines()
                 if ln.startswith(prefix)]
        if done.returncode != 0 or len(lines) < 2:
            raise ConfigError("Flink refused the TaskManager memory configuration: "
                              + (done.stdout + done.stderr).strip()[-800:])
        jvm = [a for a in lines[-2].split() if not a.startswith("-Xms")] + ["-Xms64m"]
        return jvm, lines[-1].split()

    def write_targets(self, deployment: Deployment, cluster: Cluster) -> None:
        self.targets_dir.mkdir(parents=True, exist_ok=True)
        path = self.targets_dir / f"realflink-{deployment.namespace}.{deployment.name}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps([{
            "targets": [f"127.0.0.1:{p}" for p in cluster.metrics_ports],
            "labels": {"job": "flink", "namespace": deployment.namespace,
                       "flinkdeployment": deployment.name}}]))
        tmp.replace(path)

    def forget_targets(self, deployment: Deployment) -> None:
        path = self.targets_dir / f"realflink-{deployment.namespace}.{deployment.name}.json"
        path.unlink(missing_ok=True)

    def rest_base(self, namespace: str, name: str) -> str | None:
        deployment = self.deployments.get((namespace, name))
        if deployment is None:
            return f"{self.fallback_url}/{namespace}/{name}" if self.fallback_url else None
        return deployment.cluster.rest if deployment.cluster is not None else None


def _validate(conf: Mapping[str, str]) -> None:
    """Refuse at once what the job would refuse at start (flink-plugin's rules, shared with
    the twin), so a bad spec gets `status.error` and the running job keeps running."""
    text = conf.get(OPERATOR_RESOURCES_KEY)
    if text is not None and text.strip():
        operator_resources(text)
    flink = conf.get(FLINK_KEY)
    if flink is not None and flink not in BUILDS:
        raise ConfigError(f"{FLINK_KEY}: Flink {str(flink)[:20]!r} is not one of the builds "
                          f"({', '.join(BUILDS)})")
    for pair in filter(None, str(conf.get(OVERRIDES_KEY, "")).split(",")):
        vertex, _, parallelism = pair.partition(":")
        if len(vertex.strip()) != 32 or not parallelism.strip().isdigit() or int(parallelism) < 1:
            raise ConfigError(f"{OVERRIDES_KEY}: bad entry {pair!r}")


LOG4J = """\
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = MainAppender
appender.main.name = MainAppender
appender.main.type = File
appender.main.fileName = ${sys:log.file}
appender.main.layout.type = PatternLayout
appender.main.layout.pattern = %d{HH:mm:ss,SSS} %-5p %-50c{1.} - %m%n
logger.netty.name = org.apache.flink.shaded.netty4
logger.netty.level = WARN
"""


class RestProxy:
    """`/{namespace}/{name}/<path>` -> that deployment's JobManager REST API, so a controller
    reaches real JobManagers the way it reaches the twin's."""

    def __init__(self, engine: RealFlink, port: int = 0) -> None:
        self.engine = engine
        self.server = ThreadingHTTPServer(("127.0.0.1", port), _proxy_handler(engine))
        self.server.daemon_threads = True

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> RestProxy:
        threading.Thread(target=self.server.serve_forever, name="realflink-rest",
                         daemon=True).start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _proxy_handler(engine: RealFlink) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def _forward(self) -> None:
            proxies = None
            key: tuple[str, str] | None = None
            if self.path.startswith("http://"):
                # Used as an HTTP proxy: `http://<name>-rest.<namespace>.svc:8081/<path>`,
                # the controller's default URL (in-cluster Service DNS), as the twin answers it.
                host, _, rest = self.path.removeprefix("http://").partition("/")
                service = host.split(":")[0].split(".")
                key = ((service[1], service[0].removesuffix("-rest"))
                       if len(service) >= 3 and service[0].endswith("-rest") else None)
                real = key is not None and key in engine.deployments
                base = engine.rest_base(*key) if real and key is not None else None
                if not real and engine.fallback_url:  # the twin's deployments: its proxy
                    base, proxies = self.path, {"http": engine.fallback_url}
                parts = ["", "", "", rest]
            else:
                parts = self.path.split("/", 3)  # "", namespace, name, rest
                base = engine.rest_base(parts[1], parts[2]) if len(parts) >= 3 else None
            if base is None:
                # A deployment between two clusters (stopping, restarting) answers as its
                # Service without ready endpoints would: unavailable, not unknown.
                known = key if self.path.startswith("http://") else tuple(parts[1:3])
                status = (HTTPStatus.SERVICE_UNAVAILABLE if known in engine.deployments
                          else HTTPStatus.NOT_FOUND)
                body = json.dumps({"errors": [f"no running JobManager for {self.path}"]})
                self._reply(status, body.encode(), "application/json")
                return
            length = int(self.headers.get("Content-Length") or 0)
            data = self.rfile.read(length) if length else None
            try:
                url = self.path if proxies else f"{base}/{parts[3] if len(parts) > 3 else ''}"
                answer = requests.request(
                    self.command, url, data=data, proxies=proxies,
                    headers={"Content-Type": self.headers.get("Content-Type",
                                                              "application/json")},
                    timeout=30)
            except requests.RequestException as error:
                body = json.dumps({"errors": [f"JobManager unreachable: {error}"]})
                self._reply(HTTPStatus.SERVICE_UNAVAILABLE, body.encode(), "application/json")
                return
            self._reply(answer.status_code, answer.content,
                        answer.headers.get("Content-Type", "application/json"))

        def _reply(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_PUT = do_POST = do_PATCH = do_DELETE = _forward

    return Handler


# ---- manifests for tests and the demo ----------------------------------------------------

# Sized for this 2-core machine (docs/flink-plugin.md, Figure 4): 100,000 keys x 1000 B of
# RocksDB state (~100 MB) read and updated at 3,000 records/s. At 32 MB of managed memory
# the block cache holds a third of it and the counter falls short of the rate; from
# 128 MB on the working set fits. (At 1,500/s an idle machine took the rate at 32 MB,
# from the page cache, so the job never needed a step.)
STATE_JOB_CONF = {
    "hybridscaler.job.rate": "3000",
    "hybridscaler.job.keys": "100000",
    "hybridscaler.job.value-bytes": "1000",
    "hybridscaler.job.max-lag-s": "30",
    SAVEPOINT_FORMAT_KEY: "NATIVE",
}
# One slot's share of the policy's TaskManager shape (2 CPU, 2048 MiB, 4 slots).
SLOT = {"cpuCores": 0.5, "taskHeapMb": 134}


def state_job_deployment(namespace: str, name: str, upgrade_mode: str = "savepoint",
                         managed_mb: int = 32, **conf: str) -> dict[str, Any]:
    """A FlinkDeployment of the repository's StateJob on real Flink, starting with
    `managed_mb` of managed memory for the counter (as a user who sized it too small)."""
    resources = {"events": {**SLOT, "managedMemoryMb": 0},
                 "counter": {**SLOT, "managedMemoryMb": managed_mb}}
    return {
        "apiVersion": "flink.apache.org/v1beta1", "kind": "FlinkDeployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "image": "flink:1.20", "flinkVersion": "v1_20", "serviceAccount": "flink",
            "flinkConfiguration": {
                ENGINE_KEY: "flink", "taskmanager.numberOfTaskSlots": "4",
                OPERATOR_RESOURCES_KEY: json.dumps(resources, sort_keys=True),
                **STATE_JOB_CONF, **conf},
            "jobManager": {"resource": {"cpu": 1, "memory": "1024m"}},
            "taskManager": {"replicas": 1, "resource": {"cpu": 2, "memory": "2048m"}},
            "job": {"jarURI": "local:///opt/flink/usrlib/job.jar",
                    "upgradeMode": upgrade_mode, "state": "running"},
        },
    }


def state_job_policy(namespace: str, name: str, target: str) -> dict[str, Any]:
    """fineGrained, Active; memory levels 32, 64, 128, 256 MiB; the source stays at 1 task
    (its sequence must stay ordered), the counter may use 2; short windows."""
    return {
        "apiVersion": "hybridscaler.dev/v1alpha1", "kind": "HybridScalingPolicy",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "targetRef": {"name": target}, "mode": "Active",
            "metrics": {"window": "20s", "stabilization": "15s", "resolution": "5s"},
            "memory": {"baseManagedMemory": "32Mi", "maxLevel": 4},
            "cpu": {"maxParallelism": 2,
                    "overrides": [{"operatorUid": "events", "maxParallelism": 1}]},
            "taskManager": {"realization": "fineGrained",
                            "shapes": [{"cpu": 2, "memory": "2048Mi", "slots": 4}]},
        },
    }


# The same job on Flink 2.2 with ForSt and asynchronous state (AsyncStateJob, State V2),
# its state in a "remote" primary directory on local disk (issue 24). Short of memory at
# 32 MB it is not: asynchronous state overlaps its reads, and at this scale the counter
# kept 3,000 and 12,000 records/s at 32 MB with its task thread 12 % busy (measured on a
# 2-core machine). So it starts over-provisioned and the loop converges it down.
FORST_START_MB = 256
FORST_CONF = {FLINK_KEY: "2.2", "state.backend.type": "forst",
              JOB_CLASS_KEY: "dev.hybridscaler.job.AsyncStateJob"}


def forst_state_job(namespace: str, name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ForSt StateJob's FlinkDeployment and HybridScalingPolicy. TaskManagers are sized
    to their slots (the policy's default): the memory the counter gives back comes back as
    a smaller pod. (A menu shape keeps Flink's managed fraction, 0.4 of its Flink memory
    whatever its slots use: no shape there holds the slots' heap with less managed memory
    than the counter starts with.)"""
    deployment = state_job_deployment(namespace, name, managed_mb=FORST_START_MB, **FORST_CONF)
    policy = state_job_policy(namespace, name, name)
    del policy["spec"]["taskManager"]["shapes"]
    policy["spec"]["cpu"]["scaleDownDelay"] = "60s"
    return deployment, policy


def state_job(namespace: str, name: str, flink: str | None = None
              ) -> tuple[dict[str, Any], dict[str, Any]]:
    """The StateJob's FlinkDeployment and policy for `flink`: RocksDB on 1.20, short of
    memory; ForSt on 2.2, over-provisioned (the demo and bench/twin_vs_real.py run these)."""
    flink = flink or DEFAULT_FLINK
    if flink not in BUILDS:
        raise ValueError(f"no StateJob for Flink {flink!r}: one of {', '.join(BUILDS)}")
    if flink == "2.2":
        return forst_state_job(namespace, name)
    return state_job_deployment(namespace, name), state_job_policy(namespace, name, name)


def settled(status: Mapping[str, Any]) -> bool:
    """Nothing in flight in a policy's status (camelCase): the last decision changed
    nothing and no scale-down is waiting out cpu.scaleDownDelay (DS2 and Justin keep the
    wait in scaleDownWantedSince, the capacity policy per vertex in learned[].surplusSince)."""
    scaling: Mapping[str, Any] = next(
        (c for c in status.get("conditions") or [] if c.get("type") == "Scaling"), {})
    waiting = status.get("scaleDownWantedSince") or any(
        v.get("surplusSince") is not None for v in status.get("learned") or [])
    return scaling.get("reason") == Reason.STEADY and not waiting
