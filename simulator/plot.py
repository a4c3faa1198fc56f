"""A Figure-5-like plot: achieved rate against the target, then CPU and memory, over time."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from simulator.results import RunResult

STYLE = {"justin": "-", "ds2": ":"}


def plot_runs(runs: Sequence[RunResult], path: Path, title: str) -> None:
    """Write a PNG: Justin in plain lines, DS2 dotted (as in the paper's Figure 5)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    memory_axis = bottom.twinx()
    for run in runs:
        style = STYLE.get(run.policy, "--")
        t = [s.time for s in run.samples]
        top.plot(t, [s.rate / 1000 for s in run.samples], style, color="purple",
                 label=f"{run.policy} rate")
        bottom.plot(t, [s.cpu_cores for s in run.samples], style, color="red",
                    label=f"{run.policy} CPU")
        memory_axis.plot(t, [s.memory_mib / 1024 for s in run.samples], style, color="green",
                         label=f"{run.policy} memory")
    if runs:
        first = runs[0]
        top.plot([s.time for s in first.samples], [s.target_rate / 1000 for s in first.samples],
                 "--", color="tab:blue", linewidth=0.8, label="target")
    top.set_ylabel("rate (k records/s)")
    top.set_title(title)
    top.legend(loc="lower right", fontsize="small")
    bottom.set_xlabel("time (s)")
    bottom.set_ylabel("CPU cores", color="red")
    memory_axis.set_ylabel("memory (GiB)", color="green")
    lines = bottom.get_legend_handles_labels()
    more = memory_axis.get_legend_handles_labels()
    bottom.legend(lines[0] + more[0], lines[1] + more[1], loc="upper left", fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
