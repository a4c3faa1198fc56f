"""The capacity policy: learning, the one-jump plan, judging steps, staying still, skew.

A small world stands in for Flink: one keyed stateful vertex whose per-record cost is
CPU plus block-cache misses, where the miss ratio follows the total cache over all
tasks (keys hashed over them), as RocksDB's does. The policy never sees the world's
formula, only the metrics it produces.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policies import PolicyState, ScalingParams, capacity, evaluate, skew, skew_stop
from policies.bill import slot_cpu
from policies.decision import Branch
from policies.evaluate import Evaluation
from policies.learning import (
    CapacityPoint,
    Prediction,
    ShortConfiguration,
    Surface,
    VertexLearning,
    block_cache_bytes,
    fit,
    merge,
)
from policies.model import (
    Configuration,
    JobGraph,
    Observation,
    ShipStrategy,
    VertexConfig,
    VertexMetrics,
)
from policies.restart_cost import Enactment, RestartFacts
from policies.spec import CostSpec, CpuScaling, MemoryScaling, ParallelismOverride, Policy
from tests.policies.builders import chain, metrics, observe, source, vertex

BASE = 158.0
PARAMS = ScalingParams(policy=Policy.CAPACITY,
                       cpu=CpuScaling(scale_down_delay=300, catch_up_duration=0),
                       memory=MemoryScaling(base_managed_memory=f"{BASE:g}Mi"))


@dataclass(frozen=True)
class World:
    """One keyed vertex: `cpu_us` per record, `gets` per record, each a filter, an index
    and a data block lookup; a get costs 2 µs, plus `miss_us` when it misses."""

    cpu_us: float = 20.0
    miss_us: float = 60.0
    gets: float = 1.0
    state_bytes: float = 2e9
    skew: float = 0.7  # θ = (T / full)^skew
    hot_share: float = 0.0  # one key's share of the records
    reported_miss_us: float | None = None  # what state latency says a miss costs
    source_rate: float = 500_000.0  # records/s a source task reads when never idle
    # Asynchronous state (ForSt): the share of a record's work on the task thread, the
    # only part busy time shows, but a saturated task's whole second (it blocks on its
    # full in-flight buffer). Below 1, the busiest subtask's records are measured too.
    thread_share: float = 1.0

    def latency_ns(self, miss: float) -> float:
        reported = self.miss_us if self.reported_miss_us is None else self.reported_miss_us
        return 2_000 + miss * reported * 1000

    def miss(self, p: int, level: int | None) -> float:
        full = 2.7 * self.state_bytes
        return 1.0 - min(1.0, block_cache_bytes(level, BASE) * p / full) ** self.skew

    def service_us(self, p: int, level: int | None) -> float:
        return self.cpu_us + self.gets * (2.0 + self.miss(p, level) * self.miss_us)

    def counter(self, p: int, level: int | None, rate: float) -> VertexMetrics:
        """The vertex at `p` tasks and `level` receiving `rate` records/s (throttled at its
        capacity, the rest shows as lag growth at the source)."""
        tpr = p * 1e6 / self.service_us(p, level)
        hottest = max(1.0 / p, self.hot_share + (1 - self.hot_share) / p)
        processed = min(rate, tpr / (hottest * p))
        work = processed / tpr  # the mean task's share of a second
        hot_work = work * hottest * p
        hot_busy = 1.0 if hot_work >= 1.0 - 1e-9 else hot_work * self.thread_share
        busy = 1000.0 * (hot_busy + (work * p - hot_work) * self.thread_share) / p
        miss = self.miss(p, level)
        return replace(
            metrics(busy, processed, 0.0, hits=processed * 3 * self.gets * (1 - miss),
                    misses=processed * 3 * self.gets * miss,
                    latency_ns=self.latency_ns(miss)),
            busy_ms_per_s_max=min(1000.0, 1000.0 * hot_busy), state_bytes=self.state_bytes,
            records_in_per_s_max=processed * hottest if self.thread_share < 1 else None)

    def observe(self, graph: JobGraph, rate: float, now: float) -> Observation:
        c = graph.vertex("counter")
        counter = self.counter(c.parallelism, c.memory_level, rate)
        growth = rate - counter.records_in_per_s
        src_busy = 1000.0 * counter.records_in_per_s / self.source_rate
        return Observation(time=now, window_s=120.0, vertices={
            "src": source(src_busy, counter.records_in_per_s, lag_growth=growth),
            "counter": counter})


def graph(p: int = 1, level: int | None = 0) -> JobGraph:
    return chain(vertex("src", 1, None, uids=("src",)),
                 vertex("counter", p, level, max_p=128, uids=("counter",)),
                 ship=ShipStrategy.HASH)


def timed_run(world: World, rate: float | list[float], windows: int = 30,
              params: ScalingParams = PARAMS, start: JobGraph | None = None
              ) -> tuple[JobGraph, list[tuple[float, int, int | None]], PolicyState]:
    """Evaluate every window (120 s) for `windows` windows from `start` (one task at
    level 0): each step's time and the counter's configuration after it."""
    g, state, steps = start or graph(), PolicyState(), []
    rates = rate if isinstance(rate, list) else [rate] * windows
    for n, r in enumerate(rates):
        now = 120.0 * (n + 1)
        e = evaluate(g, world.observe(g, r, now), state, params, now)
        state = e.state
        if e.decision.reconfigures:
            g = g.with_configuration(e.configuration)
            c = g.vertex("counter")
            steps.append((now, c.parallelism, c.memory_level))
    return g, steps, state


def run(world: World, rate: float | list[float], windows: int = 30,
        params: ScalingParams = PARAMS
        ) -> tuple[JobGraph, list[tuple[int, int | None]], PolicyState]:
    g, steps, state = timed_run(world, rate, windows, params)
    return g, [(p, m) for _, p, m in steps], state


def oracle(world: World, rate: float, utilization: float = 0.5) -> tuple[int, int]:
    """The cheapest (p, level) running the vertex at `utilization` at PARAMS' prices."""
    best = None
    for level in range(3):
        for p in range(1, 129):
            if p * 1e6 / world.service_us(p, level) * utilization >= rate:
                cost = p * (1 + (BASE * 2**level) / 1024 * 0.134)
                best = min(best or (math.inf, 0, 0), (cost, p, level))
                break
    assert best is not None
    return best[1], best[2]


def test_one_jump_reaches_the_target_near_the_cheapest_configuration() -> None:
    world = World()
    g, steps, _ = run(world, 60_000)
    c = g.vertex("counter")
    assert len(steps) <= 2, steps
    p_best, level_best = oracle(world, 60_000)
    cost = c.parallelism * (1 + BASE * 2 ** (c.memory_level or 0) / 1024 * 0.134)
    best = p_best * (1 + BASE * 2**level_best / 1024 * 0.134)
    assert cost <= 1.10 * best, (steps, (p_best, level_best))
    assert world.counter(c.parallelism, c.memory_level, 60_000).busyness <= 0.8


def test_a_step_the_bounds_cut_short_says_so_rather_than_that_it_sustains_the_target() -> None:
    """At most two tasks (maxScaleUpFactor 1) cannot carry 30x what one task does: the step
    is taken, and its reason says no configuration within the bounds sustains the target."""
    world = World()
    params = replace(PARAMS, cpu=PARAMS.cpu.model_copy(update={"max_scale_up_factor": 1.0}))
    one = world.counter(1, 0, 1e9).records_in_per_s
    g = graph()
    e = evaluate(g, world.observe(g, 30 * one, 120.0), PolicyState(), params, 120.0)
    assert e.decision.reconfigures and e.configuration["counter"].parallelism <= 2
    why = e.decision.vertex("counter").reason
    assert why.startswith("no configuration within the bounds (at most 2 tasks"), why
    assert "predicted to fall short" in why
    assert "predicted to sustain the target;" not in why


def test_a_step_the_scale_factor_cuts_short_goes_as_far_as_it_allows() -> None:
    """No hot key: from one task, 30x its load and maxScaleUpFactor 10 allow 11 tasks. The
    step takes all 11; stopping at 80 % of what they reach (the hot-key plateau rule)
    would leave the vertex near utilizationMax and a second restart due."""
    world = World()
    one = world.counter(1, 0, 1e9).records_in_per_s
    g = graph()
    e = evaluate(g, world.observe(g, 30 * one, 120.0), PolicyState(), PARAMS, 120.0)
    assert e.decision.reconfigures and e.configuration["counter"].parallelism == 11


def test_a_vertex_starved_behind_the_bottleneck_is_sized_in_the_same_step() -> None:
    """The first window: Hot saturated, Starved behind it 4 % busy (below what the
    policy otherwise measures), yet at its true processing rate (250k/s) the target would
    load it to 80 %. It is sized in the bottleneck's step, as DS2 sizes it, not left to
    a second restart once the bottleneck is gone; at a target it carries (40 %) it stays."""
    g = chain(vertex("src", 1, None), vertex("hot", 1, None), vertex("starved", 1, None))

    def step(target: float) -> int:
        seen = observe(now=120.0, src=source(20.0, 10_000.0, lag_growth=target - 10_000.0),
                       hot=metrics(1000.0, 10_000.0), starved=metrics(40.0, 10_000.0))
        e = evaluate(g, seen, PolicyState(), PARAMS, 120.0)
        assert e.decision.reconfigures
        assert e.configuration["hot"].parallelism > 1
        return e.configuration["starved"].parallelism

    assert step(200_000.0) >= 2
    assert step(100_000.0) == 1


def test_a_starved_window_judges_no_step_and_tilts_no_measured_point() -> None:
    """The near-idle windows admitted are the ones whose rate looks low, the ones a pause
    can distort: such a window adds a provisional point only where nothing was measured,
    and never judges the step that chose the configuration."""
    g = chain(vertex("src", 1, None), vertex("hot", 1, None), vertex("starved", 2, None))
    seen = observe(now=600.0, src=source(20.0, 10_000.0, lag_growth=190_000.0),
                   hot=metrics(1000.0, 10_000.0), starved=metrics(40.0, 10_000.0))
    predicted = Prediction(parallelism=2, memory_level=None, capacity=500_000.0,
                           need=400_000.0)
    judged = VertexLearning(vertex_id="starved", predicted=predicted)
    e = evaluate(g, seen, PolicyState(learned={"starved": judged}), PARAMS, 600.0)
    after = e.state.learned["starved"]
    assert not after.fell_short and after.realized is None
    assert [(p.parallelism, p.windows) for p in after.points] == [(2, 1)]  # provisional
    measured = CapacityPoint(parallelism=2, memory_level=None, time=480.0, windows=3,
                             service_us=4.0)
    known = VertexLearning(vertex_id="starved", points=(measured,))
    e = evaluate(g, seen, PolicyState(learned={"starved": known}), PARAMS, 600.0)
    assert e.state.learned["starved"].points == (measured,)


def test_a_hot_subtask_among_idle_ones_is_not_taken_for_an_idle_vertex() -> None:
    """40 tasks, the mean 3 % busy, one subtask saturated by a hot key: the near-idle
    guard reads the busiest subtask, so the hot key is stopped and named rather than the
    vertex waiting to be scaled in as if idle."""
    g = chain(vertex("src", 1, None), vertex("keyed", 40, None), ship=ShipStrategy.HASH)
    seen = observe(now=600.0, src=source(20.0, 10_000.0, lag_growth=0.0),
                   keyed=replace(metrics(30.0, 10_000.0), busy_ms_per_s_max=1000.0))
    point = CapacityPoint(parallelism=40, memory_level=None, time=480.0, windows=3,
                          service_us=120.0, hottest_ratio=33.0)
    state = PolicyState(learned={"keyed": VertexLearning(vertex_id="keyed", points=(point,))})
    e = evaluate(g, seen, state, PARAMS, 600.0)
    keyed = e.decision.vertex("keyed")
    assert keyed.branch is Branch.SKEW_LIMITED and "skew: a hot key" in keyed.reason, keyed
    assert "waiting" not in e.decision.reason, e.decision.reason


def test_a_near_idle_vertex_alone_never_restarts_the_job() -> None:
    """4 % busy, a true processing rate short of the target: nothing else holds the job
    back, and near idle a pause alone can make such a shortfall, so no restart."""
    g = chain(vertex("src", 1, None), vertex("starved", 1, None))
    seen = observe(now=120.0, src=source(20.0, 10_000.0, lag_growth=230_000.0),
                   starved=metrics(40.0, 10_000.0))
    e = evaluate(g, seen, PolicyState(), PARAMS, 120.0)
    assert not e.decision.reconfigures, e.decision.reason


