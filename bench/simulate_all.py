"""Regenerate docs/simulator.md's results: DS2, Justin and the oracle on the six Nexmark
models, set against the Justin paper's §5.1, plus the q11 plot and wall-clock timings.

    .venv/bin/python -m bench.simulate_all              # print the table and timings
    .venv/bin/python -m bench.simulate_all --update-doc # also rewrite the doc's table and plot
"""

from __future__ import annotations

import argparse
import re
import time
from pathlib import Path

from controller.simulate import run
from policies.model import VertexConfig
from policies.spec import CpuScaling
from simulator import pods
from simulator.cli import describe
from simulator.model import load_model
from simulator.plot import plot_runs
from simulator.results import RunResult, oracle
from simulator.twin import Twin

JOBS = ("q1", "q2", "q3", "q5", "q8", "q11")
DURATION_S = 1200.0
ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "simulator.md"
README = ROOT / "README.md"  # carries the results table too, for users who read only it
PLOT = ROOT / "docs" / "img" / "simulator-q11.png"
BEGIN, END = "<!-- results:begin -->", "<!-- results:end -->"
FIG4_BEGIN, FIG4_END = "<!-- fig4:begin -->", "<!-- fig4:end -->"
# Justin paper §5.1, for the comparison column (Justin vs DS2).
PAPER = {
    "q1": "40 % less memory, same CPU, 2 steps each",
    "q2": "like Q1",
    "q3": "10 % less memory, same steps, join (12;158)",
    "q5": "same, small memory saving (sink), (24;158)",
    "q8": "48 % less CPU, 27 % less memory, 3 vs 4 steps",
    "q11": "48 % less CPU, 28 % less memory, same steps",
}


def against(r: RunResult, ds2: RunResult) -> str:
    return (f"CPU {saving(r.cpu_cores, ds2.cpu_cores)}, memory "
            f"{saving(r.memory_mib, ds2.memory_mib)}")


def saving(justin: float, ds2: float) -> str:
    if not ds2:
        return "n/a"
    change = 100 * (1 - justin / ds2)
    if abs(change) < 0.5:
        return "same"
    return f"{abs(change):.0f} % {'less' if change > 0 else 'more'}"


FIG4_MEMORY_MB = (128, 256, 512, 1024, 2048)  # Figure 4: levels 0..4 of a 128 MB base
FIG4_PARALLELISM = (1, 2, 4, 8)
# Figure 4 marks a configuration as sustaining the target when it measures within 3 %.
FIG4_SUSTAINS = 0.97


def fig4_rate(job: str, parallelism: int, memory_mb: int) -> float:
    """Mean records/s of the benchmark operator over 60 s, as Figure 4 measures it."""
    model = load_model(job)
    bench = model.operators[1]
    level = FIG4_MEMORY_MB.index(memory_mb)
    twin = Twin(model, seed=1, base_managed_mib=128.0,
                configuration={bench.vertex_id: VertexConfig(parallelism, level)})
    twin.advance(60)
    return twin.observe(60).vertices[bench.vertex_id].records_in_per_s


def fig4_grid() -> str:
    """The twin's Figure 4: records/s of the benchmark operator per (tasks; managed MB)."""
    lines = ["| workload (target) | tasks | "
             + " | ".join(f"{m} MB" for m in FIG4_MEMORY_MB) + " |",
             "|---|---|" + "---|" * len(FIG4_MEMORY_MB)]
    for job in ("read", "write", "update"):
        target = load_model(job).target_at(0)
        for p in FIG4_PARALLELISM:
            cells = []
            for memory in FIG4_MEMORY_MB:
                rate = fig4_rate(job, p, memory)
                mark = " ✓" if rate >= FIG4_SUSTAINS * target else ""
                cells.append(f"{rate / 1000:.1f}k{mark}")
            label = f"{job} ({target / 1000:.0f}k/s)" if p == 1 else ""
            lines.append(f"| {label} | {p} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def row(job: str, name: str, steps: str, at: str, cores: float, memory: float, config: str,
        extra: str = "") -> str:
    return (f"| {job} | {name} | {steps} | {at} | {cores:.0f} | {memory:,.0f} | {config} |"
            f" {extra} |")


