"""DS2 on multi-vertex DAGs, with the numbers worked out by hand in each test."""

from __future__ import annotations

import math

import pytest

from policies import ds2
from policies.decision import HistoryRecord, VertexHistory
from policies.model import Edge, JobGraph, ShipStrategy
from policies.spec import CpuScaling, ParallelismOverride
from tests.policies.builders import NOW, chain, metrics, observe, source, vertex

CPU = CpuScaling(scale_down_delay=0)


def parallelism(proposal: ds2.Proposal) -> dict[str, int]:
    return {vid: vp.parallelism for vid, vp in proposal.vertices.items()}


def test_chain_resizes_only_what_needs_it_and_explains_the_numbers() -> None:
    graph = chain(vertex("src"), vertex("map"), vertex("sink"))
    obs = observe(
        src=source(500, 1000),  # TPR 2000, utilization 0.5
        map=metrics(900, 1000),  # TPR 1111, utilization 0.9 > 0.8: the trigger
        sink=metrics(500, 1000, 0),  # TPR 2000, utilization 0.5
    )
    proposal = ds2.propose(graph, obs, CPU)
    assert proposal.triggered
    assert "Map utilization 0.90 outside [0.20, 0.80]" in proposal.reason
    assert parallelism(proposal) == {"src": 2, "map": 4, "sink": 2}  # map: ceil(2 * 0.9 / 0.5)
    m = proposal.vertices["map"]
    assert m.true_processing_rate == pytest.approx(1000 / 0.9)
    assert m.utilization == pytest.approx(0.9)
    assert m.target_rate == 1000
    assert "utilization 0.90" in m.reason and "2→4" in m.reason


def test_cascade_is_solved_in_one_step_from_the_sources_target_rate() -> None:
    # The source is held back (lag grows 1000/s): downstream vertices see only 1000/s
    # but must be sized for the 2000/s that will arrive once the source keeps up.
    graph = chain(vertex("src", 1), vertex("map", 2), vertex("sink", 2))
    obs = observe(
        src=source(500, 1000, lag_growth=1000),
        map=metrics(500, 1000),  # busyness 0.5: fine today, 1.0 at the target rate
        sink=metrics(400, 1000, 0),  # busyness 0.4: fine today, 0.8 at the target rate
    )
    proposal = ds2.propose(graph, obs, CPU)
    assert [proposal.vertices[v].target_rate for v in ("src", "map", "sink")] == [2000] * 3
    assert parallelism(proposal) == {"src": 2, "map": 4, "sink": 4}


def test_join_sums_the_target_rates_of_both_inputs() -> None:
    graph = JobGraph(
        vertices=(vertex("a", 1), vertex("b", 1), vertex("join", 2)),
        edges=(Edge("a", "join", ShipStrategy.HASH), Edge("b", "join", ShipStrategy.HASH)),
    )
    obs = observe(
        a=source(500, 1000),
        b=source(500, 3000),
        join=metrics(1000, 4000, 0),  # TPR 4000 at a 4000/s target: utilization 1.0
    )
    proposal = ds2.propose(graph, obs, CPU)
    assert proposal.vertices["join"].target_rate == 4000
    assert parallelism(proposal) == {"a": 1, "b": 1, "join": 4}


def test_fan_out_feeds_each_branch_the_full_rate() -> None:
    graph = JobGraph(
        vertices=(vertex("src", 1), vertex("hot", 1), vertex("cold", 4)),
        edges=(Edge("src", "hot"), Edge("src", "cold")),
    )
    obs = observe(
        src=source(500, 2000),
        hot=metrics(1000, 2000, 0),  # utilization 1.0 -> ceil(1 * 2) = 2
        cold=metrics(100, 2000, 0),  # utilization 0.1 -> ceil(4 * 0.2) = 1, capped at ceil(4 * 0.4)
    )
    proposal = ds2.propose(graph, obs, CPU)
    assert parallelism(proposal) == {"src": 1, "hot": 2, "cold": 2}
    assert "max scale-down factor" in proposal.vertices["cold"].reason


