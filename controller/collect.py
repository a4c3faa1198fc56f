"""Collect: the job graph as it runs, and one window of metrics for every vertex.

The graph gets its operator uids (from the FlinkDeployment's operator resources,
the policy's overrides, and the chains' operator ids) and the memory levels the
deployment holds. The metrics are all or nothing: a vertex without fresh signals
means `MetricsAvailable=False` and no decision this pass.
"""

from __future__ import annotations

from dataclasses import replace

from controller.api import ConditionType
from controller.gate import Seen, job_unavailable, watching
from controller.ports import Collected, FlinkRestError, Metrics, MetricsError, MetricsUnavailable
from controller.realize import (
    current_fields,
    effective_resources,
    memory_levels,
    verify_resize,
)
from controller.record import METRICS_REASONS, Reason, Run, Stop
from policies.model import JobGraph, VertexConfig


def collect(run: Run, seen: Seen) -> tuple[JobGraph, Collected]:
    metrics = run.ports.metrics(
        run.spec.metrics.prometheus_url or run.ports.default_prometheus_url)
    try:
        graph = job_graph(run, seen, metrics)
    except FlinkRestError as e:
        raise job_unavailable(run, e) from None
    except MetricsError as e:  # the endpoint's own fault, named as such
        raise metrics_unavailable(run, MetricsUnavailable(str(e), e.kind)) from None
    run.condition(ConditionType.READY, True, Reason.EVALUATING, watching(run, seen.job))
    window = run.spec.metrics.window
    collected = metrics.observe(graph, seen.job.jid, run.now, window,
                                run.spec.metrics.resolution)
    if not isinstance(collected, Collected):
        raise metrics_unavailable(run, collected)
    run.condition(ConditionType.METRICS_AVAILABLE, True, Reason.METRICS_FRESH,
                  f"all {len(graph.vertices)} vertices reported over the last {window:g}s")
    if verify_resize(run, graph, collected.cache_capacity_bytes):
        # The resize fell back: this window ran at other levels than the graph says, and
        # realize restarts the job with the step.
        raise Stop("resize-unverified")
    # Since when the tasks run, their block caches refilled from empty (policies.warmup):
    # the job's start, or the last step's commit (an in-place rescale keeps the start).
    restarted = seen.job.start_time_ms / 1000.0
    if run.status.last_reconfiguration_time is not None:
        restarted = max(restarted, run.status.last_reconfiguration_time)
    return graph, replace(collected, observation=replace(collected.observation,
                                                         restarted=restarted))


def metrics_unavailable(run: Run, why: MetricsUnavailable) -> Stop:
    run.count_error("metrics")
    run.condition(ConditionType.METRICS_AVAILABLE, False,
                  METRICS_REASONS.get(why.kind, Reason.METRICS_UNAVAILABLE), why.reason)
    return Stop("metrics-unavailable")


def job_graph(run: Run, seen: Seen, metrics: Metrics) -> JobGraph:
    """The job graph with uids attached and memory levels as the deployment has them."""
    deployment = run.deployment or {}
    candidates = [*(current_fields(deployment).operator_resources or {}),
                  *(o.operator_uid for o in run.spec.cpu.overrides if o.operator_uid)]
    try:
        chains = metrics.operator_ids(seen.job.jid, run.now)
    except MetricsError as e:  # only uids of chained operators need it; heads still match
        if e.kind in METRICS_REASONS:  # but a misbehaving endpoint is not asked again
            raise
        chains = {}
    graph = seen.reader.job_graph(seen.job.jid, candidates, chains)
    levels = memory_levels(deployment, graph, run.spec.memory.base_managed_memory,
                           effective_resources(run.status, deployment))
    return graph.with_configuration(
        {v.id: VertexConfig(v.parallelism, levels[v.id]) for v in graph.vertices}
    )

