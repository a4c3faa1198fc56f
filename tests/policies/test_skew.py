"""policies/skew.py: hot subtasks named, uniform load never flagged under the noise."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from policies import buffering, evaluate, skew
from policies.decision import Branch
from policies.model import Edge, JobGraph, Observation, ShipStrategy, Vertex, VertexMetrics
from policies.params import PolicyState, ScalingParams
from policies.spec import CpuScaling, Policy

from .builders import NOW, metrics, observe, source, vertex

CPU = CpuScaling()
K = 128


def keyed(p: int, max_p: int = K) -> JobGraph:
    return JobGraph(
        vertices=(vertex("src", 1, None), vertex("agg", p, 0, max_p=max_p)),
        edges=(Edge("src", "agg", ShipStrategy.HASH),),
    )


def group_shares(weights: list[float], p: int) -> list[float]:
    """Each subtask's share: Flink's KeyGroupRangeAssignment of len(weights) key groups."""
    n = len(weights)
    return [sum(weights[(i * n + p - 1) // p:((i + 1) * n - 1) // p + 1]) for i in range(p)]


def measured(shares: list[float], offered: float, capacity: float,
             errors: list[float] | None = None, with_records: bool = True,
             in_flight: float | None = None) -> VertexMetrics:
    """A vertex's window as the collector builds it: `offered` records/s split by `shares`
    over tasks of `capacity` records/s, throttled by the busiest (backpressure), each
    subtask's busy time off by (1 + its measurement error); `in_flight`: its state is
    asynchronous, with that many records in flight per subtask."""
    errors = errors or [0.0] * len(shares)
    rate = min(offered, capacity / max(shares))
    busy = [min(1000.0, 1000.0 * s * rate / capacity * (1 + e))
            for s, e in zip(shares, errors, strict=True)]
    return VertexMetrics(
        busy_ms_per_s=sum(busy) / len(busy), busy_ms_per_s_max=max(busy),
        backpressured_ms_per_s=0.0, records_in_per_s=rate, records_out_per_s=rate,
        records_in_per_s_max=max(shares) * rate if with_records else None,
        async_in_flight_records=in_flight,
    )


def noisy_uniform(p: int, load: float, seed: int, records: bool,
                  asynchronous: bool) -> VertexMetrics:
    """Uniform keys over K key groups, each key group's load off by up to ±2 % and each
    subtask's busy time by up to ±5 % (the twin's drift; real Flink's per-subtask spread),
    at `load` of the tasks' capacity (throttled past 1)."""
    rng = random.Random(seed)
    weights = [rng.uniform(0.98, 1.02) for _ in range(K)]
    total = sum(weights)
    shares = group_shares([w / total for w in weights], p)
    errors = [rng.uniform(-0.05, 0.05) for _ in range(p)]
    rate = 1_000.0 * p
    return measured(shares, rate, rate / p / load, errors, with_records=records,
                    in_flight=50.0 if asynchronous else None)


def window(graph: JobGraph, agg: VertexMetrics, offered: float | None = None) -> Observation:
    """The source offers `offered` records/s; what the vertex does not take is lag growth."""
    taken = agg.records_in_per_s
    growth = 0.0 if offered is None else max(0.0, offered - taken)
    return observe(src=source(300.0, taken, lag=1_000.0, lag_growth=growth), agg=agg)


def test_hot_key_that_saturates_one_task_blocks_scale_out() -> None:
    # 4 tasks; one key carries 40 % of 10,000 rec/s, a task does 4,000 rec/s: the hot
    # key alone needs a whole task, wherever it goes.
    weights = [0.6 / (K - 1)] * K
    weights[5] = 0.4
    agg = measured(group_shares(weights, 4), 10_000.0, 4_000.0)
    (finding,) = skew.detect(keyed(4), window(keyed(4), agg, 10_000.0), CPU)
    assert finding.vertex_id == "agg" and finding.keyed and finding.saturated
    assert finding.from_records and finding.hottest_share > 0.5
    assert finding.hot_key_group_share is not None
    assert abs(finding.hot_key_group_share - 0.4) < 0.02
    assert not finding.scale_out_helps and skew.blocks_scale_out(finding)
    assert skew.caps([finding]) == {"agg": finding.useful_parallelism}
    assert finding.useful_parallelism is not None and finding.useful_parallelism >= 4
    assert "Agg" in finding.message and "do not relieve it" in finding.message
    # What would lift it is said once, by the vertex's kind (a DataStream vertex here).
    assert "pre-aggregate" in buffering.remedy(finding, buffering.sql_settings(0.5, 100))