def results(plot: Path | None = None, runs_out: dict[str, dict[str, RunResult]] | None = None
            ) -> tuple[str, list[tuple[str, str, float]]]:
    """The results table (Markdown) and the wall-clock seconds of each closed-loop run;
    writes the q11 plot to `plot` when given, and the runs to `runs_out`."""
    lines = [
        "| job (peak target) | policy | steps to target (all) | converged at | CPU cores "
        "| memory MiB | final configuration (p;MiB) | against DS2 here / Justin's in the paper |",
        "|---|---|---|---|---|---|---|---|",
    ]
    timings = []
    for job in JOBS:
        model = load_model(job)
        runs: dict[str, RunResult] = {}
        for policy in ("ds2", "justin", "capacity"):
            start = time.perf_counter()
            runs[policy] = run(model, policy, DURATION_S)
            timings.append((job, policy, time.perf_counter() - start))
        if runs_out is not None:
            runs_out[job] = runs
        best = oracle(model, horizon_s=DURATION_S)
        target_util = CpuScaling().utilization_target
        aimed = oracle(model, horizon_s=DURATION_S, utilization=target_util)
        justin, ds2 = runs["justin"], runs["ds2"]

        notes = {"DS2": "", "Justin": f"{against(justin, ds2)} / {PAPER[job]}",
                 "capacity": against(runs["capacity"], ds2)}
        for name, r in (("DS2", ds2), ("Justin", justin), ("capacity", runs["capacity"])):
            at = f"{r.converged_at_s:.0f} s" if r.converged_at_s is not None else "not"
            to_target = "-" if r.steps_to_target is None else str(r.steps_to_target)
            lines.append(row(f"{job} ({model.peak_target(DURATION_S):,.0f}/s)"
                             if name == "DS2" else "",
                             name, f"{to_target} ({len(r.steps)})", at, r.cpu_cores,
                             r.memory_mib, describe(model, r.final), notes[name]))
        lines.append(row("", "oracle (100 % busy)", "-", "-", best.cpu_cores, best.memory_mib,
                         describe(model, best.configuration)))
        name = f"oracle ({100 * target_util:.0f} % busy)"
        if aimed.feasible:
            lines.append(row("", name, "-", "-", aimed.cpu_cores, aimed.memory_mib,
                             describe(model, aimed.configuration)))
        else:  # e.g. a hot key: its subtask stays above the target at any parallelism
            lines.append(f"|  | {name} | - | - | - | - | out of reach at any parallelism |  |")
        if job == "q11" and plot is not None:
            plot.parent.mkdir(parents=True, exist_ok=True)
            plot_runs([justin, ds2], plot, "q11: Justin (plain) vs DS2 (dotted), twin")
    return "\n".join(lines), timings


PODS_BEGIN, PODS_END = "<!-- pods:begin -->", "<!-- pods:end -->"
SEEDS = (0, 1, 2)


def spread(values: list[float], fmt: str = "{:.2f}") -> str:
    """Seed 0's value, and the range over the seeds when they differ."""
    low, high = min(values), max(values)
    head = fmt.format(values[0])
    return head if fmt.format(low) == fmt.format(high) else \
        f"{head} ({fmt.format(low)}–{fmt.format(high)})"