def test_an_idle_over_provisioned_vertex_gives_back_what_it_does_not_need() -> None:
    """2 tasks at level 2 doing 1,000 records/s: about 3 % busy, too idle for a measured
    point. Its windows still size a give-back (a pause could only make one look busier),
    taken once cpu.scaleDownDelay has passed, and nothing grows again."""
    world, start = World(), graph(2, 2)
    assert world.counter(2, 2, 1_000.0).busyness < capacity.MIN_BUSYNESS
    _, steps, _ = timed_run(world, 1_000.0, windows=12, start=start)
    assert len(steps) == 1, steps
    when, p, level = steps[0]
    assert when >= PARAMS.cpu.scale_down_delay
    assert p <= 2 and (level or 0) <= 2 and (p, level) != (2, 2), steps
    assert world.counter(p, level, 1_000.0).busyness < PARAMS.cpu.utilization_target


def test_an_idle_vertex_is_not_grown_in_a_step_another_vertex_takes() -> None:
    """Hot saturated triggers a step; Idle beside it is 3 % busy with its busiest subtask
    at 2.5 times the mean, and the target would load it to 33 % (not starved). Its window
    is no measurement to buy tasks or memory with (taken as one, its busiest subtask would
    ask for a fifth task): it keeps its configuration."""
    g = chain(vertex("src", 1, None), vertex("hot", 1, None), vertex("idle", 4, 1, max_p=128),
              ship=ShipStrategy.HASH)
    seen = observe(now=120.0, src=source(20.0, 10_000.0, lag_growth=100_000.0),
                   hot=metrics(1000.0, 10_000.0),
                   idle=replace(metrics(30.0, 10_000.0), busy_ms_per_s_max=75.0))
    e = evaluate(g, seen, PolicyState(), PARAMS, 120.0)
    assert e.decision.reconfigures and e.configuration["hot"].parallelism > 1
    idle = e.configuration["idle"]
    assert idle.parallelism <= 4 and (idle.memory_level or 0) <= 1, idle
    # Stateful at level 0, half its reads missing: taken as measured, it would buy memory.
    g = chain(vertex("src", 1, None), vertex("hot", 1, None), vertex("idle", 4, 0, max_p=128),
              ship=ShipStrategy.HASH)
    seen = observe(now=120.0, src=source(20.0, 10_000.0, lag_growth=140_000.0),
                   hot=metrics(1000.0, 10_000.0),
                   idle=replace(metrics(30.0, 10_000.0, hits=1500.0, misses=1500.0,
                                        latency_ns=20_000.0), busy_ms_per_s_max=60.0))
    e = evaluate(g, seen, PolicyState(), PARAMS, 120.0)
    assert e.decision.reconfigures
    idle = e.configuration["idle"]
    assert idle.parallelism <= 4 and (idle.memory_level or 0) == 0, idle


def test_memory_and_parallelism_change_in_the_same_step() -> None:
    _, steps, _ = run(World(), 60_000, windows=3)
    p, level = steps[0]
    assert p > 1 and level is not None and level > 0, steps


def test_a_steady_load_means_no_restart_after_convergence() -> None:
    _, steps, _ = run(World(), 60_000, windows=40)
    _, steps_short, _ = run(World(), 60_000, windows=10)
    assert steps == steps_short  # nothing after the first ten windows


def test_a_write_dominated_vertex_is_not_scaled_up() -> None:
    """Few cache accesses per record: memory cannot buy capacity, so no scale-up."""
    world = World(gets=0.02, cpu_us=40.0)
    g, steps, _ = run(world, 60_000)
    assert all(level == 0 for _, level in steps), steps
    assert g.vertex("counter").memory_level == 0


def test_a_scale_down_waits_and_sizes_for_the_peak_over_its_delay() -> None:
    world = World()
    # Converge at 60k, then the load drops to 20k with one spike to 40k mid-delay.
    rates = [60_000.0] * 10 + [20_000.0] * 2 + [40_000.0] + [20_000.0] * 12
    _, times, _ = timed_run(world, rates)
    drop = 120.0 * 11
    first_down = next(t for t in times if t[0] >= drop)
    # It waited cpu.scaleDownDelay (300 s) from the first window that wanted it ...
    assert first_down[0] - drop >= 300
    # ... and sized for the 40k peak seen during the delay, not for 20k.
    assert world.counter(first_down[1], first_down[2], 40_000).busyness <= 0.8
    # Once the peak has aged out of a whole delay, it comes down further.
    last = times[-1]
    assert world.counter(last[1], last[2], 20_000).busyness <= 0.8
    assert (last[1], last[2]) != (first_down[1], first_down[2])


def test_a_drop_is_scaled_down_in_one_step_although_its_first_window_straddles_it() -> None:
    """The first window after a drop measures part of the old load: a scale-down sized for
    it lands short of the load that stays, and a second restart follows. The wait sizes
    for its later windows when the first stands out above them."""
    world = World()
    rates = [60_000.0] * 10 + [40_000.0] + [20_000.0] * 14
    _, times, _ = timed_run(world, rates)
    downs = [t for t in times if t[0] >= 120.0 * 11]
    assert len(downs) == 1, times
    assert world.counter(downs[0][1], downs[0][2], 20_000).busyness <= 0.6, times


def _steps_and_reasons(world: World, rates: list[float], params: ScalingParams
                       ) -> tuple[list[tuple[float, int, int | None]], list[str]]:
    """From two tasks at level 0, a window (120 s) at each rate: each step's time and the
    counter's configuration after it, and every window's reason."""
    g, state, steps, said = graph(2), PolicyState(), [], []
    for n, rate in enumerate(rates):
        now = 120.0 * (n + 1)
        e = evaluate(g, world.observe(g, rate, now), state, params, now)
        state = e.state
        said.append(e.decision.reason)
        if e.decision.reconfigures:
            g = g.with_configuration(e.configuration)
            steps.append((now, g.vertex("counter").parallelism,
                          g.vertex("counter").memory_level))
    return steps, said


def test_a_skewed_vertex_is_scaled_in_blind_only_when_it_pays_back_two_restarts() -> None:
    """A hot key (5 % of the records) and a 1/4 drop of the load. From 2 saturated tasks,
    whose spread (×1.05) is within the noise, the first step is sized on the mean: more
    than the 11 tasks the default scale factor allows from 1 (where no scale-in follows).
    After the drop fewer tasks would do (a saving beyond the predictions' error), at a
    parallelism the vertex never ran at; which heavy key groups then share its busiest
    subtask is unknown, so the scale-in is priced with the restart likely to undo it.
    With 240-s restarts the saving pays back one restart (as two 120-s ones show; a
    restart's price is linear in its downtime) but not two, and the vertex stays; with
    60-s restarts it pays back both, and it is taken."""
    world = World(hot_share=0.05, gets=0.0, cpu_us=108.0)
    rates = [60_000.0] * 10 + [45_000.0] * 15

    def reasons(downtime_s: float) -> tuple[list[tuple[float, int, int | None]], str]:
        steps, said = _steps_and_reasons(world, rates,
                                         replace(PARAMS, expected_downtime_s=downtime_s))
        return steps, "\n".join(said)

    steps, reason = reasons(240.0)
    assert len(steps) == 1 and steps[0][0] == 120.0 and steps[0][1] > 11, steps
    assert "both its restart and the one likely to undo it" in reason, reason
    assert "(Counter: skewed, to a parallelism never run)" in reason, reason
    assert len(reasons(120.0)[0]) == 2  # two 120-s restarts pay back: so would one of 240 s
    again, _ = reasons(60.0)
    assert again[:1] == steps and len(again) == 2, again  # the drop's scale-in
    assert again[1][1] < steps[0][1] and again[1][1] not in {2, steps[0][1]}, again  # never run


@pytest.mark.parametrize("after_drop,tasks_after", [(50_000.0, 13), (45_000.0, 11)])
def test_a_give_back_within_the_predictions_error_takes_no_restart(
        after_drop: float, tasks_after: int) -> None:
    """13 tasks after the first step; the load then drops. One task fewer saves 7 % of
    the bill, less than a step may miss its predicted capacity by (SHORT_BY, so as many
    more tasks) before it counts as short: a restart for it is churn, though it would
    pay its restart back, and the reason says so. Two fewer save 15 %: taken."""
    taken, said = _steps_and_reasons(World(gets=0.0, cpu_us=108.0),
                                     [60_000.0] * 6 + [after_drop] * 8,
                                     replace(PARAMS, expected_downtime_s=30.0))
    steps = [p for _, p, _ in taken]
    assert steps == [13] + ([tasks_after] if tasks_after != 13 else []), steps
    if tasks_after == 13:
        assert any("within what the capacity predictions may be off by (10%)" in why
                   for why in said), said


def test_a_blind_scale_in_that_does_not_pay_stays_and_the_rest_goes_ahead() -> None:
    """A (skewed, 12 tasks) and B (even, 24 tasks) have both sufficed with fewer tasks for
    the whole delay. With 15-min restarts, A's blind scale-in to 8 would not pay back the
    restart likely to undo it as well: A stays at 12, B still takes its scale-in."""
    g = chain(vertex("src", 1, None), vertex("a", 12, None), vertex("b", 24, None),
              ship=ShipStrategy.HASH)
    now = 1200.0
    seen = observe(now=now, src=source(20.0, 10_000.0, lag_growth=0.0),
                   a=replace(metrics(300.0, 10_000.0), busy_ms_per_s_max=600.0),
                   b=replace(metrics(150.0, 10_000.0), busy_ms_per_s_max=155.0))

    def waited(vid: str, p: int, ratio: float) -> VertexLearning:
        point = CapacityPoint(parallelism=p, memory_level=None, time=now - 120.0, windows=5,
                              service_us=12e6 / 33_333.0, hottest_ratio=ratio)
        return VertexLearning(vertex_id=vid, points=(point,), surplus_since=now - 400.0,
                              surplus_peak_need=10_000.0)

    state = PolicyState(learned={"a": waited("a", 12, 2.0), "b": waited("b", 24, 1.03)})
    e = evaluate(g, seen, state, replace(PARAMS, expected_downtime_s=900.0), now)
    assert e.decision.reconfigures, e.decision.reason
    assert e.configuration["a"].parallelism == 12 and e.configuration["b"].parallelism < 24
    assert "(A kept: skewed, a scale-in to a parallelism never run" in e.decision.reason
    both = evaluate(g, seen, state, replace(PARAMS, expected_downtime_s=600.0), now)
    assert both.configuration["a"].parallelism < 12, both.decision.reason  # pays both


def test_a_wait_across_a_gap_in_the_evaluations_starts_over() -> None:
    """B has sufficed with fewer tasks for 400 s of a 300 s delay, but the last window
    evaluated before this one ended 1,000 s ago (the controller or Prometheus was down):
    what the load did in between was never seen, so the wait starts over."""
    g = chain(vertex("src", 1, None), vertex("b", 24, None), ship=ShipStrategy.HASH)
    now = 1200.0
    seen = observe(now=now, src=source(20.0, 10_000.0, lag_growth=0.0),
                   b=replace(metrics(150.0, 10_000.0), busy_ms_per_s_max=155.0))
    point = CapacityPoint(parallelism=24, memory_level=None, time=now - 120.0, windows=5,
                          service_us=12e6 / 33_333.0, hottest_ratio=1.03)
    waited = VertexLearning(vertex_id="b", points=(point,), surplus_since=now - 400.0,
                            surplus_peak_need=10_000.0)
    state = PolicyState(learned={"b": waited}, last_evaluated=now - 120.0)
    assert evaluate(g, seen, state, PARAMS, now).decision.reconfigures  # waited, in view
    after = evaluate(g, seen, replace(state, last_evaluated=now - 1_000.0), PARAMS, now)
    assert not after.decision.reconfigures, after.decision.reason
    assert after.state.learned["b"].surplus_since == now


def test_a_wait_that_did_not_pay_back_starts_over_and_forgets_its_old_peak() -> None:
    """A small drop whose saving cannot pay a restart back, then a large one: the peak
    that sizes the scale-down is the need over the last delay, not since the surplus
    began, or the job would keep the small drop's configuration for ever."""
    world = World()
    rates = [60_000.0] * 10 + [54_000.0] * 6 + [20_000.0] * 14
    # A 10-minute restart (a large state): a sixth fewer tasks does not pay it back.
    slow = replace(PARAMS, expected_downtime_s=600.0)
    _, times, _ = timed_run(world, rates, params=slow)
    small_drop, large_drop = 120.0 * 11, 120.0 * 17
    assert not [t for t in times if small_drop <= t[0] < large_drop], times
    last = times[-1]
    assert last[0] > large_drop, times
    assert world.counter(last[1], last[2], 20_000).busyness <= 0.6, times