def test_busyness_alone_gives_the_same_answer_without_records() -> None:
    weights = [0.6 / (K - 1)] * K
    weights[5] = 0.4
    agg = measured(group_shares(weights, 4), 10_000.0, 4_000.0, with_records=False)
    (finding,) = skew.detect(keyed(4), window(keyed(4), agg, 10_000.0), CPU)
    assert not finding.from_records and skew.blocks_scale_out(finding)


def test_hot_subtask_that_more_tasks_can_spread_does_not_block() -> None:
    # A key with 20 % of the input: its subtask (an eighth of the rest too) saturates at
    # 8 tasks, while alone on a task it would need 71 % of one.
    weights = [0.8 / (K - 1)] * K
    weights[70] = 0.2
    agg = measured(group_shares(weights, 8), 10_000.0, 2_800.0)
    (finding,) = skew.detect(keyed(8), window(keyed(8), agg, 10_000.0), CPU)
    assert finding.saturated and finding.scale_out_helps and not skew.blocks_scale_out(finding)
    assert skew.caps([finding]) == {}
    assert "more tasks can spread it" in finding.message


def test_several_warm_keys_on_one_subtask_look_like_one_hot_key() -> None:
    """The documented limit: key groups are not observable one by one, so 8 warm keys that
    hash to one subtask are taken for one hot key group (the message says so)."""
    weights = [1.0] * K
    for g in range(8):
        weights[g] = 12.0
    total = sum(weights)
    agg = measured(group_shares([w / total for w in weights], 8), 10_000.0, 3_000.0)
    (finding,) = skew.detect(keyed(8), window(keyed(8), agg, 10_000.0), CPU)
    assert skew.blocks_scale_out(finding)
    assert "several hot keys" in finding.message


def test_skew_below_utilization_max_is_reported_not_saturated() -> None:
    weights = [0.7 / (K - 1)] * K
    weights[0] = 0.3
    agg = measured(group_shares(weights, 4), 3_000.0, 4_000.0)
    (finding,) = skew.detect(keyed(4), window(keyed(4), agg), CPU)
    assert not finding.saturated and not skew.blocks_scale_out(finding)
    assert "not saturated" in finding.message


def test_unkeyed_imbalance_is_reported_and_never_blocks() -> None:
    graph = JobGraph(vertices=(vertex("src", 1, None), vertex("map", 4, None)),
                     edges=(Edge("src", "map", ShipStrategy.REBALANCE),))
    agg = measured([0.55, 0.15, 0.15, 0.15], 10_000.0, 4_000.0)
    (finding,) = skew.detect(graph, observe(src=source(300.0, 10_000.0), map=agg), CPU)
    assert not finding.keyed and finding.scale_out_helps and finding.hot_key_group_share is None
    assert "not keyed" in finding.message


def test_keyed_with_even_records_blames_something_else() -> None:
    # Busy is uneven (a slow TaskManager) while the records are spread evenly.
    agg = measured([0.25] * 4, 10_000.0, 8_000.0, errors=[1.5, 0.0, 0.0, 0.0])
    (finding,) = skew.detect(keyed(4), window(keyed(4), agg), CPU)
    assert finding.scale_out_helps and "not the keys" in finding.message


def test_records_above_hashing_but_under_the_bar_are_not_called_hashing() -> None:
    # Records at 1.3x the mean: past key-group hashing and noise (1.2x at 4 of 128 tasks),
    # under the unsaturated bar (1.5x); busy time alone stands out (a slow task on top).
    agg = measured([0.325, 0.225, 0.225, 0.225], 10_000.0, 8_000.0, errors=[0.4, 0.0, 0.0, 0.0])
    (finding,) = skew.detect(keyed(4), window(keyed(4), agg), CPU)
    assert not finding.saturated and "not the keys" in finding.message
    assert "hashing" not in finding.message
    assert "busiest ×1.30 the mean, under the bar of ×1.50" in finding.message


