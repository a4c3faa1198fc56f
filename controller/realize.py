"""Realize: the FlinkDeployment fields the scaler owns, rendered, compared and applied.

Only these fields are ever written (docs/flink-contract.md), by server-side apply
with field manager `hybrid-scaler`, so GitOps tools can ignore exactly them:

* `spec.flinkConfiguration["pipeline.jobvertex-parallelism-overrides"]`
* `spec.flinkConfiguration["hybridscaler.operator-resources"]` (fine-grained mode)
* `spec.taskManager.resource.cpu` / `.memory` and `spec.taskManager.replicas`
* `spec.flinkConfiguration["taskmanager.memory.managed.fraction"]` and
  `[...network.fraction]` (a TaskManager shape fitted to the slots)

Rendering is deterministic, so "is the decision already on the deployment?" is a
field-by-field comparison. The stage, `realize`, applies `status.target` (the
fields `decide` committed) on every Active pass where the deployment differs: a
restarted controller finishes an interrupted step instead of deciding it again,
a hand edit of an owned field is undone, and applying twice changes nothing.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
import math
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from controller.api import (
    ENACTMENTS_LIMIT,
    RESIZED_LIMIT,
    ConditionType,
    Mode,
    ResizeSpec,
    Status,
    StepEnactment,
    Target,
)
from controller.ports import CacheTarget, JobSummary, PatchRefused, ResizeFailed
from controller.record import Realized, Reason, Run, with_condition, with_pods
from packer.flink_memory import FlinkMemoryOptions, task_manager_memory
from policies import buffering
from policies.bill import PodBill, pod_bill
from policies.decision import epoch_seconds
from policies.levels import level_of, managed_mib, own_managed_mib
from policies.model import Configuration, JobGraph
from policies.quantity import MIB, parse_flink_memory_bytes
from policies.restart_cost import (
    Enactment,
    Engine,
    RestartCost,
    enactment,
    engine_of,
    last_state_downtime_s,
    learned_downtime_s,
    measured_costs,
)
from policies.spec import CostSpec

log = logging.getLogger(__name__)
FIELD_MANAGER = "hybrid-scaler"
FLINK_GROUP, FLINK_VERSION, FLINK_PLURAL = "flink.apache.org", "v1beta1", "flinkdeployments"
OVERRIDES_KEY = "pipeline.jobvertex-parallelism-overrides"
RESOURCES_KEY = "hybridscaler.operator-resources"
SCHEDULER_KEY = "jobmanager.scheduler"
WRITE_BUFFER_RATIO_KEY = "state.backend.rocksdb.memory.write-buffer-ratio"
# A fitted TaskManager shape's Flink options (packer.pricing.fit_shape).
MANAGED_FRACTION_KEY = "taskmanager.memory.managed.fraction"
NETWORK_FRACTION_KEY = "taskmanager.memory.network.fraction"
SHAPE_KEYS = (MANAGED_FRACTION_KEY, NETWORK_FRACTION_KEY)
STATE_BACKEND_KEY = "state.backend.type"
# ForSt (Flink 2.x) sizes its block cache from managed memory by the same rule as RocksDB,
# under its own key (measured: tests/golden/flink-2.2/README.md).
FORST_WRITE_BUFFER_RATIO_KEY = "state.backend.forst.memory.write-buffer-ratio"
# flink-plugin's backends whose TaskManager agent resizes block caches in place: RocksDB's
# (Flink 1.20 and 2.x) and ForSt's (Flink 2.2; docs/flink-2.md).
RESIZABLE_BACKEND = "dev.hybridscaler.flink.resize.ResizableRocksDBStateBackendFactory"
RESIZABLE_FORST_BACKEND = "dev.hybridscaler.flink.resize.ResizableForStStateBackendFactory"
RESIZABLE_BACKENDS = frozenset({RESIZABLE_BACKEND, RESIZABLE_FORST_BACKEND})
# Flink's default state.backend.rocksdb.memory.write-buffer-ratio.
DEFAULT_WRITE_BUFFER_RATIO = 0.5
# A vertex name longer than this is not resized (it would be kept in status): it restarts.
MAX_RESIZED_NAME = 512


def write_buffer_ratio_key(flink_configuration: Mapping[str, Any]) -> str:
    """The write-buffer ratio's key for the deployment's state backend."""
    forst = configured_engine(flink_configuration) == Engine.FORST
    return FORST_WRITE_BUFFER_RATIO_KEY if forst else WRITE_BUFFER_RATIO_KEY


def write_buffer_ratio(flink_configuration: Mapping[str, Any]) -> float:
    """The deployment's write-buffer ratio (Flink's default when unset or unreadable)."""
    try:
        ratio = float(flink_configuration.get(write_buffer_ratio_key(flink_configuration),
                                              DEFAULT_WRITE_BUFFER_RATIO))
    except (TypeError, ValueError):
        return DEFAULT_WRITE_BUFFER_RATIO  # Flink would refuse to start: nothing to compare
    return ratio if 0 < ratio < 1 else DEFAULT_WRITE_BUFFER_RATIO


def cache_bytes(managed_bytes: float, ratio: float) -> int:
    """The block cache Flink gives RocksDB from a slot's managed memory (Flink's
    RocksDBMemoryControllerUtils.calculateActualCacheCapacity): (3 − r)/3 of it, r the
    write-buffer ratio (the write buffers are charged to the cache)."""
    return int((3 - ratio) * managed_bytes / 3)


def configured_engine(flink_configuration: Mapping[str, Any]) -> Engine:
    """RocksDB unless `state.backend.type` names ForSt (Flink's own, or flink-plugin's
    resizable ForSt backend, which is ForSt with its caches registered)."""
    backend = str(flink_configuration.get(STATE_BACKEND_KEY, "") or "").strip()
    return Engine.FORST if backend == RESIZABLE_FORST_BACKEND else engine_of(backend)


@dataclass(frozen=True)
class OperatorResources:
    """One uid's entry. With `slot_sharing_group`, the resources are ONE SLOT of that
    group, the same for every member (docs/flink-contract.md); without, the operator's own."""

    cpu_cores: float
    task_heap_mb: int
    managed_memory_mb: int
    slot_sharing_group: str | None = None

    def as_json(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"cpuCores": self.cpu_cores, "taskHeapMb": self.task_heap_mb,
                                 "managedMemoryMb": self.managed_memory_mb}
        if self.slot_sharing_group is not None:
            entry["slotSharingGroup"] = self.slot_sharing_group
        return entry


