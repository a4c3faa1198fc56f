"""Start-up time of `hybrid-scaler` commands that need no cluster, and what they load.

    .venv/bin/python -m bench.startup [--runs 5] [--root DIR]

Each command runs as a fresh subprocess (`python -c "from controller.cli import app;
app()" ARGS`), `--runs` times; the median wall time is printed, and whether the process
imported kopf or OR-Tools (they cost most of a cold start, and `--help`, `crd`,
`validate` need neither). `--root` measures another checkout (e.g. an older commit
extracted with `git archive`), to compare before and after. Printed, never asserted.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = (
    ("--help",),
    ("validate", "examples/minimal.yaml"),
    ("crd",),
    ("simulate", "--help"),
)
HEAVY = ("kopf", "ortools", "kubernetes", "matplotlib")
# Runs the CLI, then reports the heavy modules loaded (the CLI exits through SystemExit).
PROBE = """
import sys
from controller.cli import app
try:
    app(sys.argv[1:])
except SystemExit:
    pass
heavy = [m for m in {heavy!r} if m in sys.modules]
print("\\nLOADED:" + ",".join(heavy), file=sys.stderr)
"""


def measure(root: Path, args: tuple[str, ...], runs: int) -> tuple[float, list[str]]:
    times, loaded = [], []
    for _ in range(runs):
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-c", PROBE.format(heavy=HEAVY), *args], cwd=root,
            capture_output=True, text=True, check=False,
            env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
        )
        times.append(time.perf_counter() - started)
        line = next((s for s in done.stderr.splitlines() if s.startswith("LOADED:")), None)
        if line is None:
            raise SystemExit(f"{' '.join(args)} failed in {root}:\n{done.stderr[-2000:]}")
        loaded = [m for m in line.removeprefix("LOADED:").split(",") if m]
    return statistics.median(times), loaded


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--root", type=Path, default=ROOT, help="checkout to measure")
    args = parser.parse_args()
    print(f"{'command':32} {'median s':>9}  heavy modules loaded")
    for command in COMMANDS:
        seconds, loaded = measure(args.root, command, args.runs)
        print(f"{' '.join(command):32} {seconds:9.2f}  {', '.join(loaded) or '-'}")


if __name__ == "__main__":
    main()
