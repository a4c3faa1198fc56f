"""Flink's own output formats for a twin: the Prometheus reporter's text and REST JSON.

Shapes follow the golden samples of a real Flink 1.20.5 job
(`tests/golden/flink-1.20/`): metric names and label order per scope,
Flink's label sanitising, trailing `,}` in label sets, numbers printed as Java does
(`1.11848106E8`), and the REST field names of `/jobs/overview`, `/jobs/<jid>`,
`/jobs/<jid>/plan`, `/jobs/<jid>/config`, `/taskmanagers` and `/taskmanagers/<id>`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from html.entities import codepoint2name
from typing import Any

from policies.model import estimate_mean_from_quantiles
from simulator.twin import MIB_BYTES, Twin

_UNSAFE = re.compile(r"[^a-zA-Z0-9:_]")
LATENCY_QUANTILES = (0.5, 0.75, 0.95, 0.98, 0.99, 0.999)
# Flink samples one state access in 100 for the latency histograms.
LATENCY_SAMPLE_INTERVAL = 100


def sanitize(text: str) -> str:
    """Flink's `filterLabelValueCharacters`: anything outside [a-zA-Z0-9:_] becomes `_`."""
    return _UNSAFE.sub("_", text)


def java_double(value: float) -> str:
    """A float as Java's Double.toString prints it (what the reporter emits)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    magnitude = abs(value)
    if value == 0 or 1e-3 <= magnitude < 1e7:
        text = repr(float(value))
        return text
    mantissa, exponent = f"{value:.16E}".split("E")
    mantissa = mantissa.rstrip("0")
    if mantissa.endswith("."):
        mantissa += "0"
    return f"{mantissa}E{int(exponent)}"


@dataclass(frozen=True)
class DeployedJob:
    """What the served Flink cluster knows about one job besides the twin."""

    namespace: str
    name: str
    job_id: str
    job_name: str
    start_ms: int
    slots_per_tm: int
    tm_count: int
    tm_cpu: float
    tm_memory_mib: float
    restarts: int


class Family:
    """One metric family of the scrape: HELP, TYPE and its samples, in insertion order."""

    def __init__(self, name: str, kind: str, scope: str, help_name: str) -> None:
        self.name, self.kind, self.scope, self.help_name = name, kind, scope, help_name
        self.lines: list[str] = []

    def add(self, labels: Iterable[tuple[str, str]], value: float, suffix: str = "") -> None:
        text = "".join(f'{k}="{v}",' for k, v in labels)
        self.lines.append(f"{self.name}{suffix}{{{text}}} {java_double(value)}")

    def render(self) -> str:
        head = (
            f"# HELP {self.name} {self.help_name} (scope: {self.scope})\n"
            f"# TYPE {self.name} {self.kind}\n"
        )
        return head + "".join(line + "\n" for line in self.lines)


class Scrape:
    def __init__(self) -> None:
        self.families: dict[str, Family] = {}

    def family(self, name: str, kind: str, scope: str, help_name: str) -> Family:
        if name not in self.families:
            self.families[name] = Family(name, kind, scope, help_name)
        return self.families[name]

    def gauge(self, scope: str, metric: str, labels: list[tuple[str, str]], value: float,
              help_name: str | None = None) -> None:
        name = f"flink_{scope}_{metric}"
        self.family(name, "gauge", scope, help_name or metric).add(labels, value)

    def render(self) -> str:
        return "".join(f.render() for f in self.families.values() if f.lines)


def _task_labels(job: DeployedJob, vid: str, name: str, subtask: int, tm: str
                 ) -> list[tuple[str, str]]:
    attempt_id = f"{job.job_id}_{vid}_{subtask}_0"
    return [
        ("job_id", job.job_id), ("task_id", vid), ("task_attempt_id", attempt_id), ("host", ""),
        ("task_name", sanitize(name)), ("task_attempt_num", "0"),
        ("job_name", sanitize(job.job_name)), ("tm_id", sanitize(tm)),
        ("subtask_index", str(subtask)),
    ]


def _operator_labels(task: list[tuple[str, str]], vid: str, name: str) -> list[tuple[str, str]]:
    # Flink's order: the task labels with operator_id, operator_name after host.
    head, tail = task[:4], task[4:]
    return [*head, ("operator_id", vid), ("operator_name", sanitize(name)), *tail]


def latency_quantiles(mean_ns: float) -> dict[float, float]:
    """Quantiles of a log-normal (σ = 0.5) latency distribution, scaled so that the
    mean a reader estimates from these quantiles (Flink summaries have no `_sum`;
    `policies.model.estimate_mean_from_quantiles`) is the model's mean."""
    sigma = 0.5
    z = {0.5: 0.0, 0.75: 0.6745, 0.95: 1.6449, 0.98: 2.0537, 0.99: 2.3263, 0.999: 3.0902}
    shape = {q: math.exp(sigma * z[q]) for q in LATENCY_QUANTILES}
    estimate = estimate_mean_from_quantiles(shape) or 1.0
    return {q: mean_ns * v / estimate for q, v in shape.items()}


