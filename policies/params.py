"""The core's inputs besides the job: policy parameters, persisted state, and resource totals."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Protocol

from policies.bill import Prices, TaskCpu
from policies.decision import Decision, HistoryRecord, Totals
from policies.learning import VertexLearning
from policies.model import Configuration, JobGraph, VertexConfig
from policies.restart_cost import RestartFacts
from policies.spec import CostSpec, CpuScaling, Limits, MemoryScaling, Policy, TaskFootprint

HISTORY_LIMIT = 10  # decision records kept in PolicyState (and in the policy's status)


def _empty() -> Mapping[str, float]:
    return MappingProxyType({})


class PodPricer(Protocol):
    """What the pods of a configuration cost per hour (packer.pricing.PodPricing): the
    planner's price when the controller places in fine-grained mode."""

    def price(self, graph: JobGraph, configuration: Configuration,
              task_cpu: TaskCpu | None = None) -> float: ...

    def cheapest(self, graph: JobGraph, options: Mapping[str, Sequence[VertexConfig]],
                 start: Configuration, task_cpu: TaskCpu | None = None
                 ) -> tuple[Configuration, float]: ...


@dataclass(frozen=True)
class ScalingParams:
    policy: Policy = Policy.CAPACITY
    cost: CostSpec = field(default_factory=CostSpec)
    # How the deployment restarts, its state and observed downtimes (the controller fills
    # them in): priced by policies/restart_cost.py when spec.cost.restartDowntime is unset.
    restart: RestartFacts | None = None
    # Without either: one restart is expected to cost this.
    expected_downtime_s: float = 60.0
    cpu: CpuScaling = field(default_factory=CpuScaling)
    memory: MemoryScaling = field(default_factory=MemoryScaling)
    limits: Limits = field(default_factory=Limits)
    # cpu/heap/network per task, for totals and limits
    footprint: TaskFootprint = field(default_factory=TaskFootprint)
    # The pods' price (fine-grained placement): the capacity planner chooses by it.
    # None: the paper's per-task price (task CPU and memory at spec.cost's prices).
    pods: PodPricer | None = None
    # The controller fills it in: spec.skew.applySqlSettings in Active mode, and the
    # deployment does not hold the SQL settings yet. Writing them takes a restart, so a
    # skew-limited SQL aggregation is then a step of its own (policies/buffering.py).
    sql_buffering_due: bool = False
    # The cores the running TaskManager pods request (replicas × resource.cpu; the
    # controller fills it in): what their tasks' CPU is bounded by. None: not known.
    pods_cpu: float | None = None
    # ... and what they cost per hour at spec.cost's prices: a give-back saves from that,
    # the CPU its tasks were planned at included. None: not known.
    pods_price: float | None = None

    @property
    def restart_downtime_s(self) -> float:
        """What one restart is expected to cost in downtime: the spec's; else the measured
        model for how this deployment restarts, learned from its observed steps."""
        if self.cost.restart_downtime is not None:
            return self.cost.restart_downtime
        if self.restart is not None:
            return self.restart.downtime_s
        return self.expected_downtime_s

    def step_downtime_s(self, memory_only: bool) -> float:
        """What a step is expected to cost in downtime: a resize in place's when it changes
        managed memory only and the deployment can resize (no restart, whatever
        spec.cost.restartDowntime says of restarts); else a restart's."""
        if memory_only and self.restart is not None and self.restart.resizable:
            return self.restart.resize_downtime_s
        return self.restart_downtime_s


