"""`pack`: fewest TaskManagers, then fewest moved tasks, with OR-Tools CP-SAT.

The model counts tasks per (group, TaskManager): a group is the tasks of one
vertex, all the same size, so the model grows with vertices × TaskManagers, not
with tasks. One shape is used for all TaskManagers (a FlinkDeployment has one
`spec.taskManager.resource`); with several allowed shapes each is solved and the
cheapest wins. Greedy packings (FFD, Flink's own first fit, first fit by each
dimension) give the upper bound: the model has exactly that many TaskManagers
and is hinted with the best, so the answer is never worse, and FFD is the
fallback. Above a few thousand cells the pattern model (patterns.py) replaces
the per-TaskManager one for stage 1.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from ortools.sat.python import cp_model

from packer.check import check
from packer.greedy import (
    Demand,
    Group,
    bin_capacity,
    decreasing,
    first_fit_counts,
    first_fit_in_order,
    flink_first_fit,
    group_demand,
    group_slots,
    how_many_fit,
    lower_bound,
    unfit_slot,
)
from packer.patterns import limit, solve_patterns
from packer.types import (
    CurrentPlacement,
    Placement,
    SlotKey,
    Status,
    TaskManagerLoad,
    TaskManagerShape,
    TaskSlot,
)

BIN_MODEL_CELLS = 3_000
"""Up to this many (group, TaskManager) cells, stage 1 solves the per-TaskManager model."""
MAX_MODEL_CELLS = 40_000
"""Up to this many, stage 2 (fewest moves) solves it; above, moves are kept greedily."""
FINISH_SECONDS_PER_SLOT = 1e-4
"""Measured cost of assigning, measuring and checking one slot after the solve."""
MAX_PATTERN_GROUPS = 300
"""Above this many groups the pattern model is not built either: FFD answers."""


@dataclass
class _Solution:
    counts: list[dict[int, int]]  # per TaskManager: group index -> tasks
    status: Status
    bound: int
    names: list[str | None] = field(default_factory=list)  # today's name per TaskManager


@dataclass
class _Candidate:
    """One shape's answer, with what decides between shapes and what the Placement reports."""

    cost: float
    moved: int
    shape: TaskManagerShape
    solution: _Solution
    ffd_count: int
    flink_count: int


def pack(
    slots: Sequence[TaskSlot],
    shapes: Sequence[TaskManagerShape],
    current: CurrentPlacement | None = None,
    time_limit_s: float = 2.0,
) -> Placement:
    """Place `slots` onto TaskManagers of one of `shapes`.

    Lexicographic: lowest cost (the TaskManagers the deployment needs, the placement's
    count or Flink's own first fit's if more, × shape price), then fewest tasks moved
    away from their TaskManager in `current`.
    Always returns a placement that passes `check`; a slot that fits no shape
    gives status infeasible with the reason naming it.
    """
    started = time.perf_counter()
    _validate(slots, shapes)
    # Leave time to hand out slots and check the answer after the solvers stop.
    reserve = min(0.25 * time_limit_s, FINISH_SECONDS_PER_SLOT * len(slots))
    deadline = started + max(time_limit_s - reserve, 0.0)
    if not slots:
        shape = _current_shape(shapes, current) or shapes[0]
        empty = _Candidate(0.0, 0, shape, _Solution([], Status.OPTIMAL, 0), 0, 0)
        return _finish(slots, empty, current, started)

    usable = [s for s in shapes if unfit_slot(slots, s) is None]
    if not usable:
        return Placement(
            shape=None, task_managers=(), lower_bound=0, status=Status.INFEASIBLE,
            solve_seconds=time.perf_counter() - started, reason=_infeasibility(slots, shapes),
        )

    groups = group_slots(slots)
    bounds = {s.name: lower_bound(slots, s) for s in usable}
    # Cheapest bound first, so a good shape is solved early and prunes the rest.
    today_shape = None if current is None else current.shape
    usable.sort(key=lambda s: (bounds[s.name] * s.price, s.name != today_shape, s.price, s.name))
    best: _Candidate | None = None
    for position, shape in enumerate(usable):
        if best is not None and bounds[shape.name] * shape.price > best.cost:
            continue
        budget = (deadline - time.perf_counter()) / (len(usable) - position)
        today = current if current is not None and current.shape == shape.name else None
        heuristics = _greedy_packings(groups, shape)
        ffd = heuristics[0]
        flink = _flink_counts(slots, groups, shape)
        heuristics.append(flink)
        solution = _solve(groups, shape, heuristics, bounds[shape.name], today, budget)
        # Shapes are compared by what the deployment is billed: Flink's own first fit may
        # need more TaskManagers than the placement (the replicas written, controller.place).
        billed = max(len(solution.counts), len(flink))
        candidate = _Candidate(billed * shape.price,
                               _moves(groups, solution, current, shape.name),
                               shape, solution, len(ffd), len(flink))
        if best is None or (candidate.cost, candidate.moved) < (best.cost, best.moved):
            best = candidate
    assert best is not None
    return _finish(slots, best, current, started, groups)


