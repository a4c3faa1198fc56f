"""A twin's configuration in the unit the cluster bills: TaskManager pods (issue 20).

Three realizations of a final configuration, priced at spec.cost's default prices:

* **ours**: what the controller writes in fineGrained mode (`controller.place.pack`):
  slot sharing groups, a TaskManager shape fitted within the default bounds, the exact
  packing (`packer.pricing.cheapest`), one task's footprint a slot of the paper's shape;
* **upstream**: how Flink runs a parallelism with its default slot sharing group on
  the paper's TaskManager: ceil(max parallelism / 4) × (4 cores, 2 GiB);
* **the pod oracle** (`pod_oracle`): the cheapest (configuration, grouping, shape,
  packing) that sustains the peak target at a utilization, beside the paper's oracle;
  and over time, `bill_oracle`: its price-hours as it follows the load.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

from packer.pricing import PAPER_SHAPE, PodPricing, Priced, Prices, ShapeBounds, upstream_pods
from policies.bill import PodBill, TaskCpu, slot_cpu
from policies.model import Configuration, VertexConfig
from policies.spec import CpuScaling, MemoryScaling
from simulator.model import JobModel
from simulator.perf import channels, vertex_limit
from simulator.results import RunResult, _fewest_tasks, oracle, unit_loads
from simulator.twin import BASE_MANAGED_MIB, managed_mib

SLOTS = PAPER_SHAPE.max_slots or 4
# One task's CPU, heap and network: a slot of the paper's TaskManager, as the controller
# derives it from spec.taskManager (controller.api.TaskManagerShape.slot_footprint).
TASK_CPU = PAPER_SHAPE.cpu_cores / SLOTS
TASK_HEAP_MIB = PAPER_SHAPE.memory.task_heap_mib / SLOTS
TASK_NETWORK_MIB = PAPER_SHAPE.memory.network_mib / SLOTS
# The bill oracle follows the load in steps this long (`bill_oracle`).
BILL_SEGMENT_S = 300.0


@dataclass(frozen=True)
class Realized:
    """A configuration's pod bill (`policies.bill.PodBill`, the controller's), with how it was
    found: the TaskManager shape's name and whether the packing's count is proven minimal."""

    pods: PodBill
    shape: str
    proven: bool | None = None  # the packing's TaskManager count proven minimal

    @classmethod
    def of(cls, model: JobModel, priced: Priced | None) -> Realized:
        """What the packer priced, or a clear error when no TaskManager holds a slot."""
        if priced is None:
            raise ValueError(f"{model.name}: no TaskManager within the bounds holds a slot")
        return cls(priced.bill, priced.shape.name, priced.proven)

    def as_json(self) -> dict[str, Any]:
        return {"pod_cpu": self.pods.cpu_cores, "pod_memory_mb": round(self.pods.memory_mib),
                "price": round(self.pods.price, 3), "replicas": self.pods.task_managers,
                "shape": self.shape, "proven": self.proven}


def pricing(base: float = BASE_MANAGED_MIB, bounds: ShapeBounds | None = None,
            prices: Prices | None = None, time_limit_s: float = 2.0) -> PodPricing:
    """How the controller prices a twin job's configurations (fineGrained, one task a slot
    of the paper's TaskManager): what `spec.scaling_params()` gives the planner."""
    return PodPricing(TASK_CPU, TASK_HEAP_MIB, TASK_NETWORK_MIB, base,
                      bounds or ShapeBounds(), prices or Prices(), time_limit_s)


def ours(model: JobModel, configuration: Configuration, base: float = BASE_MANAGED_MIB,
         bounds: ShapeBounds | None = None, prices: Prices | None = None,
         time_limit_s: float = 2.0) -> Realized:
    """The pods the controller writes for `configuration` (fineGrained, default bounds)."""
    return Realized.of(model, pricing(base, bounds, prices, time_limit_s).exact(
        model.job_graph(), configuration))


def placed(result: RunResult) -> Realized:
    """The pods a run's last step placed (status.placement: its planned CPU per task
    included), else the pods the controller writes for its final configuration."""
    if result.pods is None:
        return ours(result.model, result.final)
    bill, shape, proven = result.pods
    return Realized(bill, shape, proven)


def upstream(configuration: Configuration, prices: Prices | None = None) -> Realized:
    """Flink's default slot sharing on the paper's TaskManager."""
    pods = upstream_pods({v: c.parallelism for v, c in configuration.items()},
                         prices=prices or Prices())
    return Realized(pods, PAPER_SHAPE.name)


@dataclass(frozen=True)
class PodOracle:
    configuration: Configuration
    bill: Realized
    screened: int  # configurations the bound ranked


