"""What pricing in pods adds to a decision: the place stage's time at 10, 100 and 1,000
tasks, before (one given TaskManager shape, a group per vertex) and now (grouping, shape
chosen within the default bounds, the exact packer on the best few shapes); and the
capacity planner's choice among configurations by their pods (`PodPricing.cheapest`,
each stateful vertex offered its tasks at three memory levels, as the planner offers
the fewest tasks sustaining the need at each level).

    .venv/bin/python -m bench.pricing            # 3 seeds per size
    .venv/bin/python -m bench.pricing --quick    # one seed

Jobs are Nexmark-like chains: a source, a stateless map, then stateful operators at
random memory levels 0-2, and a sink; the tasks are spread over them. "Proven" counts
the decisions whose TaskManager count CP-SAT proved minimal for the chosen shape.
"""

from __future__ import annotations

import argparse
import itertools
import random
import statistics
import time

from packer import pack
from packer.pricing import (
    PAPER_SHAPE,
    PodPricing,
    Prices,
    ShapeBounds,
    VertexSlot,
    cheapest,
    forget_shapes,
    own_groups,
)
from policies.bill import TaskCpu, slot_cpu
from policies.levels import level_of, managed_mib
from policies.model import Edge, JobGraph, Vertex, VertexConfig
from simulator.pods import TASK_HEAP_MIB as HEAP
from simulator.pods import TASK_NETWORK_MIB as NET
from simulator.twin import BASE_MANAGED_MIB

SIZES = (10, 100, 200, 1000)
TIME_LIMIT_S = 2.0  # spec.placement.solverTimeLimit's default


def job(tasks: int, rng: random.Random) -> list[VertexSlot]:
    stateful = rng.randint(1, 4)
    names = ["source", "map", *[f"op{i}" for i in range(stateful)], "sink"]
    weights = [1, 2, *[rng.uniform(2, 6) for _ in range(stateful)], 0.5]
    counts = [max(1, round(tasks * w / sum(weights))) for w in weights]
    counts[names.index("map")] += tasks - sum(counts)  # exactly `tasks` tasks
    counts = [max(1, c) for c in counts]
    out = []
    for i, (name, p) in enumerate(zip(names, counts, strict=True)):
        level = rng.randint(0, 2) if name.startswith("op") else None
        neighbours = tuple(n for n in (names[i - 1] if i else None,
                                       names[i + 1] if i + 1 < len(names) else None) if n)
        out.append(VertexSlot(name, p, 1.0, HEAP, managed_mib(level, BASE_MANAGED_MIB), NET,
                              neighbours))
    return out


def planned_cpu(vertices: list[VertexSlot], rng: random.Random) -> TaskCpu:
    """Each task's planned CPU, as the capacity policy passes it (`slot_cpu`): its vertex's
    busyness at the target, 0.3-0.9 of a core, in tenths; twice the memory a third less."""
    busy = {v.vertex_id: rng.uniform(0.3, 0.9) for v in vertices}
    return lambda vid, c: slot_cpu(busy[vid] * (2 / 3) ** (c.memory_level or 0), 1.0)


def planner_search(vertices: list[VertexSlot], task_cpu: TaskCpu | None = None) -> float:
    """Seconds the planner takes to choose, by pod price, among each stateful vertex's
    fewest tasks at levels 0, 1 and 2 (twice the memory halves the tasks it needs here),
    with each task's planned CPU (`task_cpu`) or the footprint's core."""
    graph = JobGraph(
        tuple(Vertex(v.vertex_id, v.vertex_id, 4096, v.parallelism) for v in vertices),
        tuple(Edge(a.vertex_id, b.vertex_id) for a, b in itertools.pairwise(vertices)))
    start = {v.vertex_id: VertexConfig(v.parallelism, level_of(v.managed_mib, BASE_MANAGED_MIB))
             for v in vertices}
    options = {vid: tuple(VertexConfig(max(1, round(c.parallelism * 2 ** (c.memory_level - lv)
                                                     / (1.5 if lv > c.memory_level else 1))),
                                       lv) for lv in range(3))
               for vid, c in start.items() if c.memory_level is not None}
    pricing = PodPricing(1.0, HEAP, NET, BASE_MANAGED_MIB, time_limit_s=TIME_LIMIT_S)
    forget_shapes()  # cold: nothing remembered from the placement timed before
    started = time.perf_counter()
    pricing.cheapest(graph, options, start, task_cpu)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    seeds = range(1 if args.quick else 3)
    print("| tasks | before: paper shape, s (median) | now: priced in pods, s (median, max) "
          "| added per decision, s | proven now | price now / before "
          "| planner's choice by pods, s (median, max) "
          "| the same with planned CPU, s (median, max) |")
    print("|---|---|---|---|---|---|---|---|")
    for size in SIZES:
        before, now, proven, ratios, search, planned = [], [], 0, [], [], []
        for seed in seeds:
            vertices = job(size, random.Random(seed * 7919 + size))
            slots = [s for g in own_groups(vertices) for s in g.task_slots()]
            started = time.perf_counter()
            old = pack(slots, [PAPER_SHAPE], time_limit_s=TIME_LIMIT_S)
            before.append(time.perf_counter() - started)
            forget_shapes()
            started = time.perf_counter()
            priced = cheapest(vertices, ShapeBounds(), Prices(), time_limit_s=TIME_LIMIT_S)
            now.append(time.perf_counter() - started)
            assert priced is not None
            proven += priced.proven
            search.append(planner_search(vertices))
            planned.append(planner_search(vertices, planned_cpu(vertices, random.Random(seed))))
            paper = Prices().bill(PAPER_SHAPE.cpu_cores, PAPER_SHAPE.process_mib,
                                  max(old.count, old.flink_count or 0))
            ratios.append(priced.price / paper.price)
        added = statistics.median(now) - statistics.median(before)
        print(f"| {size} | {statistics.median(before):.3f} | {statistics.median(now):.3f}, "
              f"{max(now):.3f} | {added:+.3f} | {proven}/{len(now)} | "
              f"{statistics.median(ratios):.2f} | {statistics.median(search):.3f}, "
              f"{max(search):.3f} | {statistics.median(planned):.3f}, {max(planned):.3f} |")


if __name__ == "__main__":
    main()