def _validate(slots: Sequence[TaskSlot], shapes: Sequence[TaskManagerShape]) -> None:
    if not shapes:
        raise ValueError("at least one TaskManager shape is needed")
    if len({s.name for s in shapes}) != len(shapes):
        raise ValueError("TaskManager shape names must be unique")
    keys = [s.key for s in slots]
    if len(set(keys)) != len(keys):
        raise ValueError("duplicate (vertex id, subtask) among slots")


def _current_shape(
    shapes: Sequence[TaskManagerShape], current: CurrentPlacement | None
) -> TaskManagerShape | None:
    return next((s for s in shapes if current is not None and s.name == current.shape), None)


def _infeasibility(slots: Sequence[TaskSlot], shapes: Sequence[TaskManagerShape]) -> str:
    for slot in slots:
        if all(unfit_slot([slot], s) is not None for s in shapes):
            offers = "; ".join(f"{s.name} offers {_describe(s.amounts())}" for s in shapes)
            needs = _describe(slot.amounts())
            return f"slot {slot.label} ({needs}) fits no allowed shape: {offers}"
    parts = []
    for shape in shapes:
        unfit = unfit_slot(slots, shape)
        assert unfit is not None
        parts.append(f"{shape.name} cannot hold slot {unfit.label} ({_describe(unfit.amounts())})")
    return "no single allowed shape fits every slot: " + "; ".join(parts)


def _describe(amounts: Mapping[str, float]) -> str:
    return ", ".join(
        f"{v:g} cores" if k == "cpu" else f"{v:.0f} MiB {k}" for k, v in amounts.items()
    )


def _greedy_packings(
    groups: Sequence[Group], shape: TaskManagerShape
) -> list[list[dict[int, int]]]:
    """First-fit-decreasing first, then first fit in input order and by each dimension
    alone, largest first: cheap, and each wins on some instances."""
    orders = [decreasing(groups, shape), list(range(len(groups)))]
    for k in range(len(bin_capacity(shape))):
        orders.append(sorted(range(len(groups)),
                             key=lambda g: (-group_demand(groups[g], shape)[k], g)))
    packings = []
    for order in orders:
        packed = first_fit_in_order(groups, shape, order)
        assert packed is not None  # every slot fits `shape`: checked by the caller
        packings.append(packed)
    return packings


def _flink_counts(
    slots: Sequence[TaskSlot], groups: Sequence[Group], shape: TaskManagerShape
) -> list[dict[int, int]]:
    """Flink's own first fit, as counts per group: a valid packing, so an upper bound too."""
    packed = flink_first_fit(slots, shape)
    assert packed is not None
    index = {s.key: g for g, group in enumerate(groups) for s in group.slots}
    counts: list[dict[int, int]] = []
    for members in packed:
        tm: dict[int, int] = {}
        for slot in members:
            tm[index[slot.key]] = tm.get(index[slot.key], 0) + 1
        counts.append(tm)
    return counts


def _today_counts(
    groups: Sequence[Group], today: CurrentPlacement | None
) -> tuple[list[str], list[dict[int, int]]]:
    """Today's TaskManagers (sorted names) and their tasks per group, for tasks that still exist."""
    if today is None:
        return [], []
    names = sorted({today.assignment[s.key] for g in groups for s in g.slots
                    if s.key in today.assignment})
    index = {name: b for b, name in enumerate(names)}
    counts: list[dict[int, int]] = [{} for _ in names]
    for g, group in enumerate(groups):
        for slot in group.slots:
            name = today.assignment.get(slot.key)
            if name is not None:
                counts[index[name]][g] = counts[index[name]].get(g, 0) + 1
    return names, counts