@pytest.mark.parametrize("tasks,load", [(8, 0.85), (8, 0.95), (16, 0.9)])
def test_a_memory_step_that_fell_short_does_not_shrink_what_more_tasks_add(
        tasks: int, load: float) -> None:
    """State latency overstates a miss 40x, and the vertex may not scale in: when the
    load doubles, it takes memory alone, which buys almost nothing (the share of its
    predicted gain measured falls to the floor, on a step memory led). The scale-out that
    follows is sized by what more tasks add, undamped: it lands at the cheapest
    configuration in one step, not at 1.2-1.5x the tasks with a scale-in to follow."""
    world = World(miss_us=10.0, reported_miss_us=400.0, cpu_us=60.0)
    pinned = ParallelismOverride(vertex_id="counter", min_parallelism=tasks)
    params = replace(PARAMS, cpu=CpuScaling(scale_down_delay=300, catch_up_duration=0,
                                            overrides=(pinned,)))
    rate = load * 0.8 * tasks * 1e6 / world.service_us(tasks, 0)
    _, times, state = timed_run(world, [rate] * 4 + [2 * rate] * 10, params=params,
                                start=graph(tasks, 0))
    learned = state.learned["counter"]
    memory = [n for n, (_, p, m) in enumerate(times) if (p, m) == (tasks, 2)]
    assert memory and learned.realized_memory_led, times
    assert learned.realized is not None and learned.realized < 0.5, learned.realized
    after = [(p, m) for _, p, m in times[memory[0] + 1:]]
    best, _ = oracle(world, 2 * rate)
    assert len(after) == 1 and after[0][0] <= best * 1.1, (after, best)
    assert world.counter(*after[0], 2 * rate).busyness <= 0.8, after


@pytest.mark.parametrize("tasks,rate", [(8, 100_000.0), (8, 120_000.0), (16, 200_000.0)])
def test_a_step_memory_led_that_fell_short_leaves_the_next_scale_out_at_the_oracle(
        tasks: int, rate: float) -> None:
    """As above, free to scale in: the first jump trades tasks for memory (fewer tasks,
    two levels up), memory's promised gain is most of it, and it falls short. The next
    step, and the one after the load doubles, land at the cheapest configuration each;
    shrinking every gain by the failed step's share, the next overshot to 2-3x the tasks
    and a scale-in followed."""
    world = World(miss_us=10.0, reported_miss_us=400.0, cpu_us=60.0)
    _, times, state = timed_run(world, [rate] * 4 + [2 * rate] * 10, start=graph(tasks, 0))
    assert state.learned["counter"].realized_memory_led, times
    first, *rest = [(p, m) for _, p, m in times]
    assert first[0] < tasks and (first[1] or 0) > 0, times
    assert rest == [oracle(world, rate), oracle(world, 2 * rate)], times


def test_a_configuration_that_fell_short_is_never_chosen_again() -> None:
    """State latency overstates what a miss costs (40x): the prior promises a big gain
    from memory, the first jump falls short, and the policy never returns to it (or to
    anything it dominates), and ends where the vertex keeps up. (What ran short when a
    deficit step left it, the start included, is remembered the same way.)"""
    world = World(miss_us=10.0, reported_miss_us=400.0, cpu_us=60.0)
    g, steps, state = run(world, 80_000)
    learned = state.learned["counter"]
    assert learned.fell_short, steps
    assert any((s.parallelism, s.memory_level) != (1, 0)  # the first jump
               for s in learned.fell_short), learned.fell_short
    path = [(1, 0), *steps]
    for short in learned.fell_short:
        later = path[path.index((short.parallelism, short.memory_level)) + 1:]
        assert later, steps
        assert all(not (p <= short.parallelism and (m or 0) <= (short.memory_level or 0))
                   for p, m in later), (short, steps)
    c = g.vertex("counter")
    assert world.counter(c.parallelism, c.memory_level, 80_000).busyness <= 0.8


def test_what_ran_short_when_a_deficit_step_left_it_is_not_returned_to() -> None:
    """4 tasks at 90 % busy: the step out remembers 4 tasks at that memory as short of
    the need it sized for (`VertexLearning.excluded`), so no scale-in returns to them, or
    to less, while the need holds, for one payback period (one window's stall can make a
    deficit too). A scale-in across a cache cliff the surface does not see (its window
    throttled) took gen-005 from 8 to 7 tasks and back twice: 5 steps where 3 do."""
    world = World()
    g = graph(4, 1)
    rate = 0.9 * world.counter(4, 1, 1e9).records_in_per_s
    e = evaluate(g, world.observe(g, rate, 120.0), PolicyState(), PARAMS, 120.0)
    assert e.decision.reconfigures and e.configuration["counter"].parallelism > 4
    learned = e.state.learned["counter"]
    short = learned.excluded(4, 1, learned.predicted.need)
    assert short is not None and (short.parallelism, short.memory_level) == (4, 1)
    assert learned.excluded(3, 0, learned.predicted.need) is not None  # what it dominates
    assert learned.excluded(4, 1, 0.5 * learned.predicted.need) is None  # a lower need
    later = 120.0 + PARAMS.cost.payback_period
    assert learned.expired(later - 1).excluded(4, 1, learned.predicted.need) is not None
    assert learned.expired(later).excluded(4, 1, learned.predicted.need) is None


def test_a_measured_shortfall_outlasts_what_deficit_steps_left() -> None:
    """Eight entries at most: when full, what a deficit step left (it expires) goes
    before a measured shortfall (for good), and an expired entry goes first of all."""
    measured = ShortConfiguration(parallelism=3, memory_level=1, need=1.0)
    learning = VertexLearning(vertex_id="v", fell_short=(measured,))
    for n in range(8):
        learning = learning.ran_short(ShortConfiguration(
            parallelism=10 + n, memory_level=0, need=1.0, until=1000.0 + n), now=0.0)
    assert measured in learning.fell_short and len(learning.fell_short) == 8
    assert [s.parallelism for s in learning.fell_short][1:] == list(range(11, 18))
    learning = learning.ran_short(ShortConfiguration(parallelism=20, memory_level=0,
                                                     need=1.0), now=1003.5)
    assert [s.parallelism for s in learning.fell_short] == [3, 14, 15, 16, 17, 20]


def test_a_hot_key_stops_the_scale_out_and_says_so() -> None:
    """One key carries 20 % of the records: the busiest subtask can never drop below that,
    so past (1 − h)/(0.1 h) = 40 tasks more buy almost nothing (skew.useful_parallelism);
    the policy takes the cheapest that keeps the busiest subtask up, stops and names it."""
    world = World(hot_share=0.2, gets=0.0, cpu_us=50.0)
    g, steps, _ = run(world, 80_000, windows=3)
    e = evaluate(g, world.observe(g, 80_000, 120.0 * 4), PolicyState(), PARAMS, 120.0 * 4)
    c = g.vertex("counter")
    assert c.parallelism <= 40, steps
    assert world.counter(c.parallelism, c.memory_level, 80_000).busy_ms_per_s_max < 1000
    assert e.decision.vertex("counter").branch is Branch.SKEW_LIMITED
    assert "skew" in e.decision.vertex("counter").reason


def test_what_it_learned_survives_a_json_round_trip() -> None:
    _, _, state = run(World(), 60_000, windows=4)
    for learned in state.learned.values():
        again = VertexLearning.model_validate(json.loads(learned.model_dump_json(by_alias=True)))
        assert again == learned


def test_the_same_inputs_give_the_same_decision() -> None:
    g = graph()
    obs = World().observe(g, 60_000, 120.0)
    a = evaluate(g, obs, PolicyState(), PARAMS, 120.0)
    b = evaluate(g, obs, PolicyState(), PARAMS, 120.0)
    assert a == b


def test_each_decision_forecasts_cost_and_downtime() -> None:
    g = graph()
    e = evaluate(g, World().observe(g, 60_000, 120.0), PolicyState(), PARAMS, 120.0)
    assert e.decision.reconfigures and e.decision.forecast is not None
    assert e.decision.forecast.expected_downtime_s == PARAMS.restart_downtime_s
    assert e.decision.vertex("counter").predicted_capacity is not None


@dataclass(frozen=True)
class MemoryDearPods:
    """A stand-in for the pods' price (packer.pricing.PodPricing): each task's core, and
    memory at 40× spec.cost's price, as if every GiB of cache needed a larger pod."""

    per_gib: float = 40 * 0.134

    def price(self, graph: JobGraph, configuration: Mapping[str, VertexConfig],
              task_cpu: object = None) -> float:
        return sum(c.parallelism * (1 + BASE * 2 ** c.memory_level / 1024 * self.per_gib
                                    if c.memory_level is not None else 1)
                   for c in configuration.values())

    def cheapest(self, graph: JobGraph, options: Mapping[str, Sequence[VertexConfig]],
                 start: Mapping[str, VertexConfig], task_cpu: object = None
                 ) -> tuple[Mapping[str, VertexConfig], float]:
        mixes = [dict(zip(options, combo, strict=True))
                 for combo in itertools.product(*options.values())]
        best = min(({**start, **mix} for mix in mixes), key=lambda c: self.price(graph, c))
        return best, self.price(graph, best)


def test_the_plan_is_chosen_by_the_pods_price_when_there_is_one() -> None:
    """Per task the first jump buys memory (test above); when the pods make memory dear,
    the same jump is the one without it, and both sustain the load."""
    world = World()
    _, steps, _ = run(world, 60_000, windows=3)
    assert steps[0][1] is not None and steps[0][1] > 0
    dear = replace(PARAMS, pods=MemoryDearPods())
    g, dear_steps, _ = run(world, 60_000, windows=3, params=dear)
    p, level = dear_steps[0]
    assert level == 0 and p > steps[0][0], (steps, dear_steps)
    assert world.counter(p, level, 60_000).busyness <= 0.8
    assert MemoryDearPods().price(g, {"c": VertexConfig(p, level)}) < MemoryDearPods().price(
        g, {"c": VertexConfig(*steps[0])})


def test_a_memory_step_resized_in_place_is_sized_without_a_restarts_catch_up() -> None:
    """A step that restarts the job must also drain the backlog its downtime piles up; a
    memory-only step flink-plugin resizes in place stops nothing. So where the cache alone
    keeps up with the load but not with that catch-up, a resizable deployment takes one
    memory step and keeps its tasks, and a restarting one scales out."""
    world = World(miss_us=200.0, gets=3.0, state_bytes=3e8)  # a small, read-heavy state
    # A minute to catch up on ~55 s of downtime: the restart nearly doubles what to carry.
    catching_up = replace(PARAMS, cpu=CpuScaling(scale_down_delay=300, catch_up_duration=60))
    steps: dict[bool, list[tuple[int, int | None]]] = {}
    for resizable in (False, True):
        params = replace(catching_up, restart=RestartFacts(Enactment.SAVEPOINT, 3e8,
                                                           resizable=resizable))
        assert params.restart_downtime_s > 40  # a savepoint restart's catch-up is real
        _, steps[resizable], _ = run(world, 2_000, windows=12, params=params)
    assert steps[True] == [(1, 2)], steps
    assert steps[False][0][0] > 1, steps


@pytest.mark.parametrize("rate", [1_800.0, 2_100.0, 2_400.0])
def test_a_memory_step_resized_in_place_still_runs_the_target_at_the_utilization_target(
        rate: float) -> None:
    """In place, only the restart's catch-up is spared: the step must still carry the
    target at utilizationTarget (the world's truth at the configuration it chose)."""
    world = World(miss_us=200.0, gets=3.0, state_bytes=3e8)
    params = replace(PARAMS, cpu=CpuScaling(scale_down_delay=300, catch_up_duration=60),
                     restart=RestartFacts(Enactment.SAVEPOINT, 3e8, resizable=True))
    g = graph()
    e = evaluate(g, world.observe(g, rate, 120.0), PolicyState(), params, 120.0)
    c = e.configuration["counter"]
    assert e.decision.reconfigures and c.parallelism == 1 and c.memory_level != 0, c  # in place
    assert world.counter(1, c.memory_level, rate).busyness <= 0.5 + 1e-9, c


