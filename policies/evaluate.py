"""One scaling step: the chosen policy (DS2, DS2 then Justin, or capacity), then the limits;
the decision and the state to keep."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from types import MappingProxyType

from policies import buffering, capacity, ds2, explain, justin, limits, skew, skew_stop
from policies.bill import TaskCpu
from policies.decision import (
    HISTORY_REASON_LIMIT,
    Action,
    Branch,
    Decision,
    Forecast,
    HistoryRecord,
    SkewFinding,
    Totals,
    VertexDecision,
    VertexHistory,
)
from policies.model import Configuration, JobGraph, Observation, VertexConfig, memory_only
from policies.params import (
    HISTORY_LIMIT,
    Evaluation,
    PolicyState,
    ScalingParams,
    contiguous,
    price_per_hour,
    restart_cost,
    totals,
)
from policies.spec import Policy


def evaluate(
    graph: JobGraph,
    observation: Observation,
    state: PolicyState,
    params: ScalingParams,
    now: float,
) -> Evaluation:
    """Decide the next configuration of `graph` from one observation window.

    Never scales on partial data: a vertex without metrics means no decision.
    """
    evaluation = _scaling(graph, observation, _after_gap(state, observation.window_s, now),
                          params, now)
    if (not params.sql_buffering_due or evaluation.decision.reconfigures
            or observation.missing(graph)):
        return evaluation
    limited = buffering.sql_vertices(
        f for f in evaluation.decision.skew if skew.blocks_scale_out(f))
    if not limited:
        return evaluation
    return _buffering_step(evaluation, limited, observation, params, now)


def _after_gap(state: PolicyState, window_s: float, now: float) -> PolicyState:
    """Scale-down waits that span a gap start over: more than two windows since the last
    evaluation (the controller or the metrics were down, or the job restarted), the
    load in between was never seen, so neither was that it stayed low. Without this a
    wait finishes on the first window after the gap (a step clears every wait anyway)."""
    if state.last_evaluated is None or contiguous(state.last_evaluated, now, window_s):
        return state
    learned = {vid: v.model_copy(update={"surplus_since": None, "surplus_peak_need": None,
                                         "surplus_later_need": None})
               if v.surplus_since is not None else v for vid, v in state.learned.items()}
    return replace(state, scale_down_wanted_since=MappingProxyType({}),
                   learned=MappingProxyType(learned))


def _buffering_step(evaluation: Evaluation, limited: Sequence[SkewFinding],
                    observation: Observation, params: ScalingParams, now: float
                    ) -> Evaluation:
    """No scaling step, yet a skew-limited SQL aggregation whose remedy (mini-batch and
    two-phase aggregation) the spec lets us write: a step of its own at the same
    configuration, since the settings only take effect at a restart."""
    decision = evaluation.decision
    names = ", ".join(f.vertex_name or f.vertex_id for f in limited)
    forecast = _forecast(decision.before, decision.after, params)
    step = decision.model_copy(update={
        "step": decision.step + 1, "reconfigures": True, "forecast": forecast,
        "reason": (f"{decision.reason}; skew-limited {names}: a restart at the same "
                   f"configuration writes mini-batch and two-phase aggregation "
                   f"(spec.skew.applySqlSettings); "
                   f"{explain.forecast(decision.before, decision.after, forecast)}")})
    return Evaluation(step, evaluation.configuration,
                      _record(evaluation.state, step, observation, now))


def _scaling(graph: JobGraph, observation: Observation, state: PolicyState,
             params: ScalingParams, now: float) -> Evaluation:
    """The scaling step of `evaluate` (DS2, Justin or capacity, then the limits)."""
    current = graph.configuration()
    before = totals(current, params)
    # Skew is reported for every evaluation and every policy; it changes no DS2/Justin step.
    skewed = skew.detect(graph, observation, params.cpu, state.skewed, state.skew_saturated)
    state = _skew_remembered(state, skewed)

    missing = observation.missing(graph)
    if missing:
        names = ", ".join(graph.vertex(vid).name or vid for vid in missing)
        reason = f"no metrics for {len(missing)} vertices ({names}): not scaling"
        decisions = tuple(
            explain.vertex_decision(
                v, observation.vertices.get(v.id), current[v.id], Branch.NO_METRICS,
                "no metrics in this window" if v.id in missing
                else "waiting for metrics of the other vertices",
            )
            for v in graph.vertices
        )
        return _unchanged(current, state, params, now, reason, decisions, skewed)

    forced = limits.bounded(graph, params)
    cpu_plan: TaskCpu | None = None
    cpu_step = False
    cpu_grown: frozenset[str] = frozenset()
    if forced is not None:
        # A bound the running configuration breaks (e.g. a lowered maxParallelism) is a
        # step of its own, whatever the policy would say about this window.
        config, notes = forced
        decisions = tuple(
            explain.vertex_decision(
                v, observation.vertices.get(v.id), config[v.id],
                Branch.OUT_OF_BOUNDS if v.id in notes else Branch.UNCHANGED,
                notes.get(v.id, "within the spec's bounds"))
            for v in graph.vertices
        )
        triggered_by = "outside the spec's bounds or limits: " + "; ".join(
            f"{graph.vertex(vid).name or vid} {note}" for vid, note in notes.items())
    elif params.policy == Policy.CAPACITY:
        planned = capacity.evaluate(graph, observation, state, params, now)
        state = replace(state, learned=planned.learned, cpu_short_since=planned.cpu_short_since)
        # A skew-stopped vertex is named (Skewed) with what it sustains and what would lift it.
        skewed = skew_stop.merge(skewed, planned.skew)
        state = _skew_remembered(state, skewed)
        if not planned.triggered:
            return _unchanged(current, state, params, now, planned.reason, planned.vertices,
                              skewed)
        config, decisions, triggered_by = planned.configuration, planned.vertices, planned.reason
        cpu_plan, cpu_step, cpu_grown = planned.task_cpu, planned.cpu_step, planned.cpu_grown
    else:
        proposal = ds2.propose(
            graph, observation, params.cpu,
            scale_down_wanted_since=state.scale_down_wanted_since, now=now,
            scaled_out=ds2.scale_outs(state.history),
        )
        state = replace(state, scale_down_wanted_since=proposal.scale_down_wanted_since)
        if not proposal.triggered:
            decisions = tuple(
                explain.vertex_decision(
                    v, observation.vertices[v.id], current[v.id], Branch.NOT_TRIGGERED,
                    vp.reason, target_rate=vp.target_rate, utilization=vp.utilization,
                )
                for v in graph.vertices
                for vp in (proposal.vertices[v.id],)
            )
            return _unchanged(current, state, params, now, proposal.reason, decisions, skewed)
        config, decisions = _ds2_or_justin(graph, observation, proposal, state, params)
        triggered_by = proposal.reason

    clip = limits.clip(graph, config, params)
    decisions = tuple(_clipped(d, clip.configuration[d.vertex_id], clip.notes) for d in decisions)
    config = clip.configuration

    changed = [d for d in decisions if d.action is not Action.NONE]
    reconfigures = bool(changed) or cpu_step
    reason = triggered_by + "; " + (
        ", ".join(f"{d.vertex_name or d.vertex_id} {d.action}" for d in changed)
        if changed else "new slots, the same configuration" if cpu_step
        else "no vertex changes"
    )
    if clip.clipped:
        reason += "; " + clip.reason
    forecast = (_forecast(before, totals(config, params), params,
                          memory_only=memory_only(current, config) and not cpu_step)
                if reconfigures else None)
    if forecast is not None:
        reason += "; " + explain.forecast(before, totals(config, params), forecast)
    step = state.step + 1 if reconfigures else state.step
    decision = Decision(
        time=now,
        step=step,
        reconfigures=reconfigures,
        reason=reason,
        vertices=decisions,
        before=before,
        after=totals(config, params),
        clipped=clip.clipped,
        clip_reason=clip.reason,
        skew=skewed,
        forecast=forecast,
    )
    if reconfigures:
        state = _record(state, decision, observation, now)
    state, task_cpu = _planned_cpu(current, config, state, cpu_plan, reconfigures, cpu_step,
                                   cpu_grown)
    return Evaluation(decision, MappingProxyType(dict(config)), state, task_cpu,
                      new_slots=reconfigures and cpu_step)


def _planned_cpu(current: Configuration, config: Configuration, state: PolicyState,
                 cpu_plan: TaskCpu | None, reconfigures: bool, cpu_step: bool = False,
                 grown: frozenset[str] = frozenset()
                 ) -> tuple[PolicyState, Mapping[str, float]]:
    """Each task's planned CPU for the placement (policies.bill.slot_cpu), kept in the
    vertices' learning: planned anew by a step that changes a parallelism (it restarts
    the job and asks for new slots anyway) or asks for new slots (`cpu_step`), kept by
    any other, so that a memory-only step asks for the slots the job runs with and can
    be resized in place (`grown`: the vertices whose plan is the growth after a window
    that waited for CPU, `capacity._TaskCpu.grown`). Empty when the policy plans none
    (DS2, Justin, per-task prices): the footprint's."""
    learned = dict(state.learned)
    if cpu_plan is None:
        if reconfigures and any(v.task_cpu is not None for v in learned.values()):
            # A step without a plan (a bound the spec sets, DS2 or Justin) asks for the
            # footprint's core: what was planned before no longer runs.
            state = replace(state, learned=MappingProxyType({
                vid: v.model_copy(update={"task_cpu": None, "task_cpu_grown": False})
                for vid, v in learned.items()}))
        return state, MappingProxyType({})
    if reconfigures and (cpu_step or any(config[vid].parallelism != c.parallelism
                                         for vid, c in current.items())):
        for vid, learning in learned.items():
            if vid in config:
                learned[vid] = learning.model_copy(
                    update={"task_cpu": cpu_plan(vid, config[vid]), "task_cpu_grown": vid in grown})
        state = replace(state, learned=MappingProxyType(learned))
    return state, MappingProxyType({vid: learning.task_cpu for vid, learning in learned.items()
                                    if vid in config and learning.task_cpu is not None})


