"""Property tests: every placement passes the checker and respects the bounds;
on tiny instances, 'optimal' agrees with exhaustive search."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from packer import (
    Placement,
    Status,
    TaskManagerShape,
    TaskSlot,
    check,
    first_fit_decreasing,
    flink_first_fit,
    lower_bound,
    pack,
)

SHAPES = [
    TaskManagerShape("s", cpu_cores=2, process_mib=4096),
    TaskManagerShape("m", cpu_cores=4, process_mib=8192),
    TaskManagerShape("m-capped", cpu_cores=4, process_mib=8192, max_slots=3),
]
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def jobs(draw: st.DrawFn, max_vertices: int = 6, max_parallelism: int = 12) -> list[TaskSlot]:
    slots: list[TaskSlot] = []
    for v in range(draw(st.integers(0, max_vertices))):
        cpu = draw(st.sampled_from([0.25, 0.5, 1.0, 1.5, 2.0]))
        managed = draw(st.sampled_from([0.0, 158.0, 316.0, 632.0, 1264.0]))
        heap = draw(st.sampled_from([0.0, 64.0, 256.0, 1024.0]))
        network = draw(st.sampled_from([0.0, 32.0]))
        slots.extend(TaskSlot(f"v{v}", i, cpu, managed, heap, network)
                     for i in range(draw(st.integers(1, max_parallelism))))
    return slots


@FAST
@given(jobs(), st.sampled_from(SHAPES))
def test_every_placement_is_valid_and_within_bounds(slots: list[TaskSlot],
                                                    shape: TaskManagerShape) -> None:
    placement = pack(slots, [shape], time_limit_s=0.5)
    assert check(placement, slots, [shape]) == []
    if placement.status is Status.INFEASIBLE:
        assert first_fit_decreasing(slots, shape) is None
        return
    ffd = first_fit_decreasing(slots, shape)
    flink = flink_first_fit(slots, shape)
    assert ffd is not None and flink is not None
    assert lower_bound(slots, shape) <= placement.lower_bound <= placement.count
    assert placement.count <= len(ffd) == placement.ffd_count
    assert placement.count <= len(flink) == placement.flink_count


@FAST
@given(jobs(), jobs(), st.sampled_from(SHAPES))
def test_repacking_from_any_todays_placement_is_valid(before: list[TaskSlot],
                                                      after: list[TaskSlot],
                                                      shape: TaskManagerShape) -> None:
    today = pack(before, [shape], time_limit_s=0.3)
    if today.status is Status.INFEASIBLE:
        return
    current = today.as_current()
    placement = pack(after, [shape], current=current, time_limit_s=0.3)
    assert check(placement, after, [shape], current=current) == []
    if placement.status is not Status.INFEASIBLE:
        assert placement.lower_bound <= placement.count <= placement.ffd_count


@FAST
@given(jobs(max_vertices=3, max_parallelism=3), st.sampled_from(SHAPES))
def test_repacking_the_same_slots_moves_nothing(slots: list[TaskSlot],
                                                shape: TaskManagerShape) -> None:
    today = pack(slots, [shape], time_limit_s=0.5)
    if today.status is not Status.OPTIMAL:
        return
    current = today.as_current()
    again = pack(slots, [shape], current=current, time_limit_s=0.5)
    assert again.count == today.count
    assert again.moved == 0


def _fewest_task_managers(slots: list[TaskSlot], shape: TaskManagerShape) -> int:
    """Exhaustive search over set partitions (canonical bin labels): tiny inputs only."""
    offers = shape.amounts()
    cap = shape.max_slots or len(slots)

    def fits(members: list[TaskSlot]) -> bool:
        return len(members) <= cap and all(
            sum(s.amounts()[k] for s in members) <= offers[k] + 1e-9 for k in offers)

    best = len(slots)

    def place(i: int, bins: list[list[TaskSlot]]) -> None:
        nonlocal best
        if len(bins) >= best:
            return
        if i == len(slots):
            best = len(bins)
            return
        for b in bins:
            b.append(slots[i])
            if fits(b):
                place(i + 1, bins)
            b.pop()
        bins.append([slots[i]])
        place(i + 1, bins)
        bins.pop()

    place(0, [])
    return best


@settings(max_examples=40, deadline=None)
@given(jobs(max_vertices=4, max_parallelism=2), st.sampled_from(SHAPES))
def test_optimal_means_optimal(slots: list[TaskSlot], shape: TaskManagerShape) -> None:
    placement = pack(slots, [shape], time_limit_s=1.0)
    if placement.status is Status.INFEASIBLE:
        return
    assert placement.status is Status.OPTIMAL  # tiny instances are always proven
    assert placement.count == _fewest_task_managers(slots, shape)


@settings(max_examples=30, deadline=None)
@given(jobs(max_vertices=4, max_parallelism=6))
def test_several_shapes_cost_no_more_than_the_best_single_one(slots: list[TaskSlot]) -> None:
    placement = pack(slots, SHAPES, time_limit_s=1.0)
    assert check(placement, slots, SHAPES) == []
    singles = [(pack(slots, [s], time_limit_s=0.5), s) for s in SHAPES]
    # What a shape costs is what the deployment is billed: the placement's TaskManagers,
    # or Flink's own first fit's where it needs more (the replicas written).
    proven = [billed(p) * s.price for p, s in singles if p.status is Status.OPTIMAL]
    if placement.status is not Status.INFEASIBLE and len(proven) == len(SHAPES):
        chosen = next(s for s in SHAPES if s.name == placement.shape)
        assert billed(placement) * chosen.price <= min(proven) + 1e-9


def billed(placement: Placement) -> int:
    return max(placement.count, placement.flink_count or 0)
