"""Record: what a pass tells the world, in the policy's status and in Events.

`Run` carries one pass: the policy, the ports, the status being built and what
was last saved. Every stage records through it (`condition`, `event`, `refuse`);
`record` ends the pass: the Events of an applied step, `Scaling=Stabilizing`,
and one status write if anything changed. `Reason` names every condition and
Event reason the controller writes (the table in docs/controller.md).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from controller import telemetry
from controller.api import ConditionType, HybridScalingPolicy, Status
from controller.ports import Ports
from policies.decision import Action, Decision
from policies.levels import format_level


class Reason(StrEnum):
    """Condition and Event reasons (CamelCase, as Kubernetes conventions want)."""

    # Ready
    DISABLED = "Disabled"  # mode is Disabled
    TARGET_NOT_FOUND = "TargetNotFound"  # no FlinkDeployment of that name (also a Warning Event)
    JOB_UNAVAILABLE = "JobUnavailable"  # Flink REST unreachable, or no job (also a Warning Event)
    EVALUATING = "Evaluating"  # the target and its job are readable
    INVALID_SPEC = "InvalidSpec"  # the model rejects a spec the CRD admitted
    # MetricsAvailable
    METRICS_UNAVAILABLE = "MetricsUnavailable"  # a vertex lacks a signal (also a Warning Event)
    METRICS_FRESH = "MetricsFresh"  # every vertex reported over the window
    # LimitReached
    CLIPPED = "Clipped"  # spec.limits clipped the decision
    WITHIN_LIMITS = "WithinLimits"
    # Scaling
    RECONFIGURING = "Reconfiguring"  # a step is committed to status.target, maybe not applied
    STABILIZING = "Stabilizing"  # a step is applied; waiting out spec.metrics.stabilization
    STABLE = "Stable"  # stabilized; the metrics window fills
    STEADY = "Steady"  # the last decision changes nothing
    RECOMMENDED = "Recommended"  # Recommend mode: recorded, not applied (also a Normal Event)
    UNPLACEABLE = "Unplaceable"  # no allowed TaskManager shape holds the tasks (Warning Refused)
    REFUSED = "Refused"  # the deployment cannot take a step now (also the Warning Event's reason)
    MEMORY_NOT_HONOURED = "MemoryNotHonoured"  # Flink ignores the managed memory written
    # Events only
    SCALED_OUT = "ScaledOut"
    SCALED_IN = "ScaledIn"
    SCALED_UP = "ScaledUp"
    MEMORY_ROLLED_BACK = "MemoryRolledBack"
    MEMORY_STRIPPED = "MemoryStripped"
    RESUMED = "Resumed"  # a committed step applied after a restart
    REAPPLIED = "Reapplied"  # the deployment had drifted from status.target; applied again
    FIELDS_TAKEN_OVER = "FieldsTakenOver"  # server-side apply conflict: our fields taken over


# One Event per changed vertex of an applied step (kubectl describe reads them as a log).
EVENT_REASONS: Mapping[Action, Reason] = {
    Action.SCALE_OUT: Reason.SCALED_OUT,
    Action.SCALE_IN: Reason.SCALED_IN,
    Action.SCALE_UP: Reason.SCALED_UP,
    Action.MEMORY_ROLLBACK: Reason.MEMORY_ROLLED_BACK,
    Action.STRIP_MEMORY: Reason.MEMORY_STRIPPED,
}


class Stop(Exception):
    """A stage ends the pass early with this outcome (realize and record still run)."""

    def __init__(self, outcome: str) -> None:
        super().__init__(outcome)
        self.outcome = outcome


@dataclass(frozen=True)
class Realized:
    """What `realize` found: the owned fields it wrote, and whether Flink rescales in place."""

    applied: list[str]
    in_place: bool


@dataclass
class Pass:
    """What one pass did, for logs and tests."""

    outcome: str
    status: Status
    applied: list[str] = field(default_factory=list)  # owned fields written this pass


class Run:
    """One pass in progress: its inputs, the status it builds, and how it records."""

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
        self.deployment: Mapping[str, Any] | None = None  # read by gate
        self.decision: Decision | None = None  # a step committed by this pass
        self.decide_started = time.perf_counter()
        self.outcome = "reconfigured"

    def condition(self, type_: ConditionType, ok: bool, reason: Reason, message: str) -> None:
        """Set a condition; a Ready or MetricsAvailable turning False is also a Warning."""
        old = self.status.condition(type_)
        self.status = self.status.with_condition(
            type_, ok, reason, message, self.now, self.generation
        )
        changed = old is None or (old.status, old.reason) != (
            "True" if ok else "False", reason)
        if changed and not ok and type_ in (ConditionType.READY, ConditionType.METRICS_AVAILABLE):
            self.event("Warning", reason, message)

    def scaling(self) -> str | None:
        """The Scaling condition's reason as this pass found it."""
        c = self.saved.condition(ConditionType.SCALING)
        return None if c is None else c.reason

    def event(self, type_: str, reason: Reason, message: str) -> None:
        self.ports.events.emit(type_, reason, trim(message))

    def save(self) -> None:
        if self.status != self.saved:
            self.ports.store.save(self.status)
            self.saved = self.status

    def refuse(self, reason: Reason, message: str) -> Stop:
        """A step that cannot be taken: Scaling=False and one Warning per new refusal."""
        scaling = self.status.condition(ConditionType.SCALING)
        if scaling is None or scaling.reason != reason or scaling.message != message:
            self.event("Warning", Reason.REFUSED, message)
        self.condition(ConditionType.SCALING, False, reason, message)
        return Stop("refused")

    def count(self, decision: Decision, mode: str) -> None:
        for v in decision.vertices:
            if v.action != Action.NONE:
                telemetry.count(telemetry.DECISIONS, self.namespace, self.name,
                                v.action.value, mode)

    def count_error(self, stage: str) -> None:
        telemetry.count(telemetry.ERRORS, self.namespace, self.name, stage)