def pods_table(first: dict[str, dict[str, RunResult]],
               seeds: tuple[int, ...] = SEEDS) -> str:
    """Each policy's final configuration as the pods the controller writes (pod CPU, pod
    memory, price per hour at spec.cost's defaults), against DS2's final parallelism run
    the upstream way (Flink's default group, ceil(max p / 4) paper TaskManagers: upstream
    is not run here) and against the pod oracle; seed 0's value, the range over `seeds`."""
    lines = [
        "| job | policy | pod CPU | pod memory GiB | price / h | × upstream-realized DS2 "
        "| × pod oracle | packing | per task: cores, MiB |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for job in JOBS:
        model = load_model(job)
        per_seed = [first[job] if seed == 0 else
                    {p: run(model, p, DURATION_S, seed=seed) for p in ("ds2", "justin",
                                                                       "capacity")}
                    for seed in seeds]
        oracles = [pods.pod_oracle(model, horizon_s=DURATION_S, seed=seed) for seed in seeds]
        ups = [pods.upstream(r["ds2"].final) for r in per_seed]
        baseline = [u.pods.price for u in ups]
        for n, name in enumerate(("ds2", "justin", "capacity")):
            bills = [pods.placed(r[name]) for r in per_seed]
            vs_up = [b.pods.price / u for b, u in zip(bills, baseline, strict=True)]
            vs_or = [b.pods.price / o.bill.pods.price for b, o in zip(bills, oracles, strict=True)
                     if o is not None]
            r0 = per_seed[0][name]
            cores = spread([b.pods.cpu_cores for b in bills], "{:.0f}")
            lines.append(
                f"| {job if n == 0 else ''} | {name} | {cores} "
                f"| {spread([b.pods.memory_mib / 1024 for b in bills], '{:.1f}')} "
                f"| {spread([b.pods.price for b in bills])} | {spread(vs_up)} "
                f"| {spread(vs_or) if vs_or else '-'} "
                f"| {bills[0].pods.task_managers} × {bills[0].shape}"
                f"{'' if bills[0].proven else ' (feasible)'} "
                f"| {r0.cpu_cores:.0f}, {r0.memory_mib:,.0f} |")
        up = ups[0]
        lines.append(f"|  | upstream-realized DS2 | {up.pods.cpu_cores:.0f} | "
                     f"{up.pods.memory_mib / 1024:.1f} | {spread(baseline)} | 1.00 | - | "
                     f"{up.pods.task_managers} × {up.shape} | - |")
        o = oracles[0]
        if o is None:
            lines.append("|  | pod oracle | - | - | - | - | - | out of reach | - |")
        else:
            bill = o.bill.pods
            lines.append(
                f"|  | pod oracle | {bill.cpu_cores:.0f} | {bill.memory_mib / 1024:.1f} | "
                f"{spread([x.bill.pods.price for x in oracles if x is not None])} | "
                f"{bill.price / baseline[0]:.2f} | 1.00 | {bill.task_managers} × {o.bill.shape} "
                f"| {describe(model, o.configuration)} |")
    return "\n".join(lines)


def documented(path: Path, begin: str = BEGIN, end: str = END) -> str | None:
    """The generated block between `begin` and `end` in `path`, if it has one."""
    found = re.search(re.escape(begin) + "\n(.*?)\n" + re.escape(end), path.read_text(), re.S)
    return found.group(1) if found else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--update-doc", action="store_true")
    args = parser.parse_args()
    runs: dict[str, dict[str, RunResult]] = {}
    table, timings = results(PLOT if args.update_doc else None, runs)
    print(table)
    pod_table = pods_table(runs)
    print("\nin pods (TaskManager requests), seeds " + ", ".join(map(str, SEEDS)) + ":\n"
          + pod_table)
    print("\nwall-clock time of one 20-minute closed-loop experiment:")
    for job, policy, seconds in timings:
        print(f"  {job:4} {policy:7} {seconds:5.2f} s")
    print(f"  max {max(t for *_, t in timings):.2f} s")
    grid = fig4_grid()
    print("\nthe twin's Figure 4 (✓: sustains the target):\n" + grid)
    if args.update_doc:
        for path in (DOC, README):
            text = path.read_text()
            for begin, end, body in ((BEGIN, END, table), (FIG4_BEGIN, FIG4_END, grid),
                                     (PODS_BEGIN, PODS_END, pod_table)):
                if begin in text:
                    head, rest = text.split(begin, 1)
                    text = f"{head}{begin}\n{body}\n{end}{rest.split(end, 1)[1]}"
            path.write_text(text)
        print(f"\nupdated {DOC.relative_to(ROOT)}, README.md and {PLOT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
