"""kopf handlers: thin glue from HybridScalingPolicy objects to `loop.reconcile`.

One daemon per policy runs a loop pass every `spec.metrics.resolution`; the loop
itself decides whether a full metrics window has passed. kopf keeps the daemon's
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
from controller.adapters import outbound
from controller.adapters.flink_rest import FlinkRest
from controller.adapters.kube import KopfEvents, KubeDeployments, KubeStatusStore
from controller.adapters.outbound import AllowList
from controller.adapters.prometheus import Prometheus, PrometheusMetrics, RefusedMetrics
from controller.loop import reconcile
from controller.operator.fairness import FairPool, pass_budget
from controller.operator.settings import PROMETHEUS_CLIENTS, RUNTIME, configure
from controller.ports import Ports
from controller.record import Reason, with_condition

log = logging.getLogger(__name__)
RUNNING: set[str] = set()  # namespace/name of policies with a live loop, for the probe
# How often a policy whose spec does not parse is looked at again: the default resolution.
UNPARSED_PERIOD_S = api.MetricsSpec().resolution


@cache
def _pool() -> FairPool:
    return FairPool(RUNTIME.workers)


@cache
def _objects() -> client.CustomObjectsApi:
    return client.CustomObjectsApi()


@cache
def _allowed() -> AllowList:
    return AllowList(RUNTIME.allowed_prometheus, always=[RUNTIME.prometheus_url])


# One client (and connection pool) per distinct URL, the least recently used dropped.
@lru_cache(maxsize=PROMETHEUS_CLIENTS)
def _prometheus(url: str) -> PrometheusMetrics:
    # The bearer token goes to the operator's own Prometheus only, never to a URL a
    # tenant wrote (even an allowed one): that would hand the token to the tenant.
    own = outbound.endpoint(url) == outbound.endpoint(RUNTIME.prometheus_url)
    return PrometheusMetrics(Prometheus(
        url, ca_file=RUNTIME.prometheus_ca_file,
        token_file=RUNTIME.prometheus_token_file if own else None))


def _metrics(url: str) -> PrometheusMetrics | RefusedMetrics:
    refusal = _allowed().refusal(url)
    return RefusedMetrics(refusal) if refusal else _prometheus(url)


def _flink(namespace: str, name: str) -> FlinkRest:
    return FlinkRest(RUNTIME.flink_rest_url.format(namespace=namespace, name=name))


def ports_for(body: Mapping[str, Any], store: KubeStatusStore) -> Ports:
    return Ports(
        deployments=KubeDeployments(_objects(), hold=RUNTIME.hold_apply_dir),
        store=store,
        events=KopfEvents(body),
        flink=_flink,
        metrics=_metrics,
        default_prometheus_url=RUNTIME.prometheus_url,
    )


kopf.on.startup()(configure)


@kopf.daemon(api.GROUP, api.VERSION, api.PLURAL, cancellation_timeout=10.0)
async def policy_loop(body: kopf.Body, meta: kopf.Meta, namespace: str | None, name: str | None,
                      stopped: kopf.DaemonStopped, **_: Any) -> None:
    key = f"{namespace}/{name}"
    RUNNING.add(key)
    # The status and the resourceVersion its writes are conditional on, read together.
    store = KubeStatusStore(_objects(), body)
    status = store.last
    try:
        while not stopped:
            resolution = UNPARSED_PERIOD_S
            try:
                policy = api.parse_policy(dict(body))
                resolution = policy.spec.metrics.resolution
                result = await _pool().run(
                    namespace or "default", reconcile, policy, meta.get("generation"), status,
                    ports_for(body, store),
                    budget_s=pass_budget(resolution, RUNTIME.pass_budget_max_s))
                status = result.status
                log.debug("%s: %s", key, result.outcome)
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
            await stopped.wait(resolution)
    finally:
        RUNNING.discard(key)
        telemetry.forget(namespace or "default", name or "")


@kopf.on.probe(id="policies")
def running_policies(**_: Any) -> int:
    return len(RUNNING)
