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
