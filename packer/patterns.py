"""Pattern view of the packing, for large instances: Gilmore–Gomory column generation.

A *pattern* says how many tasks of each group one TaskManager holds. The linear
relaxation over patterns bounds the TaskManager count far more tightly than
volume does (for bin packing it is almost always within one of the optimum),
and an integer program over the patterns it generated, solved by CP-SAT, turns
that into a packing. The model's size depends on the number of groups, not on
the number of tasks or TaskManagers, so it scales to thousands of tasks.

Prices are the master LP's duals; pricing is a small multi-dimensional
knapsack, first by a greedy fill and, when that finds nothing, exactly with
CP-SAT. Farley's bound (LP value ÷ best pattern price) gives a valid lower
bound at every iteration, so stopping early on the deadline is safe.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

from ortools.linear_solver import pywraplp
from ortools.sat.python import cp_model

from packer.greedy import first_fit_counts

Pattern = tuple[int, ...]

MAX_PRICING_ROUNDS = 2_000
DETERMINISTIC_PER_SECOND = 0.15
"""CP-SAT's deterministic time per second of budget: measured 0.2–0.5 on this 2-core
machine under load, so the deterministic limit nearly always ends the search first."""
_PRICE_SCALE = 1_000_000
_EPS = 1e-7
SEED = 20240101


@dataclass(frozen=True)
class PatternResult:
    bound: int  # a valid lower bound on the TaskManager count
    counts: list[dict[int, int]]  # the best packing found, per TaskManager {group: tasks}
    proven: bool  # counts has exactly `bound` TaskManagers


def limit(solver: cp_model.CpSolver, seconds: float) -> None:
    """Stop CP-SAT by deterministic time, with wall-clock time as the backstop on a
    machine too slow or too busy to reach it first. `seconds` is what the wall clock
    leaves, so a search cut short by the limit is not repeatable to the last step."""
    solver.parameters.max_time_in_seconds = max(seconds, 0.01)
    solver.parameters.max_deterministic_time = max(seconds, 0.01) * DETERMINISTIC_PER_SECOND
    solver.parameters.random_seed = SEED


def _fits(
    pattern: Sequence[int], demands: Sequence[Sequence[int]], capacity: Sequence[int]
) -> bool:
    return all(
        sum(a * demands[g][k] for g, a in enumerate(pattern)) <= cap
        for k, cap in enumerate(capacity)
    )


def _as_patterns(packing: Sequence[dict[int, int]], groups: int) -> list[Pattern]:
    return [tuple(tm.get(g, 0) for g in range(groups)) for tm in packing]


class _Master:
    """The covering LP: min Σ λ_p  s.t.  Σ_p a_gp λ_p ≥ n_g, λ ≥ 0."""

    def __init__(self, sizes: Sequence[int]) -> None:
        solver = pywraplp.Solver.CreateSolver("GLOP")
        assert solver is not None
        self.solver = solver
        self.cover = [solver.Constraint(float(n), solver.infinity()) for n in sizes]
        self.objective = solver.Objective()
        self.objective.SetMinimization()
        self.columns: list[tuple[Pattern, pywraplp.Variable]] = []
        self.known: set[Pattern] = set()

    def add(self, pattern: Pattern) -> bool:
        if pattern in self.known or not any(pattern):
            return False
        var = self.solver.NumVar(0.0, self.solver.infinity(), f"p{len(self.columns)}")
        for g, a in enumerate(pattern):
            if a:
                self.cover[g].SetCoefficient(var, float(a))
        self.objective.SetCoefficient(var, 1.0)
        self.columns.append((pattern, var))
        self.known.add(pattern)
        return True

    def solve(self) -> tuple[float, list[float], list[float]]:
        """LP value, duals (prices per group), and the λ of every column."""
        status = self.solver.Solve()
        assert status == pywraplp.Solver.OPTIMAL
        prices = [max(0.0, c.dual_value()) for c in self.cover]
        return self.objective.Value(), prices, [v.solution_value() for _, v in self.columns]


def _greedy_price(
    prices: Sequence[float],
    demands: Sequence[Sequence[int]],
    capacity: Sequence[int],
    limits: Sequence[int],
) -> Pattern:
    """Fill one TaskManager with the groups worth most per unit of their scarcest dimension."""

    def density(g: int) -> float:
        share = max((d / c for d, c in zip(demands[g], capacity, strict=True) if d), default=0.0)
        return prices[g] / share if share else math.inf

    free = list(capacity)
    pattern = [0] * len(prices)
    for g in sorted((g for g in range(len(prices)) if prices[g] > _EPS), key=density,
                    reverse=True):
        fit = limits[g]
        for f, d in zip(free, demands[g], strict=True):
            if d:
                fit = min(fit, f // d)
        pattern[g] = fit
        for k, d in enumerate(demands[g]):
            free[k] -= d * fit
    return tuple(pattern)


def _exact_price(
    prices: Sequence[float],
    demands: Sequence[Sequence[int]],
    capacity: Sequence[int],
    limits: Sequence[int],
    seconds: float,
) -> tuple[Pattern | None, float]:
    """The most valuable pattern (None if not found) and an upper bound on its value."""
    model = cp_model.CpModel()
    worth = [round(p * _PRICE_SCALE) for p in prices]
    a = [model.new_int_var(0, limits[g] if worth[g] > 0 else 0, f"a{g}")
         for g in range(len(prices))]
    for k, cap in enumerate(capacity):
        terms = [(demands[g][k], a[g]) for g in range(len(prices)) if demands[g][k]]
        if terms:
            model.add(sum(d * v for d, v in terms) <= cap)
    model.maximize(sum(w * v for w, v in zip(worth, a, strict=True)))
    solver = cp_model.CpSolver()
    limit(solver, seconds)
    solver.parameters.num_workers = 1
    status = solver.solve(model)
    # Rounding the prices moves each unit's worth by at most half a unit of scale.
    slack = 0.5 * sum(limits) / _PRICE_SCALE
    if status == cp_model.OPTIMAL:
        bound = solver.objective_value / _PRICE_SCALE + slack
    else:
        bound = solver.best_objective_bound / _PRICE_SCALE + slack
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None, bound
    return tuple(solver.value(v) for v in a), bound


def solve_patterns(
    demands: Sequence[Sequence[int]],
    sizes: Sequence[int],
    capacity: Sequence[int],
    seeds: Sequence[list[dict[int, int]]],
    bound: int,
    deadline: float,
) -> PatternResult:
    """Best packing and lower bound via column generation, by `deadline` (perf_counter)."""
    groups = len(sizes)
    limits = []
    for g in range(groups):
        fit = sizes[g]
        for d, c in zip(demands[g], capacity, strict=True):
            if d:
                fit = min(fit, c // d)
        limits.append(fit)
    incumbent: list[dict[int, int]] = seeds[0]
    for seed in seeds:
        if len(seed) < len(incumbent):
            incumbent = seed
    master = _Master(sizes)
    for seed in seeds:
        for pattern in _as_patterns(seed, groups):
            master.add(pattern)
    for g in range(groups):  # every group alone, as full as it goes: keeps the LP feasible
        master.add(tuple(limits[g] if h == g else 0 for h in range(groups)))

    # Price until the LP is solved (the integer step then has the right patterns to
    # choose from), for at most half the time; Farley's bound is valid at every step.
    pricing_ends = time.perf_counter() + 0.5 * (deadline - time.perf_counter())
    for _ in range(MAX_PRICING_ROUNDS):
        if time.perf_counter() > pricing_ends or bound == len(incumbent):
            break
        _, prices, _ = master.solve()
        pattern = _greedy_price(prices, demands, capacity, limits)
        if sum(p * a for p, a in zip(prices, pattern, strict=True)) > 1 + _EPS \
                and master.add(pattern):
            continue
        found, best = _exact_price(prices, demands, capacity, limits,
                                   pricing_ends - time.perf_counter())
        # Farley: prices scaled down by the best pattern's worth are dual feasible.
        dual = sum(p * n for p, n in zip(prices, sizes, strict=True))
        bound = max(bound, math.ceil(dual / max(best, 1.0) - _EPS))
        if best <= 1 + _EPS:
            break  # no pattern prices above 1: the LP is solved, the bound is final
        if found is None or not master.add(found):
            break

    _, _, weights = master.solve()
    rounded = _round_down(master, weights, demands, sizes, capacity)
    if len(rounded) < len(incumbent):
        incumbent = rounded
    if len(incumbent) > bound:
        packing = _integer_packing(master, demands, sizes, capacity, bound, incumbent, deadline)
        if len(packing) < len(incumbent):
            incumbent = packing
    return PatternResult(bound, incumbent, len(incumbent) == bound)


def _round_down(
    master: _Master,
    weights: Sequence[float],
    demands: Sequence[Sequence[int]],
    sizes: Sequence[int],
    capacity: Sequence[int],
) -> list[dict[int, int]]:
    """The LP's patterns, each used ⌊λ⌋ times, and first-fit-decreasing for the rest."""
    packing: list[list[int]] = []
    for (pattern, _), weight in zip(master.columns, weights, strict=True):
        packing.extend(list(pattern) for _ in range(math.floor(weight + _EPS)))
    counts = _trim(packing, sizes)
    rooms = [[c - sum(tm.get(g, 0) * demands[g][k] for g in tm) for k, c in enumerate(capacity)]
             for tm in counts]
    left = [(g, tuple(demands[g]), sizes[g] - sum(tm.get(g, 0) for tm in counts))
            for g in sorted(range(len(sizes)), key=lambda g: _share(demands[g], capacity),
                            reverse=True)]
    packed = first_fit_counts(left, tuple(capacity), rooms, counts)
    assert packed is not None  # every group fits an empty TaskManager
    return [tm for tm in packed if tm]


