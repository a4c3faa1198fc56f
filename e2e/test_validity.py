"""One truth about validity (issue 16.3): the real API server, with the generated CRD,
refuses exactly the HybridScalingPolicies the model refuses, each error naming a field.

- every CEL case of tests/api/test_cel.py (there checked with cel-python) on the server;
- the policies of examples/invalid/, as `kubectl apply` sends them;
- a drift test: hypothesis writes random specs, most of them near a bound, and the
  server (a server-side dry run) and `HybridScalingPolicy.model_validate` must agree
  on every one.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from controller import api
from controller.adapters import dial
from e2e.conftest import Cluster
from policies.spec import CpuScaling, ParallelismOverride
from tests.api.test_cel import (
    IPV6_URLS,
    NOT_IPV6_URLS,
    OUT_OF_RANGE,
    SECTION_CASES,
    spec_setting,
)

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parent.parent
NAMESPACE = "validity"
# Where each section of tests/api/test_cel.py's cases sits in a spec.
SECTION_PATH = {api.TargetRef: "spec.targetRef", api.MetricsSpec: "spec.metrics",
                CpuScaling: "spec.cpu", ParallelismOverride: "spec.cpu.overrides[]"}


@pytest.fixture(scope="module")
def server(cluster: Cluster) -> Cluster:
    cluster.kubectl("create", "namespace", NAMESPACE, check=False)
    return cluster


def document(spec: dict[str, Any], name: str = "drift") -> dict[str, Any]:
    return {"apiVersion": api.API_VERSION, "kind": api.KIND,
            "metadata": {"name": name, "namespace": NAMESPACE}, "spec": spec}


def server_errors(cluster: Cluster, spec: dict[str, Any]) -> list[tuple[str, str]] | None:
    """(field, message) of each cause the API server gives for refusing the policy;
    None if a server-side dry run of its creation succeeds."""
    try:
        cluster.custom.create_namespaced_custom_object(
            api.GROUP, api.VERSION, NAMESPACE, api.PLURAL, document(spec), dry_run="All")
    except ApiException as e:
        assert e.status == 422, (e.status, e.body)
        causes = json.loads(e.body or "{}")["details"].get("causes", [])
        return [(c.get("field", ""), c.get("message", "")) for c in causes]
    return None


def model_errors(spec: dict[str, Any]) -> list[str] | None:
    """Dotted locations of the model's errors ('spec.cpu.overrides.0'); None if it accepts."""
    try:
        api.parse_policy(document(spec))
    except ValidationError as e:
        return [".".join(str(x) for x in err["loc"]) for err in e.errors()]
    return None


# The cause (without a field) that says CEL did not run, because the schema failed first.
CEL_SKIPPED = "some validation rules were not checked"


def fields(errors: list[tuple[str, str]]) -> list[str]:
    return [f for f, _ in errors if f not in ("", "<nil>")]


def sections(locations: Iterable[str]) -> set[str]:
    """'spec.cpu.overrides[0].x' -> 'spec.cpu'."""
    return {".".join(dotted(f).split(".")[:2]) for f in locations}


def dotted(field: str) -> str:
    """The API server's 'spec.cpu.overrides[0].minParallelism' as 'spec.cpu.overrides.0....'."""
    return field.replace("[", ".").replace("]", "")


def test_every_section_rule_refuses_on_the_server_with_its_message(server: Cluster) -> None:
    for message, (model, section) in SECTION_CASES.items():
        path = SECTION_PATH[model]
        spec = spec_setting(path, section) if model is not api.TargetRef else {"targetRef": section}
        errors = server_errors(server, spec)
        assert errors is not None, f"the API server accepted {spec} ({message})"
        assert any(message in m for _, m in errors), (message, errors)
        assert all(f.startswith("spec.") for f in fields(errors)), errors
        assert model_errors(spec) is not None, spec


def test_every_field_bound_refuses_on_the_server_naming_the_field(server: Cluster) -> None:
    for (path, message), value in OUT_OF_RANGE.items():
        spec = spec_setting(path, value)
        errors = server_errors(server, spec)
        assert errors is not None, f"the API server accepted {path}={value!r}"
        field = path.replace("[]", "[0]")
        assert (field, f'Invalid value: "string": {message}') in errors, (path, value, errors)
        # No CEL evaluation error, however large the number: 99999999999h is "too long".
        assert not any("evaluat" in m or "overflow" in m for _, m in errors), errors


def test_ipv6_hosts_are_refused_by_the_ip_rule_alone_or_by_the_pattern_alone(
        server: Cluster) -> None:
    """Kubernetes' IP library on the server: a non-canonical or mapped host gets the IPv6
    message alone, never a CEL evaluation error; one the pattern refuses, not it."""
    field = "spec.metrics.prometheusUrl"
    for url in IPV6_URLS[1]:
        errors = server_errors(server, spec_setting(field, url))
        assert errors == [(field, f'Invalid value: "string": {dial.IPV6_MESSAGE}')], (url, errors)
    for url in NOT_IPV6_URLS:
        errors = server_errors(server, spec_setting(field, url))
        assert errors and not any(dial.IPV6_MESSAGE in m or "evaluat" in m
                                  for _, m in errors), (url, errors)


