"""spec.limits: totals, and how a proposal is clipped to max CPU cores and max memory."""

from __future__ import annotations

from policies import limits, totals
from policies.model import JobGraph, VertexConfig
from policies.params import ScalingParams
from policies.spec import CpuScaling, Limits, TaskFootprint
from tests.policies.builders import chain, vertex

FOOTPRINT = TaskFootprint(cpu_cores=0.5, heap_mib=100, network_mib=50)


def params(max_cpu: float | None = None, max_mem: float | None = None, **cpu: int) -> ScalingParams:
    return ScalingParams(
        cpu=CpuScaling(**cpu),
        limits=Limits(max_cpu_cores=max_cpu,
                      max_memory=None if max_mem is None else f"{max_mem}Mi"),
        footprint=FOOTPRINT,
    )


GRAPH: JobGraph = chain(vertex("a", 2, 0), vertex("b", 2, 0), vertex("c", 2, None))


def test_totals_count_managed_memory_by_level_and_none_for_bottom() -> None:
    config = {"a": VertexConfig(2, 1), "b": VertexConfig(3, None)}
    t = totals(config, params())
    assert t.cpu_cores == 2.5
    assert t.memory_mib == 2 * (150 + 316) + 3 * 150


def test_within_limits_nothing_is_clipped() -> None:
    proposed = {"a": VertexConfig(4, 0), "b": VertexConfig(2, 0), "c": VertexConfig(2, None)}
    clip = limits.clip(GRAPH, proposed, params(max_cpu=4))
    assert not clip.clipped and clip.feasible
    assert dict(clip.configuration) == proposed


def test_cpu_limit_trims_the_largest_increase_first() -> None:
    proposed = {"a": VertexConfig(8, 0), "b": VertexConfig(4, 0), "c": VertexConfig(2, None)}
    clip = limits.clip(GRAPH, proposed, params(max_cpu=6))  # asked 7 cores
    assert clip.clipped and clip.feasible
    assert clip.configuration["a"].parallelism == 6
    assert clip.configuration["b"].parallelism == 4
    assert clip.notes == {"a": "scale-out 2→8 trimmed to 2→6"}
    assert "asked CPU 7 of max 6 cores; got CPU 6 of max 6 cores" in clip.reason


def test_trimming_balances_increases_and_keeps_scale_ins() -> None:
    proposed = {"a": VertexConfig(6, 0), "b": VertexConfig(6, 0), "c": VertexConfig(1, None)}
    clip = limits.clip(GRAPH, proposed, params(max_cpu=4.5))
    assert [clip.configuration[v].parallelism for v in "abc"] == [4, 4, 1]


def test_memory_limit_cancels_scale_ups_before_trimming_scale_outs() -> None:
    proposed = {"a": VertexConfig(2, 2), "b": VertexConfig(3, 0), "c": VertexConfig(2, None)}
    # current 2*(150+158)*2 + 2*150 = 1532; asked 2*(150+632) + 3*308 + 300 = 2788
    clip = limits.clip(GRAPH, proposed, params(max_mem=2000))
    assert clip.configuration["a"] == VertexConfig(2, 0)
    assert clip.configuration["b"] == VertexConfig(3, 0)
    assert clip.notes == {"a": "scale-up to level 2 cancelled"}


def test_trimming_stops_at_the_minimum_parallelism() -> None:
    graph = chain(vertex("a", 1, None))
    clip = limits.clip(graph, {"a": VertexConfig(8, None)}, params(max_cpu=1, min_parallelism=3))
    assert not clip.feasible
    assert clip.configuration["a"] == VertexConfig(1, None)  # kept as it is
    assert "limits cannot be met" in clip.reason and "CPU 1.5 of max 1 cores" in clip.reason
    assert clip.notes == {"a": "limits cannot be met: configuration kept"}


def test_limits_below_the_current_job_keep_it_unchanged() -> None:
    proposed = {"a": VertexConfig(3, 0), "b": VertexConfig(2, 0), "c": VertexConfig(2, None)}
    clip = limits.clip(GRAPH, proposed, params(max_cpu=1))
    assert clip.clipped and not clip.feasible
    assert dict(clip.configuration) == dict(GRAPH.configuration())
