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

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

import mmh3

from policies.model import ShipStrategy
from simulator.model import ForSt, JobModel, Operator, RocksDB, Scaling, State, Uniform

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
    hot = state.hot_key_share
    if hot > 0:
        # One always-hot key: the LRU cache keeps its block first, so its accesses hit once
        # one entry fits; the other keys share what is left of the cache.
        if cached < 1.0:
            return 0.0
        cached, keys_per_task = cached - 1.0, max(1.0, keys_per_task - 1.0)
    if isinstance(state.distribution, Uniform):
        rest = cached / keys_per_task
    else:
        s = state.distribution.s
        rest = harmonic(cached, s) / harmonic(keys_per_task, s)
    return min(1.0, hot + (1.0 - hot) * rest)


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
    # Share of each second spent on per-second overheads (network buffers), not records.
    overhead: float = 0.0
    get_sd_ns: float = 0.0  # sd of one get's latency (hits and misses mixed)
    # ForSt only (None on RocksDB): the local file cache's hits and misses per record (a
    # file-cache miss reads the remote store).
    file_hits_per_record: float | None = None
    file_misses_per_record: float | None = None
    # Share of a task's time its task thread works: what busyTimeMsPerSecond reports below
    # saturation. 1 on RocksDB; lower with asynchronous state, whose reads and writes run
    # on ForSt's I/O threads (docs/flink-2.md).
    thread_share: float = 1.0
    # µs one record waits for its state (asynchronous state: how long it stays in flight).
    state_us: float = 0.0

    @property
    def capacity(self) -> float:
        """Records/s one task processes when never idle (its true processing rate)."""
        return (1.0 - self.overhead) * 1e6 / self.us_per_record


@dataclass(frozen=True)
class BlockCache:
    """One task's block cache (managed memory, or RocksDB's own without it): its size, the
    share filled so far, its index/filter blocks and the hit rates of theirs and data's."""

    capacity: float
    filled: float
    index_bytes: float
    index_hit: float
    data_hit: float


def block_cache(state: State, parallelism: int, managed: float, rocksdb: RocksDB,
                fill: float) -> BlockCache:
    """The block cache of one of `parallelism` tasks with `managed` MiB (0: none), `fill`
    of it filled: index/filter blocks sit in its high-priority pool, data blocks in the
    rest (RocksDB's and ForSt's alike)."""
    capacity = (cache_bytes(managed, rocksdb) if managed > 0
                else rocksdb.unmanaged_cache_mib * MIB)
    filled = min(1.0, max(0.0, fill))
    cache = capacity * filled
    index_bytes = rocksdb.index_fraction * state.total_bytes / parallelism
    pool = rocksdb.high_priority_ratio * cache
    index_hit = 1.0 if index_bytes <= 0 else min(1.0, pool / index_bytes)
    data_cache = cache - min(index_bytes, pool)
    return BlockCache(capacity, filled, index_bytes, index_hit,
                      data_hit_rate(state, parallelism, data_cache, rocksdb))


def task_cost(
    op: Operator, parallelism: int, managed_mib: float | None, rocksdb: RocksDB, *,
    forst: ForSt | None, fill: float = 1.0,
) -> TaskCost:
    """Per-record cost of one task of `op` at this parallelism and managed memory (MiB);
    `forst`: the job runs on ForSt (forst_cost), None: on RocksDB (no default: a caller
    that forgot the engine would price ForSt as RocksDB); `fill`: the share of its caches
    filled so far (a restart empties them)."""
    if op.state is None:
        return TaskCost(op.cpu_us, None, 0.0, 0.0, None, None, 0.0)
    if forst is not None:
        return forst_cost(op, parallelism, managed_mib, rocksdb, forst, fill)
    state = op.state
    managed = managed_mib if managed_mib else 0.0
    block = block_cache(state, parallelism, managed, rocksdb, fill)
    capacity, index_hit, data_hit = block.capacity, block.index_hit, block.data_hit

    n_index = rocksdb.index_accesses_per_get
    get_us = (
        n_index * (index_hit * rocksdb.hit_us + (1.0 - index_hit) * rocksdb.index_miss_us)
        + data_hit * rocksdb.hit_us
        + (1.0 - data_hit) * rocksdb.miss_us
    )
    put_us = memtable_put_us(managed, rocksdb)

    gets = state.access.gets_per_record
    puts = state.access.puts_per_record
    # One get is a mix of hits and misses: its latency's variance, for sampled histograms.
    get_var = (data_hit * (1 - data_hit) * (rocksdb.miss_us - rocksdb.hit_us) ** 2
               + n_index * index_hit * (1 - index_hit)
               * (rocksdb.index_miss_us - rocksdb.hit_us) ** 2)
    # A write-only operator still reads a few blocks (flushes, compactions), all
    # misses: real RocksDB reports θ ≈ 0 for it (bench/results/rocksdb-fig4.json).
    fresh = new_file_misses(state, managed, rocksdb)
    hits = gets * (n_index * index_hit + data_hit)
    misses = (gets * (n_index * (1.0 - index_hit) + 1.0 - data_hit)
              + puts * rocksdb.misses_per_put + fresh)
    lookups = hits + misses
    return TaskCost(
        us_per_record=op.cpu_us + gets * get_us + puts * put_us + fresh * rocksdb.miss_us,
        hit_rate=1.0 if lookups <= 0 else hits / lookups,
        hits_per_record=hits,
        misses_per_record=misses,
        get_latency_ns=get_us * 1000.0 if gets > 0 else None,
        put_latency_ns=put_us * 1000.0 if puts > 0 else None,
        cache_bytes=capacity,
        get_sd_ns=math.sqrt(get_var) * 1000.0 if gets > 0 else 0.0,
    )


