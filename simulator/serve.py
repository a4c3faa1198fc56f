"""Serve mode: many twins in one process, in wall-clock time, speaking Flink over HTTP.

Each FlinkDeployment (namespace, name) gets a twin whose model comes from
`hybridscaler.twin.job-model` in its Flink configuration. The twin reads
`pipeline.jobvertex-parallelism-overrides` and `hybridscaler.operator-resources`
exactly as Flink and flink-plugin do (docs/flink-contract.md).

HTTP (one port):
  GET  /metrics                              every job, Flink Prometheus reporter format
  GET  /{ns}/{name}/jobs/overview            Flink REST, per deployment
  GET  /{ns}/{name}/jobs/<jid>[/plan|/config]
  GET  /{ns}/{name}/taskmanagers[/<id>]
  GET  /control/jobs                         lifecycle of every job
  GET  /control/jobs/{ns}/{name}             lifecycle of one job
  PUT  /control/jobs/{ns}/{name}             add the job, or reconfigure it (a restart); body
                                             {"flinkConfiguration": {...}, "taskManager": {...}}
  DELETE /control/jobs/{ns}/{name}
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeGuard

from policies.levels import level_of
from policies.model import VertexConfig
from simulator import flink_format as ff
from simulator.model import JobModel, load_model
from simulator.twin import BASE_MANAGED_MIB, HEAP_MIB_PER_TASK, NETWORK_MIB_PER_TASK, Twin

JOB_MODEL_KEY = "hybridscaler.twin.job-model"
OVERRIDES_KEY = "pipeline.jobvertex-parallelism-overrides"
RESOURCES_KEY = "hybridscaler.operator-resources"
SLOTS_KEY = "taskmanager.numberOfTaskSlots"


class ConfigError(ValueError):
    """A FlinkDeployment configuration the twin (like Flink) cannot run."""


_FLINK_MEMORY = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)
_K8S_MEMORY = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(Ki|Mi|Gi|Ti)\s*$")


def parse_memory_mib(value: Any) -> float:
    """'2048m', '2g', '2Gi', '1536Mi' or a byte count, in MiB (Flink and Kubernetes forms)."""
    if isinstance(value, int | float):
        return float(value) / 2**20
    text = str(value)
    k8s = _K8S_MEMORY.match(text)
    if k8s:
        return float(k8s.group(1)) * {"Ki": 2**-10, "Mi": 1, "Gi": 2**10, "Ti": 2**20}[k8s.group(2)]
    flink = _FLINK_MEMORY.match(text)
    if not flink:
        raise ConfigError(f"unreadable memory size {value!r}")
    scale = {"": 2**-20, "k": 2**-10, "m": 1, "g": 2**10, "t": 2**20}[flink.group(2).lower()]
    return float(flink.group(1)) * scale


def configuration_from_flink(
    model: JobModel, flink_configuration: dict[str, str], base_managed_mib: float
) -> dict[str, VertexConfig]:
    """Per-vertex (parallelism, memory level) that Flink + flink-plugin would run.

    Parallelism: the override for the vertex id, else the model's initial value.
    Memory: `managedMemoryMb` of the operator's uid as the nearest level
    (base × 2^level); 0 means ⊥; a uid that is absent keeps level 0.
    """
    overrides: dict[str, int] = {}
    text = flink_configuration.get(OVERRIDES_KEY, "").strip()
    for part in filter(None, (p.strip() for p in text.split(","))):
        vid, _, count = part.partition(":")
        try:
            overrides[vid.strip()] = int(count)
        except ValueError as exc:
            raise ConfigError(f"{OVERRIDES_KEY}: bad entry {part!r}") from exc
    resources = operator_resources(flink_configuration.get(RESOURCES_KEY, "") or "{}")
    config = {}
    for op in model.operators:
        level: int | None = 0
        entry = resources.get(op.uid)
        if entry is not None:
            managed = float(entry["managedMemoryMb"])
            level = level_of(managed, base_managed_mib)
        tasks = overrides.get(op.vertex_id, op.initial_parallelism)
        if not 1 <= tasks <= op.max_parallelism:
            raise ConfigError(f"{op.uid}: parallelism {tasks} outside 1..{op.max_parallelism}")
        config[op.vertex_id] = VertexConfig(tasks, level)
    return config


RESOURCE_FIELDS = ("cpuCores", "taskHeapMb", "managedMemoryMb")


def operator_resources(text: str) -> dict[str, dict[str, float]]:
    """`hybridscaler.operator-resources` under flink-plugin's rules (HybridResources.parse):
    what real Flink refuses at job start, the twin refuses too, naming key, uid and field."""
    try:
        resources = json.loads(text, parse_constant=_reject_constant)
    except (json.JSONDecodeError, ValueError) as exc:
        raise ConfigError(f"{RESOURCES_KEY}: not valid JSON: {exc}") from exc
    if not isinstance(resources, dict):
        raise ConfigError(f"{RESOURCES_KEY}: must be a JSON object keyed by operator uid")
    for uid, entry in resources.items():
        def fault(what: str, uid: str = uid) -> ConfigError:
            return ConfigError(f"{RESOURCES_KEY} for operator uid {uid!r}: {what}")

        if not isinstance(entry, dict):
            raise fault(f"must be an object with {list(RESOURCE_FIELDS)}")
        unknown = sorted(set(entry) - set(RESOURCE_FIELDS))
        if unknown:
            raise fault(f"unknown field {unknown[0]!r} (known: {list(RESOURCE_FIELDS)})")
        cpu = entry.get("cpuCores")
        if not _is_number(cpu) or not cpu > 0:
            raise fault(f"cpuCores must be a number > 0, got {cpu!r}")
        for name, least in (("taskHeapMb", 1), ("managedMemoryMb", 0)):
            value = entry.get(name)
            if not (_is_number(value) and float(value).is_integer()
                    and least <= value < 2**31):
                raise fault(f"{name} must be an integer >= {least}, got {value!r}")
    return resources


def _is_number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


@dataclass
class Hosted:
    twin: Twin
    job: ff.DeployedJob
    task_manager: dict[str, Any]
    last_advance: float


def _deployed(namespace: str, name: str, generation: int, start_ms: int,
              flink_configuration: dict[str, str], task_manager: dict[str, Any]) -> ff.DeployedJob:
    resource = task_manager.get("resource") or {}
    try:
        slots = int(flink_configuration.get(SLOTS_KEY, "1"))
        cpu = float(resource.get("cpu", 1.0))
        memory = parse_memory_mib(resource.get("memory", "2048m"))
        replicas = int(task_manager.get("replicas", 0) or 0)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"bad taskManager or {SLOTS_KEY}: {exc}") from exc
    digest = hashlib.md5(f"{namespace}/{name}/{generation}".encode(), usedforsecurity=False)
    return ff.DeployedJob(
        namespace=namespace, name=name, job_id=digest.hexdigest(), job_name=name,
        start_ms=start_ms, slots_per_tm=slots,
        tm_count=replicas, tm_cpu=cpu, tm_memory_mib=memory, restarts=generation,
    )


class TwinServer:
    """Hosts twins keyed by (namespace, name); advances them in wall-clock time.

    `time_scale` runs virtual time faster than wall time; `downtime_scale` shortens
    restarts (savepoint + restore) for fast end-to-end runs.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, seed: int = 0,
                 time_scale: float = 1.0, downtime_scale: float = 1.0,
                 base_managed_mib: float = BASE_MANAGED_MIB, tick_interval_s: float = 0.2) -> None:
        self.seed, self.time_scale, self.downtime_scale = seed, time_scale, downtime_scale
        self.base_managed_mib = base_managed_mib
        self._host = host
        self._tick_interval = tick_interval_s
        self._jobs: dict[tuple[str, str], Hosted] = {}
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._http = ThreadingHTTPServer((host, port), _handler_for(self))
        self._http.daemon_threads = True
        self._threads: list[threading.Thread] = []

    # ---- lifecycle -----------------------------------------------------

    @property
    def port(self) -> int:
        return int(self._http.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{self._host}:{self.port}"

    def start(self) -> TwinServer:
        self._threads = [
            threading.Thread(target=self._http.serve_forever, args=(0.1,), name="twin-http",
                             daemon=True),
            threading.Thread(target=self._clock, name="twin-clock", daemon=True),
        ]
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._http.shutdown()
        self._http.server_close()
        for t in self._threads:
            t.join(timeout=5)

    def __enter__(self) -> TwinServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _clock(self) -> None:
        while not self._stop.wait(self._tick_interval):
            self.advance_all()

    def advance_all(self) -> None:
        """Bring every twin up to the wall clock (the clock thread calls this)."""
        now = time.monotonic()
        with self._lock:
            for hosted in self._jobs.values():
                elapsed = now - hosted.last_advance
                if elapsed > 0:
                    hosted.twin.advance(elapsed * self.time_scale)
                    hosted.last_advance = now

    # ---- the Python API --------------------------------------------------

    def add_job(self, namespace: str, name: str, flink_configuration: dict[str, str],
                task_manager: dict[str, Any] | None = None) -> dict[str, Any]:
        flink_configuration = dict(flink_configuration)
        task_manager = dict(task_manager or {})
        model_name = flink_configuration.get(JOB_MODEL_KEY)
        if not model_name:
            raise ConfigError(f"{namespace}/{name}: flinkConfiguration lacks {JOB_MODEL_KEY}")
        model = load_model(model_name)
        config = configuration_from_flink(model, flink_configuration, self.base_managed_mib)
        twin = Twin(model, seed=self.seed, base_managed_mib=self.base_managed_mib,
                    downtime_scale=self.downtime_scale, configuration=config, history_s=600)
        job = _deployed(namespace, name, 0, _now_ms(), flink_configuration, task_manager)
        with self._lock:
            if (namespace, name) in self._jobs:
                raise ConfigError(f"{namespace}/{name} already exists: use reconfigure")
            self._jobs[(namespace, name)] = Hosted(twin, job, task_manager, time.monotonic())
        return self.status(namespace, name)

    def reconfigure(self, namespace: str, name: str, flink_configuration: dict[str, str],
                    task_manager: dict[str, Any] | None = None, *,
                    in_place: bool = False) -> dict[str, Any]:
        """A stateful upgrade: stop with savepoint, restart with the new configuration.

        `in_place`: the adaptive scheduler's rescale instead; the same job (same job id)
        restarts its tasks with the new parallelism, and the TaskManagers stay."""
        with self._lock:
            hosted = self._get(namespace, name)
            self.advance_all()
            flink_configuration = dict(flink_configuration)
            task_manager = dict(task_manager if task_manager is not None else hosted.task_manager)
            model_name = flink_configuration.get(JOB_MODEL_KEY)
            if model_name and load_model(model_name).name != hosted.twin.model.name:
                raise ConfigError(f"{namespace}/{name}: changing the job model is not supported")
            config = configuration_from_flink(
                hosted.twin.model, flink_configuration, self.base_managed_mib
            )
            # New TaskManager resources are a stateful upgrade too: savepoint, new pods.
            new_pods = not in_place and task_manager != hosted.task_manager
            downtime = hosted.twin.apply(config, restart=new_pods)
            if not in_place and downtime > 0:
                restart_ms = _now_ms() + int(1000 * downtime / self.time_scale)
                hosted.job = _deployed(namespace, name, hosted.job.restarts + 1, restart_ms,
                                       flink_configuration, task_manager)
            hosted.task_manager = task_manager
        return self.status(namespace, name)

    def remove_job(self, namespace: str, name: str) -> None:
        with self._lock:
            self._get(namespace, name)
            del self._jobs[(namespace, name)]

    def status(self, namespace: str, name: str) -> dict[str, Any]:
        with self._lock:
            hosted = self._get(namespace, name)
            twin = hosted.twin
            return {
                "namespace": namespace, "name": name, "model": twin.model.name,
                "state": ff.job_state(twin), "jobId": hosted.job.job_id,
                "restarts": hosted.job.restarts, "time": twin.time,
                "lag": twin.lag(), "sourceRate": twin.achieved_rate(10.0),
                "targetRate": twin.model.load.rate_at(twin.time),
                "configuration": {
                    op.uid: {"vertexId": op.vertex_id,
                             "parallelism": twin.configuration[op.vertex_id].parallelism,
                             "memoryLevel": twin.configuration[op.vertex_id].memory_level}
                    for op in twin.model.operators
                },
            }

    def jobs(self) -> list[tuple[str, str]]:
        with self._lock:
            return sorted(self._jobs)

    def twin(self, namespace: str, name: str) -> Twin:
        """The twin itself, for tests that want to look inside."""
        with self._lock:
            return self._get(namespace, name).twin

    def _get(self, namespace: str, name: str) -> Hosted:
        try:
            return self._jobs[(namespace, name)]
        except KeyError:
            raise KeyError(f"no job {namespace}/{name}") from None

    # ---- what HTTP serves -------------------------------------------------

    def metrics_text(self) -> str:
        scrape = ff.Scrape()
        now = _now_ms()
        with self._lock:
            for hosted in self._jobs.values():
                ff.add_job_metrics(scrape, hosted.job, hosted.twin, now)
        return scrape.render()

    def rest(self, namespace: str, name: str, path: list[str]) -> Any:
        with self._lock:
            hosted = self._get(namespace, name)
            job, twin, now = hosted.job, hosted.twin, _now_ms()
            if path == ["jobs", "overview"]:
                return ff.jobs_overview(job, twin, now)
            if path == ["taskmanagers"]:
                return ff.taskmanagers(job, twin, HEAP_MIB_PER_TASK, NETWORK_MIB_PER_TASK, now)
            if len(path) == 2 and path[0] == "taskmanagers":
                return ff.taskmanager(job, twin, HEAP_MIB_PER_TASK, NETWORK_MIB_PER_TASK, now,
                                      path[1])
            if len(path) >= 2 and path[0] == "jobs":
                if path[1] != job.job_id:
                    raise KeyError(f"Job {path[1]} not found")
                if len(path) == 2:
                    return ff.job_details(job, twin, now)
                if path[2:] == ["plan"]:
                    return {"plan": ff.plan(job, twin)}
                if path[2:] == ["config"]:
                    return ff.job_config(job, twin)
        raise KeyError("Not found: /" + "/".join(path))


def _now_ms() -> int:
    return int(time.time() * 1000)


def _handler_for(server: TwinServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            return

        def _send(self, status: int, body: str | bytes, content_type: str) -> None:
            data = body.encode("utf-8") if isinstance(body, str) else body
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _json(self, status: int, payload: Any) -> None:
            self._send(status, json.dumps(payload), "application/json; charset=UTF-8")

        def _parts(self) -> list[str]:
            return [p for p in self.path.split("?", 1)[0].split("/") if p]

        def do_GET(self) -> None:
            parts = self._parts()
            try:
                if parts == ["metrics"]:
                    self._send(200, server.metrics_text(), "text/plain; version=0.0.4")
                elif parts == ["control", "jobs"]:
                    self._json(200, [server.status(ns, n) for ns, n in server.jobs()])
                elif len(parts) == 4 and parts[:2] == ["control", "jobs"]:
                    self._json(200, server.status(parts[2], parts[3]))
                elif len(parts) >= 3:
                    self._json(200, server.rest(parts[0], parts[1], parts[2:]))
                else:
                    raise KeyError("Not found: " + self.path)
            except KeyError as exc:
                self._json(HTTPStatus.NOT_FOUND, {"errors": [str(exc.args[0])]})

        def do_PUT(self) -> None:
            parts = self._parts()
            if len(parts) != 4 or parts[:2] != ["control", "jobs"]:
                self._json(HTTPStatus.NOT_FOUND, {"errors": ["Not found: " + self.path]})
                return
            ns, name = parts[2], parts[3]
            try:
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                conf = {str(k): str(v) for k, v in (body.get("flinkConfiguration") or {}).items()}
                tm = body.get("taskManager")
                if (ns, name) in server.jobs():
                    self._json(200, server.reconfigure(ns, name, conf, tm))
                else:
                    self._json(201, server.add_job(ns, name, conf, tm))
            except (ValueError, AttributeError) as exc:
                self._json(HTTPStatus.BAD_REQUEST, {"errors": [str(exc)]})

        def do_DELETE(self) -> None:
            parts = self._parts()
            try:
                if len(parts) != 4 or parts[:2] != ["control", "jobs"]:
                    raise KeyError("Not found: " + self.path)
                server.remove_job(parts[2], parts[3])
                self._json(200, {})
            except KeyError as exc:
                self._json(HTTPStatus.NOT_FOUND, {"errors": [str(exc.args[0])]})

    return Handler
