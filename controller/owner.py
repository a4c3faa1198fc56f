"""One policy per FlinkDeployment: the owner annotation.

Two policies that patch one deployment fight (each step of one undoes the other's,
and on a real cluster every flip is a savepoint restart); under one field manager
server-side apply cannot tell them apart. So an Active policy claims its target
before anything else (Recommend policies patch nothing and may share a deployment):
the deployment carries `hybridscaler.dev/owner: <policy>/<uid>`. An Active policy
that finds another live owner there gets Ready=False/TargetOwnedElsewhere
(one Warning Event naming the owner, as the condition turns) and patches nothing.
The annotation lives on the deployment, so it survives restarts of the controller;
when the owner is deleted (or replaced: a new uid), leaves Active, or targets another
deployment, the next policy's pass takes over.
Claims are compare-and-swap on the deployment's resourceVersion, so two policies
claiming at once cannot both win.
"""

from __future__ import annotations

from controller.api import ConditionType, Mode
from controller.record import Reason, Run, Stop

OWNER_ANNOTATION = "hybridscaler.dev/owner"


def me(run: Run) -> str:
    uid = (run.policy.metadata.model_extra or {}).get("uid") or ""
    return f"{run.name}/{uid}"


def claim(run: Run) -> None:
    """Own `run.deployment`, or `Stop` with Ready=False naming the owner."""
    owners = run.ports.owners
    deployment = run.deployment
    if owners is None or deployment is None:
        return  # the twin and unit fakes: one policy per job by construction
    if run.spec.mode != Mode.ACTIVE:
        return  # Recommend patches nothing, so it cannot fight: any number may watch
    meta = deployment.get("metadata") or {}
    current = str((meta.get("annotations") or {}).get(OWNER_ANNOTATION) or "")
    mine = me(run)
    if current == mine:
        return
    if current:
        name, _, uid = current.partition("/")
        if name != run.name and owners.alive(run.namespace, name, uid, run.target):
            blocked(run, name)
    # Unowned, or its owner is gone (deleted, or replaced by a new object of its name).
    if not owners.claim(run.namespace, run.target, mine, meta.get("resourceVersion")):
        # Someone else changed the deployment meanwhile: the next pass looks again.
        run.deployment = None
        raise Stop("claim-lost")


def blocked(run: Run, owner: str) -> None:
    run.deployment = None  # realize patches nothing
    if run.status.target is not None:  # nor later, from a target decided elsewhere
        run.status = run.status.model_copy(update={"target": None})
    run.condition(ConditionType.READY, False, Reason.TARGET_OWNED_ELSEWHERE,
                  f"FlinkDeployment {run.namespace}/{run.target} is scaled by "
                  f"HybridScalingPolicy {run.namespace}/{owner} (annotation "
                  f"{OWNER_ANNOTATION}); this policy patches nothing while that one exists")
    raise Stop("owned-elsewhere")