def add_job_metrics(scrape: Scrape, job: DeployedJob, twin: Twin, now_ms: int) -> None:
    """Every metric the scaler reads, for one job, in the reporter's names and labels."""
    if twin.scrape_missing():
        return  # a lost scrape (model.Noise.scrape_gaps): Prometheus sees a gap
    jm = [("job_id", job.job_id), ("host", "localhost"), ("job_name", sanitize(job.job_name))]
    running = twin.running
    uptime = float(max(0, now_ms - job.start_ms)) if running else 0.0
    scrape.gauge("jobmanager_job", "uptime", jm, uptime)
    scrape.gauge("jobmanager_job", "numRestarts", jm, 0.0)
    tick = twin.last_tick()
    if not running or tick is None or not tick.running:
        return
    ops = twin.model.by_vertex()
    tm_managed = flink_memory_model(job.tm_memory_mib)["managedMemory"]
    host: dict[tuple[str, int], str] = {}
    for n, slots in enumerate(slot_plan(job, twin)):
        tm = [("host", ""), ("tm_id", sanitize(taskmanager_id(job, n)))]
        # RocksDB reserves its slot's managed memory; stateless slots hold none.
        used = sum(twin.managed_mib_of(vid) for vid, _ in slots if ops[vid].state is not None)
        scrape.gauge("taskmanager_Status_Flink_Memory_Managed", "Total", tm, tm_managed)
        scrape.gauge("taskmanager_Status_Flink_Memory_Managed", "Used", tm, used * MIB_BYTES)
        host.update({slot: taskmanager_id(job, n) for slot in slots})
    for vid, op in ops.items():
        if twin.series_stale(vid):
            continue  # its reporter lags (model.Noise.stale_series): the series go stale
        sample = tick.vertices[vid]
        for i, sub in enumerate(sample.subtasks):
            task = _task_labels(job, vid, op.name, i, host[(vid, i)])
            operator = _operator_labels(task, vid, op.name)
            for metric, value in (
                ("busyTimeMsPerSecond", twin.measured_busy(vid, sub.busy)),
                ("backPressuredTimeMsPerSecond", sub.backpressured),
                ("idleTimeMsPerSecond", sub.idle),
                ("numRecordsInPerSecond", twin.noisy(sub.records_in)),
                ("numRecordsOutPerSecond", twin.noisy(sub.records_out)),
            ):
                scrape.gauge("taskmanager_job_task", metric, task, min(value, 1000.0)
                             if metric.endswith("MsPerSecond") else value)
            scrape.gauge("taskmanager_job_task_operator", "numRecordsInPerSecond", operator,
                         sub.records_in)
            scrape.gauge("taskmanager_job_task_operator", "numRecordsOutPerSecond", operator,
                         sub.records_out)
            if op.is_source:
                share = sub.records_out / sample.records_out if sample.records_out else 1.0 / len(
                    sample.subtasks)
                scrape.gauge("taskmanager_job_task_operator", "pendingRecords", operator,
                             (sample.pending or 0.0) * share)
            if op.state is not None:
                _add_state_metrics(scrape, twin, vid, i, operator)


