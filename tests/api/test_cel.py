"""The CRD's CEL rules and the pydantic validators accept and reject the same sections.

CEL is evaluated here by cel-python (a CEL interpreter), on each section as the API
server would see it: defaulted from the CRD, and already valid against the schema's
own bounds (the API server runs CEL only then). Inputs come from hypothesis.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import celpy
import yaml
from celpy.adapter import json_to_cel
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from controller import api
from policies.spec import CpuScaling, ParallelismOverride
from tests.api.test_crd import _section, apply_defaults

ENV = celpy.Environment()


@cache
def program(rule: str) -> Any:
    return ENV.program(ENV.compile(rule))


def cel_accepts(model: type[BaseModel], section: dict[str, Any]) -> bool:
    value = json_to_cel(apply_defaults(section, _section(model)))
    return all(bool(program(r.rule).evaluate({"self": value})) for r in api.CEL_RULES[model])


def pydantic_accepts(model: type[BaseModel], section: dict[str, Any]) -> bool:
    try:
        model.model_validate(section)
    except ValidationError:
        return False
    return True


def agree(model: type[BaseModel], section: dict[str, Any]) -> bool:
    verdict = pydantic_accepts(model, section)
    assert cel_accepts(model, section) == verdict, (model.__name__, section, verdict)
    return verdict


def test_every_rule_compiles_and_accepts_the_defaults() -> None:
    defaults: dict[type[BaseModel], dict[str, Any]] = {
        api.TargetRef: {"name": "q11"}, ParallelismOverride: {"operatorUid": "count"},
    }
    for model in api.CEL_RULES:
        assert agree(model, defaults.get(model, {})), model.__name__


durations = st.builds(
    lambda n, unit: f"{n}{unit}", st.integers(0, 180), st.sampled_from(["ms", "s", "m", "h"])
) | st.builds(lambda m, s: f"{m}m{s}s", st.integers(0, 5), st.integers(0, 59))
unit_interval = st.floats(0.01, 0.99).map(lambda x: round(x, 2))
optional_text = st.none() | st.text("abcdef0123456789-", min_size=1, max_size=32)


def drop_none(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


@settings(max_examples=150, deadline=None)
@given(low=unit_interval, target=unit_interval, high=unit_interval,
       min_p=st.integers(1, 300), max_p=st.integers(1, 300), omit=st.sets(st.integers(0, 4)))
def test_cpu_rules_agree(low: float, target: float, high: float, min_p: int, max_p: int,
                         omit: set[int]) -> None:
    fields = ("utilizationMin", "utilizationTarget", "utilizationMax",
              "minParallelism", "maxParallelism")
    values = (low, target, high, min_p, max_p)
    agree(CpuScaling, {f: v for i, (f, v) in enumerate(zip(fields, values, strict=True))
                       if i not in omit})


@settings(max_examples=100, deadline=None)
@given(window=durations, resolution=durations, stabilization=durations)
def test_metrics_rules_agree(window: str, resolution: str, stabilization: str) -> None:
    agree(api.MetricsSpec,
          {"window": window, "resolution": resolution, "stabilization": stabilization})


@settings(max_examples=40, deadline=None)
@given(limit=durations)
def test_placement_rule_agrees(limit: str) -> None:
    agree(api.PlacementSpec, {"solverTimeLimit": limit})


@settings(max_examples=60, deadline=None)
@given(uid=optional_text, vertex=optional_text, low=st.none() | st.integers(1, 9))
def test_override_rule_agrees(uid: str | None, vertex: str | None, low: int | None) -> None:
    agree(ParallelismOverride,
          drop_none({"operatorUid": uid, "vertexId": vertex, "minParallelism": low}))


@settings(max_examples=40, deadline=None)
@given(api_version=st.none() | st.sampled_from(
           ["flink.apache.org/v1beta1", "flink.apache.org/v1", "apps/v1"]),
       kind=st.none() | st.sampled_from(["FlinkDeployment", "FlinkSessionJob", "Deployment"]))
def test_target_ref_rules_agree(api_version: str | None, kind: str | None) -> None:
    agree(api.TargetRef, drop_none({"name": "q11", "apiVersion": api_version, "kind": kind}))


def test_each_rule_can_fail() -> None:
    """Not one rule is vacuous: each rejects some section that pydantic rejects too."""
    failing: dict[str, tuple[type[BaseModel], dict[str, Any]]] = {
        "self.apiVersion == 'flink.apache.org/v1beta1'": (
            api.TargetRef, {"name": "q", "apiVersion": "apps/v1"}),
        "self.kind == 'FlinkDeployment'": (api.TargetRef, {"name": "q", "kind": "Deployment"}),
        "duration(self.resolution) > duration('0s')": (api.MetricsSpec, {"resolution": "0ms"}),
        "duration(self.resolution) <= duration(self.window)": (
            api.MetricsSpec, {"resolution": "1m30s", "window": "1m"}),
        "self.utilizationMin <= self.utilizationTarget": (CpuScaling, {"utilizationMin": 0.6}),
        "self.utilizationTarget <= self.utilizationMax": (CpuScaling, {"utilizationMax": 0.4}),
        "self.minParallelism <= self.maxParallelism": (CpuScaling, {"minParallelism": 201}),
        "has(self.operatorUid) != has(self.vertexId)": (ParallelismOverride, {}),
        "duration(self.solverTimeLimit) > duration('0s')": (
            api.PlacementSpec, {"solverTimeLimit": "0s"}),
    }
    assert set(failing) == {r.rule for rules in api.CEL_RULES.values() for r in rules}
    for rule, (model, section) in failing.items():
        value = json_to_cel(apply_defaults(section, _section(model)))
        assert not program(rule).evaluate({"self": value}), rule
        assert not pydantic_accepts(model, section), rule


def test_the_cross_field_example_breaks_a_rule_in_every_section() -> None:
    """examples/invalid/cross-field.yaml passes the schema and fails CEL: what e2e applies."""
    path = Path(__file__).resolve().parents[2] / "examples" / "invalid" / "cross-field.yaml"
    spec = yaml.safe_load(path.read_text())["spec"]
    sections: dict[type[BaseModel], list[dict[str, Any]]] = {
        api.TargetRef: [spec["targetRef"]], api.MetricsSpec: [spec["metrics"]],
        CpuScaling: [{k: v for k, v in spec["cpu"].items() if k != "overrides"}],
        ParallelismOverride: spec["cpu"]["overrides"], api.PlacementSpec: [spec["placement"]],
    }
    for model, values in sections.items():
        for section in values:
            assert not cel_accepts(model, section), model.__name__
            assert not pydantic_accepts(model, section), model.__name__
    failed = {
        r.rule for model, values in sections.items() for section in values
        for r in api.CEL_RULES[model]
        if not program(r.rule).evaluate(
            {"self": json_to_cel(apply_defaults(section, _section(model)))})
    }
    unbroken = {"self.apiVersion == 'flink.apache.org/v1beta1'",
                "duration(self.resolution) > duration('0s')",
                "self.utilizationTarget <= self.utilizationMax"}
    assert failed == {r.rule for rules in api.CEL_RULES.values() for r in rules} - unbroken
