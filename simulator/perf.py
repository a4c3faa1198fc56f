"""The performance model of one task: CPU cost plus RocksDB state access cost.

Pure functions of (operator, parallelism, managed memory). A task spends
`cpu_us` per input record, plus for each get: index/filter block lookups and one
data block lookup in the block cache (a miss costs `miss_us`), plus for each put
a MemTable insert that gets dearer when the MemTable is below 64 MB (Justin §3).

Two effects give the curve its shape:
* data blocks: the hit rate is the share of accesses that go to keys whose blocks
  fit in the task's cache (uniform: cache / working set; Zipf: the hottest keys);
* index/filter blocks live in the cache's high-priority pool; when they do not
  fit, every get also misses on them. With `index_miss_us` large this is the
  cliff measured on real RocksDB (ARCHITECTURE.md); with it near `miss_us` the
  curve is smooth.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from simulator.model import Operator, RocksDB, State, Uniform

MIB = 1024 * 1024
FULL_MEMTABLE_MB = 64.0


def cache_bytes(managed_mib: float, rocksdb: RocksDB) -> float:
    """Block cache of one task: managed × (3 − r)/3 (Flink's RocksDB memory sharing)."""
    return managed_mib * MIB * (3.0 - rocksdb.write_buffer_ratio) / 3.0


def memtable_mb(managed_mib: float) -> float:
    """Justin §3: 128 MB managed gives a 32 MB MemTable, 256 MB and more give 64 MB.

    The MemTable is a power of two no larger than a quarter of managed memory,
    capped at 64 MB (and at least 1 MB).
    """
    if managed_mib <= 0:
        return 1.0
    quarter = managed_mib / 4.0
    return max(1.0, min(FULL_MEMTABLE_MB, 2.0 ** math.floor(math.log2(max(quarter, 1.0)))))


def harmonic(n: float, s: float) -> float:
    """Generalised harmonic number H(n, s) = Σ_{k≤n} k^-s, for real n ≥ 1 (Euler–Maclaurin)."""
    if n <= 0:
        return 0.0
    if n < 1:
        return n
    if abs(s - 1.0) < 1e-9:
        return math.log(n) + 0.5772156649 + 1.0 / (2.0 * n)
    tail: float = n ** (-s)
    body: float = (n ** (1.0 - s) - 1.0) / (1.0 - s)
    return body + 0.5 * (1.0 + tail) + (s / 12.0) * (1.0 - tail / n)


def data_hit_rate(state: State, parallelism: int, cache: float, rocksdb: RocksDB) -> float:
    """Share of data-block lookups of one task that hit its cache.

    Keys are hashed over subtasks, so a task holds 1/p of them; its cache holds the
    `cached` hottest ones (every key for uniform access is equally hot).
    """
    keys_per_task = state.keys / parallelism
    entry = (state.value_bytes + state.key_bytes) * rocksdb.footprint_factor
    cached = max(0.0, cache) / entry
    if cached >= keys_per_task:
        return 1.0
    if isinstance(state.distribution, Uniform):
        return cached / keys_per_task
    s = state.distribution.s
    return min(1.0, harmonic(cached, s) / harmonic(keys_per_task, s))


@dataclass(frozen=True)
class TaskCost:
    """What one input record costs one task, and what RocksDB sees doing it."""

    us_per_record: float
    hit_rate: float | None  # θ as RocksDB's tickers report it (index/filter included)
    hits_per_record: float
    misses_per_record: float
    get_latency_ns: float | None  # mean valueStateGetLatency
    put_latency_ns: float | None
    cache_bytes: float

    @property
    def capacity(self) -> float:
        """Records/s one task processes when never idle (its true processing rate)."""
        return 1e6 / self.us_per_record


def task_cost(
    op: Operator, parallelism: int, managed_mib: float | None, rocksdb: RocksDB
) -> TaskCost:
    """Per-record cost of one task of `op` at this parallelism and managed memory (MiB)."""
    if op.state is None:
        return TaskCost(op.cpu_us, None, 0.0, 0.0, None, None, 0.0)
    state = op.state
    managed = managed_mib if managed_mib else 0.0
    cache = cache_bytes(managed, rocksdb) if managed > 0 else rocksdb.unmanaged_cache_mib * MIB
    index_bytes = rocksdb.index_fraction * state.total_bytes / parallelism
    pool = rocksdb.high_priority_ratio * cache
    index_hit = 1.0 if index_bytes <= 0 else min(1.0, pool / index_bytes)
    data_cache = cache - min(index_bytes, pool)
    data_hit = data_hit_rate(state, parallelism, data_cache, rocksdb)

    n_index = rocksdb.index_accesses_per_get
    get_us = (
        n_index * (index_hit * rocksdb.hit_us + (1.0 - index_hit) * rocksdb.index_miss_us)
        + data_hit * rocksdb.hit_us
        + (1.0 - data_hit) * rocksdb.miss_us
    )
    # Smaller MemTables flush smaller L0 files and compact more often: the extra
    # work grows ~4x per halving (bench/results/rocksdb-fig4.json: 8 MB costs ~4x 32 MB).
    halvings = max(0.0, math.log2(FULL_MEMTABLE_MB / memtable_mb(managed)))
    put_us = rocksdb.put_us * (1.0 + rocksdb.small_memtable_penalty * (4.0**halvings - 1) / 3)

    gets = state.access.gets_per_record
    puts = state.access.puts_per_record
    # A write-only operator still reads a few blocks (flushes, compactions), all
    # misses: real RocksDB reports θ ≈ 0 for it (bench/results/rocksdb-fig4.json).
    hits = gets * (n_index * index_hit + data_hit)
    misses = gets * (n_index * (1.0 - index_hit) + 1.0 - data_hit) + puts * rocksdb.misses_per_put
    lookups = hits + misses
    return TaskCost(
        us_per_record=op.cpu_us + gets * get_us + puts * put_us,
        hit_rate=1.0 if lookups <= 0 else hits / lookups,
        hits_per_record=hits,
        misses_per_record=misses,
        get_latency_ns=get_us * 1000.0 if gets > 0 else None,
        put_latency_ns=put_us * 1000.0 if puts > 0 else None,
        cache_bytes=cache,
    )


def subtask_shares(parallelism: int, skew: float) -> tuple[float, ...]:
    """Share of a vertex's records each subtask gets: Zipf(skew) over subtasks, 0 = even."""
    weights = [1.0 / (i + 1) ** skew for i in range(parallelism)]
    total = sum(weights)
    return tuple(w / total for w in weights)


def vertex_limit(op: Operator, parallelism: int, managed_mib: float | None,
                 rocksdb: RocksDB) -> float:
    """Most records/s a vertex of `parallelism` tasks absorbs: its hottest subtask
    saturates first."""
    capacity = task_cost(op, parallelism, managed_mib, rocksdb).capacity
    return capacity / max(subtask_shares(parallelism, op.subtask_skew))