def test_one_task_and_idle_vertices_are_not_judged() -> None:
    one = measured([1.0], 10_000.0, 4_000.0)
    assert skew.detect(keyed(1), window(keyed(1), one), CPU) == ()
    weights = [0.6 / (K - 1)] * K
    weights[5] = 0.4
    cold = measured(group_shares(weights, 4), 1_000.0, 4_000.0)  # busiest 14 %
    assert skew.detect(keyed(4), window(keyed(4), cold), CPU) == ()


def test_hysteresis_keeps_a_finding_near_the_threshold() -> None:
    shares = [0.35, 0.65 / 3, 0.65 / 3, 0.65 / 3]  # ratio 1.4: below 1.5, above 1.35
    agg = measured(shares, 5_000.0, 4_000.0)  # busiest 44 %: not saturated
    assert skew.detect(keyed(4), window(keyed(4), agg), CPU) == ()
    assert len(skew.detect(keyed(4), window(keyed(4), agg), CPU, previous={"agg"})) == 1


def test_a_saturated_vertex_named_once_is_let_go_at_noise_level() -> None:
    """Uniform keys at 16 of 128 (no rounding), saturated, the busiest subtask's busy time
    10 % over the mean (noise): named last time, it is not named again; hysteresis
    relaxes the margin over rounding (to ×1.18), not the whole bar (to ×1.08)."""
    shares = group_shares([1.0 / K] * K, 16)
    errors = [0.10] + [-0.10 / 15] * 15
    agg = measured(shares, 16_000.0, 1_250.0, errors)  # 80 % busy, the busiest 88 %
    assert agg.busy_ms_per_s_max / agg.busy_ms_per_s == pytest.approx(1.1, abs=0.01)
    assert skew.detect(keyed(16), window(keyed(16), agg), CPU, previous={"agg"}) == ()


def test_a_saturated_busiest_subtask_is_named_at_a_smaller_excess() -> None:
    """Ratio 1.3 at 7 tasks: noise and key-group rounding (19 of 128 key groups against
    18.3, ×1.04) give at most ~1.15. Saturated, it throttles the vertex and is named;
    at 44 % busy the same spread is below SKEW_RATIO and is not."""
    weights = [0.95 / (K - 1)] * K
    weights[3] = 0.05
    shares = group_shares(weights, 7)
    assert 1.25 < max(shares) * 7 < 1.35
    for records in (True, False):
        hot = measured(shares, 20_000.0, 2_000.0, with_records=records)  # busiest saturated
        found = skew.detect(keyed(7), window(keyed(7), hot, 20_000.0), CPU)
        assert [f.vertex_id for f in found] == ["agg"] and found[0].saturated
        assert "not the keys" not in found[0].message
        cool = measured(shares, 2_000.0, 1_500.0, with_records=records)  # busiest ~25 %
        assert skew.detect(keyed(7), window(keyed(7), cool), CPU) == ()
    assert skew.entry_ratio(7, K, saturated=False) == skew.SKEW_RATIO
    assert skew.entry_ratio(7, K, saturated=True) == pytest.approx(19 * 7 / K * 1.2)
    assert skew.entry_ratio(7, K, True, 1 - skew.HYSTERESIS) == pytest.approx(19 * 7 / K * 1.18)
    assert skew.entry_ratio(7, 0, saturated=True) == skew.SKEW_RATIO  # not keyed
    assert skew.entry_ratio(60, K, saturated=True) == skew.SKEW_RATIO  # never above it
    # ... relaxed towards rounding (1.41 at 60 tasks), never below it, where it caps
    assert skew.entry_ratio(60, K, True, 0.9) == pytest.approx(1.41 + (1.5 - 1.41) * 0.9, abs=0.01)
    # Past K/2 tasks rounding alone passes SKEW_RATIO (2 key groups against 1.28 at 100):
    # busy time keeps the cap, the records are held to the margin over rounding.
    assert skew.entry_ratio(100, K, saturated=True) == skew.SKEW_RATIO
    assert skew.entry_ratio(100, K, True, records=True) == pytest.approx(200 / K * 1.2)
    assert skew.entry_ratio(100, K, False, records=True) == pytest.approx(200 / K * 1.2)
    assert skew.entry_ratio(8, K, False, records=True) == skew.SKEW_RATIO
    # Relaxed, a bar at or below rounding (busy time, saturated, at 100 of 128) is 90 % of
    # itself: the hysteresis never raises it.
    assert skew.entry_ratio(100, K, True, 0.9) == pytest.approx(skew.SKEW_RATIO * 0.9)


