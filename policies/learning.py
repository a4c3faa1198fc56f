"""What the capacity policy learns about each vertex, and the capacity surface it fits.

Every metrics window is a data point: a vertex's true processing rate per task at
its (parallelism, memory level), with the block-cache miss ratio (1 − θ), the
block-cache accesses per record, τ and the state size. The points of one vertex
(at most `POINTS_PER_VERTEX` configurations, newest kept) are stored in the
policy's status, so a restarted controller keeps what it learned.

The surface is the per-record service time of one task (µs, the inverse of its true
processing rate):

    s(p, m) = (a + b · μ(T)) · (1 + γ · (p − 1)),    T = cache(m) · p

- `μ(T)` is the block-cache miss ratio as a function of the job's *total* cache for
  the vertex: keys are hashed over the tasks, so each task holds 1/p of the state,
  and p tasks with a cache of C each cache what one task with p · C would. This is
  why DS2's linear model is wrong for stateful vertices: scaling out also grows
  the cache per key. The curve is the hit ratio of a skewed key space,
  θ = (T / full)^e (e = 1 for uniform keys, ≈ 1 − s for Zipf s), where `full` is
  the cache that holds everything. Two points with different caches fit both (a
  line in log-log); before that, the prior takes `full` from the state size W
  (RocksDB's estimate-live-data-size × the cache bytes one state byte needs) and
  calibrates e on the observed θ; without W, e = 0.5. A point whose cache holds W and
  hits `HELD` or more holds the working set: it bounds `full` rather than tilting the line.
- `b` is what misses cost per record: from two points with different miss ratios,
  a least-squares fit; before that, a prior from τ (the mean state access latency
  above a cache hit's, times the gets per record). Write-dominated vertices touch
  the cache little, so their b, and their predicted gain from memory, is small.
- `γ` is the per-task loss as tasks are added (coordination, channels, shared
  TaskManagers): 0 until two parallelisms were seen, then fitted (clamped).

The fit is anchored at the current configuration: the prediction there equals
what was measured, and elsewhere the surface's shape carries it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from pydantic import Field

from policies.decision import EpochTime, RecordModel
from policies.levels import managed_mib
from policies.warmup import CacheWarmup

POINTS_PER_VERTEX = 8
SHORT_CONFIGURATIONS_PER_VERTEX = 8
# Below this busyness a window's true processing rate is mostly noise.
MIN_BUSYNESS = 0.05
# Flink's RocksDB memory sharing: the block cache gets (3 − r) / 3 of managed memory,
# r the write buffer ratio (state.backend.rocksdb.memory.write-buffer-ratio, 0.5).
WRITE_BUFFER_RATIO = 0.5
MIB = 1024.0 * 1024.0
# A get served from the block cache, including Flink's (de)serialization: ~2 µs.
HIT_NS = 2_000.0
# A point lookup reads a filter, an index and a data block: three cache accesses.
BLOCKS_PER_GET = 3.0
# Cache bytes that hold one byte of RocksDB live data (SST, compressed): uncompressed
# blocks with block and LRU overheads; fitted as 2.7 on real RocksDB (docs/simulator.md,
# Figure 4).
CACHE_BYTES_PER_STATE_BYTE = 2.7
# θ = (T/full)^e: e = 1 is uniform keys, Zipf s gives e ≈ 1 − s. Without the state size
# the prior is a moderately skewed key space.
PRIOR_HIT_EXPONENT = 0.5
# A configuration whose block cache holds the whole state and hits this share of accesses
# or more: what it still misses, no cache removes.
HELD = 0.99
MIN_HIT_EXPONENT, MAX_HIT_EXPONENT = 0.05, 1.5
MIN_CPU_SHARE = 0.05  # of the cheapest point's service time: a record's CPU
MAX_CONTENTION = 0.05  # γ: at most 5 % more per record for each added task
MIN_NOISE = 0.02  # a window's TPR is never trusted below ±2 %


def block_cache_bytes(level: int | None, base_mib: float) -> float:
    """One task's RocksDB block cache at a memory level (0 at ⊥)."""
    return managed_mib(level, base_mib) * MIB * (3.0 - WRITE_BUFFER_RATIO) / 3.0