@dataclass(frozen=True)
class OwnedFields:
    """The values of the fields we own; None means "not set" (or, desired: "leave alone")."""

    overrides: Mapping[str, int] = field(default_factory=dict)
    operator_resources: Mapping[str, OperatorResources] | None = None
    tm_cpu: float | None = None
    tm_memory_mib: int | None = None
    replicas: int | None = None
    flink_options: Mapping[str, str] | None = None  # SHAPE_KEYS a fitted shape sets
    # Flink SQL's mini-batch and two-phase aggregation settings (policies/buffering.py),
    # owned only once spec.skew.applySqlSettings wrote them; None: leave alone.
    sql_settings: Mapping[str, str] | None = None

    def differences(self, current: OwnedFields) -> list[str]:
        """Names of the fields where `current` does not yet hold what `self` wants."""
        diff = []
        if dict(self.overrides) != dict(current.overrides):
            diff.append(OVERRIDES_KEY)
        if self.operator_resources is not None and (
            dict(self.operator_resources) != dict(current.operator_resources or {})
        ):
            diff.append(RESOURCES_KEY)
        if self.tm_cpu is not None and (
            current.tm_cpu is None or not math.isclose(self.tm_cpu, current.tm_cpu)
        ):
            diff.append("taskManager.resource.cpu")
        if self.tm_memory_mib is not None and self.tm_memory_mib != current.tm_memory_mib:
            diff.append("taskManager.resource.memory")
        if self.replicas is not None and self.replicas != current.replicas:
            diff.append("taskManager.replicas")
        for key, value in sorted((self.flink_options or {}).items()):
            if (current.flink_options or {}).get(key) != value:
                diff.append(key)
        if self.sql_settings is not None:
            diff.extend(buffering.missing(self.sql_settings, current.sql_settings or {}))
        return diff


def render_overrides(overrides: Mapping[str, int]) -> str:
    """Flink's map syntax, `k1:v1,k2:v2`, sorted so equal maps render equally."""
    return ",".join(f"{vid}:{p}" for vid, p in sorted(overrides.items()))


def parse_overrides(text: str | None) -> dict[str, int]:
    result: dict[str, int] = {}
    for part in (text or "").split(","):
        key, sep, value = part.strip().partition(":")
        # ASCII digits, and few: `str.isdigit` takes '²', and int() refuses 4,301 digits.
        if sep and key.strip() and re.fullmatch(r"[0-9]{1,9}", value.strip()):
            result[key.strip()] = int(value.strip())
    return result


def parse_memory_mib(text: Any) -> int | None:
    """A FlinkDeployment memory size ('2048m', '2g', '2Gi', '1536Mi') in whole MiB;
    None when absent or unreadable."""
    if text is None:
        return None
    try:
        return round(parse_flink_memory_bytes(str(text)) / MIB)
    except ValueError:
        return None


_JAVA_INT = 2**31  # flink-plugin reads the sizes as Java ints


def _finite(n: Any) -> float | None:
    """A JSON number as a finite float; None for anything else (true, "1", 1e400)."""
    if isinstance(n, bool) or not isinstance(n, int | float):
        return None
    try:
        f = float(n)
    except OverflowError:  # an int past a float's range
        return None
    return f if math.isfinite(f) else None


def _resources_entry(v: Any) -> OperatorResources | None:
    """One operator's entry as flink-plugin's HybridResources.parse accepts it: cpuCores
    a number > 0, the sizes whole numbers a Java int holds (316.0 too, as Jackson reads
    it), the group a string; else None."""
    if not isinstance(v, dict):
        return None
    cpu = _finite(v.get("cpuCores", 0))
    sizes = [_finite(v.get(k, 0)) for k in ("taskHeapMb", "managedMemoryMb")]
    group = v.get("slotSharingGroup")
    if (cpu is None or cpu <= 0 or not (group is None or isinstance(group, str))
            or any(n is None or not n.is_integer() or not 0 <= n < _JAVA_INT for n in sizes)):
        return None
    heap, managed = (int(n) for n in sizes if n is not None)
    return OperatorResources(cpu, heap, managed, group)


def parse_resources(text: str | None) -> dict[str, OperatorResources] | None:
    """The per-operator resources the deployment carries (RESOURCES_KEY), None when absent
    or unreadable: then they differ from what the controller wants, which writes its own
    again. The tenant owns the FlinkDeployment, so the text may be anything its API
    object holds (nested past the parser's depth, numbers past a float's range, too)."""
    if not text:
        return None
    parsed = _parsed_resources(text)
    return None if parsed is None else dict(parsed)


@functools.lru_cache(maxsize=8)  # passes running at once; each entry holds ≤ ~5 MB
def _parsed_resources(text: str) -> tuple[tuple[str, OperatorResources], ...] | None:
    """Parsed once per text: a pass reads the deployment's value five times, and an API
    object can hold 1.5 MB of it (10,000 entries, 70 ms a parse)."""
    try:
        raw = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(raw, dict):
        return None
    entries = {str(uid): _resources_entry(v) for uid, v in raw.items()}
    if any(e is None for e in entries.values()):
        return None
    return tuple((uid, e) for uid, e in entries.items() if e is not None)


def current_fields(deployment: Mapping[str, Any]) -> OwnedFields:
    spec = deployment.get("spec", {}) or {}
    conf = spec.get("flinkConfiguration", {}) or {}
    tm = spec.get("taskManager", {}) or {}
    resource = tm.get("resource", {}) or {}
    cpu = resource.get("cpu")
    return OwnedFields(
        overrides=parse_overrides(conf.get(OVERRIDES_KEY)),
        operator_resources=parse_resources(conf.get(RESOURCES_KEY)),
        tm_cpu=float(cpu) if cpu is not None else None,
        tm_memory_mib=parse_memory_mib(resource.get("memory")),
        replicas=tm.get("replicas"),
        flink_options={k: str(conf[k]) for k in SHAPE_KEYS if k in conf},
        sql_settings={k: str(conf[k]) for k in buffering.SQL_KEYS if k in conf} or None,
    )


