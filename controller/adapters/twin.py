"""The ports in memory, backed by the twin: what `hybrid-scaler simulate` runs the pass on.

One FlinkDeployment (a dict, as the API server would return it) drives one twin in
virtual time. A server-side apply merges the owned fields into it and restarts the
twin with what Flink and flink-plugin would run for that configuration
(`simulator.serve.configuration_from_flink`, the same reading `twin serve` does).
The JobManager side reports the twin's job and graph, the metrics side one window
of the twin's observation, and the clock is the twin's. Nothing here knows the
loop's rules: the pass is the production one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from controller.api import Status
from controller.ports import (
    CacheTarget,
    Collected,
    JobSummary,
    MetricsUnavailable,
    Ports,
    Resized,
    ResizeFailed,
)
from controller.realize import (
    RESIZABLE_BACKEND,
    RESIZABLE_FORST_BACKEND,
    STATE_BACKEND_KEY,
    cache_bytes,
    write_buffer_ratio,
    write_buffer_ratio_key,
)
from policies.levels import level_of, managed_mib
from policies.model import JobGraph, VertexConfig
from policies.quantity import MIB
from policies.restart_cost import Enactment, Engine
from simulator.model import JobModel
from simulator.serve import (
    JOB_MODEL_KEY,
    SLOTS_KEY,
    configuration_from_flink,
    slot_sharing_groups,
)
from simulator.twin import BASE_MANAGED_MIB, Twin, cpu_limit_factor

JOB_ID = "0" * 32


def flink_deployment(model: JobModel, name: str, namespace: str,
                     resizable: bool = False) -> dict[str, Any]:
    """A FlinkDeployment of the model as the paper's runs start: one 4-slot TaskManager;
    `resizable`: with flink-plugin's resizable backend (memory steps in place)."""
    forst = model.engine == Engine.FORST
    conf: dict[str, Any] = {JOB_MODEL_KEY: model.name, SLOTS_KEY: "4"}
    if forst:  # Flink 2.x on ForSt (resizable: flink-plugin's ForSt backend)
        conf[STATE_BACKEND_KEY] = RESIZABLE_FORST_BACKEND if resizable else "forst"
    elif resizable:
        conf[STATE_BACKEND_KEY] = RESIZABLE_BACKEND
    conf[write_buffer_ratio_key(conf)] = str(model.rocksdb.write_buffer_ratio)
    deployment: dict[str, Any] = {
        "apiVersion": "flink.apache.org/v1beta1", "kind": "FlinkDeployment",
        "metadata": {"name": name, "namespace": namespace, "generation": 1},
        "spec": {
            # On ForSt last-state, whose restart reads no state (policies/restart_cost.py).
            "job": {"upgradeMode": "last-state" if forst else "savepoint"},
            "flinkConfiguration": conf,
            "taskManager": {"resource": {"cpu": 4.0, "memory": "2048m"}, "replicas": 1},
        },
        "status": {"lifecycleState": "STABLE", "jobStatus": {"state": "RUNNING"}},
    }
    return deployment


