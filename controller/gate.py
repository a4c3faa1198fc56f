"""Gate: whether this pass evaluates at all.

In order: the mode (Disabled evaluates nothing), the FlinkDeployment, its job on
the JobManager, and the waiting rule: a full metrics window must lie after the
job's start, after the last reconfiguration plus `spec.metrics.stabilization`, and
after the last evaluation. Most passes stop here, having read only the
FlinkDeployment and `/jobs/overview`: no job graph, no Prometheus.
"""

from __future__ import annotations

from dataclasses import dataclass

from controller.api import ConditionType, Mode
from controller.ports import FlinkRestError, JobReader, JobSummary
from controller.realize import observe_enactment
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
    run.deployment = run.ports.deployments.get(run.namespace, run.target)
    if run.deployment is None:
        run.condition(ConditionType.READY, False, Reason.TARGET_NOT_FOUND,
                      f"FlinkDeployment {run.namespace}/{run.target} not found")
        raise Stop("target-not-found")
    reader = run.ports.flink(run.namespace, run.target)
    try:
        job = reader.job()
        if job is None:
            raise FlinkRestError("the JobManager lists no job")
    except FlinkRestError as e:
        raise job_unavailable(run, e) from None
    observe_enactment(run, job)
    wait = waiting(run, job)
    if wait is not None:
        run.condition(ConditionType.READY, True, Reason.EVALUATING, watching(run, job))
        raise Stop(wait)
    return Seen(job, reader)


def job_unavailable(run: Run, error: FlinkRestError) -> Stop:
    run.count_error("flink-rest")
    run.condition(ConditionType.READY, False, Reason.JOB_UNAVAILABLE, str(error))
    return Stop("job-unavailable")


def watching(run: Run, job: JobSummary) -> str:
    return f"watching job {job.jid} of FlinkDeployment {run.target}"


def waiting(run: Run, job: JobSummary) -> str | None:
    """Why no evaluation is due yet: the window must lie after stabilization."""
    metrics = run.spec.metrics
    started = job.start_time_ms / 1000.0
    last_change = run.status.last_reconfiguration_time
    stable_from = max(started, last_change or started) + metrics.stabilization
    last = run.status.last_decision
    due = max(stable_from, last.time if last is not None else stable_from) + metrics.window
    if run.now < stable_from:
        run.condition(ConditionType.SCALING, True, Reason.STABILIZING,
                      f"stabilizing until {now_text(stable_from)} "
                      f"({metrics.stabilization:g}s after the last restart)")
        return "stabilizing"
    scaling = run.status.condition(ConditionType.SCALING)
    if scaling is not None and scaling.reason == Reason.STABILIZING:
        run.condition(ConditionType.SCALING, False, Reason.STABLE,
                      "stabilized; collecting a full metrics window")
    if run.now < due:
        return "window-filling"
    return None
