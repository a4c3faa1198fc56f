"""Numbers as people read them, and the per-vertex record every branch ends in."""

from __future__ import annotations

import math

from policies.decision import Action, Branch, Forecast, Totals, VertexDecision
from policies.model import Vertex, VertexConfig, VertexMetrics
from policies.spec import MemoryScaling


def cut(text: str, limit: int, keep_end: int = 0) -> str:
    """`text`, or at most `limit` characters of it with an ellipsis where it was cut: from
    the end, or before its last `keep_end` characters (what a message ends with, kept)."""
    if len(text) <= limit:
        return text
    keep_end = min(keep_end, limit - 1)
    return text[:limit - 1 - keep_end] + "…" + (text[-keep_end:] if keep_end else "")


def rate(value: float) -> str:
    if not math.isfinite(value):
        return "unknown"
    return f"{value:,.0f}/s" if abs(value) >= 100 else f"{value:.3g}/s"


def ratio(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def latency(ns: float | None) -> str:
    return "n/a" if ns is None else f"{ns / 1e6:.3g} ms"


def level(memory: MemoryScaling, m: int | None) -> str:
    if m is None:
        return "⊥ (no managed memory)"
    return f"level {m} ({memory.managed_mib(m):.0f} MiB)"


def action(before: VertexConfig, after: VertexConfig) -> Action:
    """The most telling change: a memory change wins over a parallelism change.

    Parallelism changes show in the numbers anyway; the memory change is what
    Justin decided, so a rollback that comes with a scale-out is a memory-rollback.
    """
    lb, la = before.memory_level, after.memory_level
    if la is None and lb is not None:
        return Action.STRIP_MEMORY
    if la is not None and (lb is None or la > lb):
        return Action.SCALE_UP
    if la is not None and lb is not None and la < lb:
        return Action.MEMORY_ROLLBACK
    if after.parallelism > before.parallelism:
        return Action.SCALE_OUT
    if after.parallelism < before.parallelism:
        return Action.SCALE_IN
    return Action.NONE


def finite(value: float | None) -> float | None:
    """JSON has no infinity: an unknown capacity is recorded as None."""
    return value if value is not None and math.isfinite(value) else None


def vertex_decision(
    vertex: Vertex,
    metrics: VertexMetrics | None,
    after: VertexConfig,
    branch: Branch,
    reason: str,
    *,
    scaled_up: bool = False,
    target_rate: float | None = None,
    utilization: float | None = None,
) -> VertexDecision:
    before = VertexConfig(vertex.parallelism, vertex.memory_level)
    return VertexDecision(
        vertex_id=vertex.id,
        vertex_name=vertex.name,
        action=action(before, after),
        branch=branch,
        reason=reason,
        parallelism_before=vertex.parallelism,
        parallelism_after=after.parallelism,
        memory_level_before=vertex.memory_level,
        memory_level_after=after.memory_level,
        scaled_up=scaled_up,
        busyness=None if metrics is None else metrics.busyness,
        true_processing_rate=None if metrics is None else finite(metrics.true_processing_rate),
        target_rate=finite(target_rate),
        utilization=finite(utilization),
        cache_hit_rate=None if metrics is None else metrics.cache_hit_rate,
        state_latency_ns=None if metrics is None else metrics.state_latency_ns,
    )


def forecast(before: Totals, after: Totals, f: Forecast) -> str:
    """'applying this saves 3 cores and 1,200 MiB, expected 60 s of downtime'."""
    cores = before.cpu_cores - after.cpu_cores
    mib = before.memory_mib - after.memory_mib

    def amount(value: float, unit: str) -> str:
        text = f"{abs(value):,.3g}" if abs(value) < 10 else f"{abs(value):,.0f}"
        return f"{text} {unit}"

    saves = [amount(x, u) for x, u in ((cores, "cores"), (mib, "MiB")) if x > 1e-9]
    costs = [amount(x, u) for x, u in ((cores, "cores"), (mib, "MiB")) if x < -1e-9]
    parts = []
    if saves:
        parts.append("saves " + " and ".join(saves))
    if costs:
        parts.append("costs " + " and ".join(costs) + " more")
    change = " and ".join(parts) or "changes no totals"
    return f"applying this {change}, {downtime(round(f.expected_downtime_s))}"


def downtime(seconds: float) -> str:
    """'expected 45.3 s of downtime'."""
    return f"expected {seconds:g} s of downtime"
