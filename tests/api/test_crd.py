"""The generated CRD: in sync with the models, structural, the models' defaults, CEL rules."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from controller import api, crd

SCHEMA = crd.openapi_schema()
SPEC = SCHEMA["properties"]["spec"]
STATUS = SCHEMA["properties"]["status"]


def nodes(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, schema
    for name, prop in schema.get("properties", {}).items():
        yield from nodes(prop, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        yield from nodes(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from nodes(schema["additionalProperties"], f"{path}{{}}")


def apply_defaults(value: Any, schema: dict[str, Any]) -> Any:
    """The API server's structural defaulting: set missing fields' defaults, recurse."""
    if isinstance(value, dict):
        out = dict(value)
        for name, prop in schema.get("properties", {}).items():
            if name not in out and "default" in prop:
                out[name] = copy.deepcopy(prop["default"])
            if name in out:
                out[name] = apply_defaults(out[name], prop)
        return out
    if isinstance(value, list) and "items" in schema:
        return [apply_defaults(v, schema["items"]) for v in value]
    return value


def test_committed_crd_matches_the_generator() -> None:
    committed = crd.CRD_PATH.read_text()
    assert committed == crd.crd_yaml(), "crds/ drifted from controller/api.py: run `make crds`"


def test_committed_docs_reference_matches_the_generator() -> None:
    committed = crd.DOCS_PATH.read_text()
    assert committed == crd.render_docs(committed), (
        "docs/api.md drifted from controller/api.py: run `python -m controller.crd --write`"
    )


def test_names_scope_and_subresources() -> None:
    doc = yaml.safe_load(crd.crd_yaml())
    spec = doc["spec"]
    assert doc["metadata"]["name"] == "hybridscalingpolicies.hybridscaler.dev"
    assert spec["group"] == "hybridscaler.dev" and spec["scope"] == "Namespaced"
    assert spec["names"] == {
        "kind": "HybridScalingPolicy", "listKind": "HybridScalingPolicyList",
        "plural": "hybridscalingpolicies", "singular": "hybridscalingpolicy",
        "shortNames": ["hsp"], "categories": ["flink", "autoscaling"],
    }
    (version,) = spec["versions"]
    assert version["name"] == "v1alpha1" and version["served"] and version["storage"]
    assert version["subresources"] == {"status": {}}
    columns = [c["name"] for c in version["additionalPrinterColumns"]]
    assert columns == ["Target", "Mode", "Operators", "CPU", "Memory", "Step",
                       "Last Decision", "Ready", "Age"]


@pytest.mark.parametrize("column", crd.PRINTER_COLUMNS, ids=lambda c: c["name"])
def test_printer_columns_point_at_schema_fields(column: dict[str, str]) -> None:
    path = column["jsonPath"]
    if path.startswith(".metadata"):
        return
    node = SCHEMA
    for part in path.split("[")[0].strip(".").split("."):
        node = node["properties"][part]
    if "[?(" in path:  # conditions[?(@.type=="Ready")].status
        node = node["items"]["properties"][path.rsplit(".", 1)[-1]]
    expected = {"integer": "integer", "number": "number", "string": "string"}[column["type"]]
    assert node["type"] == expected


def test_schema_is_structural() -> None:
    allowed = crd._KEPT | {"x-kubernetes-validations"}
    for path, node in nodes(SCHEMA):
        assert set(node) <= allowed, f"{path}: {set(node) - allowed}"
        assert "type" in node, f"{path} has no type"
        if node["type"] == "object":
            assert "properties" in node or "additionalProperties" in node or path == ".metadata"
            assert node.get("additionalProperties") is not False, path
        for bound in ("exclusiveMinimum", "exclusiveMaximum"):
            assert node.get(bound, True) is True, f"{path}: {bound} must be the v3.0 boolean"


def test_every_default_is_the_models_default() -> None:
    """A spec of only targetRef, defaulted as the API server does, is the model's default."""
    defaulted = apply_defaults({"targetRef": {"name": "q11"}}, SPEC)
    model = api.HybridScalingPolicySpec(target_ref=api.TargetRef(name="q11"))
    assert defaulted == model.model_dump(mode="json", by_alias=True, exclude_none=True)
    assert api.HybridScalingPolicySpec.model_validate(defaulted) == model