def test_a_backlogs_catch_up_is_carried_at_full_busyness_not_at_the_target() -> None:
    """As the Flink autoscaler sizes it (target / utilization + catch-up): the backlog
    drains and its catch-up ends, so a step is not sized to carry it at 50 % busy forever.
    Here no state misses (linear scaling): 3 tasks' worth of load and 3 of catch-up on 4
    tasks take 3 / 0.5 + 3 = 9 tasks plus the restart's catch-up, not (3 + 3) / 0.5 = 12
    plus twice that."""
    world = World(miss_us=0.0)
    one = world.counter(1, 0, 1e9).records_in_per_s
    params = replace(PARAMS, cpu=CpuScaling(scale_down_delay=300, catch_up_duration=300))
    g = graph(4, 0)
    counter = world.counter(4, 0, 3 * one)
    observation = Observation(time=120.0, window_s=120.0, vertices={
        "src": source(100.0, counter.records_in_per_s, lag=3 * one * 300, lag_growth=0.0),
        "counter": counter})
    e = evaluate(g, observation, PolicyState(), params, 120.0)
    restart = 3 * params.restart_downtime_s / 300  # tasks' worth of the restart's catch-up
    assert e.decision.reconfigures
    assert e.configuration["counter"].parallelism == math.ceil(3 / 0.5 + 3 + restart)


def test_a_backlog_the_headroom_drains_takes_no_step() -> None:
    """The trigger counts a backlog's catch-up as the sizing does, and as the Flink
    autoscaler's threshold (target / utilizationMax + catch-up): 10 tasks at 60 % of
    their capacity leave 25 % of it once the target is counted at utilizationMax
    (0.60 / 0.80 = 0.75), so a catch-up of 22 % of it takes no step (counting the
    catch-up at utilizationMax, 0.60 + 0.22 > 0.80, would take one). A catch-up of 35 %
    does not fit: that one steps."""
    world = World(miss_us=0.0)
    one = world.counter(1, 0, 1e9).records_in_per_s
    params = replace(PARAMS, cpu=CpuScaling(scale_down_delay=300, catch_up_duration=300))
    g = graph(10, 0)
    counter = world.counter(10, 0, 6 * one)

    def steps(catch_up_tasks: float) -> bool:
        seen = Observation(time=120.0, window_s=120.0, vertices={
            "src": source(100.0, counter.records_in_per_s, lag=catch_up_tasks * one * 300,
                          lag_growth=0.0),
            "counter": counter})
        return evaluate(g, seen, PolicyState(), params, 120.0).decision.reconfigures

    assert not steps(2.2)
    assert steps(3.5)


def point(p: int, level: int | None, service: float, miss: float | None, t: float = 0.0
          ) -> CapacityPoint:
    return CapacityPoint(parallelism=p, memory_level=level, time=t, service_us=service,
                         miss_ratio=miss, cache_accesses_per_record=3.0,
                         state_latency_ns=None if miss is None else 2_000 + miss * 60_000,
                         state_bytes=None if miss is None else 2e9)


def test_a_window_is_merged_once() -> None:
    a = point(2, 0, 100.0, 0.5, t=120.0)
    points = merge((), a, 120.0)
    assert merge(points, a.model_copy(update={"time": 125.0}), 120.0) == points
    twice = merge(points, a.model_copy(update={"time": 240.0, "service_us": 110.0}), 120.0)
    assert twice[0].windows == 2 and twice[0].service_us == 105.0
    assert twice[0].noise > 0
    # The busiest subtask's busy time and records are averaged over the same windows, so
    # their ratio (`_Skew.cost`) compares like with like; a window without records keeps
    # what was measured.
    skewed = merge((), a.model_copy(update={"hottest_ratio": 1.6, "records_ratio": 1.2}),
                   120.0)
    later = a.model_copy(update={"time": 240.0, "hottest_ratio": 1.8, "records_ratio": 1.4})
    both = merge(skewed, later, 120.0)[0]
    assert (both.hottest_ratio, both.records_ratio) == pytest.approx((1.7, 1.3))
    unmeasured = later.model_copy(update={"time": 360.0, "records_ratio": None})
    assert merge((both,), unmeasured, 120.0)[0].records_ratio == pytest.approx(1.3)


def test_a_measured_window_replaces_a_provisional_point_and_never_averages_with_it() -> None:
    """A near-idle window's rate reads low (a pause inflates its busy time): averaged with
    the first measured window it would tilt that measurement; it is replaced instead, and a
    later near-idle window changes nothing where a measured point exists. Among near-idle
    windows the slowest reading stays (asynchronous state can read far too fast)."""
    guess = point(2, 0, 160.0, 0.5, t=120.0).model_copy(update={"provisional": True})
    points = merge((), guess, 120.0)
    measured = merge(points, point(2, 0, 100.0, 0.5, t=240.0), 120.0)
    assert [(p.service_us, p.windows, p.provisional) for p in measured] == [(100.0, 1, False)]
    slower = guess.model_copy(update={"time": 360.0, "service_us": 300.0})
    assert merge(measured, slower, 120.0) == measured
    guesses = merge(points, slower, 120.0)
    assert [(p.service_us, p.provisional, p.time) for p in guesses] == [(300.0, True, 360.0)]
    faster = guess.model_copy(update={"time": 480.0, "service_us": 1.0})
    assert [p.service_us for p in merge(guesses, faster, 120.0)] == [300.0]



def near_idle(busiest_ms: float) -> VertexMetrics:
    """3 % busy at 10,000 records/s (333,333/s of true processing rate), 8 tasks, θ 0.9."""
    return replace(metrics(30.0, 10_000.0, hits=9000.0, misses=1000.0),
                   busy_ms_per_s_max=busiest_ms)


def test_a_vertex_that_only_idles_raises_no_deficit_and_names_no_skew() -> None:
    """Idle, 3 % busy, its busiest subtask 2.2–3 times the mean: the target (150,000/s)
    loads its mean to 45 %, so it is not starved, and its busiest subtask, scaled by the
    near-idle window's ratio, would be past saturation. That is a pause's ratio as likely
    as a hot key's: it neither restarts the job (here for Mid's memory, which waits out
    cpu.scaleDownDelay instead) nor names the vertex Skewed."""
    g = chain(vertex("src", 1, None), vertex("mid", 2, 1), vertex("idle", 8, 1, max_p=128),
              ship=ShipStrategy.HASH)
    for busiest in (66.0, 90.0):
        seen = observe(now=120.0, src=source(20.0, 10_000.0, lag_growth=140_000.0),
                       mid=metrics(20.0, 10_000.0), idle=near_idle(busiest))
        e = evaluate(g, seen, PolicyState(), PARAMS, 120.0)
        assert not e.decision.reconfigures, e.decision.reason
        assert "Idle busiest subtask" not in e.decision.reason
        assert "waiting out cpu.scaleDownDelay" in e.decision.reason
        assert not e.decision.skew, e.decision.skew


def test_a_provisional_point_is_no_warm_cache_reference() -> None:
    """After a restart a near-idle window (θ 0.50) leaves a provisional point; the next,
    measurable window (θ 0.52, 45 s after the restart) must pass the warm-up check on its
    own rather than be taken as warm because it matches that guess."""
    g = chain(vertex("src", 1, None), vertex("counter", 2, 1, max_p=128),
              ship=ShipStrategy.HASH)

    def window(t: float, busy: float, theta: float) -> Observation:
        return Observation(time=t, window_s=20.0, restarted=1000.0, vertices={
            "src": source(20.0, 1000.0),
            "counter": metrics(busy, 1000.0, hits=3000 * theta, misses=3000 * (1 - theta))})

    state = PolicyState()
    for t, busy, theta in ((1025.0, 30.0, 0.50), (1045.0, 300.0, 0.52)):
        state = evaluate(g, window(t, busy, theta), state, PARAMS, t).state
    learned = state.learned["counter"]
    assert [p.provisional for p in learned.points] == [True]  # held back, not measured
    assert learned.warmup is not None and not learned.warmup.warm


def test_provisional_points_elsewhere_do_not_bend_the_surface() -> None:
    """A near-idle window at another configuration, several times too slow, is left out of
    the fit: the plan is the one the measured point alone gives."""
    world = World()
    g = graph(4, 0)
    seen = world.observe(g, 150_000.0, 600.0)
    measured = point(4, 0, world.service_us(4, 0), world.miss(4, 0), t=480.0)
    slow = point(2, 2, 5 * world.service_us(2, 2), world.miss(2, 2), t=360.0).model_copy(
        update={"provisional": True})

    def plan(points: tuple[CapacityPoint, ...]) -> VertexConfig:
        state = PolicyState(learned={"counter": VertexLearning(vertex_id="counter",
                                                               points=points)})
        return evaluate(g, seen, state, PARAMS, 600.0).configuration["counter"]

    assert plan((slow, measured)) == plan((measured,))


def test_points_are_bounded() -> None:
    points: tuple[CapacityPoint, ...] = ()
    for p in range(1, 30):
        points = merge(points, point(p, 0, 100.0, None, t=120.0 * p), 120.0)
    assert len(points) == 8 and points[-1].parallelism == 29


def test_the_fit_is_exact_where_it_measured() -> None:
    world = World()
    pts = [point(p, m, world.service_us(p, m), world.miss(p, m))
           for p, m in ((1, 0), (6, 1))]
    surface = fit(pts, pts[-1], BASE)
    assert math.isclose(surface.service_us(6, 1), world.service_us(6, 1), rel_tol=1e-9)


def test_a_cache_that_holds_the_state_promises_no_gain_from_more_memory() -> None:
    """72 MB of state, uniform keys: one task's cache (level 0) misses 12 %, nine tasks'
    hit all but the 0.2 % that flushes and compactions read (no cache removes those).
    Seven tasks' caches hold the state too: no memory level is worth more there. A miss
    curve fitted through the 0.2 % as if it still rose had everything cached only near
    nine tasks and promised the scale-up a quarter more capacity."""
    pts = [point(p, 0, service, miss, t=120.0 * p).model_copy(update={"state_bytes": 72e6})
           for p, service, miss in ((1, 150.0, 0.124), (9, 54.0, 0.002))]
    surface = fit(pts, pts[-1], BASE)
    assert surface.capacity(7, 1) == pytest.approx(surface.capacity(7, 0), rel=0.01)
    assert surface.capacity(7, 0) == pytest.approx(7 / 9 * surface.capacity(9, 0), rel=0.01)


def test_a_window_without_cache_metrics_keeps_the_curve_at_its_own_cache() -> None:
    """The current window reported no cache ticker and the older point hit everything:
    nothing calibrates the miss curve, so (without a state size) all is cached at ten
    times the current cache, not at ten bytes (which would promise all hits anywhere)."""
    old = point(2, 1, 80.0, 0.0, t=120.0).model_copy(update={"state_bytes": None})
    now = point(4, 0, 90.0, None, t=240.0)
    curve = fit([old, now], now, BASE).curve
    assert curve is not None
    assert curve.full == pytest.approx(10 * 4 * block_cache_bytes(0, BASE))


def test_gains_shrink_to_the_share_the_last_step_confirmed() -> None:
    """A step that measured a third of its predicted gain: the surface's gains over the
    current configuration count a third from then on; losses and the anchor stay."""
    world = World()
    pts = [point(p, m, world.service_us(p, m), world.miss(p, m)) for p, m in ((1, 0), (6, 1))]
    surface = fit(pts, pts[-1], BASE)
    damped = surface.damped(pts[-1], 1 / 3)
    now = surface.capacity(6, 1)
    assert damped.capacity(6, 1) == pytest.approx(now)
    assert damped.capacity(12, 1) == pytest.approx(now + (surface.capacity(12, 1) - now) / 3)
    assert damped.capacity(3, 1) == pytest.approx(surface.capacity(3, 1))
    assert surface.damped(pts[-1], None) is surface


@pytest.mark.parametrize(("measured", "before", "after"), [
    (150.0, None, 0.5),  # half the gain predicted from 100 to 200
    (150.0, 0.5, 0.25),  # a damped step that again fell to half: a quarter of the raw gain
    (195.0, 0.5, 0.5),  # within the noise of the (damped) prediction: unchanged
    (300.0, 0.5, None),  # more than predicted: back to all of it (never above)
    (90.0, None, 0.05),  # a loss: the floor, not a negative share
])
def test_a_steps_measurement_sets_the_share_of_gains_counted(
        measured: float, before: float | None, after: float | None) -> None:
    predicted = Prediction(parallelism=4, memory_level=1, capacity=200.0, need=180.0,
                           from_capacity=100.0)
    judges = capacity._judges(predicted, measured, 0.1)
    assert judges == (after != before)
    if judges:
        assert capacity._realized(predicted, measured, before) == (
            None if after is None else pytest.approx(after))


def test_a_gain_too_small_to_judge_leaves_the_share_as_it_was() -> None:
    small = Prediction(parallelism=4, memory_level=1, capacity=110.0, need=100.0,
                       from_capacity=100.0)
    assert not capacity._judges(small, 100.0, 0.1)