def _add_state_metrics(scrape: Scrape, twin: Twin, vid: str, subtask: int,
                       operator: list[tuple[str, str]]) -> None:
    op = twin.model.by_vertex()[vid]
    assert op.state is not None
    cost = twin.cost(vid)
    counters = twin.counters[vid]
    scope = "taskmanager_job_task_operator"
    scrape.gauge(scope, "rocksdb_block_cache_hit", operator, round(counters.hits[subtask]),
                 "rocksdb.block_cache_hit")
    scrape.gauge(scope, "rocksdb_block_cache_miss", operator, round(counters.misses[subtask]),
                 "rocksdb.block_cache_miss")
    state = sanitize(op.state.name)
    per_task = op.state.total_bytes / twin.configuration[vid].parallelism
    cf_scope = f"{scope}_{state}"
    for metric, value in (
        ("rocksdb_block_cache_capacity", cost.cache_bytes),
        ("rocksdb_block_cache_usage", min(cost.cache_bytes, per_task)),
        ("rocksdb_estimate_live_data_size", per_task),
    ):
        # Flink's help text is the RocksDB property: rocksdb.block-cache-capacity.
        help_name = "rocksdb." + metric.removeprefix("rocksdb_").replace("_", "-")
        scrape.gauge(cf_scope, metric, operator, value, help_name)
    latency_scope = f"{scope}_state_name"
    labels = [("state_name", state), *operator]
    sampled = twin.sampled_latency_ns(cost)  # this histogram's window of sampled accesses
    for metric, mean_ns, count in (
        ("valueStateGetLatency", cost.get_latency_ns, counters.gets[subtask]),
        ("valueStateUpdateLatency", cost.put_latency_ns, counters.puts[subtask]),
    ):
        if mean_ns is None:
            continue
        if sampled is not None and (metric == "valueStateGetLatency"
                                    or cost.get_latency_ns is None):
            mean_ns = sampled
        family = scrape.family(f"flink_{latency_scope}_{metric}", "summary", latency_scope, metric)
        family.add(labels, float(int(count / LATENCY_SAMPLE_INTERVAL)), suffix="_count")
        for q, v in latency_quantiles(mean_ns).items():
            family.add([*labels, ("quantile", str(q))], v)


# ---- REST -------------------------------------------------------------------

_TASK_STATES = ("CREATED", "FAILED", "DEPLOYING", "RECONCILING", "FINISHED", "RUNNING",
                "INITIALIZING", "SCHEDULED", "CANCELED", "CANCELING")


def escape_html4(text: str) -> str:
    """What Flink's plan descriptions use (commons-text escapeHtml4): named entities for
    `"&<>` and every character HTML 4 names (`é` -> `&eacute;`); `'` stays."""
    return "".join(f"&{codepoint2name[ord(c)]};" if ord(c) in codepoint2name else c
                   for c in text)


def job_state(twin: Twin) -> str:
    return "RUNNING" if twin.running else "RESTARTING"


def _task_counts(state: str, n: int) -> dict[str, int]:
    counts = {s: 0 for s in _TASK_STATES}
    counts["RUNNING" if state == "RUNNING" else "SCHEDULED"] = n
    return counts


def jobs_overview(job: DeployedJob, twin: Twin, now_ms: int) -> dict[str, Any]:
    state = job_state(twin)
    total = sum(vc.parallelism for vc in twin.configuration.values())
    tasks = {s.lower(): 0 for s in _TASK_STATES}
    tasks["running" if state == "RUNNING" else "scheduled"] = total
    tasks["total"] = total
    return {"jobs": [{
        "jid": job.job_id, "name": job.job_name, "start-time": job.start_ms, "end-time": -1,
        "duration": now_ms - job.start_ms, "state": state, "last-modification": job.start_ms,
        "tasks": tasks,
    }]}


