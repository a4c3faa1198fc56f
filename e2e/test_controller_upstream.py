"""The Flink operator's default configuration, read where the controller is told it is
(`--flink-operator-config`, the chart's flinkOperator.configMap), on the real API server
with the chart's RBAC: `get` on that one ConfigMap. A default there switches the
operator's own autoscaler on for a namespace without any change to the FlinkDeployment
or a new deployment, and no step may run beside it (controller/upstream.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from e2e.conftest import Cluster, wait_until
from e2e.demo import ControllerProcess, flink_deployment, policy
from e2e.stack import FLINK_OPERATOR_NAMESPACE, StackInfo
from e2e.test_controller import condition, deploy, hsp

pytestmark = pytest.mark.e2e

CONFIG_MAP = "flink-operator-config"


@pytest.fixture(scope="module")
def controller(e2e_stack: StackInfo, controller_kubeconfig: Path,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControllerProcess]:
    log = tmp_path_factory.mktemp("controller-upstream") / "controller.log"
    process = ControllerProcess(
        str(controller_kubeconfig), e2e_stack.prometheus_url, e2e_stack.controller_env(), log,
        extra_args=("--flink-operator-config", f"{FLINK_OPERATOR_NAMESPACE}/{CONFIG_MAP}"),
    ).start()
    yield process
    process.stop()


def write_defaults(cluster: Cluster, text: str | None) -> None:
    """The operator's ConfigMap with `text` as its flink-conf.yaml; None: no ConfigMap."""
    try:
        cluster.core.delete_namespaced_config_map(CONFIG_MAP, FLINK_OPERATOR_NAMESPACE)
    except ApiException as e:
        if e.status != 404:
            raise
    if text is not None:
        cluster.core.create_namespaced_config_map(FLINK_OPERATOR_NAMESPACE, client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name=CONFIG_MAP), data={"flink-conf.yaml": text}))


def refused_saying(cluster: Cluster, namespace: str, text: str) -> str:
    """The Scaling condition's message, once it is a refusal that says `text` (the
    controller reads the ConfigMap every 60 s at most, and refuses again each pass)."""
    def probe() -> str | None:
        scaling = condition(hsp(cluster, namespace, "q11"), "Scaling")
        message = str(scaling.get("message") or "")
        return message if scaling.get("reason") == "Refused" and text in message else None

    return wait_until(probe, 240, f"Scaling=Refused saying {text!r}", interval_s=1)


def test_the_operators_default_configuration_holds_the_steps_while_it_switches_on_its_autoscaler(
    controller: ControllerProcess, cluster: Cluster, namespace: str
) -> None:
    write_defaults(cluster, None)
    try:
        deploy(cluster, flink_deployment(namespace, "q11"))
        cluster.wait_flink(namespace, "q11")
        deploy(cluster, policy(namespace, "q11", "q11"))
        # Told to read it, and it is not there: no step could be known to run alone.
        message = refused_saying(cluster, namespace,
                                 f"ConfigMap {FLINK_OPERATOR_NAMESPACE}/{CONFIG_MAP}: HTTP 404")
        assert "--flink-operator-config" in message

        # On for this namespace only, and nowhere in the FlinkDeployment or its JobManager.
        key = (f"kubernetes.operator.default-configuration.namespace.{namespace}"
               ".job.autoscaler.enabled")
        write_defaults(cluster, f"# the platform's defaults\n{key}: true\n"
                                "job.autoscaler.enabled: false\n")
        refused_saying(cluster, namespace,
                       f'"{key}" in the Flink operator\'s default configuration')
        assert hsp(cluster, namespace, "q11")["status"].get("target") is None

        write_defaults(cluster, f"{key}: false\n")
        wait_until(lambda: (hsp(cluster, namespace, "q11")["status"].get("target") or {})
                   .get("step"), 240, "a step committed once the operator's default is off")
    finally:
        write_defaults(cluster, None)