def memtable_put_us(managed: float, rocksdb: RocksDB) -> float:
    """A put: a MemTable insert, dearer as the MemTable shrinks below 64 MB.

    Smaller MemTables flush smaller L0 files and compact more often: the extra work grows
    ~4x per halving (bench/results/rocksdb-fig4.json: 8 MB costs ~4x 32 MB)."""
    halvings = max(0.0, math.log2(FULL_MEMTABLE_MB / memtable_mb(managed)))
    penalty: float = rocksdb.small_memtable_penalty * (4.0**halvings - 1) / 3
    return rocksdb.put_us * (1.0 + penalty)


def new_file_misses(state: State, managed: float, rocksdb: RocksDB) -> float:
    """Block reads per record past the cache for the index and filter blocks of new SST files.

    An operator that reads and writes keeps the LSM changing under its gets: every flush and
    compaction writes files whose index and filter blocks the next gets must load. Files come
    at a rate ∝ puts / MemTable size, so the reads double per MemTable halving; without gets
    nobody loads them, without puts no file is new (bench/results/forst-fig4.json: updates
    read 7.0, 2.2 and 0.7 blocks a record past the cache at 4, 16 and 64 MB MemTables, reads
    and writes alone under 1)."""
    access = state.access
    fresh = min(access.gets_per_record, access.puts_per_record)
    return fresh * rocksdb.new_file_misses * FULL_MEMTABLE_MB / memtable_mb(managed)


def file_cache_bytes(forst: ForSt) -> float:
    """One task's share of its TaskManager's local file cache."""
    return forst.file_cache_mib * MIB / forst.stateful_tasks_per_taskmanager


