"""Benchmark of the scaling core: time of one evaluate() on growing job graphs.

    .venv/bin/python bench/policies.py

Graphs are layered DAGs (each vertex reads from one or two vertices of the layer
before, hash-partitioned) with random busyness, rates and cache hit rates, so DS2
triggers and Justin's branches all occur. "clipped" rows set a CPU limit at 60 %
of what the proposal asks, so limits.clip trims task by task. Each policy side by
side: ds2, justin, and capacity priced per task and, as a policy with the spec's
defaults runs it, in pods (its TaskManager shapes forgotten before each run, so every
run is a cold decision). 200 vertices is the most the controller reads
(controller.adapters.flink_rest.MAX_VERTICES). Target: well under the controller's
metrics resolution (5 s) for any realistic job (<= 100 vertices); CPU bounded by the
work the search may do (packer.pricing.MAX_SCREEN_WORK, BALANCED_WORK) on any graph.
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import packer.pricing
from controller.api import HybridScalingPolicySpec
from policies import PolicyState, ScalingParams, evaluate, totals
from policies.model import Edge, JobGraph, Observation, ShipStrategy, Vertex, VertexMetrics
from policies.spec import CpuScaling, Limits, Policy


def job(n: int, rng: random.Random) -> tuple[JobGraph, Observation]:
    width = max(1, int(n**0.5))
    vertices, edges, metrics = [], [], {}
    for i in range(n):
        vid = f"{i:032x}"
        vertices.append(Vertex(vid, f"op{i}", 128, rng.randint(1, 16), rng.choice([None, 0, 1])))
        if i >= width:
            layer_start = (i // width - 1) * width
            for j in sorted({rng.randrange(layer_start, layer_start + width) for _ in range(2)}):
                edges.append(Edge(f"{j:032x}", vid, ShipStrategy.HASH))
        stateful = rng.random() < 0.5
        theta = rng.random()
        metrics[vid] = VertexMetrics(
            busy_ms_per_s=rng.uniform(50, 1000), busy_ms_per_s_max=1000,
            backpressured_ms_per_s=0, records_in_per_s=0 if i < width else rng.uniform(1e3, 1e5),
            records_out_per_s=rng.uniform(1e3, 1e5),
            pending_records_growth_per_s=rng.uniform(0, 1e4) if i < width else None,
            cache_hits_per_s=theta * 1e4 if stateful else None,
            cache_misses_per_s=(1 - theta) * 1e4 if stateful else None,
            state_latency_ns=rng.uniform(1e4, 5e6) if stateful else None,
            has_state_backend_metrics=stateful,
        )
    return JobGraph(tuple(vertices), tuple(edges)), Observation(1e4, 120, metrics)


def main() -> None:
    rng = random.Random(7)
    cpu = CpuScaling(scale_down_delay=0)
    spec = HybridScalingPolicySpec.model_validate({"targetRef": {"name": "bench"}})
    in_pods = replace(spec.scaling_params(), cpu=cpu)
    policies = [("ds2", ScalingParams(policy=Policy.DS2, cpu=cpu), 5),
                ("justin", ScalingParams(policy=Policy.JUSTIN, cpu=cpu), 5),
                ("capacity, per task", ScalingParams(cpu=cpu), 3),
                ("capacity, in pods", in_pods, 3)]
    header = ("vertices", "tasks", "policy", "limits", "ms/evaluate (median)", "max ms", "changed")
    print("{:>8} {:>6} {:>20} {:>8} {:>21} {:>8} {:>8}".format(*header))
    for n in (5, 20, 100, 200):
        graph, obs = job(n, rng)
        tasks = sum(v.parallelism for v in graph.vertices)
        for name, free, runs in policies:
            asked = totals(evaluate(graph, obs, PolicyState(), free, 1e4).configuration, free)
            clipped = replace(free, limits=Limits(max_cpu_cores=asked.cpu_cores * 0.6))
            for limit, params in (("none", free), ("clipped", clipped)):
                times = []
                for _ in range(runs):
                    packer.pricing.forget_shapes()
                    start = time.perf_counter()
                    e = evaluate(graph, obs, PolicyState(), params, 1e4)
                    times.append((time.perf_counter() - start) * 1000)
                changed = sum(d.action != "none" for d in e.decision.vertices)
                print(f"{n:>8} {tasks:>6} {name:>20} {limit:>8} "
                      f"{statistics.median(times):>21.1f} {max(times):>8.1f} {changed:>8}")

if __name__ == "__main__":
    main()
