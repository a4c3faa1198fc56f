"""Decide: spec.policy on the collected window, and the step as `status.target`.

`decide` runs the core (`policies.evaluate`) with the history from status and
records the decision in every mode. `commit` turns an Active step that the
deployment can take into the desired owned fields, `status.target`, and saves the
status (decision, history, placement, target, `Scaling=Reconfiguring`) before
anything is patched: from then on every Active pass applies the target where the
deployment differs, so a step is never decided twice and never forgotten.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from controller import telemetry
from controller.api import ConditionType, Mode, OperatorStatus, Realization
from controller.place import Placed
from controller.ports import Collected, OperatorDefaultsUnreadable
from controller.realize import (
    OwnedFields,
    as_target,
    cache_budget_bytes,
    current_fields,
    desired_fields,
    effective_resources,
    enactment_of,
    engine,
    fits_running_pods,
    keeps_task_managers,
    pods_now,
    priced_state_bytes,
    refusal,
    requested_pods,
    resizable,
    resized_caches,
    unhonoured_memory,
    with_enactment,
)
from controller.record import (
    Reason,
    Run,
    Stop,
    pods_change,
    policy_state,
    record_skew,
    trim,
    with_decision,
    with_operators,
    with_policy_state,
)
from controller.upstream import UPSTREAM_KEYS, upstream_refusal
from policies import Evaluation, buffering, evaluate, skew
from policies.decision import Decision
from policies.model import JobGraph, memory_only
from policies.params import pays_back
from policies.restart_cost import RestartFacts


def state_bytes(run: Run, collected: Collected) -> float | None:
    """The state a restart of this job is priced with (realize.priced_state_bytes)."""
    live = [m.state_bytes for m in collected.observation.vertices.values()
            if m.state_bytes is not None]
    return priced_state_bytes(run.deployment or {}, collected.checkpoint_bytes,
                              sum(live) if live else None)


def decide(run: Run, graph: JobGraph, collected: Collected) -> Evaluation:
    """The core's evaluation, recorded; a decision that changes nothing ends the pass."""
    started = time.perf_counter()
    # The facts a restart is priced from (unless spec.cost.restartDowntime says), priced by
    # the policy layer: how this deployment restarts on its state backend, its state, its
    # observed downtimes.
    deployment = run.deployment or {}
    state = state_bytes(run, collected)
    pods = pods_now(run)  # what the running pods request and cost
    if pods is not None and pods.cpu_cores <= 0:
        pods = None
    params = replace(run.params, restart=RestartFacts(
        enactment_of(deployment, [], state), state, run.status.observed_steps(),
        engine(deployment), can_resize(run, deployment)),
        sql_buffering_due=sql_buffering_due(run, deployment),
        pods_cpu=None if pods is None else pods.cpu_cores,
        pods_price=None if pods is None else pods.price)
    evaluation = evaluate(graph, collected.observation, policy_state(run.status), params,
                          run.now)
    decision = evaluation.decision
    telemetry.count(telemetry.EVALUATIONS, run.namespace, run.name,
                    "reconfigure" if decision.reconfigures else "unchanged")
    previous = run.status.last_decision
    run.status = with_operators(with_decision(run.status, decision),
                                operators(run, decision, graph))
    record_skew(run, previous, decision)
    run.condition(ConditionType.LIMIT_REACHED, decision.clipped,
                  Reason.CLIPPED if decision.clipped else Reason.WITHIN_LIMITS,
                  decision.clip_reason or "the decision is within spec.limits")
    if not decision.reconfigures:
        telemetry.DECIDE_SECONDS.observe(time.perf_counter() - started)
        run.status = with_policy_state(run.status, evaluation.state)
        run.condition(ConditionType.SCALING, False, Reason.STEADY, decision.reason)
        raise Stop("unchanged")
    run.decide_started = started
    return evaluation


def upstream_switches(run: Run) -> Mapping[str, str] | None:
    """The Flink operator's autoscaler switch as the job's JobManager runs it: its default
    configuration, which the spec does not show. Asked only before a step that nothing
    else refuses."""
    if run.job is None:
        return None
    return run.ports.flink(run.namespace, run.target).configuration(run.job.jid, UPSTREAM_KEYS)


def upstream_gate(run: Run, deployment: Mapping[str, Any]) -> str | None:
    """Why the Flink operator's autoscaler keeps the step from running, or None: read
    from the JobManager, the operator's default configuration (where the controller is
    told where it is) and the deployment (controller/upstream.py)."""
    try:
        defaults = None if run.ports.operator_defaults is None else run.ports.operator_defaults()
    except OperatorDefaultsUnreadable as e:
        return (f"the Flink operator's default configuration, which can switch its autoscaler "
                f"on, could not be read ({e}); the controller reads it where "
                "--flink-operator-config (the chart's flinkOperator.configMap) names it, with "
                "get on it (HTTP 403: not granted; 404: no such ConfigMap)")
    return upstream_refusal(deployment, upstream_switches(run), defaults)