@pytest.mark.parametrize("k", [10, K, 256])
def test_every_bar_relaxes_downwards_and_stays_above_rounding(k: int) -> None:
    """At any parallelism, any bar: named last time, a vertex is let go lower, never
    higher, and above key-group rounding by most of the bar's margin over it; only a
    saturated vertex's bar, capped at SKEW_RATIO so that a hot key throttling the job is
    named, sits under the margin over rounding (on busy time alone, from 3/4 K tasks,
    under rounding itself)."""
    for p in range(2, k + 1):
        r = skew.rounding(p, k)
        for saturated, records, unmeasured in ((False, False, False), (True, False, False),
                                               (False, True, False), (True, True, False),
                                               (False, True, True)):
            bar = skew.entry_ratio(p, k, saturated, records=records, unmeasured=unmeasured)
            relaxed = skew.entry_ratio(p, k, saturated, 0.9, records=records,
                                       unmeasured=unmeasured)
            assert relaxed < bar
            if not saturated:
                assert bar >= r * skew.SATURATED_MARGIN - 1e-9
            if bar > r:
                assert relaxed > r
                assert relaxed >= min(1.18 * r, r + 0.9 * (bar - r)) - 1e-9
            else:
                assert relaxed == pytest.approx(0.9 * bar)


def test_uniform_keys_at_63_tasks_do_not_pass_for_a_hot_key() -> None:
    """63 of 128 tasks: the busiest subtask owns 3 key groups against 2.03 (rounding
    1.48); its keys 2 % above the others' put its records at 1.51× the mean, over
    SKEW_RATIO. Unsaturated, on either backend, that is rounding, not a hot key."""
    p = 63
    shares = group_shares([1.0 / K] * K, p)
    busiest = shares.index(max(shares))
    weights = [0.98] * K
    first = (busiest * K + p - 1) // p
    for g in range(first, first + 3):
        weights[g] = 1.02
    total = sum(weights)
    shares = group_shares([w / total for w in weights], p)
    assert max(shares) * p > skew.SKEW_RATIO
    for in_flight in (50.0, None):
        agg = measured(shares, 1_000.0 * p, 1_000.0 / 0.4, in_flight=in_flight)
        assert agg.busy_ms_per_s_max < 1000 * CPU.utilization_max
        assert skew.detect(keyed(p), window(keyed(p), agg), CPU) == ()
        assert skew.detect(keyed(p), window(keyed(p), agg), CPU, previous={"agg"}) == ()


def test_a_hot_key_on_asynchronous_state_is_named_by_its_records() -> None:
    """gen-043's keyed ForSt vertex at 8 tasks: its busiest subtask takes 1.43× the mean
    share of records and reads ~60 % busy (its hot key's cache hits a little cheaper),
    which on asynchronous state counts the task thread only. Named (not blocking: nothing
    measured says it is saturated); the same window on synchronous state is below
    SKEW_RATIO and not saturated, so it is not."""
    weights = [0.93 / (K - 1)] * K
    weights[20] = 0.07  # key group 20: subtask 1 of 8
    shares = group_shares(weights, 8)
    assert 1.4 < max(shares) * 8 < 1.46
    errors = [0.03, -0.05, 0.02, -0.01, 0.04, 0.0, -0.02, 0.01]
    for records in (True, False):
        agg = measured(shares, 8_000.0, 2_250.0, errors, with_records=records, in_flight=50.0)
        assert 0.55 < agg.busy_ms_per_s_max / 1000 < 0.7
        assert agg.busy_ms_per_s_max / agg.busy_ms_per_s < 1.4  # busy time alone: no skew
        found = skew.detect(keyed(8), window(keyed(8), agg), CPU)
        if not records:  # busy time alone says nothing on asynchronous state
            assert found == ()
            continue
        (finding,) = found
        assert not finding.saturated and not skew.blocks_scale_out(finding)
        assert "asynchronous" in finding.message and "7% of the input" in finding.message
        assert "several hot keys" in finding.message
        synchronous = measured(shares, 8_000.0, 2_250.0, errors)
        assert skew.detect(keyed(8), window(keyed(8), synchronous), CPU) == ()
    # Named last time and now 75 % busy: within the hysteresis of the bound (0.9 × 80 %),
    # but saturation on asynchronous state is taken at face value, so it stays unblocking.
    warm = measured(shares, 8_000.0, 1_850.0, errors, in_flight=50.0)
    assert 0.72 < warm.busy_ms_per_s_max / 1000 < 0.8
    (finding,) = skew.detect(keyed(8), window(keyed(8), warm), CPU, previous={"agg"})
    assert not finding.saturated and "asynchronous" in finding.message
    # Saturated last time and now 75 %: it stays saturated, by the hysteresis of its own.
    (finding,) = skew.detect(keyed(8), window(keyed(8), warm), CPU, previous={"agg"},
                             previous_saturated={"agg"})
    assert finding.saturated
    # Not keyed: no key groups, so nothing for the records' spread to name.
    flat = JobGraph(vertices=keyed(8).vertices,
                    edges=(Edge("src", "agg", ShipStrategy.REBALANCE),))
    agg = measured(shares, 8_000.0, 2_250.0, errors, in_flight=50.0)
    assert skew.detect(flat, window(flat, agg), CPU) == ()