class CapacityPoint(RecordModel):
    """One vertex at one configuration: the mean over the windows seen there."""

    parallelism: int = Field(ge=1)
    memory_level: int | None
    time: EpochTime = Field(description="end of the last window merged into this point")
    windows: int = Field(1, ge=1)
    service_us: float = Field(gt=0, description="µs one task spends per input record")
    service_sq: float = Field(0.0, ge=0, description="mean of squared service_us (noise)")
    hottest_ratio: float = Field(1.0, ge=1, description="busiest subtask / mean busyness")
    records_ratio: float | None = Field(
        None, ge=1, description="busiest subtask / mean records in, where measured")
    miss_ratio: float | None = Field(None, ge=0, le=1, description="1 − θ")
    cache_accesses_per_record: float | None = Field(None, ge=0)
    state_latency_ns: float | None = Field(None, ge=0)
    state_bytes: float | None = Field(None, ge=0, description="RocksDB live data, all tasks")
    provisional: bool = Field(
        False, description="from a window too idle to measure: the first measured window "
                           "at its configuration replaces it rather than averaging with it")

    @property
    def key(self) -> tuple[int, int | None]:
        return self.parallelism, self.memory_level

    @property
    def noise(self) -> float:
        """Relative sd of the per-window service time at this configuration."""
        if self.windows < 2:
            return 0.0
        var = max(0.0, self.service_sq - self.service_us**2)
        return math.sqrt(var * self.windows / (self.windows - 1)) / self.service_us


class ShortConfiguration(RecordModel):
    """A configuration that ran short of a need: never again for a need at least this
    high. Measured short of a step's prediction, for good; left by a deficit step (one
    window's stall can make the deficit), until `until`."""

    parallelism: int
    memory_level: int | None
    need: float = Field(description="records/s (mean-based TPR) it had to sustain")
    until: float | None = Field(
        None, description="time (s) from which it no longer counts: a configuration a "
                          "deficit step left; none: measured short of a prediction")


class Prediction(RecordModel):
    """What a step predicted for a vertex, to judge the step by once it runs."""

    parallelism: int
    memory_level: int | None
    capacity: float = Field(description="predicted true processing rate of the vertex, records/s")
    need: float = Field(description="records/s it had to sustain (mean-based)")
    hottest_capacity: float | None = Field(
        None, description="predicted records/s (mean-based) at which its busiest subtask "
                          "saturates")
    need_hottest: float | None = Field(None, description="what that had to reach")
    from_capacity: float | None = Field(
        None, description="true processing rate measured where the step started, records/s")
    memory_led: bool = Field(False, description="memory, not more tasks, was to bring most "
                                                "of the predicted gain")


