"""The PromQL the controller sends: one query per signal for a whole job, grouped by vertex.

Metric names are Flink's Prometheus reporter's (docs/metrics.md): Flink 1.20 on
RocksDB and Flink 2.x on ForSt, which keeps RocksDB's `rocksdb_*` names and adds its
file cache (`forst_fileCache_*`) and asynchronous state (`asyncStateProcessing_*`).
Every label value is a PromQL string literal built by `quote`, never by string
formatting, because job ids come from a REST answer and must not be able to change a
query's meaning.
"""

from __future__ import annotations

from dataclasses import dataclass

_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}

TASK = "flink_taskmanager_job_task_"
OPERATOR = "flink_taskmanager_job_task_operator_"
BUSY = TASK + "busyTimeMsPerSecond"
BACKPRESSURE = TASK + "backPressuredTimeMsPerSecond"
RECORDS_IN = TASK + "numRecordsInPerSecond"
RECORDS_OUT = TASK + "numRecordsOutPerSecond"
PENDING = OPERATOR + "pendingRecords"
CACHE_HIT = OPERATOR + "rocksdb_block_cache_hit"
CACHE_MISS = OPERATOR + "rocksdb_block_cache_miss"
# ForSt (Flink 2.x): the local-disk file cache in front of the remote primary store, and the
# records an asynchronous-state operator has in flight (waiting for state or for a key).
FILE_CACHE_HIT = OPERATOR + "forst_fileCache_hit"
FILE_CACHE_MISS = OPERATOR + "forst_fileCache_miss"
ASYNC_IN_FLIGHT = OPERATOR + "asyncStateProcessing_numInFlightRecords"
# Per column family, either in the name (`<cf>_rocksdb_block_cache_capacity`) or, with
# column-family-as-variable, as `column_family_rocksdb_block_cache_capacity{column_family=..}`.
CHECKPOINT_FULL_SIZE = "flink_jobmanager_job_lastCheckpointFullSize"
CACHE_CAPACITY_NAME = OPERATOR + ".+_rocksdb_block_cache_capacity"
# RocksDB's live data per column family, named as the capacity is.
LIVE_DATA_NAME = OPERATOR + ".+_rocksdb_estimate_live_data_size"
# Summaries such as `..._state_name_valueStateGetLatency{quantile=..}`; `_count` is excluded
# by the anchored regex.
STATE_LATENCY_NAME = OPERATOR + "state_name_[A-Za-z]+Latency"
OPERATOR_RECORDS_IN = OPERATOR + "numRecordsIn"
# A TaskManager JVM's process CPU time (ns, cumulative; a gauge in the reporter's text).
# It carries no job_id: its TaskManagers are the targets whose tm_id the job's tasks report.
JVM_CPU_TIME = "flink_taskmanager_Status_JVM_CPU_Time"


def quote(value: str) -> str:
    """`value` as a double-quoted PromQL string literal that matches it exactly.

    PromQL unquotes like Go: backslash, double quote and control characters need
    escapes; any other unicode character may stand as it is (the query is UTF-8).
    """
    out = []
    for ch in value:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def selector(name: str, job_id: str, name_is_regex: bool = False, extra: str = "") -> str:
    """`name{job_id="…"}`, or `{__name__=~"name", job_id="…"}` for a family of metrics."""
    matchers = f"job_id={quote(job_id)}" + (f", {extra}" if extra else "")
    if name_is_regex:
        return f"{{__name__=~{quote(name)}, {matchers}}}"
    return f"{name}{{{matchers}}}"


def rate_window(resolution_s: float) -> str:
    """The rate() range: at least four scrapes, so one lost scrape does not empty it."""
    return f"{max(round(4 * resolution_s), 15)}s"