def _fits(counts: Sequence[dict[int, int]], groups: Sequence[Group],
          shape: TaskManagerShape) -> bool:
    capacity = bin_capacity(shape)
    for tm in counts:
        used = [0] * len(capacity)
        for g, n in tm.items():
            for k, d in enumerate(group_demand(groups[g], shape)):
                used[k] += d * n
        if any(u > c for u, c in zip(used, capacity, strict=True)):
            return False
    return True


def _solve(
    groups: Sequence[Group],
    shape: TaskManagerShape,
    heuristics: Sequence[list[dict[int, int]]],
    bound: int,
    today: CurrentPlacement | None,
    budget_s: float,
) -> _Solution:
    """Stage 1: fewest TaskManagers. Stage 2: fewest moves from `today` at that count."""
    now = time.perf_counter()
    deadline = now + budget_s
    names, before = _today_counts(groups, today)
    incremental = _incremental(groups, shape, names, before, bound) if names else None
    best = min(heuristics, key=len)

    def greedy(status: Status) -> _Solution:
        """The best greedy answer: today's repaired placement if it is no larger."""
        if len(best) == bound:
            status = Status.OPTIMAL
        if incremental is not None and len(incremental.counts) <= len(best):
            return replace(incremental, status=status)
        return _relabel(best, status, bound, names, before)

    if incremental is not None and len(incremental.counts) == bound:
        return greedy(Status.OPTIMAL)  # today's placement barely changed and is still optimal
    if (len(best) == bound and not names) or budget_s <= 0:
        return greedy(Status.FALLBACK)
    # With today's placement to respect, leave time for stage 2.
    stage_one = deadline if not names else now + 0.6 * budget_s

    bins = max(len(best), len(names))
    model: _BinModel | None = None
    if len(groups) * bins <= BIN_MODEL_CELLS:
        model = _BinModel.of(groups, shape, bins, len(names), bound)
        model.hint(_arrange(greedy(Status.FEASIBLE), names, bins, model.anchor))
        found = model.minimise_count(stage_one)
        if found is None:
            return greedy(Status.FALLBACK)
        counts, proven = found
        solution = _Solution(counts, Status.FEASIBLE, max(bound, proven),
                             [names[b] if b < len(names) else None for b in range(bins)])
    elif len(groups) <= MAX_PATTERN_GROUPS:
        demands = [group_demand(g, shape) for g in groups]
        result = solve_patterns(demands, [g.size for g in groups], bin_capacity(shape),
                                heuristics, bound, stage_one)
        solution = _relabel(result.counts, Status.FEASIBLE, result.bound, names, before)
    else:
        return greedy(Status.FALLBACK)

    used = sum(1 for tm in solution.counts if tm)
    if used > len(best):  # a solver that lost its hint: never worse than the greedy answer
        solution = replace(greedy(Status.FEASIBLE), bound=solution.bound)
    elif incremental is not None and len(incremental.counts) <= used:
        solution = replace(incremental, bound=solution.bound)
    used = sum(1 for tm in solution.counts if tm)
    if incremental is not None and today is not None and len(incremental.counts) > used:
        nearby = _repair_nearby(groups, shape, incremental, used, names, before,
                                time.perf_counter() + 0.5 * (deadline - time.perf_counter()))
        if nearby is not None and _moves(groups, nearby, today, shape.name) < \
                _moves(groups, solution, today, shape.name):
            solution = replace(nearby, bound=solution.bound)

    if names and time.perf_counter() < deadline and len(groups) * bins <= MAX_MODEL_CELLS:
        if model is None:
            model = _BinModel.of(groups, shape, bins, len(names), solution.bound)
        model.hint(_arrange(solution, names, bins, model.anchor))
        kept = model.maximise_kept(used, before, deadline)
        if kept is not None:
            solution.counts = kept
            solution.names = [names[b] if b < len(names) else None for b in range(bins)]
    keep = [b for b, tm in enumerate(solution.counts) if tm]
    solution.names = [solution.names[b] for b in keep] if solution.names else []
    solution.counts = [solution.counts[b] for b in keep]
    solution.status = Status.OPTIMAL if len(keep) == solution.bound else Status.FEASIBLE
    return solution


