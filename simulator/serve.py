"""Serve mode: many twins in one process, in wall-clock time, speaking Flink over HTTP.

Each FlinkDeployment (namespace, name) gets a twin whose model comes from
`hybridscaler.twin.job-model` in its Flink configuration. The twin reads
`pipeline.jobvertex-parallelism-overrides` and `hybridscaler.operator-resources`
exactly as Flink and flink-plugin do (docs/flink-contract.md).

HTTP, the server's own port:
  GET  /metrics                              every job, Flink Prometheus reporter format
  GET  /control/jobs                         lifecycle of every job
  GET  /control/jobs/{ns}/{name}             lifecycle of one job (with its `restUrl`)
  PUT  /control/jobs/{ns}/{name}             add the job, or reconfigure it (a restart); body
                                             {"flinkConfiguration": {...}, "taskManager": {...}}
  POST /control/jobs/{ns}/{name}/fail        the job crashes and comes back with a new id
  POST /control/jobs/{ns}/{name}/failover    the job restarts in place (numRestarts + 1)
  DELETE /control/jobs/{ns}/{name}
  GET|PUT http://{name}-rest.{ns}.svc:8081/… as an HTTP proxy: the deployment's REST API
                                             under its in-cluster Service name

Flink REST, one listener (host:port, no path prefix) per deployment, as each Flink
cluster has its own JobManager; every path bare and under /v1/ (docs/simulator.md).
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeGuard
from urllib.parse import parse_qs, urlsplit

from policies.levels import level_of, own_managed_mib
from policies.model import VertexConfig
from policies.quantity import MIB, parse_flink_memory_bytes
from policies.restart_cost import Enactment
from simulator import flink_format as ff
from simulator.model import JobModel, load_model
from simulator.twin import (
    BASE_MANAGED_MIB,
    HEAP_MIB_PER_TASK,
    NETWORK_MIB_PER_TASK,
    Twin,
    cpu_limit_factor,
)

JOB_MODEL_KEY = "hybridscaler.twin.job-model"
OVERRIDES_KEY = "pipeline.jobvertex-parallelism-overrides"
RESOURCES_KEY = "hybridscaler.operator-resources"
SLOTS_KEY = "taskmanager.numberOfTaskSlots"
SCHEDULER_KEY = "jobmanager.scheduler"
# A deployment's in-cluster REST Service, as the Flink Kubernetes Operator names it.
_SERVICE_HOST = re.compile(r"^(?P<name>[^.]+)-rest\.(?P<ns>[^.]+)(?:\.svc(?:\.cluster\.local)?)?$")


class ConfigError(ValueError):
    """A FlinkDeployment configuration the twin (like Flink) cannot run."""


def parse_memory_mib(value: Any) -> float:
    """'2048m', '2g', '2Gi', '1536Mi' or a byte count, in MiB, as the Flink operator reads a
    FlinkDeployment's memory (policies.quantity)."""
    try:
        return parse_flink_memory_bytes(value) / MIB
    except ValueError as e:
        raise ConfigError(str(e)) from None


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
            group = entry.get(GROUP_FIELD)
            managed = own_managed_mib(float(entry["managedMemoryMb"]),
                                      None if group is None else str(group), op.vertex_id)
            level = level_of(managed, base_managed_mib)
        tasks = overrides.get(op.vertex_id, op.initial_parallelism)
        if not 1 <= tasks <= op.max_parallelism:
            raise ConfigError(f"{op.uid}: parallelism {tasks} outside 1..{op.max_parallelism}")
        config[op.vertex_id] = VertexConfig(tasks, level)
    return config


def slot_sharing_groups(model: JobModel, flink_configuration: Mapping[str, str]
                        ) -> dict[str, str]:
    """vertex id -> the slot sharing group written for its operators (only those given)."""
    resources = operator_resources(flink_configuration.get(RESOURCES_KEY, "") or "{}")
    return {op.vertex_id: str(resources[op.uid][GROUP_FIELD]) for op in model.operators
            if GROUP_FIELD in resources.get(op.uid, {})}


RESOURCE_FIELDS = ("cpuCores", "taskHeapMb", "managedMemoryMb")
GROUP_FIELD = "slotSharingGroup"


