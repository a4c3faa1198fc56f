"""Each way `pack` can reach an answer, forced on purpose: the per-TaskManager model,
the pattern model, the FFD fallback, and no time at all. All must pass the checker."""

from __future__ import annotations

import pytest

import packer.solver as solver
from packer import CurrentPlacement, Status, TaskManagerShape, TaskSlot, check, lower_bound, pack
from packer.greedy import bin_capacity, group_demand, group_slots
from packer.patterns import solve_patterns
from tests.packer.conftest import MEDIUM, vertex


def job() -> list[TaskSlot]:
    return (vertex("source", 30, cpu=0.5) + vertex("map", 25, cpu=0.75, heap=256)
            + vertex("join", 40, cpu=1.0, managed=632) + vertex("agg", 22, cpu=1.5, managed=316)
            + vertex("sink", 13, cpu=0.25))


def hard_job() -> list[TaskSlot]:
    """job() plus 2.4- and 1.8-core tasks that never share a TaskManager: first fit
    decreasing ends above the volume bound, so `pack` must search (job() alone it
    answers from the greedy packing, which meets the bound)."""
    return job() + vertex("wide", 8, cpu=2.4) + vertex("narrow", 8, cpu=1.8)


def spy_on_paths(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The stage-1 models `pack` runs, in order, as it runs them."""
    taken: list[str] = []
    minimise_count, solve_patterns = solver._BinModel.minimise_count, solver.solve_patterns

    def bin_model(self: solver._BinModel, deadline: float) -> object:
        taken.append("bin model")
        return minimise_count(self, deadline)

    def patterns(*args: object) -> object:
        taken.append("patterns")
        return solve_patterns(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(solver._BinModel, "minimise_count", bin_model)
    monkeypatch.setattr(solver, "solve_patterns", patterns)
    return taken


@pytest.mark.parametrize("path", ["bin model", "patterns", "fallback", "no time"])
def test_every_path_gives_a_valid_placement(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if path != "bin model":
        monkeypatch.setattr(solver, "BIN_MODEL_CELLS", 0)
    if path == "fallback":
        monkeypatch.setattr(solver, "MAX_PATTERN_GROUPS", 0)
    taken = spy_on_paths(monkeypatch)
    slots = hard_job()
    placement = pack(slots, [MEDIUM], time_limit_s=0.0 if path == "no time" else 2.0)
    assert check(placement, slots, [MEDIUM]) == []
    assert placement.count <= placement.ffd_count
    if path in ("fallback", "no time"):
        assert taken == []
        assert placement.status is Status.FALLBACK
    else:
        assert taken == [path]
        assert placement.status in (Status.OPTIMAL, Status.FEASIBLE)


@pytest.mark.parametrize("path", ["bin model", "patterns"])
def test_every_path_keeps_tasks_in_place_after_a_small_change(
    path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if path == "patterns":
        monkeypatch.setattr(solver, "BIN_MODEL_CELLS", 0)
    slots = job()
    today = pack(slots, [MEDIUM])
    current = today.as_current()
    taken = spy_on_paths(monkeypatch)
    # Today's TaskManagers are full: repaired, today's placement opens one for each
    # 2.4-core task, one more than the bound, so the model must search. (Two more join
    # tasks would not do: the repair meets the bound and `pack` stops there.)
    grown = slots + vertex("wide", 2, cpu=2.4)
    placement = pack(grown, [MEDIUM], current=current)
    assert taken == [path]
    assert check(placement, grown, [MEDIUM], current=current) == []
    assert placement.count <= today.count + 1
    assert placement.moved <= 4


def test_pattern_bound_beats_volume_on_a_classic_instance() -> None:
    # Three 0.6-core and three 0.45-core tasks on 1-core TaskManagers: volume says 4
    # (3.15 cores), but 0.6 + 0.45 > 1, so the 0.6s sit alone and the 0.45s pair up at
    # best: 5. The pattern LP (3 + 1.5) proves 5 before any search.
    one_core = TaskManagerShape("one", cpu_cores=1, process_mib=16384)
    slots = vertex("a", 3, cpu=0.6) + vertex("b", 3, cpu=0.45)
    groups = group_slots(slots)
    demands = [group_demand(g, one_core) for g in groups]
    worst = [{0: 1}, {0: 1}, {0: 1}, {1: 1}, {1: 1}, {1: 1}]
    assert lower_bound(slots, one_core) == 4
    result = solve_patterns(demands, [3, 3], bin_capacity(one_core), [worst], 4, 1e18)
    assert result.bound == 5
    assert len(result.counts) == 5 and result.proven


def test_scale_in_repacks_a_neighbourhood_when_the_full_model_is_too_big(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Today: 3 TaskManagers of 4 cores, each with two 1-core x tasks and one 2-core y task.
    # x scales in to 2 tasks (both on tm-a): 1 + 1 + 2·3 = 8 cores fit 2 TaskManagers, but
    # today's placement, repaired, still needs 3. With the whole-job moves model disabled,
    # only the neighbourhood repair can find 2 TaskManagers with few moves.
    monkeypatch.setattr(solver, "MAX_MODEL_CELLS", 0)
    calls: list[int] = []
    original = solver._repair_nearby

    def spy(*args: object, **kwargs: object) -> object:
        calls.append(1)
        return original(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(solver, "_repair_nearby", spy)
    cpu4 = TaskManagerShape("cpu4", cpu_cores=4, process_mib=16384)
    before = vertex("x", 6, cpu=1.0) + vertex("y", 3, cpu=2.0)
    homes = {("x", 0): "tm-a", ("x", 1): "tm-a", ("x", 2): "tm-b", ("x", 3): "tm-b",
             ("x", 4): "tm-c", ("x", 5): "tm-c", ("y", 0): "tm-a", ("y", 1): "tm-b",
             ("y", 2): "tm-c"}
    current = CurrentPlacement("cpu4", homes)
    after = [s for s in before if s.vertex_id == "y" or s.subtask < 2]
    placement = pack(after, [cpu4], current=current)
    assert check(placement, after, [cpu4], current=current) == []
    assert calls
    assert placement.count == 2
    assert placement.status is Status.OPTIMAL
    assert placement.moved == 1  # one y task joins another TaskManager
