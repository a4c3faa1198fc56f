"""Place: a configuration as task slots, packed onto TaskManagers of an allowed shape.

Each task asks for one slot: CPU, task heap and network are the task footprint, an
equal share of the *first* allowed shape (its cores and Flink's memory split divided
by its slots; `ScalingParams.footprint`), so a task needs the same wherever it lands,
as the per-operator resources written to Flink say; managed memory is the task's
memory level (base × 2^m, 0 at ⊥). In adaptive mode every slot
is the same size, so each gets the largest managed memory any task needs.

In Recommend mode the pass ends here, with the advice (and the TaskManagers it
needs) recorded; Justin's history keeps what really runs.

The replica count is what Flink's own first-fit allocator needs for the chosen
shape, which may exceed the optimum the packer proves: asking for fewer would
leave slots unfulfilled and the job unscheduled.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, replace

import packer
from controller import telemetry
from controller.api import ConditionType, Mode, PlacementStatus, Realization, TaskManagerSpec
from controller.api import TaskManagerShape as SpecShape
from controller.realize import MANAGED_FRACTION_KEY, NETWORK_FRACTION_KEY, pods_now
from controller.record import Reason, Run, Stop, pod_request, policy_state, with_policy_state
from packer.pricing import PodPricing, Priced, Prices
from policies import Evaluation, explain
from policies.decision import Decision
from policies.learning import VertexLearning
from policies.model import Configuration, JobGraph
from policies.spec import CostSpec, MemoryScaling, TaskFootprint


@dataclass(frozen=True)
class Placed:
    shape: SpecShape
    replicas: int  # what Flink's own allocator needs
    placement: packer.Placement
    # Fine-grained: the priced pods (shape with Flink's fractions, slot sharing groups).
    priced: Priced | None = None

    @property
    def slot_cpu(self) -> dict[str, float] | None:
        """vertex id -> the CPU of one slot of its group (the members' planned CPU summed),
        when groups were chosen."""
        if self.priced is None:
            return None
        return {v: g.cpu_cores for g in self.priced.groups for v in g.members}

    @property
    def groups(self) -> dict[str, str] | None:
        """vertex id -> slot sharing group, when groups were chosen."""
        return None if self.priced is None else self.priced.group_of()

    @property
    def flink_options(self) -> dict[str, str]:
        """The Flink options a fitted shape needs beside its cpu and memory (a shape of
        the user's menu runs with the deployment's own memory options)."""
        if self.priced is None or self.priced.shape.max_slots is not None:
            return {}
        options = self.priced.shape.memory_options
        # Not taskmanager.numberOfTaskSlots: fine-grained dynamic slots are cut by
        # resources, and it stays the user's (GitOps sets it).
        return {MANAGED_FRACTION_KEY: f"{options.managed_fraction:g}",
                NETWORK_FRACTION_KEY: f"{options.network_fraction:g}"}

    def bill(self, cost: CostSpec) -> packer.PodBill:
        """What its TaskManager pods request, priced at `cost`."""
        return packer.pod_bill(self.shape.cpu, self.shape.memory, self.replicas,
                               cpu_core_price=cost.cpu_core_price,
                               memory_gib_price=cost.memory_gib_price)

    def status(self, cost: CostSpec, before: packer.PodBill | None) -> PlacementStatus:
        fields = {}
        if self.priced is not None:
            options = self.priced.shape.memory_options
            fields = {
                "managed_fraction": options.managed_fraction,
                "network_fraction": options.network_fraction,
                "slot_sharing_groups": {g.name: list(g.members) for g in self.priced.groups},
            }
        return PlacementStatus(
            task_managers=self.replicas,
            shape=self.shape,
            lower_bound=self.placement.lower_bound,
            solver_status=self.placement.status.value.upper(),
            moved_tasks=self.placement.moved,
            pods_before=None if before is None else pod_request(before),
            pods=pod_request(self.bill(cost)),
            **fields,
        )


@dataclass(frozen=True)
class Unplaceable:
    reason: str


def slots(
    graph: JobGraph, configuration: Configuration, memory: MemoryScaling,
    task: TaskFootprint, uniform: bool,
) -> list[packer.TaskSlot]:
    """Task slots in topological vertex order, subtasks by index (Flink's request order)."""
    managed = {vid: memory.managed_mib(c.memory_level) for vid, c in configuration.items()}
    biggest = max(managed.values(), default=0.0)
    return [
        packer.TaskSlot(
            vertex_id=vid, subtask=i, cpu_cores=task.cpu_cores,
            managed_mib=biggest if uniform else managed[vid],
            heap_mib=task.heap_mib, network_mib=task.network_mib,
        )
        for vid in graph.topological_order()
        for i in range(configuration[vid].parallelism)
    ]


def pack(
    graph: JobGraph, configuration: Configuration, memory: MemoryScaling,
    task: TaskFootprint, task_managers: TaskManagerSpec, time_limit_s: float,
    prices: Prices | None = None, pods: PodPricing | None = None,
    task_cpu: Mapping[str, float] | None = None,
) -> Placed | Unplaceable:
    """Fine-grained: the cheapest pods (grouping, shape, packing; packer.pricing), by the
    planner's own `pods` pricing when given (`ScalingParams.pods`), at `time_limit_s`;
    `task_cpu`: each vertex's planned CPU per task (`Evaluation.task_cpu`; a vertex not in
    it asks for the footprint's), none: every task the footprint's.
    Adaptive: every slot alike on one of the spec's shapes (the paper's by default)."""
    if task_managers.realization == Realization.FINE_GRAINED:
        problem = task_managers.bounds_problem()
        if problem is not None:
            return Unplaceable(problem)
        pricing = pods or PodPricing(task.cpu_cores, task.heap_mib, task.network_mib,
                                     memory.base_managed_memory,
                                     task_managers.shape_bounds(), prices or Prices())
        planned = dict(task_cpu or {})
        priced = replace(pricing, time_limit_s=time_limit_s).exact(
            graph, configuration,
            (lambda vid, _: planned.get(vid, task.cpu_cores)) if planned else None)
        if priced is None:
            return Unplaceable("no TaskManager within spec.taskManager's bounds (minCpu..maxCpu, "
                               "minMemory..maxMemory, maxSlots) holds the largest slot")
        shape = priced.shape
        most = max((len(tm.slots) for tm in priced.placement.task_managers), default=1)
        spec_shape = next((s for s in task_managers.shapes if s.name() == shape.name),
                          None) or SpecShape(cpu=shape.cpu_cores,
                                             memory=f"{shape.process_mib:.0f}Mi",
                                             slots=min(max(most, 1), 256))
        return Placed(spec_shape, priced.replicas, priced.placement, priced)
    by_name = {s.name(): s for s in task_managers.shapes or (SpecShape(),)}
    at = prices or Prices()
    shapes = [
        packer.TaskManagerShape(name=n, cpu_cores=s.cpu, process_mib=s.memory, max_slots=s.slots,
                                cost=at.of(s.cpu, s.memory))
        for n, s in by_name.items()
    ]
    result = packer.pack(slots(graph, configuration, memory, task, True), shapes,
                         time_limit_s=time_limit_s)
    if result.shape is None:
        return Unplaceable(result.reason or "no TaskManager shape fits the tasks")
    replicas = max(result.count, result.flink_count or 0)
    return Placed(by_name[result.shape], replicas, result)


def _advised_already(run: Run, decision: Decision) -> bool:
    """The last decision recommended the same configuration: its Event said it already
    (a recommendation that stands would otherwise post one Event every window)."""
    last, scaling = run.saved.last_decision, run.saved.condition(ConditionType.SCALING)
    return (last is not None and last.reconfigures
            and scaling is not None and scaling.reason == Reason.RECOMMENDED
            and _advice(last) == _advice(decision))


def _advice(decision: Decision) -> tuple[tuple[str, int, int | None], ...]:
    return tuple(sorted((v.vertex_id, v.parallelism_after, v.memory_level_after)
                        for v in decision.vertices))


def _running_cpu(running: VertexLearning | None) -> dict[str, object]:
    """What of a vertex's learning only a realized step changes: its slots' CPU, whether it
    was grown after throttling (`policies.capacity._slots_surplus`), and whether it got
    the footprint's core back (`policies.capacity._busy_cpu_short`)."""
    return {"task_cpu": None if running is None else running.task_cpu,
            "task_cpu_grown": running is not None and running.task_cpu_grown,
            "busy_cpu_short": running is not None and running.busy_cpu_short}


def place(run: Run, graph: JobGraph, evaluation: Evaluation) -> Placed:
    """The decided configuration on TaskManagers; Recommend mode advises and stops here."""
    spec = run.spec
    params = run.params
    placed = pack(graph, evaluation.configuration, params.memory, params.footprint,
                  spec.task_manager, spec.placement.solver_time_limit,
                  Prices(spec.cost.cpu_core_price, spec.cost.memory_gib_price),
                  params.pods if isinstance(params.pods, PodPricing) else None,
                  evaluation.task_cpu)
    telemetry.DECIDE_SECONDS.observe(time.perf_counter() - run.decide_started)
    if isinstance(placed, Placed):
        telemetry.SOLVER_SECONDS.observe(placed.placement.solve_seconds)
    decision = evaluation.decision
    if spec.mode == Mode.RECOMMEND:
        # Recorded as advice only: Justin's history keeps what really runs, and a
        # recommendation is no target a later switch to Active would apply. What the
        # capacity policy measured is true of the running job: it is kept; the CPU it
        # planned for the advice is not what runs, nor did the footprint's core come back.
        state = policy_state(run.status)
        learned = {vid: v.model_copy(update=_running_cpu(state.learned.get(vid)))
                   for vid, v in evaluation.state.learned.items()}
        run.status = with_policy_state(run.status, replace(
            state, scale_down_wanted_since=evaluation.state.scale_down_wanted_since,
            learned=learned, cpu_short_since=evaluation.state.cpu_short_since))
        where = (f"; {packer.describe_change(pods_now(run), placed.bill(spec.cost))}"
                 if isinstance(placed, Placed) else f" (unplaceable: {placed.reason})")
        if not _advised_already(run, decision):
            run.event("Normal", Reason.RECOMMENDED, decision.reason + where)
        run.count(decision, "Recommend")
        advice = ("" if decision.forecast is None else
                  "; " + explain.forecast(decision.before, decision.after, decision.forecast))
        if isinstance(placed, Placed):
            advice += where
        run.condition(ConditionType.SCALING, False, Reason.RECOMMENDED,
                      "mode is Recommend: the decision is recorded, nothing is patched" + advice)
        raise Stop("recommended")
    if not isinstance(placed, Placed):
        raise run.refuse(Reason.UNPLACEABLE, placed.reason)
    return placed
