"""When more tasks no longer raise a vertex's busiest subtask's capacity, the capacity
policy stops scaling that vertex for its busiest subtask, names it, and says why.

Flink hashes every key to one key group and each key group to one subtask: a hot key's
records all land on one subtask, whatever the parallelism. Past the point where that
subtask carries mostly the hot key, each added task takes only a sliver of the other
key groups off it, so its capacity (the vertex's records/s, mean-based, at which the
busiest subtask saturates) stops rising. Restarting for it then buys nothing: DS2 and
upstream keep adding tasks while it stays saturated (10 → 11 → 12 → 22 → 23 tasks in 20
minutes on a hot-key aggregation), each step a restart.

A vertex is *skew-stopped* when its busiest subtask is what is short (above the trigger
while the mean is not) and either

* **predicted**: no configuration with at least its tasks (any memory level, up to the
  useful parallelism and the bounds, whatever the per-step scale factor) raises the
  busiest subtask's capacity by more than 1/PLATEAU over what it is now, on the
  capacity surface and the key-group and hot-share model (`capacity._Skew`); or
* **measured**: a configuration with fewer tasks at the same memory level was measured
  with a busiest-subtask capacity within the noise of what it is now (a scale-out that
  did not help);

and no such configuration would make a busiest subtask that falls behind keep up (that
restart is taken: one step, then it stops). A busiest subtask that keeps up, but within
three times the noise of the rate to sustain, restarts only for a gain a measurement
could confirm (`short_by`): a plateau's last few per cent are the noise's, not the keys'.

Then no restart is taken for it (a restart that happens anyway leaves it as it is), and
a `SkewFinding` that blocks scale-out names it (the `Skewed` condition and its Warning
Event): the rate the vertex, and the job at its sources, can sustain (what would lift
it is said beside it, by its kind: `buffering.remedy`). It is assessed afresh every
evaluation, so a load that drops below what the vertex sustains, or a hot share that
turns out smaller, ends it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from policies import explain
from policies.decision import SkewFinding
from policies.learning import CapacityPoint, Surface, VertexLearning
from policies.model import Vertex, VertexConfig, VertexMetrics

# More tasks that raise the busiest subtask's capacity by less than 1/PLATEAU (25 %) are
# not worth a restart: the same bound the plan uses for "on the plateau".
PLATEAU = 0.8


@dataclass(frozen=True)
class SkewStop:
    """A vertex whose busiest subtask more tasks do not relieve."""

    capacity_now: float  # records/s of the vertex at which its busiest subtask saturates
    reachable: float  # the most any candidate configuration reaches (predicted)
    measured: bool  # a scale-out was measured not to help (else: predicted)
    hot_share: float  # the hot key group's estimated share of the vertex's input


def busiest_capacity(point: CapacityPoint) -> float:
    """The vertex's records/s (mean-based) at which the busiest subtask saturates, as
    measured at `point`."""
    return point.parallelism * 1e6 / point.service_us / point.hottest_ratio


def assess(current: VertexConfig, surface: Surface, ratio_at: dict[int, float],
           hot_share: float, candidates: Iterable[VertexConfig], learning: VertexLearning,
           short_by: float, rate: float) -> SkewStop | None:
    """The vertex's stop, or None when more tasks (or memory) still relieve its busiest
    subtask. `ratio_at`: busiest / mean at each candidate parallelism (the skew model);
    `rate`: the vertex's records/s to sustain. A restart that makes a busiest subtask
    falling behind (below `rate`) keep up, with three times the noise to spare, is never
    skipped, however little it gains; one that keeps up already, within that margin,
    restarts only for a gain of `short_by`."""
    if hot_share <= 0:
        return None
    p = current.parallelism
    now = surface.capacity(p, current.memory_level) / ratio_at[p]
    if not now > 0:
        return None
    reachable = now
    for c in candidates:
        if c.parallelism >= p and c.parallelism in ratio_at:
            reachable = max(reachable, surface.capacity(c.parallelism, c.memory_level)
                            / ratio_at[c.parallelism])
    anchor = learning.point(p, current.memory_level)
    fewer = [busiest_capacity(pt) for pt in learning.points
             if pt.parallelism < p and pt.memory_level == current.memory_level]
    measured = (anchor is not None and bool(fewer)
                and max(fewer) >= busiest_capacity(anchor) * (1.0 - short_by))
    keep_up = rate * (1.0 + 3.0 * learning.noise)
    if now < keep_up <= reachable and (now < rate or reachable >= now * (1.0 + short_by)):
        return None
    if measured or now >= PLATEAU * reachable:
        return SkewStop(now, reachable, measured, hot_share)
    return None


def finding(v: Vertex, m: VertexMetrics, stop: SkewStop, target: float,
            sources_target: float) -> SkewFinding:
    """The blocking finding that names the vertex: what it and the job sustain (its
    remedy is `buffering.remedy`'s). `target`: the vertex's target rate; `sources_target`:
    the job's."""
    p = v.parallelism
    hottest = min(max(m.busy_ms_per_s_max / 1000.0, 0.0), 1.0)
    mean = m.busyness
    ratio = hottest / mean if mean > 0 else 1.0
    job = sources_target * stop.capacity_now / target if target > 0 else float("nan")
    how = ("a scale-out was measured not to raise it" if stop.measured else
           f"at most {explain.rate(stop.reachable)} with more tasks or memory")
    message = (
        f"{v.name or v.id}: busiest of {p} subtasks {hottest:.0%} busy, mean {mean:.0%} "
        f"(×{ratio:.2f}); a hot key (about {stop.hot_share:.0%} of its input) stays on one "
        f"subtask: it saturates at {explain.rate(stop.capacity_now)} against a target of "
        f"{explain.rate(target)} ({how}), so the job sustains about {explain.rate(job)} at "
        f"its sources; no restart is taken for it at this load")
    return SkewFinding(
        vertex_id=v.id, vertex_name=v.name, parallelism=p, keyed=True,
        hottest_busyness=hottest, mean_busyness=mean, ratio=ratio,
        hottest_share=min(1.0, ratio / p), from_records=False,
        hot_key_group_share=stop.hot_share,
        best_hottest_busyness=hottest * stop.capacity_now / stop.reachable
        if stop.reachable > 0 else None,
        saturated=True, scale_out_helps=False, useful_parallelism=p, message=message)


def merge(findings: tuple[SkewFinding, ...], stops: Iterable[SkewFinding]
          ) -> tuple[SkewFinding, ...]:
    """The window's findings with each skew-stopped vertex's finding in place of its own."""
    by_id = {f.vertex_id: f for f in stops}
    kept = tuple(by_id.pop(f.vertex_id, f) for f in findings)
    return kept + tuple(by_id.values())