@pytest.mark.parametrize("example", ["cross-field.yaml", "out-of-range.yaml",
                                     "invalid-policy.yaml"])
def test_the_invalid_examples_are_refused_by_kubectl_apply_naming_each_field(
    server: Cluster, example: str
) -> None:
    path = ROOT / "examples" / "invalid" / example
    doc = yaml.safe_load(path.read_text())
    doc["metadata"]["namespace"] = NAMESPACE
    done = server.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(doc), check=False)
    assert done.returncode != 0, done.stdout
    model = model_errors(doc["spec"])
    assert model is not None
    server_fields = set(re.findall(r"^\* (spec[^:]*):", done.stderr, re.M))
    assert server_fields, done.stderr
    # Both name the same sections. (Within a section each may stop early: the server runs
    # CEL only once the schema passes, pydantic a section's cross-field rules only once
    # its fields are valid.)
    if CEL_SKIPPED in done.stderr:
        assert sections(server_fields) <= sections(model), (server_fields, model)
    else:
        assert sections(server_fields) == sections(model), (server_fields, model)


def test_the_model_and_the_server_accept_the_examples(server: Cluster) -> None:
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        assert server_errors(server, doc["spec"]) is None, path
        assert model_errors(doc["spec"]) is None, path


# --- the drift test --------------------------------------------------------------------

# Every field's values inside its bounds, and at, across or far beyond them (some break
# the syntax or would overflow CEL's duration). A drawn spec is a valid one, made of
# inside values, with up to two fields set to an outside value: a spec that breaks one
# rule only is where a model and a CRD that disagree show it.
HUGE = ["99999h", "100000h", "99999999999h", "abc", "", "1d", "5"]
RATIO = ([0.2, 0.5, 0.8], [0.0, 0.01, 0.99, 1.0, 1.01, -0.1])
PARALLELISM = ([1, 2, 200, 32768], [0, 1, 50, 32768, 32769])
VERTEX = "90bea66de1c231edf33913ecd54406c1"
FIELDS: dict[str, tuple[list[Any], list[Any]]] = {
    "spec.targetRef.name": (["q11", "q-11.a"], ["Q11", "-q"]),
    "spec.targetRef.kind": (["FlinkDeployment"], ["Deployment"]),
    "spec.targetRef.apiVersion": (["flink.apache.org/v1beta1"], ["apps/v1"]),
    "spec.mode": (["Active", "Recommend", "Disabled"], ["Auto"]),
    "spec.metrics.window": (["30s", "2m", "1h"], ["4999ms", "1h", "1h1ms", "61m", *HUGE]),
    "spec.metrics.stabilization": (["0s", "1m", "1h"], ["1h1ms", "3600001ms", *HUGE]),
    "spec.metrics.prometheusUrl": IPV6_URLS,
    "spec.metrics.resolution": (["5s", "10s"], ["0s", "1ms", "4999ms", "5s", "5001ms", "2m",
                                                "2m1ms", "1h", "1h1ms", *HUGE]),
    "spec.cpu.utilizationMin": RATIO, "spec.cpu.utilizationTarget": RATIO,
    "spec.cpu.utilizationMax": RATIO,
    "spec.cpu.minParallelism": PARALLELISM, "spec.cpu.maxParallelism": PARALLELISM,
    "spec.cpu.overrides[]": ([{"operatorUid": "count"}, {"vertexId": VERTEX}],
                             [{}, {"operatorUid": "count", "vertexId": VERTEX}]),
    "spec.cpu.overrides[].minParallelism": PARALLELISM,
    "spec.cpu.overrides[].maxParallelism": PARALLELISM,
    "spec.cpu.maxScaleDownFactor": ([0.5], [0.0, 1.0]),
    "spec.cpu.scaleDownDelay": (["0s", "5m", "24h"], ["24h1s", "86400001ms", "100000s", *HUGE]),
    "spec.cpu.catchUpDuration": (["0s", "5m", "24h"], ["24h1s", "1441m", *HUGE]),
    "spec.memory.baseManagedMemory": (
        ["1Mi", "158Mi", "64Gi", "1G"],
        ["0", "1", "1048575", "1048576", "0.5Mi", "1023Ki", "1024Ki", "65536Mi", "65537Mi",
         "68719476736", "68719476737", "2048m", "Mi", "-1Mi", "1e3", 158]),
    "spec.memory.maxLevel": ([1, 3, 8], [0, 9]),
    "spec.memory.cacheHitRateThreshold": RATIO,
    "spec.memory.stateLatencyThreshold": (["0s", "1ms", "10s"],
                                          ["10001ms", "11s", "0.5ms", *HUGE]),
    "spec.memory.minImprovement": ([0.0, 0.05], [1.0, -0.1]),
    "spec.limits.maxCpuCores": ([0.5, 100], [0, -1]),
    "spec.limits.maxMemory": (["1Mi", "100Gi"], ["0", "1048575", "1048576", "0.9Mi"]),
    "spec.taskManager.shapes": ([[{}], []], [[{}] * 9]),
    "spec.taskManager.minCpu": ([0.5, 1, 512], [0, 513]),
    "spec.taskManager.maxCpu": ([1, 7, 512], [0, 513]),
    "spec.taskManager.cpuStep": ([0.5, 64], [0, 65]),
    "spec.taskManager.minMemory": (["1Gi", "4Gi", "1024Gi"], ["1", "1023Mi", "1025Gi", 2048]),
    "spec.taskManager.maxMemory": (["1Gi", "28Gi", "1024Gi"], ["1", "1023Mi", "1025Gi"]),
    "spec.taskManager.memoryStep": (["1Mi", "64Mi", "1Gi"], ["1", "0.5Mi", "1025Gi"]),
    "spec.taskManager.maxSlots": ([1, 16, 256], [0, 257]),
    "spec.taskManager.shapes[].cpu": ([0.5, 4, 512], [0, 513]),
    "spec.taskManager.shapes[].memory": (
        ["1Gi", "2Gi", "1.5Gi", "1024Gi"],
        ["1", "2048", "1023Mi", "1024Mi", "1073741823", "1073741824", "1073M", "1074M",
         "1025Gi", "1Ti", "1.5Ti", "1099511627777", "2048m", 2048]),
    "spec.taskManager.shapes[].slots": ([1, 4, 256], [0, 257]),
    "spec.taskManager.realization": (["fineGrained", "adaptive"], ["inPlace"]),
    "spec.placement.solverTimeLimit": (["1ms", "2s", "1m"],
                                       ["0s", "0ms", "0.0001ms", "60001ms", "61s", *HUGE]),
}


