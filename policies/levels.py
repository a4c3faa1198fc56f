"""Memory levels ↔ managed memory, the one place the rule is written.

A task at memory level m gets base × 2^m MiB of managed memory (Justin §4); level
⊥ (None) gets none: a stateless task needs no RocksDB block cache.
"""

from __future__ import annotations

import math

BOTTOM = "⊥"


def managed_mib(level: int | None, base_mib: float) -> float:
    """The managed memory of one task at `level`."""
    return 0.0 if level is None else base_mib * 2**level


def level_of(managed: float, base_mib: float) -> int | None:
    """The nearest level to `managed` MiB per task; 0 MiB (or less) is ⊥."""
    if managed <= 0:
        return None
    return max(0, round(math.log2(managed / base_mib)))


def format_level(level: int | None) -> str:
    return BOTTOM if level is None else str(level)


def own_managed_mib(slot_managed: float, slot_sharing_group: str | None,
                    vertex_id: str) -> float:
    """A vertex's own managed memory per task from its `hybridscaler.operator-resources`
    entry. Without a group the entry is the vertex's own. With one, the entry is ONE SLOT
    of the group: its managed memory belongs to the member the group is named after (the
    planner names a group after its one member with managed memory, packer.pricing); the
    other members, stateless riders, consume none (Flink gives a slot's managed memory
    only to operators that declare a use for it)."""
    if slot_sharing_group is None or slot_sharing_group == vertex_id:
        return slot_managed
    return 0.0