def test_a_step_that_does_not_judge_the_surface_keeps_the_share_it_had() -> None:
    """A step measured within the noise of its prediction says nothing new of how far the
    surface's gains hold: the share an earlier step measured (0.4) stays, and the
    prediction is spent."""
    world = World()
    g = graph(4, 1)
    seen = world.observe(g, 60_000.0, 600.0)
    tpr = seen.vertices["counter"].true_processing_rate
    predicted = Prediction(parallelism=4, memory_level=1, capacity=tpr * 1.02, need=60_000.0,
                           from_capacity=tpr / 2)
    old = VertexLearning(vertex_id="counter", predicted=predicted, realized=0.4)
    learned = capacity._learn(old, g.vertex("counter"), seen, PARAMS)
    assert learned.predicted is None and learned.realized == 0.4
    assert [p.key for p in learned.points] == [(4, 1)]


def test_contention_is_learned_from_two_parallelisms() -> None:
    pts = [point(p, None, 50.0 * (1 + 0.01 * (p - 1)), None, t=p) for p in (2, 12)]
    surface = fit(pts, pts[-1], BASE)
    assert math.isclose(surface.contention, 0.01, rel_tol=0.05)


@settings(max_examples=40, deadline=None)
@given(cpu=st.floats(5, 200), miss_us=st.floats(0, 500), skew=st.floats(0.2, 1.0),
       rate=st.floats(1_000, 100_000))
def test_the_plan_never_leaves_the_busiest_subtask_above_the_trigger(
        cpu: float, miss_us: float, skew: float, rate: float) -> None:
    world = World(cpu_us=cpu, miss_us=miss_us, skew=skew)
    if oracle_infeasible(world, rate):
        return
    g, steps, _ = run(world, rate, windows=12)
    c = g.vertex("counter")
    assert world.counter(c.parallelism, c.memory_level, rate).busyness <= 0.81, steps
    assert len(steps) <= 4, steps


def oracle_infeasible(world: World, rate: float) -> bool:
    return 128 * 1e6 / world.service_us(128, 2) * 0.5 < rate


def test_the_plan_skips_what_fell_short_and_everything_it_dominates() -> None:
    g = graph()
    obs = World().observe(g, 60_000, 120.0)
    first = evaluate(g, obs, PolicyState(), PARAMS, 120.0)
    chosen = first.configuration["counter"]
    learned = first.state.learned["counter"].model_copy(update={"fell_short": (
        ShortConfiguration(parallelism=chosen.parallelism, memory_level=chosen.memory_level,
                           need=1.0),)})
    state = replace(first.state, learned={**first.state.learned, "counter": learned})
    again = evaluate(g, obs, state, PARAMS, 120.0).configuration["counter"]
    assert not (again.parallelism <= chosen.parallelism
                and (again.memory_level or 0) <= (chosen.memory_level or 0)), (chosen, again)


def test_what_it_learns_is_strict_json_also_for_idle_stateless_vertices() -> None:
    """Status is JSON (no Infinity): an idle source that only loses its managed memory
    has no capacity to predict."""
    world = World()
    g = chain(vertex("src", 1, 0), vertex("counter", 1, 0, max_p=128), ship=ShipStrategy.HASH)
    state = PolicyState()
    for n in range(4):
        now = 120.0 * (n + 1)
        obs = world.observe(g, 60_000, now)
        idle = replace(obs, vertices={**obs.vertices, "src": source(1, 60_000)})
        e = evaluate(g, idle, state, PARAMS, now)
        state = e.state
        if e.decision.reconfigures:
            assert e.configuration["src"].memory_level is None
            g = g.with_configuration(e.configuration)
        for learned in state.learned.values():
            json.dumps(learned.model_dump(mode="json", by_alias=True), allow_nan=False)
        json.dumps(e.decision.model_dump(mode="json", by_alias=True), allow_nan=False)


@pytest.mark.parametrize("hot,busiest", [(0.15, 1.08), (0.2, 1.08), (0.3, 1.08), (0.3, 1.5)])
def test_a_hot_key_class_restarts_at_most_once_and_is_named_within_two_windows(
        hot: float, busiest: float) -> None:
    """Issue 22's hot-key class: 10 tasks, the busiest subtask needs 1.08 of a task while
    the mean is at 0.3-0.5 (or 1.5, out of reach at any parallelism). Flink keeps the hot
    key on one subtask, so past the plateau more tasks buy nothing: at most one restart,
    and the vertex is named within two windows of the first evaluation; if it stays hot,
    Skewed says what the job sustains and what would lift it."""
    world = World(hot_share=hot, gets=0.0, cpu_us=50.0)
    rate = busiest * 10 * 20_000 / (1 + 9 * hot)  # the busiest subtask's need at 10 tasks
    g, state, restarts, named, blocked = graph(10, 0), PolicyState(), [], None, []
    for n in range(20):
        now = 120.0 * (n + 1)
        e = evaluate(g, world.observe(g, rate, now), state, PARAMS, now)
        state = e.state
        found = [f for f in e.decision.skew if f.vertex_id == "counter"]
        if found and named is None:
            named = n
        blocked = [f.message for f in found if skew.blocks_scale_out(f)]
        if e.decision.reconfigures:
            restarts.append((now, e.configuration["counter"].parallelism))
            g = g.with_configuration(e.configuration)
    assert len(restarts) <= 1, restarts
    assert named is not None and named <= 1, (named, restarts)
    c = g.vertex("counter")
    hottest = world.counter(c.parallelism, c.memory_level, rate).busy_ms_per_s_max / 1000
    if hottest >= 0.9:  # it stays hot: Skewed says so, what the job sustains, and the remedy
        assert blocked and "the job sustains about" in blocked[0], (hottest, restarts)
        assert "no restart is taken" in blocked[0]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([128, 256, 32768]), st.integers(2, 400),
       st.floats(1.2, 10.0))
def test_the_skew_model_gives_back_the_share_measured_where_it_runs(
        key_groups: int, parallelism: int, above_rounding: float) -> None:
    """The hot key group taken off the busiest subtask's share, and put back at the same
    parallelism, gives the measured share: other parallelisms are predicted from what
    was measured, not from a ratio up to 41 % off it (one key group counted twice)."""
    p = min(parallelism, key_groups - 1)
    rounding = skew.rounding(p, key_groups)
    share = min(1.0, rounding * above_rounding / p)
    hot = skew.hot_key_group_share(share, p, key_groups)
    if hot > 0:
        assert skew.busiest_share(hot, p, key_groups) == pytest.approx(share, rel=1e-9)
        spread = capacity._Skew(share * p, p, key_groups, MappingProxyType({}))
        assert spread.ratio(p) == pytest.approx(share * p, rel=1e-9)


def test_a_busiest_subtask_that_keeps_up_restarts_only_for_a_gain_it_can_measure() -> None:
    """More tasks would raise the busiest subtask's capacity by 8 %: worth a restart when
    it falls behind (the gain makes it keep up), not when it keeps up already within the
    noise margin (three times the 2 % noise over the rate): 8 % is less than a
    measurement confirms, 15 % is not."""
    surface = Surface(a=50.0, b=0.0, contention=0.0, curve=None, base_mib=BASE)
    ratio = {32: 5.65, 43: 5.65 * 43 / 32 / 1.08}
    current, candidates = VertexConfig(32, 0), [VertexConfig(32, 0), VertexConfig(43, 0)]
    now = surface.capacity(32, 0) / ratio[32]

    def assess(rate: float) -> skew_stop.SkewStop | None:
        return skew_stop.assess(current, surface, ratio, 0.15, candidates,
                                VertexLearning(vertex_id="counter"),
                                capacity.SHORT_BY, rate)

    assert assess(rate=1.01 * now) is None  # falling behind: the restart is taken
    stop = assess(rate=0.97 * now)  # 97 % busy: keeps up, so no restart for 8 %
    assert stop is not None and stop.reachable == pytest.approx(1.08 * now)
    assert assess(rate=0.80 * now) is not None  # far from the margin: never a restart
    ratio[43] = 5.65 * 43 / 32 / 1.15
    assert assess(rate=0.97 * now) is None  # 15 %: a gain a measurement confirms


@pytest.mark.parametrize("hot", [0.04, 0.08])
def test_a_saturated_hot_subtask_on_async_state_is_not_taken_for_a_larger_hot_key(
        hot: float) -> None:
    """On ForSt a saturated task's busy time is its whole second while its peers' shows
    only their task thread's work (here 60 %): the busiest looks 1/0.6 times busier than
    its records make it. Its records tell the keys' spread: the step lands where it does
    when busy time shows all the work, and its busiest subtask keeps up. Taken for a
    hot key, that excess would stop the scale-out short, the busiest still saturated."""
    def first_step(thread_share: float) -> tuple[int, float]:
        world = World(hot_share=hot, gets=0.0, cpu_us=50.0, thread_share=thread_share)
        g = graph(10, 0)
        rate = 1.6 * 20_000 / (hot + (1 - hot) / 10)  # the busiest needs 1.6 tasks
        e = evaluate(g, world.observe(g, rate, 120.0), PolicyState(), PARAMS, 120.0)
        assert e.decision.reconfigures, e.decision.reason
        p = e.configuration["counter"].parallelism
        return p, world.counter(p, 0, rate).busy_ms_per_s_max
    (whole, _), (p, busiest) = first_step(1.0), first_step(0.6)
    assert busiest < 1000.0, (p, whole)
    assert p <= whole * 1.1, (p, whole)


@dataclass
class CountedPods:
    """`MemoryDearPods`, counting what the planner asks: every configuration it prices on
    its own (`price`), and every search (`cheapest`), per evaluation."""

    pods: MemoryDearPods = MemoryDearPods()
    priced: list[dict[str, VertexConfig]] = field(default_factory=list)
    searches: int = 0

    def price(self, graph: JobGraph, configuration: Mapping[str, VertexConfig],
              task_cpu: object = None) -> float:
        self.priced.append(dict(configuration))
        return self.pods.price(graph, configuration)

    def cheapest(self, graph: JobGraph, options: Mapping[str, Sequence[VertexConfig]],
                 start: Mapping[str, VertexConfig], task_cpu: object = None
                 ) -> tuple[Mapping[str, VertexConfig], float]:
        self.searches += 1
        return self.pods.cheapest(graph, options, start)


def test_a_scale_down_by_pods_prices_each_configuration_once() -> None:
    """The search returns the chosen mix's price: the evaluation prices on its own only
    the running configuration (CP-SAT per configuration on the hot path)."""
    pods = CountedPods()
    params = replace(PARAMS, pods=pods)
    world, g, state = World(), graph(), PolicyState()
    downs = []
    for n, rate in enumerate([60_000.0] * 6 + [20_000.0] * 8):
        now = 120.0 * (n + 1)
        pods.priced.clear()
        e = evaluate(g, world.observe(g, rate, now), state, params, now)
        state = e.state
        if e.decision.reconfigures:
            if rate == 20_000.0:
                downs.append((g.configuration(), list(pods.priced)))
            g = g.with_configuration(e.configuration)
    assert downs, "the drop to 20k scales down"
    for running, priced in downs:
        assert priced == [running]  # not the chosen mix again: the search priced it


def test_a_surplus_the_pods_do_not_bill_is_priced_once_per_delay_not_every_window() -> None:
    """Per task fewer tasks are cheaper; pods of one fixed size bill the same for both.
    No step is taken, and the pods are priced once per cpu.scaleDownDelay, not in every
    window while the surplus lasts."""

    @dataclass
    class FlatPods(CountedPods):
        def price(self, graph: JobGraph, configuration: Mapping[str, VertexConfig],
                  task_cpu: object = None) -> float:
            self.priced.append(dict(configuration))
            return 10.0

        def cheapest(self, graph: JobGraph, options: Mapping[str, Sequence[VertexConfig]],
                     start: Mapping[str, VertexConfig], task_cpu: object = None
                     ) -> tuple[Mapping[str, VertexConfig], float]:
            self.searches += 1
            return start, 10.0

    world, g, state = World(), graph(p=12, level=1), PolicyState()
    pods = FlatPods()
    params = replace(PARAMS, pods=pods)
    windows, reasons = 20, []
    for n in range(windows):
        now = 120.0 * (n + 1)
        searches = pods.searches
        e = evaluate(g, world.observe(g, 20_000.0, now), state, params, now)
        assert not e.decision.reconfigures, e.decision.reason
        state = e.state
        if pods.searches > searches:
            reasons.append(e.decision.reason)
    # The surplus is seen from the first window and waits 300 s (3 windows) each time.
    assert 1 <= pods.searches <= windows * 120.0 / PARAMS.cpu.scale_down_delay, pods.searches
    assert len(pods.priced) <= pods.searches
    # Said as it is: not a saving too small to pay a restart back, no saving at all.
    assert reasons == ["capacity: steady; the configurations cheaper per task need pods "
                       "that cost no less"] * pods.searches


