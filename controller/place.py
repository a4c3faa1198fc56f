"""Place: a configuration as task slots, packed onto TaskManagers of an allowed shape.

Each task asks for one slot: CPU, task heap and network are the task footprint, an
equal share of the *first* allowed shape (its cores and Flink's memory split divided
by its slots; `ScalingParams.footprint`), so a task needs the same wherever it lands,
as the per-operator resources written to Flink say; managed memory is the task's
memory level (base × 2^m, 0 at ⊥). In adaptive mode every slot
is the same size, so each gets the largest managed memory any task needs.

The replica count is what Flink's own first-fit allocator needs for the chosen
shape, which may exceed the optimum the packer proves: asking for fewer would
leave slots unfulfilled and the job unscheduled.
"""

from __future__ import annotations

from dataclasses import dataclass

import packer
from controller.api import PlacementStatus, Realization, TaskManagerSpec
from controller.api import TaskManagerShape as SpecShape
from policies.model import Configuration, JobGraph
from policies.spec import MemoryScaling, TaskFootprint


def shape_name(shape: SpecShape) -> str:
    return f"{shape.cpu:g}cpu-{round(shape.memory)}mi-{shape.slots}slots"


@dataclass(frozen=True)
class Placed:
    shape: SpecShape
    replicas: int  # what Flink's own allocator needs
    placement: packer.Placement

    def status(self) -> PlacementStatus:
        return PlacementStatus(
            task_managers=self.replicas,
            shape=self.shape,
            lower_bound=self.placement.lower_bound,
            solver_status=self.placement.status.value.upper(),
            moved_tasks=self.placement.moved,
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


def place(
    graph: JobGraph, configuration: Configuration, memory: MemoryScaling,
    task: TaskFootprint, task_managers: TaskManagerSpec, time_limit_s: float,
) -> Placed | Unplaceable:
    by_name = {shape_name(s): s for s in task_managers.shapes}
    shapes = [
        packer.TaskManagerShape(name=n, cpu_cores=s.cpu, process_mib=s.memory, max_slots=s.slots)
        for n, s in by_name.items()
    ]
    uniform = task_managers.realization == Realization.ADAPTIVE
    result = packer.pack(slots(graph, configuration, memory, task, uniform), shapes,
                         time_limit_s=time_limit_s)
    if result.shape is None:
        return Unplaceable(result.reason or "no TaskManager shape fits the tasks")
    replicas = max(result.count, result.flink_count or 0)
    return Placed(by_name[result.shape], replicas, result)
