"""Record: what a pass tells the world, in the policy's status and in Events.

`Run` carries one pass: the policy, the ports, the status being built and what
was last saved. Every stage records through it (`condition`, `event`, `refuse`);
`record` ends the pass: the Events of an applied step, `Scaling=Stabilizing`,
and one status write if anything changed. `Reason` names every condition and
Event reason the controller writes (the table in docs/controller.md).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property
from types import MappingProxyType
from typing import Any

from controller import telemetry
from controller.api import (
    CONDITION_MESSAGE_LIMIT,
    Condition,
    ConditionStatus,
    ConditionType,
    HybridScalingPolicy,
    OperatorStatus,
    PodRequest,
    ScaleDownWait,
    Status,
    timestamp,
)
from controller.ports import JobSummary, Ports
from policies import buffering, explain, skew
from policies.bill import PodBill, describe_change
from policies.decision import Action, Decision, Totals, VertexDecision, epoch_seconds
from policies.levels import format_level
from policies.params import HISTORY_LIMIT, PolicyState, ScalingParams
from policies.spec import MemoryScaling, format_memory_mib


class Reason(StrEnum):
    """Condition and Event reasons (CamelCase, as Kubernetes conventions want)."""

    # Ready
    DISABLED = "Disabled"  # mode is Disabled
    TARGET_NOT_FOUND = "TargetNotFound"  # no FlinkDeployment of that name (also a Warning Event)
    JOB_UNAVAILABLE = "JobUnavailable"  # Flink REST unreachable, or no job (also a Warning Event)
    JOB_ANSWER_TOO_LARGE = "JobAnswerTooLarge"  # Flink REST answered past its size limit
    # Another live policy owns the FlinkDeployment (controller/owner.py; also a Warning)
    TARGET_OWNED_ELSEWHERE = "TargetOwnedElsewhere"
    EVALUATING = "Evaluating"  # the target and its job are readable
    INVALID_SPEC = "InvalidSpec"  # the model rejects a spec the CRD admitted
    INTERNAL_ERROR = "InternalError"  # a pass raised (also a Warning Event per distinct error)
    # MetricsAvailable
    METRICS_UNAVAILABLE = "MetricsUnavailable"  # a vertex lacks a signal (also a Warning Event)
    METRICS_FRESH = "MetricsFresh"  # every vertex reported over the window
    # The endpoint's fault (also Warning Events): its answer passed the size limit, was
    # not a Prometheus API answer, or did not arrive in full within the call's deadline.
    METRICS_ANSWER_TOO_LARGE = "MetricsAnswerTooLarge"
    METRICS_ANSWER_MALFORMED = "MetricsAnswerMalformed"
    METRICS_TIMED_OUT = "MetricsTimedOut"
    METRICS_URL_REFUSED = "MetricsUrlRefused"  # not dialled: ambiguous or not allowed
    # not dialled: spec.metrics.basicAuth/authorization names a Secret key it cannot read
    METRICS_CREDENTIALS_UNAVAILABLE = "MetricsCredentialsUnavailable"
    # LimitReached
    CLIPPED = "Clipped"  # spec.limits clipped the decision
    WITHIN_LIMITS = "WithinLimits"
    # Scaling
    RECONFIGURING = "Reconfiguring"  # a step is committed to status.target, maybe not applied
    STABILIZING = "Stabilizing"  # a step is applied; waiting out spec.metrics.stabilization
    # The job restarted (new id, or a failover) without a step of ours: no decision from
    # a window that holds the restart (also a Warning Event; controller/jobhealth.py)
    JOB_RESTARTED = "JobRestarted"
    STABLE = "Stable"  # stabilized; the metrics window fills
    STEADY = "Steady"  # the last decision changes nothing
    RECOMMENDED = "Recommended"  # Recommend mode: recorded, not applied (also a Normal Event)
    UNPLACEABLE = "Unplaceable"  # no allowed TaskManager shape holds the tasks (Warning Refused)
    REFUSED = "Refused"  # the deployment cannot take a step now (also the Warning Event's reason)
    PATCH_REFUSED = "PatchRefused"  # admission refused our patch: HTTP code (also a Warning)
    MEMORY_NOT_HONOURED = "MemoryNotHonoured"  # Flink ignores the managed memory written
    # Skewed
    HOT_SUBTASK = "HotSubtask"  # a hot key saturates one subtask; scale-out cannot relieve it
    BALANCED = "Balanced"  # no busiest subtask is saturated beyond what more tasks spread
    # Events only
    SCALED_OUT = "ScaledOut"
    SCALED_IN = "ScaledIn"
    SCALED_UP = "ScaledUp"
    MEMORY_ROLLED_BACK = "MemoryRolledBack"
    MEMORY_STRIPPED = "MemoryStripped"
    RESUMED = "Resumed"  # a committed step applied after a restart
    REAPPLIED = "Reapplied"  # the deployment had drifted from status.target; applied again
    FIELDS_TAKEN_OVER = "FieldsTakenOver"  # server-side apply conflict: our fields taken over
    SKEWED = "Skewed"  # Warning: Skewed turned True, or its set of vertices changed
    SQL_BUFFERING = "SqlBufferingApplied"  # spec.skew.applySqlSettings: settings in a step
    TARGET_REPLACED = "TargetReplaced"  # a new FlinkDeployment uid: fresh history (also Scaling)
    RESIZE_FAILED = "ResizeFailed"  # Warning: a resize in place fell back to a restart


# MetricsError.kind (controller.adapters.dial) -> the MetricsAvailable=False reason.
METRICS_REASONS: Mapping[str, Reason] = {
    "too-large": Reason.METRICS_ANSWER_TOO_LARGE,
    "malformed": Reason.METRICS_ANSWER_MALFORMED,
    "timeout": Reason.METRICS_TIMED_OUT,
    "refused": Reason.METRICS_URL_REFUSED,
    "credentials": Reason.METRICS_CREDENTIALS_UNAVAILABLE,
}

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
    resized: bool = False  # by flink-plugin's agents, not a patch (a resize in place)
    reapplied: bool = False  # patched over a drift from a step applied before


@dataclass
class Pass:
    """What one pass did, for logs and tests."""

    outcome: str
    status: Status
    applied: list[str] = field(default_factory=list)  # owned fields written this pass
    # When an evaluation can be due at the earliest (epoch seconds), if the pass knows:
    # the daemon wakes then rather than up to a resolution later.
    due: float | None = None


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
        self.found = status  # as the pass found it (a save mid-pass moves `saved`)
        self.saved = status
        self.status = status.model_copy(update={"observed_generation": generation})
        self.deployment: Mapping[str, Any] | None = None  # read by gate
        self.job: JobSummary | None = None  # read by gate, unless the pass stopped earlier
        self.decision: Decision | None = None  # a step committed by this pass
        self.decide_started = time.perf_counter()
        self.outcome = "reconfigured"
        self.due: float | None = None  # set by gate when it waits for the window

    @cached_property
    def params(self) -> ScalingParams:
        """The core's parameters from the spec, built once per pass (decide, place and
        desired all read them; in fine-grained mode they hold the pod pricing)."""
        return self.spec.scaling_params()

    def condition(self, type_: ConditionType, ok: bool, reason: Reason, message: str) -> None:
        """Set a condition; a Ready or MetricsAvailable turning False is also a Warning."""
        old = self.status.condition(type_)
        self.status = with_condition(
            self.status, type_, ok, reason, message, self.now, self.generation
        )
        changed = old is None or (old.status, old.reason) != (
            "True" if ok else "False", reason)
        if changed and not ok and type_ in (ConditionType.READY, ConditionType.METRICS_AVAILABLE):
            self.event("Warning", reason, message)

    def scaling(self) -> str | None:
        """The Scaling condition's reason as this pass found it."""
        c = self.found.condition(ConditionType.SCALING)
        return None if c is None else c.reason

    def event(self, type_: str, reason: Reason, message: str, keep_end: int = 0) -> None:
        """Post an Event; past the API server's cap the message is cut before its last
        `keep_end` characters."""
        self.ports.events.emit(type_, reason, trim(message, keep_end=keep_end))

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
    reapplied = realized is not None and realized.reapplied
    applying = not reapplied and (run.decision is not None or run.scaling() in (
        Reason.RECONFIGURING, Reason.PATCH_REFUSED))
    if run.decision is not None and realized is not None:  # None: the patch was refused
        decision = run.decision
        # Each step Event ends with what the step costs: the pods' bill and how it is
        # enacted with its expected downtime (settled at commit; the decision's forecast,
        # made before placement, assumes a restart). The next evaluation overwrites
        # status.lastDecision, so the Events are where `kubectl describe` keeps it; a long
        # vertex sentence is cut, never this end.
        enacted = run.status.enactment(decision.step)
        how = (enacted.describe() if enacted is not None
               else "" if decision.forecast is None
               else explain.downtime(round(decision.forecast.expected_downtime_s)))
        costs = f"; {pods_change(run.status)}" + (f"; {how}" if how else "")
        for v in decision.vertices:
            if v.action in EVENT_REASONS:
                run.event("Normal", EVENT_REASONS[v.action],
                          f"step {decision.step}: {vertex_sentence(v, run.spec.memory)}{costs}",
                          keep_end=len(costs))
        run.count(decision, "Active")
    elif applied and target is not None:
        run.outcome = "resumed" if applying else "reapplied"
        if applying:
            run.event("Normal", Reason.RESUMED,
                      f"step {target.step} was committed but not applied by the pass that "
                      f"committed it (a restart, or another replica); "
                      f"applied {', '.join(applied)}")
        elif realized is not None and realized.resized:
            run.event("Normal", Reason.REAPPLIED,
                      f"the live block caches differed from step {target.step} (a failover "
                      f"restores Flink's reservation); resized {', '.join(applied)} again")
        else:
            run.event("Normal", Reason.REAPPLIED,
                      f"the FlinkDeployment differed from step {target.step} in "
                      f"{', '.join(applied)}; applied it again")
    if applying and target is not None and realized is not None:
        how = next((f", {e.describe()}" for e in run.status.enactments
                    if e.step == target.step), ", in place" if realized.in_place else "")
        run.condition(ConditionType.SCALING, True, Reason.STABILIZING,
                      f"step {target.step} applied ({', '.join(applied) or 'already there'}"
                      f"{how}); waiting "
                      f"{run.spec.metrics.stabilization:g}s for it to settle")
    elif reapplied and target is not None:
        run.condition(ConditionType.SCALING, True, Reason.STABILIZING,
                      f"step {target.step} applied again ("
                      f"{', '.join(applied) or 'found on the FlinkDeployment'}: it had "
                      f"drifted from it); waiting "
                      f"{run.spec.metrics.stabilization:g}s for it to settle")
    run.save()
    return Pass(run.outcome, run.status, applied, run.due)