def test_output_ratio_of_an_upstream_vertex_scales_the_downstream_target() -> None:
    graph = chain(vertex("src", 1), vertex("flat", 1), vertex("sink", 1))
    obs = observe(
        src=source(500, 1000, lag_growth=1000),
        flat=metrics(500, 1000, 3000),  # emits 3 records per input
        sink=metrics(500, 3000, 0),
    )
    rates = ds2.target_rates(graph, obs)
    assert rates == {"src": 2000, "flat": 2000, "sink": 6000}


def test_lag_is_drained_within_the_catch_up_duration_on_top_of_the_utilization_target() -> None:
    # Upstream: capacity = lag / catch-up + target / utilization target (+ restart catch-up).
    graph = chain(vertex("src", 1), vertex("map", 1))
    obs = observe(src=source(500, 1000, lag=300_000), map=metrics(500, 1000))
    cpu = CpuScaling(catch_up_duration=300, scale_down_delay=0)
    assert ds2.catch_up_rates(graph, obs, cpu) == {"src": 1000, "map": 1000}
    assert ds2.target_rates(graph, obs) == {"src": 1000, "map": 1000}
    assert ds2.capacity(1000, 1000, 0.5, cpu, restart=True) == 3000  # 1000 + 1000 / 0.5
    # 300 s of lag is not above the 300 s backlog threshold: the normal band applies
    proposal = ds2.propose(graph, obs, cpu)
    assert parallelism(proposal) == {"src": 2, "map": 2}  # ceil(1 * 3000 / 2000)
    assert ds2.catch_up_rates(graph, obs, CpuScaling(catch_up_duration=0))["src"] == 0


def test_restart_time_is_caught_up_within_the_catch_up_duration() -> None:
    cpu = CpuScaling(restart_time=60, catch_up_duration=300)
    # 1000 / 0.5 + 1000 * 60 / 300: the records that queue up while the job restarts
    assert ds2.capacity(1000, 0, 0.5, cpu, restart=True) == 2200
    assert ds2.capacity(1000, 0, 0.5, cpu, restart=False) == 2000


def test_backlog_widens_the_band_so_nothing_scales_down_while_catching_up() -> None:
    graph = chain(vertex("src", 4), vertex("map", 10))
    # map: TPR 10000/s against 1000/s -> utilization 0.1, would scale down
    calm = observe(src=source(500, 1000), map=metrics(100, 1000))
    assert ds2.propose(graph, calm, CPU).vertices["map"].parallelism == 4
    lagging = observe(src=source(500, 1000, lag=400_000), map=metrics(100, 1000))
    cpu = CpuScaling(scale_down_delay=0, catch_up_duration=0)
    assert ds2.processing_backlog(graph, lagging, cpu)  # 400 s of input > 300 s
    proposal = ds2.propose(graph, lagging, cpu)
    assert not proposal.triggered
    assert "sources processing backlog" in proposal.reason


def test_within_bounds_nothing_moves_even_if_sizing_would() -> None:
    graph = chain(vertex("src", 4), vertex("sink", 4))
    obs = observe(src=source(300, 1000), sink=metrics(700, 1000, 0))
    proposal = ds2.propose(graph, obs, CPU)
    assert not proposal.triggered
    assert parallelism(proposal) == {"src": 4, "sink": 4}
    assert "not triggered" in proposal.reason


def test_idle_vertex_keeps_its_parallelism_and_does_not_trigger() -> None:
    graph = chain(vertex("src", 3), vertex("sink", 5))
    idle = observe(src=source(500, 1000), sink=metrics(0, 0, 0))
    proposal = ds2.propose(graph, idle, CPU)
    assert not proposal.triggered
    assert math.isinf(proposal.vertices["sink"].true_processing_rate)
    assert proposal.vertices["sink"].utilization is None
    overloaded = observe(src=source(1000, 1000), sink=metrics(0, 0, 0))
    proposal = ds2.propose(graph, overloaded, CPU)
    assert proposal.triggered
    assert parallelism(proposal) == {"src": 6, "sink": 5}


