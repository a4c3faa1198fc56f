"""The packer's value types: task slots in, TaskManager shapes, a placement out.

A *task slot* is what one task of a vertex asks Flink for under fine-grained
resource management (its slot-sharing group's ResourceProfile). A *TaskManager
shape* is one `spec.taskManager.resource` (cpu, process memory); Flink carves
slots out of the TaskManager's cpu, task heap, task off-heap, managed and
network memory, so those are the bin's capacities.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

from packer.flink_memory import DEFAULT_OPTIONS, FlinkMemoryOptions, TaskManagerMemory
from packer.flink_memory import task_manager_memory as _split
from policies.bill import Prices

SlotKey = tuple[str, int]
"""(vertex id, subtask index): a task's identity across placements."""

DIMENSIONS = ("cpu", "heap", "managed", "network")
"""Resource dimensions every slot and TaskManager has; `slots` is added when capped."""

# Solver units: micro-cores and bytes (Flink's own memory unit). Both demands and
# capacities round down to whole units, as Flink does when it divides a TaskManager
# into equal slots (MemorySize.divide, CPUResource.divide): a slot asking for a
# quarter of a TaskManager's task heap in MiB, a fractional byte, must still fit 4
# times. The error is under one unit per slot; `check` allows exactly that.
CPU_UNIT = 1_000_000
MEMORY_UNIT = 1024 * 1024
_EPS = 1e-6  # float noise: 157.99999999 MiB is 158 MiB


def _units(value: float, unit: int) -> int:
    return math.floor(value * unit + _EPS)


@dataclass(frozen=True)
class TaskSlot:
    """One task's slot request. Memory in MiB."""

    vertex_id: str
    subtask: int
    cpu_cores: float
    managed_mib: float = 0.0
    heap_mib: float = 0.0
    network_mib: float = 0.0

    def __post_init__(self) -> None:
        if self.subtask < 0:
            raise ValueError(f"slot {self.vertex_id}#{self.subtask}: negative subtask index")
        for name in ("cpu_cores", "managed_mib", "heap_mib", "network_mib"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"slot {self.label}: {name} must be finite and >= 0")

    @property
    def key(self) -> SlotKey:
        return (self.vertex_id, self.subtask)

    @property
    def label(self) -> str:
        return f"{self.vertex_id}#{self.subtask}"

    def amounts(self) -> dict[str, float]:
        return {
            "cpu": self.cpu_cores,
            "heap": self.heap_mib,
            "managed": self.managed_mib,
            "network": self.network_mib,
        }

    def demand(self) -> tuple[int, int, int, int]:
        """Integer demand in solver units (micro-cores, bytes)."""
        return (
            _units(self.cpu_cores, CPU_UNIT),
            _units(self.heap_mib, MEMORY_UNIT),
            _units(self.managed_mib, MEMORY_UNIT),
            _units(self.network_mib, MEMORY_UNIT),
        )


@dataclass(frozen=True)
class TaskManagerShape:
    """An allowed TaskManager: cpu cores and total process memory (MiB).

    `max_slots` caps tasks per TaskManager; None means only resources limit it,
    which is how Flink's fine-grained slot manager treats dynamic slots.
    `cost` ranks shapes when several are allowed; by default the shape's price at
    spec.cost's default prices (`policies.bill.Prices`, the one price rule).
    """

    name: str
    cpu_cores: float
    process_mib: float
    max_slots: int | None = None
    cost: float | None = None
    memory_options: FlinkMemoryOptions = DEFAULT_OPTIONS
    memory: TaskManagerMemory = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.cpu_cores <= 0:
            raise ValueError(f"shape {self.name}: cpu_cores must be > 0")
        if self.max_slots is not None and self.max_slots < 1:
            raise ValueError(f"shape {self.name}: max_slots must be >= 1")
        object.__setattr__(self, "memory", _split(self.process_mib, self.memory_options))

    @property
    def price(self) -> float:
        if self.cost is not None:
            return self.cost
        return Prices().of(self.cpu_cores, self.process_mib)

    def amounts(self) -> dict[str, float]:
        """What slots can take, per dimension (MiB for memory)."""
        return {
            "cpu": self.cpu_cores,
            "heap": self.memory.task_heap_mib,
            "managed": self.memory.managed_mib,
            "network": self.memory.network_mib,
        }

    def capacity(self) -> tuple[int, int, int, int]:
        """Integer capacity in solver units (micro-cores, bytes)."""
        return (
            _units(self.cpu_cores, CPU_UNIT),
            self.memory.task_heap,
            self.memory.managed,
            self.memory.network,
        )


class Status(StrEnum):
    OPTIMAL = "optimal"  # CP-SAT proved the TaskManager count (cost) minimal
    FEASIBLE = "feasible"  # valid, not proven minimal within the time limit
    FALLBACK = "fallback"  # first-fit-decreasing: model too large or no solution in time
    INFEASIBLE = "infeasible"  # some slot fits no allowed shape; see `reason`


@dataclass(frozen=True)
class TaskManagerLoad:
    """One TaskManager of a placement: its slots and how full it is per dimension (0..1)."""

    name: str
    shape: str
    slots: tuple[SlotKey, ...]
    utilisation: Mapping[str, float]


@dataclass(frozen=True)
class CurrentPlacement:
    """Today's placement: the shape all TaskManagers run, and each task's TaskManager name."""

    shape: str
    assignment: Mapping[SlotKey, str]


@dataclass(frozen=True)
class Placement:
    """The packer's answer. `task_managers` is empty when status is infeasible."""

    shape: str | None
    task_managers: tuple[TaskManagerLoad, ...]
    lower_bound: int
    status: Status
    solve_seconds: float
    moved: int = 0
    ffd_count: int = 0
    flink_count: int | None = None
    reason: str = ""

    @property
    def count(self) -> int:
        return len(self.task_managers)

    @property
    def flink_gap(self) -> int | None:
        """How many more TaskManagers Flink's own first-fit allocator needs than this placement."""
        return None if self.flink_count is None else self.flink_count - self.count

    def assignment(self) -> Mapping[SlotKey, str]:
        return MappingProxyType({key: tm.name for tm in self.task_managers for key in tm.slots})

    def as_current(self) -> CurrentPlacement:
        """This placement as `current` for the next call to `pack`."""
        if self.shape is None:
            raise ValueError("an infeasible placement cannot be today's placement")
        return CurrentPlacement(self.shape, self.assignment())
