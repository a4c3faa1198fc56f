"""pack(): the edge cases of issue 3, today's placement, shapes, and the checker's teeth."""

from __future__ import annotations

import dataclasses

import pytest

import packer.solver as solver
from packer import (
    CurrentPlacement,
    Placement,
    Status,
    TaskManagerLoad,
    TaskManagerShape,
    TaskSlot,
    check,
    pack,
)
from tests.packer.conftest import MEDIUM, vertex

SMALL = TaskManagerShape("small", cpu_cores=2, process_mib=4096)
LARGE = TaskManagerShape("large", cpu_cores=8, process_mib=16384)


def valid(placement: Placement, slots: list[TaskSlot], shapes: list[TaskManagerShape],
          current: CurrentPlacement | None = None) -> Placement:
    assert check(placement, slots, shapes, current=current) == []
    return placement


def test_empty_input_needs_no_task_manager() -> None:
    placement = valid(pack([], [MEDIUM]), [], [MEDIUM])
    assert placement.count == 0
    assert placement.lower_bound == 0
    assert placement.status is Status.OPTIMAL
    assert placement.moved == 0


def test_a_single_giant_slot_fills_one_task_manager_exactly() -> None:
    whole = MEDIUM.amounts()
    slots = [TaskSlot("giant", 0, whole["cpu"], whole["managed"], whole["heap"],
                      whole["network"])]
    placement = valid(pack(slots, [MEDIUM]), slots, [MEDIUM])
    assert placement.count == 1
    assert placement.status is Status.OPTIMAL
    assert all(abs(u - 1.0) < 1e-9 for u in placement.task_managers[0].utilisation.values())


def test_a_slot_that_fits_no_shape_is_named_in_the_reason() -> None:
    slots = vertex("ok", 2) + vertex("greedy", 1, cpu=1.0, managed=5000)
    placement = valid(pack(slots, [MEDIUM, SMALL]), slots, [MEDIUM, SMALL])
    assert placement.status is Status.INFEASIBLE
    assert placement.count == 0 and placement.shape is None
    assert "greedy#0" in placement.reason
    assert "5000 MiB managed" in placement.reason


def test_no_single_shape_fitting_every_slot_is_infeasible_too() -> None:
    wide = TaskManagerShape("wide", cpu_cores=16, process_mib=2048)  # many cores, little memory
    slots = vertex("cpu-hungry", 1, cpu=10) + vertex("memory-hungry", 1, cpu=1, managed=2000)
    placement = valid(pack(slots, [wide, MEDIUM]), slots, [wide, MEDIUM])
    assert placement.status is Status.INFEASIBLE
    assert "no single allowed shape" in placement.reason
    assert "cpu-hungry#0" in placement.reason and "memory-hungry#0" in placement.reason


def test_all_stateless_job_needs_no_managed_memory() -> None:
    slots = vertex("source", 6, cpu=1.0) + vertex("sink", 6, cpu=0.5, heap=100)
    placement = valid(pack(slots, [MEDIUM]), slots, [MEDIUM])
    assert placement.count == 3  # 9 cores over 4-core TaskManagers
    assert placement.status is Status.OPTIMAL
    assert all(tm.utilisation["managed"] == 0.0 for tm in placement.task_managers)


def test_todays_placement_that_no_longer_fits_is_repaired_and_moves_counted() -> None:
    slots = vertex("state", 4, cpu=1.0, managed=632)
    today = pack(slots, [MEDIUM])
    assert today.count == 1
    # Memory level up: 4 × 1264 MiB no longer fit one TaskManager's 2846 MiB.
    grown = vertex("state", 4, cpu=1.0, managed=1264)
    current = today.as_current()
    placement = valid(pack(grown, [MEDIUM], current=current), grown, [MEDIUM], current)
    assert placement.count == 2
    assert placement.status is Status.OPTIMAL
    assert placement.moved == 2  # two tasks stay on today's TaskManager, two leave
    kept = [tm for tm in placement.task_managers if tm.name == today.task_managers[0].name]
    assert len(kept) == 1 and len(kept[0].slots) == 2