def test_paper_defaults_are_on_the_wire() -> None:
    props = SPEC["properties"]
    assert props["mode"]["default"] == "Recommend"
    metrics = props["metrics"]["properties"]
    assert [metrics[k]["default"] for k in ("window", "stabilization", "resolution")] == [
        "2m", "1m", "5s"]
    memory = props["memory"]["properties"]
    assert memory["baseManagedMemory"]["default"] == "158Mi"
    assert memory["maxLevel"]["default"] == 3
    assert memory["cacheHitRateThreshold"]["default"] == 0.8
    assert memory["stateLatencyThreshold"]["default"] == "1ms"
    assert memory["minImprovement"]["default"] == 0.05
    cpu = props["cpu"]["properties"]
    assert [cpu[k]["default"] for k in ("utilizationMin", "utilizationTarget", "utilizationMax")
            ] == [0.2, 0.5, 0.8]
    tm = props["taskManager"]["properties"]
    assert tm["shapes"]["default"] == []  # no menu: chosen within the bounds below
    assert [tm[k]["default"] for k in ("minCpu", "maxCpu", "minMemory", "maxMemory")] == [
        1.0, 7.0, "1Gi", "28Gi"]
    assert props["placement"]["properties"]["solverTimeLimit"]["default"] == "2s"


def test_optional_fields_are_omitted_or_nullable() -> None:
    """None as a default: omitted (the API server prunes null). None as a value: nullable."""
    override = SPEC["properties"]["cpu"]["properties"]["overrides"]["items"]["properties"]
    assert "nullable" not in override["operatorUid"] and "default" not in override["operatorUid"]
    vertex = STATUS["properties"]["operators"]["items"]["properties"]
    assert vertex["memoryLevel"]["nullable"] is True
    # ...yet not required: the status writes leave None out (exclude_none).
    assert "memoryLevel" not in STATUS["properties"]["operators"]["items"]["required"]
    assert "nullable" not in vertex["busyness"]


def _section(model: type) -> dict[str, Any]:
    """The schema node of the section `model` describes (found by its CEL rules)."""
    found = [node for _, node in nodes(SCHEMA)
             if node.get("description") == (model.__doc__ or "").strip()]
    assert found, f"no schema node for {model.__name__}"
    return found[0]


@pytest.mark.parametrize("model", list(api.CEL_RULES), ids=lambda m: m.__name__)
def test_every_cel_rule_is_in_the_crd(model: type) -> None:
    node = _section(model)
    written = node.get("x-kubernetes-validations", [])
    expected = [
        {"rule": r.rule, "message": r.message}
        | ({"fieldPath": r.field_path} if r.field_path else {})
        for r in api.CEL_RULES[model]
    ]
    assert written == expected
    for rule in written:
        assert rule["message"].startswith("spec."), "a message names the field it is about"
        if "fieldPath" in rule:
            assert rule["fieldPath"].lstrip(".") in node["properties"]


def test_cross_field_rules_the_issue_asks_for() -> None:
    rules = {r.rule for rs in api.CEL_RULES.values() for r in rs}
    assert "self.utilizationMin <= self.utilizationTarget" in rules
    assert "self.utilizationTarget <= self.utilizationMax" in rules
    assert "self.minParallelism <= self.maxParallelism" in rules
    assert "has(self.operatorUid) != has(self.vertexId)" in rules
    assert "self.kind == 'FlinkDeployment'" in rules
    assert "self.apiVersion == 'flink.apache.org/v1beta1'" in rules


@pytest.mark.parametrize(("field", "bounds"), [
    ("memory.maxLevel", {"minimum": 1, "maximum": 8}),
    ("memory.cacheHitRateThreshold", {"minimum": 0, "maximum": 1}),
    ("memory.minImprovement", {"minimum": 0, "maximum": 1, "exclusiveMaximum": True}),
    ("cpu.utilizationMin", {"minimum": 0, "exclusiveMinimum": True, "maximum": 1}),
    ("cpu.minParallelism", {"minimum": 1}),
    ("taskManager.shapes", {"maxItems": 8}),
    # An exclusive minimum: kube-apiserver lets an integer 0 past `minimum: 0.01`;
    # a scale-up factor past 1e6 overflows ceil().
    ("taskManager.maxCpu", {"minimum": 0, "exclusiveMinimum": True, "maximum": 512}),
    ("taskManager.minCpu", {"minimum": 0, "exclusiveMinimum": True, "maximum": 512}),
    ("taskManager.cpuStep", {"minimum": 0, "exclusiveMinimum": True, "maximum": 64}),
    ("cpu.maxScaleUpFactor", {"maximum": 1e6}),
])
def test_single_field_bounds_are_openapi_bounds(field: str, bounds: dict[str, Any]) -> None:
    """The API server names the field in these errors itself; CEL would run only after them."""
    node = SPEC
    for part in field.split("."):
        node = node["properties"][part]
    assert {k: node.get(k) for k in bounds} == bounds


def test_lists_and_strings_under_cel_rules_are_bounded() -> None:
    """The API server's CEL cost estimate needs bounds on what a rule can iterate or compare."""
    for model in api.CEL_RULES:
        for path, node in nodes(_section(model)):
            if node["type"] == "array":
                assert "maxItems" in node, f"{model.__name__}{path}"
            if node["type"] == "string" and "enum" not in node and "pattern" not in node:
                assert "maxLength" in node, f"{model.__name__}{path}"