def operator_resources(text: str) -> dict[str, dict[str, Any]]:
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
        unknown = sorted(set(entry) - {*RESOURCE_FIELDS, GROUP_FIELD})
        if unknown:
            raise fault(f"unknown field {unknown[0]!r} "
                        f"(known: {[*RESOURCE_FIELDS, GROUP_FIELD]})")
        group = entry.get(GROUP_FIELD)
        if group is not None and not (isinstance(group, str) and group.strip()):
            raise fault(f"{GROUP_FIELD} must be a non-empty string, got {group!r}")
        cpu = entry.get("cpuCores")
        if not _is_number(cpu) or not cpu > 0:
            raise fault(f"cpuCores must be a number > 0, got {cpu!r}")
        for name, least in (("taskHeapMb", 1), ("managedMemoryMb", 0)):
            value = entry.get(name)
            if not (_is_number(value) and float(value).is_integer()
                    and least <= value < 2**31):
                raise fault(f"{name} must be an integer >= {least}, got {value!r}")
    # One slot of a group is one ResourceProfile: every member must describe the same slot.
    slot_of: dict[str, tuple[Any, ...]] = {}
    for uid, entry in sorted(resources.items()):
        group = entry.get(GROUP_FIELD)
        if group is None:
            continue
        slot = tuple(entry[f] for f in RESOURCE_FIELDS)
        if slot_of.setdefault(group, slot) != slot:
            raise ConfigError(f"{RESOURCES_KEY} for operator uid {uid!r}: slot sharing group "
                              f"{group!r} is described with different resources by its members")
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
    flink_configuration: dict[str, str] = field(default_factory=dict)
    rest: ThreadingHTTPServer | None = None  # this deployment's JobManager REST endpoint
    lower_bounds: dict[str, int] = field(default_factory=dict)  # FLIP-291 requirements


