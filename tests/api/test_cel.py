"""The CRD's CEL rules and the pydantic validators accept and reject the same sections.

CEL is evaluated here by cel-python (a CEL interpreter), on each section as the API
server would see it: defaulted from the CRD, and already valid against the schema's
own bounds (the API server runs CEL only then). Inputs come from hypothesis. cel-python
lacks Kubernetes' quantity and IP libraries and CEL's string extensions: `quantity` is
given here by our own parser, `isIP` and `ip.isCanonical` by ipaddress, `indexOf` and
`substring` by str, so those rules are checked for their logic only;
e2e/test_validity.py runs every case on a real API server.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterator
from fractions import Fraction
from functools import cache
from pathlib import Path
from typing import Any

import celpy
import yaml
from celpy import celtypes
from celpy.adapter import json_to_cel
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from controller import api
from controller.adapters import dial
from policies.quantity import parse_quantity_bytes
from policies.spec import CpuScaling, MemoryScaling, ParallelismOverride
from tests.api.test_crd import SPEC, _section, apply_defaults

ENV = celpy.Environment()


def _quantity(text: Any) -> celtypes.DoubleType:
    return celtypes.DoubleType(float(Fraction(parse_quantity_bytes(str(text)))))


def _compare_to(a: Any, b: Any) -> celtypes.IntType:
    return celtypes.IntType((a > b) - (a < b))


def _index_of(text: Any, part: Any) -> celtypes.IntType:
    return celtypes.IntType(str(text).find(str(part)))


def _substring(text: Any, start: Any, end: Any) -> celtypes.StringType:
    if not 0 <= int(start) <= int(end) <= len(str(text)):
        raise ValueError("substring: index out of range")  # an error in CEL too
    return celtypes.StringType(str(text)[int(start):int(end)])


def _k8s_ip(text: Any) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """Kubernetes' parseIPAddr: an address without a zone, not an IPv4-mapped one."""
    if "%" in str(text):
        raise ValueError("IP address with zone value is not allowed")
    address = ipaddress.ip_address(str(text))
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        raise ValueError("IPv4-mapped IPv6 address is not allowed")
    return address


def _is_ip(text: Any) -> celtypes.BoolType:
    try:
        _k8s_ip(text)
    except ValueError:
        return celtypes.BoolType(False)
    return celtypes.BoolType(True)


def _is_canonical(_library: Any, text: Any) -> celtypes.BoolType:
    return celtypes.BoolType(_k8s_ip(text).compressed == str(text))  # errors as isIP fails


@cache
def program(rule: str) -> Any:
    return ENV.program(ENV.compile(rule), functions={
        "quantity": _quantity, "compareTo": _compare_to, "indexOf": _index_of,
        "substring": _substring, "isIP": _is_ip, "isCanonical": _is_canonical})


def holds(rule: str, value: Any) -> bool:
    # `ip` names the IP library (ip.isCanonical): a member call on it here.
    return bool(program(rule).evaluate({"self": json_to_cel(value),
                                        "ip": celtypes.StringType("ip")}))


def broken_rules(schema: dict[str, Any], value: Any) -> Iterator[str]:
    """Messages of the rules `value` breaks, walking the schema as the API server does."""
    for r in schema.get("x-kubernetes-validations", ()):
        if not holds(r["rule"], value):
            yield r["message"]
    if isinstance(value, dict):
        for name, prop in schema.get("properties", {}).items():
            if name in value:
                yield from broken_rules(prop, value[name])
    if isinstance(value, list) and "items" in schema:
        for item in value:
            yield from broken_rules(schema["items"], item)


def schema_accepts(schema: dict[str, Any], value: Any) -> bool:
    """The schema's own checks that run before CEL matters: type, pattern, bounds."""
    if isinstance(value, dict):
        return all(schema_accepts(schema["properties"][k], v) for k, v in value.items()
                   if k in schema.get("properties", {}))
    if isinstance(value, list):
        return all(schema_accepts(schema["items"], v) for v in value)
    if isinstance(value, str) and "pattern" in schema:
        return re.search(schema["pattern"], value) is not None
    return True


def cel_accepts(model: type[BaseModel], section: dict[str, Any]) -> bool:
    node = _section(model)
    defaulted = apply_defaults(section, node)
    return schema_accepts(node, defaulted) and not list(broken_rules(node, defaulted))


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
) | st.builds(lambda m, s: f"{m}m{s}s", st.integers(0, 5), st.integers(0, 59)) | st.builds(
    # Past what CEL's duration() holds, or just past 5 digits.
    lambda n, unit: f"{n}{unit}", st.sampled_from([99999, 100000, 3600000, 99999999999]),
    st.sampled_from(["ms", "s", "h"]))
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


