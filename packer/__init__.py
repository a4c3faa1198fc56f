"""Placement of heterogeneous task slots onto TaskManagers. Pure: no I/O.

`pack` is the entry point; `check` validates any placement independently.
"""

from packer.check import check
from packer.flink_memory import FlinkMemoryOptions, TaskManagerMemory, task_manager_memory
from packer.greedy import first_fit_decreasing, flink_first_fit, lower_bound
from packer.solver import pack
from packer.types import (
    CurrentPlacement,
    Placement,
    SlotKey,
    Status,
    TaskManagerLoad,
    TaskManagerShape,
    TaskSlot,
)

__all__ = [
    "CurrentPlacement",
    "FlinkMemoryOptions",
    "Placement",
    "SlotKey",
    "Status",
    "TaskManagerLoad",
    "TaskManagerMemory",
    "TaskManagerShape",
    "TaskSlot",
    "check",
    "first_fit_decreasing",
    "flink_first_fit",
    "lower_bound",
    "pack",
    "task_manager_memory",
]