class VertexLearning(RecordModel):
    vertex_id: str
    points: tuple[CapacityPoint, ...] = Field((), max_length=POINTS_PER_VERTEX)
    fell_short: tuple[ShortConfiguration, ...] = Field(
        (), max_length=SHORT_CONFIGURATIONS_PER_VERTEX)
    predicted: Prediction | None = None
    # The share of the last judged step's predicted gain that its measurement confirmed
    # (None: all, or none judged): the surface's gains over the current configuration are
    # shrunk by it until a step measures more than it was promised (capacity._realized).
    realized: float | None = Field(None, ge=0, le=1)
    # ... measured on a step memory led (`Prediction.memory_led`): it shrinks the gains
    # memory adds, not those of more tasks (a cache that did not help says nothing of how
    # the tasks divide the load).
    realized_memory_led: bool = False
    # The scale-down wait: since when a cheaper configuration suffices, and the
    # highest need seen since (a scale-down sizes for it).
    surplus_since: EpochTime | None = None
    surplus_peak_need: float | None = None
    # ... and the highest since its first window (None during that window): the first may
    # have straddled the drop that began the wait.
    surplus_later_need: float | None = None
    # The block cache's warm-up since the vertex's tasks last restarted (policies.warmup).
    warmup: CacheWarmup | None = None
    # The CPU (cores) one task's slot asks for, as planned at the last step that changed
    # a parallelism (policies.bill.slot_cpu); a memory-only step keeps it, so that it can
    # resize in place. None: the task footprint's.
    task_cpu: float | None = Field(None, gt=0, le=1024)
    # ... set by the growth after a window whose tasks waited for CPU, not by the vertex's
    # own plan (capacity._TaskCpu.grown): a guess every task's slowed busy time inflates,
    # so what the next windows measure may give it back (capacity._slots_surplus).
    task_cpu_grown: bool = False
    # Its CPU was planned from the busy time of a window too idle to measure, and the job
    # then fell behind, two windows running, with no vertex busy enough to say why
    # (capacity._busy_cpu_short): work outside the task thread (a source's split fetcher,
    # say) may want more. It asks for the footprint's core from then on.
    busy_cpu_short: bool = False
    behind_unexplained: bool = False  # the last window was the first of those two

    @property
    def warming(self) -> bool:
        """The last window was held back: the cache was still refilling after a restart."""
        return self.warmup is not None and not self.warmup.warm

    def point(self, parallelism: int, level: int | None) -> CapacityPoint | None:
        for p in self.points:
            if p.key == (parallelism, level):
                return p
        return None

    @property
    def noise(self) -> float:
        """The measured noise of a window's TPR: the largest sd seen at any configuration."""
        return max([MIN_NOISE, *(p.noise for p in self.points)])

    def expired(self, now: float) -> VertexLearning:
        """Without the configurations a deficit step left whose `until` has come."""
        kept = tuple(s for s in self.fell_short if s.until is None or s.until > now)
        return self if len(kept) == len(self.fell_short) else self.model_copy(
            update={"fell_short": kept})

    def ran_short(self, short: ShortConfiguration, now: float) -> VertexLearning:
        """`short` added, entries past their `until` dropped; when more than the bound
        remain, an expiring entry goes first (a measured shortfall guards against a
        surface that over-promises, for good)."""
        kept = [*self.expired(now).fell_short, short]
        while len(kept) > SHORT_CONFIGURATIONS_PER_VERTEX:
            kept.remove(next((s for s in kept if s.until is not None), kept[0]))
        return self.model_copy(update={"fell_short": tuple(kept)})

    def excluded(self, parallelism: int, level: int | None, need: float
                 ) -> ShortConfiguration | None:
        """A configuration that fell short and dominates this one (no more tasks, no more
        memory) at a need no higher: it cannot do better."""
        for s in self.fell_short:
            if (parallelism <= s.parallelism and (level or 0) <= (s.memory_level or 0)
                    and need >= s.need * 0.95):
                return s
        return None


