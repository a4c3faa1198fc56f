"""How much the seed changes a closed-loop run: steps, cores and memory over many seeds.

The twin's noise (docs/simulator.md, "Noise") is seeded; a policy near a decision
boundary should decide differently under different seeds, as it would on a real
cluster. Prints, per built-in job and policy, the min / median / max over the seeds
of the reconfigurations (all, and to the target), the final CPU cores and memory,
and how many seeds converged.

    .venv/bin/python -m bench.seed_spread            # 10 seeds, 20 minutes each
    .venv/bin/python -m bench.seed_spread --seeds 20 --duration 3600
"""

from __future__ import annotations

import argparse
import statistics
import time

from simulator.loop import run
from simulator.model import load_model

JOBS = ("q1", "q2", "q3", "q5", "q8", "q11", "read", "write", "update")


def spread(values: list[float]) -> str:
    """min / median / max, or the one value when all seeds agree."""
    low, mid, high = min(values), statistics.median(values), max(values)
    if low == high:
        return f"{low:,.0f}"
    return f"{low:,.0f} / {mid:,.0f} / {high:,.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--duration", type=float, default=1200.0, help="virtual seconds")
    parser.add_argument("--jobs", nargs="*", default=list(JOBS))
    args = parser.parse_args()
    seeds = range(args.seeds)
    print(f"{args.seeds} seeds, {args.duration:.0f} s each; cells: min / median / max "
          "(one number: every seed agrees)\n")
    print("| job | policy | steps (all) | steps to target | converged | CPU cores | memory MiB "
          "| distinct final configurations |")
    print("|---|---|---|---|---|---|---|---|")
    start = time.perf_counter()
    for job in args.jobs:
        model = load_model(job)
        for policy in ("ds2", "justin"):
            runs = [run(model, policy, args.duration, seed=s) for s in seeds]
            to_target = [r.steps_to_target for r in runs if r.steps_to_target is not None]
            finals = {tuple(sorted((k, v.parallelism, v.memory_level) for k, v in r.final.items()))
                      for r in runs}
            print(f"| {job} | {policy} | {spread([len(r.steps) for r in runs])} | "
                  f"{spread([float(n) for n in to_target]) if to_target else '-'} | "
                  f"{sum(r.converged for r in runs)}/{len(runs)} | "
                  f"{spread([r.cpu_cores for r in runs])} | "
                  f"{spread([r.memory_mib for r in runs])} | {len(finals)} |", flush=True)
    print(f"\n{time.perf_counter() - start:.0f} s wall-clock")


if __name__ == "__main__":
    main()