def test_an_optimal_placement_today_is_kept_with_zero_moves() -> None:
    slots = vertex("a", 5, cpu=1.0, managed=316) + vertex("b", 7, cpu=0.5, managed=158)
    today = pack(slots, [MEDIUM])
    current = today.as_current()
    again = valid(pack(slots, [MEDIUM], current=current), slots, [MEDIUM], current)
    assert again.moved == 0
    assert again.assignment() == today.assignment()


def test_a_small_change_moves_few_tasks() -> None:
    slots = (vertex("source", 8, cpu=0.5) + vertex("window", 10, cpu=1.0, managed=316)
             + vertex("sink", 4, cpu=0.25))
    today = pack(slots, [MEDIUM])
    current = today.as_current()
    grown = slots + vertex("window", 2, cpu=1.0, managed=316, first=10)
    placement = valid(pack(grown, [MEDIUM], current=current), grown, [MEDIUM], current)
    assert placement.count <= today.count + 1
    assert placement.moved <= 2


def test_changing_shape_moves_every_existing_task() -> None:
    slots = vertex("v", 6, cpu=1.0)
    current = CurrentPlacement("small", {s.key: f"old-{s.subtask // 2}" for s in slots})
    placement = valid(pack(slots, [LARGE], current=current), slots, [LARGE], current)
    assert placement.shape == "large"
    assert placement.moved == 6


def test_the_cheapest_shape_wins() -> None:
    slots = vertex("v", 8, cpu=1.0, managed=200)
    placement = valid(pack(slots, [SMALL, LARGE]), slots, [SMALL, LARGE])
    # 4 small (cost 4 × 3) against 1 large (cost 12): a tie, broken by price then name.
    assert placement.count * {"small": 3.0, "large": 12.0}[placement.shape or ""] == 12.0
    cheap_large = dataclasses.replace(LARGE, cost=10.0)
    placement = valid(pack(slots, [SMALL, cheap_large]), slots, [SMALL, cheap_large])
    assert placement.shape == "large" and placement.count == 1


def test_slot_cap_is_respected() -> None:
    capped = TaskManagerShape("capped", cpu_cores=8, process_mib=16384, max_slots=3)
    slots = vertex("v", 7, cpu=0.5)
    placement = valid(pack(slots, [capped]), slots, [capped])
    assert placement.count == 3
    assert max(len(tm.slots) for tm in placement.task_managers) <= 3


def test_flinks_own_allocator_count_and_gap_are_reported() -> None:
    cpu4 = TaskManagerShape("cpu4", cpu_cores=4, process_mib=16384)
    slots = vertex("small", 2, cpu=1.0) + vertex("big", 2, cpu=3.0)
    placement = valid(pack(slots, [cpu4]), slots, [cpu4])
    assert placement.count == 2
    assert placement.flink_count == 3
    assert placement.flink_gap == 1


def test_duplicate_tasks_and_missing_shapes_are_refused() -> None:
    with pytest.raises(ValueError, match="duplicate"):
        pack(vertex("v", 2) + vertex("v", 1), [MEDIUM])
    with pytest.raises(ValueError, match="shape"):
        pack(vertex("v", 2), [])


def test_pack_is_deterministic(monkeypatch: pytest.MonkeyPatch) -> None:
    # 1.2 + 0.9 > 2 cores: first fit decreasing stays above the volume bound, so both
    # CP-SAT stages run (fewest TaskManagers, then fewest moves from today) and prove
    # their optimum; which of the equal optima comes back must not vary.
    two_cores = TaskManagerShape("two", cpu_cores=2, process_mib=16384)
    slots = (vertex("a", 5, cpu=1.2) + vertex("b", 7, cpu=0.9) + vertex("c", 6, cpu=0.35)
             + vertex("d", 4, cpu=0.25))
    today = pack(slots[:-4], [two_cores]).as_current()
    solves: list[str] = []
    original = solver._BinModel._solve

    def counted(self: solver._BinModel, deadline: float) -> object:
        solves.append("solve")
        return original(self, deadline)

    monkeypatch.setattr(solver._BinModel, "_solve", counted)
    first = pack(slots, [two_cores], current=today)
    assert first.status is Status.OPTIMAL and len(solves) == 2
    assert all(pack(slots, [two_cores], current=today).assignment() == first.assignment()
               for _ in range(5))