def _ds2_or_justin(graph: JobGraph, observation: Observation, proposal: ds2.Proposal,
                   state: PolicyState, params: ScalingParams
                   ) -> tuple[Configuration, tuple[VertexDecision, ...]]:
    """DS2's proposal, through Algorithm 1 when the policy is Justin and memory scaling is on."""
    if params.policy == Policy.JUSTIN and params.memory.enabled:
        previous = state.history[-1] if state.history else None
        result = justin.apply(graph, observation, proposal, params.memory, previous)
        return result.configuration, result.vertices
    config = proposal.configuration(graph)
    why = ("DS2 only" if params.policy == Policy.DS2
           else "memory scaling disabled: DS2 only")
    decisions = tuple(
        explain.vertex_decision(
            v, observation.vertices[v.id], config[v.id], Branch.MEMORY_DISABLED,
            f"{why}. {vp.reason}", target_rate=vp.target_rate, utilization=vp.utilization,
        )
        for v in graph.vertices
        for vp in (proposal.vertices[v.id],)
    )
    return config, decisions


def _forecast(before: Totals, after: Totals, params: ScalingParams,
              memory_only: bool = False) -> Forecast:
    """What the step costs and saves at spec.cost's prices, and the downtime it costs (none
    for a memory-only step the deployment resizes in place)."""
    cost_after = price_per_hour(after, params)
    return Forecast(
        cost_before_per_hour=round(price_per_hour(before, params), 4),
        cost_after_per_hour=round(cost_after, 4),
        expected_downtime_s=params.step_downtime_s(memory_only),
        restart_cost=round(restart_cost(cost_after, params, memory_only), 4),
    )


