"""kopf handlers: thin glue from HybridScalingPolicy objects to `loop.reconcile`.

One daemon per policy runs a loop pass every `spec.metrics.resolution`, or sooner
when the pass says an evaluation becomes due before then; the loop itself decides
whether a full metrics window has passed. kopf keeps the daemon's
`body` live, so a `kubectl apply` of an edited spec is read by the next pass. The
status is the loop's alone: read from the object when the daemon starts (that is
how a restarted controller resumes) and written by the loop through the status
subresource.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from functools import cache, lru_cache
from typing import Any

import kopf
from kubernetes import client
from pydantic import ValidationError

from controller import api, telemetry
from controller.adapters import dial, secrets
from controller.adapters.agents import AgentResizer, TaskManagerPods, kube_task_managers
from controller.adapters.flink_rest import FlinkRest
from controller.adapters.kube import (
    KubeDeployments,
    KubeEvents,
    KubeOperatorDefaults,
    KubeOwners,
    KubeStatusStore,
)
from controller.adapters.outbound import AllowList
from controller.adapters.prometheus import Prometheus, PrometheusMetrics, RefusedMetrics
from controller.loop import reconcile
from controller.operator import shard
from controller.operator.fairness import FairPool, pass_budget
from controller.operator.settings import (
    EVENT_NAME_PREFIX,
    PROMETHEUS_CLIENTS,
    REPORTING_COMPONENT,
    RUNTIME,
    configure,
    reporting_instance,
)
from controller.ports import Ports, ResizeFailed
from controller.record import Reason, with_condition

log = logging.getLogger(__name__)
RUNNING: set[str] = set()  # namespace/name of policies with a live loop, for the probe
RESOLUTIONS: dict[str, float] = {}  # namespace/name -> spec.metrics.resolution (liveness)
# How often a policy whose spec does not parse is looked at again: the default resolution.
UNPARSED_PERIOD_S = api.MetricsSpec().resolution
# A pass waiting for the window sleeps until the evaluation can be due (plus this, so the
# next pass's clock is past it), if that comes before the next resolution.
DUE_SLACK_S = 0.05


@cache
def _pool() -> FairPool:
    return FairPool(RUNTIME.workers)


@cache
def _objects() -> client.CustomObjectsApi:
    return client.CustomObjectsApi()


@cache
def _core() -> client.CoreV1Api:
    return client.CoreV1Api()


@cache
def _allowed() -> AllowList:
    return AllowList(RUNTIME.allowed_prometheus, always=[RUNTIME.prometheus_url])


# One client per distinct URL, the least recently used dropped.
@lru_cache(maxsize=PROMETHEUS_CLIENTS)
def _prometheus(url: dial.Url, field: str) -> Prometheus:
    # The bearer token goes to the operator's own Prometheus only, never to a URL a
    # tenant wrote (even an allowed one): that would hand the token to the tenant.
    own = url.endpoint == dial.parse_url(RUNTIME.prometheus_url, OWN_FIELD).endpoint
    return Prometheus(url, ca_file=RUNTIME.prometheus_ca_file, field=field,
                      token_file=RUNTIME.prometheus_token_file if own else None)


OWN_FIELD = "--prometheus-url"
TENANT_FIELD = "spec.metrics.prometheusUrl"


def _metrics(raw: str, namespace: str = "", spec: api.MetricsSpec | None = None,
             read: secrets.ReadSecret | None = None) -> PrometheusMetrics | RefusedMetrics:
    """Parse once; the allow-list and the request both read that parse. The policy's
    credentials (`spec`) are read from its own `namespace` only once the URL is allowed."""
    field = OWN_FIELD if raw == RUNTIME.prometheus_url else TENANT_FIELD
    try:
        url = dial.parse_url(raw, field)
    except dial.UrlRefused as e:
        return RefusedMetrics(f"{e}; it was not contacted")
    refusal = _allowed().refusal(url, field)
    if refusal:
        return RefusedMetrics(refusal)
    prometheus = _prometheus(url, field)
    if spec is None or field == OWN_FIELD:  # the operator's Prometheus: its own token
        return PrometheusMetrics(prometheus)
    try:
        header = secrets.authorization(read or secrets.kube_reader(_core()), namespace, spec)
    except secrets.CredentialsError as e:
        return RefusedMetrics(f"{e}; Prometheus was not contacted", "credentials")
    return PrometheusMetrics(prometheus.authorized(header))


def _resizer(namespace: str, deployment: str, spec: api.ResizeSpec,
             read: secrets.ReadSecret | None = None,
             pods: TaskManagerPods | None = None) -> AgentResizer:
    """The agents of the deployment's TaskManager pods, with the policy's token (read from
    its own namespace each pass, so a rotated Secret is picked up)."""
    try:
        token = secrets.value(read or secrets.kube_reader(_core()), namespace, spec.token,
                              "spec.resize.token")
    except secrets.CredentialsError as e:
        raise ResizeFailed(str(e), "credentials") from None
    return AgentResizer((pods or kube_task_managers(_core()))(namespace, deployment),
                        spec.port, token, RUNTIME.resize_agent_url, namespace, deployment)


def _flink(namespace: str, name: str) -> FlinkRest:
    return FlinkRest(RUNTIME.flink_rest_url.format(namespace=namespace, name=name))


@cache
def _operator_defaults(where: str) -> KubeOperatorDefaults:
    """One reader, one cache, for every policy."""
    return KubeOperatorDefaults(_core(), where)


def ports_for(body: Mapping[str, Any], store: KubeStatusStore,
              spec: api.MetricsSpec | None = None) -> Ports:
    namespace = str((body.get("metadata") or {}).get("namespace") or "default")
    return Ports(
        deployments=KubeDeployments(_objects(), hold=RUNTIME.hold_apply_dir),
        store=store,
        events=KubeEvents(_core(), body, REPORTING_COMPONENT, reporting_instance(),
                          EVENT_NAME_PREFIX),
        flink=_flink,
        metrics=lambda raw: _metrics(raw, namespace, spec),
        default_prometheus_url=RUNTIME.prometheus_url,
        owners=KubeOwners(_objects()),
        resizers=_resizer,
        operator_defaults=(None if RUNTIME.flink_operator_config is None
                           else _operator_defaults(RUNTIME.flink_operator_config)),
    )


def in_shard(namespace: str | None, **_: Any) -> bool:
    """kopf's filter: only this process' shard gets a daemon (and its finalizer)."""
    return shard.shard_of(namespace or "", RUNTIME.shards) == RUNTIME.shard_index


def drop_stale_finalizers(meta: Mapping[str, Any], namespace: str, name: str) -> None:
    """Remove the finalizers a previous sharding left (each tested, so a concurrent
    change of the list fails the patch instead of removing the wrong entry)."""
    finalizers = list(meta.get("finalizers") or [])
    stale = set(shard.stale_finalizers(finalizers, RUNTIME.shard_index, RUNTIME.shards))
    if not stale:
        return
    ops: list[dict[str, Any]] = []
    for i in reversed(range(len(finalizers))):
        if finalizers[i] in stale:
            path = f"/metadata/finalizers/{i}"
            ops += [{"op": "test", "path": path, "value": finalizers[i]},
                    {"op": "remove", "path": path}]
    _objects().patch_namespaced_custom_object(
        api.GROUP, api.VERSION, namespace, api.PLURAL, name, ops,
        _content_type="application/json-patch+json")
    log.info("%s/%s: removed finalizers of other shards: %s", namespace, name, sorted(stale))


kopf.on.startup()(configure)


@kopf.daemon(api.GROUP, api.VERSION, api.PLURAL, cancellation_timeout=10.0, when=in_shard)
async def policy_loop(body: kopf.Body, meta: kopf.Meta, namespace: str | None, name: str | None,
                      stopped: kopf.DaemonStopped, **_: Any) -> None:
    key = f"{namespace}/{name}"
    RUNNING.add(key)
    # The status and the resourceVersion its writes are conditional on, read together.
    store = KubeStatusStore(_objects(), body)
    status = store.last
    try:
        while not stopped:
            resolution = period = UNPARSED_PERIOD_S
            if shard.stale_finalizers(meta.get("finalizers") or [], RUNTIME.shard_index,
                                      RUNTIME.shards):
                try:
                    await _pool().run(namespace or "default", drop_stale_finalizers, meta,
                                      namespace or "default", name or "")
                except Exception as e:  # the list changed meanwhile: next pass tries again
                    log.warning("%s: could not remove other shards' finalizers: %s", key, e)
            try:
                # The status is the loop's (`status`, above): validating kopf's copy of it
                # (its whole history) every pass would be wasted work.
                policy = api.parse_policy({k: v for k, v in body.items() if k != "status"})
                resolution = period = policy.spec.metrics.resolution
                RESOLUTIONS[key] = resolution
                result = await _pool().run(
                    namespace or "default", reconcile, policy, meta.get("generation"), status,
                    ports_for(body, store, policy.spec.metrics),
                    budget_s=pass_budget(resolution, RUNTIME.pass_budget_max_s))
                status = result.status
                log.debug("%s: %s", key, result.outcome)
                if result.due is not None:  # wake when the evaluation can be due
                    period = min(resolution, max(0.0, result.due - time.time()) + DUE_SLACK_S)
            except dial.Stopping:
                return  # the process is stopping; nothing of this pass is written
            except ValidationError as e:
                # The CRD's schema and CEL rules should have refused it; say so anyway.
                telemetry.count(telemetry.ERRORS, namespace or "default", name or "", "spec")
                log.error("%s: invalid spec: %s", key, e)
                invalid = with_condition(
                    status, api.ConditionType.READY, False, Reason.INVALID_SPEC, str(e)[:1000],
                    time.time(), meta.get("generation"))
                if invalid != status:
                    try:
                        await _pool().run(namespace or "default", store.save, invalid)
                        status = invalid
                    except Exception:
                        log.exception("%s: could not record the invalid spec", key)
                        status = store.last  # re-read if the write conflicted
            except Exception:
                telemetry.count(telemetry.ERRORS, namespace or "default", name or "", "loop")
                log.exception("%s: loop pass failed; retrying next period", key)
                # A pass may have committed a step before failing: continue from that.
                status = store.last
            await stopped.wait(period)
    finally:
        RUNNING.discard(key)
        RESOLUTIONS.pop(key, None)
        telemetry.forget(namespace or "default", name or "")


@kopf.on.probe(id="policies")
def running_policies(**_: Any) -> int:
    return len(RUNNING)


# No pass finished for this many of the shortest resolution, while passes were due:
# the process can no longer evaluate (liveness fails, the kubelet restarts it).
STALL_RESOLUTIONS = 6


def liveness_problem() -> str | None:
    """Why this process can no longer evaluate, or None (see `evaluating`)."""
    if not RUNNING:
        return None
    pool = _pool()
    if pool.wedged():
        return (f"every worker it can use ({pool.stuck()} of {pool.workers}) is stuck in a "
                f"pass past its deadline")
    shortest = min(RESOLUTIONS.values(), default=UNPARSED_PERIOD_S)
    stalled = pool.stalled_for()
    if stalled > STALL_RESOLUTIONS * shortest + 2 * pass_budget(shortest):
        return (f"no pass finished in {stalled:.0f}s while passes were due "
                f"(the shortest resolution is {shortest:g}s)")
    return None


def check_liveness() -> str:
    """"ok", or kopf.PermanentError (the probe fails: /healthz answers 500)."""
    problem = liveness_problem()
    if problem:
        log.error("liveness: %s", problem)
        raise kopf.PermanentError(problem)
    return "ok"


@kopf.on.probe(id="evaluating")
def evaluating(**_: Any) -> str:
    """/healthz answers 500 when no pass can run: every worker stuck, or none finished in
    several resolutions while passes were due."""
    return check_liveness()


@kopf.on.cleanup()
def end_outbound_calls(**_: Any) -> None:
    """The operator stops (SIGTERM): end every Prometheus and Flink REST call in flight,
    so passes on hung peers free their threads and the process exits within the grace
    period. Those passes end without writing anything (dial.Stopping)."""
    dial.stop_all()