def forst_cost(op: Operator, parallelism: int, managed_mib: float | None, rocksdb: RocksDB,
               forst: ForSt, fill: float = 1.0) -> TaskCost:
    """One task's cost on ForSt with asynchronous state.

    Three tiers: the block cache (as on RocksDB), then the local file cache, then the
    remote store. The file cache holds SST files, a superset of the cached blocks, so a
    key is local when it is among the hottest the larger of the two holds. The task
    thread runs the operator plus the asynchronous model's bookkeeping; state accesses run
    on ForSt's I/O threads, `io_parallelism` at a time. Both count against the task's
    core (one per task, as the paper counts), so a record costs the thread's time plus its
    share of the I/O. Busy time reports the task thread only, and no state latency exists.
    """
    assert op.state is not None
    state = op.state
    managed = managed_mib if managed_mib else 0.0
    block = block_cache(state, parallelism, managed, rocksdb, fill)
    capacity, index_bytes = block.capacity, block.index_bytes
    index_hit, data_hit = block.index_hit, block.data_hit
    files = file_cache_bytes(forst) * block.filled
    index_local = 1.0 if index_bytes <= 0 else min(
        1.0, max(index_hit, files / (index_bytes * forst.file_footprint_factor)))
    # The file cache's bytes as block-cache bytes: what it holds, in the cache's units.
    as_blocks = files * rocksdb.footprint_factor / forst.file_footprint_factor
    data_local = max(data_hit, data_hit_rate(state, parallelism, as_blocks, rocksdb))

    def tier(hit: float, local: float, scale: float = 1.0) -> float:
        """Mean µs of one block lookup with these hit (memory) and local (disk) shares;
        `scale`: how much dearer this block's read is than a data block's."""
        return (hit * rocksdb.hit_us + (local - hit) * forst.file_hit_us * scale
                + (1.0 - local) * forst.remote_miss_us * scale)

    n_index = rocksdb.index_accesses_per_get
    # An index/filter block is larger than a data block: its read costs what it costs
    # RocksDB relative to a data block (the fitted cliff, index_miss_us / miss_us).
    index_scale = rocksdb.index_miss_us / rocksdb.miss_us if rocksdb.miss_us > 0 else 1.0
    get_us = (n_index * tier(index_hit, index_local, index_scale)
              + tier(data_hit, data_local))
    put_us = memtable_put_us(managed, rocksdb)
    gets = state.access.gets_per_record
    puts = state.access.puts_per_record
    # Flushes and compactions read past the block cache but not through the file cache
    # (bench/results/forst-fig4.json: a write-only operator shows block-cache misses and
    # neither file-cache hits nor misses).
    # The new files were just written: their blocks are local, in the file cache.
    fresh = new_file_misses(state, managed, rocksdb)
    misses = (gets * (n_index * (1.0 - index_hit) + 1.0 - data_hit)
              + puts * rocksdb.misses_per_put + fresh)
    file_hits = gets * (n_index * (index_local - index_hit) + data_local - data_hit) + fresh
    file_misses = gets * (n_index * (1.0 - index_local) + 1.0 - data_local)
    hits = gets * (n_index * index_hit + data_hit)
    lookups = hits + misses
    state_us = gets * get_us + puts * put_us + fresh * forst.file_hit_us
    thread_us = op.cpu_us * (1.0 + forst.async_cpu_overhead)
    us = thread_us + state_us / forst.io_parallelism
    return TaskCost(
        us_per_record=us,
        hit_rate=1.0 if lookups <= 0 else hits / lookups,
        hits_per_record=hits,
        misses_per_record=misses,
        get_latency_ns=None,  # Flink tracks the latency of synchronous state only
        put_latency_ns=None,
        cache_bytes=capacity,
        file_hits_per_record=file_hits,
        file_misses_per_record=file_misses,
        thread_share=thread_us / us,
        state_us=state_us,
    )


# Edges whose every upstream task talks to every downstream task.
ALL_TO_ALL = frozenset({ShipStrategy.HASH, ShipStrategy.REBALANCE, ShipStrategy.BROADCAST})


def channels(model: JobModel, parallelism: Mapping[str, int], vertex_id: str) -> tuple[int, int]:
    """(input, output) network channels of one task of the vertex on all-to-all edges."""
    op = model.by_vertex()[vertex_id]
    into = sum(parallelism[model.operator(i.from_).vertex_id]
               for i in op.inputs if i.ship in ALL_TO_ALL)
    out = sum(parallelism[o.vertex_id] for o in model.operators
              for i in o.inputs if i.from_ == op.uid and i.ship in ALL_TO_ALL)
    return into, out


def scaled(cost: TaskCost, parallelism: int, scaling: Scaling, channels_in: int,
           channels_out: int) -> TaskCost:
    """The cost with the overheads that grow with parallelism (docs/simulator.md).

    Contention: every record costs (1 + σ(p − 1)) times more (coordination, tasks of
    a TaskManager sharing caches, memory bandwidth and the network stack).
    Buffers: each upstream task flushes each channel at least every buffer timeout,
    so a task handles ≥ flushes_per_s buffers per second per channel, in and out, at
    buffer_us each, whatever the record rate.
    """
    factor = 1.0 + scaling.contention * (parallelism - 1)
    buffers = scaling.flushes_per_s * (channels_in + channels_out)
    overhead = min(0.9, buffers * scaling.buffer_us / 1e6)
    return replace(cost, us_per_record=cost.us_per_record * factor, overhead=overhead)


def subtask_shares(parallelism: int, skew: float) -> tuple[float, ...]:
    """Share of a vertex's records each subtask gets: Zipf(skew) over subtasks, 0 = even."""
    weights = [1.0 / (i + 1) ** skew for i in range(parallelism)]
    total = sum(weights)
    return tuple(w / total for w in weights)


def hot_key_group(uid: str, max_parallelism: int) -> int:
    """The key group of an operator's hot key (State.hot_key_share).

    Flink puts a key in key group murmur(key.hashCode()) mod maxParallelism: fixed by the
    key, whatever the seed or the parallelism. The twin's hot key is named by the
    operator's uid, so it lands in the same key group in every run.
    """
    return mmh3.hash(f"{uid}/hot-key", 0, signed=False) % max_parallelism


