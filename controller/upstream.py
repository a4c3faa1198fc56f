"""The Flink operator's own autoscaler, a second writer of the parallelism: where it is on.

On, it writes its own pipeline.jobvertex-parallelism-overrides into the spec it deploys,
on every reconcile (flink-kubernetes-operator's KubernetesScalingRealizer), over the
steps' for each vertex it has scaled. With job.autoscaler.scaling.enabled false it stops
storing new ones but keeps applying those it stored; only switched off does it clear
them. So no step is applied while it is on (`upstream_refusal`).

The operator reads the switch, each reconcile, from its default configuration (the
ConfigMap `flink-operator-config`, with per-namespace and per-Flink-version defaults in
it, re-read every kubernetes.operator.dynamic.config.check.interval, 5 minutes by
default), under the spec it last deployed, under the current spec's autoscaler keys
(which redeploy nothing). Pure: the callers read the deployment, the JobManager and the
ConfigMap (controller/decide.py, controller/adapters/kube.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

import yaml

# The switch, and the older key Flink falls back to.
UPSTREAM_KEYS = ("job.autoscaler.enabled", "kubernetes.operator.job.autoscaler.enabled")
# Defaults the operator gives one namespace, or one Flink version (`v1_20`) or that
# version and newer (`v1_18+`), under this prefix of its default configuration (the
# operator's docs, "Flink Version and Namespace specific defaults"); a version's over a
# namespace's over the plain key.
SCOPED_PREFIX = "kubernetes.operator.default-configuration."
_VERSION = re.compile(r"v(\d+)_(\d+)(\+?)")
# The files of the operator's ConfigMap that may hold its default configuration: its Helm
# chart writes both and mounts one (flink-conf.yaml, Flink 1's flat "key: value" lines,
# where the chart's values give it; else config.yaml, YAML with nested keys joined by
# "."). Each is read and layered on its own; on in either is on (the safe side).
CONFIG_FILES = ("flink-conf.yaml", "config.yaml")


def configured_values(flink_configuration: Any, keys: tuple[str, ...]) -> dict[str, Any]:
    """The values of `keys` in a spec.flinkConfiguration as the operator reads it: nested
    maps (operator 1.13 takes YAML objects there) joined with ".". Only the maps on the
    way to a wanted key are walked: a hostile map costs its size, not depth × keys. A key
    written twice (flat and nested) is "true" if either says so: which one the operator
    reads depends on its parsing, and a switch on is the safe side. Not a map: nothing."""
    return _walk(flink_configuration, keys.__contains__,
                 lambda name: any(k.startswith(f"{name}.") for k in keys))


def _walk(tree: Any, wanted: Callable[[str], bool], leads: Callable[[str], bool],
          budget: int | None = None) -> dict[str, Any]:
    """The wanted leaves of nested maps, by their names joined with "."; only the maps
    whose name `leads` to a wanted one are entered. "true" wins a name written twice; an
    empty value (YAML's null) is no value. Past `budget` entries walked (a YAML alias is
    walked at each use): ValueError."""
    found: dict[str, Any] = {}
    pending = [("", tree)] if isinstance(tree, Mapping) else []
    while pending:
        prefix, level = pending.pop()
        if budget is not None:
            budget -= len(level)
            if budget < 0:
                raise ValueError("past the entries walked")
        for key, value in level.items():
            name = f"{prefix}{key}"
            if isinstance(value, Mapping):
                if leads(name):
                    pending.append((f"{name}.", value))
            elif value is not None and wanted(name) and not _true(found.get(name)):
                found[name] = value
    return found


def _true(value: Any) -> bool:
    """Flink's boolean parsing: only "true", in any case."""
    return value is not None and str(value).lower() == "true"


# --- the operator's default configuration (its ConfigMap) ---------------------------------


def _scoped(name: str) -> tuple[str, str, str] | None:
    """(scope, namespace or version, key) of a scoped default of a switch, or None."""
    if not name.startswith(SCOPED_PREFIX):
        return None
    scope, _, rest = name[len(SCOPED_PREFIX):].partition(".")
    qualifier, _, key = rest.partition(".")
    if scope not in ("namespace", "flink-version") or not qualifier or key not in UPSTREAM_KEYS:
        return None
    return scope, qualifier, key


def _wanted_default(name: str) -> bool:
    return name in UPSTREAM_KEYS or _scoped(name) is not None