@dataclass
class CpuPods:
    """A stand-in for the pods' price that bills each task's planned CPU (the footprint's
    core without a plan) and its managed memory at spec.cost's price."""

    plans: list[object] = field(default_factory=list)

    def price(self, graph: JobGraph, configuration: Mapping[str, VertexConfig],
              task_cpu: object = None) -> float:
        self.plans.append(task_cpu)
        cpu = task_cpu if callable(task_cpu) else (lambda _vid, _c: 1.0)
        return sum(c.parallelism * (cpu(vid, c) + (0.0 if c.memory_level is None else
                                                   BASE * 2 ** c.memory_level / 1024 * 0.134))
                   for vid, c in configuration.items())

    def cheapest(self, graph: JobGraph, options: Mapping[str, Sequence[VertexConfig]],
                 start: Mapping[str, VertexConfig], task_cpu: object = None
                 ) -> tuple[Mapping[str, VertexConfig], float]:
        mixes = [{**start, **dict(zip(options, combo, strict=True))}
                 for combo in itertools.product(*options.values())]
        best = min(mixes, key=lambda c: self.price(graph, c, task_cpu))
        return best, self.price(graph, best, task_cpu)


def test_a_step_plans_each_tasks_cpu_for_the_load_at_which_it_would_scale_out() -> None:
    """Tasks are sized for the utilization target (0.5); their slots' CPU for the target at
    utilizationMax (0.8): the busyness the world gives them there, a tenth up. The source,
    too idle to measure (backpressured by the saturated counter), asks for its busy time
    per record at the same load. The plan is kept in what the policy learned, and the
    pods are priced with it."""
    world, pods = World(), CpuPods()
    params = replace(PARAMS, pods=pods)
    g = graph()
    seen = world.observe(g, 60_000, 120.0)
    e = evaluate(g, seen, PolicyState(), params, 120.0)
    after = e.configuration["counter"]
    assert e.decision.reconfigures and after.parallelism > 1
    at_trigger = world.counter(after.parallelism, after.memory_level, 60_000 / 0.8).busyness
    assert e.task_cpu["counter"] == slot_cpu(at_trigger) < 1.0
    src = seen.vertices["src"]
    assert src.busyness < 0.05 < src.records_out_per_s  # too idle for a capacity point
    assert e.task_cpu["src"] == slot_cpu(60_000 / 0.8 / src.true_processing_rate) < 1.0
    # A vertex without operator uids gets no entry in Flink: planned as the footprint's.
    blind = chain(vertex("src", 1, None, uids=("src",)), vertex("counter", 1, 0, max_p=128),
                  ship=ShipStrategy.HASH)
    e = evaluate(blind, world.observe(blind, 60_000, 120.0), PolicyState(), params, 120.0)
    assert e.decision.reconfigures and e.task_cpu["counter"] == 1.0
    assert {vid: e.state.learned[vid].task_cpu for vid in ("src", "counter")} == e.task_cpu
    assert any(callable(plan) for plan in pods.plans)
    # Without a pod price (per-task accounting) there is no plan: the footprint's core.
    plain = evaluate(g, world.observe(g, 60_000, 120.0), PolicyState(), PARAMS, 120.0)
    assert plain.decision.reconfigures and plain.task_cpu == {}


def test_a_memory_only_step_keeps_the_cpu_the_tasks_run_with() -> None:
    """Changing a slot's CPU starts new slots: a memory-only step asks for the CPU planned
    at the last step that changed a parallelism, so it can be resized in place."""
    from policies.evaluate import _planned_cpu

    learned = {"src": VertexLearning(vertex_id="src", task_cpu=0.2),
               "counter": VertexLearning(vertex_id="counter", task_cpu=0.6)}
    state = PolicyState(learned=learned)
    current = {"src": VertexConfig(1, None), "counter": VertexConfig(4, 0)}
    memory_only = {**current, "counter": VertexConfig(4, 1)}
    scale_out = {**current, "counter": VertexConfig(6, 1)}

    def plan(_vid: str, config: VertexConfig) -> float:
        return 0.15 * config.parallelism

    kept, cpu = _planned_cpu(current, memory_only, state, plan, reconfigures=True)
    assert kept == state and cpu == {"src": 0.2, "counter": 0.6}
    moved, cpu = _planned_cpu(current, scale_out, state, plan, reconfigures=True)
    assert cpu == {"src": pytest.approx(0.15), "counter": pytest.approx(0.9)}
    assert moved.learned["counter"].task_cpu == pytest.approx(0.9)
    assert _planned_cpu(current, scale_out, state, None, reconfigures=True)[1] == {}


def _planned_step() -> tuple[World, JobGraph, PolicyState, ScalingParams]:
    """The first step with a pod price: the tasks have a planned CPU (the source's set to
    a tenth here, as if it had been measured)."""
    world, params = World(), replace(PARAMS, pods=CpuPods())
    g = graph()
    e = evaluate(g, world.observe(g, 60_000, 120.0), PolicyState(), params, 120.0)
    assert e.decision.reconfigures and e.task_cpu["counter"] < 1.0
    learned = {**e.state.learned,
               "src": e.state.learned["src"].model_copy(update={"task_cpu": 0.1})}
    return world, g.with_configuration(e.configuration), replace(
        e.state, learned=learned), params


def _throttled(world: World, g: JobGraph, state: PolicyState, params: ScalingParams,
               growth: float, short_by: float = 1.2
               ) -> tuple[Observation, ScalingParams, float]:
    """A window at 80k records/s whose tasks' busy time exceeds the pods' CPU by a fifth:
    the observation, the parameters with those pods, and the share of the CPU the tasks
    wanted that they got (the pods' CPU over their busy time). The counter stays below
    utilizationMax: no vertex is short by its busy time."""
    obs = world.observe(g, 80_000, 360.0)
    busy = sum(v.parallelism * obs.vertices[v.id].busyness for v in g.vertices)
    slots = sum(v.parallelism * (state.learned[v.id].task_cpu or 1.0) for v in g.vertices)
    assert obs.vertices["counter"].busyness < PARAMS.cpu.utilization_max
    src = replace(obs.vertices["src"], pending_records_growth_per_s=growth)
    obs = replace(obs, vertices={**obs.vertices, "src": src})
    pods = busy / short_by
    assert pods < slots + 1  # the slots' CPU is not what the tasks have: the pods' is
    return obs, replace(params, pods_cpu=pods), min(1.0, pods / busy)


def test_a_window_that_waited_for_cpu_adds_a_provisional_point_scaled_by_its_speed() -> None:
    """Busy time at the pods' CPU: the tasks may have waited for it, so the window measured
    the pods, not the configuration. Where nothing was measured it leaves a provisional
    point, its service time scaled by the share of the CPU they got; it judges no step."""
    world, g, state, params = _planned_step()
    obs, throttled, speed = _throttled(world, g, state, params, growth=0.0)
    assert speed < 1.0
    e = evaluate(g, obs, state, throttled, 360.0)
    c = g.vertex("counter")
    point = e.state.learned["counter"].point(c.parallelism, c.memory_level)
    # The same window where every task asks for the footprint's core: never throttled.
    footprint = replace(state, learned={vid: v.model_copy(update={"task_cpu": None})
                                        for vid, v in state.learned.items()})
    clean = evaluate(g, obs, footprint, params, 360.0).state.learned["counter"].point(
        c.parallelism, c.memory_level)
    assert point is not None and clean is not None
    assert point.provisional and not clean.provisional
    assert point.service_us == pytest.approx(clean.service_us * speed, rel=1e-6)
    assert e.state.learned["counter"].predicted == state.learned["counter"].predicted


def test_pods_short_of_cpu_get_new_slots_with_more_cpu_and_the_same_configuration() -> None:
    """Throttled while the sources fall behind, two windows running, and no vertex short
    by its busy time: a step that keeps the configuration and gives every task at least a
    quarter more CPU. The first window only remembers itself (a stall's backlog drained
    at the pods' CPU looks the same); a window between that is not short forgets it."""
    world, g, state, params = _planned_step()
    obs, throttled, _ = _throttled(world, g, state, params, growth=5_000.0)
    first = evaluate(g, obs, state, throttled, 240.0)
    assert not first.decision.reconfigures and first.state.cpu_short_since == 240.0
    calm, _, _ = _throttled(world, g, state, params, growth=0.0)
    between = evaluate(g, calm, first.state, throttled, 300.0)
    assert not between.decision.reconfigures and between.state.cpu_short_since is None
    assert not evaluate(g, obs, between.state, throttled, 360.0).decision.reconfigures
    state = replace(state, learned=first.state.learned, cpu_short_since=240.0)
    # After a gap (windows without metrics, a failover) the first window starts over.
    late = evaluate(g, obs, state, throttled, 240.0 + 3 * obs.window_s)
    assert not late.decision.reconfigures
    assert late.state.cpu_short_since == 240.0 + 3 * obs.window_s
    e = evaluate(g, obs, state, throttled, 360.0)
    assert e.decision.reconfigures and "short of CPU" in e.decision.reason
    assert e.state.cpu_short_since is None
    assert dict(e.configuration) == dict(g.configuration())
    before = {vid: state.learned[vid].task_cpu for vid in ("src", "counter")}
    for vid, cpu in before.items():
        assert cpu is not None
        assert e.task_cpu[vid] >= min(1.0, slot_cpu(cpu * 1.25 - 1e-9))
        assert e.state.learned[vid].task_cpu == e.task_cpu[vid]
    assert e.task_cpu["counter"] > before["counter"]
    # Its own plan, not the growth, decided each vertex's CPU here: nothing to give back.
    assert not any(learned.task_cpu_grown for learned in e.state.learned.values())
    # Pods at half what the tasks wanted: the growth (2.2 times what each had) decides
    # every vertex's CPU, a guess the next windows may give back (`_slots_surplus`).
    short, halved, _ = _throttled(world, g, state, params, growth=5_000.0, short_by=2.0)
    grown = evaluate(g, short, state, halved, 360.0)
    assert grown.decision.reconfigures and "short of CPU" in grown.decision.reason
    assert all(learned.task_cpu_grown for learned in grown.state.learned.values())
    # Not falling behind (a restart's backlog draining), or pods with CPU to spare: none.
    assert not evaluate(g, calm, state, throttled, 360.0).decision.reconfigures
    roomy = replace(params, pods_cpu=100.0)
    assert not evaluate(g, obs, state, roomy, 360.0).decision.reconfigures


def test_pods_that_cost_more_than_the_plan_give_their_cpu_back_when_it_pays() -> None:
    """After a drop, the cheapest plan may be the same configuration on smaller slots:
    against what the running pods cost (`pods_price`), that saving is a step of its own
    once it has waited out the delay and pays its restart back. Without the running
    pods' price nothing says they cost more than the plan: no step."""
    def steps(pods_price: float | None) -> list[tuple[str, dict[str, float]]]:
        world, params = World(), replace(PARAMS, pods=CpuPods())
        g, state, taken = graph(), PolicyState(), []
        for n, rate in enumerate([60_000.0] * 4 + [20_000.0] * 8):
            now = 120.0 * (n + 1)
            e = evaluate(g, world.observe(g, rate, now), state,
                         params if n == 0 else replace(params, pods_price=pods_price), now)
            state = e.state
            if e.decision.reconfigures:
                assert n == 0 or dict(e.configuration) == dict(g.configuration())
                taken.append((e.decision.reason, dict(e.task_cpu)))
                g = g.with_configuration(e.configuration)
        return taken

    assert len(steps(None)) == 1
    first, give_back, *_ = steps(100.0)
    assert "more CPU than their tasks are planned to use" in give_back[0]
    assert give_back[1]["counter"] < first[1]["counter"]
    plan = float(give_back[0].split(" against ")[1].split("/h")[0])
    # A saving within what the predictions may be off by (10 %) takes no restart.
    assert len(steps(plan * 1.08)) == 1
    assert len(steps(plan * 1.15)) == 2


