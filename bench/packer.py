"""Benchmark of the packer: TaskManager counts, bounds, time, moves after a small change.

    .venv/bin/python bench/packer.py            # full: 3 seeds per instance
    .venv/bin/python bench/packer.py --quick    # one seed, fewer 5000-slot rows, < 60 s
    .venv/bin/python bench/packer.py --json     # a JSON list of rows instead of the table

Instances are random jobs (vertices with random cpu, heap and memory level) and
Nexmark-like jobs (source → stateless map → stateful windows/joins → sink); 2
dimensions means cpu + managed memory, 3 adds task heap. A "small change" is one
operator gaining 2 tasks, re-packed with the first placement as today's.

Targets (issue 3): ≤ 200 slots proven optimal in ≤ 1 s; 1000 slots within lower
bound + 1 in ≤ 3 s; 5000 slots answered in ≤ 5 s; never more TaskManagers than
FFD; 0 moves when today's placement is still optimal (checked by re-packing
the unchanged slots).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

# Run as a script, this file's folder comes first on sys.path and its name would
# shadow the packer package: put the repository root in front.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from packer import Placement, TaskManagerShape, TaskSlot, check, pack
from policies.levels import managed_mib

SHAPE = TaskManagerShape("4cpu-8g", cpu_cores=4, process_mib=8192)
BASE_MANAGED = 158.0  # the Justin paper's level-0 managed memory per task
SIZES = (10, 50, 200, 1000, 5000)
# Time limit passed to pack(): the targets' budget minus room for the greedy passes.
TIME_LIMIT = {10: 0.8, 50: 0.8, 200: 0.8, 1000: 2.5, 5000: 4.0}


def _split(total: int, weights: list[float], rng: random.Random) -> list[int]:
    """`total` tasks over vertices in proportion to `weights`, every vertex at least 1."""
    counts = [1] * len(weights)
    for _ in range(total - len(weights)):
        counts[rng.choices(range(len(weights)), weights)[0]] += 1
    return counts


def random_job(slots: int, dims: int, rng: random.Random) -> list[TaskSlot]:
    vertices = max(2, min(40, slots // 25))
    result: list[TaskSlot] = []
    for v, n in enumerate(_split(slots, [1.0] * vertices, rng)):
        cpu = rng.choice([0.25, 0.5, 1.0, 2.0])
        level = rng.choice([None, 0, 1, 2])
        managed = managed_mib(level, BASE_MANAGED)
        heap = rng.choice([64.0, 128.0, 256.0, 512.0]) if dims == 3 else 0.0
        result.extend(TaskSlot(f"v{v}", i, cpu, managed, heap) for i in range(n))
    return result


def nexmark_job(slots: int, dims: int, rng: random.Random) -> list[TaskSlot]:
    """Sources and sinks stateless, a map, and 1–3 stateful operators at memory levels 0–2."""
    stateful = rng.randint(1, 3)
    names = ["source", "map", *[f"stateful{i}" for i in range(stateful)], "sink"]
    weights = [0.2, 0.15, *[0.55 / stateful] * stateful, 0.1]
    result: list[TaskSlot] = []
    for name, n in zip(names, _split(slots, weights, rng), strict=True):
        is_stateful = name.startswith("stateful")
        cpu = 1.0 if name != "sink" else 0.5
        managed = managed_mib(rng.randint(0, 2), BASE_MANAGED) if is_stateful else 0.0
        heap = (256.0 if is_stateful else 128.0) if dims == 3 else 0.0
        result.extend(TaskSlot(name, i, cpu, managed, heap) for i in range(n))
    return result


def small_change(slots: list[TaskSlot], rng: random.Random) -> list[TaskSlot]:
    """One operator gains 2 tasks."""
    vertex = rng.choice(sorted({s.vertex_id for s in slots}))
    mine = [s for s in slots if s.vertex_id == vertex]
    top = max(s.subtask for s in mine)
    extra = [TaskSlot(vertex, top + 1 + i, mine[0].cpu_cores, mine[0].managed_mib,
                      mine[0].heap_mib, mine[0].network_mib) for i in range(2)]
    return [*slots, *extra]


def _checked(placement: Placement, slots: list[TaskSlot], **kw: object) -> Placement:
    problems = check(placement, slots, [SHAPE], **kw)  # type: ignore[arg-type]
    if problems:
        raise SystemExit(f"invalid placement: {problems}")
    return placement


def run_row(kind: str, size: int, dims: int, seed: int) -> tuple[dict[str, object], int]:
    rng = random.Random(f"{kind}-{size}-{dims}-{seed}")
    slots = (random_job if kind == "random" else nexmark_job)(size, dims, rng)
    limit = TIME_LIMIT[size]
    started = time.perf_counter()
    first = _checked(pack(slots, [SHAPE], time_limit_s=limit), slots)
    seconds = time.perf_counter() - started
    changed = small_change(slots, rng)
    today = first.as_current()
    after = _checked(pack(changed, [SHAPE], current=today, time_limit_s=limit), changed,
                     current=today)
    same = _checked(pack(slots, [SHAPE], current=today, time_limit_s=limit), slots,
                    current=today)
    row: dict[str, object] = {
        "slots": size,
        "dims": dims,
        "tms": first.count,
        "lower_bound": first.lower_bound,
        "ffd_tms": first.ffd_count,
        "flink_first_fit_tms": first.flink_count,
        "seconds": round(seconds, 3),
        "status": first.status.value,
        "moves_after_small_change": after.moved,
    }
    # Re-packing unchanged slots must keep an optimal placement as it is.
    unchanged_moves = same.moved if same.count == first.count else -1
    return row, unchanged_moves


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="one seed, under a minute")
    parser.add_argument("--json", action="store_true", help="print a JSON list of rows")
    args = parser.parse_args()

    plan = []
    for kind in ("random", "nexmark"):
        for dims in (2, 3):
            for size in SIZES:
                if args.quick and size == 5000 and (kind, dims) != ("random", 3):
                    continue
                for seed in range(1 if args.quick else 3):
                    plan.append((kind, size, dims, seed))

    rows = []
    kinds = []
    unchanged = []
    for kind, size, dims, seed in plan:
        row, moves = run_row(kind, size, dims, seed)
        rows.append(row)
        kinds.append(kind)
        unchanged.append(moves)
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    header = ("kind", "slots", "dims", "tms", "lower_bound", "ffd_tms",
              "flink_first_fit_tms", "seconds", "status", "moves_after_small_change")
    print(" ".join(f"{h:>12}" for h in header))
    for kind, row in zip(kinds, rows, strict=True):
        print(" ".join(f"{v!s:>12}" for v in (kind, *row.values())))
    _summary(rows, unchanged)


def _summary(rows: list[dict[str, object]], unchanged: list[int]) -> None:
    def ints(row: dict[str, object], key: str) -> int:
        value = row[key]
        assert isinstance(value, int)
        return value

    def seconds(row: dict[str, object]) -> float:
        value = row["seconds"]
        assert isinstance(value, float)
        return value

    small = [r for r in rows if ints(r, "slots") <= 200]
    mid = [r for r in rows if ints(r, "slots") == 1000]
    big = [r for r in rows if ints(r, "slots") == 5000]
    print()
    print(f"<=200 slots proven optimal in <=1 s: "
          f"{sum(r['status'] == 'optimal' and seconds(r) <= 1 for r in small)}/{len(small)}")
    print(f"1000 slots within LB+1 in <=3 s: "
          f"{sum(ints(r, 'tms') <= ints(r, 'lower_bound') + 1 and seconds(r) <= 3 for r in mid)}"
          f"/{len(mid)}")
    print(f"5000 slots answered in <=5 s: {sum(seconds(r) <= 5 for r in big)}/{len(big)}")
    print(f"never more TaskManagers than FFD: "
          f"{sum(ints(r, 'tms') <= ints(r, 'ffd_tms') for r in rows)}/{len(rows)}")
    print(f"0 moves re-packing unchanged slots: {sum(m == 0 for m in unchanged)}/{len(rows)}")
    gaps = [ints(r, "flink_first_fit_tms") - ints(r, "tms") for r in rows]
    print(f"Flink's first fit needs more TaskManagers than the packer: "
          f"{sum(g > 0 for g in gaps)}/{len(rows)} instances, up to {max(gaps)} more")


if __name__ == "__main__":
    main()
