"""Every kopf setting of the operator, made in one startup handler.

`RUNTIME` holds what the `hybrid-scaler run` flags chose; `configure` reads it when
kopf starts (controller/operator/handlers.py registers it). This module imports
kopf only inside `configure`, so `run`'s flags and defaults load without it.
Progress and diff-base storage live in `hybridscaler.dev/*` annotations, so kopf
never writes into the policy's status, which belongs to the loop.
"""

from __future__ import annotations

import logging
import socket
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from controller.operator import shard

if TYPE_CHECKING:
    import kopf

PREFIX = "hybridscaler.dev"  # of kopf's annotations; its finalizer: controller/operator/shard.py
DEFAULT_FLINK_REST = "http://{name}-rest.{namespace}.svc:8081"
DEFAULT_AGENT_URL = "http://{pod_ip}:{port}"  # --resize-agent-url (controller/adapters/agents.py)
# Prometheus clients kept (one per distinct URL); the least recently used is dropped.
PROMETHEUS_CLIENTS = 64
DEFAULT_PROMETHEUS = "http://prometheus-operated.monitoring.svc:9090"
# TEST ONLY, off unless set: a directory where every FlinkDeployment patch waits, after
# the step is committed and before it is applied, until the test releases it (or kills
# the process). e2e/test_controller.py's kill -9 test lands inside that window with it.
HOLD_APPLY_ENV = "HYBRID_SCALER_TEST_HOLD_APPLY"


@dataclass
class Runtime:
    prometheus_url: str = DEFAULT_PROMETHEUS
    flink_rest_url: str = DEFAULT_FLINK_REST  # {name} and {namespace} are filled in
    # flink-plugin's agent on a TaskManager pod: {pod_ip}, {pod}, {port} (spec.resize),
    # {namespace}, {name} are filled in.
    resize_agent_url: str = DEFAULT_AGENT_URL
    namespaces: list[str] = field(default_factory=list)  # empty: every namespace
    metrics_port: int = 9464
    liveness_port: int = 8080
    peering: str = "hybrid-scaler"
    standalone: bool = False
    workers: int = 8  # threads running loop passes (Prometheus, REST and API calls block)
    # Hosts, host:port or CIDRs a policy's spec.metrics.prometheusUrl may name; the
    # default Prometheus is always allowed, anything else is refused without a dial.
    allowed_prometheus: list[str] = field(default_factory=list)
    prometheus_ca_file: str | None = None  # PEM bundle; None: the system's CAs
    prometheus_token_file: str | None = None  # bearer token for the default Prometheus
    pass_budget_max_s: float = 60.0  # cap on a pass's outbound budget (0.8 × resolution)
    # This process serves the policies of namespaces hashing to shard_index (of shards);
    # see controller/operator/shard.py.
    shard_index: int = 0
    shards: int = 1
    # namespace/name of the Flink operator's ConfigMap; None: not read
    # (controller/upstream.py, controller/adapters/kube.py KubeOperatorDefaults)
    flink_operator_config: str | None = None
    hold_apply_dir: str | None = None  # TEST ONLY, from $HYBRID_SCALER_TEST_HOLD_APPLY


RUNTIME = Runtime()
# Who posts the Events (kopf's own warnings and the loop's, controller/adapters/kube.py):
# `kubectl describe` shows "From hybrid-scaler/<pod>", not kopf's "kopf/dev".
REPORTING_COMPONENT = "hybrid-scaler"
EVENT_NAME_PREFIX = "hybrid-scaler-"


def reporting_instance() -> str:
    """The host, and with shards which shard decided (one host may run several)."""
    return "/".join(filter(None, (socket.gethostname(),
                                  shard.identity(RUNTIME.shard_index, RUNTIME.shards))))


def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    import kopf

    # Watches reconnect well before proxies or the API server drop them silently.
    settings.watching.server_timeout = 120
    settings.watching.client_timeout = 150
    settings.watching.connect_timeout = 10
    settings.watching.reconnect_backoff = 1.0
    # Only warnings become Events: `kubectl describe hsp` shows decisions, not kopf chatter.
    settings.posting.level = logging.WARNING
    settings.posting.reporting_component = REPORTING_COMPONENT
    settings.posting.reporting_instance = reporting_instance()
    settings.posting.event_name_prefix = EVENT_NAME_PREFIX
    settings.persistence.finalizer = shard.finalizer(RUNTIME.shard_index, RUNTIME.shards)
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=PREFIX, key="last-handled-configuration"
    )
    # Two replicas, one active: the peering object elects it; without the
    # KopfPeering CRD (or with --standalone) the operator runs alone.
    settings.peering.name = shard.peering_name(RUNTIME.peering, RUNTIME.shard_index,
                                               RUNTIME.shards)
    settings.peering.standalone = RUNTIME.standalone
    settings.peering.mandatory = False
    settings.peering.clusterwide = not RUNTIME.namespaces
    # The CRDs exist before the controller starts (the chart installs them): no need to
    # watch CRDs and namespaces, which would need cluster-wide rights on both.
    settings.scanning.disabled = True
    settings.execution.max_workers = RUNTIME.workers
    settings.networking.request_timeout = 30
