"""Shapes and slot builders shared by the packer tests."""

from __future__ import annotations

import pytest

from packer import TaskManagerShape, TaskSlot

# 8 GiB process memory: 3302.4 MiB task heap, 2846.7 MiB managed, 711.7 MiB network.
MEDIUM = TaskManagerShape("medium", cpu_cores=4, process_mib=8192)


def vertex(vertex_id: str, parallelism: int, cpu: float = 1.0, managed: float = 0.0,
           heap: float = 0.0, network: float = 0.0, first: int = 0) -> list[TaskSlot]:
    return [TaskSlot(vertex_id, i, cpu, managed, heap, network)
            for i in range(first, first + parallelism)]


@pytest.fixture
def medium() -> TaskManagerShape:
    return MEDIUM