@pytest.mark.parametrize(
    ("current", "new", "upper", "max_p", "expected"),
    [
        (2, 5, 200, 128, 8),  # the next divisor of the 128 key groups
        (2, 5, 200, 10, 5),
        (2, 5, 200, 12, 6),
        (2, 65, 200, 128, 128),  # above half the key groups, the search goes up to all
        # Only up to half the key groups (3 of 7) is searched; no divisor there, so the
        # fewest tasks whose busiest task carries no more key groups than at 3.
        (1, 3, 200, 7, 3),
        (4, 2, 200, 7, 1),  # 2 tasks: the busiest carries 3 of 7 key groups; fewer than 2: 1
        (2, 5, 6, 128, 4),  # no divisor up to the bound 6: 4 tasks (32 key groups each)
        # 1.10 would invert these; we keep the current parallelism (as 1.11+ does)
        (4, 5, 6, 128, 4),  # a scale-up aligned down to 4 = current: no change
        (2, 2, 200, 7, 2),  # a vertex sized to stay is left alone (1.10 would go to 1)
        (10, 9, 200, 128, 10),  # a scale-down aligned up past the current: no change
        (8, 5, 200, 128, 8),  # a scale-down aligned up to the current: cancelled
    ],
)
def test_key_group_alignment_as_flink_autoscaler(
    current: int, new: int, upper: int, max_p: int, expected: int
) -> None:
    assert ds2.align(current, new, upper, 1, max_p) == expected


def keyed(p: int, busy: float, target: float, ship: ShipStrategy) -> ds2.Proposal:
    """src (p=1, within its band) -> keyed vertex processing 1000/s at `busy` ms/s."""
    graph = chain(vertex("src", 1), vertex("keyed", p, max_p=128), ship=ship)
    obs = observe(src=source(1000 * target / 2000, target), keyed=metrics(busy, 1000, 0))
    return ds2.propose(graph, obs, CPU)


@pytest.mark.parametrize(
    ("p", "busy", "target", "ship", "expected"),
    [
        # TPR 1000, needs 2500 / 0.5 = 5000: 2 * 5 = 10, aligned up to 16
        (2, 1000, 2500, ShipStrategy.HASH, 16),
        (2, 1000, 2500, ShipStrategy.FORWARD, 10),  # no hash input: no alignment
        # utilization 0.15: 12 * 0.4 (max scale-down) = 5, aligned up to 8
        (12, 1000, 150, ShipStrategy.HASH, 8),
        # 8 * 0.4 = 4 divides 128
        (8, 1000, 150, ShipStrategy.HASH, 4),
    ],
)
def test_key_group_alignment_for_hash_inputs(
    p: int, busy: float, target: float, ship: ShipStrategy, expected: int
) -> None:
    proposal = keyed(p, busy, target, ship)
    assert proposal.triggered
    assert proposal.vertices["keyed"].parallelism == expected


def test_a_vertex_sized_to_stay_is_not_aligned() -> None:
    # keyed: TPR 2000, target 1000, needs 2000: sized to its current 5 tasks. 1.10 would
    # still align 5 to 8 (a listed deviation); we leave it, as 1.11+ does.
    graph = chain(vertex("src", 1), vertex("keyed", 5, max_p=128), ship=ShipStrategy.HASH)
    obs = observe(src=source(500, 1000), keyed=metrics(500, 1000, 0))
    proposal = ds2.propose(graph, obs, CPU)
    assert proposal.vertices["keyed"].wanted == 5
    assert not proposal.triggered


@pytest.mark.parametrize(
    ("cpu", "p", "busy", "expected"),
    [
        (CpuScaling(max_scale_up_factor=1.0, scale_down_delay=0), 2, 1000, 4),  # wants 10
        (CpuScaling(max_scale_down_factor=0.6, scale_down_delay=0), 10, 10, 4),  # wants 1
        (CpuScaling(max_scale_down_factor=0.3, scale_down_delay=0), 10, 10, 7),
        (CpuScaling(min_parallelism=3, scale_down_delay=0), 4, 10, 3),
        (CpuScaling(max_parallelism=6, scale_down_delay=0), 2, 1000, 6),
    ],
)
def test_factor_and_bound_clamps(cpu: CpuScaling, p: int, busy: float, expected: int) -> None:
    # target 2500/s against 1000/s at `busy`: busy 1000 asks for ceil(p * 5)
    graph = chain(vertex("src", 1), vertex("work", p))
    obs = observe(src=source(1000, 2500), work=metrics(busy, 1000, 0))
    assert ds2.propose(graph, obs, cpu).vertices["work"].parallelism == expected


