"""How much the seed changes a closed-loop run: steps, cores and memory over many seeds.

The twin's noise (docs/simulator.md, "Noise") is seeded; a policy near a decision
boundary should decide differently under different seeds, as it would on a real
cluster. Prints, per built-in job and policy, min / median / max over the seeds of
the reconfigurations (all, and to the target), convergence, the final CPU cores and
memory, restarts per hour in steady phases, and how many final configurations differ.

    .venv/bin/python -m bench.seed_spread            # 10 seeds, 20 minutes each
    .venv/bin/python -m bench.seed_spread --seeds 20 --duration 3600
"""

from __future__ import annotations

import argparse
import time

from controller.simulate import run
from simulator.model import load_model
from simulator.suite import run_suite, summary_table

JOBS = ("q1", "q2", "q3", "q5", "q8", "q11", "read", "write", "update")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--duration", type=float, default=1200.0, help="virtual seconds")
    parser.add_argument("--jobs", nargs="*", default=list(JOBS))
    args = parser.parse_args()
    print(f"{args.seeds} seeds, {args.duration:.0f} s each; cells: min / median / max "
          "(one number: every seed agrees)\n")
    start = time.perf_counter()
    rows = run_suite([load_model(j) for j in args.jobs], ["ds2", "justin", "capacity"],
                     range(args.seeds), args.duration, run)
    print(summary_table(rows))
    print(f"\n{time.perf_counter() - start:.0f} s wall-clock")


if __name__ == "__main__":
    main()
