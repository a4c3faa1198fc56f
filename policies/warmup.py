"""Cold block caches: a window measured while RocksDB's cache refills after a restart is
no capacity.

A restart (a savepoint or last-state upgrade, an in-place rescale, a failover) restores
RocksDB's files but not its block cache: blocks are read back from disk (or the OS page
cache) as misses come, until the cache holds the working set. On real Flink 1.20 here
the cache of a saturated StateJob counter (128 MB) was full again 10-20 s after each of 3
restores, and θ did not dip (bench/results/realflink-warmup.json); the same job paced at
1,500 records/s (the real demo) still climbed from θ 0.78 to 0.87 in the minute after
its restart, and slower disks or larger caches take longer still. A
capacity point taken meanwhile is below what the configuration sustains, and judging a
step by it would mark a good configuration as falling short.

So, per stateful vertex and per run (the time its tasks last restarted), a window enters
the capacity surface only once the cache is warm: θ moved by at most `STABLE_HIT_RATE`
(absolute) since the previous window of the same run, or reached the θ learned warm at this
configuration before. The first window of a run is held
back unless it began `WARM_AFTER_S` after the restart (a job the controller first sees
long after it started). A run that never settles is taken as warm after
`MAX_HELD_WINDOWS` windows, so a load that keeps moving θ cannot hold the policy forever.
While a window is held, the vertex neither learns from it, nor is judged by it, nor
triggers a step (its busyness says as little as its rate).
"""

from __future__ import annotations

from pydantic import Field

from policies.decision import EpochTime, RecordModel

# θ moved less than this between two windows of one run: the cache has refilled.
STABLE_HIT_RATE = 0.02
# A window that begins this long after the restart is warm: on real Flink 1.20 a
# saturated job's cache was full again 10-20 s after each restore
# (bench/results/realflink-warmup.json); three times the slowest, and the paper's
# stabilization (so the twin's suite, which waits that long, holds nothing back).
WARM_AFTER_S = 60.0
# At most this many windows of one run are held back.
MAX_HELD_WINDOWS = 3


class CacheWarmup(RecordModel):
    """Where one stateful vertex's block cache is in its warm-up since the last restart."""

    restarted: EpochTime = Field(description="when the vertex's tasks last (re)started")
    hit_rate: float = Field(ge=0, le=1, description="θ of the last window of this run "
                                                      "judged (until one was warm)")
    time: EpochTime = Field(description="end of that window")
    held: int = Field(0, ge=0, description="windows of this run held back so far")
    warm: bool = False


def admit(warmup: CacheWarmup | None, hit_rate: float | None, restarted: float | None,
          time: float, window_s: float, known: float | None = None
          ) -> tuple[bool, CacheWarmup | None]:
    """Whether a window ending at `time` with hit rate `hit_rate` may enter the surface,
    and the warm-up record to keep. `known`: θ learned warm at this configuration before;
    a window that reaches it is warm at once. Stateless vertices (no θ) and runs of
    unknown start are always admitted."""
    if hit_rate is None or restarted is None:
        return True, warmup
    reached = known is not None and hit_rate >= known - STABLE_HIT_RATE
    if warmup is not None and warmup.restarted == restarted:
        if warmup.warm:  # warm for the rest of the run: nothing more to track
            return True, warmup
        if time - warmup.time < window_s * 0.999:
            # The same window again (or mostly): it says nothing new about the trend.
            return False, warmup
        warm = (reached or abs(hit_rate - warmup.hit_rate) <= STABLE_HIT_RATE
                or warmup.held >= MAX_HELD_WINDOWS)
        held = warmup.held if warm else warmup.held + 1
        return warm, CacheWarmup(restarted=restarted, hit_rate=hit_rate, time=time,
                                 held=held, warm=warm)
    warm = reached or time - window_s - restarted >= WARM_AFTER_S * 0.999
    return warm, CacheWarmup(restarted=restarted, hit_rate=hit_rate, time=time,
                             held=0 if warm else 1, warm=warm)


def note(warmup: CacheWarmup) -> str:
    return (f"block cache warming up since the restart (hit rate {warmup.hit_rate:.2f}, "
            f"window {warmup.held} held back): this window is not a capacity")
