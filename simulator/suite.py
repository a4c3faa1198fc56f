"""Many models × policies × seeds in one go, summarised as one table (and JSON).

`hybrid-scaler simulate --jobs DIR --seeds 10` and bench/seed_spread.py use it: the
spread over seeds shows where a policy sits near a decision boundary.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from simulator.model import JobModel
from simulator.results import PolicyName, RunResult

# The closed loop (controller/simulate.py's run; simulator/ does not import the controller).
Runner = Callable[..., RunResult]


@dataclass(frozen=True)
class SuiteRow:
    """One model and policy over every seed."""

    job: str
    policy: str
    runs: tuple[RunResult, ...]

    def as_json(self) -> dict[str, Any]:
        return {
            "job": self.job, "policy": self.policy, "seeds": len(self.runs),
            "converged": sum(r.converged for r in self.runs),
            "steps": [len(r.steps) for r in self.runs],
            "steps_to_target": [r.steps_to_target for r in self.runs],
            "cpu_cores": [r.cpu_cores for r in self.runs],
            "memory_mb": [round(r.memory_mib, 1) for r in self.runs],
            "steady_restarts_per_hour": [r.steady_restarts_per_hour() for r in self.runs],
            "distinct_final_configurations": len({_key(r) for r in self.runs}),
        }


def _key(result: RunResult) -> tuple[tuple[str, int, int | None], ...]:
    return tuple(sorted((vid, vc.parallelism, vc.memory_level)
                        for vid, vc in result.final.items()))


def run_suite(models: list[JobModel], policies: list[PolicyName], seeds: range,
              duration_s: float, run: Runner) -> list[SuiteRow]:
    """`run(model, policy, duration_s, seed=...)` for every combination."""
    return [SuiteRow(model.name, policy,
                     tuple(run(model, policy, duration_s, seed=s) for s in seeds))
            for model in models for policy in policies]


def spread(values: list[float]) -> str:
    """min / median / max, or the one value when all seeds agree."""
    if not values:
        return "-"
    low, mid, high = min(values), statistics.median(values), max(values)
    if low == high:
        return f"{low:,.0f}"
    return f"{low:,.0f} / {mid:,.0f} / {high:,.0f}"


def summary_table(rows: list[SuiteRow]) -> str:
    """Markdown: per model and policy, min / median / max over the seeds."""
    lines = ["| job | policy | steps (all) | steps to target | converged | CPU cores "
             "| memory MiB | restarts/h (steady) | distinct final configurations |",
             "|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        runs = row.runs
        to_target = [float(r.steps_to_target) for r in runs if r.steps_to_target is not None]
        restarts = [x for r in runs if (x := r.steady_restarts_per_hour()) is not None]
        lines.append(
            f"| {row.job} | {row.policy} | {spread([float(len(r.steps)) for r in runs])} | "
            f"{spread(to_target)} | {sum(r.converged for r in runs)}/{len(runs)} | "
            f"{spread([r.cpu_cores for r in runs])} | {spread([r.memory_mib for r in runs])} | "
            f"{spread(restarts)} | {len({_key(r) for r in runs})} |")
    return "\n".join(lines)
