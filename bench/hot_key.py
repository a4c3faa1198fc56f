"""Issue 22's hot-key class in the twin: a keyed aggregation (Nexmark q11's session
window) whose busiest subtask carries an indivisible hot key, started at 10 tasks with
the busiest subtask short of what it needs (1.08 of a task; the mean well below); once
with q11's state (reads and updates: memory helps the hot subtask too) and once with
blind writes only (memory does not help: only tasks could, and past a point they don't).

Targets: at most one restart, and the vertex named (a skew finding) within two windows
of the first evaluation. Per policy and hot share, over several seeds (min / median /
max): restarts, when skew was first named (in windows after the first evaluation), the
vertex's final tasks and the job's cores, and whether the busiest subtask keeps up at
the end (the achieved rate over the target).

    .venv/bin/python -m bench.hot_key                  # shares 0.10 0.15 0.20, seeds 0-2
    .venv/bin/python -m bench.hot_key --seeds 5 --duration 2400
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import get_args

from controller.simulate import run
from simulator.model import Access, JobModel, load_model
from simulator.perf import channels, vertex_limit, vertex_shares
from simulator.results import WINDOW_S, PolicyName, RunResult
from simulator.twin import managed_mib

VERTEX = "q11-session"
START = 10  # tasks, as in the measurement
NEED = 1.08  # of a task, for the busiest subtask at START tasks


def model_for(hot: float, seed: int, writes: bool = False) -> JobModel:
    """q11 with a hot key of share `hot`, 10 session tasks, and a load that asks its busiest
    subtask for NEED of a task at that parallelism (this seed's key placement). `writes`:
    its state is written blind (no reads), so memory does not help and only tasks could."""
    base = load_model("q11")
    ops = []
    for o in base.operators:
        if o.uid == VERTEX and o.state is not None:
            state = o.state.model_copy(update={"hot_key_share": hot})
            if writes:
                state = state.model_copy(update={"access": Access(write=1.0)})
            o = o.model_copy(update={"initial_parallelism": START, "state": state})
        ops.append(o)
    name = f"q11-hot{hot:g}" + ("-writes" if writes else "")
    model = base.model_copy(update={"operators": tuple(ops), "name": name})
    op = model.operator(VERTEX)
    start = {o.vertex_id: o.initial_parallelism for o in model.operators}
    level = model.job_graph().vertex(op.vertex_id).memory_level
    limit = vertex_limit(op, START, managed_mib(level), model.rocksdb, model.scaling,
                         *channels(model, start, op.vertex_id),
                         shares=vertex_shares(model, op, START, seed),
                         forst=model.forst_engine)
    return model.model_copy(update={"load": model.load.model_copy(
        update={"rate": round(NEED * limit)})})


def measure(r: RunResult, model: JobModel) -> dict[str, float]:
    vid = model.operator(VERTEX).vertex_id
    named = r.skew_named.get(vid)
    first = WINDOW_S  # the first evaluation ends the first window
    return {
        "restarts": len(r.steps),
        "named_windows": (named - first) / WINDOW_S if named is not None else float("inf"),
        "tasks": r.final[vid].parallelism,
        "cores": r.cpu_cores,
        "kept_up": r.achieved_rate / (model.load.rate or 1.0),
    }


def cell(values: list[float], fmt: str = "{:g}") -> str:
    if any(v == float("inf") for v in values):
        return "never" if all(v == float("inf") for v in values) else (
            fmt.format(min(values)) + " / never")
    lo, mid, hi = min(values), statistics.median(values), max(values)
    return fmt.format(lo) if lo == hi else " / ".join(fmt.format(v) for v in (lo, mid, hi))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shares", type=float, nargs="*", default=[0.10, 0.15, 0.20])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=1200.0, help="virtual seconds")
    parser.add_argument("--policies", nargs="*", default=["capacity", "ds2"],
                        choices=list(get_args(PolicyName)))
    args = parser.parse_args()
    started = time.perf_counter()
    print(f"{args.seeds} seeds, {args.duration:.0f} s each; cells: min / median / max\n")
    print("| hot share, state | policy | restarts | named (windows after the first evaluation) "
          "| final tasks | cores | achieved / target |")
    print("|---|---|---|---|---|---|---|")
    for writes, hot in [(w, h) for w in (False, True) for h in args.shares]:
        for policy in args.policies:
            rows = []
            for seed in range(args.seeds):
                model = model_for(hot, seed, writes)
                rows.append(measure(run(model, policy, args.duration, seed=seed), model))
            kind = "writes only" if writes else "q11's reads and updates"
            print(f"| {hot:g}, {kind} | {policy} | {cell([r['restarts'] for r in rows])} | "
                  f"{cell([r['named_windows'] for r in rows], '{:.1f}')} | "
                  f"{cell([r['tasks'] for r in rows])} | {cell([r['cores'] for r in rows])} | "
                  f"{cell([r['kept_up'] for r in rows], '{:.2f}')} |", flush=True)
    print(f"\n{time.perf_counter() - started:.0f} s wall-clock")


if __name__ == "__main__":
    main()