# IPv6 hosts the URL pattern lets by: canonical (RFC 5952) and not; the first parse
# (IPv4-compatible and -translated forms are not IPv4-mapped, in either library), the
# rest are refused by the IPv6 rule alone (IPV6_MESSAGE).
IPV6_URLS = (
    ["http://[::1]:9090", "http://[::]", "http://[2001:db8::1]/prom",
     "http://[2001:db8:0:1:1:1:1:1]", "http://[2001:db8::1:0:0:1]", "http://[fe80::1]:1",
     "http://[::7f00:1]", "http://[::ffff:0:7f00:1]"],
    ["http://[0:0::1]", "http://[::0:1]", "http://[::ffff:7f00:1]", "http://[::ffff:0:0]",
     "http://[2001:db8:0:0:0:0:0:1]", "http://[2001:0db8::1]", "http://[2001:db8::0:1]",
     "http://[2001:db8:0:0:1:0:0:1]", "http://[2001:db8::1:0:0:0:1]",
     "http://[2001:db8::1:1:1:1:1]", "http://[1:2:3:4:5:6:7:8:9]", "http://[:::1]",
     "http://[1::2::3]"])
# ... and bracketed hosts the pattern refuses: its message alone, as the parser gives it.
NOT_IPV6_URLS = ["http://[::ffff:127.0.0.1]", "http://[FE80::1]", "http://[::1",
                 "http://[]", "http://[[::1]]", "http://[fe80::1%25eth0]"]


def _url_messages(url: str) -> tuple[set[str], set[str]]:
    """What the CRD's rules and the parser say of `url` (the rules' messages, the parser's
    phrase after the field's name)."""
    node = _section(api.MetricsSpec)["properties"]["prometheusUrl"]
    try:
        dial.parse_url(url, "f")
    except dial.UrlRefused as e:
        return set(broken_rules(node, url)), {e.phrase}
    return set(broken_rules(node, url)), set()


def test_ipv6_hosts_agree_in_the_same_words() -> None:
    """The CRD's rules (Kubernetes' IP library) and the parser the controller dials with."""
    good, bad = IPV6_URLS
    assert all(agree(api.MetricsSpec, {"prometheusUrl": url}) for url in good)
    assert not any(agree(api.MetricsSpec, {"prometheusUrl": url}) for url in bad)
    for url in bad:
        assert _url_messages(url) == ({dial.IPV6_MESSAGE}, {dial.IPV6_MESSAGE}), url
    for url in NOT_IPV6_URLS:  # the parser stops at its first refusal, the server says all
        rules, parser = _url_messages(url)
        assert dial.IPV6_MESSAGE not in rules and parser and parser <= rules, (url, rules)


@settings(max_examples=100, deadline=None)
@given(window=durations, resolution=durations, stabilization=durations)
def test_metrics_rules_agree(window: str, resolution: str, stabilization: str) -> None:
    agree(api.MetricsSpec,
          {"window": window, "resolution": resolution, "stabilization": stabilization})


REF = {"name": "prom-auth", "key": "password"}
BASIC = {"username": {"name": "prom-auth", "key": "user"}, "password": REF}
BEARER = {"credentials": {"name": "prom-token", "key": "token"}}


@settings(max_examples=40, deadline=None)
@given(url=st.none() | st.just("https://prom.tenant.svc:9090"), basic=st.booleans(),
       bearer=st.booleans())
def test_credentials_rules_agree(url: str | None, basic: bool, bearer: bool) -> None:
    section = drop_none({"prometheusUrl": url, "basicAuth": BASIC if basic else None,
                         "authorization": BEARER if bearer else None})
    assert agree(api.MetricsSpec, section) == ((not (basic and bearer))
                                               and (url is not None or not (basic or bearer)))


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


@settings(max_examples=60, deadline=None)
@given(base=st.integers(0, 70 * 1024), unit=st.sampled_from(["Ki", "Mi", "Gi", "", "M"]),
       latency=durations)
def test_memory_bounds_agree(base: int, unit: str, latency: str) -> None:
    agree(MemoryScaling, {"baseManagedMemory": f"{base}{unit}",
                          "stateLatencyThreshold": latency})