def memory_levels(
    deployment: Mapping[str, Any], graph: JobGraph, base_mib: float,
    resources: Mapping[str, OperatorResources] | None = None,
) -> dict[str, int | None]:
    """Each vertex's memory level as the deployment has it (level 0 when we never set it),
    or as `resources` say (a resize in place: `effective_resources`)."""
    if resources is None:
        resources = current_fields(deployment).operator_resources or {}
    levels: dict[str, int | None] = {}
    for v in graph.vertices:
        entry = next((resources[u] for u in v.operator_uids if u in resources), None)
        levels[v.id] = 0 if entry is None else level_of(own_managed_mib(
            entry.managed_memory_mb, entry.slot_sharing_group, v.id), base_mib)
    return levels


def desired_fields(
    graph: JobGraph,
    configuration: Configuration,
    *,
    cpu_per_task: float,
    heap_per_task_mib: float,
    base_managed_mib: float,
    tm_cpu: float,
    tm_memory_mib: int,
    replicas: int | None,
    per_operator: bool,
    groups: Mapping[str, str] | None = None,
    flink_options: Mapping[str, str] | None = None,
    slot_cpu: Mapping[str, float] | None = None,
) -> OwnedFields:
    """What the deployment must hold for `configuration` on `replicas` TaskManagers.

    `groups` (vertex id -> slot sharing group) makes each member's entry one slot of its
    group: one task's heap (a slot holds one subtask of each member, sharing it, as in
    Flink's default group) and the members' managed memory summed, the same rule as
    packer.pricing prices. CPU: `slot_cpu` (vertex id -> one slot's CPU of its group, as
    priced: planned CPU summed over the members), else `cpu_per_task`."""
    managed = {v.id: round(managed_mib(configuration[v.id].memory_level, base_managed_mib))
               for v in graph.vertices}
    group_managed: dict[str, int] = {}
    for vid, name in (groups or {}).items():
        group_managed[name] = group_managed.get(name, 0) + managed[vid]
    resources: dict[str, OperatorResources] = {}
    # Flink rejects a slot-sharing group with zero task heap (flink-plugin docs).
    heap = max(1, int(heap_per_task_mib))
    for v in graph.vertices:
        group = (groups or {}).get(v.id)
        for uid in v.operator_uids:
            cpu = (slot_cpu or {}).get(v.id, cpu_per_task)
            resources[uid] = (OperatorResources(cpu, heap, managed[v.id]) if group is None
                              else OperatorResources(cpu, heap, group_managed[group], group))
    return OwnedFields(
        overrides={vid: c.parallelism for vid, c in configuration.items()},
        operator_resources=resources if per_operator else None,
        tm_cpu=tm_cpu,
        tm_memory_mib=tm_memory_mib,
        replicas=replicas,
        flink_options=dict(flink_options) if flink_options else None,
    )


def apply_body(name: str, namespace: str, desired: OwnedFields) -> dict[str, Any]:
    """The server-side apply document: our fields and nothing else."""
    conf: dict[str, str] = {OVERRIDES_KEY: render_overrides(desired.overrides)}
    conf.update(sorted((desired.flink_options or {}).items()))
    if desired.operator_resources is not None:
        conf[RESOURCES_KEY] = json.dumps(
            {uid: r.as_json() for uid, r in sorted(desired.operator_resources.items())},
            separators=(",", ":"),
        )
    conf.update(desired.sql_settings or {})
    tm: dict[str, Any] = {}
    resource: dict[str, Any] = {}
    if desired.tm_cpu is not None:
        resource["cpu"] = desired.tm_cpu
    if desired.tm_memory_mib is not None:
        resource["memory"] = f"{desired.tm_memory_mib}m"
    if resource:
        tm["resource"] = resource
    if desired.replicas is not None:
        tm["replicas"] = desired.replicas
    spec: dict[str, Any] = {"flinkConfiguration": conf}
    if tm:
        spec["taskManager"] = tm
    return {
        "apiVersion": f"{FLINK_GROUP}/{FLINK_VERSION}",
        "kind": "FlinkDeployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def keeps_task_managers(deployment: Mapping[str, Any], current: OwnedFields, cpu: float,
                        memory_mib: int) -> bool:
    """A native-mode deployment whose TaskManagers already have this shape: only the
    parallelism can differ, which the operator may apply in place. (In standalone mode
    the replica count is the scaling knob, so it is always written.)"""
    spec = deployment.get("spec", {}) or {}
    return (str(spec.get("mode", "native")) != "standalone"
            and current.tm_cpu is not None and math.isclose(current.tm_cpu, cpu)
            and current.tm_memory_mib == memory_mib)


def in_place(deployment: Mapping[str, Any], changed: list[str]) -> bool:
    """Whether the Flink Kubernetes Operator (>= 1.7, Flink >= 1.18) applies the `changed`
    fields by rescaling the running job rather than by a restart: only the parallelism
    overrides changed and the adaptive scheduler runs the job."""
    return enactment_of(deployment, changed, None) == Enactment.IN_PLACE


def enactment_of(deployment: Mapping[str, Any], changed: list[str],
                 state_bytes: float | None) -> Enactment:
    """How the `changed` fields will be enacted by a patch: in place, else as
    spec.job.upgradeMode restarts (last-state needs a completed checkpoint, known from its
    size)."""
    spec = deployment.get("spec", {}) or {}
    conf = spec.get("flinkConfiguration", {}) or {}
    return enactment(
        parallelism_only=changed == [OVERRIDES_KEY],
        adaptive_scheduler=str(conf.get(SCHEDULER_KEY, "")).strip().lower() == "adaptive",
        upgrade_mode=str((spec.get("job", {}) or {}).get("upgradeMode", "")),
        has_checkpoint=state_bytes is not None)


def resizable(deployment: Mapping[str, Any], resize_spec: ResizeSpec | None) -> bool:
    """Whether memory steps of this deployment can be resized in place: the policy names the
    agents' token (spec.resize) and the deployment runs one of flink-plugin's resizable
    backends (RocksDB's or ForSt's)."""
    conf = (deployment.get("spec", {}) or {}).get("flinkConfiguration", {}) or {}
    return (resize_spec is not None
            and str(conf.get(STATE_BACKEND_KEY, "") or "").strip() in RESIZABLE_BACKENDS)


# What a step that changes managed memory only may differ in from the deployment: the
# per-operator resources, and overrides the job already runs at (a user-written deployment
# has none; our first step writes them).
RESIZABLE_FIELDS = frozenset({OVERRIDES_KEY, RESOURCES_KEY})