def setting(spec: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of `spec` with `value` at `path`; 'x[]' is the list x's first item."""
    out = copy.deepcopy(spec)
    node: Any = out
    parts = path.removeprefix("spec.").split(".")
    for part in parts[:-1]:
        key = part.removesuffix("[]")
        if part.endswith("[]"):
            items = node.setdefault(key, [])
            if not items:  # an override needs a selector to be valid
                items.append({"operatorUid": "count"} if key == "overrides" else {})
            node = items[0]
        else:
            node = node.setdefault(key, {})
    last = parts[-1]
    if last == "overrides[]":  # `value` is the selector of the first override
        items = node.setdefault("overrides", [])
        bounds = {k: v for k, v in (items[0] if items else {}).items()
                  if k not in ("operatorUid", "vertexId")}
        items[:1] = [bounds | value]
    else:
        node[last] = value
    return out


@st.composite
def specs(draw: st.DrawFn) -> dict[str, Any]:
    spec: dict[str, Any] = {"targetRef": {"name": "q11"}}
    for path, (inside, _) in FIELDS.items():  # a valid spec: some fields set, some defaulted
        if draw(st.booleans()):
            spec = setting(spec, path, draw(st.sampled_from(inside)))
    for path, value in draw(st.lists(st.sampled_from(MUTATIONS), max_size=2)):
        spec = setting(spec, path, value)
    return spec


MUTATIONS = [(path, value) for path, (_, outside) in FIELDS.items() for value in outside]


DRIFT_EXAMPLES = 1000


def agree(server: Cluster, spec: dict[str, Any]) -> bool:
    """Assert that server and model agree on `spec`, refusing it for errors in the same
    sections; whether they accept it."""
    on_server = server_errors(server, spec)
    in_model = model_errors(spec)
    assert (on_server is None) == (in_model is None), (spec, on_server, in_model)
    if on_server is not None and in_model is not None:
        # The server names fewer sections when its schema pass failed and CEL did not run.
        named = sections(fields(on_server))
        if any(CEL_SKIPPED in m for _, m in on_server):
            assert named <= sections(in_model), (spec, on_server, in_model)
        else:
            assert named == sections(in_model), (spec, on_server, in_model)
    return on_server is None


def test_each_boundary_value_alone_gets_the_same_verdict(server: Cluster) -> None:
    """Every value of FIELDS in an otherwise default spec: each bound tested in isolation."""
    verdicts = {(path, repr(value)): agree(server, setting({"targetRef": {"name": "q11"}},
                                                           path, value))
                for path, (inside, outside) in FIELDS.items() for value in inside + outside}
    refused = [k for k, ok in verdicts.items() if not ok]
    print(f"{len(verdicts)} single values: {len(verdicts) - len(refused)} accepted, "
          f"{len(refused)} refused")
    assert len(refused) >= len(MUTATIONS) // 2


def test_the_server_and_the_model_agree_on_random_specs(server: Cluster) -> None:
    seen = {"accepted": 0, "refused": 0}

    @settings(max_examples=DRIFT_EXAMPLES, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(spec=specs())
    def random_spec(spec: dict[str, Any]) -> None:
        seen["accepted" if agree(server, spec) else "refused"] += 1

    random_spec()
    print(f"drift test: {seen}")
    # A generator that only ever produced refused (or accepted) specs would prove little.
    assert seen["accepted"] >= DRIFT_EXAMPLES // 10 and seen["refused"] >= DRIFT_EXAMPLES // 10
