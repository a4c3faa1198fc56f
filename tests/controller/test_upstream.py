"""Where the Flink operator's own autoscaler is switched on: its default configuration
(the ConfigMap flink-operator-config), with the defaults it scopes to a namespace or a
Flink version, under the deployment's own layers (controller/upstream.py)."""

from __future__ import annotations

from typing import Any

import pytest

from controller.upstream import (
    SCOPED_PREFIX,
    defaults_for,
    operator_defaults,
    upstream_refusal,
    upstream_switched_on,
)

ON = "job.autoscaler.enabled"
OLD = "kubernetes.operator.job.autoscaler.enabled"


def scoped(scope: str, qualifier: str, key: str = ON) -> str:
    return f"{SCOPED_PREFIX}{scope}.{qualifier}.{key}"


def deployment(namespace: str = "team-a", flink_version: str = "v1_20",
               flink_configuration: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": "q11", "namespace": namespace},
            "spec": {"flinkVersion": flink_version,
                     "flinkConfiguration": flink_configuration or {}}}


def test_flink_conf_yaml_is_read_as_flink_1_reads_it() -> None:
    text = "\n".join([
        "# the operator's defaults",
        f"{ON}: false",
        f"{scoped('namespace', 'team-a')}: true  # for one team",
        f"{scoped('flink-version', 'v1_18+')}: TRUE",
        "kubernetes.operator.reconcile.interval: 15 s",
        f"{OLD}:",  # no value: no key
        f"#{OLD}: true",
    ])
    assert operator_defaults({"flink-conf.yaml": text}) == {
        ON: "false", scoped("namespace", "team-a"): "true",
        scoped("flink-version", "v1_18+"): "TRUE"}


def test_config_yaml_is_read_nested_or_flat_as_flink_2_reads_it() -> None:
    text = """
job:
  autoscaler:
    enabled: false
kubernetes.operator:
  default-configuration:
    flink-version:
      v2_0+:
        job.autoscaler.enabled: true
    namespace.team-b.job.autoscaler.enabled: "true"
metrics.reporters: prom
"""
    assert operator_defaults({"config.yaml": text}) == {
        ON: False, scoped("flink-version", "v2_0+"): True,
        scoped("namespace", "team-b"): "true"}


def test_a_switch_on_in_either_file_is_on() -> None:
    """Which file the operator reads depends on its Flink version: on is the safe side."""
    found = operator_defaults({"flink-conf.yaml": f"{ON}: true", "config.yaml": f"{ON}: false"})
    assert found == {ON: "true"}


@pytest.mark.parametrize("text", [
    "job: [unclosed", "- a list", "42", "",
    "[" * 100_000 + "]" * 100_000,  # past Python's recursion limit
])
def test_a_config_yaml_that_does_not_parse_counts_for_nothing(text: str) -> None:
    assert operator_defaults({"config.yaml": text, "other": 7}) == {}


def test_yaml_aliases_are_not_read() -> None:
    """An anchor is parsed once but walked at each use: nine levels of nine aliases would
    be 9**9 maps to walk. A file with aliases counts for nothing."""
    text = 'switch: &on "true"\njob.autoscaler.enabled: *on\n'
    assert operator_defaults({"config.yaml": text}) == {}
    assert operator_defaults({"config.yaml": text.replace("*on", '"true"')}) == {ON: "true"}


@pytest.mark.parametrize("namespace, version, where, value", [
    ("elsewhere", "v1_17", ON, "false"),  # the plain key alone
    ("team-a", "v1_17", scoped("namespace", "team-a"), "true"),  # the namespace's over it
    ("team-a", "v1_18", scoped("flink-version", "v1_18+"), "false"),  # a version's over both
    ("elsewhere", "v1_19", scoped("flink-version", "v1_18+"), "false"),  # 1.18 and newer
    ("team-a", "v1_20", scoped("flink-version", "v1_20"), "true"),  # the exact one last
    ("team-a", "v2_1", scoped("flink-version", "v1_18+"), "false"),
    ("team-a", "no-version", scoped("namespace", "team-a"), "true"),
])
def test_defaults_are_layered_as_the_operator_layers_them(
        namespace: str, version: str, where: str, value: str) -> None:
    defaults = {ON: "false", scoped("namespace", "team-a"): "true",
                scoped("flink-version", "v1_18+"): "false",
                scoped("flink-version", "v1_20"): "true",
                scoped("namespace", "team-b"): "true", scoped("flink-version", "v1_16"): "true"}
    assert defaults_for(defaults, namespace, version) == {ON: (where, value)}


def test_among_several_and_newer_versions_on_is_the_safe_side() -> None:
    defaults = {scoped("flink-version", "v1_16+"): "true",
                scoped("flink-version", "v1_18+"): "false"}
    assert defaults_for(defaults, "ns", "v1_20")[ON][1] == "true"


def test_the_operators_default_goes_over_what_the_jobmanager_was_deployed_with() -> None:
    """Switched on in the ConfigMap since the job was deployed: the operator reads it at
    its next reconcile, with no new deployment."""
    defaults = {scoped("namespace", "team-a"): "true"}
    where = upstream_switched_on(deployment(), {ON: "false"}, defaults)
    assert where == (f'"{scoped("namespace", "team-a")}" in the Flink operator\'s default '
                     "configuration")
    assert where in (upstream_refusal(deployment(), {ON: "false"}, defaults) or "")
    # Another namespace's default is not this deployment's.
    assert upstream_switched_on(deployment("team-b"), {ON: "false"}, defaults) is None
    # Not read: the JobManager's word stands.
    assert upstream_switched_on(deployment(), {ON: "false"}, None) is None


def test_the_spec_goes_over_the_operators_defaults() -> None:
    defaults = {ON: "true"}
    assert upstream_switched_on(deployment(flink_configuration={ON: "false"}), {},
                                defaults) is None
    assert upstream_switched_on(deployment(flink_configuration={OLD: "false"}), {},
                                defaults) is not None  # the key is read before its fallback
