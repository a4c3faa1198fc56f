"""One pass of the loop for one policy: collect → decide → place → realize → record.

Everything outside the process comes through small interfaces (`Deployments`,
`StatusStore`, `Events`, `JobReader`, a metrics source and a clock), as in the
Flink operator's flink-autoscaler module, so the decision logic here (when to
evaluate, when to refuse, Recommend vs Active, resuming after a crash) is tested
with hand-written fakes, and the real adapters are tested against the real things.

Crash safety. A reconfiguration is committed to the policy's status (decision,
history, placement, condition Scaling=Reconfiguring) *before* the FlinkDeployment
is patched, and marked applied (Scaling=Stabilizing) after. A controller killed
in between finds Reconfiguring on restart and re-applies the recorded step, which
is idempotent because the owned fields are compared before they are written. It
never decides the step again, and never loses it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from controller import telemetry
from controller.adapters.flink_rest import FlinkRestError, JobSummary
from controller.adapters.prometheus import Collected, MetricsError, MetricsUnavailable
from controller.api import (
    ConditionType,
    HybridScalingPolicy,
    Mode,
    OperatorStatus,
    Realization,
    Status,
)
from controller.place import Placed, place
from controller.realize import (
    OwnedFields,
    apply_body,
    current_fields,
    desired_fields,
    in_place,
    keeps_task_managers,
    memory_levels,
    refusal,
    unhonoured_memory,
)
from policies import ScalingParams, evaluate
from policies.decision import Action, Decision
from policies.model import JobGraph, VertexConfig

log = logging.getLogger(__name__)

# Event reasons, one per kind of vertex change (kubectl describe reads them as a log).
EVENT_REASONS = {
    Action.SCALE_OUT: "ScaledOut",
    Action.SCALE_IN: "ScaledIn",
    Action.SCALE_UP: "ScaledUp",
    Action.MEMORY_ROLLBACK: "MemoryRolledBack",
    Action.STRIP_MEMORY: "MemoryStripped",
}
# Scaling condition reasons that carry meaning across restarts.
RECONFIGURING = "Reconfiguring"  # committed to status, maybe not yet on the deployment
STABILIZING = "Stabilizing"


class Deployments(Protocol):
    def get(self, namespace: str, name: str) -> Mapping[str, Any] | None: ...

    def apply(self, namespace: str, name: str, body: Mapping[str, Any]) -> str:
        """Server-side apply of `body`; returns a note for humans (e.g. fields taken over)."""
        ...


class StatusStore(Protocol):
    def save(self, status: Status) -> None: ...


class Events(Protocol):
    def emit(self, type_: str, reason: str, message: str) -> None: ...


class Metrics(Protocol):
    def observe(self, graph: JobGraph, job_id: str, now: float, window_s: float,
                resolution_s: float) -> Collected | MetricsUnavailable: ...

    def operator_ids(self, job_id: str, now: float) -> Mapping[str, Iterable[str]]: ...


class JobReader(Protocol):
    def job(self) -> JobSummary | None: ...

    def job_graph(
        self, jid: str, uid_candidates: Iterable[str] = (),
        operator_ids: Mapping[str, Iterable[str]] | None = None,
    ) -> JobGraph: ...


@dataclass
class Ports:
    deployments: Deployments
    store: StatusStore
    events: Events
    flink: Callable[[str, str], JobReader]  # (namespace, deployment name) -> REST client
    metrics: Callable[[str], Metrics]  # Prometheus URL -> metrics reader
    clock: Callable[[], float] = time.time
    default_prometheus_url: str = "http://prometheus:9090"


@dataclass
class Pass:
    """What one pass did, for logs and tests."""

    outcome: str
    status: Status
    applied: list[str] = field(default_factory=list)  # owned fields written this pass


def reconcile(policy: HybridScalingPolicy, generation: int | None, status: Status,
              ports: Ports) -> Pass:
    started = time.perf_counter()
    try:
        return _Run(policy, generation, status, ports).run()
    finally:
        telemetry.RECONCILE_SECONDS.observe(time.perf_counter() - started)


class _Run:
    def __init__(self, policy: HybridScalingPolicy, generation: int | None, status: Status,
                 ports: Ports) -> None:
        self.policy, self.spec, self.ports = policy, policy.spec, ports
        self.namespace = policy.metadata.namespace or "default"
        self.name = policy.metadata.name
        self.target = policy.spec.target_ref.name
        self.generation = generation
        self.now = ports.clock()
        self.saved = status
        self.status = status.model_copy(update={"observed_generation": generation})

    # --- recording -----------------------------------------------------------------

    def condition(self, type_: ConditionType, ok: bool, reason: str, message: str) -> None:
        old = self.status.condition(type_)
        self.status = self.status.with_condition(
            type_, ok, reason, message, self.now, self.generation
        )
        new = self.status.condition(type_)
        assert new is not None
        changed = old is None or (old.status, old.reason) != (new.status, new.reason)
        if changed and not ok and type_ in (ConditionType.READY, ConditionType.METRICS_AVAILABLE):
            self.ports.events.emit("Warning", reason, message)

    def save(self) -> None:
        if self.status != self.saved:
            self.ports.store.save(self.status)
            self.saved = self.status

    def done(self, outcome: str, applied: list[str] | None = None) -> Pass:
        self.save()
        return Pass(outcome, self.status, applied or [])

    def refuse(self, reason: str, message: str) -> Pass:
        scaling = self.status.condition(ConditionType.SCALING)
        if scaling is None or scaling.reason != reason or scaling.message != message:
            self.ports.events.emit("Warning", "Refused", message)
        self.condition(ConditionType.SCALING, False, reason, message)
        return self.done("refused")

    # --- the pass ------------------------------------------------------------------

    def run(self) -> Pass:
        if self.spec.mode == Mode.DISABLED:
            self.condition(ConditionType.READY, True, "Disabled", "mode is Disabled: no evaluation")
            return self.done("disabled")
        deployment = self.ports.deployments.get(self.namespace, self.target)
        if deployment is None:
            self.condition(ConditionType.READY, False, "TargetNotFound",
                           f"FlinkDeployment {self.namespace}/{self.target} not found")
            return self.done("target-not-found")
        reader = self.ports.flink(self.namespace, self.target)
        try:
            job = reader.job()
            if job is None:
                raise FlinkRestError("the JobManager lists no job")
        except FlinkRestError as e:
            return self.job_unavailable(e)
        watching = f"watching job {job.jid} of FlinkDeployment {self.target}"

        scaling = self.status.condition(ConditionType.SCALING)
        resuming = scaling is not None and scaling.reason == RECONFIGURING
        # Most passes only wait: they read no job graph and query no Prometheus.
        wait = None if resuming else self.waiting(job)
        if wait is not None:
            self.condition(ConditionType.READY, True, "Evaluating", watching)
            return self.done(wait)
        metrics = self.ports.metrics(
            self.spec.metrics.prometheus_url or self.ports.default_prometheus_url)
        try:
            graph = self.read_graph(reader, job, deployment, metrics)
        except FlinkRestError as e:
            return self.job_unavailable(e)
        self.condition(ConditionType.READY, True, "Evaluating", watching)
        if resuming:
            return self.resume(deployment, graph)

        collected = metrics.observe(
            graph, job.jid, self.now, self.spec.metrics.window, self.spec.metrics.resolution
        )
        if not isinstance(collected, Collected):
            self.count_error("metrics")
            self.condition(ConditionType.METRICS_AVAILABLE, False, "MetricsUnavailable",
                           collected.reason)
            return self.done("metrics-unavailable")
        self.condition(ConditionType.METRICS_AVAILABLE, True, "MetricsFresh",
                       f"all {len(graph.vertices)} vertices reported over the last "
                       f"{self.spec.metrics.window:g}s")
        return self.decide(deployment, graph, collected)

    def job_unavailable(self, error: FlinkRestError) -> Pass:
        self.count_error("flink-rest")
        self.condition(ConditionType.READY, False, "JobUnavailable", str(error))
        return self.done("job-unavailable")

    def read_graph(self, reader: JobReader, job: JobSummary, deployment: Mapping[str, Any],
                   metrics: Metrics) -> JobGraph:
        """The job graph with uids attached and memory levels as the deployment has them."""
        candidates = [*(current_fields(deployment).operator_resources or {}),
                      *(o.operator_uid for o in self.spec.cpu.overrides if o.operator_uid)]
        try:
            chains = metrics.operator_ids(job.jid, self.now)
        except MetricsError:  # only uids of chained operators need it; heads still match
            chains = {}
        graph = reader.job_graph(job.jid, candidates, chains)
        levels = memory_levels(deployment, graph, self.spec.memory.base_managed_memory)
        return graph.with_configuration(
            {v.id: VertexConfig(v.parallelism, levels[v.id]) for v in graph.vertices}
        )

    def waiting(self, job: JobSummary) -> str | None:
        """Why no evaluation is due yet: the window must lie after stabilization."""
        metrics = self.spec.metrics
        started = job.start_time_ms / 1000.0
        last_change = self.status.last_reconfiguration_time
        stable_from = max(started, last_change or started) + metrics.stabilization
        last = self.status.last_decision
        due = max(stable_from, last.time if last is not None else stable_from) + metrics.window
        if self.now < stable_from:
            # An absolute time, so the message (and the status) stays put between passes.
            until = time.strftime("%H:%M:%SZ", time.gmtime(stable_from))
            self.condition(ConditionType.SCALING, True, STABILIZING,
                           f"stabilizing until {until} ({metrics.stabilization:g}s after the "
                           f"last restart)")
            return "stabilizing"
        scaling = self.status.condition(ConditionType.SCALING)
        if scaling is not None and scaling.reason == STABILIZING:
            self.condition(ConditionType.SCALING, False, "Stable",
                           "stabilized; collecting a full metrics window")
        if self.now < due:
            return "window-filling"
        return None

    def params(self) -> ScalingParams:
        return self.spec.scaling_params()

    def decide(self, deployment: Mapping[str, Any], graph: JobGraph,
               collected: Collected) -> Pass:
        params = self.params()
        state = self.status.to_policy_state()
        started = time.perf_counter()
        evaluation = evaluate(graph, collected.observation, state, params, self.now)
        decision = evaluation.decision
        telemetry.count(telemetry.EVALUATIONS, self.namespace, self.name,
                        "reconfigure" if decision.reconfigures else "unchanged")
        self.status = self.status.with_decision(decision).with_operators(
            self.operators(decision, graph)
        )
        self.condition(ConditionType.LIMIT_REACHED, decision.clipped,
                       "Clipped" if decision.clipped else "WithinLimits",
                       decision.clip_reason or "the decision is within spec.limits")
        if not decision.reconfigures:
            telemetry.DECIDE_SECONDS.observe(time.perf_counter() - started)
            self.status = self.status.with_policy_state(evaluation.state)
            self.condition(ConditionType.SCALING, False, "Steady", decision.reason)
            return self.done("unchanged")

        placed = place(graph, evaluation.configuration, params.memory, params.footprint,
                       self.spec.task_manager, self.spec.placement.solver_time_limit)
        telemetry.DECIDE_SECONDS.observe(time.perf_counter() - started)
        if isinstance(placed, Placed):
            telemetry.SOLVER_SECONDS.observe(placed.placement.solve_seconds)
        if self.spec.mode == Mode.RECOMMEND:
            # Recorded as advice only: Justin's history keeps what really runs.
            self.status = self.status.with_policy_state(
                replace(state, scale_down_wanted_since=evaluation.state.scale_down_wanted_since)
            )
            where = (f" on {placed.replicas} TaskManagers" if isinstance(placed, Placed)
                     else f" (unplaceable: {placed.reason})")
            self.ports.events.emit("Normal", "Recommended", _trim(decision.reason + where))
            self.count(decision, "Recommend")
            self.condition(ConditionType.SCALING, False, "Recommended",
                           "mode is Recommend: the decision is recorded, nothing is patched")
            return self.done("recommended")
        if not isinstance(placed, Placed):
            return self.refuse("Unplaceable", placed.reason)
        why = refusal(deployment) or self.unrealizable(graph, decision)
        if why is not None:
            return self.refuse("Refused", why)
        why = self.memory_not_honoured(deployment, graph, decision, collected)
        if why is not None:
            return self.refuse("MemoryNotHonoured", why)

        # Commit first: from here on a restart completes this step rather than redoing it.
        self.status = self.status.with_policy_state(evaluation.state).model_copy(
            update={"placement": placed.status()}
        )
        self.condition(ConditionType.SCALING, True, RECONFIGURING,
                       f"step {decision.step}: applying to FlinkDeployment {self.target}")
        self.save()
        applied = self.apply(deployment,
                             self.desired(deployment, graph, evaluation.configuration, placed))
        for v in decision.vertices:
            if v.action in EVENT_REASONS:
                self.ports.events.emit("Normal", EVENT_REASONS[v.action], _trim(
                    f"step {decision.step}: {v.vertex_name or v.vertex_id} "
                    f"p {v.parallelism_before}→{v.parallelism_after}, "
                    f"level {_level(v.memory_level_before)}→{_level(v.memory_level_after)}: "
                    f"{v.reason}"
                ))
        self.count(decision, "Active")
        self.condition(ConditionType.SCALING, True, STABILIZING,
                       f"step {decision.step} applied ({', '.join(applied) or 'already there'}"
                       f"{', in place' if in_place(deployment, applied) else ''}); "
                       f"waiting {self.spec.metrics.stabilization:g}s for it to settle")
        return self.done("reconfigured", applied)

    def resume(self, deployment: Mapping[str, Any], graph: JobGraph) -> Pass:
        """Finish a step committed to status by a controller that died before applying it."""
        if not self.status.history or self.status.placement is None:
            self.condition(ConditionType.SCALING, False, "Stable", "nothing to resume")
            return self.done("nothing-to-resume")
        record = self.status.history[-1]
        configuration = {
            v.id: VertexConfig(h.parallelism, h.memory_level)
            if (h := record.vertex(v.id)) is not None else VertexConfig(v.parallelism,
                                                                        v.memory_level)
            for v in graph.vertices
        }
        placement = self.status.placement
        desired = self._desired(deployment, graph, configuration, placement.shape.cpu,
                                round(placement.shape.memory), placement.task_managers)
        applied = self.apply(deployment, desired)
        if applied:
            self.ports.events.emit("Normal", "Resumed", _trim(
                f"step {record.step} was committed but not applied before a restart; "
                f"applied {', '.join(applied)}"))
        self.condition(ConditionType.SCALING, True, STABILIZING,
                       f"step {record.step} applied; waiting for stabilization")
        return self.done("resumed", applied)

    # --- realize ---------------------------------------------------------------------

    def desired(self, deployment: Mapping[str, Any], graph: JobGraph,
                configuration: Mapping[str, VertexConfig], placed: Placed) -> OwnedFields:
        return self._desired(deployment, graph, configuration, placed.shape.cpu,
                             round(placed.shape.memory), placed.replicas)

    def _desired(self, deployment: Mapping[str, Any], graph: JobGraph,
                 configuration: Mapping[str, VertexConfig], cpu: float, memory_mib: int,
                 replicas: int) -> OwnedFields:
        task = self.params().footprint
        adaptive = self.spec.task_manager.realization == Realization.ADAPTIVE
        current = current_fields(deployment)
        kept_replicas: int | None = replicas
        if adaptive and keeps_task_managers(deployment, current, cpu, memory_mib):
            # Natively, Flink's adaptive scheduler asks for TaskManagers itself, and the
            # operator upgrades (restarts) on a replicas change: leave it as it is, so a
            # parallelism-only step stays in place.
            kept_replicas = current.replicas
        return desired_fields(
            graph, configuration, cpu_per_task=task.cpu_cores, heap_per_task_mib=task.heap_mib,
            base_managed_mib=self.spec.memory.base_managed_memory, tm_cpu=cpu,
            tm_memory_mib=memory_mib, replicas=kept_replicas, per_operator=not adaptive,
        )

    def apply(self, deployment: Mapping[str, Any], desired: OwnedFields) -> list[str]:
        """Write the owned fields that differ; nothing when the deployment already has them."""
        differences = desired.differences(current_fields(deployment))
        if differences:
            note = self.ports.deployments.apply(
                self.namespace, self.target, apply_body(self.target, self.namespace, desired)
            )
            if note:
                self.ports.events.emit("Normal", "FieldsTakenOver", _trim(note))
        return differences

    def unrealizable(self, graph: JobGraph, decision: Decision) -> str | None:
        """A memory change for a vertex whose operator uids are unknown cannot be written."""
        if self.spec.task_manager.realization != Realization.FINE_GRAINED:
            return None
        blind = [v.vertex_name or v.vertex_id for v in decision.vertices
                 if v.memory_level_after != v.memory_level_before
                 and not graph.vertex(v.vertex_id).operator_uids]
        if blind:
            return (f"no operator uid is known for {', '.join(blind)}: their managed memory "
                    f"cannot be set (flink-plugin publishes uids in the job config)")
        return None

    def memory_not_honoured(self, deployment: Mapping[str, Any], graph: JobGraph,
                            decision: Decision, collected: Collected) -> str | None:
        """A memory change is pointless (and costs a restart) while Flink ignores the
        per-operator memory already written; scale-outs alone do not depend on it."""
        if self.spec.task_manager.realization != Realization.FINE_GRAINED or not any(
            v.memory_level_after != v.memory_level_before for v in decision.vertices
        ):
            return None
        found = unhonoured_memory(deployment, graph, collected.cache_capacity_bytes)
        if not found:
            return None
        return (f"Flink does not run the managed memory written for {'; '.join(found)}. "
                f"Does the job call HybridResources.apply(env) before execute() "
                f"(docs/flink-plugin.md)? Steps that change memory are held back until it does")

    def operators(self, decision: Decision, graph: JobGraph) -> list[OperatorStatus]:
        memory = self.spec.memory
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

    def count(self, decision: Decision, mode: str) -> None:
        for v in decision.vertices:
            if v.action != Action.NONE:
                telemetry.count(telemetry.DECISIONS, self.namespace, self.name,
                                v.action.value, mode)

    def count_error(self, stage: str) -> None:
        telemetry.count(telemetry.ERRORS, self.namespace, self.name, stage)


def _level(level: int | None) -> str:
    return "⊥" if level is None else str(level)


def _trim(message: str, limit: int = 1000) -> str:
    """Event messages are capped by the API server; keep the start, mark the cut."""
    return message if len(message) <= limit else message[: limit - 1] + "…"