def vertex_sentence(v: VertexDecision, memory: MemoryScaling) -> str:
    """One sentence for a vertex: its change, then why ('Sink p 1, level 0 (158 MiB)→⊥ (no
    managed memory): stateless and too idle to measure, so its managed memory is freed')."""
    p = (f"p {v.parallelism_before}" if v.parallelism_before == v.parallelism_after
         else f"p {v.parallelism_before}→{v.parallelism_after}")
    before, after = (explain.level(memory, m)
                     for m in (v.memory_level_before, v.memory_level_after))
    level = before if before == after else f"{before}→{after}"
    return f"{v.vertex_name or v.vertex_id} {p}, {level}: {v.reason}"


def pods_change(status: Status) -> str:
    """The committed step's predicted change of the pod bill, for messages."""
    placement = status.placement
    after = None if placement is None else bill_of(placement.pods)
    if placement is None or after is None:
        return "pods: unknown"
    return describe_change(bill_of(placement.pods_before), after)


def pod_request(bill: PodBill) -> PodRequest:
    return PodRequest(task_managers=bill.task_managers,
                      cpu=_round_finite(bill.cpu_cores, CPU_DIGITS),
                      memory=format_memory_mib(round(bill.memory_mib)),
                      price=_round_finite(bill.price, PRICE_DIGITS))