def merge(points: Sequence[CapacityPoint], new: CapacityPoint, window_s: float
          ) -> tuple[CapacityPoint, ...]:
    """Add a window: it updates the point at its configuration when it does not overlap
    the last window merged there; the newest `POINTS_PER_VERTEX` configurations stay.
    A provisional window (too idle to measure) never changes a measured point, a measured
    window replaces a provisional one, and among provisional windows the slowest stays."""
    old = next((p for p in points if p.key == new.key), None)
    rest = [p for p in points if p.key != new.key]
    if old is not None and old.provisional and not new.provisional:
        old = None  # a measurement replaces what a near-idle window could only guess
    if old is not None and new.provisional:
        if not old.provisional or new.time - old.time < window_s * 0.999:
            return tuple(points)  # a guess never tilts what is known there
        # Guesses keep the slowest reading: a pause makes one slower (a give-back sized
        # on it is cautious), asynchronous state's task-thread busy time one faster.
        new = new.model_copy(update={"service_us": max(old.service_us, new.service_us),
                                     "hottest_ratio": max(old.hottest_ratio,
                                                          new.hottest_ratio),
                                     "records_ratio": _max_of(old.records_ratio,
                                                              new.records_ratio)})
        old = None
    if old is not None:
        if new.time - old.time < window_s * 0.999:
            return tuple(points)  # the same window again (or mostly): not a new data point
        n = old.windows + 1
        new = new.model_copy(update={
            "windows": n,
            "service_us": old.service_us + (new.service_us - old.service_us) / n,
            "service_sq": old.service_sq + (new.service_us**2 - old.service_sq) / n,
            "hottest_ratio": old.hottest_ratio + (new.hottest_ratio - old.hottest_ratio) / n,
            "records_ratio": _mean_of(old.records_ratio, new.records_ratio, n),
            "miss_ratio": _mean_of(old.miss_ratio, new.miss_ratio, n),
            "cache_accesses_per_record": _mean_of(
                old.cache_accesses_per_record, new.cache_accesses_per_record, n),
            "state_latency_ns": _mean_of(old.state_latency_ns, new.state_latency_ns, n),
            "state_bytes": new.state_bytes if new.state_bytes is not None else old.state_bytes,
        })
    else:
        new = new.model_copy(update={"service_sq": new.service_us**2})
    merged = sorted([*rest, new], key=lambda p: p.time)
    return tuple(merged[-POINTS_PER_VERTEX:])


def _max_of(old: float | None, new: float | None) -> float | None:
    return new if old is None else old if new is None else max(old, new)


def _mean_of(old: float | None, new: float | None, n: int) -> float | None:
    if old is None or new is None:
        return new if new is not None else old
    return old + (new - old) / n


@dataclass(frozen=True)
class MissCurve:
    """μ(T), the block-cache miss ratio at T bytes of cache over all tasks: the hit
    ratio of a Zipf-like key space, θ = (T / full)^e below `full`, where all is cached."""

    exponent: float  # e: 1 for uniform keys, less the more skewed
    full: float  # cache bytes (all tasks) that hold the whole working set

    def miss(self, cache: float) -> float:
        if cache <= 0:
            return 1.0
        return 1.0 - math.pow(min(1.0, cache / self.full), self.exponent)


@dataclass(frozen=True)
class Surface:
    """The fitted per-task service time of one vertex; see the module docstring."""

    a: float
    b: float
    contention: float
    curve: MissCurve | None  # None: stateless
    base_mib: float
    correction: float = 1.0  # measured / fitted at the current configuration
    # Gains over `anchor_capacity` (the current configuration's) count at `realized`, the
    # share the last step's measurement confirmed of what it predicted (1: all); with
    # `memory_led` (the share was measured on a step memory led), only those memory adds
    # over `anchor_level` at the same parallelism.
    anchor_capacity: float = 0.0
    realized: float = 1.0
    anchor_level: int | None = None
    memory_led: bool = False

    def service_us(self, parallelism: int, level: int | None) -> float:
        miss = 0.0
        if self.curve is not None:
            miss = self.curve.miss(block_cache_bytes(level, self.base_mib) * parallelism)
        return ((self.a + self.b * miss) * (1.0 + self.contention * (parallelism - 1))
                * self.correction)

    def capacity(self, parallelism: int, level: int | None) -> float:
        """True processing rate of the vertex (records/s over all tasks, mean-based);
        0 where the fit is degenerate (no positive, finite service time)."""
        service = self.service_us(parallelism, level)
        if not 0 < service < math.inf:
            return 0.0
        capacity = parallelism * 1e6 / service
        if self.memory_led:
            same = self.service_us(parallelism, self.anchor_level)
            base = parallelism * 1e6 / same if 0 < same < math.inf else 0.0
            if capacity > base > 0:
                return base + (capacity - base) * self.realized
            return capacity
        if capacity > self.anchor_capacity > 0:
            return self.anchor_capacity + (capacity - self.anchor_capacity) * self.realized
        return capacity

    def damped(self, anchor: CapacityPoint, realized: float | None,
               memory_led: bool = False) -> Surface:
        """This surface with its gains over `anchor` shrunk to `realized` (None: as is);
        `memory_led`: only the gains of memory over the anchor's level."""
        if realized is None or realized >= 1.0:
            return self
        # Memory-led, the anchor is its level at each parallelism (`capacity`).
        at_anchor = 0.0 if memory_led else self.capacity(anchor.parallelism,
                                                         anchor.memory_level)
        return replace(self, anchor_capacity=at_anchor, realized=max(0.0, realized),
                       anchor_level=anchor.memory_level, memory_led=memory_led)


