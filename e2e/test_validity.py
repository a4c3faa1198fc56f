"""One truth about validity (issue 16.3): the real API server, with the generated CRD,
refuses exactly the HybridScalingPolicies the model refuses, each error naming a field.

- every CEL case of tests/api/test_cel.py (there checked with cel-python) on the server;
- the policies of examples/invalid/, as `kubectl apply` sends them;
- a drift test: hypothesis writes random specs, most of them near a bound, and the
  server (a server-side dry run) and `HybridScalingPolicy.model_validate` must agree
  on every one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from controller import api
from e2e.conftest import Cluster
from policies.spec import CpuScaling, ParallelismOverride
from tests.api.test_cel import OUT_OF_RANGE, SECTION_CASES, spec_setting

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


def dotted(field: str) -> str:
    """The API server's 'spec.cpu.overrides[0].minParallelism' as 'spec.cpu.overrides.0....'."""
    return field.replace("[", ".").replace("]", "")


def named_alike(server: list[tuple[str, str]], model: list[str]) -> bool:
    """Some field the server names is, or lies within/around, a location the model names."""
    fields = [dotted(f) for f, _ in server]
    return any(f == m or f.startswith(m + ".") or m.startswith(f + ".")
               for f in fields for m in model)


def test_every_section_rule_refuses_on_the_server_with_its_message(server: Cluster) -> None:
    for message, (model, section) in SECTION_CASES.items():
        path = SECTION_PATH[model]
        spec = spec_setting(path, section) if model is not api.TargetRef else {"targetRef": section}
        errors = server_errors(server, spec)
        assert errors is not None, f"the API server accepted {spec} ({message})"
        assert any(message in m for _, m in errors), (message, errors)
        assert all(f.startswith("spec.") for f, _ in errors), errors
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
    # Every field the model names is named by the server too.
    for location in model:
        field = location.removesuffix(".0").replace(".0.", "[0].")
        field = ".".join(p for p in field.split(".") if not p.isdigit())
        assert field.split("[")[0] in done.stderr, (field, done.stderr)


def test_the_model_and_the_server_accept_the_examples(server: Cluster) -> None:
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        assert server_errors(server, doc["spec"]) is None, path
        assert model_errors(doc["spec"]) is None, path


# --- the drift test --------------------------------------------------------------------

# Values at and around every bound, and some that break the syntax; the first list of
# each pair is inside every bound of its kind (a spec drawn from them alone is valid
# unless a cross-field rule breaks).
INSIDE_DURATIONS = ["5s", "10s", "1m", "1m30s", "2m", "0.5s"]
DURATIONS = ["0s", "1ms", "4999ms", "5s", "5001ms", "1m30s", "2m", "59m59s", "1h", "1h1ms",
             "61m", "23h59m", "24h", "24h1s", "10s", "10001ms", "1m", "60001ms", "99999h",
             "100000h", "99999999999h", "1.5s", "0.5ms", "", "1 s", "abc", "5", "1d"]
INSIDE_QUANTITIES = ["1Gi", "2Gi", "1024Mi", "4G", "64Gi"]
QUANTITIES = ["0", "1", "1048575", "1048576", "1Mi", "0.5Mi", "158Mi", "1000Ki", "1023Mi",
              "1024Mi", "1Gi", "1G", "1074M", "2Gi", "64Gi", "65536Mi", "65537Mi", "1Ti",
              "1024Gi", "1025Gi", "1.5Ti", "2048m", "2048", "Mi", "-1Mi", "1e3"]


