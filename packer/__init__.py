"""Placement of heterogeneous task slots onto TaskManagers. Pure: no I/O.

`pack` is the entry point; `check` validates any placement independently. `pack`
(and with it OR-Tools) loads on first use, so `packer.flink_memory`, which
`hybrid-scaler validate` needs, comes without the solver.
"""

from typing import TYPE_CHECKING, Any

from packer.check import check
from packer.flink_memory import FlinkMemoryOptions, TaskManagerMemory, task_manager_memory
from packer.greedy import first_fit_decreasing, flink_first_fit, lower_bound
from packer.types import (
    CurrentPlacement,
    Placement,
    SlotKey,
    Status,
    TaskManagerLoad,
    TaskManagerShape,
    TaskSlot,
)
from policies.bill import PodBill, describe_change, pod_bill

__all__ = [
    "CurrentPlacement",
    "FlinkMemoryOptions",
    "Placement",
    "PodBill",
    "SlotKey",
    "Status",
    "TaskManagerLoad",
    "TaskManagerMemory",
    "TaskManagerShape",
    "TaskSlot",
    "check",
    "describe_change",
    "first_fit_decreasing",
    "flink_first_fit",
    "lower_bound",
    "pack",
    "pod_bill",
    "task_manager_memory",
]


if TYPE_CHECKING:
    from packer.solver import pack


def __getattr__(name: str) -> Any:
    if name == "pack":
        from packer.solver import pack

        return pack
    raise AttributeError(f"module 'packer' has no attribute {name!r}")
