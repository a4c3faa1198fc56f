"""One pass of the loop for one policy: gate → collect → decide → place → realize → record.

Each stage is a function in the file of its name; they talk to the world only
through the ports (controller/ports.py): the real adapters in the operator, the
twin's in-memory ones in `hybrid-scaler simulate`, fakes in the unit tests. A
stage that ends the pass early raises `Stop`; realize and record run on every pass.

Crash safety. `decide.commit` saves the step (decision, history, placement, the
desired owned fields as `status.target`, Scaling=Reconfiguring) *before*
`realize` patches the FlinkDeployment, and `record` marks it applied
(Scaling=Stabilizing) after. Every Active pass applies the target where the
deployment differs, so a controller killed in between finishes the step on its
next pass, never decides it again (the gate decides nothing while a committed step
is not on the deployment, `gate.applying`), and applying twice changes nothing.

One writer. Every status write is conditional on the policy's resourceVersion as
the pass read it (the StatusStore port). If anything else wrote in between (a
second active replica, a spec edit), the write fails with `StatusConflict` and
the whole pass runs again on the policy as re-read: a step is never decided from
stale history, a commit that lost the race is never applied, and `realize`
confirms the status is current before it applies a target.

Failure. Any other exception ends the pass with `Ready=False`, reason
InternalError, a short message naming the stage (never the exception's text,
which may quote a remote answer), and one Warning Event and one logged traceback
per distinct error.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
import traceback
from collections import OrderedDict

from pydantic import ValidationError

from controller import telemetry
from controller.api import ConditionType, HybridScalingPolicy, Status, parse_policy
from controller.collect import collect
from controller.decide import commit, decide
from controller.gate import gate
from controller.place import place
from controller.ports import Ports, StatusConflict
from controller.realize import realize
from controller.record import Pass, Reason, Run, Stop, record, with_condition

log = logging.getLogger(__name__)
# Passes run per policy after a status write conflicts; then the pass is given up and
# the next one starts from the policy as last re-read.
CONFLICT_ATTEMPTS = 3


def reconcile(policy: HybridScalingPolicy, generation: int | None, status: Status,
              ports: Ports, attempts: int = CONFLICT_ATTEMPTS) -> Pass:
    """One pass, run again on fresh status after a conflicting write (at most `attempts`)."""
    for attempt in range(1, attempts + 1):
        try:
            return one_pass(policy, generation, status, ports)
        except StatusConflict:
            telemetry.count(telemetry.ERRORS, namespace_of(policy), policy.metadata.name,
                            "conflict")
            obj, status = ports.store.latest()
            log.info("%s/%s: status changed under pass %d/%d; %s",
                     namespace_of(policy), policy.metadata.name, attempt, attempts,
                     "re-running it on the policy as re-read" if attempt < attempts
                     else "giving this pass up")
            try:
                policy = parse_policy(obj)
            except ValidationError:
                break  # the next pass reports the invalid spec
            generation = (obj.get("metadata") or {}).get("generation")
    return Pass("conflict", status)


def one_pass(policy: HybridScalingPolicy, generation: int | None, status: Status,
             ports: Ports) -> Pass:
    started = time.perf_counter()
    run = Run(policy, generation, status, ports)
    try:
        try:
            try:
                seen = gate(run)  # mode, FlinkDeployment (its uid), job, waiting rule
                graph, collected = collect(run, seen)  # job graph, one metrics window
                evaluation = decide(run, graph, collected)  # spec.policy
                placed = place(run, graph, evaluation)  # TaskManagers; Recommend stops here
                commit(run, graph, collected, evaluation, placed)  # status.target, saved
            except Stop as stop:
                run.outcome = stop.outcome
            done = record(run, realize(run))  # target onto the deployment; Events, status
        except (StatusConflict, Stop):
            raise
        except Exception as error:
            return internal_error(run, error)
        ERRORS_LOGGED.pop(key_of(run), None)
        return done
    finally:
        telemetry.RECONCILE_SECONDS.observe(time.perf_counter() - started)


# Per policy, the id of the last error logged with its traceback (bounded, oldest out).
ERRORS_LOGGED: OrderedDict[str, str] = OrderedDict()
ERRORS_LOGGED_MAX = 10_000


def internal_error(run: Run, error: Exception) -> Pass:
    """`Ready=False/InternalError` on the status last saved (nothing half-decided is kept)."""
    frames = traceback.extract_tb(error.__traceback__)
    stage = frames[1].name if len(frames) > 1 else "loop"  # [0] is one_pass
    where = frames[-1] if frames else None
    signature = f"{type(error).__name__}|{stage}|" + (
        f"{os.path.basename(where.filename)}:{where.lineno}" if where else "")
    error_id = hashlib.sha256(signature.encode()).hexdigest()[:8]
    message = (f"{type(error).__name__} in the {stage} stage (error {error_id}); the "
               f"controller's log has the details; retrying every resolution")
    key = key_of(run)
    if ERRORS_LOGGED.get(key) != error_id:
        log.error("%s: pass failed in %s (error %s)", key, stage, error_id, exc_info=error)
        ERRORS_LOGGED[key] = error_id
        ERRORS_LOGGED.move_to_end(key)
        while len(ERRORS_LOGGED) > ERRORS_LOGGED_MAX:
            ERRORS_LOGGED.popitem(last=False)
    else:
        log.debug("%s: pass failed again in %s (error %s)", key, stage, error_id)
    run.count_error("internal")
    ready = run.saved.condition(ConditionType.READY)
    if ready is None or (ready.reason, ready.message) != (Reason.INTERNAL_ERROR, message):
        run.event("Warning", Reason.INTERNAL_ERROR, message)
    run.status = with_condition(run.saved, ConditionType.READY, False, Reason.INTERNAL_ERROR,
                                message, run.now, run.generation).model_copy(
        update={"observed_generation": run.generation})
    run.save()
    return Pass("internal-error", run.status)


def key_of(run: Run) -> str:
    return f"{run.namespace}/{run.name}"


def namespace_of(policy: HybridScalingPolicy) -> str:
    return policy.metadata.namespace or "default"