def commit(run: Run, graph: JobGraph, collected: Collected, evaluation: Evaluation,
           placed: Placed) -> None:
    """The step as `status.target`, saved before any patch; or `Stop` with a refusal."""
    deployment = run.deployment or {}
    decision = evaluation.decision
    why = (refusal(deployment) or upstream_gate(run, deployment)
           or unrealizable(run, graph, decision))
    if why is not None:
        raise run.refuse(Reason.REFUSED, why)
    why = memory_not_honoured(run, deployment, graph, decision, collected)
    if why is not None:
        raise run.refuse(Reason.MEMORY_NOT_HONOURED, why)
    fields = desired(run, deployment, graph, evaluation, placed)
    placement = placed.status(run.spec.cost, pods_now(run))
    kept = resize_in_place(run, deployment, graph, evaluation, fields, collected)
    caches = None
    if kept is not None:
        fields, caches = kept
        # The running pods stay: the step requests what they request.
        placement = placement.model_copy(update={"pods": placement.pods_before})
    run.status = with_enactment(
        with_policy_state(run.status, evaluation.state), decision.step, deployment, fields,
        state_bytes(run, collected), run.spec.cost.restart_downtime, caches,
    ).model_copy(update={"placement": placement, "target": as_target(decision.step, fields)})
    run.condition(ConditionType.SCALING, True, Reason.RECONFIGURING,
                  f"step {decision.step}: applying to FlinkDeployment {run.target} "
                  f"{run.status.enactments[-1].describe()}; {pods_change(run.status)}")
    run.save()
    run.decision = decision


def desired(run: Run, deployment: Mapping[str, Any], graph: JobGraph,
            evaluation: Evaluation, placed: Placed) -> OwnedFields:
    """The owned fields that realize the evaluated configuration on the placement."""
    adaptive = run.spec.task_manager.realization == Realization.ADAPTIVE
    cpu, memory_mib = placed.shape.cpu, round(placed.shape.memory)
    replicas: int | None = placed.replicas
    current = current_fields(deployment)
    if adaptive and keeps_task_managers(deployment, current, cpu, memory_mib):
        # Natively, Flink's adaptive scheduler asks for TaskManagers itself, and the
        # operator upgrades (restarts) on a replicas change: leave it as it is, so a
        # parallelism-only step stays in place.
        replicas = current.replicas
    return _fields(run, graph, evaluation, current, cpu, memory_mib, replicas,
                   None if adaptive else placed.groups, placed.flink_options,
                   per_operator=not adaptive, slot_cpu=None if adaptive else placed.slot_cpu)


def _fields(run: Run, graph: JobGraph, evaluation: Evaluation, current: OwnedFields,
            cpu: float, memory_mib: int, replicas: int | None,
            groups: Mapping[str, str] | None, flink_options: Mapping[str, str] | None,
            per_operator: bool, slot_cpu: Mapping[str, float] | None = None) -> OwnedFields:
    task = run.params.footprint
    fields = desired_fields(
        graph, evaluation.configuration, cpu_per_task=task.cpu_cores,
        heap_per_task_mib=task.heap_mib, base_managed_mib=run.spec.memory.base_managed_memory,
        tm_cpu=cpu, tm_memory_mib=memory_mib, replicas=replicas, per_operator=per_operator,
        groups=groups, flink_options=flink_options, slot_cpu=slot_cpu)
    return replace(fields, sql_settings=sql_settings(run, current, evaluation.decision))


def resize_in_place(run: Run, deployment: Mapping[str, Any], graph: JobGraph,
                    evaluation: Evaluation, fields: OwnedFields, collected: Collected
                    ) -> tuple[OwnedFields, dict[str, int]] | None:
    """A memory-only step that flink-plugin's agents can enact without a restart: its
    fields on the running TaskManagers (their shape, replicas, fitted fractions and slot
    sharing groups) and the caches to set; None when it restarts. Only when the policy
    asks for no new slots (`Evaluation.new_slots`), the slots fit those TaskManagers,
    the placement's pods do not save enough to pay for a restart
    (spec.cost.paybackPeriod), and the block-cache metric, which verifies a resize, is
    reported for every vertex it resizes."""
    current = current_fields(deployment)
    if (not can_resize(run, deployment) or evaluation.new_slots
            or not memory_only(graph.configuration(), evaluation.configuration)
            or restart_pays(fields, current, run)
            or current.tm_cpu is None or current.tm_memory_mib is None):
        return None
    resources = current.operator_resources or {}
    groups: dict[str, str] = {}  # the running slot sharing groups, vertex id -> group
    slot_cpu: dict[str, float] = {}  # ... and each running slot's CPU
    for v in graph.vertices:
        entry = next((resources[u] for u in v.operator_uids if u in resources), None)
        if entry is not None:
            slot_cpu[v.id] = entry.cpu_cores
            if entry.slot_sharing_group is not None:
                groups[v.id] = entry.slot_sharing_group
    kept = _fields(run, graph, evaluation, current, current.tm_cpu, current.tm_memory_mib,
                   current.replicas, groups, current.flink_options or None, per_operator=True,
                   slot_cpu=slot_cpu)
    if cache_budget_bytes(deployment) is None or not fits_running_pods(deployment, kept, graph):
        return None
    caches = resized_caches(deployment, kept, graph,
                            effective_resources(run.status, deployment))
    names = {v.name: v.id for v in graph.vertices}
    if caches is None or any(names[name] not in collected.cache_capacity_bytes
                             for name in caches):
        return None
    return kept, caches