def test_overrides_by_operator_uid_and_vertex_id_and_the_vertex_max_parallelism() -> None:
    graph = chain(
        vertex("src", 1, max_p=5),
        vertex("counter", 1, uids=("count-words", "sum")),
        vertex("sink", 1),
    )
    obs = observe(
        # target 2500/s everywhere, TPR 1000/s: every vertex wants ceil(1 * 2.5 / 0.5) = 5
        src=source(1000, 1000, lag_growth=1500),
        counter=metrics(1000, 1000),
        sink=metrics(1000, 1000, 0),
    )
    cpu = CpuScaling(
        max_parallelism=4,
        scale_down_delay=0,
        overrides=(
            ParallelismOverride(operator_uid="sum", max_parallelism=3),
            ParallelismOverride(vertex_id="sink", min_parallelism=7, max_parallelism=9),
        ),
    )
    assert parallelism(ds2.propose(graph, obs, cpu)) == {"src": 4, "counter": 3, "sink": 7}
    # without the policy's cap, the source stops at its own max parallelism
    no_cap = CpuScaling(max_parallelism=200, scale_down_delay=0)
    assert ds2.propose(graph, obs, no_cap).vertices["src"].parallelism == 5


def test_scale_down_waits_for_the_delay_and_restarts_it_when_interrupted() -> None:
    cpu = CpuScaling(scale_down_delay=300)
    graph = chain(vertex("src", 1), vertex("sink", 10))
    calm = observe(src=source(500, 1000), sink=metrics(50, 1000, 0))  # sink wants 4
    fine = observe(src=source(500, 1000), sink=metrics(500, 1000, 0))  # sink within bounds

    def step(obs_: object, now: float, since: dict[str, float]) -> ds2.Proposal:
        return ds2.propose(graph, calm if obs_ is calm else fine, cpu,
                           scale_down_wanted_since=since, now=now)

    first = step(calm, NOW, {})
    assert first.vertices["sink"].parallelism == 10
    assert first.vertices["sink"].wanted == 4
    assert dict(first.scale_down_wanted_since) == {"sink": NOW}
    assert "scale-down delayed: wanted for 0s of 300s" in first.vertices["sink"].reason
    waiting = step(calm, NOW + 299, dict(first.scale_down_wanted_since))
    assert waiting.vertices["sink"].parallelism == 10
    done = step(calm, NOW + 300, dict(waiting.scale_down_wanted_since))
    assert done.vertices["sink"].parallelism == 4

    interrupted = step(fine, NOW + 100, dict(first.scale_down_wanted_since))
    assert dict(interrupted.scale_down_wanted_since) == {}
    again = step(calm, NOW + 300, dict(interrupted.scale_down_wanted_since))
    assert again.vertices["sink"].parallelism == 10
    assert dict(again.scale_down_wanted_since) == {"sink": NOW + 300}


def test_scale_up_is_never_delayed() -> None:
    graph = chain(vertex("src", 1), vertex("sink", 1))
    obs = observe(src=source(500, 1000), sink=metrics(1000, 1000, 0))
    proposal = ds2.propose(graph, obs, CpuScaling(scale_down_delay=3600))
    assert proposal.vertices["sink"].parallelism == 2


