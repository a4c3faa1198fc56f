"""Job health: a job that restarts without a step of ours is not measured.

A failover, or a restart loop (a new job id every few seconds), makes every metrics
window a mix of outage and catch-up: busyness, rates and backlog say nothing about
the configuration, and a decision from them would be noise that costs a restart. So
each full pass compares the job it sees (id, start, state, and Flink's numRestarts,
which alone shows a failover in place between two passes) with the one the last full
pass saw (`status.job`). A change that no step of ours explains (no reconfiguration
since that job was first seen so, nor a restarting step under way then: the job that ran
before it seen going down, and a job started since) counts as an unexplained restart: a Warning
Event when the streak starts, `Scaling=False/JobRestarted` saying how many, and no
decision until a full window (after the stabilization) lies after the last restart.
"""

from __future__ import annotations

from controller.api import ConditionType, ObservedJob
from controller.ports import JobSummary
from controller.record import Reason, Run, Stop, now_text
from policies.restart_cost import Enactment

RUNNING = "RUNNING"  # the JobManager's state of a job that runs


def check_job(run: Run, job: JobSummary) -> None:
    """Record the job seen; `Stop` while the last unexplained restart is too recent."""
    # The job's start (Flink's last-modification is not used: the twin reports it as now).
    restarted = job.start_time_ms / 1000.0
    seen = run.status.job
    count, last, absorbed = 0, None, False
    if seen is not None:
        count, last = seen.unexplained_restarts, seen.last_unexplained_restart_time
        # A new id or start, a running job caught restarting (a job that was still starting
        # changes state once, when it runs: no restart), or a failover in place between
        # two passes, which only the job's numRestarts shows.
        failed_over = (seen.id == job.jid and job.restarts is not None
                       and seen.restarts is not None and job.restarts > seen.restarts)
        changed = (seen.id != job.jid or restarted > seen.restarted_time + 1e-3
                   or (seen.state == RUNNING and job.state != RUNNING) or failed_over)
        since = run.status.last_reconfiguration_time
        ours = since is not None and (since >= seen.seen_time - 1e-3
                                      or _second_stage(run, seen, restarted, since))
        if changed and not ours:
            # A failover in place keeps the job's start: it happened by now at the latest.
            count, last = count + 1, run.now if failed_over else max(restarted, seen.seen_time)
            scaling = run.status.condition(ConditionType.SCALING)
            if scaling is None or scaling.reason != Reason.JOB_RESTARTED:
                run.event("Warning", Reason.JOB_RESTARTED, _said(run, seen, job))
        elif changed:
            count, last = 0, None  # our own step restarted it
        else:
            # Our in-place rescale keeps the job's id and start, so it shows no change:
            # once it has been seen done, it explains nothing that comes later.
            absorbed = ours and _in_place_step_done(run)
    if count and job.state != RUNNING:  # still restarting: nothing to measure now
        last = run.now
    observed = ObservedJob(id=job.jid, state=job.state[:32], restarted_time=restarted,
                           seen_time=run.now, restarts=job.restarts,
                           unexplained_restarts=count, last_unexplained_restart_time=last)
    if (seen is not None and not absorbed
            and observed.model_copy(update={"seen_time": seen.seen_time}) == seen):
        observed = seen  # nothing new: a waiting pass writes nothing (seen_time is first sight)
    run.status = run.status.model_copy(update={"job": observed})
    if last is None:
        return
    metrics = run.spec.metrics
    quiet_until = last + metrics.stabilization + metrics.window
    if run.now < quiet_until:
        run.due = quiet_until
        run.condition(ConditionType.SCALING, False, Reason.JOB_RESTARTED,
                      f"job {job.jid} restarted {count} time(s) in a row without a step of "
                      f"this policy (state {job.state}); no decision before "
                      f"{now_text(quiet_until)}, a full window after the last restart")
        raise Stop("job-restarted")
    if count:  # a full window passed since: the streak is over
        run.status = run.status.model_copy(update={"job": observed.model_copy(
            update={"unexplained_restarts": 0, "last_unexplained_restart_time": None})})


def _second_stage(run: Run, seen: ObservedJob, restarted: float, since: float) -> bool:
    """A restart of ours seen in two stages: the job that ran before our last step seen
    going down after it (a stop-with-savepoint's FINISHED), then a job started since. Only
    for a step that restarts the job, or a re-apply of one since (an in-place rescale or a
    resize keeps its start, so a later failure of that job would pass for it); a new job
    that fails in turn is not."""
    last = run.status.enactments[-1] if run.status.enactments else None
    if last is None or last.applied_time is None:
        return False
    restarts = (last.kind not in (Enactment.IN_PLACE.value, Enactment.RESIZE.value)
                or since > last.applied_time + 1e-3)  # a re-apply over a drift restarts it
    return (restarts and seen.state != RUNNING and seen.seen_time >= since - 1e-3
            and seen.restarted_time <= since + 1e-3 and restarted >= since - 1e-3)


def _in_place_step_done(run: Run) -> bool:
    """Our last step kept the job running and is done: an in-place rescale seen running
    again, or a resize in place once asked for (it never stops the job), so a later
    failover is not taken for it."""
    last = run.status.enactments[-1] if run.status.enactments else None
    if last is None or last.applied_time is None:
        return False
    since = run.status.last_reconfiguration_time
    if since is not None and since > last.applied_time + 1e-3:
        return False  # applied again over a drift since: that patch restarts the job
    if last.kind == Enactment.RESIZE.value:
        return True
    return last.kind == Enactment.IN_PLACE.value and last.observed_downtime_s is not None


def _said(run: Run, seen: ObservedJob, job: JobSummary) -> str:
    what = (f"job {seen.id} was replaced by job {job.jid}" if seen.id != job.jid
            else f"job {job.jid} restarted (state {job.state})")
    return (f"{what} on FlinkDeployment {run.namespace}/{run.target} without a step of this "
            f"policy (a failover or a restart loop); windows holding a restart are not "
            f"used for decisions")