class RestError(Exception):
    """An answer of Flink's REST API other than 200: status and `{"errors": [...]}`."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _deployed(namespace: str, name: str, generation: int, start_ms: int,
              flink_configuration: dict[str, str], task_manager: dict[str, Any],
              running_ms: int = 0) -> ff.DeployedJob:
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
        tm_cpu_limit_factor=cpu_limit_factor(flink_configuration),
        running_ms=running_ms or start_ms,
    )


def pods_cpu(job: ff.DeployedJob, twin: Twin) -> float:
    """The cores the job's TaskManager pods may use, which bound what its tasks get: as
    many pods as the REST view shows (`flink_format.slot_plan`), each of resource.cpu
    times the CPU limit factor."""
    return len(ff.slot_plan(job, twin)) * job.tm_cpu * job.tm_cpu_limit_factor


class TwinServer:
    """Hosts twins keyed by (namespace, name); advances them in wall-clock time.

    `time_scale` runs virtual time faster than wall time; `downtime_scale` shortens
    restarts (savepoint + restore) for fast end-to-end runs.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, seed: int = 0,
                 time_scale: float = 1.0, downtime_scale: float = 1.0,
                 base_managed_mib: float = BASE_MANAGED_MIB, tick_interval_s: float = 0.2,
                 manual_clock: bool = False) -> None:
        self.seed, self.time_scale, self.downtime_scale = seed, time_scale, downtime_scale
        # manual_clock: virtual time moves only by step(), never with the wall clock, so a
        # client driven in lockstep (bench/peer) sees the twins exactly at its own clock's time
        # however slow the machine is.
        self.manual_clock = manual_clock
        self._virtual_s = 0.0
        self.base_managed_mib = base_managed_mib
        # The twins' epoch clock agrees with the wall clock here and runs time_scale times
        # faster from then on (now_ms); a client that follows the same rule (e.g. the real
        # flink-autoscaler in bench/peer) sees Flink's timestamps and durations consistent
        # with the virtual time the twins run in.
        self.clock_anchor_ms = _wall_ms()
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
        with self._lock:
            listeners = [h.rest for h in self._jobs.values() if h.rest is not None]
        for rest in listeners:
            _close(rest)
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
        if self.manual_clock:
            return
        now = time.monotonic()
        with self._lock:
            for hosted in self._jobs.values():
                elapsed = now - hosted.last_advance
                if elapsed > 0:
                    hosted.twin.advance(elapsed * self.time_scale)
                    hosted.last_advance = now

    def now_ms(self) -> int:
        """Epoch milliseconds on the twins' clock (see clock_anchor_ms)."""
        if self.manual_clock:
            return self.clock_anchor_ms + int(self._virtual_s * 1000)
        return self.clock_anchor_ms + int((_wall_ms() - self.clock_anchor_ms) * self.time_scale)

    def step(self, seconds: float) -> None:
        """Manual clock: run every twin `seconds` of virtual time."""
        if not self.manual_clock:
            raise RuntimeError("step() needs TwinServer(manual_clock=True)")
        with self._lock:
            for hosted in self._jobs.values():
                hosted.twin.advance(seconds)
            self._virtual_s += seconds

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
        twin.groups = slot_sharing_groups(model, flink_configuration)
        job = _deployed(namespace, name, 0, self.now_ms(), flink_configuration, task_manager)
        twin.cpu_budget = pods_cpu(job, twin)
        with self._lock:
            if (namespace, name) in self._jobs:
                raise ConfigError(f"{namespace}/{name} already exists: use reconfigure")
            hosted = Hosted(twin, job, task_manager, time.monotonic(), flink_configuration)
            hosted.rest = self._listen(namespace, name)
            self._jobs[(namespace, name)] = hosted
        return self.status(namespace, name)

    def _listen(self, namespace: str, name: str) -> ThreadingHTTPServer:
        """The deployment's own REST endpoint (its JobManager's), on a free port."""
        rest = ThreadingHTTPServer((self._host, 0), _rest_handler_for(self, (namespace, name)))
        rest.daemon_threads = True
        threading.Thread(target=rest.serve_forever, args=(0.1,), daemon=True,
                         name=f"twin-rest-{namespace}/{name}").start()
        return rest

    def rest_url(self, namespace: str, name: str) -> str:
        """The deployment's JobManager REST address (host:port, no path), as a client of
        a Flink cluster takes it."""
        with self._lock:
            rest = self._get(namespace, name).rest
        assert rest is not None
        return f"http://{self._host}:{rest.server_address[1]}"

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
            hosted.twin.groups = slot_sharing_groups(hosted.twin.model, flink_configuration)
            # The operator upgrades the job on any change of its spec, new TaskManager
            # resources or settings the job graph does not show (a CPU limit factor): a
            # stateful upgrade too, savepoint, new pods.
            new_pods = not in_place and (task_manager != hosted.task_manager
                                         or flink_configuration != hosted.flink_configuration)
            downtime = hosted.twin.apply(
                config, restart=new_pods,
                kind=Enactment.IN_PLACE if in_place else Enactment.SAVEPOINT)
            if downtime > 0:
                now = self.now_ms()
                running_ms = now + int(1000 * downtime)
                if in_place:  # the same job restarts its tasks
                    hosted.job = replace(hosted.job, running_ms=running_ms, created_ms=now)
                else:  # a new job, submitted now, running once restored
                    hosted.job = _deployed(namespace, name, hosted.job.restarts + 1, now,
                                           flink_configuration, task_manager, running_ms)
                hosted.lower_bounds = {}
            hosted.task_manager = task_manager
            hosted.flink_configuration = flink_configuration
            hosted.twin.cpu_budget = pods_cpu(hosted.job, hosted.twin)
        return self.status(namespace, name)

    def fail(self, namespace: str, name: str) -> dict[str, Any]:
        """The job crashes and is resubmitted under a new job id (what a crash-looping
        job looks like from the JobManager): the same configuration, a restart's downtime,
        and no change to the FlinkDeployment (tests of job health, e2e)."""
        with self._lock:
            hosted = self._get(namespace, name)
            self.advance_all()
            downtime = hosted.twin.apply(dict(hosted.twin.configuration), restart=True)
            now = self.now_ms()
            hosted.job = _deployed(namespace, name, hosted.job.restarts + 1, now,
                                   hosted.flink_configuration, hosted.task_manager,
                                   now + int(1000 * downtime))
            hosted.lower_bounds = {}
        return self.status(namespace, name)

    def failover(self, namespace: str, name: str) -> dict[str, Any]:
        """The job fails and restarts in place (Flink's restart strategy): the same id and
        start, a restart's downtime, numRestarts one higher, and no change to the
        FlinkDeployment (tests of job health, e2e)."""
        with self._lock:
            hosted = self._get(namespace, name)
            self.advance_all()
            downtime = hosted.twin.apply(dict(hosted.twin.configuration), restart=True)
            hosted.job = replace(hosted.job, failovers=hosted.job.failovers + 1,
                                 running_ms=self.now_ms() + int(1000 * downtime))
        return self.status(namespace, name)

    def remove_job(self, namespace: str, name: str) -> None:
        with self._lock:
            hosted = self._get(namespace, name)
            del self._jobs[(namespace, name)]
        if hosted.rest is not None:
            _close(hosted.rest)

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
                "restUrl": self.rest_url(namespace, name),
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
        now = self.now_ms()
        with self._lock:
            for hosted in self._jobs.values():
                ff.add_job_metrics(scrape, hosted.job, hosted.twin, now)
        return scrape.render()

    def rest(self, namespace: str, name: str, method: str, path: str,
             body: Any = None) -> Any:
        """Flink 1.20's REST API of one deployment: `path` with its query, bare or under
        /v1/. Raises RestError with Flink's status for anything but 200."""
        split = urlsplit(path)
        parts = [p for p in split.path.split("/") if p]
        if parts[:1] == ["v1"]:
            parts = parts[1:]
        query = {k: ",".join(v) for k, v in parse_qs(split.query).items()}
        with self._lock:
            try:
                hosted = self._get(namespace, name)
            except KeyError:
                raise RestError(HTTPStatus.NOT_FOUND, "Not found: " + split.path) from None
            # Counters and timestamps as of now, not of the last clock tick: at a high
            # time_scale a tick is seconds of virtual time, and a client deriving rates
            # from counters over its own clock would see that as jitter.
            self.advance_all()
            if method == "PUT":
                if (len(parts) == 3 and parts[0] == "jobs"
                        and parts[2] == "resource-requirements"):
                    self._job_of(hosted, parts[1])
                    return self._put_requirements(namespace, name, hosted, body)
                raise RestError(HTTPStatus.NOT_FOUND, "Not found: " + split.path)
            return self._get_rest(hosted, parts, query, split.path)

    def _get_rest(self, hosted: Hosted, parts: list[str], query: dict[str, str],
                  where: str) -> Any:
        job, twin, now = hosted.job, hosted.twin, self.now_ms()
        names = _names(query.get("get"))
        aggs = _aggregations(query.get("agg"))
        if parts == ["jobs", "overview"]:
            return ff.jobs_overview(job, twin, now)
        if parts == ["jobs"]:
            return {"jobs": [{"id": job.job_id, "status": ff.job_state(twin)}]}
        if parts == ["overview"]:
            return ff.cluster_overview(job, twin)
        if parts == ["jobmanager", "metrics"]:
            return ff.metric_values(ff.jobmanager_store(job, twin), names)
        if parts == ["jobmanager", "config"]:
            return ff.job_manager_config(job, hosted.flink_configuration)
        if parts == ["taskmanagers"]:
            return ff.taskmanagers(job, twin, HEAP_MIB_PER_TASK, NETWORK_MIB_PER_TASK, now)
        if parts == ["taskmanagers", "metrics"]:
            return ff.aggregated(ff.taskmanager_stores(job, twin), names, aggs)
        if len(parts) == 2 and parts[0] == "taskmanagers":
            try:
                return ff.taskmanager(job, twin, HEAP_MIB_PER_TASK, NETWORK_MIB_PER_TASK, now,
                                      parts[1])
            except KeyError as exc:
                raise RestError(HTTPStatus.NOT_FOUND, str(exc.args[0])) from None
        if len(parts) >= 2 and parts[0] == "jobs":
            rest = parts[2:]
            if rest[:1] == ["vertices"] and rest[2:] == ["subtasks", "metrics"]:
                # Flink answers an empty list for a job or vertex it has no metrics of.
                stores = (ff.subtask_stores(twin, rest[1])
                          if parts[1] == job.job_id and rest[1] in twin.configuration else [])
                return ff.aggregated(stores, names, aggs)
            self._job_of(hosted, parts[1])
            if not rest:
                return ff.job_details(job, twin, now)
            if rest == ["status"]:
                return {"status": ff.job_state(twin)}
            if rest == ["metrics"]:
                return ff.job_metrics(job, names)
            if rest == ["plan"]:
                return {"plan": ff.plan(job, twin)}
            if rest == ["config"]:
                return ff.job_config(job, twin)
            if rest == ["jobmanager", "config"]:
                return ff.job_manager_config(job, hosted.flink_configuration)
            if rest == ["resource-requirements"]:
                self._adaptive(hosted)
                return ff.resource_requirements(twin, hosted.lower_bounds)
        raise RestError(HTTPStatus.NOT_FOUND, "Not found: " + where)

    @staticmethod
    def _job_of(hosted: Hosted, jid: str) -> None:
        if jid != hosted.job.job_id:
            raise RestError(HTTPStatus.NOT_FOUND, f"Job {jid} not found")

    @staticmethod
    def _adaptive(hosted: Hosted) -> None:
        scheduler = hosted.flink_configuration.get(SCHEDULER_KEY, "default").strip().lower()
        if scheduler != "adaptive":
            # What Flink 1.20 answers under the default scheduler (golden sample).
            raise RestError(HTTPStatus.INTERNAL_SERVER_ERROR,
                            "java.lang.UnsupportedOperationException: The DefaultScheduler "
                            "does not support changing the parallelism without a job restart. "
                            "This feature is currently only expected to work with the "
                            "AdaptiveScheduler.")

    def _put_requirements(self, namespace: str, name: str, hosted: Hosted, body: Any) -> Any:
        """FLIP-291: the adaptive scheduler rescales the running job in place to the upper
        bounds (the twin always has the slots): same job id, no savepoint."""
        self._adaptive(hosted)
        if not isinstance(body, dict):
            raise RestError(HTTPStatus.BAD_REQUEST, "Request body must be a JSON object "
                            "keyed by job vertex id")
        twin = hosted.twin
        unknown = sorted(set(body) - set(twin.configuration))
        if unknown:
            raise RestError(HTTPStatus.BAD_REQUEST,
                            f"Job vertex [{unknown[0]}] was not found in the JobGraph.")
        missing = sorted(set(twin.configuration) - set(body))
        if missing:
            raise RestError(HTTPStatus.BAD_REQUEST,
                            f"Requirements for job vertex {missing[0]} are missing")
        ops = twin.model.by_vertex()
        self.advance_all()
        config: dict[str, VertexConfig] = {}
        lower_bounds: dict[str, int] = {}
        for vid, requirement in body.items():
            bounds = requirement.get("parallelism") if isinstance(requirement, dict) else None
            lower = bounds.get("lowerBound") if isinstance(bounds, dict) else None
            upper = bounds.get("upperBound") if isinstance(bounds, dict) else None
            if not (isinstance(lower, int) and isinstance(upper, int)):
                raise RestError(HTTPStatus.BAD_REQUEST, f"Job vertex {vid}: parallelism needs "
                                "integer lowerBound and upperBound")
            top = ops[vid].max_parallelism
            if not 1 <= lower <= upper <= top:
                raise RestError(HTTPStatus.BAD_REQUEST, f"Job vertex {vid}: parallelism bounds "
                                f"[{lower}, {upper}] must satisfy 1 <= lower <= upper <= "
                                f"max parallelism {top}")
            config[vid] = VertexConfig(upper, twin.configuration[vid].memory_level)
            lower_bounds[vid] = lower
        # In place, as the adaptive scheduler does it: its measured cost, not a savepoint's.
        downtime = twin.apply(config, kind=Enactment.IN_PLACE)
        twin.cpu_budget = pods_cpu(hosted.job, twin)  # natively, TaskManagers on demand
        if downtime > 0:
            now = self.now_ms()
            hosted.job = replace(hosted.job, running_ms=now + int(1000 * downtime),
                                 created_ms=now)
        hosted.lower_bounds = lower_bounds
        return {}

    def key_of_service(self, host: str) -> tuple[str, str] | None:
        """The deployment a request for `<name>-rest.<ns>.svc[:port]` means."""
        match = _SERVICE_HOST.match(host.rsplit(":", 1)[0] if host.count(":") == 1 else host)
        return (match["ns"], match["name"]) if match else None