def _memory_give_back(running_cpu: Mapping[str, float] | None) -> Evaluation:
    """Eight tasks at level 2 8 % busy, not allowed to scale in: once the delay has
    passed, memory is given back, with the TaskManagers' slots running at
    `running_cpu` (None: the footprint's core, no plan yet); priced in pods (`CpuPods`,
    the running ones' price as `pods_price`) on a deployment that can resize."""
    world, g = World(), graph(8, 2)
    pinned = ParallelismOverride(vertex_id="counter", min_parallelism=8)
    params = replace(PARAMS, pods=CpuPods(),
                     restart=RestartFacts(Enactment.SAVEPOINT, 3e8, resizable=True),
                     cpu=CpuScaling(scale_down_delay=300, catch_up_duration=0,
                                    overrides=(pinned,)))
    state = PolicyState(learned={vid: VertexLearning(vertex_id=vid, task_cpu=cpu)
                                 for vid, cpu in (running_cpu or {}).items()})
    rate = 0.08 * 8 * 1e6 / world.service_us(8, 2)
    for n in range(6):
        now = 120.0 * (n + 1)
        running = CpuPods().price(g, g.configuration(),
                                  lambda vid, _c: (running_cpu or {}).get(vid, 1.0))
        e = evaluate(g, world.observe(g, rate, now), state,
                     replace(params, pods_price=running), now)
        if e.decision.reconfigures:
            return e
        state = e.state
    raise AssertionError(f"no give-back: {e.decision.reason}")


@pytest.mark.parametrize("running_cpu", [None, {"src": 0.1, "counter": 0.2}])
def test_a_memory_give_back_priced_in_pods_asks_for_new_slots(
        running_cpu: Mapping[str, float] | None) -> None:
    """With a pod price, a give-back is priced on the pods its tasks' planned CPU needs.
    Resized in place, the running pods would stay (nothing billed saved) and the slots a
    full core each (no plan yet) would come back one delay later, in a restart of their
    own. So a give-back of managed memory only asks for new slots at once: a restart
    (the forecast says its downtime, and the controller does not resize,
    `Evaluation.new_slots`), with each task's CPU planned anew."""
    e = _memory_give_back(running_cpu)
    counter = e.configuration["counter"]
    assert counter.parallelism == 8 and (counter.memory_level or 0) < 2
    assert e.new_slots and "on new slots" in e.decision.reason, e.decision.reason
    assert e.task_cpu and max(e.task_cpu.values()) < 1.0
    assert e.state.learned["counter"].task_cpu == e.task_cpu["counter"]
    assert e.decision.forecast is not None and e.decision.forecast.expected_downtime_s > 0


def test_a_source_too_idle_to_measure_asks_for_the_cpu_its_busy_time_shows() -> None:
    """A source reading 300k records/s when never idle, backpressured by the saturated
    counter, is 4 % busy: too idle for a capacity point, yet its busy time says what a
    record costs it. Its slot asks for that at the load the pods are sized for (60k
    records/s at utilizationMax 0.8: 0.25 of a core, a tenth up), not for the footprint's
    core, which would cost more than the counter's tasks. A busy time that says nothing
    (0, or NaN: a legacy source) still asks for the footprint's core."""
    world, params = World(source_rate=300_000), replace(PARAMS, pods=CpuPods())
    g = graph()
    obs = world.observe(g, 60_000, 120.0)
    assert 0 < obs.vertices["src"].busyness < 0.05
    e = evaluate(g, obs, PolicyState(), params, 120.0)
    assert e.decision.reconfigures and e.task_cpu["src"] == pytest.approx(0.3)
    for busy in (0.0, math.nan):
        blind = replace(obs, vertices={**obs.vertices, "src": replace(
            obs.vertices["src"], busy_ms_per_s=busy, busy_ms_per_s_max=busy)})
        assert evaluate(g, blind, PolicyState(), params, 120.0).task_cpu["src"] == 1.0


def test_falling_behind_with_nothing_busy_gives_a_source_its_core_back_for_good() -> None:
    """Busy time leaves out work outside the task thread (a source's split fetcher). If
    the job falls behind, two windows running (one alone may straddle a rise of the
    load), while no task is busy enough to say why, a source that asked for what its
    near-idle busy time showed may be what is short: it gets the footprint's core back on
    new slots, the configuration stays, and it keeps that core (the same windows must not
    start it over)."""
    world, params = World(source_rate=20e6), replace(PARAMS, pods=CpuPods(), pods_cpu=100.0)
    g = graph()
    e = evaluate(g, world.observe(g, 60_000, 120.0), PolicyState(), params, 120.0)
    g, state = g.with_configuration(e.configuration), e.state
    assert e.task_cpu["src"] < 1.0

    def behind(now: float) -> Observation:
        obs = world.observe(g, 60_000, now)
        assert obs.vertices["counter"].busyness < PARAMS.cpu.utilization_max
        return replace(obs, vertices={**obs.vertices, "src": replace(
            obs.vertices["src"], pending_records_growth_per_s=5_000.0)})

    first = evaluate(g, behind(360.0), state, params, 360.0)
    assert not first.decision.reconfigures and first.state.learned["src"].behind_unexplained
    # A window that keeps up in between starts the count over.
    kept_up = evaluate(g, world.observe(g, 60_000, 480.0), first.state, params, 480.0)
    assert not kept_up.decision.reconfigures
    assert not kept_up.state.learned["src"].behind_unexplained
    restarted = evaluate(g, behind(600.0), kept_up.state, params, 600.0)
    assert not restarted.decision.reconfigures
    e = evaluate(g, behind(720.0), restarted.state, params, 720.0)
    assert e.decision.reconfigures and "no task is busy enough" in e.decision.reason
    assert dict(e.configuration) == dict(g.configuration())
    assert e.task_cpu["src"] == 1.0 and e.state.learned["src"].busy_cpu_short
    again = evaluate(g, behind(840.0), e.state, params, 840.0)
    assert not again.decision.reconfigures
    # The source's plan stays the footprint's, in a later step that plans anew as well.
    rise = evaluate(g, world.observe(g, 240_000, 960.0), again.state, params, 960.0)
    assert rise.decision.reconfigures
    assert rise.configuration["counter"].parallelism > g.vertex("counter").parallelism
    assert rise.task_cpu["src"] == 1.0 and rise.state.learned["src"].busy_cpu_short


@dataclass(frozen=True)
class AsyncWorld(World):
    """The counter on ForSt with asynchronous state: below saturation its busy time is the
    task thread's `thread_share` of the work (the state runs on ForSt's I/O threads);
    saturated, the task thread blocks on its full in-flight buffer, which is busy time."""

    thread_share: float = 0.25

    def counter(self, p: int, level: int | None, rate: float) -> VertexMetrics:
        m = super().counter(p, level, rate)
        if m.busy_ms_per_s_max >= 1000.0 - 1e-6:
            return replace(m, async_in_flight_records=6_000.0)
        return replace(m, busy_ms_per_s=m.busy_ms_per_s * self.thread_share,
                       busy_ms_per_s_max=m.busy_ms_per_s_max * self.thread_share,
                       async_in_flight_records=400.0)


def test_asynchronous_state_below_saturation_gives_no_task_back() -> None:
    """Eight tasks at a third of their capacity read 8 % busy on ForSt: sized on that, a
    scale-in to two or three tasks would saturate them. Such a window sizes no scale-in;
    the same vertex with busy time that counts all its work (RocksDB) gives tasks back."""
    rate = 0.33 * 8 * 1e6 / World().service_us(8, 0)
    _, steps, _ = timed_run(AsyncWorld(), rate, windows=12, start=graph(8, 0))
    assert all(p == 8 for _, p, _ in steps), steps
    _, steps, _ = timed_run(World(), rate, windows=12, start=graph(8, 0))
    assert steps and steps[0][1] < 8
    assert World().counter(steps[-1][1], steps[-1][2], rate).busyness <= 0.8


def test_asynchronous_state_saturated_is_measured_and_scaled_out() -> None:
    """Saturated, the blocked task thread's busy time is the truth: it scales out to a
    configuration that keeps up."""
    rate = 40_000.0
    g, steps, _ = timed_run(AsyncWorld(), rate, windows=10)
    assert steps, "a saturated asynchronous vertex scales out"
    c = g.vertex("counter")
    assert World().counter(c.parallelism, c.memory_level, rate).records_in_per_s == \
        pytest.approx(rate)  # it keeps up


def test_asynchronous_state_below_saturation_may_still_give_memory_back() -> None:
    """Eight tasks a third busy at level 2: a quiet window still sizes a give-back of
    memory at the same parallelism; only fewer tasks are ruled out, in every option the
    pod price chooses among as well. (Memory priced as dear as a core per GiB, so that
    giving it back saves more than a restart's worth of the predictions' error,
    `_saves_beyond_error`.)"""
    rate = 0.33 * 8 * 1e6 / World().service_us(8, 2)
    dear = replace(PARAMS, cost=CostSpec(memory_gib_price=1.0))
    _, steps, _ = timed_run(AsyncWorld(), rate, windows=12, start=graph(8, 2), params=dear)
    assert steps and all(p >= 8 for _, p, _ in steps), steps
    assert (steps[-1][2] or 0) < 2, steps


def _with_jvm_cpu(world: World, g: JobGraph, obs: Observation) -> Observation:
    """The window with the TaskManagers' JVM CPU measured: all of the counter's work (its
    I/O threads' too) and the source's."""
    c = g.vertex("counter")
    counter = obs.vertices["counter"].records_in_per_s * world.service_us(
        c.parallelism, c.memory_level) / 1e6
    return replace(obs, cpu_cores_used=counter + obs.vertices["src"].busyness)


@dataclass(frozen=True)
class MeasuredAsyncWorld(AsyncWorld):
    """AsyncWorld with the TaskManagers' JVM CPU in every window (`_with_jvm_cpu`), of
    which `reported` reaches the observation (a scrape that missed TaskManagers)."""

    reported: float = 1.0

    def observe(self, graph: JobGraph, rate: float, now: float) -> Observation:
        obs = _with_jvm_cpu(self, graph, super().observe(graph, rate, now))
        return replace(obs, cpu_cores_used=(obs.cpu_cores_used or 0.0) * self.reported)


def test_asynchronous_state_gives_tasks_back_as_far_as_its_measured_cpu_allows() -> None:
    """Eight tasks at a third of their capacity on ForSt, the JVMs' CPU measured: a core
    a task carries at least what the CPU a record took allows, so the vertex gives tasks
    back, never below what runs it at the utilization target by that CPU (its busiest
    subtask below utilizationMax where a key is hot); the busy time alone (8 %) would
    have sized two or three. JVM CPU that reads below the task threads' busy time says
    nothing, and a give-back of memory in the same step keeps the tasks: the CPU was
    measured at the running level's misses."""
    world, rate = MeasuredAsyncWorld(), 0.33 * 8 * 1e6 / World().service_us(8, 0)
    _, steps, _ = timed_run(world, rate, windows=12, start=graph(8, 0))
    assert steps and steps[-1][1] < 8, steps
    p, level = steps[-1][1], steps[-1][2]
    assert World().counter(p, level, rate).busyness <= PARAMS.cpu.utilization_target + 0.02
    # A hot key: its busiest subtask stays below utilizationMax too.
    hot = 0.15
    g, steps, _ = timed_run(MeasuredAsyncWorld(hot_share=hot), rate, windows=12,
                            start=graph(8, 0))
    c = g.vertex("counter")
    assert steps and c.parallelism < 8, steps
    busiest = World(hot_share=hot).counter(c.parallelism, c.memory_level, rate)
    assert busiest.busy_ms_per_s_max / 1000.0 <= PARAMS.cpu.utilization_max, steps
    # JVM CPU that reads below the task threads' busy time bounds nothing: no task back.
    _, steps, _ = timed_run(MeasuredAsyncWorld(reported=0.06), rate, windows=12,
                            start=graph(8, 0))
    assert all(p == 8 for _, p, _ in steps), steps
    dear = replace(PARAMS, cost=CostSpec(memory_gib_price=1.0))
    _, steps, _ = timed_run(world, rate, windows=12, start=graph(8, 2), params=dear)
    assert steps, "memory and tasks come back"
    before = (8, 2)
    for _, p, level in steps:
        assert not (p < before[0] and (level or 0) < before[1]), steps
        before = (p, level or 0)


@dataclass(frozen=True)
class UnevenThreadWorld(MeasuredAsyncWorld):
    """MeasuredAsyncWorld whose task threads' busy time swings by window (a checkpoint's
    uploads in every other one), while the work and the JVMs' CPU stay as they are."""

    def observe(self, graph: JobGraph, rate: float, now: float) -> Observation:
        obs = super().observe(graph, rate, now)
        swing = 1.5 if int(now / 120.0) % 2 else 0.7
        m = obs.vertices["counter"]
        counter = replace(m, busy_ms_per_s=m.busy_ms_per_s * swing,
                          busy_ms_per_s_max=m.busy_ms_per_s_max * swing)
        return replace(obs, vertices={**obs.vertices, "counter": counter})


