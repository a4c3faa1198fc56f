"""Issue 23 on the twin: the controller's own loop with memory steps resized in place
(spec.resize, flink-plugin's agents) against the same loop restarting for every step.

Per job, policy and TaskManager set-up, over several seeds: steps, restarts, resizes, the
downtime summed, the time until the job first kept up (the last phase's), and the pods'
price at the end. Two set-ups: the default shape bounds (the packer fits each TaskManager
to its slots, so growth rarely finds unreserved managed memory) and a menu of one shape, 4
cores, 4 GiB, 4 slots (pods with managed memory to spare, as a cluster with fixed node
pools gives).

    .venv/bin/python -m bench.resize                      # seeds 0-2, 25 virtual minutes
    .venv/bin/python -m bench.resize --seeds 5 --jobs read q11
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence

from controller.api import TaskManagerShape, TaskManagerSpec
from controller.simulate import run
from simulator.model import load_model
from simulator.results import PolicyName, RunResult

JOBS = ("read", "read-cliff", "statejob", "update", "q11", "q8")
POLICIES: tuple[PolicyName, ...] = ("justin", "capacity")
MENU = TaskManagerSpec(shapes=(TaskManagerShape(cpu=4, memory="4096Mi", slots=4),))


def measure(r: RunResult) -> dict[str, float]:
    restarts = [s for s in r.steps if s.downtime_s > 0]
    reached = [p.time_to_target_s for p in r.phases if p.time_to_target_s is not None]
    return {"steps": len(r.steps), "restarts": len(restarts),
            "resizes": len(r.steps) - len(restarts),
            "downtime": sum(s.downtime_s for s in restarts),
            "kept_up": reached[-1] if reached and r.phases else float("nan"),
            "converged": float(r.converged)}


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=1500.0)
    parser.add_argument("--jobs", nargs="*", default=list(JOBS))
    args = parser.parse_args()
    started = time.perf_counter()
    print(f"{args.seeds} seeds, {args.duration:.0f} s each; medians (min-max) over seeds")
    print("| job | policy | TaskManagers | resize | steps | restarts | resizes | downtime s "
          "| last phase kept up after s | converged |")
    print("|---|---|---|---|---:|---:|---:|---:|---:|---:|")
    totals: dict[tuple[str, bool], list[float]] = {}
    for job in args.jobs:
        model = load_model(job)
        for policy in POLICIES:
            for name, task_manager in (("bounds", None), ("menu 4c/4Gi", MENU)):
                for resize in (False, True):
                    rows = [measure(run(model, policy, args.duration, seed, resize=resize,
                                        task_manager=task_manager))
                            for seed in range(args.seeds)]

                    def cell(key: str, rows: list[dict[str, float]] = rows) -> str:
                        values = [r[key] for r in rows]
                        low, high = min(values), max(values)
                        mid = median(values)
                        return f"{mid:.0f}" if low == high else f"{mid:.0f} ({low:.0f}-{high:.0f})"

                    totals.setdefault((name, resize), []).extend(r["downtime"] for r in rows)
                    print(f"| {job} | {policy} | {name} | {'on' if resize else 'off'} "
                          f"| {cell('steps')} | {cell('restarts')} | {cell('resizes')} "
                          f"| {cell('downtime')} | {cell('kept_up')} "
                          f"| {sum(r['converged'] for r in rows):.0f}/{len(rows)} |")
    print()
    print("| TaskManagers | downtime off (s, all runs) | downtime on | on ÷ off |")
    print("|---|---:|---:|---:|")
    for name in ("bounds", "menu 4c/4Gi"):
        off, on = sum(totals.get((name, False), [])), sum(totals.get((name, True), []))
        print(f"| {name} | {off:.0f} | {on:.0f} | {on / off if off else float('nan'):.2f} |")
    print(f"\n{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