def _incremental(
    groups: Sequence[Group], shape: TaskManagerShape, names: list[str],
    before: Sequence[dict[int, int]], bound: int,
) -> _Solution:
    """Today's placement repaired: evict tasks from TaskManagers that no longer fit,
    then first-fit the evicted and the new tasks, into today's TaskManagers first."""
    capacity = bin_capacity(shape)
    demands = [group_demand(g, shape) for g in groups]
    order = decreasing(groups, shape)
    counts = [dict(tm) for tm in before]
    rooms: list[list[int]] = []
    for tm in counts:
        room = list(capacity)
        for g, n in tm.items():
            room = [r - d * n for r, d in zip(room, demands[g], strict=True)]
        for g in order:  # largest first: fewest evictions
            while g in tm and any(r < 0 for r in room):
                room = [r + d for r, d in zip(room, demands[g], strict=True)]
                tm[g] -= 1
                if not tm[g]:
                    del tm[g]
        rooms.append(room)
    left = [(g, demands[g], groups[g].size - sum(tm.get(g, 0) for tm in counts))
            for g in order]
    first_fit_counts(left, capacity, rooms, counts)
    labels = names + [None] * (len(counts) - len(names))
    keep = [b for b, tm in enumerate(counts) if tm]
    return _Solution([counts[b] for b in keep], Status.FEASIBLE, bound,
                     [labels[b] for b in keep])


