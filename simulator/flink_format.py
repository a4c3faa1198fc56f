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
from simulator.twin import MIB_BYTES, Tick, Twin

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
    # The TaskManagers' CPU limit over their request (kubernetes.taskmanager.cpu.limit-factor).
    tm_cpu_limit_factor: float = 1.0
    # When the job's current execution graph was created and when it (re-)entered RUNNING
    # (ms; may lie ahead while it restarts): its `timestamps`. 0: at start_ms. An in-place
    # rescale by the adaptive scheduler creates a new graph (recorded: CREATED and RUNNING
    # move, RESTARTING stays 0).
    running_ms: int = 0
    created_ms: int = 0
    # Restarts of this job in place (a failover: the same id and start), Flink's job gauge
    # numRestarts, which a new submission starts again at 0.
    failovers: int = 0


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
    scrape.gauge("jobmanager_job", "numRestarts", jm, float(job.failovers))
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
        for name, value in jvm_metrics(job, twin, slots).items():
            scope, _, metric = f"taskmanager_{name}".replace(".", "_").rpartition("_")
            scrape.gauge(scope, metric, tm, value)
        host.update({slot: taskmanager_id(job, n) for slot in slots})
    for vid, op in ops.items():
        if twin.series_stale(vid):
            continue  # its reporter lags (model.Noise.stale_series): the series go stale
        for i, (task_values, operator_values) in enumerate(subtask_metrics(twin, vid, tick)):
            task = _task_labels(job, vid, op.name, i, host[(vid, i)])
            operator = _operator_labels(task, vid, op.name)
            for metric, value in task_values.items():
                scrape.gauge("taskmanager_job_task", metric, task, value)
            for metric, value in operator_values.items():
                scrape.gauge("taskmanager_job_task_operator", metric, operator, value)
            if op.state is not None:
                _add_state_metrics(scrape, twin, vid, i, operator)


def subtask_metrics(twin: Twin, vid: str, tick: Tick
                    ) -> list[tuple[dict[str, float], dict[str, float]]]:
    """(task scope, operator scope) metrics of each subtask of a vertex in the last tick:
    meters per second, and the accumulated counters (longs in Flink) since the tasks started.
    Both the reporter and the REST metric store read them from here."""
    op = twin.model.by_vertex()[vid]
    sample = tick.vertices[vid]
    io = twin.io[vid]
    out = []
    for i, sub in enumerate(sample.subtasks):
        # A source task has no network input: its task numRecordsIn stays 0, while a
        # FLIP-27 source operator counts the records it reads in numRecordsIn.
        read_rate = 0.0 if op.is_source else twin.noisy(sub.records_in)
        task = {
            "busyTimeMsPerSecond": min(twin.measured_busy(vid, sub.busy), 1000.0),
            "backPressuredTimeMsPerSecond": min(sub.backpressured, 1000.0),
            "idleTimeMsPerSecond": min(sub.idle, 1000.0),
            "numRecordsInPerSecond": read_rate,
            "numRecordsOutPerSecond": twin.noisy(sub.records_out),
            "numRecordsIn": 0.0 if op.is_source else float(round(io.read[i])),
            "numRecordsOut": float(round(io.written[i])),
            "accumulateBusyTimeMs": float(round(io.busy_ms[i])),
            "accumulateBackPressuredTimeMs": float(round(io.backpressured_ms[i])),
            "accumulateIdleTimeMs": float(round(io.idle_ms[i])),
        }
        operator = {
            "numRecordsInPerSecond": sub.records_out if op.is_source else sub.records_in,
            "numRecordsOutPerSecond": sub.records_out,
            "numRecordsIn": float(round(io.read[i])),
            "numRecordsOut": float(round(io.written[i])),
        }
        if op.is_source:
            share = sub.records_out / sample.records_out if sample.records_out else 1.0 / len(
                sample.subtasks)
            operator["pendingRecords"] = (sample.pending or 0.0) * share
        out.append((task, operator))
    return out


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
    if twin.model.forst_engine is not None:
        # ForSt (Flink 2.2): its file cache's tickers, and the asynchronous operator's
        # records in flight in their own scope (tests/golden/flink-2.2/prom-scrape.txt).
        scrape.gauge(scope, "forst_fileCache_hit", operator, round(counters.file_hits[subtask]),
                     "forst.fileCache.hit")
        scrape.gauge(scope, "forst_fileCache_miss", operator,
                     round(counters.file_misses[subtask]), "forst.fileCache.miss")
        tick = twin.last_tick()
        if tick is not None and vid in tick.vertices:
            scrape.gauge(f"{scope}_asyncStateProcessing", "numInFlightRecords", operator,
                         round(tick.vertices[vid].subtasks[subtask].in_flight))
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
        "duration": max(0, now_ms - job.start_ms), "state": state,
        "last-modification": max(job.start_ms, job.created_ms, running_since(job, now_ms)),
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