@dataclass(frozen=True)
class PolicyState:
    """Everything that must survive a controller restart (stored in the policy's status)."""

    step: int = 0  # reconfigurations so far
    history: tuple[HistoryRecord, ...] = ()  # newest last, at most HISTORY_LIMIT
    # vertex id -> first time DS2 wanted fewer tasks for it (the scale-down delay)
    scale_down_wanted_since: Mapping[str, float] = field(default_factory=_empty)
    last_reconfiguration_time: float | None = None
    # vertex ids the last evaluation found skewed (their thresholds get hysteresis), and
    # those of them whose busiest subtask was saturated (so is its saturation bound); the
    # controller reads both back from status.lastDecision.skew
    skewed: frozenset[str] = frozenset()
    skew_saturated: frozenset[str] = frozenset()
    # The capacity policy's per-vertex data points and judgements (policies/learning.py).
    learned: Mapping[str, VertexLearning] = field(default_factory=lambda: MappingProxyType({}))
    # End of the first of two windows running in which the tasks waited for CPU while
    # the job fell behind (capacity policy): the second asks for pods with more CPU.
    cpu_short_since: float | None = None
    # When the last evaluation's window ended (the controller keeps it as its last
    # decision): a scale-down wait across a longer gap starts over (evaluate._after_gap).
    last_evaluated: float | None = None


def contiguous(earlier: float | None, now: float, window_s: float) -> bool:
    """Whether the window evaluated at `earlier` runs on into this one: within two
    windows of it, not one before a gap (the controller or the metrics were down, or the
    job restarted), whose load nobody saw."""
    return earlier is not None and now - earlier <= 2.0 * window_s + 1e-6


@dataclass(frozen=True)
class Evaluation:
    decision: Decision  # always set, also when nothing changes (reconfigures=False)
    configuration: Configuration  # the target configuration (== current when nothing changes)
    state: PolicyState  # the state to persist
    # Vertex id -> the CPU one task's slot asks for (capacity policy, fine-grained
    # placement; policies.bill.slot_cpu). Empty: every task asks for the footprint's.
    task_cpu: Mapping[str, float] = field(default_factory=_empty)
    # The step asks for new slots (`task_cpu` planned anew): a restart, never a resize
    # in place on the running slots, even when it changes managed memory only.
    new_slots: bool = False


def totals(configuration: Configuration, params: ScalingParams) -> Totals:
    """CPU cores and memory (MiB) of all tasks; a task at ⊥ has no managed memory."""
    fp = params.footprint
    cpu = 0.0
    memory = 0.0
    for c in configuration.values():
        cpu += c.parallelism * fp.cpu_cores
        managed = params.memory.managed_mib(c.memory_level)
        memory += c.parallelism * (fp.heap_mib + fp.network_mib + managed)
    return Totals(cpu_cores=cpu, memory_mib=memory)


def price_per_hour(t: Totals, params: ScalingParams) -> float:
    """What the tasks cost per hour at spec.cost's prices: CPU cores and all task memory
    (the paper's accounting; the pods' price is `ScalingParams.pods`)."""
    cost = params.cost
    return Prices(cost.cpu_core_price, cost.memory_gib_price).of(t.cpu_cores, t.memory_mib)


def restart_cost(cost_per_hour: float, params: ScalingParams, memory_only: bool = False
                 ) -> float:
    """A step costs its downtime and the catch-up after it, at the new configuration's
    price: the backlog of D seconds drains in D·u/(1−u) more at utilization u. A step of
    managed memory only that the deployment resizes in place costs no downtime."""
    u = params.cpu.utilization_target
    seconds = params.step_downtime_s(memory_only) * (1.0 + u / max(1e-9, 1.0 - u))
    return cost_per_hour * seconds / 3600.0


def pays_back(cost_now: float, cost_new: float, params: ScalingParams,
              restarts: int = 1) -> bool:
    """Whether moving from a configuration costing `cost_now` per hour to one costing
    `cost_new` saves, within spec.cost.paybackPeriod, more than its `restarts` cost (a
    move likely to be undone is priced with the restart that undoes it)."""
    saving = (cost_now - cost_new) * params.cost.payback_period / 3600.0
    return saving > restarts * restart_cost(cost_new, params)


def within_limits(t: Totals, limits: Limits) -> bool:
    # A relative tolerance: sums of float footprints must not fail an exact limit.
    cpu_ok = limits.max_cpu_cores is None or t.cpu_cores <= limits.max_cpu_cores * (1 + 1e-9)
    mem_ok = limits.max_memory is None or t.memory_mib <= limits.max_memory * (1 + 1e-9)
    return cpu_ok and mem_ok
