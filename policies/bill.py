"""What a placement costs in the unit the cluster bills: the TaskManager pods it requests.

Kubernetes reserves `spec.taskManager.resource` × `spec.taskManager.replicas`, whatever
the tasks inside use; this is that request, priced per hour. Pure, so the controller's
messages, its status and any pricing of configurations compute it the same way.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from policies.model import VertexConfig

MIB_PER_GIB = 1024.0


@dataclass(frozen=True)
class Prices:
    """spec.cost's prices per hour: one CPU core, one GiB of pod memory."""

    cpu_core: float = 1.0
    memory_gib: float = 0.134

    def of(self, cpu_cores: float, memory_mib: float) -> float:
        return cpu_cores * self.cpu_core + memory_mib / MIB_PER_GIB * self.memory_gib

    def bill(self, cpu_cores: float, memory_mib: float, replicas: int) -> PodBill:
        """`pod_bill` at these prices."""
        return pod_bill(cpu_cores, memory_mib, replicas, cpu_core_price=self.cpu_core,
                        memory_gib_price=self.memory_gib)


@dataclass(frozen=True)
class PodBill:
    """`task_managers` pods of one shape: their summed requests and price per hour."""

    task_managers: int
    cpu_cores: float  # requested by all pods
    memory_mib: float  # requested by all pods (process memory)
    price: float  # per hour: cores × core price + GiB × GiB price

    def describe(self) -> str:
        """'5 TaskManagers: 20 cores, 10 GiB, 21.34/h'."""
        pods = "TaskManager" if self.task_managers == 1 else "TaskManagers"
        cores = "core" if self.cpu_cores == 1 else "cores"
        return (f"{self.task_managers} {pods}: {_number(self.cpu_cores)} {cores}, "
                f"{_gib(self.memory_mib)}, {self.price:,.2f}/h")


def pod_bill(cpu_cores: float, memory_mib: float, replicas: int, *,
             cpu_core_price: float, memory_gib_price: float) -> PodBill:
    """The bill of `replicas` TaskManagers of `cpu_cores` and `memory_mib` (process) each."""
    if replicas < 0 or not (math.isfinite(cpu_cores) and math.isfinite(memory_mib)) \
            or cpu_cores < 0 or memory_mib < 0:
        raise ValueError("a pod bill needs finite, non-negative resources and replicas")
    cpu, memory = cpu_cores * replicas, memory_mib * replicas
    price = Prices(cpu_core_price, memory_gib_price).of(cpu, memory)
    return PodBill(replicas, cpu, memory, price)


def describe_change(before: PodBill | None, after: PodBill) -> str:
    """'pods 9 TaskManagers: 36 cores, 18 GiB, 38.41/h → 5 TaskManagers: …, saving 17.07/h'."""
    if before is None:
        return f"pods → {after.describe()}"
    if before == after:
        return f"pods unchanged ({after.describe()})"
    delta = after.price - before.price
    # A placement can move tasks without changing the bill: say so, not "+0.00".
    change = ("the same price" if abs(delta) < 0.005 else
              f"saving {-delta:,.2f}/h" if delta < 0 else f"costing {delta:,.2f}/h more")
    return f"pods {before.describe()} → {after.describe()}, {change}"


def _number(value: float) -> str:
    return f"{value:,.2f}".rstrip("0").rstrip(".")


def _gib(mib: float) -> str:
    return f"{_number(mib / MIB_PER_GIB)} GiB" if mib >= MIB_PER_GIB else f"{mib:,.0f} MiB"


TaskCpu = Callable[[str, VertexConfig], float]
"""One task's planned CPU (cores) for a vertex (by id) at a configuration (`slot_cpu`)."""

SLOT_CPU_STEP = 0.1
"""Planned slot CPU is asked for in tenths of a core (Flink's CPUResource takes any)."""


def slot_cpu(busyness: float, footprint: float = 1.0) -> float:
    """The CPU one task's slot asks for: the busyness it is planned to run at (the load it
    was sized for over its capacity: target at the utilization target plus catch-up), in
    tenths of a core up, at least one tenth, at most the footprint's (one task thread
    keeps at most one core busy; the footprint is what it asked for before). Busy time
    counts the task thread's waits on state too, so this is an upper bound of its CPU. A
    busyness that is unknown (NaN, inf) asks for the footprint."""
    if not math.isfinite(busyness):
        return footprint
    steps = math.ceil(max(0.0, busyness) / SLOT_CPU_STEP - 1e-9)
    return min(footprint, max(SLOT_CPU_STEP, round(steps * SLOT_CPU_STEP, 6)))