def plan(job: DeployedJob, twin: Twin) -> dict[str, Any]:
    graph = twin.job_graph()
    nodes = []
    for v in reversed(graph.vertices):  # Flink lists sinks first
        node: dict[str, Any] = {
            "id": v.id, "parallelism": v.parallelism, "operator": "", "operator_strategy": "",
            "description": escape_html4(v.name) + "<br/>", "optimizer_properties": {},
        }
        inputs = [
            {"num": n, "id": e.source, "ship_strategy": e.ship_strategy.value,
             "exchange": "pipelined_bounded"}
            for n, e in enumerate(graph.inputs(v.id))
        ]
        if inputs:
            node = {**{k: node[k] for k in list(node)[:5]}, "inputs": inputs,
                    "optimizer_properties": {}}
        nodes.append(node)
    return {"jid": job.job_id, "name": job.job_name, "type": "STREAMING", "nodes": nodes}


def job_details(job: DeployedJob, twin: Twin, now_ms: int) -> dict[str, Any]:
    state = job_state(twin)
    graph = twin.job_graph()
    vertices = []
    for v in graph.vertices:
        vertices.append({
            "id": v.id, "slotSharingGroupId": twin.slot_sharing_group(v.id), "name": v.name,
            "maxParallelism": v.max_parallelism, "parallelism": v.parallelism, "status": state,
            "start-time": job.start_ms, "end-time": -1, "duration": now_ms - job.start_ms,
            "tasks": _task_counts(state, v.parallelism),
            "metrics": {
                "read-bytes": 0, "read-bytes-complete": False, "write-bytes": 0,
                "write-bytes-complete": False, "read-records": 0, "read-records-complete": False,
                "write-records": 0, "write-records-complete": False,
                "accumulated-backpressured-time": 0, "accumulated-idle-time": 0,
                "accumulated-busy-time": 0.0,
            },
        })
    timestamps = {s: 0 for s in ("RECONCILING", "RESTARTING", "CANCELLING", "CREATED", "RUNNING",
                                 "FAILING", "FAILED", "FINISHED", "INITIALIZING", "CANCELED",
                                 "SUSPENDED")}
    timestamps.update(CREATED=job.start_ms, INITIALIZING=job.start_ms, RUNNING=job.start_ms)
    total = sum(v.parallelism for v in graph.vertices)
    return {
        "jid": job.job_id, "name": job.job_name, "isStoppable": False, "state": state,
        "job-type": "STREAMING", "start-time": job.start_ms, "end-time": -1,
        "duration": now_ms - job.start_ms, "maxParallelism": -1, "now": now_ms,
        "timestamps": timestamps, "vertices": vertices,
        "status-counts": _task_counts(state, total), "plan": plan(job, twin),
    }


def job_config(job: DeployedJob, twin: Twin) -> dict[str, Any]:
    parallelism = max(vc.parallelism for vc in twin.configuration.values())
    return {"jid": job.job_id, "name": job.job_name, "execution-config": {
        "execution-mode": "PIPELINED", "restart-strategy": "Cluster level default restart strategy",
        "job-parallelism": parallelism, "object-reuse-mode": False,
        # As flink-plugin publishes them: the uids the controller may name.
        "user-config": {"hybridscaler.operator-uids": ",".join(
            o.uid for o in twin.model.operators)},
    }}


def _resource(cpu: float, heap: int, managed: int, network: int) -> dict[str, Any]:
    return {"cpuCores": cpu, "taskHeapMemory": heap, "taskOffHeapMemory": 0,
            "managedMemory": managed, "networkMemory": network, "extendedResources": {}}