def test_asynchronous_state_keeps_what_busy_time_does_show() -> None:
    """On ForSt, a saturated busiest subtask with a key too hot for any parallelism still
    blocks scale-out; a busy-time spread with even records is still told as not the keys."""
    weights = [0.6 / (K - 1)] * K
    weights[5] = 0.4
    agg = measured(group_shares(weights, 4), 10_000.0, 4_000.0, in_flight=50.0)
    (finding,) = skew.detect(keyed(4), window(keyed(4), agg, 10_000.0), CPU)
    assert finding.saturated and skew.blocks_scale_out(finding)
    assert "asynchronous" not in finding.message
    # A key of 90 %, blocked last time and now 76 % busy, within the hysteresis: it stays
    # blocked, on either backend; named last time without being saturated, it is not.
    weights = [0.1 / (K - 1)] * K
    weights[5] = 0.9
    for in_flight in (50.0, None):
        warm = measured(group_shares(weights, 4), 10_000.0, 12_150.0, in_flight=in_flight)
        assert 0.72 < warm.busy_ms_per_s_max / 1000 < 0.8
        (kept,) = skew.detect(keyed(4), window(keyed(4), warm, 10_000.0), CPU,
                              previous={"agg"}, previous_saturated={"agg"})
        assert kept.saturated and skew.blocks_scale_out(kept)
        (named,) = skew.detect(keyed(4), window(keyed(4), warm, 10_000.0), CPU,
                               previous={"agg"})
        assert not named.saturated and not skew.blocks_scale_out(named)
    even = group_shares([1.0 / K] * K, 8)
    slow = measured(even, 8_000.0, 2_500.0, [0.7] + [0.0] * 7, in_flight=50.0)
    assert slow.busy_ms_per_s_max / slow.busy_ms_per_s > 1.5
    (finding,) = skew.detect(keyed(8), window(keyed(8), slow), CPU)
    assert "not the keys" in finding.message and not skew.blocks_scale_out(finding)
    assert "hashing and noise" in finding.message
    assert "busiest ×1.00 the mean, under the bar of ×1.20" in finding.message


@settings(max_examples=200, deadline=None)
@given(p=st.integers(2, K), load=st.floats(0.05, 1.2), seed=st.integers(0, 2**32 - 1),
       named=st.booleans())
def test_uniform_keys_on_asynchronous_state_never_pass_for_a_hot_key(
        p: int, load: float, seed: int, named: bool) -> None:
    """At any parallelism, where key-group rounding alone gives a subtask up to 2× the
    mean share of records and of busy time (2 key groups against 1 past 96 of 128 tasks),
    with the noise above: neither the records nor busy time the records account for name
    it (busy time alone says on synchronous state only that scaling by the mean is sound)."""
    agg = noisy_uniform(p, load, seed, records=True, asynchronous=True)
    # Named last time (a transient), it is let go as well.
    found = skew.detect(keyed(p), window(keyed(p), agg), CPU,
                        previous={"agg"} if named else ())
    saturated = agg.busy_ms_per_s_max >= 1000 * CPU.utilization_max
    if saturated and skew.entry_ratio(p, K, True, records=True) < skew.rounding(p, K) * 1.2:
        # Saturated, where SKEW_RATIO caps the bar (41, 42, 54-63 tasks of 128), rounding
        # may be named: never said to block.
        assert not any(skew.blocks_scale_out(f) for f in found)
    else:
        assert found == ()