def _leads_to_default(name: str) -> bool:
    # A namespace or a version is one segment: no deeper than scope.qualifier.key.
    return (any(k.startswith(f"{name}.") for k in UPSTREAM_KEYS)
            or SCOPED_PREFIX.startswith(f"{name}.")
            or (name.startswith(SCOPED_PREFIX)
                and name[len(SCOPED_PREFIX):].count(".") < 2 + max(
                    k.count(".") for k in UPSTREAM_KEYS)))


# Entries of config.yaml walked at most: a YAML alias (which Flink reads) is walked at
# each use, so nine levels of nine aliases would be 9**9.
WALK_BUDGET = 200_000


class DefaultsUnreadable(ValueError):
    """A file of the operator's default configuration the controller cannot read, which
    the operator may: nothing is known of its switches."""


def _flink_conf_lines(text: str) -> dict[str, str]:
    """flink-conf.yaml as Flink 1.x parses it: a line is "key: value", # starts a comment,
    a key's last line wins."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.split("#", 1)[0].partition(": ")
        key, value = key.strip(), value.strip()
        if sep and key and value and _wanted_default(key):
            found[key] = value
    return found


def operator_defaults(data: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The autoscaler's switches in each file of the Flink operator's default
    configuration (its ConfigMap's `data`, `CONFIG_FILES`): each of `UPSTREAM_KEYS`,
    plain or scoped to a namespace or a Flink version (`SCOPED_PREFIX`), flat. The
    operator reads one of the files, which depends on how it is installed: each is
    layered on its own (`upstream_switched_on`). Raises `DefaultsUnreadable` for a
    config.yaml that does not parse or costs past `WALK_BUDGET` to walk."""
    found: dict[str, dict[str, Any]] = {}
    for file in CONFIG_FILES:
        text = data.get(file)
        if not isinstance(text, str):
            continue
        if file == "flink-conf.yaml":
            found[file] = _flink_conf_lines(text)
            continue
        try:
            found[file] = _walk(yaml.safe_load(text), _wanted_default, _leads_to_default,
                                WALK_BUDGET)
        except (yaml.YAMLError, RecursionError, ValueError):
            raise DefaultsUnreadable(f"its {file} does not parse, or is past "
                                     f"{WALK_BUDGET:,} entries to walk") from None
    return found


def _version(text: Any) -> tuple[int, int, bool] | None:
    match = _VERSION.fullmatch(str(text)) if text is not None else None
    return None if match is None else (int(match[1]), int(match[2]), bool(match[3]))


def defaults_for(defaults: Mapping[str, Any], namespace: str, flink_version: Any
                 ) -> dict[str, tuple[str, Any]]:
    """Each switch the operator's defaults give a deployment in `namespace` running
    `flink_version` (its spec.flinkVersion, e.g. "v1_20"), with the key that sets it: the
    plain key, under the namespace's, under the versions' ("v1_18+" for 1.18 and newer,
    then the exact version's; among "and newer" keys the newest version wins)."""
    job = _version(flink_version)
    ranked: list[tuple[int, tuple[int, int], str]] = []  # (layer, version, key in the map)
    for name in defaults:
        scoped = _scoped(name)
        if scoped is None:
            if name in UPSTREAM_KEYS:
                ranked.append((0, (0, 0), name))
            continue
        scope, qualifier, _ = scoped
        version = _version(qualifier)
        if scope == "namespace":
            if qualifier == namespace:
                ranked.append((1, (0, 0), name))
        elif job is not None and version is not None:
            if version[:2] == job[:2] and not version[2]:
                ranked.append((3, version[:2], name))
            elif version[2] and version[:2] <= job[:2]:
                ranked.append((2, version[:2], name))
    # The operator's order (FlinkConfigManager): plain, namespace, "and newer" versions
    # from the oldest, the exact version.
    return {_key_of(name): (name, defaults[name]) for _, _, name in sorted(ranked)}


def _key_of(name: str) -> str:
    scoped = _scoped(name)
    return name if scoped is None else scoped[2]


# --- the switch, layer over layer ----------------------------------------------------------