def _repair_nearby(
    groups: Sequence[Group],
    shape: TaskManagerShape,
    repaired: _Solution,
    target: int,
    names: list[str],
    before: Sequence[dict[int, int]],
    deadline: float,
) -> _Solution | None:
    """Today's repaired placement brought down to `target` TaskManagers by re-packing
    only a neighbourhood (the TaskManagers the repair added and today's emptiest) with
    fewest moves; the rest stay exactly as they are. None if that neighbourhood fails."""
    capacity = bin_capacity(shape)
    demands = [group_demand(g, shape) for g in groups]
    save = len(repaired.counts) - target
    labels = repaired.names

    def fullness(b: int) -> float:
        return max(sum(demands[g][k] * n for g, n in repaired.counts[b].items()) / cap
                   for k, cap in enumerate(capacity) if cap)

    added = [b for b, name in enumerate(labels) if name is None]
    older = sorted((b for b, name in enumerate(labels) if name is not None),
                   key=lambda b: (fullness(b), b))
    room = max(BIN_MODEL_CELLS // len(groups), len(added) + save + 1)
    hood = older[: max(room - len(added), 0)] + added
    if len(hood) <= save:
        return None
    sizes = [sum(repaired.counts[b].get(g, 0) for b in hood) for g in range(len(groups))]
    present = [g for g in range(len(groups)) if sizes[g]]
    index = {g: i for i, g in enumerate(present)}
    staying = len(hood) - len(added)
    model = _BinModel([demands[g] for g in present], [sizes[g] for g in present], capacity,
                      len(hood), staying, 0)
    old = [{index[g]: n for g, n in before[names.index(labels[b] or "")].items() if g in index}
           for b in hood[:staying]]
    counts = model.maximise_kept(len(hood) - save, old, deadline)
    if counts is None:
        return None
    inside = set(hood)
    merged = [(tm, labels[b]) for b, tm in enumerate(repaired.counts) if b not in inside]
    merged += [({present[j]: n for j, n in tm.items()}, labels[hood[i]] if i < staying else None)
               for i, tm in enumerate(counts) if tm]
    return _Solution([tm for tm, _ in merged], Status.FEASIBLE, 0, [n for _, n in merged])


class _BinModel:
    """Tasks per (group, TaskManager); TaskManagers 0..len(today)-1 are today's."""

    def __init__(self, demands: Sequence[Demand], sizes: Sequence[int], capacity: Demand,
                 bins: int, today: int, bound: int) -> None:
        groups = range(len(sizes))
        self.bins = bins
        self.model = cp_model.CpModel()
        model = self.model
        self.used = [model.new_bool_var(f"used[{b}]") for b in range(bins)]
        self.x = [
            [model.new_int_var(0, how_many_fit(capacity, demands[g], sizes[g]), f"x[{g},{b}]")
             for b in range(bins)]
            for g in groups
        ]
        for g in groups:
            model.add(sum(self.x[g]) == sizes[g])
        for b in range(bins):
            for k, cap in enumerate(capacity):
                terms = [(demands[g][k], self.x[g][b]) for g in groups if demands[g][k]]
                if terms:
                    model.add(sum(d * v for d, v in terms) <= cap * self.used[b])
            for g in groups:
                if not any(demands[g]):  # nothing else keeps a weightless task off unused TMs
                    model.add(self.x[g][b] <= sizes[g] * self.used[b])
        # TaskManagers beyond today's are interchangeable: used ones first, ordered by
        # the count of the largest group (any packing can be permuted into this order).
        self.anchor = max(groups, key=lambda g: (sizes[g], -g))
        for b in range(today, bins - 1):
            model.add(self.used[b] >= self.used[b + 1])
            model.add(self.x[self.anchor][b] >= self.x[self.anchor][b + 1])
        self.count = sum(self.used)
        model.add(self.count >= bound)
        self.cells = len(sizes) * bins

    @classmethod
    def of(cls, groups: Sequence[Group], shape: TaskManagerShape, bins: int, today: int,
           bound: int) -> _BinModel:
        return cls([group_demand(g, shape) for g in groups], [g.size for g in groups],
                   bin_capacity(shape), bins, today, bound)

    def hint(self, counts: Sequence[dict[int, int]]) -> None:
        self.model.clear_hints()  # type: ignore[no-untyped-call]
        for b in range(self.bins):
            tm = counts[b] if b < len(counts) else {}
            self.model.add_hint(self.used[b], any(tm.values()))
            for g, row in enumerate(self.x):
                self.model.add_hint(row[b], tm.get(g, 0))

    def minimise_count(self, deadline: float) -> tuple[list[dict[int, int]], int] | None:
        self.model.minimize(self.count)
        solver = self._solve(deadline)
        if solver is None:
            return None
        return self._read(solver), math.ceil(solver.best_objective_bound - 1e-6)

    def maximise_kept(self, count: int, today: Sequence[dict[int, int]],
                      deadline: float) -> list[dict[int, int]] | None:
        self.model.add(self.count <= count)
        kept = []
        for b, tm in enumerate(today):
            for g, n in tm.items():
                var = self.model.new_int_var(0, n, f"kept[{g},{b}]")
                self.model.add(var <= self.x[g][b])
                kept.append(var)
        self.model.maximize(sum(kept))
        solver = self._solve(deadline)
        return None if solver is None else self._read(solver)

    def _solve(self, deadline: float) -> cp_model.CpSolver | None:
        solver = cp_model.CpSolver()
        limit(solver, deadline - time.perf_counter())
        # One worker is deterministic and enough for small models; two interleaved
        # workers stay deterministic and find better packings in larger ones.
        if self.cells > 2_000:
            solver.parameters.num_workers = 2
            solver.parameters.interleave_search = True
        else:
            solver.parameters.num_workers = 1
        status = solver.solve(self.model)
        return solver if status in (cp_model.OPTIMAL, cp_model.FEASIBLE) else None

    def _read(self, solver: cp_model.CpSolver) -> list[dict[int, int]]:
        counts: list[dict[int, int]] = [{} for _ in range(self.bins)]
        for g, row in enumerate(self.x):
            for b, var in enumerate(row):
                n = solver.value(var)
                if n:
                    counts[b][g] = n
        return counts


def _arrange(solution: _Solution, names: Sequence[str], bins: int,
             anchor: int) -> list[dict[int, int]]:
    """A solution laid out as the bin model expects: today's TaskManagers at their
    index, new ones after them in symmetry-breaking order."""
    laid: list[dict[int, int]] = [{} for _ in range(bins)]
    fresh = []
    labels = solution.names or [None] * len(solution.counts)
    for tm, name in zip(solution.counts, labels, strict=True):
        if name is not None:
            laid[names.index(name)] = tm
        elif tm:
            fresh.append(tm)
    fresh.sort(key=lambda tm: -tm.get(anchor, 0))
    # New TaskManagers go after today's; if they run out of room, into today's empty ones.
    spare = [b for b in range(len(names), bins)] + [b for b in range(len(names)) if not laid[b]]
    for b, tm in zip(spare, fresh, strict=False):
        laid[b] = tm
    return laid


def _relabel(
    counts: list[dict[int, int]],
    status: Status,
    bound: int,
    names: list[str],
    today: list[dict[int, int]],
) -> _Solution:
    """Give heuristic TaskManagers today's names, greedily by the most tasks in common."""
    holders: dict[int, list[int]] = {}  # group -> today's TaskManagers holding it
    for o, old in enumerate(today):
        for g in old:
            holders.setdefault(g, []).append(o)
    common: dict[tuple[int, int], int] = {}
    for b, tm in enumerate(counts):
        for g, n in tm.items():
            for o in holders.get(g, ()):
                common[b, o] = common.get((b, o), 0) + min(n, today[o][g])
    chosen: list[str | None] = [None] * len(counts)
    taken: set[int] = set()
    for (b, o), _ in sorted(common.items(), key=lambda item: (-item[1], item[0])):
        if chosen[b] is None and o not in taken:
            chosen[b] = names[o]
            taken.add(o)
    return _Solution(counts, status, bound, chosen)


def _moves(
    groups: Sequence[Group], solution: _Solution, current: CurrentPlacement | None, shape: str
) -> int:
    """Tasks that exist today and will not stay on their TaskManager (counted per group).
    A change of shape replaces every TaskManager, so every existing task moves."""
    if current is None:
        return 0
    names, before = _today_counts(groups, current)
    if current.shape != shape:
        return sum(sum(tm.values()) for tm in before)
    staying = 0
    for tm, name in zip(solution.counts, solution.names or [None] * len(solution.counts),
                        strict=True):
        if name is not None:
            old = before[names.index(name)]
            staying += sum(min(n, old.get(g, 0)) for g, n in tm.items())
    return sum(sum(tm.values()) for tm in before) - staying


def _finish(
    slots: Sequence[TaskSlot],
    chosen: _Candidate,
    current: CurrentPlacement | None,
    started: float,
    groups: Sequence[Group] = (),
) -> Placement:
    shape, solution = chosen.shape, chosen.solution
    today = current if current is not None and current.shape == shape.name else None
    assignment = _assign(groups, solution, today)
    loads = tuple(
        TaskManagerLoad(name, shape.name, tuple(s.key for s in members),
                        MappingProxyType(_utilisation(members, shape)))
        for name, members in assignment
    )
    moved = 0
    if current is not None:
        new_home = {key: tm.name for tm in loads for key in tm.slots}
        moved = sum(1 for key, name in current.assignment.items()
                    if key in new_home and (today is None or new_home[key] != name))
    placement = Placement(
        shape=shape.name,
        task_managers=loads,
        lower_bound=solution.bound,
        status=solution.status,
        solve_seconds=time.perf_counter() - started,
        moved=moved,
        ffd_count=chosen.ffd_count,
        flink_count=chosen.flink_count,
    )
    problems = check(placement, slots, [shape], current=current)
    if problems:
        raise AssertionError("packer produced an invalid placement: " + "; ".join(problems))
    return placement


def _assign(
    groups: Sequence[Group], solution: _Solution, today: CurrentPlacement | None
) -> list[tuple[str, list[TaskSlot]]]:
    """Concrete slots per TaskManager: each keeps its own tasks from today first."""
    names = solution.names or [None] * len(solution.counts)
    members: list[list[TaskSlot]] = [[] for _ in solution.counts]
    quota = [dict(tm) for tm in solution.counts]
    taken: set[SlotKey] = set()
    if today is not None:
        home: dict[tuple[str, int], list[TaskSlot]] = {}
        for g, group in enumerate(groups):
            for slot in group.slots:
                if slot.key in today.assignment:
                    home.setdefault((today.assignment[slot.key], g), []).append(slot)
        for b, name in enumerate(names):
            for g in quota[b]:
                staying = home.get((name, g), [])[: quota[b][g]] if name is not None else []
                members[b].extend(staying)
                taken.update(s.key for s in staying)
                quota[b][g] -= len(staying)
    free = [iter([s for s in group.slots if s.key not in taken]) for group in groups]
    for b, tm in enumerate(quota):
        for g, n in sorted(tm.items()):
            members[b].extend(next(free[g]) for _ in range(n))
    known = set() if today is None else set(today.assignment.values())
    fresh = (f"tm-{i}" for i in itertools.count() if f"tm-{i}" not in known)
    return [(name if name is not None else next(fresh), sorted(m, key=lambda s: s.key))
            for name, m in zip(names, members, strict=True)]


def _utilisation(members: Sequence[TaskSlot], shape: TaskManagerShape) -> dict[str, float]:
    offered = shape.amounts()
    used = {k: sum(s.amounts()[k] for s in members) for k in offered}
    util = {k: (used[k] / offered[k] if offered[k] else 0.0) for k in offered}
    if shape.max_slots is not None:
        util["slots"] = len(members) / shape.max_slots
    return util
