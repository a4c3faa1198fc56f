"""Gate: whether this pass evaluates at all.

In order: the mode (Disabled evaluates nothing), the FlinkDeployment and its
identity (a new object under the target's name starts a fresh history), its job on
the JobManager, a committed step still to apply (nothing new is decided before it
lands: outcome `applying`) or an applied one the deployment no longer carries (nor from a
window of a configuration the history does not name: `drifted`), and the waiting
rule: a full metrics window must lie after the job's start, after the last
reconfiguration plus `spec.metrics.stabilization`, and after the last evaluation.
Most passes stop here, having read only the FlinkDeployment and `/jobs/overview`: no
job graph, no Prometheus.

Quiet passes read less. While the last full pass found everything in order (the
spec unchanged since, Ready=True/Evaluating, no step committed but unapplied, no
restart or enactment to observe) and the waiting rule's due time (`due_time`, written
once for both), counted without the job's start, lies ahead, no evaluation can be due:
the job's start only moves it later. Such
a pass reads nothing in Recommend mode, and in Active mode only the FlinkDeployment
(so a drifted target is still re-applied and a deleted or replaced target still
noticed within one resolution); never the JobManager. It reports when the
evaluation can be due at the earliest (`Run.due`), and the daemon wakes then.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from controller.api import ConditionType, Mode, ReplacedTarget, Status, timestamp
from controller.jobhealth import check_job
from controller.owner import claim
from controller.ports import FlinkRestError, JobReader, JobSummary
from controller.realize import (
    RESOURCES_KEY,
    drifted,
    levels_unknown,
    observe_enactment,
    unapplied,
)
from controller.record import Reason, Run, Stop, now_text


@dataclass(frozen=True)
class Seen:
    """What a pass that goes on to collect has read."""

    job: JobSummary
    reader: JobReader


def gate(run: Run) -> Seen:
    """The job to evaluate, or `Stop` with why not (the deployment is kept in `run`)."""
    if run.spec.mode == Mode.DISABLED:
        run.condition(ConditionType.READY, True, Reason.DISABLED,
                      "mode is Disabled: no evaluation")
        raise Stop("disabled")
    if run.spec.mode != Mode.ACTIVE:
        quiet(run)  # Recommend applies nothing: the deployment can wait for the evaluation
    run.deployment = run.ports.deployments.get(run.namespace, run.target)
    if run.deployment is None:
        run.condition(ConditionType.READY, False, Reason.TARGET_NOT_FOUND,
                      f"FlinkDeployment {run.namespace}/{run.target} not found")
        raise Stop("target-not-found")
    identify(run, run.deployment)
    claim(run)  # one policy per deployment (controller/owner.py)
    quiet(run)  # Active: realize re-applies a drifted target from the deployment just read
    reader = run.ports.flink(run.namespace, run.target)
    try:
        job = reader.job()
        if job is None:
            raise FlinkRestError("the JobManager lists no job")
    except FlinkRestError as e:
        raise job_unavailable(run, e) from None
    run.job = job
    observe_enactment(run, job)
    check_job(run, job)  # a restart we did not cause: no decision (controller/jobhealth.py)
    unknown = levels_unknown(run)
    exempt = edited_since_refused(run) and not unknown
    if unapplied(run) and not exempt:
        raise Stop("applying")
    if drifted(run) and not exempt:
        raise Stop("drifted")  # realize applies the step again
    if unknown:
        raise run.refuse(Reason.REFUSED, LEVELS_UNKNOWN)
    wait = waiting(run, job)
    if wait is not None:
        run.condition(ConditionType.READY, True, Reason.EVALUATING, watching(run, job))
        raise Stop(wait)
    return Seen(job, reader)


LEVELS_UNKNOWN = (
    f"spec.flinkConfiguration[{RESOURCES_KEY}] is not what flink-plugin reads (a JSON object "
    "of operator uids to cpuCores > 0 and whole taskHeapMb and managedMemoryMb): the memory "
    "levels the job runs are unknown, so nothing is decided until it is fixed or removed")


def edited_since_refused(run: Run) -> bool:
    """Admission refused our last patch, and the policy was edited since (maybe its fix).
    A committed step not yet on the deployment (`realize.unapplied`: its patch refused, or
    the controller stopped between commit and patch), or an applied one the deployment
    no longer carries (`realize.drifted`), holds every pass: realize applies it, and
    nothing new is decided from windows of a configuration the history does not name.
    Such an edit lifts that hold, as long as the memory levels the job runs can be read
    (a lower bound, say, may be the refusal's fix)."""
    scaling = run.found.condition(ConditionType.SCALING)
    return (scaling is not None and scaling.reason == Reason.PATCH_REFUSED
            and scaling.observed_generation is not None and run.generation is not None
            and scaling.observed_generation < run.generation)


def quiet(run: Run) -> None:
    """`Stop("quiet")` if no evaluation can be due and nothing else needs the job.

    Only what the status says counts, and only as the last full pass left it: any
    doubt (an error, a spec edit, a step in flight, a new target) means a full pass.
    """
    status = run.status
    last = status.last_decision
    ready = status.condition(ConditionType.READY)
    scaling = status.condition(ConditionType.SCALING)
    enactment = status.enactments[-1] if status.enactments else None
    if (last is None or status.target_uid is None
            or run.saved.observed_generation != run.generation
            or ready is None or (ready.status, ready.reason) != ("True", Reason.EVALUATING)
            or (scaling is not None
                and scaling.reason in (Reason.RECONFIGURING, Reason.STABILIZING,
                                       Reason.JOB_RESTARTED))
            or (enactment is not None and enactment.observed_downtime_s is None
                and not enactment.applied_unseen
                and status.target is not None)):  # dropped (not Active): nothing in flight
        return
    # The job is not read here: the due time without its start, which only moves it later.
    earliest = due_time(status, run.spec.metrics.window, run.spec.metrics.stabilization)
    if earliest is not None and run.now < earliest:
        run.due = earliest
        raise Stop("quiet")


def identify(run: Run, deployment: Mapping[str, Any]) -> None:
    """Bind the history to the FlinkDeployment's uid; a replaced object starts afresh.

    The history, step counter, scale-down waits and committed target describe one
    job: applied to a new deployment of the same name they would skip its waiting
    rule, compare its cache against another job's, and patch it with another job's
    target. So they go, and `status.replacedTarget` and an Event say why.
    """
    uid = (deployment.get("metadata") or {}).get("uid")
    known = run.status.target_uid
    if not uid or uid == known:
        return
    if known is None:  # first sight (or a status written before uids were tracked)
        run.status = run.status.model_copy(update={"target_uid": uid})
        return
    old = run.status
    run.status = Status(
        observed_generation=old.observed_generation, conditions=old.conditions,
        target_uid=uid,
        replaced_target=ReplacedTarget(uid=known, step=old.step, time=timestamp(run.now)),
    )
    message = (f"FlinkDeployment {run.namespace}/{run.target} was replaced (uid {known} → "
               f"{uid}): the {old.step} step(s) taken on the old one are dropped, and the "
               f"new job starts a fresh history at step 0")
    run.event("Normal", Reason.TARGET_REPLACED, message)
    run.condition(ConditionType.SCALING, False, Reason.TARGET_REPLACED, message)


def job_unavailable(run: Run, error: FlinkRestError) -> Stop:
    run.count_error("flink-rest")
    run.condition(ConditionType.READY, False, Reason.JOB_ANSWER_TOO_LARGE
                  if error.kind == "too-large" else Reason.JOB_UNAVAILABLE, str(error))
    return Stop("job-unavailable")


def watching(run: Run, job: JobSummary) -> str:
    return f"watching job {job.jid} of FlinkDeployment {run.target}"


def stable_from(status: Status, stabilization: float, started: float | None) -> float | None:
    """When the job has settled: `stabilization` after its start and the last
    reconfiguration (None: neither known)."""
    last_change = status.last_reconfiguration_time
    since = [t for t in (started, last_change) if t is not None]
    return max(since) + stabilization if since else None


def due_time(status: Status, window: float, stabilization: float,
             started: float | None = None) -> float | None:
    """The waiting rule, written once: an evaluation is due when a full metrics window lies
    after the job settled (`stable_from`) and after the last evaluation. Without the job's
    start (a quiet pass does not read the job) it is the earliest the evaluation can be
    due: a start only moves it later. None: nothing bounds it yet."""
    last = status.last_decision
    bounds = [t for t in (stable_from(status, stabilization, started),
                          last.time if last is not None else None) if t is not None]
    return max(bounds) + window if bounds else None


def waiting(run: Run, job: JobSummary) -> str | None:
    """Why no evaluation is due yet: the window must lie after stabilization."""
    metrics = run.spec.metrics
    started = job.start_time_ms / 1000.0
    settled = stable_from(run.status, metrics.stabilization, started)
    due = due_time(run.status, metrics.window, metrics.stabilization, started)
    assert settled is not None and due is not None  # the job's start bounds both
    if run.now < settled:
        run.condition(ConditionType.SCALING, True, Reason.STABILIZING,
                      f"stabilizing until {now_text(settled)} "
                      f"({metrics.stabilization:g}s after the last restart)")
        return "stabilizing"
    scaling = run.status.condition(ConditionType.SCALING)
    if scaling is not None and scaling.reason == Reason.STABILIZING:
        run.condition(ConditionType.SCALING, False, Reason.STABLE,
                      "stabilized; collecting a full metrics window")
    if run.now < due:
        run.due = due
        return "window-filling"
    return None