def bill_of(request: PodRequest | None) -> PodBill | None:
    return None if request is None else PodBill(
        request.task_managers, request.cpu, request.memory, request.price)


def with_pods(status: Status, bill: PodBill | None) -> Status:
    """The printer columns' CPU and Memory: what the TaskManager pods request."""
    if bill is None:
        return status
    request = pod_request(bill)
    return status.model_copy(update={"summary": status.summary.model_copy(update={
        "task_managers": request.task_managers, "cpu": request.cpu,
        "memory": format_memory_mib(request.memory), "price": request.price})})


def record_skew(run: Run, previous: Decision | None, decision: Decision) -> None:
    """`Skewed`: True while a vertex's busiest subtask is saturated and more tasks cannot
    relieve it (policies/skew.py); a Warning Event when it turns True or names other
    vertices, never once per pass."""
    blocked = [f for f in decision.skew if skew.blocks_scale_out(f)]
    old = run.status.condition(ConditionType.SKEWED)
    before = ({f.vertex_id for f in previous.skew if skew.blocks_scale_out(f)}
              if previous is not None and old is not None
              and old.status == ConditionStatus.TRUE else set())
    if blocked:
        spec = run.spec.skew
        settings = buffering.sql_settings(spec.mini_batch_latency, spec.mini_batch_size)
        message = "; ".join(buffering.described(f, settings) for f in blocked)
        run.condition(ConditionType.SKEWED, True, Reason.HOT_SUBTASK, message)
        if {f.vertex_id for f in blocked} != before:
            run.event("Warning", Reason.SKEWED, message)
        return
    others = "; ".join(f.message for f in decision.skew)
    run.condition(ConditionType.SKEWED, False, Reason.BALANCED,
                  others or "no vertex's busiest subtask is far above its mean")