def test_a_swinging_task_thread_does_not_hold_back_a_give_back_its_cpu_allows() -> None:
    """Below saturation an asynchronous vertex's tasks come back as far as the JVMs' CPU
    allows (above); the true processing rate from its task thread's busy time is not what
    sizes that, so the rate's noise (here ±36 % window to window) must not widen the load
    the give-back is sized for. Before, it held all 8 tasks where a steady thread gave
    back 2 (gen-102 on ForSt kept 11 tasks at a third of what they needed). The busiest
    subtask's bound still counts the noise: one task more is its margin."""
    rate = 0.33 * 8 * 1e6 / World().service_us(8, 0)
    _, steady, _ = timed_run(MeasuredAsyncWorld(thread_share=0.6), rate, windows=12,
                             start=graph(8, 0))
    _, swinging, state = timed_run(UnevenThreadWorld(thread_share=0.6), rate, windows=12,
                                   start=graph(8, 0))
    assert state.learned["counter"].noise > 0.3  # the busy time's swing, measured
    assert steady == [(480.0, 6, 0)]
    assert swinging and swinging[-1][1] <= steady[-1][1] + 1, (steady, swinging)
    p, level = swinging[-1][1], swinging[-1][2]
    assert World().counter(p, level, rate).busyness <= PARAMS.cpu.utilization_target + 0.02


def test_asynchronous_state_takes_its_cpu_per_record_from_the_jvms() -> None:
    """Busy time leaves out ForSt's I/O threads: the CPU a record takes is the JVMs'
    measured CPU less the synchronous vertices' busy time, over the records. Unmeasured,
    nothing is known; on synchronous state, busy time says it already."""
    world, g = AsyncWorld(), graph(4, 0)
    obs = world.observe(g, 0.5 * 4e6 / world.service_us(4, 0), 120.0)
    measured = _with_jvm_cpu(world, g, obs)
    assert obs.vertices["counter"].busyness < 0.2  # a quarter of the work shows
    assert capacity._async_cpu(g, measured) == {
        "counter": pytest.approx(world.service_us(4, 0) / 1e6)}
    assert capacity._async_cpu(g, obs) == {}
    sync = World().observe(g, 0.5 * 4e6 / world.service_us(4, 0), 120.0)
    assert capacity._async_cpu(g, _with_jvm_cpu(World(), g, sync)) == {}


def test_a_jvm_cpu_reading_that_is_not_finite_measures_nothing() -> None:
    """The JVMs' CPU stands in for asynchronous state's busy time only where it is a
    number: read as inf it made the tasks' share of their CPU 0, and the window's point
    an infinite capacity (its service time scaled by that share)."""
    world, g = AsyncWorld(), graph(4, 0)
    obs = world.observe(g, 0.5 * 4e6 / world.service_us(4, 0), 120.0)
    state = PolicyState(learned={vid: VertexLearning(vertex_id=vid, task_cpu=0.5)
                                 for vid in ("src", "counter")})
    busy = sum(v.parallelism * obs.vertices[v.id].busyness for v in g.vertices)
    for reading in (math.inf, math.nan):
        use = capacity._cpu_use(g, replace(obs, cpu_cores_used=reading), state, None)
        assert use is not None and use.busy == pytest.approx(busy)
    measured = _with_jvm_cpu(world, g, obs)
    use = capacity._cpu_use(g, measured, state, None)
    assert use is not None and use.busy == pytest.approx(measured.cpu_cores_used)


def test_the_cpu_bound_of_an_asynchronous_vertex_never_takes_a_neighbours_share() -> None:
    """Two vertices on asynchronous state with the same records and CPU: `a`'s task thread
    does a fifth of its work, `b`'s all of it. Shared by task-thread busy time (the pods'
    plan), `a` gets a third of its CPU; the bound a scale-in is sized on charges it all
    the JVMs' CPU but what is certainly another's (the source's busy time, `b`'s below
    saturation), never less than `a` took."""
    world, g0 = AsyncWorld(), graph(4, 0)
    m = world.observe(g0, 40_000.0, 120.0).vertices["counter"]
    took = m.processed_per_s * world.service_us(4, 0) / 1e6  # cores, each vertex
    g = chain(vertex("src", 1, None, uids=("src",)), vertex("a", 4, 0, uids=("a",)),
              vertex("b", 4, 0, uids=("b",)), ship=ShipStrategy.HASH)
    src = world.observe(g0, 40_000.0, 120.0).vertices["src"]

    def busy(share: float) -> VertexMetrics:
        ms = 1000.0 * share * took / 4
        return replace(m, busy_ms_per_s=ms, busy_ms_per_s_max=ms)

    obs = Observation(time=120.0, window_s=120.0,
                      vertices={"src": src, "a": busy(0.2), "b": busy(1.0)},
                      cpu_cores_used=src.busyness + 2 * took)
    shared = capacity._async_cpu(g, obs)["a"] * m.processed_per_s
    bound = capacity._async_cpu_ceiling(g, obs)
    assert shared < took / 2
    assert bound["a"] * m.processed_per_s == pytest.approx(took)
    assert bound["b"] * m.processed_per_s >= took
    # A saturated neighbour's busy time counts its wait on a full in-flight buffer: not
    # certainly CPU, so nothing of it is taken off.
    saturated = replace(obs, vertices={**obs.vertices, "b": replace(
        busy(1.0), busy_ms_per_s_max=1000.0)})
    assert capacity._async_cpu_ceiling(g, saturated)["a"] * m.processed_per_s == \
        pytest.approx(2 * took)
    # ... nor a stateful synchronous neighbour's, which may be a state read's wait.
    synchronous = replace(obs, vertices={**obs.vertices, "b": replace(
        busy(1.0), async_in_flight_records=None)})
    assert synchronous.vertices["b"].has_state_backend_metrics
    assert capacity._async_cpu_ceiling(g, synchronous)["a"] * m.processed_per_s == \
        pytest.approx(2 * took)
    # CPU that reads below the task threads' busy time bounds nothing.
    assert capacity._async_cpu_ceiling(g, replace(obs, cpu_cores_used=took)) == {}


def test_asynchronous_state_asks_for_the_cpu_its_jvms_measured() -> None:
    """A saturated counter on ForSt scales out. Without the JVMs' CPU its slots ask for
    the footprint's core; with it, for what a record took there at the load the pods are
    sized for (at most utilizationMax busy at the target), under a core."""
    world, params = AsyncWorld(), replace(PARAMS, pods=CpuPods())
    g, rate = graph(), 40_000.0
    obs = world.observe(g, rate, 120.0)
    blind = evaluate(g, obs, PolicyState(), params, 120.0)
    seen = evaluate(g, _with_jvm_cpu(world, g, obs), PolicyState(), params, 120.0)
    assert blind.decision.reconfigures and seen.decision.reconfigures
    assert blind.task_cpu["counter"] == 1.0
    # Per record, what it took at the running configuration (not a fit across levels).
    p = seen.configuration["counter"].parallelism
    per_task = rate * world.service_us(1, 0) / 1e6 / p
    assert per_task / PARAMS.cpu.utilization_max <= seen.task_cpu["counter"] < 1.0


def test_an_asynchronous_vertex_not_planned_asks_for_the_footprints_core() -> None:
    """Excluded from scaling: no load to size its CPU for (as for a vertex whose cache
    still warms after a restart: the same plan without a need), so its slots keep the
    footprint's core, measured CPU or not (a tenth of a core would starve it in a step
    another vertex takes)."""
    world, g = AsyncWorld(), graph(4, 0)
    obs = _with_jvm_cpu(world, g, world.observe(g, 0.5 * 4e6 / world.service_us(4, 0), 120.0))
    params = replace(PARAMS, pods=CpuPods())
    planned = capacity.evaluate(g, obs, PolicyState(), params, 120.0)
    assert planned.task_cpu is not None and planned.task_cpu("counter", VertexConfig(4, 0)) < 1.0
    excluded = replace(params, cpu=params.cpu.model_copy(update={"overrides": (
        ParallelismOverride(operator_uid="counter", exclude=True),)}))
    kept = capacity.evaluate(g, obs, PolicyState(), excluded, 120.0)
    assert kept.task_cpu is not None and kept.task_cpu("counter", VertexConfig(4, 0)) == 1.0


def _slots_at_a_core(grown: bool, rate: float = 60_000.0
                     ) -> tuple[list[str], tuple[int, Evaluation] | None, Configuration]:
    """After the first step with a pod price (at 60k records/s), the counter's slots ask for
    the footprint's core a task (`grown`: as a step planned in a window that waited for
    CPU leaves them) while the load is `rate`: each window's reason for the counter, the
    first step (window, evaluation) if any, and the configuration it runs."""
    world, g, state, params = _planned_step()
    planned = state.learned["counter"].task_cpu
    assert planned is not None and planned < 0.9
    state = replace(state, learned={**state.learned, "counter": state.learned[
        "counter"].model_copy(update={"task_cpu": 1.0, "task_cpu_grown": grown})})
    said = []
    for n in range(6):
        now = 120.0 * (n + 2)
        slots = {vid: learned.task_cpu or 1.0 for vid, learned in state.learned.items()}
        running = CpuPods().price(g, g.configuration(),
                                  lambda vid, _c, slots=slots: slots[vid])
        e = evaluate(g, world.observe(g, rate, now), state,
                     replace(params, pods_price=running), now)
        said.append(e.decision.vertex("counter").reason)
        if e.decision.reconfigures:
            return said, (n, e), g.configuration()
        state = e.state
    return said, None, g.configuration()


def test_cpu_grown_in_a_throttled_window_is_given_back_on_its_own() -> None:
    """The counter's configuration is the one to keep, but its slots' CPU was grown in a
    window that waited for CPU, to a core a task where its tasks are planned to use less.
    No other vertex has a give-back to carry it: the CPU is a give-back of its own,
    waiting out scaleDownDelay (the reason says so), then new slots for the same
    configuration in one restart. Slots planned from unthrottled windows keep their
    margin: it is the headroom a rising load needs."""
    said, step, running = _slots_at_a_core(grown=True)
    assert step is not None, said
    n, e = step
    assert n >= 2, said  # waited out the 300-s delay
    assert "its slots ask for 1.0 cores a task, grown after throttling" in said[0], said[0]
    assert e.decision.reconfigures and e.new_slots, e.decision.reason
    assert dict(e.configuration) == dict(running)
    assert "ask for more CPU than their tasks are planned to use" in e.decision.reason
    assert e.task_cpu is not None and e.task_cpu["counter"] < 1.0
    assert not e.state.learned["counter"].task_cpu_grown
    said, step, _ = _slots_at_a_core(grown=False)
    assert step is None, step[1].decision.reason if step else None
    # At a higher load its own plan is a scale-out, neither a deficit nor cheaper: only
    # its slots wait, and the step keeps the configuration.
    said, step, running = _slots_at_a_core(grown=True, rate=74_000.0)
    assert step is not None, said
    assert dict(step[1].configuration) == dict(running), step[1].decision.reason


def test_slots_that_do_not_pay_leave_a_configurations_wait_running() -> None:
    """The source's slots were grown after throttling, and its wait has run its delay, but
    giving that CPU back saves too little to restart for. The counter, over-provisioned,
    is half-way through its own wait: the source's wait starts over, the counter's does
    not (it would otherwise start over each time and its give-back never come)."""
    world, params = World(), replace(PARAMS, pods=CpuPods())
    g = graph(40, 0)
    first = evaluate(g, world.observe(g, 60_000, 120.0), PolicyState(), params, 120.0)
    assert not first.decision.reconfigures
    now = 1_000.0
    counter = first.state.learned["counter"]
    assert counter.surplus_since == 120.0  # over-provisioned: its wait began
    learned = {
        "counter": counter.model_copy(update={"surplus_since": now - 150.0, "task_cpu": 0.1}),
        "src": first.state.learned["src"].model_copy(update={
            "task_cpu": 0.3, "task_cpu_grown": True, "surplus_since": now - 400.0,
            "surplus_peak_need": 60_000.0})}
    state = replace(first.state, learned=learned)
    slots = {"src": 0.3, "counter": 0.1}
    running = CpuPods().price(g, g.configuration(), lambda vid, _c: slots[vid])
    e = evaluate(g, world.observe(g, 60_000, now), state,
                 replace(params, pods_price=running), now)
    assert not e.decision.reconfigures, e.decision.reason
    assert "would not pay its restart back" in e.decision.reason
    assert e.state.learned["src"].surplus_since == now  # its own wait starts over
    assert e.state.learned["counter"].surplus_since == now - 150.0, e.decision.reason