def _share(demand: Sequence[int], capacity: Sequence[int]) -> float:
    return max((d / c for d, c in zip(demand, capacity, strict=True) if c), default=0.0)


def _trim(packing: list[list[int]], sizes: Sequence[int]) -> list[dict[int, int]]:
    """Take back what patterns hold beyond each group's size (removing tasks keeps a
    TaskManager feasible); drop TaskManagers left empty."""
    for g, size in enumerate(sizes):
        surplus = sum(tm[g] for tm in packing) - size
        for tm in reversed(packing):
            cut = min(max(surplus, 0), tm[g])
            tm[g] -= cut
            surplus -= cut
    return [{g: a for g, a in enumerate(tm) if a} for tm in packing if any(tm)]


def _integer_packing(
    master: _Master,
    demands: Sequence[Sequence[int]],
    sizes: Sequence[int],
    capacity: Sequence[int],
    bound: int,
    incumbent: Sequence[dict[int, int]],
    deadline: float,
) -> list[dict[int, int]]:
    """CP-SAT over the generated patterns: how many TaskManagers use each."""
    remaining = deadline - time.perf_counter()
    if remaining <= 0.01:
        return list(incumbent)
    patterns = [p for p, _ in master.columns]
    groups = len(sizes)
    model = cp_model.CpModel()
    uses = [
        model.new_int_var(0, max(math.ceil(sizes[g] / a) for g, a in enumerate(p) if a),
                          f"y{i}")
        for i, p in enumerate(patterns)
    ]
    for g in range(groups):
        model.add(sum(p[g] * y for p, y in zip(patterns, uses, strict=True) if p[g]) >= sizes[g])
    total = sum(uses)
    model.add(total >= bound)
    model.add(total <= len(incumbent))
    model.minimize(total)
    start = _as_patterns(incumbent, groups)
    for p, y in zip(patterns, uses, strict=True):
        model.add_hint(y, start.count(p))
    solver = cp_model.CpSolver()
    limit(solver, remaining)
    solver.parameters.num_workers = 1
    if solver.solve(model) not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return list(incumbent)
    packing: list[list[int]] = []
    for p, y in zip(patterns, uses, strict=True):
        packing.extend(list(p) for _ in range(solver.value(y)))
    counts = _trim(packing, sizes)
    assert all(_fits([tm.get(g, 0) for g in range(groups)], demands, capacity) for tm in counts)
    return counts