def trim(message: str, limit: int = 1000, keep_end: int = 0) -> str:
    """Event messages are capped by the API server; mark the cut (`explain.cut`)."""
    return explain.cut(message, limit, keep_end)


def now_text(epoch_s: float) -> str:
    """An absolute time for messages, so a message (and the status) stays put between passes."""
    return time.strftime("%H:%M:%SZ", time.gmtime(epoch_s))


# --- status changes (the schema is controller/api.py) --------------------------------


def with_condition(
    status: Status,
    type_: ConditionType,
    value: ConditionStatus | bool,
    reason: str,
    message: str,
    now: float,
    observed_generation: int | None = None,
) -> Status:
    """Set one condition; lastTransitionTime moves only when its status changes. A message
    past what a condition holds (a list of hundreds of vertices, or their names as the
    JobManager gives them) is cut, or the status could not be written at all."""
    message = explain.cut(message, CONDITION_MESSAGE_LIMIT)
    if isinstance(value, bool):
        value = ConditionStatus.TRUE if value else ConditionStatus.FALSE
    old = status.condition(type_)
    same = old is not None and old.status == value
    new = Condition(
        type=type_,
        status=value,
        reason=reason,
        message=message,
        last_transition_time=old.last_transition_time if same and old else timestamp(now),
        observed_generation=observed_generation,
    )
    others = tuple(c for c in status.conditions if c.type != type_)
    ordered = sorted((*others, new), key=lambda c: list(ConditionType).index(c.type))
    return status.model_copy(update={"conditions": tuple(ordered)})


def policy_state(status: Status) -> PolicyState:
    skew = status.last_decision.skew if status.last_decision is not None else ()
    return PolicyState(
        step=status.step,
        history=status.history,
        scale_down_wanted_since=MappingProxyType(
            {w.vertex_id: w.since for w in status.scale_down_wanted_since}
        ),
        last_reconfiguration_time=status.last_reconfiguration_time,
        skewed=frozenset(f.vertex_id for f in skew),
        skew_saturated=frozenset(f.vertex_id for f in skew if f.saturated),
        learned=MappingProxyType({v.vertex_id: v for v in status.learned}),
        cpu_short_since=status.cpu_short_since,
        last_evaluated=None if status.last_decision is None else status.last_decision.time,
    )


def with_policy_state(status: Status, state: PolicyState) -> Status:
    return status.model_copy(update={
        "step": state.step,
        "history": tuple(state.history)[-HISTORY_LIMIT:],
        "scale_down_wanted_since": tuple(
            ScaleDownWait(vertex_id=v, since=t)
            for v, t in sorted(state.scale_down_wanted_since.items())
        ),
        # model_copy does not validate: round to the microseconds the wire keeps here.
        "last_reconfiguration_time": (None if state.last_reconfiguration_time is None
                                      else epoch_seconds(state.last_reconfiguration_time)),
        "summary": status.summary.model_copy(update={"step": state.step}),
        "learned": tuple(v for _, v in sorted(state.learned.items())),
        "cpu_short_since": (None if state.cpu_short_since is None
                            else epoch_seconds(state.cpu_short_since)),
    })