def digest(deployment: Mapping[str, Any], owned: OwnedFields) -> str:
    """A short digest of the deployment's values of the fields `owned` sets (a target's:
    fields it leaves alone are the tenant's, and a change of them restarts the job as any
    spec change does, which the agents' re-ask then resizes again)."""
    current = current_fields(deployment)
    mine = replace(
        current,
        operator_resources=current.operator_resources if owned.operator_resources is not None
        else None,
        tm_cpu=current.tm_cpu if owned.tm_cpu is not None else None,
        tm_memory_mib=current.tm_memory_mib if owned.tm_memory_mib is not None else None,
        replicas=current.replicas if owned.replicas is not None else None,
        flink_options={k: v for k, v in (current.flink_options or {}).items()
                       if k in (owned.flink_options or {})},
        sql_settings=current.sql_settings if owned.sql_settings else None)
    text = json.dumps(dataclasses.asdict(mine), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def edited_during_resize(entry: StepEnactment, deployment: Mapping[str, Any],
                         target: OwnedFields) -> bool:
    """A resize in place leaves the deployment's owned fields as they were when it was
    chosen (`resized_over`): any change since is an edit, which the job runs at its next
    restart at the deployment's managed memory. An entry written before the digest was
    kept (or whose digest a CRD not upgraded pruned): any difference from the target but
    the resizable fields' is one."""
    if entry.resized_over is None:
        return bool(set(target.differences(current_fields(deployment))) - RESIZABLE_FIELDS)
    return digest(deployment, target) != entry.resized_over


def resized_caches(deployment: Mapping[str, Any], desired: OwnedFields, graph: JobGraph,
                   running: Mapping[str, OperatorResources] | None = None
                   ) -> dict[str, int] | None:
    """Per vertex name, the block cache per task a resize would give it, when the job would
    run `desired` as it runs now but for managed memory: the parallelism it runs at, and per
    vertex the entry the job runs with (its chain's, by any of its uids) unchanged but for
    `managedMemoryMb`, with managed memory before and after (a slot without any has no
    cache). A slot-sharing group's slot is one cache, its named member's (the one member
    with managed memory, `own_managed_mib`); its stateless riders have none. `running`:
    the resources the job runs with when they are not the deployment's (an earlier resize
    in place, `effective_resources`), so a step back to the deployment's level is a resize
    too. The agents know a slot by its vertex's name: a name two vertices share, or more
    than `RESIZED_LIMIT` vertices, is not resized. None otherwise: a restart enacts it."""
    current = current_fields(deployment)
    if not set(desired.differences(current)) <= RESIZABLE_FIELDS:
        return None
    if dict(desired.overrides) != {v.id: v.parallelism for v in graph.vertices}:
        return None
    want = desired.operator_resources or {}
    have = running if running is not None else (current.operator_resources or {})
    conf = (deployment.get("spec", {}) or {}).get("flinkConfiguration", {}) or {}
    ratio = write_buffer_ratio(conf)
    ids = {v.id for v in graph.vertices}
    names = Counter(v.name for v in graph.vertices)
    caches: dict[str, int] = {}
    for v in graph.vertices:
        new = next((want[u] for u in v.operator_uids if u in want), None)
        old = next((have[u] for u in v.operator_uids if u in have), None)
        if new is None or old is None or (
                replace(new, managed_memory_mb=old.managed_memory_mb) != old):
            return None  # Flink's default group, or CPU, heap or group changed: new slots
        group = new.slot_sharing_group
        if new.managed_memory_mb == old.managed_memory_mb or (
                group is not None and group != v.id and group in ids):
            continue  # unchanged, or a rider of a group whose named member holds the cache
        if (group not in (None, v.id) or new.managed_memory_mb <= 0
                or old.managed_memory_mb <= 0 or not v.name or len(v.name) > MAX_RESIZED_NAME
                or names[v.name] > 1 or len(caches) >= RESIZED_LIMIT):
            return None
        caches[v.name] = cache_bytes(new.managed_memory_mb * MIB, ratio)
    return caches or None


def task_manager_managed_bytes(deployment: Mapping[str, Any]) -> int | None:
    """One TaskManager's managed memory as Flink splits the deployment's process memory
    (packer.flink_memory); None when its memory is unknown, set by keys the model does not
    read, or Flink would refuse it."""
    spec = deployment.get("spec", {}) or {}
    conf = spec.get("flinkConfiguration", {}) or {}
    memory = parse_memory_mib(((spec.get("taskManager", {}) or {}).get("resource", {})
                               or {}).get("memory"))
    if memory is None or any(str(k).startswith("taskmanager.memory.") and k not in SHAPE_KEYS
                             for k in conf):
        return None  # sizes set by hand (managed.size, metaspace...): not modelled
    try:
        fractions = {"managed_fraction": float(conf.get(
                         MANAGED_FRACTION_KEY, FlinkMemoryOptions.managed_fraction)),
                     "network_fraction": float(conf.get(
                         NETWORK_FRACTION_KEY, FlinkMemoryOptions.network_fraction))}
        if not all(math.isfinite(f) for f in fractions.values()):  # '1e400' reads as inf
            return None
        return task_manager_memory(memory, FlinkMemoryOptions(**fractions)).managed
    except (TypeError, ValueError):
        return None


def cache_budget_bytes(deployment: Mapping[str, Any]) -> int | None:
    """What one TaskManager's agent may give all its slots' caches: its whole managed memory
    in cache bytes, i.e. the slots' reservations and what the placement left unreserved
    (docs/flink-plugin.md, "Budget"). None when the TaskManager's memory is unknown."""
    managed = task_manager_managed_bytes(deployment)
    conf = (deployment.get("spec", {}) or {}).get("flinkConfiguration", {}) or {}
    return None if managed is None else cache_bytes(managed, write_buffer_ratio(conf))


def fits_running_pods(deployment: Mapping[str, Any], desired: OwnedFields,
                      graph: JobGraph) -> bool:
    """Whether the slots of `desired` fit the managed memory of the TaskManagers the
    deployment runs, first fit decreasing: a memory-only step can then keep the pods and be
    resized in place. A vertex of its own has a slot per task; a slot-sharing group as many
    as its widest member (Flink puts one subtask of each member in a slot), each with the
    entry's managed memory. Flink places slots itself, so each agent checks its own
    TaskManager again (its budget)."""
    current = current_fields(deployment)
    managed = task_manager_managed_bytes(deployment)
    if managed is None or not isinstance(current.replicas, int) or current.replicas < 1:
        return False
    resources = desired.operator_resources or {}
    widest: dict[str, tuple[int, int]] = {}  # group (or vertex id) -> (slots, managed bytes)
    for v in graph.vertices:
        entry = next((resources[u] for u in v.operator_uids if u in resources), None)
        if entry is None:
            return False
        key = entry.slot_sharing_group or f"own:{v.id}"
        tasks = desired.overrides.get(v.id, v.parallelism)
        widest[key] = (max(tasks, widest.get(key, (0, 0))[0]), entry.managed_memory_mb * MIB)
    slots = [size for count, size in widest.values() for _ in range(count)]
    free = [managed] * current.replicas
    for size in sorted(slots, reverse=True):
        bin_ = next((i for i, left in enumerate(free) if left >= size), None)
        if bin_ is None:
            return False
        free[bin_] -= size
    return True


def engine(deployment: Mapping[str, Any]) -> Engine:
    """The deployment's state backend: RocksDB unless it names ForSt in `state.backend.type`."""
    return configured_engine((deployment.get("spec", {}) or {}).get("flinkConfiguration", {})
                             or {})


def step_costs(deployment: Mapping[str, Any]) -> Mapping[Enactment, RestartCost]:
    """What each enactment costs on the deployment's state backend."""
    return measured_costs(engine(deployment))


def priced_state_bytes(deployment: Mapping[str, Any], checkpoint_bytes: float | None,
                       live_bytes: float | None) -> float | None:
    """The state a step is priced with: the last checkpoint's full size (None: no checkpoint
    completed). On ForSt that checkpoint may only name files in the remote store (kilobytes
    for any state), while a savepoint copies the whole state: the live data, if larger."""
    if checkpoint_bytes is None or engine(deployment) != Engine.FORST:
        return checkpoint_bytes
    return max(checkpoint_bytes, live_bytes or 0.0)


def with_enactment(status: Status, step: int, deployment: Mapping[str, Any],
                   desired: OwnedFields, state_bytes: float | None,
                   restart_downtime_s: float | None = None,
                   caches: Mapping[str, int] | None = None) -> Status:
    """Record how committed step `step` will be enacted and its expected downtime: the
    planner's (spec.cost.restartDowntime, `restart_downtime_s`) for a restart when the
    user set it, else learned from this deployment's steps. `caches`: the block caches a
    resize in place would set (`resized_caches`, on a `resizable` deployment), else None."""
    kind = Enactment.RESIZE if caches else enactment_of(
        deployment, desired.differences(current_fields(deployment)), state_bytes)
    entry = _priced(status, step, kind, deployment, state_bytes, restart_downtime_s)
    if caches:
        entry = entry.model_copy(update={"expected_cache_bytes": dict(caches),
                                         "resized_over": digest(deployment, desired)})
    kept = tuple(e for e in status.enactments if e.step != step)
    return status.model_copy(update={"enactments": (*kept, entry)[-ENACTMENTS_LIMIT:]})


def _priced(status: Status, step: int, kind: Enactment, deployment: Mapping[str, Any],
            state_bytes: float | None, restart_downtime_s: float | None) -> StepEnactment:
    """Step `step` enacted as `kind`, with its expected downtime (learned, or the spec's for
    a restart) and what last-state would cost."""
    costs = step_costs(deployment)
    expected = learned_downtime_s(kind, state_bytes, status.observed_steps(), costs)
    if restart_downtime_s is not None and kind not in (Enactment.IN_PLACE, Enactment.RESIZE):
        expected = restart_downtime_s
    return StepEnactment(
        step=step, kind=kind.value,
        state_bytes=None if state_bytes is None else round(state_bytes),
        expected_downtime_s=expected,
        last_state_downtime_s=last_state_downtime_s(kind, state_bytes, costs))


def _with_step(status: Status, step: int, entry: StepEnactment) -> Status:
    return status.model_copy(update={"enactments": tuple(
        entry if e.step == step else e for e in status.enactments)})


def _with_last(status: Status, **update: Any) -> Status:
    last = status.enactments[-1]
    return status.model_copy(update={
        "enactments": (*status.enactments[:-1], last.model_copy(update=update))})


def observe_enactment(run: Run, job: JobSummary) -> None:
    """The observed downtime of the last applied step: from the patch until the
    FlinkDeployment reports the job RUNNING/STABLE and the JobManager runs a job that
    (re)started after the patch. Seen by a pass, so late by at most one pass."""
    if not run.status.enactments:
        return
    last = run.status.enactments[-1]
    if (last.applied_time is None or last.observed_downtime_s is not None
            or last.applied_unseen  # patched at an unknown time: no downtime to learn
            or last.kind == Enactment.RESIZE):  # the job never stops: verify_resize observes
        return
    applied = last.applied_time
    restarted = max(job.start_time_ms, job.last_modification_ms) / 1000.0
    if (job.state == "RUNNING" and restarted >= applied
            and job_state(run.deployment or {}) == ("RUNNING", "STABLE")):
        run.status = _with_last(run.status,
                                observed_downtime_s=round(max(0.0, run.now - applied), 1))

def unhonoured_memory(deployment: Mapping[str, Any], graph: JobGraph,
                      cache_capacity_bytes: Mapping[str, float],
                      tolerance: float = 0.1,
                      resources: Mapping[str, OperatorResources] | None = None) -> list[str]:
    """Stateful vertices whose RocksDB (or ForSt) block cache is not what the managed memory
    written for them (or `resources`, a resize in place's) gives (`cache_bytes`): Flink
    ignores the per-operator resources, e.g. because the job does not call
    HybridResources.apply."""
    conf = (deployment.get("spec", {}) or {}).get("flinkConfiguration", {}) or {}
    ratio = write_buffer_ratio(conf)
    if resources is None:
        resources = current_fields(deployment).operator_resources or {}
    found = []
    for v in graph.vertices:
        written = next((resources[u] for u in v.operator_uids if u in resources), None)
        observed = cache_capacity_bytes.get(v.id)
        own = 0.0 if written is None else own_managed_mib(
            written.managed_memory_mb, written.slot_sharing_group, v.id)
        if written is None or own <= 0 or observed is None:
            continue
        expected = cache_bytes(own * MIB, ratio)
        if abs(observed - expected) > tolerance * expected:
            found.append(f"{v.name}: block cache {observed / 2**20:.0f} MiB per task, "
                         f"{expected / 2**20:.0f} MiB expected from managedMemoryMb "
                         f"{own:.0f}")
    return found


def job_state(deployment: Mapping[str, Any]) -> tuple[str, str]:
    """(status.jobStatus.state, status.lifecycleState) as the Flink operator reports them."""
    status = deployment.get("status", {}) or {}
    return (str((status.get("jobStatus", {}) or {}).get("state", "") or "UNKNOWN"),
            str(status.get("lifecycleState", "") or "UNKNOWN"))


def refusal(deployment: Mapping[str, Any]) -> str | None:
    """Why no reconfiguration may be applied to this deployment now, or None (but for
    the Flink operator's autoscaler, which takes a question to the JobManager:
    `upstream_refusal`)."""
    job = (deployment.get("spec", {}) or {}).get("job", {}) or {}
    if str(job.get("upgradeMode", "stateless")) == "stateless":
        return (
            "spec.job.upgradeMode is stateless: a reconfiguration would restart the job "
            "without its state; use savepoint or last-state"
        )
    # The operator's `resources` (Kubernetes ResourceRequirements, on its main branch since
    # FLINK-33548, in no release yet) is read before `resource`, which the steps write.
    resources = ((deployment.get("spec", {}) or {}).get("taskManager", {}) or {}).get(
        "resources")
    if resources:
        return (
            "spec.taskManager.resources is set: the Flink operator reads it before "
            "spec.taskManager.resource, where the controller writes the TaskManagers' CPU "
            "and memory; give them in spec.taskManager.resource (a CPU limit above the "
            "request as kubernetes.taskmanager.cpu.limit-factor)"
        )
    state, lifecycle = job_state(deployment)
    if state != "RUNNING" or lifecycle != "STABLE":
        return f"the job is {state} (lifecycle {lifecycle}), not RUNNING/STABLE"
    return None


def as_target(step: int, desired: OwnedFields) -> Target:
    """The desired fields as status records them: rendered exactly as they are applied."""
    spec = apply_body("", "", desired)["spec"]
    tm = spec.get("taskManager", {})
    resource = tm.get("resource", {})
    return Target(step=step, flink_configuration=spec["flinkConfiguration"],
                  task_manager_cpu=resource.get("cpu"), task_manager_memory=resource.get("memory"),
                  task_manager_replicas=tm.get("replicas"))


def target_fields(target: Target) -> OwnedFields:
    """The owned fields a recorded target asks for (None: leave alone)."""
    resource = {k: v for k, v in (("cpu", target.task_manager_cpu),
                                  ("memory", target.task_manager_memory)) if v is not None}
    return current_fields({"spec": {
        "flinkConfiguration": dict(target.flink_configuration),
        "taskManager": {"resource": resource, "replicas": target.task_manager_replicas},
    }})


def requested_pods(fields: OwnedFields, cost: CostSpec,
                   task_managers: int | None = None) -> PodBill | None:
    """What TaskManager pods with these fields request; `task_managers` stands in for
    replicas a native-mode deployment leaves unset (Flink then starts what it needs, which
    is what the placement predicts). None when the resource or the count is unknown."""
    replicas = fields.replicas if fields.replicas is not None else task_managers
    cpu, memory = fields.tm_cpu, fields.tm_memory_mib
    # Whatever a hand-edited deployment holds: the columns keep their last value rather
    # than the pass fail.
    if (cpu is None or memory is None or not isinstance(replicas, int) or replicas < 0
            or not math.isfinite(cpu) or cpu < 0 or memory < 0):
        return None
    return pod_bill(cpu, memory, replicas, cpu_core_price=cost.cpu_core_price,
                    memory_gib_price=cost.memory_gib_price)


def pods_now(run: Run) -> PodBill | None:
    """What the FlinkDeployment's TaskManager pods request as this pass read it."""
    placement = run.status.placement
    return requested_pods(current_fields(run.deployment or {}), run.spec.cost,
                          placement.task_managers if placement is not None else None)


def deployment_pods(run: Run) -> PodBill | None:
    """What the FlinkDeployment's TaskManager pods request once this pass has applied the
    target (Active mode); in other modes, what they request as the pass read it."""
    if run.deployment is None:
        return None
    fields = current_fields(run.deployment)
    target = run.status.target
    if run.spec.mode == Mode.ACTIVE and target is not None:
        wanted = target_fields(target)
        fields = OwnedFields(
            tm_cpu=wanted.tm_cpu if wanted.tm_cpu is not None else fields.tm_cpu,
            tm_memory_mib=wanted.tm_memory_mib if wanted.tm_memory_mib is not None
            else fields.tm_memory_mib,
            replicas=wanted.replicas if wanted.replicas is not None else fields.replicas)
    placement = run.status.placement
    return requested_pods(fields, run.spec.cost,
                          placement.task_managers if placement is not None else None)


def realize(run: Run) -> Realized | None:
    """Active: apply `status.target` where the deployment differs, then show what the pods
    request in the printer columns (every mode). Other modes patch nothing and drop the
    target, so switching back to Active starts from what runs."""
    realized = _apply_target(run)
    run.status = with_pods(run.status, deployment_pods(run))
    return realized


def resize_in_effect(status: Status) -> StepEnactment | None:
    """The target's step, when it is enacted by resizing in place and has not fallen back
    to a restart: the deployment then keeps the old managed memory on purpose (the next
    restart step carries the resized levels)."""
    target = status.target
    entry = None if target is None else status.enactment(target.step)
    if entry is None or entry.kind != Enactment.RESIZE or entry.fallback is not None:
        return None
    return entry


def effective_resources(status: Status, deployment: Mapping[str, Any]
                        ) -> Mapping[str, OperatorResources] | None:
    """The per-operator resources the job runs with: the deployment's, or the target's
    while a resize in place is in effect and the deployment was not edited since (an
    edit restarts the job at the deployment's managed memory)."""
    if resized_as_chosen(status, deployment) and status.target is not None:
        return dict(target_fields(status.target).operator_resources or {})
    return current_fields(deployment).operator_resources


def resized_as_chosen(status: Status, deployment: Mapping[str, Any]) -> bool:
    """A resize in place is in effect and the deployment is as it was chosen for."""
    entry = resize_in_effect(status)
    return entry is not None and status.target is not None and not edited_during_resize(
        entry, deployment, target_fields(status.target))


def fall_back(run: Run, entry: StepEnactment, why: str) -> None:
    """A resize that could not be done or verified: the step is enacted by restart instead
    (the next realize patches the deployment), with a Warning naming why. Saved before
    that patch, as a commit is: a crash in between must not leave a restart recorded as a
    resize."""
    _by_restart(run, entry, why)
    run.count_error("resize")
    run.event("Warning", Reason.RESIZE_FAILED,
              f"step {entry.step}: not resized in place ({why}); enacting it by restart")
    run.save()


def _by_restart(run: Run, entry: StepEnactment, why: str, applied: bool = False) -> None:
    """`entry`, a resize in place, enacted by restart instead, priced as such; `applied`:
    when it was applied as before (a restart that re-applies it), else not yet."""
    deployment = run.deployment or {}
    restart = enactment_of(deployment, [RESOURCES_KEY], entry.state_bytes)
    priced = _priced(run.status, entry.step, restart, deployment, entry.state_bytes,
                     run.spec.cost.restart_downtime)
    update: dict[str, Any] = {"fallback": why[:1024]}
    if applied:  # when the restart that runs the edit happens, nobody knows
        update.update(applied_time=entry.applied_time, applied_unseen=True)
    run.status = _with_step(run.status, entry.step, priced.model_copy(update=update))


# Failures of a re-ask (the resize was applied before) that say nothing about resizing:
# the job is between attempts or a TaskManager is being replaced. Asked again next pass.
TRANSIENT = frozenset({"unreachable", "missing"})


def _resize(run: Run, entry: StepEnactment) -> list[str] | None:
    """Ask the agents for the resize of `entry` (again, where a failover undid it): the
    caches it changed; None when it fell back to a restart, or when a re-ask failed for a
    reason that passes (`TRANSIENT`: the entry is still in effect, asked again next pass)."""
    spec, deployment, job = run.spec.resize, run.deployment or {}, run.job
    assert job is not None  # _apply_target asks only when the pass read the job
    # Only a target from the current status may be enacted (as before a patch).
    run.ports.store.confirm()
    caches = entry.expected_cache_bytes or {}
    budget = cache_budget_bytes(deployment)
    if run.ports.resizers is None or spec is None or budget is None or not caches:
        fall_back(run, entry, "the controller has no way to reach the TaskManagers' "
                  "agents" if run.ports.resizers is None or spec is None
                  else "the TaskManagers' memory is unknown")
        return None
    try:  # reaching the agents (their pods, the token) may fail as the resize does
        resized = run.ports.resizers(run.namespace, run.target, spec).resize(
            job.jid, [CacheTarget(name, size) for name, size in sorted(caches.items())],
            budget)
    except ResizeFailed as failed:
        if entry.applied_time is not None and failed.kind in TRANSIENT:
            log.info("%s/%s: step %d: re-asking the resize agents failed (%s); asked "
                     "again next pass", run.namespace, run.name, entry.step, failed)
            return None
        fall_back(run, entry, str(failed))
        return None
    wrong = sorted(name for name, size in caches.items() if resized.read_back.get(name) != size)
    if wrong:
        fall_back(run, entry, "the agents read back another capacity for "
                  + ", ".join(wrong[:5]))
        return None
    return [f"block cache of {name} (in place)" for name in resized.changed]


def verify_resize(run: Run, graph: JobGraph, cache_capacity_bytes: Mapping[str, float],
                  tolerance: float = 0.01) -> bool:
    """Check a resize in place against RocksDB's block-cache-capacity metric (a window
    collected after the step): as requested, the step is observed with no downtime;
    still not so a window later, it falls back to a restart (True: it fell back)."""
    entry = resize_in_effect(run.status)
    if entry is None or entry.applied_time is None or entry.observed_cache_bytes is not None:
        return False
    by_name = {v.name: v.id for v in graph.vertices}
    expected = entry.expected_cache_bytes or {}
    observed = {name: cache_capacity_bytes.get(by_name.get(name, "")) for name in expected}
    wrong = sorted(name for name, size in expected.items()
                   if (seen := observed[name]) is None or abs(seen - size) > tolerance * size)
    if not wrong:
        run.status = _with_step(run.status, entry.step, entry.model_copy(update={
            "observed_cache_bytes": {n: round(v or 0.0) for n, v in observed.items()},
            "observed_downtime_s": 0.0}))
        return False
    # The window may still hold samples from before the resize (Flink refreshes the gauge
    # every few seconds, Prometheus scrapes it later): one more window's grace.
    metrics = run.spec.metrics
    if run.now < entry.applied_time + metrics.stabilization + 2 * metrics.window:
        return False
    fall_back(run, entry, "RocksDB's block-cache-capacity metric does not show the resize "
              "of " + ", ".join(wrong[:5]))
    return True


def _apply_target(run: Run) -> Realized | None:
    if run.spec.mode != Mode.ACTIVE:
        # A target resized in place stays: it says what the caches hold (the deployment
        # does not), and switching back to Active re-asks the agents. Not once the
        # deployment is edited: that restarts the job at the deployment's memory, and in
        # this mode nothing undoes the edit. A pass that read no deployment (Disabled, a
        # quiet pass) cannot tell an edit.
        if run.status.target is None:
            return None
        held = (resize_in_effect(run.status) is not None if run.deployment is None
                else resized_as_chosen(run.status, run.deployment))
        if not held:
            run.status = run.status.model_copy(update={"target": None})
        return None
    target, deployment = run.status.target, run.deployment
    if target is None or deployment is None:
        return None
    desired = target_fields(target)
    differences = desired.differences(current_fields(deployment))
    resize = resize_in_effect(run.status)
    if resize is not None and edited_during_resize(resize, deployment, desired):
        # An edit of the deployment restarts the job at the deployment's managed memory:
        # the patch that undoes it carries the step's, and enacts the step by restart.
        _by_restart(run, resize, "the FlinkDeployment was edited while the step was "
                    "resized in place", applied=True)
        resize = None
    if resize is not None:
        # Asked when the pass read the job, and a re-ask only while it runs (between
        # attempts no agent holds its slots).
        if run.job is None or (resize.applied_time is not None
                               and run.job.state != "RUNNING"):
            return Realized([], True, resized=True)
        resized = _resize(run, resize)
        if resized is not None:
            _mark_applied(run, target.step)
            return Realized(resized, True, resized=True)
        if resize_in_effect(run.status) is not None:  # a re-ask that passes: next pass
            return Realized([], True, resized=True)
    again = drifted(run)
    before = run.status
    if again:
        # The configuration changes back: a reconfiguration of ours, saved before the
        # patch as a commit is, so that a pass stopped between the two cannot leave the
        # job restarted with nothing saying so (the next pass would decide from a window
        # that spans the drift). Not while admission keeps refusing it: each such pass
        # would write the status twice, the mark and then its undoing (a patch that
        # lands at last, in a pass that dies before its save, `drifted` finds next pass).
        _mark_reapplied(run, target.step)
        if run.scaling() != Reason.PATCH_REFUSED:
            run.save()
    if differences:
        # Only a target from the current status may be applied: one held by a replica
        # that lost a race would roll the job back (docs/controller.md, one writer).
        run.ports.store.confirm()
        try:
            note = run.ports.deployments.apply(run.namespace, run.target,
                                               apply_body(run.target, run.namespace, desired))
        except PatchRefused as refused:
            run.status = before  # nothing changed back: no reconfiguration of ours
            patch_refused(run, target.step, refused.code)
            return None
        if note:
            run.event("Normal", Reason.FIELDS_TAKEN_OVER, note)
    _mark_applied(run, target.step, seen=bool(differences))
    return Realized(differences, in_place(deployment, differences), reapplied=again)


def _mark_reapplied(run: Run, step: int) -> None:
    """A step applied again over a drift: a reconfiguration of ours (the restart it causes
    is no JobRestarted), and stabilization counts from it, so no window that spans the
    drift decides. A step whose downtime was not observed yet never will be: what a pass
    would see now holds the drift's restarts too."""
    run.status = run.status.model_copy(
        update={"last_reconfiguration_time": epoch_seconds(run.now)})
    entry = run.status.enactment(step)
    if entry is not None and entry.observed_downtime_s is None:
        run.status = _with_step(run.status, step,
                                entry.model_copy(update={"applied_unseen": True}))


def _applied_before(run: Run, step: int) -> bool:
    entry = run.status.enactment(step)
    return entry is None or entry.applied_time is not None


def unapplied(run: Run) -> bool:
    """Active, with a committed step the deployment does not carry yet (or a resize in
    place not yet done). A step it carries already was patched by a pass that stopped
    before recording it: it is marked applied now, at a time nobody knows."""
    target, deployment = run.status.target, run.deployment
    if run.spec.mode != Mode.ACTIVE or target is None or deployment is None:
        return False
    entry = run.status.enactment(target.step)
    if entry is None or entry.applied_time is not None:
        return False
    if resize_in_effect(run.status) is not None or target_fields(target).differences(
            current_fields(deployment)):
        return True
    _mark_applied(run, target.step, seen=False)
    return False


def drifted(run: Run) -> bool:
    """Active, and the deployment no longer carries the applied target (a hand edit of an
    owned field, or one written past reading), beyond what a resize in place leaves there
    by design. The window then ran at the deployment's configuration, the target's or
    both: nothing is decided from it. Realize applies the target again, and a window of
    the configuration the history names decides. So too when the pass found the re-apply
    refused and the deployment carries the target again: it landed in a pass that died
    before its save (or the edit was undone by hand), and the job restarted for it."""
    target, deployment = run.status.target, run.deployment
    if run.spec.mode != Mode.ACTIVE or target is None or deployment is None:
        return False
    if not _applied_before(run, target.step):
        return False  # not applied yet: the gate's `applying`
    if run.scaling() == Reason.PATCH_REFUSED:
        return True
    resize = resize_in_effect(run.status)
    if resize is not None:
        return edited_during_resize(resize, deployment, target_fields(target))
    return bool(target_fields(target).differences(current_fields(deployment)))


def levels_unknown(run: Run) -> bool:
    """The deployment carries per-operator resources that cannot be read (a value
    flink-plugin refuses): what memory levels the job runs is not known, and they would
    read as 0 (without the key, Flink's default slot is level 0 indeed)."""
    deployment = run.deployment
    if deployment is None or resized_as_chosen(run.status, deployment):
        return False
    text = ((deployment.get("spec", {}) or {}).get("flinkConfiguration", {}) or {}).get(
        RESOURCES_KEY)
    return bool(text) and parse_resources(text) is None


def _mark_applied(run: Run, step: int, seen: bool = True) -> None:
    """The step is on the deployment: stabilization counts from now, not from its commit
    (a refused patch, or a controller stopped in between, may have held it for windows).
    Not `seen`: the deployment carried it already, patched by a pass that did not record
    it, at a time nobody knows (`StepEnactment.applied_unseen`)."""
    enactments = run.status.enactments
    if enactments and enactments[-1].step == step and enactments[-1].applied_time is None:
        now = epoch_seconds(run.now)
        run.status = _with_last(run.status, applied_time=now, applied_unseen=not seen)
        run.status = run.status.model_copy(update={"last_reconfiguration_time": now})


def patch_refused(run: Run, step: int, code: int) -> None:
    """Admission turned our patch down: Scaling=False/PatchRefused with the HTTP code (never
    the answer's text, which a webhook writes), one Warning per new refusal. The target
    stays committed, so every later pass tries it again."""
    run.outcome = "patch-refused"
    run.count_error("realize")
    message = (f"step {step}: the API server refused the patch of FlinkDeployment "
               f"{run.namespace}/{run.target} with HTTP {code} (an admission webhook, a "
               f"ResourceQuota, a ValidatingAdmissionPolicy, RBAC or the CRD's schema; its "
               f"answer is in the API server's audit log); retried every pass, and no new "
               f"step is decided until it lands or the policy is edited")
    # As the pass found it: the waiting rule may have set Stabilizing since.
    scaling = run.found.condition(ConditionType.SCALING)
    refused = scaling if scaling is not None and scaling.reason == Reason.PATCH_REFUSED else None
    if refused is None or refused.message != message:
        run.event("Warning", Reason.PATCH_REFUSED, message)
    # A pass that decided nothing (still waiting, say) keeps the generation refused: an
    # edit since (maybe the fix, `gate.edited_since_refused`) still lets one decide.
    kept = refused if refused is not None and (
        run.status.last_decision == run.found.last_decision) else None
    run.status = with_condition(run.status, ConditionType.SCALING, False,
                                Reason.PATCH_REFUSED, message, run.now,
                                kept.observed_generation if kept else run.generation)