def fit(points: Sequence[CapacityPoint], anchor: CapacityPoint, base_mib: float) -> Surface:
    """The surface through `points`, anchored at `anchor` (the current configuration)."""
    pts = list(points) or [anchor]
    stateful = any(p.miss_ratio is not None for p in pts)
    curve = _miss_curve(pts, anchor, base_mib) if stateful else None

    def miss_at(p: CapacityPoint) -> float:
        if curve is None:
            return 0.0
        return curve.miss(block_cache_bytes(p.memory_level, base_mib) * p.parallelism)

    contention = 0.0
    a, b = _prior_split(anchor, miss_at(anchor))
    for _ in range(2):  # a, b given γ; then γ (and a common scale) given a, b
        scaled = [(miss_at(p), p.service_us / (1.0 + contention * (p.parallelism - 1)))
                  for p in pts]
        fitted = _line(scaled) if curve is not None else None
        if fitted is not None:
            a, b = _positive(fitted, scaled)
        elif curve is None:
            a, b = sum(s for _, s in scaled) / len(scaled), 0.0
        relative = [(p.parallelism - 1.0, p.service_us / (a + b * miss_at(p))) for p in pts]
        line = _line(relative)
        if line is not None and line[0] > 0:
            scale, slope = line
            contention = min(MAX_CONTENTION, max(0.0, slope / scale))
            a, b = a * scale, b * scale
    surface = Surface(a, b, contention, curve, base_mib)
    correction = anchor.service_us / surface.service_us(anchor.parallelism, anchor.memory_level)
    return Surface(a, b, contention, curve, base_mib, correction)