def with_decision(status: Status, decision: Decision) -> Status:
    """Record the last decision and refresh the printer-column summary from it."""
    changed = sorted(
        (v for v in decision.vertices if v.action is not Action.NONE),
        key=lambda v: _TELLING.index(v.action),
    )
    summary = status.summary.model_copy(update=dict(
        operators=len(decision.vertices),
        task_cpu=_round_finite(decision.after.cpu_cores, CPU_DIGITS),
        task_memory=format_memory_mib(round(decision.after.memory_mib)),
        step=decision.step,
        last_action=_describe(changed) if changed else "none",
    ))
    return status.model_copy(update={"last_decision": _tidy_decision(decision),
                                   "summary": summary})


def with_operators(status: Status, operators: Iterable[OperatorStatus]) -> Status:
    cleaned = tuple(
        o.model_copy(update={
            "managed_mib": _round_finite(o.managed_mib, MIB_DIGITS),
            "busyness": _round(o.busyness, RATIO_DIGITS),
            "true_processing_rate": _round(_finite(o.true_processing_rate), RATE_DIGITS),
            "cache_hit_rate": _round(o.cache_hit_rate, RATIO_DIGITS),
            "state_latency_ns": _round(o.state_latency_ns, NS_DIGITS),
        })
        for o in operators
    )
    return status.model_copy(update={"operators": cleaned})


def _finite(value: float | None) -> float | None:
    """JSON has no infinity; an unbounded capacity is recorded as unknown."""
    return value if value is not None and math.isfinite(value) else None


# Precision of the measured numbers the status shows (status.operators, status.lastDecision),
# so `kubectl describe` reads `busyness: 0.0807`, not `0.08065794268658717`. Only what is
# displayed is rounded: the core decided on the full values, and status.history (which
# Justin compares on its next step) keeps them, so rounding changes no decision.
RATIO_DIGITS = 4  # busyness, utilization, cache hit rate
RATE_DIGITS = 1  # records/s
NS_DIGITS = 0  # state latency, whole nanoseconds
CPU_DIGITS = 3  # cores
MIB_DIGITS = 1  # MiB
PRICE_DIGITS = 4  # price per hour


def _round_finite(value: float, digits: int) -> float:
    return float(round(value, digits)) if math.isfinite(value) else value


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else _round_finite(value, digits)


def _tidy_totals(t: Totals) -> Totals:
    return Totals(cpu_cores=_round_finite(t.cpu_cores, CPU_DIGITS),
                  memory_mib=_round_finite(t.memory_mib, MIB_DIGITS))


def _tidy_decision(decision: Decision) -> Decision:
    """The decision as status shows it: measured numbers at RATIO/RATE/NS precision."""
    vertices = tuple(
        v.model_copy(update={
            "busyness": _round(v.busyness, RATIO_DIGITS),
            "true_processing_rate": _round(v.true_processing_rate, RATE_DIGITS),
            "target_rate": _round(v.target_rate, RATE_DIGITS),
            "utilization": _round(v.utilization, RATIO_DIGITS),
            "cache_hit_rate": _round(v.cache_hit_rate, RATIO_DIGITS),
            "state_latency_ns": _round(v.state_latency_ns, NS_DIGITS),
        })
        for v in decision.vertices
    )
    findings = tuple(
        f.model_copy(update={
            name: _round(getattr(f, name), RATIO_DIGITS)
            for name in ("hottest_busyness", "mean_busyness", "ratio", "hottest_share",
                         "hot_key_group_share", "best_hottest_busyness")
        })
        for f in decision.skew
    )
    return decision.model_copy(update={
        "skew": findings,
        "vertices": vertices,
        "before": _tidy_totals(decision.before),
        "after": _tidy_totals(decision.after),
    })


# Which change the Last Decision column shows first: what Justin decided beats what DS2 did.
_TELLING = (Action.SCALE_UP, Action.MEMORY_ROLLBACK, Action.SCALE_OUT, Action.SCALE_IN,
            Action.STRIP_MEMORY, Action.NONE)


def _describe(changed: list[VertexDecision]) -> str:
    """'scale-up count m0→1', 'scale-out source p2→4 (+1 more)'."""
    d = changed[0]
    name = d.vertex_name or d.vertex_id[:8]
    if d.parallelism_before != d.parallelism_after:
        text = f"{d.action} {name} p{d.parallelism_before}→{d.parallelism_after}"
    else:
        text = (f"{d.action} {name} "
                f"m{format_level(d.memory_level_before)}→{format_level(d.memory_level_after)}")
    return text if len(changed) == 1 else f"{text} (+{len(changed) - 1} more)"