# A section breaking each section rule (by its message); pydantic refuses it too.
SECTION_CASES: dict[str, tuple[type[BaseModel], dict[str, Any]]] = {
    "spec.targetRef.apiVersion must be flink.apache.org/v1beta1": (
        api.TargetRef, {"name": "q", "apiVersion": "apps/v1"}),
    "spec.targetRef.kind must be FlinkDeployment": (
        api.TargetRef, {"name": "q", "kind": "Deployment"}),
    "spec.metrics.resolution must be <= spec.metrics.window": (
        api.MetricsSpec, {"resolution": "1m30s", "window": "1m"}),
    "spec.metrics: set at most one of basicAuth or authorization": (
        api.MetricsSpec, {"prometheusUrl": "http://prom:9090", "basicAuth": BASIC,
                          "authorization": BEARER}),
    "spec.metrics: basicAuth and authorization require prometheusUrl": (
        api.MetricsSpec, {"authorization": BEARER}),
    "spec.cpu.utilizationMin must be <= spec.cpu.utilizationTarget": (
        CpuScaling, {"utilizationMin": 0.6}),
    "spec.cpu.utilizationTarget must be <= spec.cpu.utilizationMax": (
        CpuScaling, {"utilizationMax": 0.4}),
    "spec.cpu.minParallelism must be <= spec.cpu.maxParallelism": (
        CpuScaling, {"minParallelism": 201}),
    "spec.cpu.overrides[]: set exactly one of operatorUid or vertexId": (
        ParallelismOverride, {}),
    "spec.cpu.overrides[].minParallelism must be <= maxParallelism": (
        ParallelismOverride, {"vertexId": "v", "minParallelism": 50, "maxParallelism": 2}),
}


def test_each_rule_can_fail() -> None:
    """Not one section rule is vacuous: each rejects some section that pydantic rejects too."""
    failing = SECTION_CASES
    assert set(failing) == {r.message for rules in api.CEL_RULES.values() for r in rules}
    for message, (model, section) in failing.items():
        rules = [r for r in api.CEL_RULES[model] if r.message == message]
        defaulted = apply_defaults(section, _section(model))
        assert not holds(rules[0].rule, defaulted), message
        assert not pydantic_accepts(model, section), message


def field_rules(schema: dict[str, Any], path: str = "spec") -> Iterator[tuple[str, str, str]]:
    """(field path, rule, message) of every rule on a single field (policies.spec.Within)."""
    if schema.get("type") != "object" and schema.get("type") != "array":
        for r in schema.get("x-kubernetes-validations", ()):
            yield path, r["rule"], r["message"]
    for name, prop in schema.get("properties", {}).items():
        yield from field_rules(prop, f"{path}.{name}")
    if "items" in schema:
        yield from field_rules(schema["items"], f"{path}[]")


def spec_setting(path: str, value: Any) -> dict[str, Any]:
    """A spec with targetRef and `value` at `path` ('spec.a.b[].c'), nothing else."""
    spec: dict[str, Any] = {"targetRef": {"name": "q"}}
    node = spec
    parts = path.removeprefix("spec.").split(".")
    for part in parts[:-1]:
        child: dict[str, Any] = node.get(part.removesuffix("[]"), {})
        node[part.removesuffix("[]")] = [child] if part.endswith("[]") else child
        node = child
    last = parts[-1]
    node[last.removesuffix("[]")] = [value] if last.endswith("[]") else value
    return spec