def _names(text: str | None) -> list[str] | None:
    return None if text is None or not text.strip() else [
        n.strip() for n in text.split(",") if n.strip()]


def _aggregations(text: str | None) -> list[str]:
    wanted = [a.strip().lower() for a in (text or "").split(",") if a.strip()]
    bad = [a for a in wanted if a not in ff.AGGREGATIONS]
    if bad:
        # Flink's query parameter conversion refuses an unknown aggregation.
        raise RestError(HTTPStatus.BAD_REQUEST,
                        f"Cannot resolve query parameter (agg) from value \"{text}\".")
    return wanted


def _wall_ms() -> int:
    return int(time.time() * 1000)


def _close(http: ThreadingHTTPServer) -> None:
    http.shutdown()
    http.server_close()


class _Handler(BaseHTTPRequestHandler):
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

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length", "0"))
        return json.loads(self.rfile.read(length) or b"{}")

    def _rest(self, server: TwinServer, key: tuple[str, str], method: str, path: str) -> None:
        try:
            body = self._body() if method == "PUT" else None
        except ValueError as exc:
            self._json(HTTPStatus.BAD_REQUEST, {"errors": [f"Request body is not JSON: {exc}"]})
            return
        try:
            self._json(200, server.rest(*key, method, path, body))
        except RestError as exc:
            self._json(exc.status, {"errors": [str(exc)]})


