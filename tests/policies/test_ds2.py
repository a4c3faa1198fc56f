"""DS2 on multi-vertex DAGs, with the numbers worked out by hand in each test."""

from __future__ import annotations

import math

import pytest

from policies import ds2
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
    rates = ds2.target_rates(graph, obs, CPU)
    assert rates == {"src": 2000, "flat": 2000, "sink": 6000}


def test_lag_is_drained_within_the_catch_up_duration() -> None:
    graph = chain(vertex("src", 1))
    obs = observe(src=source(500, 1000, lag=300_000))
    assert ds2.target_rates(graph, obs, CpuScaling(catch_up_duration=300))["src"] == 2000
    assert ds2.target_rates(graph, obs, CpuScaling(catch_up_duration=0))["src"] == 1000


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


def keyed(p: int, max_p: int, busy: float, target: float, ship: ShipStrategy) -> ds2.Proposal:
    """src (p=1) -> keyed vertex; the keyed vertex processes 1000/s at `busy` ms/s."""
    graph = chain(vertex("src", 1), vertex("keyed", p, max_p=max_p), ship=ship)
    obs = observe(src=source(1000 * target / 2000, target), keyed=metrics(busy, 1000, 0))
    return ds2.propose(graph, obs, CPU)


@pytest.mark.parametrize(
    ("p", "max_p", "busy", "target", "ship", "expected"),
    [
        # ceil(2 * 2500 / (2000 * 0.5)) = 5, aligned up to 8, a divisor of 128
        (2, 128, 500, 2500, ShipStrategy.HASH, 8),
        (2, 128, 500, 2500, ShipStrategy.FORWARD, 5),  # no hash input: no alignment
        (2, 10, 500, 2500, ShipStrategy.HASH, 5),  # 5 divides 10
        (2, 12, 500, 2500, ShipStrategy.HASH, 6),
        # scale-down 10 -> ceil(10 * 350 / 625) = 6, aligned to 8: still a scale-down
        (10, 128, 800, 350, ShipStrategy.HASH, 8),
        # scale-down 8 -> 5; aligning to 8 would cancel it: the unaligned 5 is kept
        (8, 128, 800, 350, ShipStrategy.HASH, 5),
    ],
)
def test_key_group_alignment_for_hash_inputs(
    p: int, max_p: int, busy: float, target: float, ship: ShipStrategy, expected: int
) -> None:
    proposal = keyed(p, max_p, busy, target, ship)
    assert proposal.triggered
    assert proposal.vertices["keyed"].parallelism == expected


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