def _miss_curve(pts: Sequence[CapacityPoint], anchor: CapacityPoint, base_mib: float) -> MissCurve:
    """θ = (T / full)^e: a log-log line through the points that still miss once two caches
    differ; before that, through one such point (the anchor if it is one) with `full` from
    the state size (or e from the prior). A point whose cache holds the state and hits
    `HELD` or more is left out: it bounds the line's `full` instead."""
    def cache(p: CapacityPoint) -> float:
        return block_cache_bytes(p.memory_level, base_mib) * p.parallelism

    size = anchor.state_bytes or max((p.state_bytes or 0.0 for p in pts), default=0.0)
    holds_state = CACHE_BYTES_PER_STATE_BYTE * size if size else math.inf
    hits = [(p, cache(p), 1.0 - p.miss_ratio) for p in pts
            if p.miss_ratio is not None and cache(p) > 0]
    # A cache that holds the whole state and hits `HELD` or more: its few misses are ones
    # no cache removes (first reads of new keys, flushes and compactions). Fitted as the
    # curve's slope they would have it rise long after the cache holds everything, and
    # promise gains from memory that are not there.
    held = [t for _, t, theta in hits if theta >= HELD and t >= holds_state]
    bound = min(held, default=math.inf)
    rising = [(p, t, theta) for p, t, theta in hits if 0.0 < theta < 1.0 and t not in held]
    seen = [(math.log(t), math.log(theta)) for _, t, theta in rising]
    line = _line(seen)
    if line is not None and line[1] > 0:
        e = _hit_exponent(line[1])
        mean_x = sum(x for x, _ in seen) / len(seen)
        mean_y = sum(y for _, y in seen) / len(seen)
        full = math.exp(mean_x - mean_y / e)
        if full > bound:
            # Through the held point instead: the slope of the rising points towards it.
            d = [(x - math.log(bound), y) for x, y in seen]
            sxx = sum(x * x for x, _ in d)
            if sxx > 0:
                return MissCurve(_hit_exponent(sum(x * y for x, y in d) / sxx), bound)
        return MissCurve(e, full)
    # One point: the anchor if it still misses, else the newest that does (the anchor may
    # hold the state), else a held anchor.
    ref = (next((r for r in rising if r[0] == anchor), None) or (rising[-1] if rising else None)
           or next((r for r in hits if r[0] == anchor and 0.0 < r[2] < 1.0), None))
    if ref is None:
        # Nothing to calibrate on (no cache, or all hits/all misses): the state size
        # alone, uniform keys; without it, everything cached at ten times this cache.
        return MissCurve(1.0, holds_state if size else max(cache(anchor), 1.0) * 10.0)
    _, t0, theta0 = ref
    if size and t0 < holds_state:
        full = holds_state
    else:
        # This cache holds the state's size already: the prior exponent, unless a held
        # point shows everything cached sooner than it says.
        full = t0 * math.pow(theta0, -1.0 / PRIOR_HIT_EXPONENT)
        if not t0 < bound < full:
            return MissCurve(PRIOR_HIT_EXPONENT, full)
        full = bound
    return MissCurve(_hit_exponent(math.log(theta0) / math.log(t0 / full)), full)


def _hit_exponent(e: float) -> float:
    return min(MAX_HIT_EXPONENT, max(MIN_HIT_EXPONENT, e))


def _prior_split(anchor: CapacityPoint, miss: float) -> tuple[float, float]:
    """a and b from one point: misses cost (τ − a hit) per get, gets = cache accesses / 3.

    Without τ or cache accesses, no gain from memory is predicted (b = 0): a scale-up
    is then tried only once measured data says it helps.
    """
    s = anchor.service_us
    tau, accesses = anchor.state_latency_ns, anchor.cache_accesses_per_record
    if tau is None or accesses is None or miss <= 0:
        return s, 0.0
    miss_us = accesses / BLOCKS_PER_GET * max(0.0, tau - HIT_NS) / 1000.0
    miss_us = min(miss_us, 0.9 * s)
    return s - miss_us, miss_us / miss


def _positive(line: tuple[float, float], xy: Sequence[tuple[float, float]]
              ) -> tuple[float, float]:
    """A record always costs some CPU: an intercept below `MIN_CPU_SHARE` of the cheapest
    point (misses dearer than linear, as at RocksDB's index cliff) is raised to it, and
    the slope refitted through the remaining cost."""
    a, b = line
    floor = MIN_CPU_SHARE * min(y for _, y in xy)
    if a >= floor:
        return a, b
    sxx = sum(x * x for x, _ in xy)
    slope = sum(x * (y - floor) for x, y in xy) / sxx if sxx > 0 else 0.0
    return floor, max(0.0, slope)


def _line(xy: Sequence[tuple[float, float]]) -> tuple[float, float] | None:
    """Least-squares intercept and slope, or None without two distinct x (Δx ≥ 0.05)."""
    if len(xy) < 2:
        return None
    xs = [x for x, _ in xy]
    if max(xs) - min(xs) < 0.05:
        return None
    mx = sum(xs) / len(xs)
    my = sum(y for _, y in xy) / len(xy)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in xy) / sxx
    if slope < 0:  # more misses never make a record cheaper: noise; keep the mean
        return my, 0.0
    return my - slope * mx, slope
