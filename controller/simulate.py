"""The closed loop of `hybrid-scaler simulate`: the controller's own pass, driven over the twin.

Every `resolution` (5 s) of virtual time the twin advances and `loop.reconcile`
runs once, with the production stages (gate, collect, decide, place, realize,
record) on the in-memory ports of `controller/adapters/twin.py`. So the waiting
rules, the placement, the refusals and the applied fields are the ones users run;
only the cluster is the twin. The policy is the paper's setup (§5): spec defaults
(2-minute window, 1-minute stabilization), Active, sinks pinned, the paper's
TaskManager, no catch-up reserve (`PAPER_CATCH_UP_S`), and `spec.policy` the policy
under test. The job has run for one stabilization
when the experiment starts, so the first decision ends the first 2-minute window.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from controller.adapters.twin import flink_deployment, twin_ports
from controller.api import (
    ConditionType,
    HybridScalingPolicy,
    HybridScalingPolicySpec,
    MetricsSpec,
    Mode,
    ObjectMeta,
    ResizeSpec,
    SecretKeyRef,
    Status,
    TargetRef,
    TaskManagerSpec,
)
from controller.loop import reconcile
from controller.realize import current_fields, requested_pods
from controller.record import bill_of
from policies.decision import Decision
from policies.spec import CpuScaling, MemoryScaling, ParallelismOverride, Policy
from simulator.model import JobModel
from simulator.results import (
    GRANULARITY_S,
    STABILIZATION_S,
    WINDOW_S,
    PolicyName,
    RunResult,
    Step,
    capacity,
    finish,
    sample,
)
from simulator.twin import BASE_MANAGED_MIB, Twin, paper_resources

NAMESPACE, NAME = "simulate", "job"
# The paper sizes for the target rate alone (its generators are capped at the target), so
# no catch-up reserve: DS2 sees the target through the lag's growth. The twin's sources do
# drain their lag after a restart, with whatever headroom the configuration has.
PAPER_CATCH_UP_S = 0.0


def closed_loop_policy(model: JobModel, policy: PolicyName, window_s: float = WINDOW_S,
                       stabilization_s: float = STABILIZATION_S, resize: bool = True,
                       task_manager: TaskManagerSpec | None = None,
                       catch_up_duration: float | None = PAPER_CATCH_UP_S) -> HybridScalingPolicy:
    """The paper's setup as a policy: spec defaults, Active, sinks pinned; `resize`: memory
    steps resized in place through flink-plugin's agents (spec.resize); `task_manager`:
    other TaskManager bounds or a menu of shapes than the defaults; `catch_up_duration`:
    spec.cpu.catchUpDuration (None: the spec's default)."""
    pinned = tuple(
        ParallelismOverride(operator_uid=o.uid, min_parallelism=o.initial_parallelism,
                            max_parallelism=o.initial_parallelism)
        for o in model.operators if o.fixed_parallelism
    )
    spec = HybridScalingPolicySpec(
        target_ref=TargetRef(name=NAME),
        mode=Mode.ACTIVE,
        policy=Policy(policy),
        metrics=MetricsSpec(window=window_s, stabilization=stabilization_s,
                            resolution=GRANULARITY_S),
        cpu=CpuScaling(overrides=pinned) if catch_up_duration is None else
        CpuScaling(overrides=pinned, catch_up_duration=catch_up_duration),
        memory=MemoryScaling(base_managed_memory=f"{BASE_MANAGED_MIB:g}Mi"),
        resize=ResizeSpec(token=SecretKeyRef(name="resize-token", key="token"))
        if resize else None,
        task_manager=task_manager or TaskManagerSpec(),
    )
    return HybridScalingPolicy(metadata=ObjectMeta(name=NAME, namespace=NAMESPACE), spec=spec)


def note_skew(result: RunResult, decision: Decision | None, time: float) -> None:
    """When a decision first named each vertex skewed (its `skew` findings)."""
    for finding in decision.skew if decision is not None else ():
        result.skew_named.setdefault(finding.vertex_id, time)


def note_bill(result: RunResult, deployment: Mapping[str, Any], hsp: HybridScalingPolicy,
              status: Status, time: float) -> None:
    """The price of the pods the deployment requests from now on (`RunResult.bill`); as
    `pods_now`, the placement's TaskManagers stand in for replicas left unset."""
    placement = status.placement
    pods = requested_pods(current_fields(deployment), hsp.spec.cost,
                          placement.task_managers if placement is not None else None)
    if pods is not None:
        result.bill_at(time, pods.price)


def run(model: JobModel, policy: PolicyName, duration_s: float = 1200.0, seed: int = 0,
        window_s: float = WINDOW_S, stabilization_s: float = STABILIZATION_S,
        resize: bool = True, task_manager: TaskManagerSpec | None = None,
        catch_up_duration: float | None = PAPER_CATCH_UP_S) -> RunResult:
    """Run `policy` against a fresh twin of `model` for `duration_s` of virtual time;
    `resize`: the deployment runs flink-plugin's resizable backend, so a memory-only step
    is resized in place (no restart) rather than restarted; `catch_up_duration` as in
    `closed_loop_policy`."""
    twin = Twin(model, seed=seed)
    # The job has run past its stabilization when the experiment starts, so the first
    # decision ends the first window, as in the paper's setup.
    ports, deployments, resizer = twin_ports(
        twin, flink_deployment(model, NAME, NAMESPACE, resizable=resize),
        job_started_s=-stabilization_s)
    hsp = closed_loop_policy(model, policy, window_s, stabilization_s, resize, task_manager,
                             catch_up_duration)
    status = Status()
    result = RunResult(policy, model)
    note_bill(result, deployments.deployment, hsp, status, twin.time)
    while twin.time + 1e-9 < duration_s:
        twin.advance(min(GRANULARITY_S, duration_s - twin.time))
        result.samples.append(sample(twin))
        restarts, resizes = len(deployments.downtimes), len(resizer.resizes)
        evaluated = {vid: c.parallelism for vid, c in twin.configuration.items()}
        decided = status.last_decision
        pods_cpu = twin.cpu_budget
        status = reconcile(hsp, 1, status, ports).status
        note_bill(result, deployments.deployment, hsp, status, twin.time)
        if status.last_decision is not None and status.last_decision != decided:
            result.evaluations.append((twin.time, MappingProxyType(evaluated)))
        skewed = status.condition(ConditionType.SKEWED)
        if result.skewed_at_s is None and skewed is not None and skewed.status == "True":
            result.skewed_at_s = twin.time
        note_skew(result, status.last_decision, twin.time)
        restarted = len(deployments.downtimes) > restarts
        if restarted or len(resizer.resizes) > resizes:
            # A pass takes no virtual time: the window before the step is still the last one.
            rate_before = twin.achieved_rate(window_s)
            cores, memory = paper_resources(model, twin.configuration)
            decision = status.last_decision
            result.steps.append(Step(
                twin.time, deployments.downtimes[-1] if restarted else 0.0,
                twin.configuration, cores, memory,
                rate_before, capacity(model, twin.configuration, seed=twin.seed),
                decision.reason if decision is not None else "", pods_cpu))
    bill = None if status.placement is None else bill_of(status.placement.pods)
    if status.placement is not None and bill is not None:
        result.pods = (bill, status.placement.shape.name(),
                       status.placement.solver_status == "OPTIMAL")
    finish(result, twin, window_s)
    return result
