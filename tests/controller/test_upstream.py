"""Where the Flink operator's own autoscaler is switched on: its default configuration
(the ConfigMap flink-operator-config), with the defaults it scopes to a namespace or a
Flink version, under the deployment's own layers (controller/upstream.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from controller.upstream import (
    SCOPED_PREFIX,
    DefaultsUnreadable,
    defaults_for,
    operator_defaults,
    upstream_refusal,
    upstream_switched_on,
)

ON = "job.autoscaler.enabled"
OLD = "kubernetes.operator.job.autoscaler.enabled"
CONF, YAML = "flink-conf.yaml", "config.yaml"


def scoped(scope: str, qualifier: str, key: str = ON) -> str:
    return f"{SCOPED_PREFIX}{scope}.{qualifier}.{key}"


def deployment(namespace: str = "team-a", flink_version: str = "v1_20",
               flink_configuration: dict[str, Any] | None = None,
               deployed: dict[str, Any] | None = None) -> dict[str, Any]:
    """A FlinkDeployment; `deployed`: the spec the operator last reconciled."""
    status = {} if deployed is None else {"reconciliationStatus": {
        "lastReconciledSpec": json.dumps({"spec": deployed})}}
    return {"metadata": {"name": "q11", "namespace": namespace},
            "spec": {"flinkVersion": flink_version,
                     "flinkConfiguration": flink_configuration or {}},
            "status": status}


def test_flink_conf_yaml_is_read_as_flink_1_reads_it() -> None:
    text = "\n".join([
        "# the operator's defaults",
        f"{ON}: true",
        f"{scoped('namespace', 'team-a')}: true  # for one team",
        f"{scoped('flink-version', 'v1_18+')}: TRUE",
        "kubernetes.operator.reconcile.interval: 15 s",
        f"{OLD}:",  # no value: no key
        f"#{OLD}: true",
        f"{ON}: false",  # a key's last line wins
    ])
    assert operator_defaults({CONF: text}) == {CONF: {
        ON: "false", scoped("namespace", "team-a"): "true",
        scoped("flink-version", "v1_18+"): "TRUE"}}


def test_config_yaml_is_read_nested_or_flat() -> None:
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
  job.autoscaler.enabled:
metrics.reporters: prom
"""
    assert operator_defaults({YAML: text}) == {YAML: {  # an empty value is no value
        ON: False, scoped("flink-version", "v2_0+"): True,
        scoped("namespace", "team-b"): "true"}}


@pytest.mark.parametrize("text", [
    "job: [unclosed",
    "[" * 100_000 + "]" * 100_000,  # past Python's recursion limit
    # Nine levels of nine aliases: 9**9 maps to walk at each use.
    "\n".join(["a0: &a0 {x: 1}"] + [
        f"a{i}: &a{i} {{{', '.join(f'k{j}: *a{i - 1}' for j in range(9))}}}"
        for i in range(1, 10)] + ["kubernetes.operator.default-configuration: *a9"]),
])
def test_a_config_yaml_the_controller_cannot_read_is_unreadable_not_off(text: str) -> None:
    """The operator may read what the controller cannot: nothing is known of its switch."""
    with pytest.raises(DefaultsUnreadable, match=r"config\.yaml"):
        operator_defaults({YAML: text})


def test_an_alias_is_read_as_flink_reads_it() -> None:
    text = 'switch: &on "true"\njob.autoscaler.enabled: *on\n'
    assert operator_defaults({YAML: text}) == {YAML: {ON: "true"}}


@pytest.mark.parametrize("text", ["- a list", "42", ""])
def test_a_config_yaml_that_is_no_map_switches_nothing(text: str) -> None:
    assert operator_defaults({YAML: text, "log4j-operator.properties": 7}) == {YAML: {}}


DEFAULTS = {ON: "false", scoped("namespace", "team-a"): "true",
            scoped("flink-version", "v1_18+"): "false",
            scoped("flink-version", "v1_20"): "true",
            scoped("namespace", "team-b"): "true", scoped("flink-version", "v1_16"): "true"}


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
    assert defaults_for(DEFAULTS, namespace, version) == {ON: (where, value)}


def test_among_several_and_newer_versions_the_newest_wins() -> None:
    defaults = {scoped("flink-version", "v1_18+"): "false",
                scoped("flink-version", "v1_16+"): "true"}
    assert defaults_for(defaults, "ns", "v1_20")[ON] == (
        scoped("flink-version", "v1_18+"), "false")


def test_the_operators_default_goes_over_what_the_jobmanager_was_deployed_with() -> None:
    """Switched on in the ConfigMap since the job was deployed: the operator reads it with
    no new deployment."""
    defaults = {CONF: {scoped("namespace", "team-a"): "true"}}
    where = upstream_switched_on(deployment(), {ON: "false"}, defaults)
    assert where == (f'"{scoped("namespace", "team-a")}" in the Flink operator\'s default '
                     f"configuration ({CONF})")
    assert where in (upstream_refusal(deployment(), {ON: "false"}, defaults) or "")
    # Another namespace's default is not this deployment's.
    assert upstream_switched_on(deployment("team-b"), {ON: "false"}, defaults) is None
    # Not read: the JobManager's word stands.
    assert upstream_switched_on(deployment(), {ON: "false"}, None) is None


def test_a_default_switched_off_does_not_hide_the_jobmanagers_on() -> None:
    """The operator may not have re-read it yet, and the JobManager's "on" may be the
    spec's: only the spec's own key clears it."""
    defaults = {CONF: {ON: "false"}}
    assert upstream_switched_on(deployment(), {ON: "true"}, defaults) is not None
    assert upstream_switched_on(deployment(flink_configuration={ON: "false"}), {ON: "true"},
                                defaults) is None


def test_each_file_is_layered_on_its_own() -> None:
    """The operator mounts one of them: on in either is on, as that file layers it."""
    defaults = {CONF: {ON: "true"}, YAML: {scoped("namespace", "team-a"): "false"}}
    assert upstream_switched_on(deployment(), {}, defaults) == (
        f'"{ON}" in the Flink operator\'s default configuration ({CONF})')
    defaults = {CONF: {ON: "true", scoped("namespace", "team-a"): "false"}}
    assert upstream_switched_on(deployment(), {}, defaults) is None


def test_the_deployed_flink_version_scopes_the_defaults_too() -> None:
    """Mid-upgrade the operator still runs the deployed spec's version."""
    defaults = {CONF: {scoped("flink-version", "v1_19"): "true"}}
    upgrading = deployment(flink_version="v1_20", deployed={"flinkVersion": "v1_19"})
    assert scoped("flink-version", "v1_19") in (
        upstream_switched_on(upgrading, {}, defaults) or "")
    assert upstream_switched_on(deployment(flink_version="v1_20"), {}, defaults) is None


def test_the_spec_goes_over_the_operators_defaults() -> None:
    defaults = {YAML: {ON: "true"}}
    assert upstream_switched_on(deployment(flink_configuration={ON: "false"}), {},
                                defaults) is None
    assert upstream_switched_on(deployment(deployed={"flinkConfiguration": {ON: "false"}}),
                                {}, defaults) is None
    assert upstream_switched_on(deployment(flink_configuration={OLD: "false"}), {},
                                defaults) is not None  # the key is read before its fallback
