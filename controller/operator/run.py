"""`hybrid-scaler run`: start the operator (kopf) with the loop's handlers.

controller/cli.py registers `run` as a command; kopf and the kubernetes client are
imported only when it runs, so the rest of the command line starts without them.
"""

from __future__ import annotations

import logging
import os
import random
import re
from typing import Annotated

import typer

from controller.operator.settings import (
    DEFAULT_AGENT_URL,
    DEFAULT_FLINK_REST,
    DEFAULT_PROMETHEUS,
    HOLD_APPLY_ENV,
)


def run(
    namespace: Annotated[list[str] | None, typer.Option(
        "--namespace", "-n", help="watch this namespace (repeatable); default: all")] = None,
    prometheus_url: Annotated[str, typer.Option(
        help="Prometheus used by policies without spec.metrics.prometheusUrl")]
        = DEFAULT_PROMETHEUS,
    flink_rest_url: Annotated[str, typer.Option(
        help="JobManager REST URL template; {name} and {namespace} are the FlinkDeployment's")]
        = DEFAULT_FLINK_REST,
    resize_agent_url: Annotated[str, typer.Option(
        help="URL template of flink-plugin's resize agent on a TaskManager pod (spec.resize); "
        "{pod_ip}, {pod}, {port}, {namespace} and {name} are filled in")]
        = DEFAULT_AGENT_URL,
    metrics_port: Annotated[int, typer.Option(help="port of the controller's own /metrics")]
        = 9464,
    liveness_port: Annotated[int, typer.Option(help="port of the /healthz liveness probe")]
        = 8080,
    peering: Annotated[str, typer.Option(help="KopfPeering name shared by the replicas")]
        = "hybrid-scaler",
    standalone: Annotated[bool, typer.Option(help="run without peering (a single replica)")]
        = False,
    workers: Annotated[int, typer.Option(help="threads running loop passes")] = 8,
    allow_prometheus: Annotated[list[str] | None, typer.Option(
        "--allow-prometheus", help="host, .domain suffix, host:port or CIDR a policy's "
        "spec.metrics.prometheusUrl may name (repeatable); the default Prometheus is "
        "always allowed, anything else is refused without being dialled")] = None,
    prometheus_ca_file: Annotated[str | None, typer.Option(
        help="PEM CA bundle to verify Prometheus' TLS certificate (default: system CAs)")]
        = None,
    prometheus_token_file: Annotated[str | None, typer.Option(
        help="file holding a bearer token for the default Prometheus (re-read per request)")]
        = None,
    flink_operator_config: Annotated[str | None, typer.Option(
        help="namespace/name of the Flink operator's ConfigMap (flink-operator-config): its "
        "default configuration can switch the operator's own autoscaler on, which no step "
        "may run beside; read every 60 s at most (default: not read)")] = None,
    shard_index: Annotated[int, typer.Option(
        envvar="HYBRID_SCALER_SHARD_INDEX",
        help="serve the policies of namespaces whose murmur3 hash mod --shards is this")] = 0,
    shards: Annotated[int, typer.Option(
        envvar="HYBRID_SCALER_SHARDS",
        help="controller processes (chart: Deployments) the policies are split between; "
        "peering, the finalizer and Events are per shard")] = 1,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Run the controller: one loop per HybridScalingPolicy, until interrupted."""
    import kopf
    from kubernetes import config

    import controller.operator.handlers  # noqa: F401  (registers the handlers)
    from controller import telemetry
    from controller.operator import shard
    from controller.operator.settings import RUNTIME

    try:
        shard.check(shard_index, shards)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from e
    try:
        check_agent_url(resize_agent_url)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--resize-agent-url") from e

    if flink_operator_config is not None:
        try:
            check_config_map(flink_operator_config)
        except ValueError as e:
            raise typer.BadParameter(str(e), param_hint="--flink-operator-config") from e

    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config.load_incluster_config()  # type: ignore[no-untyped-call,unused-ignore]
    except config.ConfigException:
        config.load_kube_config()  # type: ignore[no-untyped-call,unused-ignore]
    RUNTIME.prometheus_url, RUNTIME.flink_rest_url = prometheus_url, flink_rest_url
    RUNTIME.resize_agent_url = resize_agent_url
    RUNTIME.namespaces = list(namespace or [])
    RUNTIME.metrics_port, RUNTIME.liveness_port = metrics_port, liveness_port
    RUNTIME.peering, RUNTIME.standalone, RUNTIME.workers = peering, standalone, workers
    RUNTIME.allowed_prometheus = list(allow_prometheus or [])
    RUNTIME.prometheus_ca_file = prometheus_ca_file
    RUNTIME.prometheus_token_file = prometheus_token_file
    RUNTIME.shard_index, RUNTIME.shards = shard_index, shards
    RUNTIME.flink_operator_config = flink_operator_config
    RUNTIME.hold_apply_dir = os.environ.get(HOLD_APPLY_ENV) or None  # tests only
    telemetry.serve(metrics_port)
    kopf.run(
        clusterwide=not RUNTIME.namespaces,
        namespaces=RUNTIME.namespaces,
        liveness_endpoint=f"http://0.0.0.0:{liveness_port}/healthz",
        standalone=standalone,
        peering_name=peering,
        # kopf pauses every replica that shares the top priority: one draw per process.
        priority=random.SystemRandom().randint(1, 2**31 - 1),
    )
    # kopf has stopped and closed its event loop. Passes it cancelled the waits for still
    # run on the worker threads; they post their own Events and save their status
    # (controller/adapters/kube.py KubeEvents), and the process exits once they end.
    logging.getLogger(__name__).info(
        "operator stopped; passes still running finish before the process exits")


# A namespace is a DNS label; a ConfigMap's name a DNS subdomain.
_CONFIG_MAP = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?/[a-z0-9]([-.a-z0-9]{0,251}[a-z0-9])?")


def check_config_map(where: str) -> None:
    """`--flink-operator-config` names one ConfigMap: namespace/name."""
    if not _CONFIG_MAP.fullmatch(where):
        raise ValueError(f"namespace/name of a ConfigMap (e.g. flink-operator/"
                         f"flink-operator-config), not {where[:100]!r}")


def check_agent_url(template: str) -> None:
    """`--resize-agent-url` must give a URL the controller dials for any pod: filled in
    with an example, it parses (controller.adapters.dial's one parser)."""
    from controller.adapters import dial

    try:
        url = template.format(pod_ip="10.0.0.1", pod="tm-1", port=9260, namespace="ns",
                              name="job")
    except (KeyError, IndexError, ValueError) as e:
        raise ValueError(f"a template with {{pod_ip}}, {{pod}}, {{port}}, {{namespace}} and "
                         f"{{name}} only: {e!r} is not one of them") from None
    try:
        dial.parse_url(url, "--resize-agent-url")
    except dial.UrlRefused as e:
        raise ValueError(str(e)) from None
