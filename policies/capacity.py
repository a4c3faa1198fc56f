"""The capacity policy: learn each vertex's capacity surface, plan the cheapest
(parallelism, memory level) that sustains the target, and move in one jump.

Per vertex, every window adds a data point (`policies.learning`) and refits the
surface s(p, m). Then, with DS2's target rates (sources' input plus lag growth,
carried downstream by output ratios):

- **deficit**: the busiest subtask's utilization is above `cpu.utilizationMax` →
  the job restarts into the cheapest configuration predicted to run every vertex's
  busiest subtask at `cpu.utilizationTarget`, memory and parallelism together (cheapest
  in the pods it needs, `ScalingParams.pods`, when the controller prices them);
- **surplus**: a configuration cheaper by more than the restart costs within
  `cost.paybackPeriod`, and by more than the predictions' error (`SHORT_BY` of its
  bill), has sufficed for `cpu.scaleDownDelay` → it is
  sized for the highest need over that delay (plus the measured noise) and taken (a
  skewed vertex scaled in to a parallelism it never ran at must pay back the restart
  likely to undo it as well, `_blind_scale_in`);
- otherwise nothing moves (SASO: a steady load means no restart).

A step is judged by capacity: once the vertex runs at the configuration a step
chose, the measured true processing rate is compared with the predicted one. A
configuration that fell short (and every one it dominates) is never chosen again
for that need. Skew is part of the surface: the busiest subtask's share is modelled
as an indivisible hot key plus evenly hashed key groups, so scaling out stops where
it stops helping (`Branch.SKEW_LIMITED`), and a vertex whose busiest subtask more tasks
no longer relieve takes no restart and is named (`policies/skew_stop.py`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from policies import ds2, explain, skew, skew_stop, warmup
from policies.bill import TaskCpu, slot_cpu
from policies.decision import Branch, SkewFinding, VertexDecision
from policies.learning import (
    MIN_BUSYNESS,
    MIN_NOISE,
    CapacityPoint,
    Prediction,
    ShortConfiguration,
    Surface,
    VertexLearning,
    fit,
    merge,
)
from policies.model import (
    JobGraph,
    Observation,
    ShipStrategy,
    Vertex,
    VertexConfig,
    VertexMetrics,
    memory_only,
)
from policies.params import (
    PolicyState,
    ScalingParams,
    contiguous,
    pays_back,
    price_per_hour,
    totals,
)

# Busiest / mean busyness up to this factor over the key groups' own imbalance is
# noise (the max of p noisy subtasks sits above their mean), not a hot key.
SKEW_TOLERANCE = 1.15
# The busiest subtask is this busy or more: it is about to backpressure the job.
SATURATED = 0.9
# A step fell short when the measured capacity is this much below the prediction
# (or twice the measured noise, if more).
SHORT_BY = 0.10
# The tasks' busy time summed at this share of the CPU they have or more: they may have
# waited for CPU (`_cpu_use`).
CPU_BOUND = 0.95
# A step for pods short of CPU gives each task at least this factor more.
CPU_GROWTH = 1.25
# With a hot key the busiest subtask's capacity approaches a plateau as tasks are added;
# past this share of it, each task buys little (the hot key is then most of its load).
PLATEAU = 0.8
# A record that takes a task more than an hour is no measurement (and would overflow).
MAX_SERVICE_US = 3.6e9
# Most parallelisms tried per level: every one up to this many, then a geometric ladder.
DENSE_CANDIDATES = 512
# A scale-down wait's first window above the rest of the wait by more than this (or three
# times the measured noise) straddled the drop that began it: the step is sized for the
# rest, or it lands short of the load that stays and a second step follows.
STRADDLED = 0.15


@dataclass(frozen=True)
class Result:
    triggered: bool
    reason: str
    vertices: tuple[VertexDecision, ...]
    configuration: Mapping[str, VertexConfig]
    learned: Mapping[str, VertexLearning]
    skew: tuple[SkewFinding, ...] = ()  # skew-stopped vertices (policies/skew_stop.py)
    # One task's planned CPU at any configuration of a vertex (`_TaskCpu`), as the pods
    # were priced; None: the footprint's.
    task_cpu: TaskCpu | None = None
    # The step asks for new slots: for the same configuration (the pods were short of
    # CPU, or asked for more than their tasks are planned to use), or with a give-back of
    # managed memory priced in pods (a restart, never a resize in place).
    cpu_step: bool = False
    # PolicyState.cpu_short_since after this window (None once a step changes the pods).
    cpu_short_since: float | None = None
    # Vertices whose planned CPU at the chosen configuration is the growth after a window
    # that waited for CPU (`_TaskCpu.grown`), not their own plan: a guess.
    cpu_grown: frozenset[str] = frozenset()


@dataclass(frozen=True)
class _Plan:
    vertex: Vertex
    metrics: VertexMetrics
    learning: VertexLearning
    surface: Surface | None
    skew: _Skew
    rate: float  # records/s to sustain now: target, lag catch-up, restart catch-up
    # records/s (mean-based TPR) the chosen configuration must reach: the target (or the
    # waited peak) at the utilization target, plus the catch-up at full busyness
    need: float
    need_hottest: float  # ... and that its busiest subtask must keep up with
    current: VertexConfig
    best: VertexConfig
    hottest_now: float  # the busiest subtask's utilization now (target / its capacity)
    deficit: bool
    surplus: bool  # `best` is cheaper and enough for the peak need with margin
    skew_limited: bool
    note: str
    stop: skew_stop.SkewStop | None = None
    # Every configuration that sustains the need, the fewest tasks at each memory level,
    # cheapest per task first: what the pod price chooses among (`best` is the first).
    options: tuple[VertexConfig, ...] = ()
    # records/s the pods' CPU is sized for (`_TaskCpu`): the target at utilizationMax,
    # plus the catch-up at full busyness
    need_cpu: float = 0.0
    idle_cpu: bool = False  # its CPU is planned from a near-idle busy time (`_idle_busyness`)
    # Asynchronous state: cores one record/s took, from the JVMs' CPU (`_async_cpu`).
    cpu_per_record: float | None = None
    # Its slots' CPU, grown after throttling, is above what its tasks are now planned to
    # use (this, cores a task): a give-back of CPU alone, on new slots (`_slots_surplus`).
    slots_planned: float | None = None


def evaluate(graph: JobGraph, observation: Observation, state: PolicyState,
             params: ScalingParams, now: float) -> Result:
    """One evaluation of the capacity policy (every vertex has metrics)."""
    cpu = params.cpu
    rates = ds2.target_rates(graph, observation)
    catch_up = ds2.catch_up_rates(graph, observation, cpu)
    backlog = ds2.processing_backlog(graph, observation, cpu)
    high_u = 1.0 if backlog else cpu.utilization_max

    plans: dict[str, _Plan] = {}
    per_record = _async_cpu(graph, observation)
    use = _cpu_use(graph, observation, state, params.pods_cpu)
    throttled = use is not None and use.throttled
    # A throttled window's busy time counts waiting for CPU: what it leaves bounds nothing.
    ceiling = {} if throttled else _async_cpu_ceiling(graph, observation)
    # The share of the CPU they wanted that the tasks got, in a window that may have
    # waited for it.
    speed = None if use is None else use.speed
    for v in graph.vertices:
        m = observation.vertices[v.id]
        idle = bool(graph.inputs(v.id)) and _too_idle(m)
        starved = idle and _starved(m, rates[v.id] + catch_up[v.id], cpu.utilization_target)
        learning = _learn(state.learned.get(v.id), v, observation, params,
                          provisional=idle, speed=speed)
        plans[v.id] = _plan_vertex(graph, v, m, learning, rates[v.id], catch_up[v.id], high_u,
                                   params, now, shrink_only=idle and not starved,
                                   no_scale_in=_quiet_async(m),
                                   cpu_per_record=per_record.get(v.id),
                                   cpu_ceiling=ceiling.get(v.id))
    deficits = [p for p in plans.values() if p.deficit]
    ready: list[_Plan] = []
    # Falling behind with no task busy enough to say why: what is short is not what busy
    # time shows (`_busy_cpu_short`).
    idle_short: list[str] = []
    if params.pods is not None:
        silent = (not deficits and _falling_behind(graph, observation)
                  and all(_busy_time_silent(p) for p in plans.values()))
        marked = {vid: _busy_cpu_short(p, params.footprint.cpu_cores, silent)
                  for vid, p in plans.items()}
        idle_short = [p.vertex.name or vid for vid, p in marked.items()
                      if p.learning.busy_cpu_short and not plans[vid].learning.busy_cpu_short]
        plans = marked
    task_cpu = _TaskCpu(plans, params.footprint.cpu_cores, throttled,
                        1.0 if use is None else use.growth)
    if params.pods is not None and not deficits:
        plans = {vid: _slots_surplus(p, task_cpu(vid, p.current)) for vid, p in plans.items()}
    # Tasks that waited for CPU while the job falls behind, and no vertex short by its
    # busy time (one that can be scaled: a source may be what saturates first): the pods
    # are what is short. The step keeps the configuration and asks for new slots with
    # more CPU (`_TaskCpu`). With a deficit, its step plans more CPU as well. Two windows
    # running, as for `_busy_cpu_short`: one alone may hold a stall (a GC or checkpoint
    # pause, counted as busy time) whose backlog the pods' CPU limits while it drains.
    behind = not deficits and _falling_behind(graph, observation)
    cpu_short = params.pods is not None and throttled and behind
    since = state.cpu_short_since
    running = contiguous(since, now, observation.window_s)
    cpu_short_since = (since if running else now) if cpu_short else None
    cpu_step = ((bool(idle_short) or (cpu_short and running))
                and behind
                and any(task_cpu(vid, p.current) > (p.learning.task_cpu or math.inf)
                        for vid, p in plans.items()))
    if cpu_step and idle_short:
        chosen = {vid: p.current for vid, p in plans.items()}
        triggered = True
        reason = ("capacity: the job fell behind and no task is busy enough to say why; "
                  f"{', '.join(idle_short)} asked for CPU its near-idle busy time showed, "
                  "and get the footprint's core back on new slots; the configuration stays")
    elif cpu_step and use is not None:
        chosen = {vid: p.current for vid, p in plans.items()}
        triggered = True
        reason = (f"capacity: the pods are short of CPU: their tasks used or were busy "
                  f"{use.busy:.1f} cores of the {use.have:.1f} they have, and the job fell "
                  f"behind, two windows running; new slots ask for more CPU, the "
                  f"configuration stays")
    elif deficits:
        chosen = {vid: (p.best if p.deficit or _rides_along(p, params, now) else p.current)
                  for vid, p in plans.items()}
        chosen, _ = _by_pods(graph, chosen, {vid: p.options for vid, p in plans.items()
                                             if chosen[vid] != p.current}, params, task_cpu)
        triggered = any(chosen[vid] != p.current for vid, p in plans.items())
        reason = "capacity: " + ", ".join(
            f"{p.vertex.name or p.vertex.id} busiest subtask at {p.hottest_now:.2f} "
            f"(mean {p.hottest_now / p.skew.ratio(p.vertex.parallelism):.2f}, "
            f"utilizationMax {high_u:.2f})"
            for p in deficits)
    else:
        ready = [p for p in plans.values() if p.surplus and _waited(p, params, now)]
        current = {vid: p.current for vid, p in plans.items()}
        chosen = {vid: (p.best if p in ready else p.current) for vid, p in plans.items()}
        cost_now = cost_new = 0.0
        if ready:
            # The search prices the mix it returns; the running configuration is priced
            # once more, and not at all when the search keeps it.
            chosen, priced = _by_pods(graph, chosen, {p.vertex.id: (*p.options, p.current)
                                                      for p in ready}, params, task_cpu)
            cost_new = _job_cost(graph, chosen, params, task_cpu) if priced is None else priced
            # What runs costs what its pods cost: the saving counts the CPU its tasks were
            # planned at too (a step sized for a catch-up, or grown after throttling), so
            # the same configuration on new slots can be the cheaper one (a CPU give-back).
            cost_now = (params.pods_price
                        if params.pods_price is not None and params.pods is not None
                        else cost_new if chosen == current
                        else _job_cost(graph, current, params, task_cpu))
        blind_ids = {p.vertex.id for p in ready if _blind_scale_in(p, chosen[p.vertex.id])}
        blind = [p.vertex.name or p.vertex.id for p in ready if p.vertex.id in blind_ids]
        pays = pays_back(cost_now, cost_new, params, restarts=2 if blind else 1)
        held: list[str] = []
        if blind and not pays:
            # The blind scale-ins stay as they run; the rest may still pay one restart back.
            sighted = {vid: current[vid] if vid in blind_ids else c for vid, c in chosen.items()}
            cost_sighted = _job_cost(graph, sighted, params, task_cpu)
            if sighted != current and cost_sighted < cost_now and pays_back(
                    cost_now, cost_sighted, params):
                chosen, cost_new, pays, held, blind = sighted, cost_sighted, True, blind, []
        triggered = bool(ready) and pays and cost_new < cost_now
        # The same configuration on smaller slots: only where a task asks for less.
        if (triggered and chosen == current
                and not any(_asks_for_less(p, task_cpu(vid, p.current))
                            for vid, p in plans.items())):
            triggered = False
        # A restart for a saving the predictions' error could take back is churn (SASO).
        slight = triggered and not _saves_beyond_error(cost_now, cost_new)
        slight_to = chosen
        triggered = triggered and not slight
        if not triggered:
            chosen = current
        # With a pod price the saving is the pods the tasks' planned CPU needs: a give-back
        # of managed memory only asks for those slots too, rather than keeping the running
        # ones to be resized in place (`evaluate._planned_cpu`), which saves nothing billed
        # and leaves the CPU for a restart of its own one scaleDownDelay later.
        cpu_step = triggered and (chosen == current or (
            params.pods is not None and memory_only(current, chosen)))
        waiting = [p for p in plans.values() if p.surplus and not _waited(p, params, now)]
        if cpu_step and chosen == current:
            reason = (f"capacity: the pods ask for more CPU than their tasks are planned to "
                      f"use ({cost_now:,.2f}/h against {cost_new:,.2f}/h); new slots, the "
                      f"configuration stays, pay their restart back within "
                      f"{params.cost.payback_period:.0f}s")
        elif triggered:
            reason = (f"capacity: a cheaper configuration has sufficed for "
                      f"{cpu.scale_down_delay:.0f}s and pays its restart back within "
                      f"{params.cost.payback_period:.0f}s")
            if cpu_step:
                reason += ", on new slots for the CPU its tasks are planned to use"
            if held:
                reason += (f" ({', '.join(held)} kept: skewed, a scale-in to a parallelism "
                           "never run would not pay back the restart likely to undo it)")
        elif ready and cost_new >= cost_now:
            # Cheaper per task, not in pods: the pods it needs cost as much or more.
            reason = ("capacity: steady; the configurations cheaper per task need pods "
                      "that cost no less")
        elif slight:
            what = ("new slots for the same configuration" if slight_to == current
                    else "a cheaper configuration")
            reason = (f"capacity: steady; {what} would save {cost_now - cost_new:,.2f}/h on "
                      f"its {cost_new:,.2f}/h, within what the capacity predictions may be "
                      f"off by ({SHORT_BY:.0%}): no restart for it")
        elif ready and not pays and blind:
            reason = ("capacity: steady; a cheaper configuration would not pay back within "
                      f"{params.cost.payback_period:.0f}s both its restart and the one likely "
                      f"to undo it ({', '.join(blind)}: skewed, to a parallelism never run)")
        elif ready and not pays:
            reason = ("capacity: steady; a cheaper configuration would not pay its restart "
                      f"back within {params.cost.payback_period:.0f}s")
        elif waiting and all(p.slots_planned is not None for p in waiting):
            reason = ("capacity: steady; new slots for CPU grown after throttling are waiting "
                      "out cpu.scaleDownDelay")
        elif waiting:
            reason = "capacity: steady; a cheaper configuration is waiting out cpu.scaleDownDelay"
        else:
            reason = (f"capacity: steady; every busiest subtask within {high_u:.2f} "
                      "and no cheaper configuration that pays its restart back")

    learned: dict[str, VertexLearning] = {}
    decisions = []
    # Every waiting vertex starts over together, so the next full wait can take them in one
    # restart rather than one at a time; slots alone that did not pay start only their own
    # over (a configuration's give-back waiting behind them would otherwise never come).
    over = {p.vertex.id for p in ready} if all(
        p.slots_planned is not None for p in ready) else set(plans)
    for v in graph.vertices:
        p = plans[v.id]
        after = chosen[v.id]
        learning = _surplus_bookkeeping(
            p, now, restart_wait=not triggered and bool(ready) and v.id in over)
        if triggered and p.deficit and after != p.current and learning.excluded(
                p.current.parallelism, p.current.memory_level, p.need) is None:
            # What ran short of this need is not returned to while it holds (a scale-in
            # across a cache cliff the surface does not see would flip-flop), as DS2's
            # scale-in floor does (docs/policies.md, `scale-in-floor`); for one payback
            # period, as one window's stall can make a deficit too.
            learning = learning.ran_short(ShortConfiguration(
                parallelism=p.current.parallelism, memory_level=p.current.memory_level,
                need=p.need, until=now + params.cost.payback_period), now)
        predicted = _predict(p, after)
        if triggered and after != p.current and math.isfinite(predicted):
            learning = learning.model_copy(update={
                "predicted": Prediction(
                    parallelism=after.parallelism, memory_level=after.memory_level,
                    capacity=predicted, need=p.need,
                    hottest_capacity=predicted / p.skew.ratio(after.parallelism),
                    need_hottest=p.need_hottest, from_capacity=_predict(p, p.current),
                    memory_led=_memory_led(p, after, predicted)),
                "surplus_since": None, "surplus_peak_need": None, "surplus_later_need": None})
        elif triggered:
            learning = learning.model_copy(update={"surplus_since": None,
                                                   "surplus_peak_need": None,
                                                   "surplus_later_need": None})
        learned[v.id] = learning
        decisions.append(_vertex_decision(p, after, rates[v.id], params))

    sources = sum(rates[v.id] for v in graph.vertices if not graph.inputs(v.id))
    stopped = tuple(skew_stop.finding(p.vertex, p.metrics, p.stop, rates[vid], sources)
                    for vid, p in plans.items() if p.stop is not None)
    return Result(triggered, reason, tuple(decisions), MappingProxyType(chosen),
                  MappingProxyType(learned), stopped,
                  task_cpu if params.pods is not None else None, cpu_step,
                  None if triggered else cpu_short_since,
                  cpu_grown=frozenset(vid for vid, c in chosen.items()
                                      if params.pods is not None and task_cpu.grown(vid, c)))


@dataclass(frozen=True)
class _CpuUse:
    """What the tasks used of the CPU their pods request in a window (`_cpu_use`)."""

    busy: float  # their busy time summed (cores)
    have: float  # the CPU their pods request (or their slots ask for)

    @property
    def throttled(self) -> bool:
        """Busy at `CPU_BOUND` of the request or more: the tasks may have waited for CPU."""
        return self.busy >= CPU_BOUND * self.have

    @property
    def speed(self) -> float | None:
        """In a throttled window, the share of the CPU they wanted that they were sure to
        get (more, if a CPU limit above the request lent them some)."""
        return min(1.0, self.have / self.busy) if self.throttled else None

    @property
    def growth(self) -> float:
        """What a step for pods short of CPU asks for over the request (`_TaskCpu`):
        what the tasks used, with a tenth more."""
        return self.busy / self.have * 1.1


def _cpu_use(graph: JobGraph, observation: Observation, state: PolicyState,
             pods_cpu: float | None) -> _CpuUse | None:
    """The tasks' busy time summed (cores; it bounds their CPU from above, except on
    asynchronous state: there the JVMs' measured CPU where it is higher) and the CPU
    they have: the running pods' (`pods_cpu`), else what their slots ask for (planned at
    the last step, `_TaskCpu`). None while a vertex asks for the footprint's core, which
    one task cannot exceed. Busy time at `CPU_BOUND` of that CPU or more: the tasks may
    have waited for CPU, and a throttled task is busy while it waits. Kubernetes
    throttles a pod at its CPU limit, which Flink sets to the request times
    `kubernetes.taskmanager.cpu.limit-factor` (1 by default); past the request even a
    higher limit guarantees nothing (the node's spare CPU, shared with its other pods),
    so the request is the bound. Such a window measures the pods' CPU, not the
    configuration's capacity: it adds at most a provisional point and judges no step; a
    deficit it shows is sized as usual and plans more CPU, and without one, pods short of
    CPU while the job falls behind, two windows running, get new slots (`cpu_step`)."""
    slots = busy = 0.0
    for v in graph.vertices:
        learning = state.learned.get(v.id)
        if learning is None or learning.task_cpu is None:
            return None
        slots += v.parallelism * learning.task_cpu
        busy += v.parallelism * observation.vertices[v.id].busyness
    # Asynchronous state's I/O threads are not busy time: the JVMs' CPU where measured.
    used = observation.jvm_cpu_cores
    if used is not None and any(m.asynchronous_state for m in observation.vertices.values()):
        busy = max(busy, used)
    have = pods_cpu if pods_cpu else slots
    return _CpuUse(busy, have) if have > 0 else None


def _async_cpu(graph: JobGraph, observation: Observation) -> dict[str, float]:
    """Per vertex on asynchronous state, the cores one record/s takes: the CPU the job's
    TaskManager JVMs used (`Observation.cpu_cores_used`) less the synchronous vertices'
    busy time, shared among the asynchronous vertices by their task threads' busy time,
    and never below it (it counts the task thread only). Busy time alone cannot say:
    ForSt's I/O threads do the state's work outside it. It errs both ways: low where a
    synchronous vertex's busy time counts waiting, high by the JVM's own threads (GC,
    network, compaction, checkpoint uploads), which it charges to these vertices. Empty
    when the CPU was not measured."""
    used = observation.jvm_cpu_cores
    if used is None:
        return {}
    busy = {v.id: v.parallelism * observation.vertices[v.id].busyness for v in graph.vertices}
    async_ids = [v.id for v in graph.vertices
                 if observation.vertices[v.id].asynchronous_state]
    threads = sum(busy[vid] for vid in async_ids)
    left = used - sum(b for vid, b in busy.items() if vid not in async_ids)
    out = {}
    for vid in async_ids:
        records = observation.vertices[vid].processed_per_s
        share = busy[vid] / threads if threads > 0 else 1.0 / len(async_ids)
        cores = max(left * share, busy[vid])
        if records > 0 and 0.0 < cores < math.inf:
            out[vid] = cores / records
    return out


def _async_cpu_ceiling(graph: JobGraph, observation: Observation) -> dict[str, float]:
    """Per vertex on asynchronous state, the most cores one record/s can have taken: the
    CPU the TaskManagers' JVMs used, less only what is certainly another vertex's (the
    busy time of a stateless synchronous vertex, and of another asynchronous vertex's task
    thread below saturation, where it does not wait on its in-flight buffer: a stateful
    synchronous vertex's busy time may be a state read's wait), over its records. The
    share `_async_cpu` plans the pods with is no bound: a vertex whose I/O threads do
    most of its work gets too little of it. Empty when the CPU was not measured, or reads
    below what the vertices' own busy time shows (a scrape that missed a TaskManager):
    then it bounds nothing."""
    used = observation.jvm_cpu_cores
    if used is None:
        return {}
    busy = {v.id: v.parallelism * observation.vertices[v.id].busyness for v in graph.vertices}
    certain = {vid: b for vid, b in busy.items()
               if (not observation.vertices[vid].asynchronous_state
                   and not observation.vertices[vid].has_state_backend_metrics)
               or _quiet_async(observation.vertices[vid])}
    out = {}
    for v in graph.vertices:
        m = observation.vertices[v.id]
        if not m.asynchronous_state:
            continue
        others = sum(b for vid, b in certain.items() if vid != v.id)
        if not used >= others + busy[v.id]:
            return {}  # the JVMs' CPU reads low: it bounds nothing
        if m.processed_per_s > 0:
            out[v.id] = (used - others) / m.processed_per_s
    return out


def _falling_behind(graph: JobGraph, observation: Observation) -> bool:
    """Some source's backlog grows (not merely there, as while a restart is caught up on)."""
    return any((observation.vertices[v.id].pending_records_growth_per_s or 0.0) > 0
               for v in graph.vertices if graph.is_source(v.id))


def _too_idle(m: VertexMetrics) -> bool:
    """Busy, but below MIN_BUSYNESS: too idle for a measured point. Such a window still
    gives a provisional one (`_learn`), whose true processing rate a pause can make
    several times too low (never too high: it inflates the busy time), except under
    asynchronous state, whose busy time counts the task thread only (docs/flink-2.md).
    Not for sources: one that idles is backpressured, not fast."""
    tpr = m.true_processing_rate
    return 0.0 < m.busyness < MIN_BUSYNESS and 0.0 < tpr < math.inf


def _quiet_async(m: VertexMetrics) -> bool:
    """Asynchronous state (ForSt) below saturation. Its busy time counts the task thread
    only, not ForSt's I/O threads, so its true processing rate reads several times the
    capacity (3.1× measured on real Flink 2.2, docs/flink-2.md). Such a window may size a
    vertex's growth (it lands short, and the saturated window that follows measures the
    truth: the task thread blocks on its full in-flight buffer, which is busy time), and
    a memory give-back, never a scale-in sized on it: fewer tasks divide the capacity by
    as much as the reading overstates it, and starve the job (suite: 13 of 24 ForSt runs
    never caught up, 8 with this rule). Tasks come back only as far as the CPU its records
    took allows (`_cpu_floors`), ruled out of every option below that, so the pod price
    cannot choose them either. Memory may still come back: real Flink 2.2 kept its rate
    through such a give-back (e2e/test_realflink.py)."""
    return (m.asynchronous_state
            and not m.busy_ms_per_s_max / 1000.0 >= SATURATED)  # NaN: quiet, no scale-in


def _starved(m: VertexMetrics, rate: float, utilization: float) -> bool:
    """Too idle to measure (`_too_idle`), yet the target would load it above `utilization`
    at its true processing rate: it idles because an upstream bottleneck starves it, and
    takes the target's load once that is gone. DS2 sizes such a vertex in the same step;
    so does this policy, from the window it has, but only in a step another vertex
    triggers (a pause inflates a near-idle window's busy time: alone it could restart the
    job), and only while nothing better was measured at its configuration (`_learn`).
    A vertex that is idle and not starved may only shrink (`_plan_vertex`): a give-back
    the same pause could only make more cautious."""
    return rate / m.true_processing_rate > utilization


def _learn(old: VertexLearning | None, v: Vertex, observation: Observation,
           params: ScalingParams, provisional: bool = False, speed: float | None = None
           ) -> VertexLearning:
    """Add this window's point (`provisional`: also when too idle to measure, `_too_idle`);
    judge the last step once its configuration has run. A window whose tasks may have
    waited for CPU (`speed`: the share of the CPU they wanted that they got, `_cpu_use`)
    measured the pods, not the configuration: at most a provisional point where nothing
    was measured, its service time scaled by `speed`, so that the vertex has a capacity
    to plan from (a low one still: a saturated task's busy time shows less than it
    wanted)."""
    learning = (old or VertexLearning(vertex_id=v.id)).expired(observation.time)
    m = observation.vertices[v.id]
    if speed is not None:
        guess = point_of(v, m, observation.time)
        known = None if guess is None else learning.point(*guess.key)
        if guess is None or (known is not None and not known.provisional):
            return learning
        return learning.model_copy(update={"points": merge(
            learning.points, guess.model_copy(update={
                "provisional": True, "service_us": guess.service_us * speed}),
            observation.window_s)})
    point = point_of(v, m, observation.time)
    idle = learning.model_copy(update={"warmup": None}) if learning.warming else learning
    if point is None and provisional:
        # A provisional point where none was measured (`merge`: the first measured window
        # replaces it): the pause that can inflate a near-idle window's busy time must
        # neither judge a step, nor tilt a measured point (its noise, its busiest
        # subtask), nor say the cache is warm.
        guess = point_of(v, m, observation.time, min_busyness=0.0)
        if guess is not None:
            return idle.model_copy(update={"points": merge(
                learning.points, guess.model_copy(update={"provisional": True}),
                observation.window_s)})
    if point is None:
        # Too idle to measure: nothing says whether the cache is warm; the next measurable
        # window starts the judgement over (a pending warm-up must not hold the vertex).
        return idle
    known = learning.point(*point.key)
    if known is not None and known.provisional:
        known = None  # a near-idle window never passed the warm-up check: no reference
    admitted, warm = warmup.admit(
        learning.warmup, None if point.miss_ratio is None else 1.0 - point.miss_ratio,
        observation.restarted, observation.time, observation.window_s,
        None if known is None or known.miss_ratio is None else 1.0 - known.miss_ratio)
    learning = learning.model_copy(update={"warmup": warm})
    if not admitted:  # a cold cache: neither a capacity nor a verdict on the last step
        return learning
    learning = learning.model_copy(update={
        "points": merge(learning.points, point, observation.window_s)})
    predicted = learning.predicted
    if predicted is not None and (predicted.parallelism, predicted.memory_level) == point.key:
        measured = v.parallelism * 1e6 / point.service_us
        short_by = max(SHORT_BY, 2 * learning.noise)
        fell_short = measured < predicted.capacity * (1 - short_by) and measured < predicted.need
        # ... or its busiest subtask, which saturates first, fell short of what it had to do.
        busiest = measured / point.hottest_ratio
        fell_short = fell_short or (
            predicted.hottest_capacity is not None and predicted.need_hottest is not None
            and busiest < predicted.hottest_capacity * (1 - short_by)
            and busiest < predicted.need_hottest)
        if fell_short:
            learning = learning.ran_short(ShortConfiguration(
                parallelism=point.parallelism, memory_level=point.memory_level,
                need=predicted.need), observation.time)
        judged: dict[str, object] = {}
        if _judges(predicted, measured, short_by):
            # A share measured on the other kind of step shrank gains this one's did not.
            same = learning.realized_memory_led == predicted.memory_led
            realized = _realized(predicted, measured, learning.realized if same else None)
            judged = {"realized": realized,
                      "realized_memory_led": predicted.memory_led and realized is not None}
        learning = learning.model_copy(update={"predicted": None, **judged})
    return learning


def _judges(predicted: Prediction, measured: float, short_by: float) -> bool:
    """Whether a step says how far the surface's gains hold: it promised a gain a
    measurement can confirm, and measured outside the noise of it."""
    start = predicted.from_capacity
    if start is None or not start > 0 or predicted.capacity < start * (1 + 2 * short_by):
        return False
    return abs(measured - predicted.capacity) > predicted.capacity * short_by


def _realized(predicted: Prediction, measured: float, before: float | None) -> float | None:
    """The share of the surface's predicted gains that measurements confirm, after a step
    that judges it (`_judges`), `predicted`, made with the share `before` (None: all):
    scaled by how much of the predicted gain it measured (never above 1: all)."""
    start = predicted.from_capacity or 0.0
    share = (before or 1.0) * (measured - start) / (predicted.capacity - start)
    share = min(1.0, max(0.05, share))
    return None if share >= 1.0 else share


def point_of(v: Vertex, m: VertexMetrics, time: float,
             min_busyness: float = MIN_BUSYNESS) -> CapacityPoint | None:
    """This window as a data point, or None when the vertex was too idle to measure."""
    tpr = m.true_processing_rate
    if m.busyness <= 0 or m.busyness < min_busyness or not math.isfinite(tpr) or tpr <= 0:
        return None
    service_us = v.parallelism * 1e6 / tpr
    if not service_us < MAX_SERVICE_US:
        return None
    theta = m.cache_hit_rate if m.has_state_backend_metrics else None
    accesses = None
    if m.cache_hits_per_s is not None or m.cache_misses_per_s is not None:
        records = m.processed_per_s
        if records > 0:
            accesses = ((m.cache_hits_per_s or 0.0) + (m.cache_misses_per_s or 0.0)) / records
    hottest = m.busy_ms_per_s_max / m.busy_ms_per_s if m.busy_ms_per_s > 0 else 1.0
    records_share = skew.busiest_records_share(m)
    return CapacityPoint(
        parallelism=v.parallelism, memory_level=v.memory_level, time=time,
        service_us=service_us,
        hottest_ratio=min(float(v.parallelism), max(1.0, hottest)),
        records_ratio=None if records_share is None else min(
            float(v.parallelism), max(1.0, records_share * v.parallelism)),
        miss_ratio=None if theta is None else min(1.0, max(0.0, 1.0 - theta)),
        cache_accesses_per_record=explain.finite(accesses),
        state_latency_ns=explain.finite(m.state_latency_ns),
        state_bytes=explain.finite(m.state_bytes),
    )


def _plan_vertex(graph: JobGraph, v: Vertex, m: VertexMetrics, learning: VertexLearning,
                 target: float, catch_up: float, high_u: float, params: ScalingParams,
                 now: float, shrink_only: bool = False, no_scale_in: bool = False,
                 cpu_per_record: float | None = None,
                 cpu_ceiling: float | None = None) -> _Plan:
    cpu = params.cpu
    current = VertexConfig(v.parallelism, v.memory_level)
    anchor = learning.point(v.parallelism, v.memory_level)
    # Only shrink where a near-idle window is all there is to go by: a point measured at
    # this configuration still judges it as before (a hot subtask among idle ones).
    shrink_only = shrink_only and anchor is not None and anchor.provisional
    none = _Skew(1.0, v.parallelism, 0, MappingProxyType({}))
    keep = _Plan(v, m, learning, None, none, 0.0, 0.0, 0.0, current, current, 0.0, False,
                 False, False, "", cpu_per_record=cpu_per_record)
    if cpu.excludes(v.id, v.operator_uids):
        return replace(keep, note="excluded from scaling")
    if learning.warming and learning.warmup is not None:
        return replace(keep, note=warmup.note(learning.warmup))
    if anchor is None:
        # Its CPU is planned from its busy time (`_idle_busyness`), for this load, sized
        # as every vertex's is: the target at utilizationMax, the catch-up at full busyness.
        keep = replace(keep, need_cpu=target / cpu.utilization_max + catch_up, idle_cpu=True)
        if not m.has_state_backend_metrics and v.memory_level is not None:
            # Idle and stateless: it keeps its tasks, and needs no managed memory.
            return replace(keep, best=VertexConfig(v.parallelism, None), surplus=True,
                           note="stateless and too idle to measure, so its managed memory "
                                "is freed")
        return replace(keep, note="capacity unknown (too idle to measure): keeps its "
                                  "configuration")
    # Where the last step fell short of its predicted gain, the next ones count on as much.
    # Near-idle windows (provisional points) shape neither the surface nor the skew model
    # beyond the vertex's own configuration: their rate and their busiest subtask are the
    # numbers a pause distorts.
    known = [pt for pt in learning.points if not pt.provisional or pt.key == anchor.key]
    surface = fit(known, anchor, params.memory.base_managed_memory).damped(
        anchor, learning.realized, learning.realized_memory_led)
    hashed = any(e.ship_strategy == ShipStrategy.HASH for e in graph.inputs(v.id))
    measured = {pt.parallelism: pt.hottest_ratio for pt in learning.points
                if not pt.provisional}
    # Busy time and records over the same windows (`CapacityPoint`), so their ratio is a
    # cost per record and not a change of load between them.
    spread = _Skew(anchor.hottest_ratio, v.parallelism, v.max_parallelism if hashed else 0,
                   MappingProxyType(measured), anchor.records_ratio)
    def after_downtime(downtime_s: float) -> float:
        """The rate to sustain when a step's downtime must be caught up on as well."""
        restart = target * downtime_s / cpu.catch_up_duration if cpu.catch_up_duration > 0 else 0.0
        return target + catch_up + restart

    rate = after_downtime(params.restart_downtime_s)
    # A memory-only step the deployment resizes in place stops nothing: no backlog to catch
    # up on (if another vertex restarts the job anyway, its catch-up margin is what is short).
    # Only a scale-up is resized: a give-back asks for new slots (`evaluate`), a restart.
    in_place_relief = rate - after_downtime(params.step_downtime_s(memory_only=True))
    tpr = m.true_processing_rate
    mean_now = (target + catch_up) / tpr if tpr > 0 else math.inf
    hottest_now = mean_now * spread.ratio(v.parallelism)
    # The mean above utilizationMax, or the busiest subtask close to saturation: a hot
    # subtask between the two is sized away in a step that happens anyway, but does not
    # restart the job alone (its busyness moves more with noise and key placement). A
    # backlog's catch-up counts at full busyness, as it is sized and as the Flink
    # autoscaler's threshold counts it (target / utilizationMax + catch-up): a backlog
    # that what is left after the target at utilizationMax drains in time takes no step.
    def short_at(trigger: float) -> float:
        return (target / trigger + catch_up) / tpr if tpr > 0 else math.inf
    mean_short = short_at(high_u) > 1.0
    deficit = mean_short or short_at(max(high_u, SATURATED)) * spread.ratio(
        v.parallelism) > 1.0
    # Idling (a starved window, `_starved`): not what holds the job back now, so it only
    # rides along in a step another vertex takes; near idle, a pause alone can make its
    # busy time, and with it the shortfall, several times too large. A vertex that only
    # idles (`shrink_only`) is short of nothing.
    deficit = (deficit and not shrink_only
               and max(m.busyness, m.busy_ms_per_s_max / 1000.0) >= MIN_BUSYNESS)
    stop = _skew_stop(v, surface, spread, learning, params, target + catch_up) if (
        deficit and not mean_short) else None
    if stop is not None:
        deficit = False  # only its busiest subtask is short, and more tasks do not help

    # Sized for the mean at the utilization target, and the busiest subtask below the
    # trigger by three times the measured noise (sizing it to the target would multiply
    # a hot key's cost; sizing it to the trigger would let noise fire the next step).
    # The backlog's catch-up and the restart's are transient: carried on top, at full
    # busyness, as the Flink autoscaler sizes them (ds2.capacity), not at the target.
    # Asynchronous state below saturation whose JVMs' CPU was measured is sized by that
    # CPU (its tasks: `_cpu_floors`; its pods: the CPU a record took, `_TaskCpu`), not by
    # the rate its task thread's busy time gives, so that rate's noise (a checkpoint's
    # uploads swing it ±40 % window to window on ForSt) widens neither. The busiest
    # subtask's bound still counts it: at the mean's target too, gen-043/1 and gen-108
    # ended short of their target.
    noise = MIN_NOISE if no_scale_in and cpu_ceiling is not None else learning.noise
    margin = 1.0 if deficit else 1.0 + 2.0 * noise
    transient = rate - target
    steady = max(0.0, max(rate, _waited_peak(learning) or 0.0) * margin - transient)
    hottest_u = busiest_bound(cpu.utilization_target, high_u, learning.noise,
                              hot=spread.hot_share > 0)
    need = steady / cpu.utilization_target + transient
    need_hottest = steady / hottest_u + transient
    useful = spread.useful()
    # `_quiet_async`: the fewest tasks any option may have at each memory level, what the
    # CPU its records took bounds (`_cpu_floors`); growth stays open.
    floors = _cpu_floors(v, surface, spread, need, need_hottest, cpu_ceiling,
                         params) if no_scale_in else None
    best, limited, options = _cheapest(v, surface, spread, need, need_hottest, learning,
                                       params, above=current if deficit else None, cap=useful,
                                       in_place_relief=in_place_relief if deficit else 0.0,
                                       floors=floors)
    if limited and useful is not None:
        # A hot key: its subtask cannot reach the bound within the useful tasks; the
        # cheapest configuration whose busiest subtask still keeps up beats a plateau
        # that leaves it saturated.
        keep_up = 1.0 / (1.0 + 3.0 * learning.noise)
        alt, short, _ = _cheapest(v, surface, spread, need, steady / keep_up + transient,
                                  learning, params, above=current if deficit else None,
                                  cap=useful, floors=floors)
        if not short and alt != current:
            best = alt
        options = (best,)
    if stop is not None:
        best, limited = current, True  # stays as it is, also in a restart that happens anyway
        options = (current,)
    if shrink_only and (best.parallelism > current.parallelism
                        or (best.memory_level or 0) > (current.memory_level or 0)):
        best, options = current, (current,)  # an idle window sizes give-backs only
    cost_best, cost_now = _cost(v, best, params), _cost(v, current, params)
    surplus = not deficit and best != current and cost_best < cost_now
    note = ""
    if stop is not None:
        note = (f"skew: a hot key; more tasks do not raise its busiest subtask's capacity "
                f"({explain.rate(stop.capacity_now)}; Skewed names it)")
    elif limited:
        note = (f"busiest subtask carries {spread.hot_share:.0%} of the load it cannot split: "
                f"scaling out stops at {best.parallelism} (skew)")
    return _Plan(v, m, learning, surface, spread, rate, need, need_hottest, current, best,
                 hottest_now, deficit, surplus, limited, note, stop, options,
                 need_cpu=steady / cpu.utilization_max + transient,
                 cpu_per_record=cpu_per_record)


def _cpu_floors(v: Vertex, surface: Surface, spread: _Skew, need: float, need_hottest: float,
                ceiling: float | None, params: ScalingParams) -> dict[int | None, int]:
    """The fewest tasks a vertex on asynchronous state below saturation (`_quiet_async`)
    may run at each memory level. At the running level, those whose capacity reaches
    `need`, and whose busiest subtask's reaches `need_hottest`, by a bound from below:
    the most CPU its records can have taken (`_async_cpu_ceiling`, cores a record/s).
    The task thread, which saturates first, is part of that CPU, so one core a task
    carries at least 1 / ceiling records/s, less as much as the surface says fewer tasks
    lower a task's capacity (each caches less of its state). The bound fails where a
    remote store's latency, not CPU, fills the in-flight buffer first, and it is one
    window's reading: a step that lands short saturates the tasks, whose window measures
    the truth, and the step is undone (its configuration remembered as short). At any
    other level (that CPU was measured at this level's misses, and a quiet window's
    surface says too little of another's), where the running level is not among the
    levels planned, or without a ceiling: the running tasks (memory alone may still come
    back, as it did on real Flink 2.2)."""
    floors = {level: v.parallelism for level in _levels(v, surface, params)}
    if (v.memory_level not in floors or ceiling is None or not (
            0 < ceiling < math.inf and math.isfinite(need) and math.isfinite(need_hottest))):
        return floors
    here = surface.capacity(v.parallelism, v.memory_level) / v.parallelism
    for p in _bounded_parallelisms(v, params):
        per_task = surface.capacity(p, v.memory_level) / p
        fewer = per_task / here if 0 < here < math.inf and per_task >= 0 else 0.0  # no bound
        carries = p / ceiling * min(1.0, fewer)
        if p >= v.parallelism or (carries >= need
                                  and carries / spread.ratio(p) >= need_hottest):
            floors[v.memory_level] = p
            break
    return floors


def _skew_stop(v: Vertex, surface: Surface, spread: _Skew, learning: VertexLearning,
               params: ScalingParams, rate: float) -> skew_stop.SkewStop | None:
    """Whether more tasks (or memory) still relieve the busiest subtask (skew_stop.assess):
    every parallelism up to the bounds and the useful one, not only one step's reach."""
    current = VertexConfig(v.parallelism, v.memory_level)
    high = min(params.cpu.parallelism_range(v.id, v.operator_uids, v.max_parallelism)[1],
               spread.useful() or v.max_parallelism)
    ps = list(range(v.parallelism, max(v.parallelism, high) + 1))
    candidates = [VertexConfig(p, level) for level in _levels(v, surface, params) for p in ps]
    return skew_stop.assess(current, surface, {p: spread.ratio(p) for p in ps},
                            spread.hot_share, candidates, learning,
                            max(SHORT_BY, 2 * learning.noise), rate)


def busiest_bound(target: float, high_u: float, noise: float, hot: bool) -> float:
    """The utilization the busiest subtask is sized to, by three times the measured noise
    below `high_u`, never below the mean's target. With a hot key, below what triggers a
    step for it (`SATURATED`, or `high_u` when higher) instead: its subtask's load falls
    as h + (1 − h)/p, not 1/p, so the last tenth below `high_u` can cost several times
    the tasks."""
    trigger = max(high_u, SATURATED) if hot else high_u
    return max(target, trigger / (1.0 + 3.0 * noise))


@dataclass(frozen=True)
class _Skew:
    """The busiest subtask's load over the mean at p tasks: key-group rounding, and a hot
    key group (`policies.skew.hot_key_group_share`) that stays on one subtask however many
    tasks there are. Where a configuration ran, what was measured there counts too.

    Flink hashes keys into K key groups and gives each subtask a contiguous range: at p
    tasks the busiest gets ceil(K/p) of them.

    Where the busiest subtask's records were measured, they alone say how the keys
    spread; its busy time over its records (`cost`) is carried to every parallelism
    as measured. A saturated task on asynchronous state (ForSt) counts its wait on a
    full in-flight buffer as busy time, its idler peers only their task thread's share:
    taken for keys, that excess would make the hot key look larger, and the tasks that
    relieve it look fewer, than they are.
    """

    observed: float  # busiest / mean busy time now
    parallelism: int
    key_groups: int  # 0: input not hashed
    measured: Mapping[int, float]  # parallelism -> busiest / mean seen there
    records: float | None = None  # busiest / mean records in at the anchor; None: not measured

    def rounding(self, p: int) -> float:
        return skew.rounding(p, self.key_groups)  # 1.0 unhashed (K = 0)

    @property
    def keys(self) -> float:
        """Busiest / mean load from the keys alone: the records where measured."""
        return self.observed if self.records is None else max(1.0, self.records)

    @property
    def cost(self) -> float:
        """The busiest subtask's busy time per record over the mean's, where its records
        were measured and it stands out by more than SKEW_TOLERANCE (else 1; never below
        1: a cheaper hot key is not counted on). A slow TaskManager keeps it too."""
        if self.records is None or self.observed <= self.keys * SKEW_TOLERANCE:
            return 1.0
        return self.observed / self.keys

    @property
    def hot_share(self) -> float:
        if self.keys <= self.rounding(self.parallelism) * SKEW_TOLERANCE:
            return 0.0
        share = min(1.0, self.keys / self.parallelism)
        if not self.key_groups:
            return share
        return skew.hot_key_group_share(share, self.parallelism, self.key_groups)

    def useful(self) -> int | None:
        """With a hot key group, the most tasks that still relieve the busiest subtask
        (`skew.useful_parallelism`); None: no hot key, or the input is not hashed."""
        h = self.hot_share
        if not self.key_groups or h <= 0:
            return None
        return skew.useful_parallelism(h, self.parallelism, self.key_groups)

    def ratio(self, p: int) -> float:
        h = self.hot_share
        if not self.key_groups and (h > 0 or self.cost > 1.0):
            modelled = min(float(p), self.observed)  # not hashed: the imbalance stays
        else:
            keys = max(self.rounding(p), p * skew.busiest_share(h, p, self.key_groups))
            modelled = min(float(p), keys * self.cost)
        return max(modelled, self.measured.get(p, 1.0))


def _levels(v: Vertex, surface: Surface, params: ScalingParams) -> list[int | None]:
    if surface.curve is None:
        return [v.memory_level] if v.memory_level is None else [None]
    current = v.memory_level if v.memory_level is not None else 0
    if not params.memory.enabled:
        return [current]
    return list(range(params.memory.max_level))


def _parallelisms(v: Vertex, params: ScalingParams, cap: int | None = None,
                  floor: int | None = None) -> list[int]:
    """Candidate parallelisms within the bounds and scale factors; with `cap` (a hot key's
    useful parallelism) none above it but the current one; with `floor`, none below it."""
    every = _bounded_parallelisms(v, params)
    return [p for p in every if (cap is None or p <= cap or p == v.parallelism)
            and (floor is None or p >= floor)]


def _bounded_parallelisms(v: Vertex, params: ScalingParams) -> list[int]:
    cpu = params.cpu
    low, upper = cpu.parallelism_range(v.id, v.operator_uids, v.max_parallelism)
    upper = min(upper, math.ceil(v.parallelism * (1 + cpu.max_scale_up_factor)))
    lower = max(min(low, upper), math.ceil(v.parallelism * (1 - cpu.max_scale_down_factor)))
    lower = min(lower, v.parallelism, upper) if lower > upper else lower
    dense = list(range(lower, min(upper, lower + DENSE_CANDIDATES) + 1))
    ladder = []
    p = float(dense[-1]) if dense else float(lower)
    while p < upper:
        p *= 1.05
        ladder.append(min(upper, math.ceil(p)))
    return sorted(set(dense + ladder + [v.parallelism]))


def _cheapest(v: Vertex, surface: Surface, spread: _Skew, need: float, need_hottest: float,
              learning: VertexLearning, params: ScalingParams, above: VertexConfig | None = None,
              cap: int | None = None, in_place_relief: float = 0.0,
              floors: Mapping[int | None, int] | None = None
              ) -> tuple[VertexConfig, bool, tuple[VertexConfig, ...]]:
    """The cheapest configuration that reaches `need` and whose busiest subtask reaches
    `need_hottest` (both less `in_place_relief`, the restart's catch-up, at the current
    parallelism, where a step that changes memory only restarts nothing), and at each
    memory level the fewest tasks that do (the options the pod price chooses among).
    Failing any, the busiest subtask cannot keep up (a hot key, or the bounds): the
    cheapest configuration that reaches `need` and `PLATEAU` of the most the busiest
    subtask can reach, flagged skew-limited when a hot key is why; without a hot key,
    that most itself where it costs about what it buys (the bounds stop the step, not a
    plateau of the surface). `floors`: the fewest tasks an option may have at a level."""
    current = VertexConfig(v.parallelism, v.memory_level)
    best: tuple[float, int, VertexConfig, float] | None = None
    sustaining: list[tuple[float, int, VertexConfig]] = []
    short: list[tuple[float, bool, float, VertexConfig, float]] = []
    for level in _levels(v, surface, params):
        for p in _parallelisms(v, params, cap, None if floors is None else floors[level]):
            config = VertexConfig(p, level)
            if learning.excluded(p, level, need) is not None:
                continue
            if above is not None and p <= above.parallelism and (level or 0) <= (
                    above.memory_level or 0):
                continue  # in a deficit, what runs now (or less) is measured not to do
            tpr = surface.capacity(p, level)
            if not tpr > 0:  # NaN or nothing: a degenerate fit says nothing here
                continue
            if (level or 0) > (current.memory_level or 0) and tpr < surface.capacity(
                    p, current.memory_level) * (1 + max(SHORT_BY, 2 * learning.noise)):
                continue  # more memory for a gain no measurement could confirm: never
            hottest = tpr / spread.ratio(p)
            cost = _cost(v, config, params)
            relief = in_place_relief if p == current.parallelism else 0.0
            if tpr >= need - relief and hottest >= need_hottest - relief:
                key = (cost, 0 if config == current else 1, config, tpr)
                sustaining.append(key[:3])
                if best is None or key[:2] < best[:2]:
                    best = key
                break  # more tasks at this level only cost more
            short.append((hottest, tpr >= need - relief, cost, config, tpr))
    if best is not None:
        return best[2], False, tuple(c for *_, c in sorted(sustaining, key=lambda x: x[:2]))
    if not short:  # every candidate fell short before: keep what runs
        return current, False, (current,)
    top = max(h for h, *_ in short)
    plateau = [x for x in short if x[0] >= PLATEAU * top]
    enough = [x for x in plateau if x[1]] or plateau
    chosen = min(enough, key=lambda x: (x[2], x[3] != current))
    config = chosen[3]
    if spread.hot_share <= 0:
        # No hot key: if the most the busiest subtask reaches costs about what it buys
        # (capacity per price within PLATEAU of the cheaper choice's), the bounds (a
        # scale factor, maxParallelism) stop the step, not a plateau of the surface: it
        # goes as far as they let it, or it lands short twice (gen-020: 1 → 9 of a
        # needed 20 tasks where 11 were allowed, then a restart at utilizationMax). At
        # one task no hot key shows yet, so a first step goes as far as this allows.
        reach = [x for x in short if x[1] == chosen[1]]  # what the mean reaches, kept
        best_hot = max(x[0] for x in reach)
        peak = min((x for x in reach if x[0] >= best_hot * (1 - 1e-9)), key=lambda x: x[2])
        if peak[0] / peak[2] >= PLATEAU * chosen[0] / chosen[2]:
            config = peak[3]
    return config, spread.hot_share > 0, (config,)


def _by_pods(graph: JobGraph, chosen: dict[str, VertexConfig],
             options: Mapping[str, tuple[VertexConfig, ...]],
             params: ScalingParams, task_cpu: TaskCpu | None = None
             ) -> tuple[dict[str, VertexConfig], float | None]:
    """Among the moving vertices' options, the mix whose pods cost least (ties keep the
    per-task choice), and its pod price: memory that saves no pod, or tasks a neighbour's
    slot holds for free, are priced as the cluster bills them. Without a pod price, or
    nothing to choose, `chosen` and None (not priced)."""
    if params.pods is None or not any(len(o) > 1 for o in options.values()):
        return chosen, None
    config, price = params.pods.cheapest(graph, options, MappingProxyType(chosen), task_cpu)
    return dict(config), price


def _job_cost(graph: JobGraph, config: Mapping[str, VertexConfig],
              params: ScalingParams, task_cpu: TaskCpu | None = None) -> float:
    """Price per hour of a whole configuration: its pods, or (without a pod price) its tasks."""
    if params.pods is not None:
        return params.pods.price(graph, MappingProxyType(dict(config)), task_cpu)
    return sum(_cost(graph.vertex(vid), c, params) for vid, c in config.items())


def _saves_beyond_error(cost_now: float, cost_new: float) -> bool:
    """Whether a give-back saves more than the error a step is allowed before it counts
    as short (SHORT_BY of the capacity predicted, so as many more tasks): a saving
    within it may be gone once the configuration is measured, and a restart for it is
    churn. Per hour, against the configuration's own bill."""
    return cost_now - cost_new > SHORT_BY * cost_new


@dataclass(frozen=True, eq=False)  # hashed by identity: it holds the plans
class _TaskCpu:
    """One task's CPU at a configuration of its vertex (`slot_cpu`): its busyness at the
    target divided by utilizationMax, plus the catch-up (`_planned_busyness`). Tasks are
    sized for the utilization target (0.5: twice what the target needs); their CPU with
    a quarter over what the target needs (at 0.8), so the pods carry the target at most
    80 % busy, and a rise of more than a quarter throttles them before the tasks reach
    utilizationMax (1.6 times the target): a throttled window is then a deficit, sized
    as usual, with more CPU (`_cpu_use`). The pods are priced with it, so memory that
    makes a task faster comes back as CPU. After a window that may have waited for CPU
    (`throttled`) the plan fell short: each vertex gets at least `CPU_GROWTH` times the
    CPU its tasks had, or what the window showed they wanted (`growth`), spread over its
    new tasks (`grown` says where that growth, not the vertex's plan, decided). A vertex
    without operator uids gets no entry in Flink: the footprint's."""

    plans: Mapping[str, _Plan]
    footprint: float
    throttled: bool = False
    growth: float = 1.0
    # Priced for every option of every mix the search screens: each surface read once.
    _memo: dict[tuple[str, VertexConfig], tuple[float, bool]] = field(
        default_factory=dict, compare=False, repr=False)

    def __call__(self, vertex_id: str, config: VertexConfig) -> float:
        return self._planned(vertex_id, config)[0]

    def grown(self, vertex_id: str, config: VertexConfig) -> bool:
        return self._planned(vertex_id, config)[1]

    def _planned(self, vertex_id: str, config: VertexConfig) -> tuple[float, bool]:
        key = (vertex_id, config)
        if key not in self._memo:
            self._memo[key] = self._plan(vertex_id, config)
        return self._memo[key]

    def _plan(self, vertex_id: str, config: VertexConfig) -> tuple[float, bool]:
        p = self.plans.get(vertex_id)
        if p is None or not p.vertex.operator_uids:
            return self.footprint, False  # no uid, no entry: Flink's default slot
        planned = slot_cpu(_planned_busyness(p, config), self.footprint)
        had = p.learning.task_cpu
        if self.throttled and had is not None:
            wanted = had * p.current.parallelism * max(CPU_GROWTH, self.growth)
            grown = slot_cpu(wanted / config.parallelism - 1e-9, self.footprint)
            if grown > planned:
                return grown, True
        return planned, False


def _planned_busyness(p: _Plan, config: VertexConfig) -> float:
    """The mean busyness of the vertex's tasks at `config` under the load the pods are
    sized for (`need_cpu`): their CPU summed is what a TaskManager pools for its slots, so
    a hot subtask's share above the mean takes what its neighbours leave. Without a
    surface, what a near-idle window's busy time shows (`_idle_busyness`). Asynchronous
    state, whose busy time leaves out the CPU of ForSt's I/O threads (docs/flink-2.md):
    the CPU a record took as the TaskManagers' JVMs measured it (`_async_cpu`), else inf
    (not known: the footprint's core)."""
    if p.metrics.asynchronous_state:
        if p.cpu_per_record is None or not p.need_cpu > 0:
            return math.inf  # not measured, or not planned (excluded, or still warming)
        return p.cpu_per_record * p.need_cpu / config.parallelism
    if p.surface is None:
        return _idle_busyness(p, config)
    tpr = p.surface.capacity(config.parallelism, config.memory_level)
    if not (tpr > 0 and math.isfinite(tpr)):
        return math.inf
    return p.need_cpu / tpr


def _idle_busyness(p: _Plan, config: VertexConfig) -> float:
    """A vertex too idle for a capacity point (a source, mostly): the busy time its tasks
    show now, scaled to the load the pods are sized for and spread over `config`'s
    tasks. Its footprint's core would cost more than all its neighbours together. inf
    (the footprint's) when the busy time says nothing of what a record costs (0, or not a
    number) or once it fell short (`busy_cpu_short`)."""
    m, tpr = p.metrics, p.metrics.true_processing_rate
    if p.learning.busy_cpu_short or not (p.idle_cpu and p.need_cpu > 0
                                         and 0.0 < m.busyness < MIN_BUSYNESS
                                         and 0.0 < tpr < math.inf):
        return math.inf  # a busy time of 0 says nothing of the CPU a record takes
    return p.need_cpu / tpr * p.current.parallelism / config.parallelism


def _busy_time_silent(p: _Plan) -> bool:
    """Busy time does not say why the job falls behind here: no subtask near saturation,
    and the tasks busy for less than the CPU their slots ask for (a task busier than that
    may be waiting for CPU its TaskManager's pool could not lend it)."""
    m, had = p.metrics, p.learning.task_cpu
    return (m.busy_ms_per_s_max / 1000.0 < SATURATED
            and m.busyness < (had if had is not None else math.inf))


def _busy_cpu_short(p: _Plan, footprint: float, silent: bool) -> _Plan:
    """The job falls behind and no vertex is busy enough to say why (`silent`, two windows
    running: one alone may straddle a rise of the load): a vertex whose slots ask for
    less than the footprint's core on the strength of a near-idle busy time may be what
    is short, for work outside its task thread that busy time never shows (a source's
    split fetcher, a sink's client threads). It gets the footprint's core back, for good:
    the same windows would say the same again."""
    learning, had = p.learning, p.learning.task_cpu
    if not silent:
        return p if not learning.behind_unexplained else replace(
            p, learning=learning.model_copy(update={"behind_unexplained": False}))
    if (not p.idle_cpu or had is None or had >= footprint or learning.busy_cpu_short
            or not math.isfinite(_idle_busyness(p, p.current))):
        return p
    update = ({"behind_unexplained": True} if not learning.behind_unexplained
              else {"behind_unexplained": False, "busy_cpu_short": True})
    return replace(p, learning=learning.model_copy(update=update))


def _cost(v: Vertex, config: VertexConfig, params: ScalingParams) -> float:
    """Price per hour of the vertex's tasks: CPU cores, and heap, network and managed memory."""
    return price_per_hour(totals({v.id: config}, params), params)


def _waited(p: _Plan, params: ScalingParams, now: float) -> bool:
    since = p.learning.surplus_since
    return since is not None and now - since >= params.cpu.scale_down_delay


def _rides_along(p: _Plan, params: ScalingParams, now: float) -> bool:
    """In a restart that happens anyway, every vertex takes its plan: a scale-down sized
    for the highest need seen so far costs no extra restart (DS2 lets it ride along too)."""
    return p.best != p.current


def _blind_scale_in(p: _Plan, after: VertexConfig) -> bool:
    """A scale-in of a skewed vertex to a parallelism it never ran at. Which heavy key
    groups share the busiest subtask's contiguous range there is not known (a Zipf key
    space puts several on one subtask at some parallelisms, not at others), so the step
    is likely to be undone, and is priced with the restart that undoes it (SASO)."""
    return (after.parallelism < p.current.parallelism and p.skew.key_groups > 0
            and p.skew.hot_share > 0 and after.parallelism not in p.skew.measured)


def _waited_peak(learning: VertexLearning) -> float | None:
    """The need a scale-down is sized for: the highest of its wait, but for a first window
    that straddled the drop (STRADDLED) when later ones have been seen."""
    peak, later = learning.surplus_peak_need, learning.surplus_later_need
    if peak is not None and later is not None and peak > later * (
            1 + max(STRADDLED, 3 * learning.noise)):
        return later
    return peak


def _asks_for_less(p: _Plan, planned: float) -> bool:
    """Its tasks are planned to use less CPU (`planned`, cores a task) than its slots ask for."""
    had = p.learning.task_cpu
    return had is not None and planned < had - 1e-9


def _slots_surplus(p: _Plan, planned: float) -> _Plan:
    """A vertex whose configuration is the one to keep, but whose slots' CPU was grown in
    a window that waited for CPU (`VertexLearning.task_cpu_grown`) above what its tasks
    are now planned to use at the need the scale-down wait keeps: a surplus of its own,
    waiting and paying back as any give-back. Throttling slows every task on the pods, so
    the growth also lands on vertices that were never short (gen-005: a cache cliff
    crossed by one vertex left every slot at twice its plan); without this only another
    vertex's give-back would ever re-plan them. A plan made from unthrottled windows is
    not given back on its own: its margin is the headroom a rising load needs."""
    if (p.deficit or p.surplus or p.stop is not None or p.skew_limited
            or not p.learning.task_cpu_grown or not _asks_for_less(p, planned)):
        return p  # a skewed vertex's busiest subtask may use what its mean does not
    # Its configuration stays: the plan's own (`best`) was neither a deficit nor cheaper.
    return replace(p, surplus=True, best=p.current, options=(p.current,),
                   slots_planned=planned)


def _surplus_bookkeeping(p: _Plan, now: float, restart_wait: bool = False) -> VertexLearning:
    """Start, extend or end the scale-down wait; keep the highest need seen during it.

    A wait that ran its full delay without a step (the saving did not pay the restart
    back) starts over from now: the peak is the need over the last delay, not since the
    surplus began, or a load that dropped further after a transient would never count.
    """
    learning = p.learning
    if not p.surplus or restart_wait or learning.surplus_since is None:
        return learning.model_copy(update={
            "surplus_since": now if p.surplus else None,
            "surplus_peak_need": p.rate if p.surplus else None, "surplus_later_need": None})
    return learning.model_copy(update={
        "surplus_peak_need": max(learning.surplus_peak_need or 0.0, p.rate),
        "surplus_later_need": max(learning.surplus_later_need or 0.0, p.rate)})


def _memory_led(p: _Plan, after: VertexConfig, predicted: float) -> bool:
    """Whether memory was to bring most of the step's predicted gain: more than its tasks
    at the running memory level would."""
    if (after.memory_level or 0) <= (p.current.memory_level or 0):
        return False
    tasks_alone = _predict(p, VertexConfig(after.parallelism, p.current.memory_level))
    return predicted - tasks_alone > tasks_alone - _predict(p, p.current)


def _predict(p: _Plan, config: VertexConfig) -> float:
    if p.surface is None:
        return math.inf
    return p.surface.capacity(config.parallelism, config.memory_level)


def _vertex_decision(p: _Plan, after: VertexConfig, target: float,
                     params: ScalingParams) -> VertexDecision:
    memory = params.memory
    predicted = _predict(p, after)
    if p.surface is None:
        warming = p.learning.warming and not params.cpu.excludes(
            p.vertex.id, p.vertex.operator_uids)
        branch = Branch.CACHE_WARMING if warming else Branch.CAPACITY_UNKNOWN
        why = p.note
    elif after == p.current:
        if p.slots_planned is not None:
            branch, why = Branch.SURPLUS_WAITING, (
                f"its slots ask for {p.learning.task_cpu or 0:.1f} cores a task, grown after "
                f"throttling; its tasks are planned to use {p.slots_planned:.1f}: new slots "
                f"once that holds for cpu.scaleDownDelay and pays its restart back")
        elif p.surplus:
            branch = Branch.SURPLUS_WAITING
            why = (f"{explain.level(memory, p.best.memory_level)} × {p.best.parallelism} "
                   f"would suffice: waiting")
        else:
            branch, why = Branch.STEADY, "the current configuration is the one to keep"
    elif p.deficit and predicted < target:
        most = _bounded_parallelisms(p.vertex, params)[-1]
        branch, why = Branch.DEFICIT, (
            f"no configuration within the bounds (at most {most} tasks: spec.cpu "
            f"maxScaleUpFactor and maxParallelism) is predicted to sustain the target: the "
            f"cheapest near the most they reach, sized again once it runs")
    elif p.deficit:
        branch, why = Branch.DEFICIT, "cheapest configuration predicted to sustain the target"
    elif p.surplus:
        branch, why = Branch.SURPLUS, "a cheaper configuration suffices"
    else:
        branch, why = Branch.RIDE_ALONG, "rides along with the restart"
    if p.skew_limited:
        branch, why = Branch.SKEW_LIMITED, p.note
    # The change itself (p, level) is in the record's fields and said by the Event; the
    # reason says why, and what the numbers predict at the target rate (the capacity the
    # planner sized for also covers catch-up and the utilization target, so the bare
    # "capacity for a need" read as falling short when it was not).
    text = why
    if p.surface is not None and math.isfinite(predicted) and predicted > 0:
        load = target / predicted
        text += (f"; at the target {explain.rate(target)} it is predicted to run at "
                 f"{load:.0%} of its {explain.rate(predicted)}" if load <= 1 else
                 f"; predicted to fall short: {explain.rate(predicted)} for the target "
                 f"{explain.rate(target)}")
        text += f" (utilization target {params.cpu.utilization_target:.0%})"
        if math.isfinite(p.hottest_now):
            text += (f"; as it runs now, the target would load its busiest subtask to "
                     f"{p.hottest_now:.0%}")
    if p.learning.fell_short:
        text += f"; {len(p.learning.fell_short)} configuration(s) ran short before"
    decision = explain.vertex_decision(
        p.vertex, p.metrics, after, branch, text,
        scaled_up=(after.memory_level or 0) > (p.current.memory_level or 0)
        and after.memory_level is not None,
        target_rate=target,
        utilization=p.hottest_now if math.isfinite(p.hottest_now) else None,
    )
    return decision.model_copy(update={"predicted_capacity": explain.finite(predicted)})
