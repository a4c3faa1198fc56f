"""Skew: the busiest subtask of a vertex against its mean, and whether more tasks can help.

A keyed input is hashed to key groups (max parallelism of them); each subtask owns a
contiguous range. A hot key lives in one key group, so on one subtask: scale-out
divides the other key groups but never splits a key. DS2 sizes a vertex by its mean
busyness and keeps adding tasks while the hottest subtask stays saturated; this module
names that case so the controller can say it, and a planner can stop paying for tasks
that do not help.

What the metrics tell (and what they do not):

* The hottest subtask's share of the vertex's input, `s = max/(mean·p)`: exact from the
  per-subtask records-in rates (`VertexMetrics.records_in_per_s_max`), else estimated
  from busyness (`busy_max/(busy·p)`), which assumes a record costs every subtask the
  same (a hot key's cache hits make its records cheaper, so this underestimates s).
* Key groups are not observable one by one. A subtask owns about K/p of the K key
  groups; the hottest key group's share `h` is estimated as the busiest subtask's share
  less its other key groups at the mean load of the key groups the other subtasks own:
  `h = s − (g − 1)(1 − s)/(K − g)`. A subtask owns ⌊K/p⌋ or ⌈K/p⌉ key groups; taking
  g = ⌈K/p⌉ errs towards "more tasks help" (DS2's answer) by up to one key group's load
  (about 1/K of the input), which also keeps the uneven key-group counts of p close to
  K from passing for a hot key. When the excess
  comes from several hot keys that share a subtask, `h` overestimates the hottest one
  and scale-out helps more than estimated. At p = 1 there is no spread to see: skew
  shows after the first scale-out.
* With p' tasks, the hottest subtask carries about `h + (1 − h)/p'` and, at the vertex's
  max parallelism K (one key group each), `max(h, 1/K)`. At the same cost per
  record its busyness scales with that share, and with DS2's target rate over the observed
  input (a saturated hottest subtask throttles the vertex; the sources' lag growth shows
  the rest of the need). When the sources report no lag, a throttled vertex's need is
  unseen: "cannot help" stays sound, "helps" may be optimistic.
* A vertex with no hashed input (sources, FORWARD, REBALANCE, RESCALE) has no key groups:
  its imbalance comes from elsewhere (uneven source partitions, a skewed upstream chained
  by FORWARD, a slow TaskManager, GC) and is reported, never said to block scale-out.
  Likewise a keyed vertex whose records are balanced while its busyness is not.
* On asynchronous state (ForSt) busy time counts the task thread only, so a busiest subtask
  reading well below saturation may not keep up. A keyed vertex there is also judged by
  its records' spread at the saturated vertex's margin over key-group rounding, and named
  without being said to block. The hysteresis relaxes the saturation bound only for a
  vertex saturated last time, so being named never makes one blocking.
* Where the records are measured they name a keyed vertex, not busy time alone: a busy
  spread the records account for is theirs (key-group rounding, under the bar), not a
  slow task's. Rounding alone gives up to 2× the mean past K/2 tasks, 1.48× at 63 of 128:
  no bar sits below what it and the noise give, except a saturated vertex's, capped at
  1.5× so that a hot key throttling the job is named (`entry_ratio`).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping
from types import MappingProxyType

from policies import ds2
from policies.decision import SkewFinding
from policies.model import JobGraph, Observation, ShipStrategy, Vertex, VertexMetrics
from policies.spec import CpuScaling

__all__ = ["SkewFinding", "blocks_scale_out", "caps", "detect", "entry_ratio",
           "hot_key_group_share"]

# Enter: the hottest subtask carries ≥ 1.5× the mean. Noise is far below that: a window
# mean of the twin's 2 % white noise per 5-s sample is ~0.4 %, and its 5 % drifting
# busy-time error multiplies max and mean alike; on real Flink, p subtasks with ~5 %
# independent error give a max/mean of ~1 + 2.6·0.05 ≈ 1.13 even at p = 128. Hashing
# alone gives subtasks ⌈K/p⌉ or ⌊K/p⌋ key groups, a ratio ≤ 1 + p/K, so ≤ 1.5 up to p = K/2.
SKEW_RATIO = 1.5
# A saturated busiest subtask throttles the whole vertex (and the job behind it), so a
# smaller excess is worth naming: over what hashing alone gives the busiest subtask
# (⌈K/p⌉ key groups against K/p), by a margin above the noise (±5 % per subtask gives
# at most 1.05/0.95 ≈ 1.11; 5 % Gaussian over 128 subtasks ~1.13). Without it a hot
# key at 5–10 % of a join's input, which caps the job, went unnamed at 7–26 tasks
# (ratio 1.3–1.45) until more restarts showed it.
SATURATED_MARGIN = 1.2
# A vertex found skewed in the previous evaluation stays skewed until each test misses by
# more than this relative margin (a ratio at 0.9 × its bar, never into key-group rounding
# and noise: `entry_ratio`; 0.9 × MIN_HOTTEST_BUSYNESS; one found saturated stays
# saturated, and blocked, down to 0.9 × utilizationMax), so a ratio or busyness hovering
# at a threshold does not flap the condition.
HYSTERESIS = 0.1
# Below this hottest busyness an imbalance hurts nobody (and ratios of near-idle tasks
# are mostly noise): not reported.
MIN_HOTTEST_BUSYNESS = 0.2
# A capacity planner's cap: beyond the parallelism at which the non-hot key groups add at
# most this share of the hot key group's load to the hottest subtask, more tasks do not
# relieve it.
DIMINISHING = 0.1


def detect(graph: JobGraph, observation: Observation, cpu: CpuScaling,
           previous: Collection[str] = (),
           previous_saturated: Collection[str] = ()) -> tuple[SkewFinding, ...]:
    """The skewed vertices of one window, in the graph's order.

    `previous`: ids of the vertices found skewed last time; their ratio thresholds are
    relaxed by HYSTERESIS so that noise does not flap the finding. `previous_saturated`:
    those of them whose busiest subtask was saturated; only theirs is the saturation
    bound relaxed, so being named never makes a vertex saturated (and blocking).
    """
    # A saturated hottest subtask throttles the vertex: DS2's target rate (the sources'
    # rate plus lag growth, propagated) says how much more than the observed input it needs.
    targets = ds2.target_rates(graph, observation) if not observation.missing(graph) else {}
    findings = []
    for v in graph.vertices:
        m = observation.vertices.get(v.id)
        if m is None:
            continue
        keyed = any(e.ship_strategy is ShipStrategy.HASH for e in graph.inputs(v.id))
        demand = 1.0
        if v.id in targets and m.records_in_per_s > 0:
            demand = max(1.0, targets[v.id] / m.records_in_per_s)
        finding = _finding(v, m, keyed, cpu, v.id in previous,
                           v.id in previous and v.id in previous_saturated, demand)
        if finding is not None:
            findings.append(finding)
    return tuple(findings)


def blocks_scale_out(finding: SkewFinding) -> bool:
    """The busiest subtask is saturated and more tasks cannot relieve it: do not scale out."""
    return finding.saturated and not finding.scale_out_helps


def caps(findings: Iterable[SkewFinding]) -> Mapping[str, int]:
    """Per vertex whose scale-out is blocked, the most tasks still worth paying for.

    Never below the current parallelism (a cap is not a scale-in); vertices absent from
    the map are not capped by skew.
    """
    return MappingProxyType({
        f.vertex_id: f.useful_parallelism or f.parallelism
        for f in findings if blocks_scale_out(f)
    })


def _finding(v: Vertex, m: VertexMetrics, keyed: bool, cpu: CpuScaling,
             was_skewed: bool, was_saturated: bool, demand: float) -> SkewFinding | None:
    p = v.parallelism
    if not (math.isfinite(m.busy_ms_per_s) and math.isfinite(m.busy_ms_per_s_max)
            and math.isfinite(m.records_in_per_s) and math.isfinite(demand)):
        return None  # a recording may carry anything: no finding on numbers that are not
    slack = 1.0 - HYSTERESIS if was_skewed else 1.0
    hottest = min(max(m.busy_ms_per_s_max / 1000.0, 0.0), 1.0)
    mean = m.busyness
    if p < 2 or mean <= 0 or hottest < MIN_HOTTEST_BUSYNESS * slack:
        return None
    ratio = hottest / mean
    busy_share = min(1.0, ratio / p)
    records_share = busiest_records_share(m)
    share = records_share if records_share is not None else busy_share
    saturated = hottest >= cpu.utilization_max * (1.0 - HYSTERESIS if was_saturated else 1.0)
    entry = entry_ratio(p, v.max_parallelism if keyed else 0, saturated, slack)
    named = ratio >= entry
    # On asynchronous state busy time counts the task thread only (docs/flink-2.md), so
    # whether the busiest subtask keeps up goes unmeasured: a hot key the records show is
    # named by them, at the saturated bar's margin, rather than once it throttles the vertex.
    unmeasured = keyed and m.asynchronous_state and records_share is not None and not saturated
    if keyed and records_share is not None:
        # The records tell a hot key from key-group rounding past K/2 tasks, where busy
        # time cannot.
        entry = entry_ratio(p, v.max_parallelism, saturated, slack, records=True,
                            unmeasured=unmeasured)
        spread = records_share * p
        # A busy-time spread the records account for is theirs (rounding, when they are
        # under the bar), not a slow task's: named by busy time only beyond the records.
        named = spread >= entry or (named and ratio >= spread * SATURATED_MARGIN)
    if not named:
        return None
    name = v.name or v.id
    head = (f"{name}: busiest of {p} subtasks {hottest:.0%} busy, mean {mean:.0%} "
            f"(×{ratio:.2f}); it takes {share:.0%} of the input")
    common = dict(vertex_id=v.id, vertex_name=v.name, parallelism=p, keyed=keyed,
                  hottest_busyness=hottest, mean_busyness=mean, ratio=ratio,
                  hottest_share=share, from_records=records_share is not None,
                  saturated=saturated)
    even_records = records_share is not None and records_share * p < entry
    if not keyed or even_records:
        cause = ("its input is not keyed: uneven source partitions, a skewed upstream "
                 "forwarded to it, or a slow TaskManager")
        if keyed and records_share is not None:
            # Under the bar, though above hashing and noise where the bar is SKEW_RATIO;
            # rounded down, so a spread just under the bar never prints as at it.
            over_mean = records_share * p
            hashing = over_mean < rounding(p, v.max_parallelism) * SATURATED_MARGIN
            how = ("no more uneven than key-group hashing and noise give" if hashing else
                   "not uneven enough to blame the keys")
            cause = (f"its records are {how} (busiest ×{math.floor(over_mean * 100) / 100:.2f} "
                     f"the mean, under the bar of ×{entry:.2f}): a slow TaskManager, GC "
                     f"pauses or records of unequal cost, not the keys")
        return SkewFinding(**common, scale_out_helps=True,
                           message=f"{head}; {cause}")
    k = v.max_parallelism
    hot = hot_key_group_share(share, p, k)
    # At K tasks each subtask owns one key group: the busiest owns the hottest one.
    best_share = min(share, max(hot, 1.0 / k))
    # Busyness scales with the records a task gets: its share, and the target over the input.
    best = (hottest * best_share / share if share > 0 else hottest) * demand
    # A hot key group stands out of a typical one (1/K) by the noise margin. Where none
    # does (busy time alone, from 3/4 K tasks, where rounding passes the bar), max
    # parallelism is what limits, not a key: more tasks help up to it. A vertex saturated
    # last time stays blocked until the estimate clears the bound by the margin.
    stands_out = hot >= SATURATED_MARGIN / k
    relieved = best < cpu.utilization_max * (1.0 - HYSTERESIS if was_saturated else 1.0)
    helps = p < k and (relieved or not stands_out)
    useful = None
    if saturated and not helps:
        useful = _useful_parallelism(hot, p, k)
    if unmeasured:
        tail = (f"its state is asynchronous, so busy time (the task thread only) does not "
                f"show whether the busiest subtask keeps up; about {hot:.0%} of the input is "
                f"taken for one hot key (several hot keys on this subtask would look the "
                f"same), which stays on one subtask at any parallelism ({hot * k:.1f}× a "
                f"typical subtask's share at {k} tasks)")
    elif not saturated:
        tail = "not saturated: scaling by the mean is still sound"
    elif helps and not relieved:
        tail = (f"no key group stands out (about {hot:.1%} of the input against "
                f"{1.0 / k:.1%} each): more tasks spread it, though even at {k} tasks, its "
                f"max parallelism, the busiest would be about {best:.0%} busy")
    elif helps:
        tail = (f"more tasks can spread it: at {k} tasks the busiest would be about "
                f"{best:.0%} busy")
    else:
        tail = (f"its excess over a typical subtask, about {hot:.0%} of the input, is taken "
                f"for one hot key (several hot keys on this subtask would look the same), "
                f"so even at {k} tasks the busiest subtask would need about {best:.0%} of a "
                f"task: more than {useful} tasks do not relieve it")
    return SkewFinding(**common, hot_key_group_share=hot, best_hottest_busyness=best,
                       scale_out_helps=helps, useful_parallelism=useful,
                       message=f"{head}; {tail}")


def busiest_key_groups(parallelism: int, key_groups: int) -> int:
    """How many of the K key groups Flink's range assignment gives the busiest of p
    subtasks: ⌈K/p⌉ (one at p ≥ K)."""
    return -(-key_groups // parallelism)


def rounding(parallelism: int, key_groups: int) -> float:
    """The busiest subtask's load over the mean that key-group hashing alone gives:
    ⌈K/p⌉ key groups against K/p (1.0 at p ≥ K)."""
    if parallelism >= key_groups:
        return 1.0
    return busiest_key_groups(parallelism, key_groups) * parallelism / key_groups


def entry_ratio(parallelism: int, key_groups: int, saturated: bool,
                slack: float = 1.0, records: bool = False, unmeasured: bool = False) -> float:
    """The hottest-to-mean ratio from which a vertex is named skewed.

    Hashing alone gives the busiest subtask ⌈K/p⌉ key groups against K/p (`rounding`:
    1.04 at 7 of 128 tasks, 1.48 at 63, up to 2× past K/2); SATURATED_MARGIN over it is
    the noise. The bar is never below that margin where naming says nothing a decision
    needs (not saturated: SKEW_RATIO or the margin, the higher), and is the margin,
    capped at SKEW_RATIO, where a saturated hot key would throttle the job: a hot key
    at 2 % of the input on 55 of 128 tasks gives 1.52 (rounding 1.29, margin 1.55).
    `records`: the bar for the busiest subtask's share of the records. Past K/2 tasks
    the saturated bar is the margin, uncapped: rounding alone reaches SKEW_RATIO there,
    and the records alone tell a hot key from it. `unmeasured`: the records of a vertex
    whose saturation goes unmeasured (asynchronous state): the margin, uncapped; it is
    named at the saturated bar's margin and never said to block.
    `slack` (1 − HYSTERESIS for a vertex named last time): the vertex stays named down
    to 90 % of its bar, raised to a floor over rounding: the lower of 1.18 × rounding
    (noise) and 90 % of the way from rounding to the bar. A bar at or below rounding
    (saturated, busy time only, from 96 of 128 tasks) relaxes to 90 % of it."""
    if key_groups <= 0 or parallelism <= 0:
        return SKEW_RATIO * slack
    hashing = rounding(parallelism, key_groups)
    margin = hashing * SATURATED_MARGIN
    if unmeasured or (saturated and records and 2 * parallelism > key_groups):
        bar = margin
    elif saturated:
        bar = min(SKEW_RATIO, margin)
    else:
        bar = max(SKEW_RATIO, margin)
    if bar <= hashing:
        return bar * slack
    toward_rounding = hashing + (bar - hashing) * slack
    above_noise = hashing * (1.0 + (SATURATED_MARGIN - 1.0) * slack)
    return max(bar * slack, min(above_noise, toward_rounding))


def hot_key_group_share(share: float, parallelism: int, key_groups: int) -> float:
    """The hottest key group's share of a keyed vertex's input, from its busiest subtask's.

    The busiest subtask's share less its other key groups, each at the mean of the key
    groups the other subtasks own. It owns ⌊K/p⌋ or ⌈K/p⌉ of the K key groups; taking
    ⌈K/p⌉ errs towards "more tasks help" (DS2's answer) by up to one key group's load.
    At p ≥ K a subtask owns one key group: its share is that group's.
    """
    if parallelism >= key_groups:
        return share
    groups = busiest_key_groups(parallelism, key_groups)
    others = (groups - 1) * (1.0 - share) / (key_groups - groups) if groups < key_groups else 0.0
    return max(share - others, 0.0)


def busiest_share(hot: float, parallelism: int, key_groups: int) -> float:
    """The busiest subtask's share of the input at `parallelism` tasks, with a hot key
    group of share `hot`: that group and ⌈K/p⌉ − 1 others at the mean of the rest, the
    inverse of `hot_key_group_share` (the running parallelism gives back what was
    measured there)."""
    groups = busiest_key_groups(parallelism, key_groups)
    if groups <= 1:
        return hot
    return hot + (groups - 1) * (1.0 - hot) / (key_groups - 1)


def busiest_records_share(m: VertexMetrics) -> float | None:
    """The busiest subtask's share of the records in, when the collector measured it."""
    top = m.records_in_per_s_max
    if top is None or m.records_in_per_s <= 0 or not math.isfinite(top):
        return None
    return min(1.0, max(top, 0.0) / m.records_in_per_s)


def useful_parallelism(hot: float, p: int, k: int) -> int:
    """Where more tasks stop relieving a subtask with a hot key group of share `hot`:
    past it, the other key groups add at most DIMINISHING of the hot one's load (never
    below p, never above K)."""
    return _useful_parallelism(hot, p, k)


def _useful_parallelism(hot: float, p: int, k: int) -> int:
    """Smallest p' whose non-hot part on the busiest subtask, (1 − h)/p', is within
    DIMINISHING of the hot key group's h; never below p, never above K."""
    if hot <= 0:
        return k
    wanted = math.ceil((1.0 - hot) / (DIMINISHING * hot) - 1e-9)
    return max(p, min(k, wanted))