def pod_oracle(model: JobModel, target_rate: float | None = None, *,
               utilization: float = 0.5, horizon_s: float = 1200.0, seed: int = 0,
               prices: Prices | None = None,
               bounds: ShapeBounds | None = None) -> PodOracle | None:
    """The cheapest configuration, grouping, shape and packing sustaining the peak at
    `utilization`: per vertex the fewest tasks at each memory level (upstream vertices
    at the paper oracle's sizes), chosen as the capacity planner chooses (the same
    search, `PodPricing.cheapest`). None if out of reach."""
    prices, bounds = prices or Prices(), bounds or ShapeBounds()
    paper = oracle(model, target_rate, utilization=utilization, horizon_s=horizon_s, seed=seed)
    if not paper.feasible:
        return None
    target = paper.target_rate
    loads = unit_loads(model)
    parallelism = {v: c.parallelism for v, c in paper.configuration.items()}
    options: dict[str, tuple[VertexConfig, ...]] = {}
    max_level = MemoryScaling().max_level
    for vid in model.job_graph().topological_order():
        op = model.by_vertex()[vid]
        need = loads[vid] * target / (1.0 if op.fixed_parallelism else utilization)
        levels: list[int | None] = [None] if op.state is None else list(range(max_level))
        found = []
        for level in levels:
            p = _fewest_tasks(model, op, level, need, parallelism, seed)
            if p is not None:
                found.append(VertexConfig(p, level))
        options[vid] = tuple(found) or (paper.configuration[vid],)
    # The planner's own search (packer.pricing.PodPricing.cheapest) over the same options,
    # each task asking for the CPU it uses at the target at utilizationMax, as the
    # capacity planner's do (policies/capacity.py, `_TaskCpu`).
    start = MappingProxyType({vid: o[0] for vid, o in options.items()})
    search = replace(pricing(bounds=bounds, prices=prices), screen_work=None)  # unbounded
    config, priced = search.choose(
        model.job_graph(), options, start,
        planned_cpu(model, target, CpuScaling().utilization_max, parallelism, seed))
    screened = math.prod(len(o) for o in options.values())
    return PodOracle(config, Realized.of(model, priced), screened)


def bill_oracle(model: JobModel, duration_s: float,
                utilization: Callable[[float], float | None], *, seed: int = 0,
                segment_s: float = BILL_SEGMENT_S) -> float | None:
    """What the pod oracle bills over [0, duration_s) as it follows the load, in
    price-hours: each `segment_s` at the pod oracle for that segment's peak target
    (sampled every 5 s, as `JobModel.peak_target`), at the utilization `utilization`
    gives for that target, resized at the segment's start, instantly and without a
    restart. It pays no measuring window, downtime or catch-up, so it is what a
    clairvoyant policy aiming at the same target would bill; no lower bound, as the
    pod oracle is none (it holds a hot key's busiest subtask to the utilization it is
    aimed at, where the capacity planner lets it run to just below saturation). None
    where a segment is out of reach (`utilization` None, or no pod oracle)."""
    @functools.cache
    def price(target: float) -> float | None:
        aimed = utilization(target)
        best = None if aimed is None else pod_oracle(
            model, target, utilization=aimed, horizon_s=duration_s, seed=seed)
        return None if best is None else best.bill.pods.price

    total, start = 0.0, 0.0
    while start < duration_s:
        end = min(duration_s, start + segment_s)
        samples = max(1, round((end - start) / 5.0))
        peak = max(model.target_at(start + (end - start) * k / samples)
                   for k in range(samples))  # [start, end): the next segment has its end
        hourly = price(round(peak, 6))
        if hourly is None:
            return None
        total += hourly * (end - start) / 3600.0
        start = end
    return total


def planned_cpu(model: JobModel, target_rate: float, utilization: float,
                parallelism: Mapping[str, int], seed: int = 0) -> TaskCpu:
    """One task's CPU at a configuration, as the capacity planner plans it (`slot_cpu` of
    its tasks' mean busyness at the load its CPU is sized for), from the twin's truth: the
    vertex's load at `target_rate` over `utilization`, over what its tasks absorb."""
    loads, ops = unit_loads(model), model.by_vertex()

    @functools.cache
    def cpu(vertex_id: str, config: VertexConfig) -> float:
        op = ops[vertex_id]
        need = loads[vertex_id] * target_rate / (1.0 if op.fixed_parallelism else utilization)
        # Every subtask an equal share: the vertex's mean task, as the planner sizes CPU.
        p = config.parallelism
        limit = vertex_limit(op, p, managed_mib(config.memory_level), model.rocksdb,
                             model.scaling, *channels(model, {**parallelism, vertex_id: p},
                                                      vertex_id),
                             shares=(1.0 / p,) * p, forst=model.forst_engine)
        return slot_cpu(need / limit if limit > 0 else math.inf, TASK_CPU)

    return cpu


def ratio(ours_value: float, theirs: float) -> float:
    return ours_value / theirs if theirs > 0 else math.inf