@settings(max_examples=200, deadline=None)
@given(p=st.integers(2, K // 4), load=st.floats(0.05, 1.2), seed=st.integers(0, 2**32 - 1),
       records=st.booleans(), asynchronous=st.booleans())
def test_uniform_keys_are_never_flagged_under_the_noise(p: int, load: float, seed: int,
                                                         records: bool,
                                                         asynchronous: bool) -> None:
    """Uniform keys (`noisy_uniform`) at up to K/4 tasks, on either backend."""
    agg = noisy_uniform(p, load, seed, records, asynchronous)
    assert skew.detect(keyed(p), window(keyed(p), agg), CPU) == ()
    # Named last time (a transient), it is let go: the hysteresis relaxes the margin
    # over key-group rounding, never down into the noise.
    assert skew.detect(keyed(p), window(keyed(p), agg), CPU, previous={"agg"}) == ()


@settings(max_examples=300, deadline=None)
@given(p=st.integers(2, K), load=st.floats(0.05, 1.2), seed=st.integers(0, 2**32 - 1),
       need=st.floats(1.0, 3.0), records=st.booleans())
def test_uniform_keys_never_block_scale_out(p: int, load: float, seed: int, need: float,
                                            records: bool) -> None:
    """Any parallelism, even where key-group rounding alone makes a subtask 2× the mean,
    and the sources' lag growth asks up to 3× what the vertex takes: no key group stands
    out, so more tasks help, up to max parallelism."""
    agg = noisy_uniform(p, load, seed, records, asynchronous=False)
    found = skew.detect(keyed(p), window(keyed(p), agg, agg.records_in_per_s * need), CPU)
    assert not any(skew.blocks_scale_out(f) for f in found)


def test_a_vertex_past_what_max_parallelism_carries_is_not_blamed_on_a_key() -> None:
    """Uniform keys at 100 of 128 tasks on busy time alone (rounding 1.56, over the bar),
    saturated, the sources asking twice what it takes: at 128 tasks it would still be
    saturated, but no key group stands out: max parallelism limits it."""
    agg = measured(group_shares([1.0 / K] * K, 100), 100_000.0, 800.0, with_records=False)
    (finding,) = skew.detect(keyed(100), window(keyed(100), agg, 2 * agg.records_in_per_s),
                             CPU)
    assert finding.saturated and not skew.blocks_scale_out(finding)
    assert "no key group stands out" in finding.message
    assert finding.best_hottest_busyness is not None and finding.best_hottest_busyness >= 0.8


@settings(max_examples=200, deadline=None)
@given(p=st.integers(2, K // 2), hot=st.floats(0.02, 0.9), group=st.integers(0, K - 1),
       overload=st.floats(1.0, 3.0), records=st.booleans())
def test_a_hot_key_blocks_exactly_when_its_key_group_alone_is_too_much(
        p: int, hot: float, group: int, overload: float, records: bool) -> None:
    """The busiest subtask saturated (offered up to 3× what it takes, the rest is lag);
    the hot key group's own need decides, give or take the one key group by which a
    subtask's count of key groups is unknown (⌊K/p⌋ or ⌈K/p⌉), at the mean load of the
    key groups the other subtasks own (at most 1/(K − ⌈K/p⌉) of the vertex's)."""
    weights = [(1.0 - hot) / (K - 1)] * K
    weights[group] = hot
    shares = group_shares(weights, p)
    assume(max(shares) * p >= skew.SKEW_RATIO)  # below, the spread is not called skew
    offered = 10_000.0
    capacity = max(shares) * offered / overload
    agg = measured(shares, offered, capacity, with_records=records)
    found = skew.detect(keyed(p), window(keyed(p), agg, offered), CPU)

    def need(share: float) -> float:  # the busiest subtask's need at K tasks
        return max(share, 1.0 / K) * offered / capacity

    blocked = any(skew.blocks_scale_out(f) for f in found)
    one_group = 1.0 / (K - -(-K // p))
    if need(hot - one_group) >= CPU.utilization_max:
        assert blocked
    elif need(hot + one_group) < CPU.utilization_max:
        assert not blocked


def test_evaluate_reports_skew_without_changing_ds2() -> None:
    """DS2 keeps proposing tasks for the hot vertex (its faithful behaviour): the skew is
    reported beside it, in every evaluation, and remembered for the hysteresis."""
    weights = [0.6 / (K - 1)] * K
    weights[5] = 0.4
    agg = measured(group_shares(weights, 4), 10_000.0, 4_000.0)
    graph, obs = keyed(4), window(keyed(4), agg)
    params = ScalingParams(policy=Policy.DS2, cpu=CpuScaling(catch_up_duration=0))
    result = evaluate(graph, obs, PolicyState(), params, NOW)
    plain = evaluate(graph, Observation(NOW, 120.0, {
        "src": obs.vertices["src"], "agg": metrics(agg.busy_ms_per_s, 10_000.0)}),
        PolicyState(), params, NOW)
    assert [f.vertex_id for f in result.decision.skew] == ["agg"]
    assert result.state.skewed == {"agg"} and result.state.skew_saturated == {"agg"}
    assert result.configuration == plain.configuration  # the decision is DS2's, unchanged
    assert result.decision.vertex("agg").branch == plain.decision.vertex("agg").branch
    # Also when DS2 does not trigger, and after a reconfiguration.
    calm = measured(group_shares(weights, 4), 3_000.0, 4_000.0)
    steady = evaluate(graph, window(graph, calm), PolicyState(), params, NOW)
    assert steady.decision.vertex("agg").branch is Branch.NOT_TRIGGERED
    assert [f.vertex_id for f in steady.decision.skew] == ["agg"]
    assert steady.state.skewed == {"agg"} and steady.state.skew_saturated == frozenset()
    # A reconfiguration's state (`_record`) keeps both for the hysteresis: the sources'
    # lag growth makes DS2 scale out.
    grown = evaluate(graph, window(graph, agg, 20_000.0), PolicyState(), params, NOW)
    assert grown.decision.reconfigures
    assert grown.state.skewed == {"agg"} and grown.state.skew_saturated == {"agg"}
    # Stored in status verbatim: the record reads back equal.
    again = type(result.decision).model_validate_json(result.decision.model_dump_json())
    assert again == result.decision


def test_missing_vertices_are_skipped() -> None:
    graph = keyed(4)
    obs = Observation(NOW, 120.0, {"src": source(300.0, 1_000.0)})
    assert skew.detect(graph, obs, CPU) == ()


def test_graph_order_and_names() -> None:
    weights = [0.6 / (K - 1)] * K
    weights[5] = 0.4
    hot = measured(group_shares(weights, 4), 10_000.0, 4_000.0)
    graph = JobGraph(
        vertices=(vertex("src", 1, None), Vertex("b", "", K, 4), Vertex("a", "Second", K, 4)),
        edges=(Edge("src", "b", ShipStrategy.HASH), Edge("b", "a", ShipStrategy.HASH)),
    )
    obs = observe(src=source(300.0, 10_000.0), a=hot, b=hot)
    found = skew.detect(graph, obs, CPU)
    assert [f.vertex_id for f in found] == ["b", "a"]
    assert found[0].message.startswith("b:") and found[1].message.startswith("Second:")


def test_numbers_that_are_not_numbers_give_no_finding() -> None:
    nan = float("nan")
    for bad in ({"busy_ms_per_s": nan}, {"busy_ms_per_s_max": float("inf")},
                {"records_in_per_s": nan}, {"records_in_per_s_max": nan}):
        agg = VertexMetrics(**{**dict(busy_ms_per_s=357.0, busy_ms_per_s_max=1000.0,
                                      backpressured_ms_per_s=0.0, records_in_per_s=10_000.0,
                                      records_out_per_s=10_000.0, records_in_per_s_max=7_000.0),
                               **bad})
        found = skew.detect(keyed(4), window(keyed(4), agg), CPU)
        assert all(math.isfinite(f.ratio) and math.isfinite(f.hottest_share) for f in found)
