"""A Figure-5-like plot: rate against the target, backlog, CPU and memory, per-operator
parallelism and memory level, with a marker at each reconfiguration."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from simulator.results import RunResult
from simulator.twin import managed_mib

STYLE = {"justin": "-", "ds2": ":", "capacity": "-."}
COLOURS = {"justin": "tab:purple", "ds2": "tab:orange", "capacity": "tab:blue"}
# Catch-up after a restart runs far above the target; clip the rate axis above the peak
# target so the steady state stays readable.
RATE_HEADROOM = 1.5


def plot_runs(runs: Sequence[RunResult], path: Path, title: str) -> None:
    """Write a PNG: Justin in plain lines, DS2 dotted (as in the paper's Figure 5), capacity
    dash-dotted; dashed
    verticals mark reconfigurations (in the policy's colour). All memory in MiB."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (rate_ax, lag_ax, res_ax, op_ax) = plt.subplots(
        4, 1, figsize=(9, 10), sharex=True, gridspec_kw={"height_ratios": [3, 1.5, 2, 2.5]})
    memory_ax = res_ax.twinx()
    level_ax = op_ax.twinx()
    peak = 0.0
    for run in runs:
        style, colour = STYLE.get(run.policy, "--"), COLOURS.get(run.policy, "black")
        t = [s.time for s in run.samples]
        peak = max([peak, *(s.target_rate for s in run.samples)])
        rate_ax.plot(t, [s.rate / 1000 for s in run.samples], style, color=colour,
                     label=f"{run.policy} rate")
        lag_ax.plot(t, [s.lag / 1e6 for s in run.samples], style, color=colour,
                    label=f"{run.policy} backlog")
        res_ax.plot(t, [s.cpu_cores for s in run.samples], style, color="red",
                    label=f"{run.policy} CPU")
        memory_ax.plot(t, [s.memory_mib for s in run.samples], style, color="green",
                       label=f"{run.policy} memory")
        _operators(run, op_ax, level_ax, style)
        for step in run.steps:
            for ax in (rate_ax, lag_ax, res_ax, op_ax):
                ax.axvline(step.time, color=colour, linestyle="--", linewidth=0.6, alpha=0.6)
    if runs:
        first = runs[0]
        rate_ax.plot([s.time for s in first.samples],
                     [s.target_rate / 1000 for s in first.samples],
                     "--", color="tab:blue", linewidth=0.8, label="target")
    if peak > 0:
        rate_ax.set_ylim(0, RATE_HEADROOM * peak / 1000)
    rate_ax.set_ylabel("rate (k records/s)")
    rate_ax.set_title(title + f" (rate axis clipped at {RATE_HEADROOM:g}× the peak)",
                      fontsize="medium")
    rate_ax.legend(loc="lower right", fontsize="small")
    lag_ax.set_ylabel("backlog (M records)")
    lag_ax.legend(loc="upper right", fontsize="small")
    res_ax.set_ylabel("CPU cores", color="red")
    memory_ax.set_ylabel("memory (MiB)", color="green")
    lines = res_ax.get_legend_handles_labels()
    more = memory_ax.get_legend_handles_labels()
    res_ax.legend(lines[0] + more[0], lines[1] + more[1], loc="upper left", fontsize="small")
    op_ax.set_ylabel("parallelism")
    level_ax.set_ylabel("managed MiB per task", color="gray")
    op_ax.set_xlabel("time (s)")
    op_ax.legend(loc="upper left", fontsize="x-small", ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _operators(run: RunResult, op_ax: Any, level_ax: Any, style: str) -> None:
    """Per non-source, non-pinned operator: parallelism (left) and managed MiB (right), as
    step functions over the reconfigurations."""
    model = run.model
    end = run.samples[-1].time if run.samples else 0.0
    initial = model.job_graph().configuration()
    changes = [(0.0, initial)] + [(s.time, s.configuration) for s in run.steps]
    for op in model.operators:
        if op.is_source or op.fixed_parallelism:
            continue
        times = [t for t, _ in changes] + [end]
        tasks = [c[op.vertex_id].parallelism for _, c in changes]
        memory = [managed_mib(c[op.vertex_id].memory_level) for _, c in changes]
        line = op_ax.step(times, [*tasks, tasks[-1]], style, where="post",
                          label=f"{run.policy} {op.uid}")[0]
        level_ax.step(times, [*memory, memory[-1]], style, where="post",
                      color=line.get_color(), alpha=0.5)