def can_resize(run: Run, deployment: Mapping[str, Any]) -> bool:
    """Whether this deployment resizes managed memory in place at all: flink-plugin's
    resizable backend with spec.resize, and fine-grained realization (adaptive never
    does). The policy prices memory steps by it; `resize_in_place` enacts them."""
    return (resizable(deployment, run.spec.resize)
            and run.spec.task_manager.realization != Realization.ADAPTIVE)


def restart_pays(fields: OwnedFields, current: OwnedFields, run: Run) -> bool:
    """Whether the TaskManager pods of `fields` save enough over the running ones to pay
    for a restart within spec.cost.paybackPeriod (the rule a cheaper configuration meets
    in the policy, `params.pays_back`)."""
    new, now = requested_pods(fields, run.spec.cost), requested_pods(current, run.spec.cost)
    return new is not None and now is not None and pays_back(now.price, new.price, run.params)


def sql_buffering_due(run: Run, deployment: Mapping[str, Any]) -> bool:
    """The SQL settings may be written (Active mode: the only one that commits) and the
    deployment does not hold them: the core then makes a skew-limited SQL aggregation a
    step of its own, not only a rider on the next scaling step."""
    wanted = wanted_sql_settings(run)
    return (wanted is not None and run.spec.mode == Mode.ACTIVE
            and bool(buffering.missing(wanted, current_fields(deployment).sql_settings or {})))


def wanted_sql_settings(run: Run) -> dict[str, str] | None:
    """Mini-batch and two-phase aggregation as spec.skew sets them; None without
    spec.skew.applySqlSettings."""
    skew_spec = run.spec.skew
    if not skew_spec.apply_sql_settings:
        return None
    return buffering.sql_settings(skew_spec.mini_batch_latency, skew_spec.mini_batch_size)


def sql_settings(run: Run, current: OwnedFields, decision: Decision) -> dict[str, str] | None:
    """The SQL settings a step writes: for a skew-limited SQL aggregation, only with
    spec.skew.applySqlSettings. Once written they stay in every later step (server-side
    apply would drop fields we stop sending)."""
    wanted = wanted_sql_settings(run)
    if wanted is None:
        return None
    limited = buffering.sql_vertices(f for f in decision.skew if skew.blocks_scale_out(f))
    held = not buffering.missing(wanted, current.sql_settings or {})
    if not limited and not held:
        return None
    if limited and not held:
        run.event("Normal", Reason.SQL_BUFFERING, trim(
            f"step {decision.step} writes {', '.join(f'{k}: {v}' for k, v in wanted.items())} "
            f"for skew-limited {', '.join(f.vertex_name or f.vertex_id for f in limited)} "
            f"(spec.skew.applySqlSettings); they take effect at the restart"))
    return wanted


def unrealizable(run: Run, graph: JobGraph, decision: Decision) -> str | None:
    """A memory change for a vertex whose operator uids are unknown cannot be written."""
    if run.spec.task_manager.realization != Realization.FINE_GRAINED:
        return None
    blind = [v.vertex_name or v.vertex_id for v in decision.vertices
             if v.memory_level_after != v.memory_level_before
             and not graph.vertex(v.vertex_id).operator_uids]
    if blind:
        return (f"no operator uid is known for {', '.join(blind)}: their managed memory "
                f"cannot be set (flink-plugin publishes uids in the job config)")
    return None


def memory_not_honoured(run: Run, deployment: Mapping[str, Any], graph: JobGraph,
                        decision: Decision, collected: Collected) -> str | None:
    """A memory change is pointless (and costs a restart) while Flink ignores the
    per-operator memory already written; scale-outs alone do not depend on it."""
    if run.spec.task_manager.realization != Realization.FINE_GRAINED or not any(
        v.memory_level_after != v.memory_level_before for v in decision.vertices
    ):
        return None
    found = unhonoured_memory(deployment, graph, collected.cache_capacity_bytes,
                              resources=effective_resources(run.status, deployment))
    if not found:
        return None
    return (f"Flink does not run the managed memory written for {'; '.join(found)}. "
            f"Does the job call HybridResources.apply(env) before execute() "
            f"(docs/flink-plugin.md)? Steps that change memory are held back until it does")


def operators(run: Run, decision: Decision, graph: JobGraph) -> list[OperatorStatus]:
    memory = run.spec.memory
    return [
        OperatorStatus(
            vertex_id=v.vertex_id, name=v.vertex_name or graph.vertex(v.vertex_id).name,
            parallelism=v.parallelism_after, memory_level=v.memory_level_after,
            managed_mib=memory.managed_mib(v.memory_level_after), busyness=v.busyness,
            true_processing_rate=v.true_processing_rate, cache_hit_rate=v.cache_hit_rate,
            state_latency_ns=v.state_latency_ns,
        )
        for v in decision.vertices
    ]