def record(run: Run, realized: Realized | None) -> Pass:
    """End the pass: announce a step this pass applied, mark it applied, save the status."""
    target = run.status.target
    applied = realized.applied if realized is not None else []
    applying = run.decision is not None or run.scaling() == Reason.RECONFIGURING
    if run.decision is not None:
        decision = run.decision
        for v in decision.vertices:
            if v.action in EVENT_REASONS:
                run.event("Normal", EVENT_REASONS[v.action], (
                    f"step {decision.step}: {v.vertex_name or v.vertex_id} "
                    f"p {v.parallelism_before}→{v.parallelism_after}, "
                    f"level {format_level(v.memory_level_before)}→"
                    f"{format_level(v.memory_level_after)}: {v.reason}"
                ))
        run.count(decision, "Active")
    elif applied and target is not None:
        run.outcome = "resumed" if applying else "reapplied"
        if applying:
            run.event("Normal", Reason.RESUMED,
                      f"step {target.step} was committed but not applied before a restart; "
                      f"applied {', '.join(applied)}")
        else:
            run.event("Normal", Reason.REAPPLIED,
                      f"the FlinkDeployment differed from step {target.step} in "
                      f"{', '.join(applied)}; applied it again")
    if applying and target is not None and realized is not None:
        run.condition(ConditionType.SCALING, True, Reason.STABILIZING,
                      f"step {target.step} applied ({', '.join(applied) or 'already there'}"
                      f"{', in place' if realized.in_place else ''}); waiting "
                      f"{run.spec.metrics.stabilization:g}s for it to settle")
    run.save()
    return Pass(run.outcome, run.status, applied)


def trim(message: str, limit: int = 1000) -> str:
    """Event messages are capped by the API server; keep the start, mark the cut."""
    return message if len(message) <= limit else message[: limit - 1] + "…"


def now_text(epoch_s: float) -> str:
    """An absolute time for messages, so a message (and the status) stays put between passes."""
    return time.strftime("%H:%M:%SZ", time.gmtime(epoch_s))