def spec_strategy(inside: bool) -> st.SearchStrategy[dict[str, Any]]:
    """Specs of values at the bounds (`inside`: only valid ones) or around them."""
    def pick(valid: list[Any], around: list[Any],
             more: st.SearchStrategy[Any] | None = None) -> st.SearchStrategy[Any]:
        if inside:
            return st.sampled_from(valid)
        return st.sampled_from(around) if more is None else st.sampled_from(around) | more

    durations = pick(INSIDE_DURATIONS, DURATIONS, st.builds(
        lambda n, u: f"{n}{u}", st.integers(0, 200_000), st.sampled_from(["ms", "s", "m", "h"])))
    quantities = pick(INSIDE_QUANTITIES, QUANTITIES, st.builds(
        lambda n, u: f"{n}{u}", st.integers(0, 5000), st.sampled_from(["Ki", "Mi", "Gi", "M", ""])))
    ratios = pick([0.2, 0.5, 0.8], [0.0, 0.01, 0.2, 0.5, 0.8, 0.99, 1.0, 1.01, -0.1])
    parallelism = pick([1, 2, 200, 32768], [0, 1, 2, 50, 200, 32768, 32769])

    def section(**fields: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
        return st.fixed_dictionaries({}, optional=fields)  # any subset; the rest defaulted

    selector = st.fixed_dictionaries({"operatorUid": st.sampled_from(["count", "source"])}) | (
        st.fixed_dictionaries({"vertexId": st.just("90bea66de1c231edf33913ecd54406c1")}))
    if not inside:
        selector = selector | section(operatorUid=st.just("count"),
                                      vertexId=st.just("90bea66de1c231edf33913ecd54406c1"))
    override = st.tuples(selector, section(minParallelism=parallelism,
                                           maxParallelism=parallelism)).map(
        lambda t: t[0] | t[1])
    return st.fixed_dictionaries({"targetRef": st.fixed_dictionaries(
        {"name": st.sampled_from(["q11", "q-11.a"])},
        optional={"kind": pick(["FlinkDeployment"], ["FlinkDeployment", "Deployment"]),
                  "apiVersion": pick(["flink.apache.org/v1beta1"],
                                     ["flink.apache.org/v1beta1", "apps/v1"])})},
        optional={
        "mode": pick(["Active", "Recommend", "Disabled"], ["Recommend", "Auto"]),
        "metrics": section(window=durations, stabilization=durations, resolution=durations),
        "cpu": section(utilizationMin=ratios, utilizationTarget=ratios, utilizationMax=ratios,
                       minParallelism=parallelism, maxParallelism=parallelism,
                       overrides=st.lists(override, max_size=3),
                       maxScaleDownFactor=pick([0.5], [0.0, 0.5, 1.0]),
                       scaleDownDelay=durations, catchUpDuration=durations),
        "memory": section(baseManagedMemory=pick(["1Mi", "158Mi", "64Gi", "1G"], QUANTITIES),
                          maxLevel=pick([1, 3, 8], [0, 1, 8, 9]),
                          cacheHitRateThreshold=ratios, stateLatencyThreshold=durations,
                          minImprovement=pick([0.0, 0.05], [0.0, 0.05, 1.0, -0.1])),
        "limits": section(maxCpuCores=pick([0.5, 100], [0, 0.5, 100]), maxMemory=quantities),
        "taskManager": section(
            shapes=st.lists(section(cpu=pick([0.5, 4, 512], [0, 0.5, 4, 512, 513]),
                                    memory=quantities,
                                    slots=pick([1, 4, 256], [0, 1, 4, 256, 257])),
                            min_size=0 if not inside else 1, max_size=2),
            realization=pick(["fineGrained", "adaptive"], ["fineGrained", "inPlace"])),
        "placement": section(solverTimeLimit=pick(["1ms", "2s", "1m"], DURATIONS)),
    })


DRIFT_EXAMPLES = 300


def test_the_server_and_the_model_agree_on_random_specs(server: Cluster) -> None:
    seen = {"accepted": 0, "refused": 0}

    @settings(max_examples=DRIFT_EXAMPLES, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(spec=st.booleans().flatmap(spec_strategy))
    def agree(spec: dict[str, Any]) -> None:
        on_server = server_errors(server, spec)
        in_model = model_errors(spec)
        assert (on_server is None) == (in_model is None), (spec, on_server, in_model)
        if on_server is not None and in_model is not None:
            assert named_alike(on_server, in_model), (spec, on_server, in_model)
            assert all(f.startswith("spec") for f, _ in on_server), on_server
        seen["accepted" if on_server is None else "refused"] += 1

    agree()
    print(f"drift test: {seen}")
    # A generator that only ever produced refused (or accepted) specs would prove little.
    assert seen["accepted"] >= DRIFT_EXAMPLES // 10 and seen["refused"] >= DRIFT_EXAMPLES // 10