def flink_memory_model(process_mib: float) -> dict[str, int]:
    """Flink 1.20's TaskManager memory split of a process size, in bytes (default fractions)."""
    mib = MIB_BYTES
    process = int(process_mib * mib)
    overhead = min(max(int(process * 0.1), 192 * mib), 1024 * mib)
    metaspace = 256 * mib
    total_flink = max(0, process - overhead - metaspace)
    network = min(max(int(total_flink * 0.1), 64 * mib), 1024 * mib)
    managed = int(total_flink * 0.4)
    framework = 128 * mib
    task_heap = max(0, total_flink - 2 * framework - network - managed)
    return {
        "frameworkHeap": framework, "taskHeap": task_heap, "frameworkOffHeap": framework,
        "taskOffHeap": 0, "networkMemory": network, "managedMemory": managed,
        "jvmMetaspace": metaspace, "jvmOverhead": overhead, "totalFlinkMemory": total_flink,
        "totalProcessMemory": process,
    }


def taskmanagers(job: DeployedJob, twin: Twin, heap_mib: float, network_mib: float,
                 now_ms: int) -> dict[str, Any]:
    """`GET /taskmanagers`: one entry per TaskManager, without its slots (as Flink lists them)."""
    listed = [{k: v for k, v in tm.items() if k != "allocatedSlots"}
              for tm in _taskmanagers(job, twin, heap_mib, network_mib, now_ms)]
    return {"taskmanagers": listed}


def taskmanager(job: DeployedJob, twin: Twin, heap_mib: float, network_mib: float, now_ms: int,
                tm_id: str) -> dict[str, Any]:
    """`GET /taskmanagers/<id>`: one TaskManager with its `allocatedSlots`."""
    for tm in _taskmanagers(job, twin, heap_mib, network_mib, now_ms):
        if tm["id"] == tm_id:
            return tm
    raise KeyError(f"TaskManager {tm_id} not found")


def taskmanager_id(job: DeployedJob, n: int) -> str:
    """The resource id of the deployment's n-th TaskManager pod (0-based)."""
    return f"{job.namespace}-{job.name}-taskmanager-1-{n + 1}"


def slot_plan(job: DeployedJob, twin: Twin) -> list[list[tuple[str, int]]]:
    """(vertex id, subtask) in each TaskManager's slots, filled in vertex order."""
    tasks = [(vid, i) for vid, vc in twin.configuration.items() for i in range(vc.parallelism)]
    per_tm = max(1, job.slots_per_tm)
    count = max(job.tm_count, math.ceil(len(tasks) / per_tm))
    return [tasks[n * per_tm:(n + 1) * per_tm] for n in range(count)]


def _taskmanagers(job: DeployedJob, twin: Twin, heap_mib: float, network_mib: float,
                  now_ms: int) -> list[dict[str, Any]]:
    """Every TaskManager of the deployment with its slots."""
    per_tm = max(1, job.slots_per_tm)
    memory = flink_memory_model(job.tm_memory_mib)
    tm_managed = memory["managedMemory"] // MIB_BYTES
    out = []
    for n, slots in enumerate(slot_plan(job, twin)):
        managed = [int(twin.managed_mib_of(vid)) for vid, _ in slots]
        out.append({
            "id": taskmanager_id(job, n),
            "path": f"pekko.tcp://flink@10.0.0.{n + 2}:6122/user/rpc/taskmanager_0",
            # Despite its name, Flink sends the time of the last heartbeat (epoch ms).
            "dataPort": 6121, "jmxPort": -1, "timeSinceLastHeartbeat": now_ms,
            "slotsNumber": per_tm, "freeSlots": per_tm - len(slots),
            "totalResource": _resource(job.tm_cpu, 0, tm_managed, 0),
            "freeResource": _resource(max(0.0, job.tm_cpu - len(slots)), 0,
                                      max(0, tm_managed - sum(managed)), 0),
            "hardware": {"cpuCores": int(job.tm_cpu) or 1,
                         "physicalMemory": int(job.tm_memory_mib * MIB_BYTES),
                         "freeMemory": 0, "managedMemory": memory["managedMemory"]},
            "memoryConfiguration": memory,
            "allocatedSlots": [
                {"jobId": job.job_id,
                 "resource": _resource(1.0, int(heap_mib), m, int(network_mib))}
                for m in managed
            ],
        })
    return out
