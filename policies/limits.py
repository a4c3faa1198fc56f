"""spec.limits and the parallelism bounds: bring a proposal within max CPU cores and max
memory, or keep the job as is; move a running job that breaks them (a GitOps edit) within."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from policies.decision import Totals
from policies.model import Configuration, JobGraph, VertexConfig
from policies.params import ScalingParams, totals, within_limits


@dataclass(frozen=True)
class Clip:
    configuration: Configuration
    clipped: bool  # the proposal was changed (or dropped) to respect the limits
    feasible: bool  # False: even the smallest allowed proposal exceeds them; job kept as is
    reason: str = ""
    notes: Mapping[str, str] = field(default_factory=dict)  # vertex id -> what clipping did


def describe(t: Totals, params: ScalingParams) -> str:
    parts = []
    if params.limits.max_cpu_cores is not None:
        parts.append(f"CPU {t.cpu_cores:g} of max {params.limits.max_cpu_cores:g} cores")
    if params.limits.max_memory is not None:
        parts.append(f"memory {t.memory_mib:.0f} of max {params.limits.max_memory:.0f} MiB")
    return ", ".join(parts)


def clip(graph: JobGraph, proposed: Configuration, params: ScalingParams) -> Clip:
    """Reduce `proposed` until its totals fit spec.limits.

    First cancel scale-ups (memory only, so only while memory is over), then take
    tasks one at a time from the largest parallelism increase (ties: declaration
    order), never below the current or the minimum parallelism. Scale-ins and
    memory reductions are kept: they only help. If that is not enough, the
    current configuration is kept.
    """
    limits = params.limits
    if within_limits(totals(proposed, params), limits):
        return Clip(MappingProxyType(dict(proposed)), clipped=False, feasible=True)

    current = graph.configuration()
    config = dict(proposed)
    notes: dict[str, str] = {}

    def memory_over() -> bool:
        mem = limits.max_memory
        return mem is not None and totals(config, params).memory_mib > mem * (1 + 1e-9)

    def extra_managed(vid: str) -> float:
        c, now = config[vid], current[vid]
        managed = params.memory.managed_mib
        return c.parallelism * (managed(c.memory_level) - managed(now.memory_level))

    scale_ups = [v.id for v in graph.vertices if extra_managed(v.id) > 0]
    for vid in sorted(scale_ups, key=lambda i: -extra_managed(i)):  # stable: ties keep order
        if not memory_over():
            break
        c = config[vid]
        config[vid] = VertexConfig(c.parallelism, current[vid].memory_level)
        notes[vid] = f"scale-up to level {c.memory_level} cancelled"

    floors: dict[str, int] = {}
    for v in graph.vertices:
        low, _ = params.cpu.bounds_for(v.id, v.operator_uids)
        floors[v.id] = min(config[v.id].parallelism, max(current[v.id].parallelism, low))
    wanted = {vid: c.parallelism for vid, c in config.items()}
    left = totals(config, params)
    fp = params.footprint
    while not within_limits(left, limits):
        candidates = [v.id for v in graph.vertices if config[v.id].parallelism > floors[v.id]]
        if not candidates:
            break
        vid = max(candidates, key=lambda i: config[i].parallelism - current[i].parallelism)
        c = config[vid]
        config[vid] = VertexConfig(c.parallelism - 1, c.memory_level)
        task_mib = fp.heap_mib + fp.network_mib + params.memory.managed_mib(c.memory_level)
        left = Totals(cpu_cores=left.cpu_cores - fp.cpu_cores,
                      memory_mib=left.memory_mib - task_mib)
    for vid, p in wanted.items():
        if config[vid].parallelism != p:
            before = current[vid].parallelism
            notes[vid] = f"scale-out {before}→{p} trimmed to {before}→{config[vid].parallelism}"

    after = totals(config, params)
    if not within_limits(after, limits):
        kept = {vid: "limits cannot be met: configuration kept" for vid in proposed
                if proposed[vid] != current[vid]}
        return Clip(
            current,
            clipped=True,
            feasible=False,
            reason=(
                "limits cannot be met even with scale-ups cancelled and scale-outs trimmed "
                f"({describe(after, params)}): configuration kept"
            ),
            notes=MappingProxyType(kept),
        )
    asked = totals(proposed, params)
    return Clip(
        MappingProxyType(config),
        clipped=True,
        feasible=True,
        reason=(
            f"clipped to the limits: asked {describe(asked, params)}; "
            f"got {describe(after, params)}"
        ),
        notes=MappingProxyType(notes),
    )


def bounded(graph: JobGraph, params: ScalingParams) -> tuple[Configuration, dict[str, str]] | None:
    """The running configuration moved within the policy's bounds and spec.limits, with a
    note per moved vertex naming the bound or limit; None when it is within them already.

    A bound or limit lowered or raised in the spec (GitOps) must take effect even when
    the policy has no reason to scale: a job kept at parallelism 9 under maxParallelism 2
    would otherwise stay Steady forever.
    """
    current = graph.configuration()
    config = dict(current)
    notes: dict[str, str] = {}
    cpu, memory = params.cpu, params.memory
    for v in graph.vertices:
        if cpu.excludes(v.id, v.operator_uids):
            continue
        low, high = cpu.bounds_for(v.id, v.operator_uids)
        floor, upper = cpu.parallelism_range(v.id, v.operator_uids, v.max_parallelism)
        c = current[v.id]
        p, level = min(max(c.parallelism, floor), upper), c.memory_level
        said: list[str] = []
        overridden = (low, high) != (cpu.min_parallelism, cpu.max_parallelism)
        where = "spec.cpu.overrides" if overridden else "spec.cpu"
        if p < c.parallelism:
            said.append(f"parallelism {c.parallelism}→{p}: {where} maxParallelism is {high}"
                        if upper == high else
                        f"parallelism {c.parallelism}→{p}: the job's max parallelism is {upper}")
        elif p > c.parallelism:
            said.append(f"parallelism {c.parallelism}→{p}: {where} minParallelism is {low}")
        if memory.enabled and level is not None and level > memory.max_level - 1:
            level = memory.max_level - 1
            said.append(f"memory level {c.memory_level}→{level}: spec.memory.maxLevel is "
                        f"{memory.max_level}")
        if said:
            config[v.id] = VertexConfig(p, level)
            notes[v.id] = "; ".join(said)
    _within_quota(graph, config, notes, params)
    return (MappingProxyType(config), notes) if notes else None


def _within_quota(graph: JobGraph, config: dict[str, VertexConfig], notes: dict[str, str],
                  params: ScalingParams) -> None:
    """Move `config` within spec.limits, as `clip` does to a proposal but below what runs:
    memory levels down (the vertex whose tasks would free the most managed memory first,
    never below level 0) while memory is over, then tasks off the vertex with the most
    above its minimum while anything is over. A note per moved vertex names the limit.
    When even that cannot meet them, `config` is left as it was (`clip` then says so)."""
    limits = params.limits
    asked = totals(config, params)
    if within_limits(asked, limits):
        return
    cpu, managed = params.cpu, params.memory.managed_mib
    movable = [v for v in graph.vertices if not cpu.excludes(v.id, v.operator_uids)]
    trial = dict(config)

    def memory_over() -> bool:
        return limits.max_memory is not None and \
            totals(trial, params).memory_mib > limits.max_memory * (1 + 1e-9)

    def freed(vid: str) -> float:
        c = trial[vid]
        level = c.memory_level
        return c.parallelism * (managed(level) - managed(level - 1)) if level else 0.0

    while memory_over():
        vid = max((v.id for v in movable), key=freed, default=None)
        if vid is None or freed(vid) <= 0:
            break
        c = trial[vid]
        trial[vid] = VertexConfig(c.parallelism, (c.memory_level or 0) - 1)
    floors = {v.id: cpu.parallelism_range(v.id, v.operator_uids, v.max_parallelism)[0]
              for v in movable}
    while not within_limits(totals(trial, params), limits):
        spare = [vid for vid in floors if trial[vid].parallelism > floors[vid]]
        if not spare:
            return  # not even the minimum parallelisms at level 0 fit
        vid = max(spare, key=lambda i: trial[i].parallelism - floors[i])
        c = trial[vid]
        trial[vid] = VertexConfig(c.parallelism - 1, c.memory_level)
    broken = []
    if limits.max_cpu_cores is not None and asked.cpu_cores > limits.max_cpu_cores * (1 + 1e-9):
        broken.append(f"spec.limits maxCpuCores is {limits.max_cpu_cores:g} "
                      f"(it runs {asked.cpu_cores:g})")
    if limits.max_memory is not None and asked.memory_mib > limits.max_memory * (1 + 1e-9):
        broken.append(f"spec.limits maxMemory is {limits.max_memory:.0f} MiB "
                      f"(it runs {asked.memory_mib:.0f})")
    which = "; ".join(broken)
    for vid, c in trial.items():
        before = config[vid]
        if c == before:
            continue
        moved = []
        if c.parallelism != before.parallelism:
            moved.append(f"parallelism {before.parallelism}→{c.parallelism}")
        if c.memory_level != before.memory_level:
            moved.append(f"memory level {before.memory_level}→{c.memory_level}")
        said = f"{', '.join(moved)}: {which}"
        notes[vid] = f"{notes[vid]}; {said}" if vid in notes else said
        config[vid] = c