def test_the_checker_finds_what_is_wrong() -> None:
    slots = vertex("v", 4, cpu=1.0)
    good = valid(pack(slots, [MEDIUM]), slots, [MEDIUM])
    tm = good.task_managers[0]

    def with_tms(*tms: TaskManagerLoad, **changes: object) -> Placement:
        return dataclasses.replace(good, task_managers=tms, **changes)  # type: ignore[arg-type]

    lost = with_tms(dataclasses.replace(tm, slots=tm.slots[:3]))
    assert any("not placed" in p for p in check(lost, slots, [MEDIUM]))
    twice = with_tms(tm, dataclasses.replace(tm, name="other"))
    assert any("on both" in p for p in check(twice, slots, [MEDIUM]))
    crowded = vertex("v", 5, cpu=1.0)
    stuffed = with_tms(dataclasses.replace(tm, slots=tuple(s.key for s in crowded)))
    assert any("needs 5 cpu" in p for p in check(stuffed, crowded, [MEDIUM]))
    assert any("not allowed" in p for p in check(good, slots, [SMALL]))
    boasting = with_tms(tm, lower_bound=2)
    assert any("lower bound" in p for p in check(boasting, slots, [MEDIUM]))
    current = CurrentPlacement("medium", {s.key: "elsewhere" for s in slots})
    assert any("tasks move" in p for p in check(good, slots, [MEDIUM], current=current))


@pytest.mark.parametrize("process_mib", [1728, 2048, 3000, 8192])
@pytest.mark.parametrize("per_tm", [3, 4, 7])
def test_equal_shares_of_a_task_manager_fill_it_exactly(process_mib: int, per_tm: int) -> None:
    # The controller sizes slots as a TaskManager's resources ÷ slots, which is rarely a
    # whole number of bytes or micro-cores; Flink rounds such shares down, and so do we.
    shape = TaskManagerShape("s", cpu_cores=4, process_mib=process_mib, max_slots=per_tm)
    offers = shape.amounts()
    slots = [TaskSlot("v", i, offers["cpu"] / per_tm, offers["managed"] / per_tm,
                      offers["heap"] / per_tm, offers["network"] / per_tm)
             for i in range(2 * per_tm)]
    placement = valid(pack(slots, [shape]), slots, [shape])
    assert placement.count == 2
    assert placement.status is Status.OPTIMAL


def test_shapes_are_compared_by_the_taskmanagers_flink_needs_not_the_placements() -> None:
    """On the 3-core shape the placement needs 2 TaskManagers but Flink's own first fit 3;
    the replicas written are Flink's, so the 2-core shape (3 of them) is cheaper."""
    slots = [TaskSlot("small", i, 1.0, managed_mib=100, heap_mib=100, network_mib=32)
             for i in range(4)] + [
        TaskSlot("large", i, 1.0, managed_mib=600, heap_mib=100, network_mib=32)
        for i in range(2)]
    wide = TaskManagerShape("3cpu", 3.0, 3072.0)
    tall = TaskManagerShape("2cpu", 2.0, 4096.0)
    alone = pack(slots, [wide], time_limit_s=2.0)
    assert (alone.count, alone.flink_count) == (2, 3)  # the trap: fewer, but not for Flink
    placement = pack(slots, [wide, tall], time_limit_s=2.0)
    assert placement.shape == "2cpu"
    assert max(placement.count, placement.flink_count or 0) * tall.price < 3 * wide.price