def _clipped(d: VertexDecision, after: VertexConfig, notes: Mapping[str, str]) -> VertexDecision:
    """Mark a vertex the limits changed: branch CLIPPED, the original branch kept in the text."""
    if d.vertex_id not in notes:
        return d
    before = VertexConfig(d.parallelism_before, d.memory_level_before)
    return d.model_copy(update={
        "branch": Branch.CLIPPED,
        "reason": f"clipped by limits: {notes[d.vertex_id]} (was {d.branch}: {d.reason})",
        "action": explain.action(before, after),
        "parallelism_after": after.parallelism,
        "memory_level_after": after.memory_level,
        "scaled_up": d.scaled_up and after.memory_level != d.memory_level_before,
    })


def _record(
    state: PolicyState, decision: Decision, observation: Observation, now: float
) -> PolicyState:
    """Append what Justin's next step needs; a rescale restarts every scale-down wait (upstream)."""
    record = HistoryRecord(
        time=now,
        step=decision.step,
        # Cut in the middle (a long list of vertices), keeping the forecast it ends with.
        reason=explain.cut(decision.reason, HISTORY_REASON_LIMIT,
                           keep_end=HISTORY_REASON_LIMIT // 4),
        vertices=tuple(
            VertexHistory(
                vertex_id=d.vertex_id,
                parallelism=d.parallelism_after,
                memory_level=d.memory_level_after,
                scaled_up=d.scaled_up,
                cache_hit_rate=observation.vertices[d.vertex_id].cache_hit_rate,
                state_latency_ns=observation.vertices[d.vertex_id].state_latency_ns,
                parallelism_before=d.parallelism_before,
                target_rate=d.target_rate,
                utilization=d.utilization,
            )
            for d in decision.vertices
        ),
    )
    return PolicyState(
        step=decision.step,
        history=(*state.history, record)[-HISTORY_LIMIT:],
        scale_down_wanted_since=MappingProxyType({}),
        last_reconfiguration_time=now,
        skewed=state.skewed,
        skew_saturated=state.skew_saturated,
        learned=state.learned,
    )


def _skew_remembered(state: PolicyState, findings: Iterable[SkewFinding]) -> PolicyState:
    """The vertices named skewed, and those saturated, for the next window's hysteresis."""
    found = tuple(findings)
    return replace(state, skewed=frozenset(f.vertex_id for f in found),
                   skew_saturated=frozenset(f.vertex_id for f in found if f.saturated))


def _unchanged(
    current: Configuration,
    state: PolicyState,
    params: ScalingParams,
    now: float,
    reason: str,
    decisions: Sequence[VertexDecision],
    skewed: tuple[SkewFinding, ...] = (),
) -> Evaluation:
    t = totals(current, params)
    decision = Decision(
        time=now, step=state.step, reconfigures=False, reason=reason,
        vertices=tuple(decisions), before=t, after=t, skew=skewed,
    )
    return Evaluation(decision, current, state)