def test_a_vertex_that_cannot_change_never_triggers() -> None:
    # The source (p=1, utilization 0.1) is far below its band but cannot scale in; the
    # pinned sink (utilization 0.9) is above it but pinned; map is inside its band.
    # Upstream leaves the job alone; our DS2 used to resize every vertex here.
    graph = chain(vertex("src", 1), vertex("map", 4), vertex("sink", 1))
    obs = observe(
        src=source(100, 1000),
        map=metrics(300, 1000),  # TPR 3333: utilization 0.3, sized to ceil(4 * 0.6) = 3
        sink=metrics(900, 1000, 0),
    )
    pinned = CpuScaling(
        scale_down_delay=0,
        overrides=(ParallelismOverride(vertex_id="sink", min_parallelism=1, max_parallelism=1),),
    )
    proposal = ds2.propose(graph, obs, pinned)
    assert not proposal.triggered
    assert parallelism(proposal) == {"src": 1, "map": 4, "sink": 1}
    assert proposal.vertices["src"].outside_band and proposal.vertices["sink"].outside_band
    assert proposal.vertices["map"].wanted == 3
    # unpinned, the sink's own change triggers, and map (inside its band) rides along
    proposal = ds2.propose(graph, obs, CPU)
    assert proposal.triggered
    assert parallelism(proposal) == {"src": 1, "map": 3, "sink": 2}
    assert "Sink utilization 0.90" in proposal.reason and "Src" not in proposal.reason


def test_an_excluded_vertex_neither_moves_nor_triggers() -> None:
    graph = chain(vertex("src", 1), vertex("hot", 1, uids=("hot-uid",)))
    obs = observe(src=source(500, 1000), hot=metrics(1000, 1000))  # utilization 1.0
    cpu = CpuScaling(overrides=(ParallelismOverride(operator_uid="hot-uid", exclude=True),))
    proposal = ds2.propose(graph, obs, cpu)
    assert not proposal.triggered
    assert proposal.vertices["hot"].parallelism == 1
    assert "excluded" in proposal.vertices["hot"].reason


def test_a_delayed_scale_down_rides_along_when_another_vertex_triggers() -> None:
    # flink-autoscaler 1.10: a scale-down inside the interval is optional; it never
    # triggers alone but is applied with a rescale that happens anyway.
    cpu = CpuScaling(scale_down_delay=300)
    graph = chain(vertex("src", 1), vertex("cold", 10), vertex("hot", 1))
    calm = observe(src=source(500, 1000), cold=metrics(50, 1000), hot=metrics(500, 1000, 0))
    alone = ds2.propose(graph, calm, cpu, now=NOW)
    assert not alone.triggered and alone.vertices["cold"].delayed
    assert alone.vertices["cold"].parallelism == 10
    busy = observe(src=source(500, 1000), cold=metrics(50, 1000), hot=metrics(1000, 1000, 0))
    along = ds2.propose(graph, busy, cpu, now=NOW + 10,
                        scale_down_wanted_since=alone.scale_down_wanted_since)
    assert along.triggered
    assert parallelism(along) == {"src": 1, "cold": 4, "hot": 2}
    assert "rides along" in along.vertices["cold"].reason


def _record(time: float, **steps: tuple[int, int, float, float]) -> HistoryRecord:
    """One step: per vertex (parallelism before, after, target rate, utilization before)."""
    return HistoryRecord(time=time, step=1, vertices=tuple(
        VertexHistory(vertex_id=vid, parallelism=after, memory_level=0, scaled_up=False,
                      cache_hit_rate=None, state_latency_ns=None, parallelism_before=before,
                      target_rate=rate, utilization=u)
        for vid, (before, after, rate, u) in steps.items()))


def test_scale_outs_are_the_steps_that_raised_a_vertexs_parallelism() -> None:
    history = (_record(NOW, sink=(1, 12, 1000.0, 9.0)),
               _record(NOW + 300, sink=(12, 24, 1000.0, 0.83)),
               _record(NOW + 900, sink=(24, 13, 1000.0, 0.15)),
               _record(NOW + 1200, sink=(13, 20, 1500.0, 0.9)))
    assert ds2.scale_outs(history) == {"sink": (
        ds2.ScaleOut(1, 1000.0, 9.0, 0), ds2.ScaleOut(12, 1000.0, 0.83, 0),
        ds2.ScaleOut(13, 1500.0, 0.9, 0))}
    # A status stored before these fields existed records no scale-out.
    older = VertexHistory(vertex_id="sink", parallelism=8, memory_level=0, scaled_up=False,
                          cache_hit_rate=None, state_latency_ns=None, target_rate=1000.0)
    assert ds2.scale_outs((HistoryRecord(time=NOW, step=1, vertices=(older,)),)) == {}