@dataclass
class TwinDeployments:
    """The `Deployments` port over one twin: an apply restarts it with the new fields."""

    twin: Twin
    deployment: dict[str, Any]
    base_managed_mib: float = BASE_MANAGED_MIB
    downtimes: list[float] = field(default_factory=list)  # one per apply that restarted

    def get(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        running = self.twin.running
        # A copy of the top level only: the pass reads the spec and never changes it.
        deployment = dict(self.deployment)
        deployment["status"] = {"lifecycleState": "STABLE" if running else "UPGRADING",
                                "jobStatus": {"state": "RUNNING" if running else "RESTARTING"}}
        return deployment

    def apply(self, namespace: str, name: str, body: Mapping[str, Any]) -> str:
        wanted = body["spec"]
        spec = self.deployment["spec"]
        conf = spec["flinkConfiguration"]
        # Every key the apply sends: ours (overrides, resources, SQL settings) are in it.
        conf.update(wanted.get("flinkConfiguration", {}))
        tm = wanted.get("taskManager", {})
        spec["taskManager"].setdefault("resource", {}).update(tm.get("resource", {}))
        if "replicas" in tm:
            spec["taskManager"]["replicas"] = tm["replicas"]
        self.deployment["metadata"]["generation"] += 1
        # A stateful upgrade: savepoint (or the latest checkpoint, which the running twin
        # always has), new TaskManagers, restore (the twin's downtime).
        configuration = configuration_from_flink(self.twin.model, conf, self.base_managed_mib)
        self.twin.groups = slot_sharing_groups(self.twin.model, conf)
        # The pods the placement asks for bound the tasks' CPU (Twin.cpu_budget) at their
        # CPU limit.
        resource = spec["taskManager"].get("resource", {})
        replicas = spec["taskManager"].get("replicas")
        if isinstance(replicas, int) and "cpu" in resource:
            self.twin.cpu_budget = (replicas * float(resource["cpu"])
                                    * cpu_limit_factor(conf))
        kind = (Enactment.LAST_STATE if spec["job"].get("upgradeMode") == "last-state"
                else Enactment.SAVEPOINT)
        self.downtimes.append(self.twin.apply(configuration, restart=True, kind=kind))
        return ""


@dataclass
class TwinResizer:
    """The `Resizer` port: flink-plugin's agents on the twin's TaskManagers. A cache target
    is read back as the memory level nearest it; every resize is counted."""

    twin: Twin
    deployment: Mapping[str, Any]
    base_managed_mib: float = BASE_MANAGED_MIB
    resizes: list[float] = field(default_factory=list)  # virtual times of resizes

    def resize(self, job_id: str, targets: Iterable[CacheTarget], budget_bytes: int
               ) -> Resized:
        ratio = write_buffer_ratio(self.deployment["spec"]["flinkConfiguration"])
        by_name = {v.name: v.id for v in self.twin.job_graph().vertices}
        config = self.twin.configuration
        wanted: dict[str, VertexConfig] = {}
        for t in targets:
            if t.task not in by_name:
                raise ResizeFailed(f"spec.resize: no agent holds a slot of {t.task}", "missing")
            vid = by_name[t.task]
            level = level_of(t.cache_bytes * 3.0 / (3.0 - ratio) / MIB, self.base_managed_mib)
            if level != config[vid].memory_level:
                wanted[vid] = VertexConfig(config[vid].parallelism, level)
        if wanted:
            self.twin.resize(wanted)
            self.resizes.append(self.twin.time)
        names = {vid: name for name, vid in by_name.items()}
        config = self.twin.configuration
        # Read back as the C API would: the capacity Flink's rule gives the level's memory.
        return Resized({names[vid]: cache_bytes(
                            managed_mib(config[vid].memory_level, self.base_managed_mib) * MIB,
                            ratio)
                        for vid in (by_name[t.task] for t in targets)},
                       tuple(sorted(names[vid] for vid in wanted)))


@dataclass
class MemoryStatusStore:
    last: Status = field(default_factory=Status)

    def save(self, status: Status) -> None:
        self.last = status  # one writer: never a conflict

    def confirm(self) -> None:
        pass

    def latest(self) -> tuple[Mapping[str, Any], Status]:
        return {}, self.last


@dataclass
class MemoryEvents:
    events: list[tuple[float, str, str, str]] = field(default_factory=list)
    twin: Twin | None = None

    def emit(self, type_: str, reason: str, message: str) -> None:
        self.events.append((self.twin.time if self.twin else 0.0, type_, reason, message))


@dataclass
class TwinJob:
    """The `JobReader` port: the twin's job as the JobManager's REST API describes it."""

    twin: Twin
    first_start_s: float = 0.0  # virtual time the job started, before any restart

    def job(self) -> JobSummary | None:
        twin = self.twin
        start = twin.down_until if twin.restarts else self.first_start_s
        state = "RUNNING" if twin.running else "RESTARTING"
        return JobSummary(JOB_ID, twin.model.name, state, round(start * 1000),
                          round(max(start, twin.time) * 1000))

    def job_graph(self, jid: str, uid_candidates: Iterable[str] = (),
                  operator_ids: Mapping[str, Iterable[str]] | None = None) -> JobGraph:
        return self.twin.job_graph()

    def configuration(self, jid: str, keys: Iterable[str]) -> Mapping[str, str] | None:
        return {}  # no Flink operator, so no default configuration under the spec's


@dataclass
class TwinMetrics:
    """The `Metrics` port: one window of the twin's observation (noise included)."""

    twin: Twin

    def observe(self, graph: JobGraph, job_id: str, now: float, window_s: float,
                resolution_s: float) -> Collected | MetricsUnavailable:
        observation = self.twin.observe(window_s)
        missing = [v.name for v in graph.vertices if v.id not in observation.vertices]
        if missing:
            return MetricsUnavailable(f"metrics unavailable: no samples for {', '.join(missing)}")
        capacity = {vid: self.twin.cost(vid).cache_bytes
                    for vid, m in observation.vertices.items() if m.has_state_backend_metrics}
        return Collected(observation, capacity, self.twin.model.state_bytes or None)

    def operator_ids(self, job_id: str, now: float) -> Mapping[str, Iterable[str]]:
        return {}  # the twin's graph carries its uids already


def twin_ports(twin: Twin, deployment: dict[str, Any], *, job_started_s: float = 0.0,
               base_managed_mib: float = BASE_MANAGED_MIB
               ) -> tuple[Ports, TwinDeployments, TwinResizer]:
    """Every port of one pass over `twin`, the deployments port (to read its restarts) and
    the agents' (to read its resizes)."""
    deployments = TwinDeployments(twin, deployment, base_managed_mib)
    job, metrics = TwinJob(twin, job_started_s), TwinMetrics(twin)
    resizer = TwinResizer(twin, deployment, base_managed_mib)
    ports = Ports(deployments=deployments, store=MemoryStatusStore(),
                  events=MemoryEvents(twin=twin), flink=lambda namespace, name: job,
                  metrics=lambda url: metrics, clock=lambda: twin.time,
                  resizers=lambda namespace, name, spec: resizer)
    return ports, deployments, resizer
