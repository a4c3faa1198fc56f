"""First-fit-decreasing, the replay of Flink's allocator, and the lower bound."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from packer import TaskManagerShape, first_fit_decreasing, flink_first_fit, lower_bound
from packer.greedy import flink_count, group_slots, lower_bound_counts
from tests.packer.conftest import vertex

# Memory is plentiful here, so cpu alone decides.
CPU4 = TaskManagerShape("cpu4", cpu_cores=4, process_mib=16384)


def test_flink_first_fit_follows_request_order_where_ffd_sorts() -> None:
    # Two 1-core tasks requested first, then two 3-core tasks: Flink puts the small ones
    # on TM 1, where no 3-core task fits any more, and needs two more TaskManagers.
    slots = vertex("small", 2, cpu=1.0) + vertex("big", 2, cpu=3.0)
    flink = flink_first_fit(slots, CPU4)
    ffd = first_fit_decreasing(slots, CPU4)
    assert flink is not None and ffd is not None
    assert [[s.label for s in tm] for tm in flink] == [["small#0", "small#1"], ["big#0"],
                                                      ["big#1"]]
    assert len(ffd) == 2
    assert lower_bound(slots, CPU4) == 2


def test_flink_first_fit_merges_requests_with_equal_profiles() -> None:
    # Flink keys requirements by ResourceProfile: a's and c's tasks form one request,
    # served before b's although b's vertex comes between them.
    slots = vertex("a", 1, cpu=1.0) + vertex("b", 1, cpu=2.0) + vertex("c", 3, cpu=1.0)
    flink = flink_first_fit(slots, CPU4)
    assert flink is not None
    assert [[s.label for s in tm] for tm in flink] == [["a#0", "c#0", "c#1", "c#2"], ["b#0"]]


def test_greedy_packings_say_none_when_a_slot_cannot_fit() -> None:
    slots = vertex("huge", 1, cpu=5.0)
    assert first_fit_decreasing(slots, CPU4) is None
    assert flink_first_fit(slots, CPU4) is None
    with pytest.raises(ValueError, match="huge#0"):
        lower_bound(slots, CPU4)


def test_lower_bound_counts_volume_per_dimension(medium: TaskManagerShape) -> None:
    assert lower_bound([], medium) == 0
    # 9 one-core tasks need 3 TaskManagers of 4 cores.
    assert lower_bound(vertex("v", 9), medium) == 3
    # Managed memory decides: 5 tasks of 1200 MiB over 2846 MiB per TaskManager.
    assert lower_bound(vertex("v", 5, cpu=0.1, managed=1200), medium) == 3


def test_lower_bound_counts_tasks_larger_than_half_a_task_manager() -> None:
    # Volume says 2 (3 × 2.1 cores over 4), but no two 2.1-core tasks share a TaskManager.
    assert lower_bound(vertex("v", 3, cpu=2.1), CPU4) == 3


def test_slot_cap_is_a_dimension() -> None:
    capped = TaskManagerShape("capped", cpu_cores=4, process_mib=16384, max_slots=2)
    slots = vertex("v", 5, cpu=0.5)
    assert lower_bound(slots, capped) == 3
    ffd = first_fit_decreasing(slots, capped)
    assert ffd is not None and [len(tm) for tm in ffd] == [2, 2, 1]


def test_lower_bound_counts_is_lower_bound_without_the_slots() -> None:
    capped = TaskManagerShape("capped", cpu_cores=4, process_mib=8192, max_slots=2)
    slots = vertex("v", 3, cpu=0.1) + vertex("w", 2, cpu=2.1)
    requests = [(g.demand, g.size) for g in group_slots(slots)]
    for shape in (CPU4, capped):
        assert lower_bound_counts(requests, shape) == lower_bound(slots, shape)
    assert lower_bound_counts([], CPU4) == 0
    assert lower_bound_counts([(vertex("v", 1)[0].demand(), 0)], CPU4) == 0  # no slots
    assert lower_bound_counts([(vertex("big", 1, cpu=5)[0].demand(), 1)], CPU4) is None


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 12), st.sampled_from([0.1, 0.5, 1.0, 1.5, 2.5]),
                          st.sampled_from([0, 158, 632, 1264])), min_size=1, max_size=5),
       st.sampled_from([None, 2, 4]))
def test_lower_bound_counts_never_exceeds_flinks_first_fit(
        groups: list[tuple[int, float, int]], max_slots: int | None) -> None:
    """Shapes with room are pruned by this bound against Flink's first fit (`flink_count`):
    above it, a shape that would win could be pruned."""
    shape = TaskManagerShape("s", cpu_cores=4, process_mib=8192, max_slots=max_slots)
    requests = [(vertex(f"v{i}", 1, cpu=c, managed=m)[0].demand(), n)
                for i, (n, c, m) in enumerate(groups)]
    count = flink_count(requests, shape)
    bound = lower_bound_counts(requests, shape)
    assert (bound is None) == (count is None)
    assert count is None or (bound is not None and bound <= count)
