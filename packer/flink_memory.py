"""A TaskManager's memory split, computed from its total process memory as Flink 1.20 does.

Mirrors Flink's `ProcessMemoryUtils.deriveProcessSpecWithTotalProcessMemory` and
`TaskExecutorFlinkMemoryUtils.deriveFromTotalFlinkMemory` for the case the
Kubernetes operator produces: only `taskmanager.memory.process.size` is set.

    process  = metaspace + JVM overhead + total Flink memory
    overhead = clamp(process × 0.1, 192 MiB, 1 GiB)
    flink    = framework heap + framework off-heap + task off-heap + managed + network + task heap
    managed  = flink × 0.4;  network = clamp(flink × 0.1, 64 MiB, 1 GiB);  task heap = the rest

Flink keeps bytes as `long` and reads the fractions as Java `float`, then
multiplies with `BigDecimal` and truncates. We do the same, so the numbers match
Flink's logs to the byte (1728m → managed 536870920 B, task heap 402653174 B).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from decimal import Decimal

MIB = 1024 * 1024


@dataclass(frozen=True)
class FlinkMemoryOptions:
    """Flink's `TaskManagerOptions` defaults (1.20); override only what your cluster sets."""

    jvm_metaspace_mib: float = 256
    jvm_overhead_fraction: float = 0.1
    jvm_overhead_min_mib: float = 192
    jvm_overhead_max_mib: float = 1024
    framework_heap_mib: float = 128
    framework_off_heap_mib: float = 128
    task_off_heap_mib: float = 0
    network_fraction: float = 0.1
    network_min_mib: float = 64
    network_max_mib: float = 1024
    managed_fraction: float = 0.4

    @property
    def fixed_mib(self) -> float:
        """Framework heap, framework off-heap and task off-heap: the total Flink memory that
        is neither task heap, managed nor network memory."""
        return self.framework_heap_mib + self.framework_off_heap_mib + self.task_off_heap_mib


DEFAULT_OPTIONS = FlinkMemoryOptions()


@dataclass(frozen=True)
class TaskManagerMemory:
    """Every component of one TaskManager's memory, in bytes (Flink's own unit)."""

    process: int
    jvm_metaspace: int
    jvm_overhead: int
    total_flink: int
    framework_heap: int
    framework_off_heap: int
    task_heap: int
    task_off_heap: int
    managed: int
    network: int

    @property
    def task_heap_mib(self) -> float:
        return self.task_heap / MIB

    @property
    def managed_mib(self) -> float:
        return self.managed / MIB

    @property
    def network_mib(self) -> float:
        return self.network / MIB


def _bytes(mib: float) -> int:
    return round(mib * MIB)


def _java_float(value: float) -> float:
    """The double Java gets from a `float` config option (0.1f is 0.10000000149011612)."""
    result: float = struct.unpack("f", struct.pack("f", value))[0]
    return result


def _fraction_of(base: int, fraction: float, low_mib: float, high_mib: float | None) -> int:
    # BigDecimal.valueOf(double) goes through Double.toString: repr() gives the same digits.
    relative = int(Decimal(base) * Decimal(repr(_java_float(fraction))))
    capped = relative if high_mib is None else min(relative, _bytes(high_mib))
    return max(capped, _bytes(low_mib))


def task_manager_memory(
    process_mib: float, options: FlinkMemoryOptions = DEFAULT_OPTIONS
) -> TaskManagerMemory:
    """Split `taskmanager.memory.process.size` into Flink's components.

    Raises ValueError where Flink would refuse to start the TaskManager.
    """
    process = _bytes(process_mib)
    metaspace = _bytes(options.jvm_metaspace_mib)
    overhead = _fraction_of(
        process, options.jvm_overhead_fraction,
        options.jvm_overhead_min_mib, options.jvm_overhead_max_mib,
    )
    if metaspace + overhead > process:
        raise ValueError(
            f"process memory {process_mib} MiB is smaller than JVM metaspace and overhead "
            f"({(metaspace + overhead) / MIB:.0f} MiB)"
        )
    flink = process - metaspace - overhead
    managed = _fraction_of(flink, options.managed_fraction, 0.0, None)
    network = _fraction_of(
        flink, options.network_fraction, options.network_min_mib, options.network_max_mib
    )
    framework_heap = _bytes(options.framework_heap_mib)
    framework_off_heap = _bytes(options.framework_off_heap_mib)
    task_off_heap = _bytes(options.task_off_heap_mib)
    task_heap = flink - framework_heap - framework_off_heap - task_off_heap - managed - network
    if task_heap < 0:
        raise ValueError(
            f"process memory {process_mib} MiB leaves no task heap: framework, managed and "
            f"network memory need {(flink - task_heap) / MIB:.0f} MiB of "
            f"{flink / MIB:.0f} MiB total Flink memory"
        )
    return TaskManagerMemory(
        process=process,
        jvm_metaspace=metaspace,
        jvm_overhead=overhead,
        total_flink=flink,
        framework_heap=framework_heap,
        framework_off_heap=framework_off_heap,
        task_heap=task_heap,
        task_off_heap=task_off_heap,
        managed=managed,
        network=network,
    )


def process_mib_for(flink_mib: float, options: FlinkMemoryOptions = DEFAULT_OPTIONS) -> float:
    """The process memory that leaves `flink_mib` of total Flink memory: Flink's derivation
    when `taskmanager.memory.flink.size` is set (`ProcessMemoryUtils`, the overhead an
    inverse fraction of Flink memory and metaspace), the inverse of `task_manager_memory`'s.

        overhead = clamp((flink + metaspace) × f / (1 − f), min, max)

    In MiB, without Flink's truncation to bytes: sizes are chosen in whole steps above it
    (packer.pricing), then split by `task_manager_memory`."""
    jvm = flink_mib + options.jvm_metaspace_mib
    fraction = options.jvm_overhead_fraction
    overhead = min(max(jvm * fraction / (1 - fraction), options.jvm_overhead_min_mib),
                   options.jvm_overhead_max_mib)
    return jvm + overhead
