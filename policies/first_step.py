"""How far the capacity policy may trust a gain nobody measured yet.

Before two windows with different block-cache miss ratios, the surface's miss cost is a
prior: from τ (the state latency) and the cache accesses per record, with the miss curve
calibrated on one point. A vertex saturated in its first window measures τ at its worst
(every task's cache thrashing, queues in RocksDB), so the prior can promise a per-task
speed-up of up to 10× from the cache that more tasks (or more memory) add; the suite saw
first jumps chosen at 16.7× and 41× the capacity land at 1.3–1.5× utilization, and a
second step follow.

What was measured is the capacity per task at the configuration that runs. So, until
the miss cost was measured, a candidate's predicted capacity is bounded by that per-task
capacity times its tasks times GAIN, with

    GAIN = min(utilizationMax / utilizationTarget, utilizationTarget / utilizationMin)

Sized for the target with at most that gain banked, a step lands within the band
either way: if the gain is not there at all, at ≤ utilizationMax; if all of it is, at ≥
utilizationMin. (1.6 at the defaults 0.2 / 0.5 / 0.8.) Once two miss ratios were
measured, the fitted surface speaks for itself and no bound applies.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from policies.learning import CapacityPoint, Surface
from policies.spec import CpuScaling


def gain(cpu: CpuScaling) -> float:
    """The most a step may bank on beyond linear scaling, landing within the band."""
    return min(cpu.utilization_max / cpu.utilization_target,
               cpu.utilization_target / cpu.utilization_min)


def unmeasured(points: Sequence[CapacityPoint]) -> bool:
    """No two windows with different miss ratios: the miss cost is still the prior."""
    ratios = {round(p.miss_ratio, 3) for p in points if p.miss_ratio is not None}
    return len(ratios) < 2


@dataclass(frozen=True)
class BoundedSurface(Surface):
    """A surface whose capacity never exceeds `per_task` × tasks × `gain`."""

    per_task: float = 0.0  # records/s one task measured at the anchor
    gain: float = 1.0

    def capacity(self, parallelism: int, level: int | None) -> float:
        return min(super().capacity(parallelism, level), self.per_task * parallelism * self.gain)


def bounded(surface: Surface, anchor: CapacityPoint, points: Sequence[CapacityPoint],
            cpu: CpuScaling) -> Surface:
    """`surface`, bounded while the gain it predicts was not measured."""
    if surface.curve is None or not unmeasured(points):
        return surface
    return BoundedSurface(surface.a, surface.b, surface.contention, surface.curve,
                          surface.base_mib, surface.correction,
                          per_task=1e6 / anchor.service_us, gain=gain(cpu))