# A value just outside each field's bound; the model refuses it with the same message.
OUT_OF_RANGE = {
    ("spec.metrics.window", "must be at most 1h"): "61m",
    ("spec.metrics.stabilization", "must be at most 1h"): "3600001ms",
    ("spec.metrics.resolution", "must be at least 5s"): "4999ms",
    ("spec.metrics.resolution", "must be at most 1h"): "1h1ms",
    ("spec.cpu.scaleDownDelay", "must be at most 24h"): "24h1s",
    ("spec.cpu.catchUpDuration", "must be at most 24h"): "99999999999h",
    ("spec.cpu.restartTime", "must be at most 24h"): "99999999999h",
    ("spec.cpu.backlogLagThreshold", "must be at most 24h"): "99999999999h",
    ("spec.memory.baseManagedMemory", "must be at least 1Mi"): "1048575",
    ("spec.memory.baseManagedMemory", "must be at most 64Gi"): "65537Mi",
    ("spec.memory.stateLatencyThreshold", "must be at most 10s"): "10001ms",
    ("spec.limits.maxMemory", "must be at least 1Mi"): "0",
    ("spec.cost.restartDowntime", "must be at most 1h"): "61m",
    ("spec.cost.paybackPeriod", "must be at least 1m"): "59s",
    ("spec.cost.paybackPeriod", "must be at most 24h"): "99999999999h",
    ("spec.taskManager.shapes[].memory", "must be at least 1Gi"): "1",
    ("spec.taskManager.shapes[].memory", "must be at most 1024Gi"): "1.5Ti",
    ("spec.taskManager.minMemory", "must be at least 1Gi"): "1",
    ("spec.taskManager.minMemory", "must be at most 1024Gi"): "1.5Ti",
    ("spec.taskManager.maxMemory", "must be at least 1Gi"): "1023Mi",
    ("spec.taskManager.maxMemory", "must be at most 1024Gi"): "1.5Ti",
    ("spec.taskManager.memoryStep", "must be at least 1Mi"): "1",
    ("spec.taskManager.memoryStep", "must be at most 1024Gi"): "1.5Ti",
    ("spec.placement.solverTimeLimit", "must be more than 0s"): "0s",
    ("spec.placement.solverTimeLimit", "must be at most 1m"): "60001ms",
    ("spec.skew.miniBatchLatency", "must be at least 1ms"): "0.5ms",
    ("spec.skew.miniBatchLatency", "must be at most 1m"): "61s",
    # Not bounds but the one URL parser's refusals (controller.adapters.dial), in order.
    ("spec.metrics.prometheusUrl", dial.FORBIDDEN[0][1]): "http://127.0.0.2:1\\@prom:9090",
    ("spec.metrics.prometheusUrl", dial.FORBIDDEN[1][1]): "http://user:password@prom:9090",
    ("spec.metrics.prometheusUrl", dial.FORBIDDEN[2][1]): "http://%70rom:9090",
    ("spec.metrics.prometheusUrl", dial.FORBIDDEN[3][1]): "http://prom:9090/?q",
    ("spec.metrics.prometheusUrl", dial.PATTERN_MESSAGE): "http://0x7f.0.0.1:9090",
    ("spec.metrics.prometheusUrl", dial.PORT_MESSAGE): "http://prom:65536/api",
    ("spec.metrics.prometheusUrl", dial.DOT_SEGMENT_MESSAGE): "http://prom:9090/a/../admin",
    ("spec.metrics.prometheusUrl", dial.IPV6_MESSAGE): "http://[2001:db8:0:0:0:0:0:1]:9090",
}


def test_each_field_bound_can_fail_and_names_the_same_bound() -> None:
    rules = list(field_rules(SPEC))
    assert {(path, message) for path, _, message in rules} == set(OUT_OF_RANGE)
    for path, rule, message in rules:
        value = OUT_OF_RANGE[path, message]
        assert not holds(rule, value), (path, message)
        spec = spec_setting(path, value)
        try:
            api.HybridScalingPolicySpec.model_validate(spec)
        except ValidationError as e:
            found = [(".".join(str(x) for x in err["loc"] if not isinstance(x, int)),
                      err["msg"]) for err in e.errors()]
            assert (path.removeprefix("spec.").replace("[]", ""),
                    f"Value error, {message}") in found, found
        else:
            raise AssertionError(f"{path}={value!r} accepted by the model")


def test_the_cross_field_example_breaks_a_rule_in_every_section() -> None:
    """examples/invalid/cross-field.yaml passes the schema and fails CEL: what e2e applies."""
    path = Path(__file__).resolve().parents[2] / "examples" / "invalid" / "cross-field.yaml"
    spec = yaml.safe_load(path.read_text())["spec"]
    defaulted = apply_defaults(spec, SPEC)
    assert schema_accepts(SPEC, defaulted)
    broken = set(broken_rules(SPEC, defaulted))
    every = {r.message for rules in api.CEL_RULES.values() for r in rules}
    unbroken = {"spec.targetRef.apiVersion must be flink.apache.org/v1beta1",
                "spec.cpu.utilizationTarget must be <= spec.cpu.utilizationMax",
                "spec.metrics: set at most one of basicAuth or authorization",
                "spec.metrics: basicAuth and authorization require prometheusUrl"}
    assert broken == (every - unbroken) | {"must be more than 0s"}
    assert not pydantic_accepts(api.HybridScalingPolicySpec, spec)