@functools.lru_cache(maxsize=256)
def key_group_weights(state: State | None, max_parallelism: int, seed: str,
                      hot_group: int = 0) -> tuple[float, ...]:
    """Load per key group, as Flink hashes keys into `max_parallelism` key groups.

    The hottest keys (up to 2,000) land in random key groups (murmur spreads them as
    a seeded draw would); the other keys' load is spread evenly with the variance of
    that many keys. A hot key (`state.hot_key_share`) adds its share to `hot_group`,
    the others' shares scale by 1 − hot_key_share. Without a key distribution (a
    stateless keyed operator) every key group gets the same load.
    """
    import random

    n = max_parallelism
    if state is None:
        return (1.0 / n,) * n
    hot_share = state.hot_key_share
    rng = random.Random(seed)
    keys = state.keys
    top = min(keys, 2000)
    if isinstance(state.distribution, Uniform):
        hot = [1.0 / keys] * top
        tail_sq = (keys - top) / keys**2
    else:
        s_ = state.distribution.s
        norm = harmonic(keys, s_)
        hot = [k ** -s_ / norm for k in range(1, top + 1)]
        tail_sq = max(0.0, harmonic(keys, 2 * s_) - harmonic(top, 2 * s_)) / norm**2
    tail = max(0.0, 1.0 - sum(hot))
    weights = [0.0] * n
    for p in hot:
        weights[rng.randrange(n)] += p
    sd = math.sqrt(tail_sq / n)
    for g in range(n):
        weights[g] += max(0.0, tail / n + rng.gauss(0.0, sd))
    total = sum(weights)
    weights = [(1.0 - hot_share) * w / total for w in weights]
    weights[hot_group % n] += hot_share
    return tuple(weights)


def hot_key_weights(state: State, max_parallelism: int, hot_group: int) -> tuple[float, ...]:
    """Key-group loads with the hot key alone uneven: without `Noise.key_groups` the other
    keys spread evenly, but one key still lives in one key group."""
    n = max_parallelism
    weights = [(1.0 - state.hot_key_share) / n] * n
    weights[hot_group % n] += state.hot_key_share
    return tuple(weights)


def key_group_shares(weights: tuple[float, ...], parallelism: int) -> tuple[float, ...]:
    """Each subtask's share: the key groups Flink's KeyGroupRangeAssignment gives it."""
    n = len(weights)
    shares = []
    for i in range(parallelism):
        start = (i * n + parallelism - 1) // parallelism
        end = ((i + 1) * n - 1) // parallelism
        shares.append(sum(weights[start:end + 1]))
    total = sum(shares)
    return tuple(x / total for x in shares)


def vertex_shares(model: JobModel, op: Operator, parallelism: int, seed: int
                  ) -> tuple[float, ...]:
    """Share of the vertex's records per subtask: its key groups when its input is
    hashed (Noise.key_groups, and always for a hot key), times the model's subtask_skew."""
    shares = subtask_shares(parallelism, op.subtask_skew)
    hashed = any(i.ship == ShipStrategy.HASH for i in op.inputs)
    hot = op.state is not None and op.state.hot_key_share > 0
    if not hashed or not (model.noise.key_groups or hot):
        return shares
    group = hot_key_group(op.uid, op.max_parallelism)
    if model.noise.key_groups:
        weights = key_group_weights(op.state, op.max_parallelism, f"{seed}/keys/{op.uid}",
                                    group)
    else:
        assert op.state is not None
        weights = hot_key_weights(op.state, op.max_parallelism, group)
    mixed = [a * b for a, b in zip(shares, key_group_shares(weights, parallelism), strict=True)]
    return tuple(x / sum(mixed) for x in mixed)


def vertex_limit(op: Operator, parallelism: int, managed_mib: float | None,
                 rocksdb: RocksDB, scaling: Scaling | None = None, channels_in: int = 0,
                 channels_out: int = 0, shares: tuple[float, ...] | None = None, *,
                 forst: ForSt | None) -> float:
    """Most records/s a vertex of `parallelism` tasks absorbs: its hottest subtask
    saturates first."""
    cost = task_cost(op, parallelism, managed_mib, rocksdb, forst=forst)
    if scaling is not None:
        cost = scaled(cost, parallelism, scaling, channels_in, channels_out)
    if shares is None:
        shares = subtask_shares(parallelism, op.subtask_skew)
    return cost.capacity / max(shares)