def _rest_handler_for(server: TwinServer, key: tuple[str, str]) -> type[BaseHTTPRequestHandler]:
    """One deployment's JobManager REST endpoint."""
    class RestHandler(_Handler):
        def do_GET(self) -> None:
            self._rest(server, key, "GET", self.path)

        def do_PUT(self) -> None:
            self._rest(server, key, "PUT", self.path)

    return RestHandler


def _handler_for(server: TwinServer) -> type[BaseHTTPRequestHandler]:
    class Handler(_Handler):
        def _parts(self) -> list[str]:
            return [p for p in self.path.split("?", 1)[0].split("/") if p]

        def _proxied(self, method: str) -> bool:
            """A proxy request for a deployment's in-cluster Service: serve its REST API
            (HTTP_PROXY pointed here lets an unmodified client use cluster DNS names)."""
            if not self.path.startswith("http://"):
                return False
            url = urlsplit(self.path)
            key = server.key_of_service(url.netloc)
            if key is None:
                self._json(HTTPStatus.BAD_GATEWAY,
                           {"errors": [f"no FlinkDeployment REST Service {url.netloc}"]})
            else:
                target = url.path + (f"?{url.query}" if url.query else "")
                self._rest(server, key, method, target)
            return True

        def do_GET(self) -> None:
            if self._proxied("GET"):
                return
            parts = self._parts()
            try:
                if parts == ["metrics"]:
                    self._send(200, server.metrics_text(), "text/plain; version=0.0.4")
                elif parts == ["control", "jobs"]:
                    self._json(200, [server.status(ns, n) for ns, n in server.jobs()])
                elif len(parts) == 4 and parts[:2] == ["control", "jobs"]:
                    self._json(200, server.status(parts[2], parts[3]))
                else:
                    raise KeyError("Not found: " + self.path)
            except KeyError as exc:
                self._json(HTTPStatus.NOT_FOUND, {"errors": [str(exc.args[0])]})

        def do_PUT(self) -> None:
            if self._proxied("PUT"):
                return
            parts = self._parts()
            if len(parts) != 4 or parts[:2] != ["control", "jobs"]:
                self._json(HTTPStatus.NOT_FOUND, {"errors": ["Not found: " + self.path]})
                return
            ns, name = parts[2], parts[3]
            try:
                body = self._body()
                conf = {str(k): str(v) for k, v in (body.get("flinkConfiguration") or {}).items()}
                tm = body.get("taskManager")
                if (ns, name) in server.jobs():
                    self._json(200, server.reconfigure(ns, name, conf, tm))
                else:
                    self._json(201, server.add_job(ns, name, conf, tm))
            except (ValueError, AttributeError) as exc:
                self._json(HTTPStatus.BAD_REQUEST, {"errors": [str(exc)]})

        def do_POST(self) -> None:
            parts = self._parts()
            try:
                if (len(parts) != 5 or parts[:2] != ["control", "jobs"]
                        or parts[4] not in ("fail", "failover")):
                    raise KeyError("Not found: " + self.path)
                act = server.fail if parts[4] == "fail" else server.failover
                self._json(200, act(parts[2], parts[3]))
            except KeyError as exc:
                self._json(HTTPStatus.NOT_FOUND, {"errors": [str(exc.args[0])]})

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