def test_the_floor_counts_only_a_shortfall_on_the_target_at_about_this_load_and_memory() -> None:
    short = ds2.ScaleOut(6, 1000.0, 0.9, 0)
    assert ds2.scale_in_floor((short,), 1000.0, 0.8, 0) == 6
    assert ds2.scale_in_floor((short,), 1000.0 * ds2.SAME_LOAD, 0.8, 0) == 6
    assert ds2.scale_in_floor((short,), 1000.0 * ds2.SAME_LOAD - 1, 0.8, 0) is None  # lighter
    assert ds2.scale_in_floor((short,), 1000.0, 0.8, 1) is None  # more memory per task now
    assert ds2.scale_in_floor((short,), 1000.0, 0.8, None) == 6  # stripped: no more memory
    # Sized for a backlog's catch-up, not short on the target: no floor.
    assert ds2.scale_in_floor((ds2.ScaleOut(6, 1000.0, 0.7, 0),), 1000.0, 0.8, 0) is None
    assert ds2.scale_in_floor((short, ds2.ScaleOut(3, 900.0, 1.5, 0)), 1000.0, 0.8, 0) == 6


def test_a_scale_down_stops_halfway_above_where_it_was_short_at_this_load() -> None:
    # The sink runs 10 tasks at 5 % busy: DS2 sizes 1 (4 after the scale-down cap). It
    # was scaled out from 4 at this rate, short there: halfway from 5 to 10 is 7.
    graph = chain(vertex("src", 1), vertex("sink", 10))
    calm = observe(src=source(500, 1000), sink=metrics(50, 1000, 0))
    assert ds2.propose(graph, calm, CPU).vertices["sink"].parallelism == 4
    floored = ds2.propose(graph, calm, CPU, scaled_out={"sink": (
        ds2.ScaleOut(4, 1000.0, 0.95, 0), ds2.ScaleOut(2, 2000.0, 1.5, 0))})
    sink = floored.vertices["sink"]
    assert floored.triggered and sink.parallelism == 7
    assert "DS2 sizes 10→4" in sink.reason
    assert "it was scaled out from 4 tasks, short at this load, so not back there: halfway, 7" \
        in sink.reason
    # A floor one below the running parallelism leaves nothing in between: it stays.
    kept = ds2.propose(graph, calm, CPU, scaled_out={"sink": (ds2.ScaleOut(9, 1000.0, 0.9, 0),)})
    assert kept.vertices["sink"].parallelism == 10 and not kept.triggered
    assert "held at 10, keeps 10" in kept.vertices["sink"].reason


def test_the_halfway_stop_is_aligned_to_the_key_groups() -> None:
    # 24 tasks on 120 key groups at 5 % busy: DS2 sizes 10 (the scale-down cap). Short at 10
    # before: halfway from 11 to 24 is 17, which 120 does not divide; 20 does.
    graph = chain(vertex("src", 1), vertex("agg", 24, max_p=120), ship=ShipStrategy.HASH)
    calm = observe(src=source(500, 1000), agg=metrics(50, 1000, 0))
    assert ds2.propose(graph, calm, CPU).vertices["agg"].parallelism == 10
    short_at = {"agg": (ds2.ScaleOut(10, 1000.0, 0.9, 0),)}
    assert ds2.propose(graph, calm, CPU, scaled_out=short_at).vertices["agg"].parallelism == 20
    # Short only at 6: DS2's 10 stays above that, and the floor takes nothing from it.
    short_at = {"agg": (ds2.ScaleOut(6, 1000.0, 0.9, 0),)}
    assert ds2.propose(graph, calm, CPU, scaled_out=short_at).vertices["agg"].parallelism == 10