def upstream_switched_on(deployment: Mapping[str, Any],
                         job_manager: Mapping[str, str] | None,
                         defaults: Mapping[str, Mapping[str, Any]] | None = None
                         ) -> str | None:
    """Where the Flink operator's autoscaler is switched on for this deployment, or None.

    The layers, each over the one before, key by key:
    - the JobManager's configuration (`job_manager`): the operator's defaults and the spec,
      as deployed;
    - the operator's default configuration now (`defaults`, from `operator_defaults`; None
      where it is not read), which it re-reads every few minutes and applies with no new
      deployment. It only adds "on": a default switched off since may not have been
      re-read yet, and the JobManager's "on" may come from the spec;
    - the spec the operator last reconciled (`last_reconciled_configuration`, also
      rewritten by a rescale in place), which still answers when the JobManager does not;
    - the current spec.
    Each file of the defaults, at the Flink version of the current and of the deployed
    spec, is layered on its own: on in any is on. The key is read before its fallback, as
    Flink does. Only "true" in any case is true (Flink's boolean parsing)."""
    spec_fields = deployment.get("spec")
    spec_fields = spec_fields if isinstance(spec_fields, Mapping) else {}
    spec = configured_values(spec_fields.get("flinkConfiguration"), UPSTREAM_KEYS)
    metadata = deployment.get("metadata")
    namespace = str(metadata.get("namespace") or "") if isinstance(metadata, Mapping) else ""
    deployed = _last_reconciled_spec(deployment)
    below = ('"{key}" in the JobManager\'s configuration (the Flink operator\'s default '
             "configuration, or the spec it last deployed)", job_manager or {})
    above = [('"{key}" in the spec the Flink operator last deployed '
              "(status.reconciliationStatus.lastReconciledSpec)",
              configured_values((deployed or {}).get("flinkConfiguration"), UPSTREAM_KEYS)),
             ('spec.flinkConfiguration["{key}"]', spec)]
    # The operator scopes its defaults by the deployed spec's version, the next deployment
    # by the current spec's.
    versions = dict.fromkeys([spec_fields.get("flinkVersion"),
                              (deployed or {}).get("flinkVersion")])
    middles: list[list[tuple[str, Mapping[str, Any]]]] = [
        [(f'"{_shown(name)}" in the Flink operator\'s default configuration ({file})',
          {switch: value})
         for switch, (name, value) in defaults_for(values, namespace, version).items()
         if _true(value)]
        for file, values in (defaults or {}).items() for version in versions] or [[]]
    for middle in middles:
        merged: dict[str, tuple[str, Any]] = {}
        for where, configuration in [below, *middle, *above]:
            merged.update({k: (where, configuration[k]) for k in UPSTREAM_KEYS
                           if k in configuration})
        key = next((k for k in UPSTREAM_KEYS if k in merged), None)
        if key is not None and _true(merged[key][1]):
            return merged[key][0].format(key=key)
    return None


def _shown(name: str) -> str:
    """A ConfigMap's key in a message formatted with {key}."""
    return name.replace("{", "{{").replace("}", "}}")


# A FlinkDeployment is at most etcd's 1.5 MiB; a spec past this is not parsed (no refusal
# from it: the JobManager's configuration and the current spec still say).
LAST_RECONCILED_MAX_CHARS = 1 << 20


def _last_reconciled_spec(deployment: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The spec the Flink operator last reconciled: status.reconciliationStatus.
    lastReconciledSpec is a JSON string of {"spec": ..., "resource_metadata": ...}. None
    where it is missing or unreadable."""
    status = deployment.get("status")
    reconciled = status.get("reconciliationStatus") if isinstance(status, Mapping) else None
    text = reconciled.get("lastReconciledSpec") if isinstance(reconciled, Mapping) else None
    if not isinstance(text, str) or len(text) > LAST_RECONCILED_MAX_CHARS:
        return None
    try:  # nested past Python's recursion limit: unreadable too
        last = json.loads(text)
    except (ValueError, RecursionError):
        return None
    spec = last.get("spec") if isinstance(last, Mapping) else None
    return spec if isinstance(spec, Mapping) else None


def last_reconciled_configuration(deployment: Mapping[str, Any]) -> dict[str, Any]:
    """The Flink operator's autoscaler keys (`UPSTREAM_KEYS`) in the spec the operator last
    reconciled; empty where it is missing or unreadable."""
    spec = _last_reconciled_spec(deployment)
    return configured_values(None if spec is None else spec.get("flinkConfiguration"),
                             UPSTREAM_KEYS)


def upstream_refusal(deployment: Mapping[str, Any],
                     job_manager: Mapping[str, str] | None,
                     defaults: Mapping[str, Mapping[str, Any]] | None = None) -> str | None:
    """Why no step may be applied while the Flink operator's autoscaler is on, or None."""
    where = upstream_switched_on(deployment, job_manager, defaults)
    if where is None:
        return None
    return (f"the Flink operator's autoscaler is on ({where} is true): the operator writes "
            "its parallelism overrides over the steps' in what it deploys, so a step would "
            'not run; set job.autoscaler.enabled: "false" in spec.flinkConfiguration (its '
            "scaling.enabled: false is not enough: it keeps applying what it stored)")