@dataclass(frozen=True)
class JobQueries:
    """Every query for one job; each groups by `task_id` (the JobVertexID)."""

    busy_avg: str
    busy_max: str  # per subtask: the collector takes the max of their window means
    records_in_max: str  # per subtask, likewise
    busy_sample_time: str
    backpressure: str
    records_in: str
    records_out: str
    pending: str
    cache_hits: str
    cache_misses: str
    cache_capacity: str
    file_cache_hits: str
    file_cache_misses: str
    async_in_flight: str
    state_bytes: str
    state_latency: str
    cpu_used: str  # cores, the job's TaskManagers summed
    operator_ids: str
    checkpoint_size: str


def job_queries(job_id: str, resolution_s: float) -> JobQueries:
    rw = rate_window(resolution_s)
    busy = selector(BUSY, job_id)
    return JobQueries(
        busy_avg=f"avg by (task_id) ({busy})",
        # Per subtask (max merges a restart's attempts, never two live series): the busiest
        # subtask is the one with the highest mean over the window. A max taken at each
        # step instead would pick whichever subtask's noise is up at that step, and read
        # a balanced vertex's noise as skew.
        busy_max=f"max by (task_id, subtask_index) ({busy})",
        records_in_max=f"sum by (task_id, subtask_index) ({selector(RECORDS_IN, job_id)})",
        # Range queries fill gaps from the last sample up to 5 min back; the age of the
        # oldest subtask's sample tells a fresh point from a stale one.
        busy_sample_time=f"min by (task_id) (timestamp({busy}))",
        backpressure=f"avg by (task_id) ({selector(BACKPRESSURE, job_id)})",
        records_in=f"sum by (task_id) ({selector(RECORDS_IN, job_id)})",
        records_out=f"sum by (task_id) ({selector(RECORDS_OUT, job_id)})",
        pending=f"sum by (task_id) ({selector(PENDING, job_id)})",
        # Cumulative tickers exposed as gauges and reset on restart: rate() handles resets.
        cache_hits=f"sum by (task_id) (rate({selector(CACHE_HIT, job_id)}[{rw}]))",
        cache_misses=f"sum by (task_id) (rate({selector(CACHE_MISS, job_id)}[{rw}]))",
        # The block cache is shared by all column families of a slot: max, never sum.
        cache_capacity=f"max by (task_id) ({selector(CACHE_CAPACITY_NAME, job_id, True)})",
        # ForSt's file cache counters behave like the block cache's tickers.
        file_cache_hits=f"sum by (task_id) (rate({selector(FILE_CACHE_HIT, job_id)}[{rw}]))",
        file_cache_misses=f"sum by (task_id) (rate({selector(FILE_CACHE_MISS, job_id)}[{rw}]))",
        # Per subtask, against the per-subtask bound execution.async-state.buffer-size.
        async_in_flight=f"avg by (task_id) ({selector(ASYNC_IN_FLIGHT, job_id)})",
        # Each column family holds its own data: the state is their sum over every subtask.
        state_bytes=f"sum by (task_id) ({selector(LIVE_DATA_NAME, job_id, True)})",
        state_latency=(
            "avg by (task_id, quantile) "
            f"({selector(STATE_LATENCY_NAME, job_id, True, 'quantile!=' + quote(''))})"
        ),
        # Every thread of the job's TaskManagers, also asynchronous state's I/O threads that
        # busy time leaves out (docs/flink-2.md); Flink 1.20 and 2.x name it alike.
        # tm_id is a pod name, unique within a namespace only: the same scrape target
        # (job, instance) as the job's task series, so a namesake elsewhere is not counted.
        cpu_used=(f"sum(rate({JVM_CPU_TIME}[{rw}]) and on (job, instance, tm_id) {busy})"
                  " / 1e9"),
        operator_ids=f"count by (task_id, operator_id) ({selector(OPERATOR_RECORDS_IN, job_id)})",
        # The JobManager's gauge, -1 until a checkpoint completes (full size: incremental
        # checkpoints report only their increment as lastCheckpointSize).
        checkpoint_size=f"max({selector(CHECKPOINT_FULL_SIZE, job_id)})",
    )