def job_metrics(job: DeployedJob, names: list[str] | None) -> list[dict[str, str]]:
    """GET /jobs/:jid/metrics: the job's gauges asked for by name (?get=), as Flink answers
    them (values as strings; a name it does not know is left out); without ?get=, the
    list of their names."""
    known = {"numRestarts": str(job.failovers)}
    if names is None:
        return [{"id": n} for n in known]
    return [{"id": n, "value": known[n]} for n in names if n in known]


def running_since(job: DeployedJob, now_ms: int) -> int:
    """When the job last entered RUNNING; 0 while it has not (yet) since its last restart."""
    running = job.running_ms or job.start_ms
    return running if running <= now_ms else 0


def job_details(job: DeployedJob, twin: Twin, now_ms: int) -> dict[str, Any]:
    state = job_state(twin)
    graph = twin.job_graph()
    # Tasks start when the job runs; while it restarts they have not started yet.
    task_start = running_since(job, now_ms) or -1
    vertices = []
    for v in graph.vertices:
        vertices.append({
            "id": v.id, "slotSharingGroupId": twin.slot_sharing_group(v.id), "name": v.name,
            "maxParallelism": v.max_parallelism, "parallelism": v.parallelism, "status": state,
            "start-time": task_start, "end-time": -1,
            "duration": now_ms - task_start if task_start > 0 else -1,
            "tasks": _task_counts(state, v.parallelism),
            "metrics": vertex_io_metrics(twin, v.id),
        })
    timestamps = {s: 0 for s in ("RECONCILING", "RESTARTING", "CANCELLING", "CREATED", "RUNNING",
                                 "FAILING", "FAILED", "FINISHED", "INITIALIZING", "CANCELED",
                                 "SUSPENDED")}
    timestamps.update(CREATED=job.created_ms or job.start_ms, INITIALIZING=job.start_ms,
                      RUNNING=running_since(job, now_ms))
    total = sum(v.parallelism for v in graph.vertices)
    return {
        "jid": job.job_id, "name": job.job_name, "isStoppable": False, "state": state,
        "job-type": "STREAMING", "start-time": job.start_ms, "end-time": -1,
        "duration": max(0, now_ms - job.start_ms), "maxParallelism": -1, "now": now_ms,
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


# ---- the REST metric store ------------------------------------------------------

# Flink's operator-name limit for metric groups (TaskMetricGroup), and the characters its
# metric query service writes as `_` in the names the REST API lists.
OPERATOR_NAME_MAX_LENGTH = 80
_QUERY_UNSAFE = re.compile(r"[ .:,]")
AGGREGATIONS = ("min", "max", "avg", "sum", "skew")
FLINK_VERSION = "1.20.5"


def metric_store_name(operator_name: str) -> str:
    """How the REST API prefixes an operator's metrics: `Source: Bids` -> `Source__Bids`."""
    return _QUERY_UNSAFE.sub("_", operator_name[:OPERATOR_NAME_MAX_LENGTH])


def subtask_stores(twin: Twin, vid: str) -> list[dict[str, float]]:
    """The metric store of each subtask of a vertex, as `/subtasks/metrics` aggregates it:
    task metrics by name, operator metrics as `<operator name>.<metric>`. Empty while the
    job restarts (no task reports)."""
    tick = twin.last_tick()
    if not twin.running or tick is None or not tick.running:
        return []
    prefix = metric_store_name(twin.model.by_vertex()[vid].name) + "."
    return [{**task, **{prefix + k: v for k, v in operator.items()}}
            for task, operator in subtask_metrics(twin, vid, tick)]


def skew(values: list[float]) -> float:
    """Flink's data-skew score (DoubleDataSkew): mean absolute deviation over the mean,
    in percent, at most 100; 0 when the mean is 0."""
    avg = sum(values) / len(values)
    if avg == 0:
        return 0.0
    return min(100.0 * sum(abs(avg - v) for v in values) / len(values) / avg, 100.0)


def aggregated(stores: list[dict[str, float]], names: list[str] | None,
               aggregations: list[str]) -> list[dict[str, Any]]:
    """What Flink's aggregating metric handlers answer (AggregatedMetricsStoreHelper).

    No `names`: every metric id any store has. Otherwise one entry per name with the
    requested aggregations (all of them when none is named); if any requested metric is
    missing from every store, Flink answers an empty list."""
    if names is None:
        return [{"id": n} for n in sorted({n for store in stores for n in store})]
    wanted = aggregations or list(AGGREGATIONS)
    out = []
    for name in names:
        values = [float(store[name]) for store in stores if name in store]
        if not values:
            return []
        computed = {"min": min(values), "max": max(values), "avg": sum(values) / len(values),
                    "sum": sum(values), "skew": skew(values)}
        out.append({"id": name, **{a: computed[a] for a in AGGREGATIONS if a in wanted}})
    return out


def metric_values(store: dict[str, float], names: list[str] | None) -> list[dict[str, str]]:
    """What Flink's non-aggregating handlers (`/jobmanager/metrics`) answer: ids, or the
    requested ones that exist with their values as strings (unknown names are skipped)."""
    if names is None:
        return [{"id": n} for n in sorted(store)]
    return [{"id": n, "value": _metric_string(store[n])} for n in dict.fromkeys(names)
            if n in store]


def _metric_string(value: float) -> str:
    # The metric store holds String.valueOf of the gauge: "4" for an int, "0.5" for a double.
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def jvm_metrics(job: DeployedJob, twin: Twin, slots: list[tuple[str, int]]) -> dict[str, float]:
    """A TaskManager's JVM gauges by their metric-store names. The twin has no JVM: heap
    use and GC time grow with the busyness of the tasks in its slots, and stay low enough
    not to trip an autoscaler's heap or GC-pressure guards."""
    memory = flink_memory_model(job.tm_memory_mib)
    heap_max = float(memory["frameworkHeap"] + memory["taskHeap"])
    tick = twin.last_tick()
    busy = cores = 0.0
    if tick is not None and tick.running and slots:
        busy = sum(tick.vertices[vid].subtasks[i].busy for vid, i in slots) / len(slots) / 1000
        cores = sum(tick.vertices[vid].subtasks[i].cpu for vid, i in slots)
    # Its tasks' CPU since they started (the JVM's own threads are not modelled): the
    # process CPU time in ns, and the load over the cores the pod may use.
    cpu_s = sum(twin.io[vid].cpu_s[i] for vid, i in slots)
    return {
        "Status.JVM.CPU.Time": float(round(cpu_s * 1e9)),
        "Status.JVM.CPU.Load": min(1.0, cores / (job.tm_cpu * job.tm_cpu_limit_factor))
        if job.tm_cpu > 0 else 0.0,
        "Status.JVM.Memory.Heap.Used": float(round(heap_max * (0.15 + 0.3 * busy))),
        "Status.JVM.Memory.Heap.Committed": heap_max,
        "Status.JVM.Memory.Heap.Max": heap_max,
        "Status.JVM.Memory.Metaspace.Used": float(64 * MIB_BYTES),
        "Status.JVM.Memory.Metaspace.Max": float(memory["jvmMetaspace"]),
        "Status.JVM.GarbageCollector.All.TimeMsPerSecond": 1.0 + 20.0 * busy,
    }


def taskmanager_stores(job: DeployedJob, twin: Twin) -> list[dict[str, float]]:
    """Each TaskManager's metric store (`/taskmanagers/metrics` aggregates over them)."""
    ops = twin.model.by_vertex()
    tm_managed = float(flink_memory_model(job.tm_memory_mib)["managedMemory"])
    stores = []
    for slots in slot_plan(job, twin):
        used = sum(twin.managed_mib_of(vid) for vid, _ in slots if ops[vid].state is not None)
        stores.append({
            **jvm_metrics(job, twin, slots),
            "Status.Flink.Memory.Managed.Used": used * MIB_BYTES,
            "Status.Flink.Memory.Managed.Total": tm_managed,
        })
    return stores


def jobmanager_store(job: DeployedJob, twin: Twin) -> dict[str, float]:
    """The JobManager's metric store: the slots of the cluster's TaskManagers."""
    plan_ = slot_plan(job, twin)
    total = len(plan_) * max(1, job.slots_per_tm)
    used = sum(len(slots) for slots in plan_)
    return {
        "taskSlotsTotal": float(total), "taskSlotsAvailable": float(total - used),
        "numRegisteredTaskManagers": float(len(plan_)),
        "numRunningJobs": 1.0 if twin.running else 0.0,
    }


def vertex_io_metrics(twin: Twin, vid: str) -> dict[str, Any]:
    """`/jobs/<jid>` vertices[].metrics: the subtasks' accumulated counters, summed."""
    op = twin.model.by_vertex()[vid]
    io = twin.io[vid]
    running = twin.running
    read = 0 if op.is_source else round(sum(io.read))
    return {
        "read-bytes": 0, "read-bytes-complete": running, "write-bytes": 0,
        "write-bytes-complete": running, "read-records": read, "read-records-complete": running,
        "write-records": round(sum(io.written)), "write-records-complete": running,
        "accumulated-backpressured-time": round(sum(io.backpressured_ms)),
        "accumulated-idle-time": round(sum(io.idle_ms)),
        "accumulated-busy-time": float(round(sum(io.busy_ms))),
    }


def job_manager_config(job: DeployedJob, flink_configuration: dict[str, str]
                       ) -> list[dict[str, str]]:
    """`/jobs/<jid>/jobmanager/config`: the job's effective configuration as key/value pairs."""
    conf = {"execution.target": "kubernetes-application", "jobmanager.scheduler": "default",
            "taskmanager.numberOfTaskSlots": str(job.slots_per_tm),
            "taskmanager.memory.process.size": f"{int(job.tm_memory_mib)}m",
            **flink_configuration, "$internal.pipeline.job-id": job.job_id}
    return [{"key": k, "value": v} for k, v in sorted(conf.items())]


def resource_requirements(twin: Twin, lower_bounds: dict[str, int]) -> dict[str, Any]:
    """`GET /jobs/<jid>/resource-requirements` (FLIP-291) under the adaptive scheduler."""
    return {vid: {"parallelism": {"lowerBound": lower_bounds.get(vid, 1),
                                  "upperBound": vc.parallelism}}
            for vid, vc in twin.configuration.items()}


def cluster_overview(job: DeployedJob, twin: Twin) -> dict[str, Any]:
    """`GET /overview`: the cluster's TaskManagers, slots and jobs."""
    store = jobmanager_store(job, twin)
    return {
        "taskmanagers": int(store["numRegisteredTaskManagers"]), "slots-total":
        int(store["taskSlotsTotal"]), "slots-available": int(store["taskSlotsAvailable"]),
        "jobs-running": 1, "jobs-finished": 0, "jobs-cancelled": 0, "jobs-failed": 0,
        "flink-version": FLINK_VERSION, "flink-commit": "twin",
    }
