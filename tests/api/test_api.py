"""The HybridScalingPolicy models: defaults, errors that name the field, status round-trips."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from controller import api, crd
from controller.cli import field_errors, load_recording
from controller.record import (
    policy_state,
    with_condition,
    with_decision,
    with_operators,
    with_pods,
    with_policy_state,
)
from policies import evaluate
from policies.bill import pod_bill
from policies.decision import Action, HistoryRecord, SkewFinding, epoch_seconds, rfc3339
from policies.params import HISTORY_LIMIT

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
RECORDED = EXAMPLES / "recorded" / "q11-memory-pressure.yaml"


def policy(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "hybridscaler.dev/v1alpha1",
        "kind": "HybridScalingPolicy",
        "metadata": {"name": "p"},
        "spec": {"targetRef": {"name": "q11"}, **spec},
    }


def errors_of(doc: dict[str, Any]) -> list[str]:
    with pytest.raises(ValidationError) as e:
        api.parse_policy(doc)
    return field_errors(e.value)


def test_defaults_are_the_papers() -> None:
    spec = api.parse_policy(policy()).spec
    assert spec.mode is api.Mode.RECOMMEND
    assert spec.target_ref.api_version == "flink.apache.org/v1beta1"
    assert spec.target_ref.kind == "FlinkDeployment"
    assert (spec.metrics.window, spec.metrics.stabilization, spec.metrics.resolution) == (
        120.0, 60.0, 5.0)
    assert spec.metrics.prometheus_url is None
    assert (spec.cpu.utilization_min, spec.cpu.utilization_target, spec.cpu.utilization_max) == (
        0.2, 0.5, 0.8)
    assert spec.memory.base_managed_memory == 158.0 and spec.memory.max_level == 3
    assert spec.memory.cache_hit_rate_threshold == 0.8
    assert spec.memory.state_latency_threshold == 0.001
    assert spec.memory.min_improvement == 0.05
    assert spec.limits.max_cpu_cores is None and spec.limits.max_memory is None
    # No menu: the shape is chosen within bounds that fit an 8-core, 32 GiB node; one
    # task's footprint is still a slot of the paper's 4-core, 2 GiB, 4-slot TaskManager.
    assert spec.task_manager.shapes == ()
    shape = spec.task_manager.footprint_shape()
    assert (shape.cpu, shape.memory, shape.slots) == (4.0, 2048.0, 4)
    tm = spec.task_manager
    assert (tm.min_cpu, tm.max_cpu, tm.min_memory, tm.max_memory) == (1.0, 7.0, 1024.0, 28672.0)
    assert spec.task_manager.realization is api.Realization.FINE_GRAINED
    assert spec.placement.solver_time_limit == 2.0


def test_default_task_manager_gives_the_papers_158_mib_per_slot() -> None:
    """Flink's own memory split of a 2 GiB, 4-slot TaskManager (the paper's setup)."""
    from packer.flink_memory import MIB, task_manager_memory

    shape = api.TaskManagerShape()
    per_slot = task_manager_memory(shape.memory).managed / MIB / shape.slots
    assert math.floor(per_slot) == 158
    footprint = shape.slot_footprint()
    assert footprint.cpu_cores == 1.0 and footprint.heap_mib > 0 and footprint.network_mib > 0


def test_scaling_params_carry_the_sections() -> None:
    spec = api.parse_policy(policy(cpu={"maxParallelism": 12}, limits={"maxCpuCores": 8})).spec
    params = spec.scaling_params()
    assert params.cpu.max_parallelism == 12 and params.limits.max_cpu_cores == 8
    assert params.memory == spec.memory


@pytest.mark.parametrize(("spec", "field"), [
    ({"targetRef": {"name": "q11", "kind": "Deployment"}}, "spec.targetRef.kind"),
    ({"targetRef": {"name": "q11", "apiVersion": "apps/v1"}}, "spec.targetRef.apiVersion"),
    ({"targetRef": {"name": "Not A Name"}}, "spec.targetRef.name"),
    ({"targetRef": {}}, "spec.targetRef.name"),
    ({"mode": "Auto"}, "spec.mode"),
    ({"metrics": {"window": "10s", "resolution": "30s"}}, "spec.metrics"),
    ({"metrics": {"window": "two minutes"}}, "spec.metrics.window"),
    ({"metrics": {"prometheusUrl": "prometheus:9090"}}, "spec.metrics.prometheusUrl"),
    ({"cpu": {"utilizationMin": 0.6}}, "spec.cpu"),
    ({"cpu": {"utilizationMax": 0.4}}, "spec.cpu"),
    ({"cpu": {"minParallelism": 5, "maxParallelism": 2}}, "spec.cpu"),
    ({"cpu": {"overrides": [{"minParallelism": 2}]}}, "spec.cpu.overrides[0]"),
    ({"cpu": {"overrides": [{"operatorUid": "a", "vertexId": "b"}]}}, "spec.cpu.overrides[0]"),
    ({"cpu": {"overrides": [{"operatorUid": "a"}] * 101}}, "spec.cpu.overrides"),
    ({"memory": {"maxLevel": 0}}, "spec.memory.maxLevel"),
    ({"memory": {"cacheHitRateThreshold": 1.5}}, "spec.memory.cacheHitRateThreshold"),
    ({"memory": {"minImprovement": 1.0}}, "spec.memory.minImprovement"),
    ({"memory": {"baseManagedMemory": "lots"}}, "spec.memory.baseManagedMemory"),
    ({"limits": {"maxCpuCores": 0}}, "spec.limits.maxCpuCores"),
    ({"taskManager": {"shapes": [{}] * 9}}, "spec.taskManager.shapes"),
    ({"taskManager": {"minCpu": 0}}, "spec.taskManager.minCpu"),
    ({"taskManager": {"maxSlots": 0}}, "spec.taskManager.maxSlots"),
    ({"taskManager": {"shapes": [{"slots": 0}]}}, "spec.taskManager.shapes[0].slots"),
    ({"taskManager": {"realization": "inPlace"}}, "spec.taskManager.realization"),
    ({"placement": {"solverTimeLimit": "0s"}}, "spec.placement.solverTimeLimit"),
    # issue 16.3: what the CRD used to admit and the controller then refused or crashed on
    ({"metrics": {"window": "99999999999h"}}, "spec.metrics.window"),
    ({"metrics": {"stabilization": "99999999999h"}}, "spec.metrics.stabilization"),
    ({"metrics": {"resolution": "1ms"}}, "spec.metrics.resolution"),
    ({"memory": {"baseManagedMemory": "0"}}, "spec.memory.baseManagedMemory"),
    ({"memory": {"baseManagedMemory": 158}}, "spec.memory.baseManagedMemory"),
    ({"limits": {"maxMemory": "0"}}, "spec.limits.maxMemory"),
    ({"taskManager": {"shapes": [{"memory": "1"}]}}, "spec.taskManager.shapes[0].memory"),
    ({"cpu": {"overrides": [{"operatorUid": "a", "minParallelism": 50, "maxParallelism": 2}]}},
     "spec.cpu.overrides[0]"),
    ({"cpu": {"utilizationMin": 0.2, "typo": 1}}, "spec.cpu.typo"),
])
def test_invalid_input_names_the_field(spec: dict[str, Any], field: str) -> None:
    doc = policy()
    doc["spec"] = {**doc["spec"], **spec}
    errors = errors_of(doc)
    assert any(e.split(":")[0] == field for e in errors), errors


def test_cross_field_messages_name_the_fields() -> None:
    errors = errors_of(policy(cpu={"minParallelism": 5, "maxParallelism": 2}))
    assert any("minParallelism" in e and "maxParallelism" in e for e in errors), errors
    errors = errors_of(policy(metrics={"window": "10s", "resolution": "30s"}))
    assert any("resolution" in e and "window" in e for e in errors), errors


def test_wrong_document_kind_is_rejected() -> None:
    doc = policy()
    doc["kind"] = "FlinkDeployment"
    assert any("kind" in e for e in errors_of(doc))


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_examples_validate(path: Path) -> None:
    for doc in yaml.safe_load_all(path.read_text()):
        api.parse_policy(doc)


def test_examples_cover_minimal_recommend_and_full() -> None:
    specs = {p.stem: api.parse_policy(yaml.safe_load(p.read_text())).spec
             for p in EXAMPLES.glob("*.yaml")}
    assert specs["minimal"] == api.HybridScalingPolicySpec(target_ref={"name": "q11"})
    assert specs["recommend"].mode is api.Mode.RECOMMEND
    full = specs["full"]
    assert full.mode is api.Mode.ACTIVE and full.cpu.overrides and full.limits.max_memory
    assert {o.operator_uid is None for o in full.cpu.overrides} == {True, False}


def test_the_invalid_example_is_rejected_field_by_field() -> None:
    doc = yaml.safe_load((EXAMPLES / "invalid" / "invalid-policy.yaml").read_text())
    fields = {e.split(":")[0] for e in errors_of(doc)}
    assert {"spec.targetRef.kind", "spec.mode", "spec.metrics", "spec.cpu.overrides[0]",
            "spec.memory.maxLevel"} <= fields


# --- status --------------------------------------------------------------------------


def rich_status(now: float | None = None) -> api.Status:
    """A status as the controller writes it after one real evaluation of the recorded q11."""
    rec = load_recording(RECORDED)
    now = rec.time if now is None else now
    spec = rec.spec()
    result = evaluate(rec.graph, rec.observation, policy_state(api.Status()),
                      spec.scaling_params(), now)
    operators = [
        api.OperatorStatus(
            vertex_id=v.id, name=v.name, parallelism=v.parallelism, memory_level=v.memory_level,
            managed_mib=spec.memory.managed_mib(v.memory_level),
            busyness=rec.observation.vertices[v.id].busyness,
            true_processing_rate=rec.observation.vertices[v.id].true_processing_rate,
            cache_hit_rate=rec.observation.vertices[v.id].cache_hit_rate,
            state_latency_ns=rec.observation.vertices[v.id].state_latency_ns,
        )
        for v in rec.graph.vertices
    ]
    status = api.Status(observed_generation=3, placement=api.PlacementStatus(
        task_managers=2, shape=api.TaskManagerShape(), lower_bound=2,
        solver_status="optimal", moved_tasks=1))
    status = with_policy_state(
        with_decision(with_operators(status, operators), result.decision), result.state)
    status = with_pods(status, pod_bill(4.0, 2048, 2, cpu_core_price=1.0, memory_gib_price=0.134))
    for type_ in api.ConditionType:
        status = with_condition(status, type_, type_ is not api.ConditionType.LIMIT_REACHED,
                                       "Evaluated", f"{type_} set", now=now,
                                       observed_generation=3)
    return status


def test_status_round_trips_exactly_through_json() -> None:
    status = rich_status()
    wire = json.dumps(status.model_dump(mode="json", by_alias=True))
    back = api.Status.model_validate(json.loads(wire))
    assert back == status
    assert json.dumps(back.model_dump(mode="json", by_alias=True)) == wire
    assert policy_state(back) == policy_state(status)


def test_fields_of_a_newer_controller_are_written_back_as_read() -> None:
    """A rolling upgrade: the older replica may save the status a newer one wrote (whole,
    with its own fields). What it does not know it keeps, at every depth."""
    wire = rich_status().model_dump(mode="json", by_alias=True)
    assert wire["history"] and wire["history"][0]["vertices"] and wire["lastDecision"]
    wire["newTopLevel"] = {"kept": [1, 2]}
    wire["history"][0]["newReason"] = "why, from a newer controller"
    wire["history"][0]["vertices"][0]["newField"] = 7
    wire["lastDecision"]["newForecast"] = "x"
    wire["conditions"][0]["newDetail"] = "y"
    back = api.Status.model_validate(json.loads(json.dumps(wire)))
    # The older replica changes what it knows (a new history entry), and saves it all.
    saved = back.model_copy(update={"step": back.step + 1}).model_dump(mode="json",
                                                                      by_alias=True)
    assert saved["newTopLevel"] == {"kept": [1, 2]}
    assert saved["history"][0]["newReason"] == "why, from a newer controller"
    assert saved["history"][0]["vertices"][0]["newField"] == 7
    assert saved["lastDecision"]["newForecast"] == "x"
    assert saved["conditions"][0]["newDetail"] == "y"
    assert {**saved, "step": wire["step"]} == wire


def test_times_are_rfc3339_on_the_wire_and_round_trip_at_microseconds() -> None:
    now = 1795330707.2511103  # a clock reading with more digits than the wire keeps
    waits = {"count": now - 30.123456789}
    status = rich_status(now)
    status = with_policy_state(status, replace(policy_state(status),
                                              scale_down_wanted_since=waits,
                                              cpu_short_since=now - 120.0))
    wire = status.model_dump(mode="json", by_alias=True)
    # The first window of pods short of CPU survives a controller restart.
    assert wire["cpuShortSince"] == "2026-11-22T06:56:27.251110Z"
    back = api.Status.model_validate(json.loads(json.dumps(wire)))
    assert policy_state(back).cpu_short_since == pytest.approx(now - 120.0, abs=1e-6)
    assert wire["lastReconfigurationTime"] == "2026-11-22T06:58:27.251110Z"
    assert wire["lastDecision"]["time"] == "2026-11-22T06:58:27.251110Z"
    assert wire["history"][0]["time"] == "2026-11-22T06:58:27.251110Z"
    assert wire["scaleDownWantedSince"] == [
        {"vertexId": "count", "since": "2026-11-22T06:57:57.127654Z"}]
    # In Python they stay seconds since the epoch, rounded to the microsecond kept.
    assert status.last_reconfiguration_time == 1795330707.25111
    assert status.last_decision is not None and status.last_decision.time == 1795330707.25111
    back = api.Status.model_validate(json.loads(json.dumps(wire)))
    assert back == status
    assert policy_state(back) == policy_state(status)


def test_a_status_written_with_float_times_is_still_read() -> None:
    wire = rich_status(1795330707.25).model_dump(mode="json", by_alias=True)
    old = {**wire, "lastReconfigurationTime": 1795330707.25,
           "scaleDownWantedSince": [{"vertexId": "count", "since": 1795330700.0000004}]}
    old["lastDecision"] = {**wire["lastDecision"], "time": 1795330707.25}
    old["history"] = [{**wire["history"][0], "time": 1795330707.25}]
    status = api.Status.model_validate(old)
    assert status.last_reconfiguration_time == 1795330707.25
    assert status.scale_down_wanted_since[0].since == 1795330700.0
    assert status.model_dump(mode="json", by_alias=True)["lastDecision"] == wire["lastDecision"]
    with pytest.raises(ValidationError, match="RFC 3339"):
        api.Status.model_validate({**wire, "lastReconfigurationTime": "yesterday"})


@given(st.floats(min_value=0, max_value=4e9, allow_nan=False))
def test_epoch_time_round_trips_exactly(seconds: float) -> None:
    kept = epoch_seconds(seconds)
    # Half a microsecond, plus the float's own spacing there (1.5e-8 s at 2^26 s).
    assert abs(kept - seconds) <= 5e-7 + math.ulp(seconds)
    assert epoch_seconds(rfc3339(kept)) == kept
    assert epoch_seconds(kept) == kept
    record = HistoryRecord(time=seconds, step=1, vertices=())
    assert HistoryRecord.model_validate_json(record.model_dump_json()) == record


def test_status_numbers_are_rounded_for_humans() -> None:
    op = api.OperatorStatus(vertex_id="v", parallelism=1, memory_level=0, managed_mib=158.0,
                            busyness=0.08065794268658717, true_processing_rate=4.990650809185072e6,
                            cache_hit_rate=0.912345678, state_latency_ns=17321.467821120877)
    (stored,) = with_operators(api.Status(), [op]).operators
    assert (stored.busyness, stored.true_processing_rate, stored.cache_hit_rate,
            stored.state_latency_ns) == (0.0807, 4990650.8, 0.9123, 17321.0)
    decision = rich_status().last_decision
    assert decision is not None
    for v in decision.vertices:
        for value, digits in ((v.busyness, 4), (v.utilization, 4), (v.cache_hit_rate, 4),
                              (v.true_processing_rate, 1), (v.target_rate, 1),
                              (v.state_latency_ns, 0)):
            assert value is None or value == round(value, digits)


def without_nulls(value: Any) -> Any:
    """What the API server stores after a JSON merge patch: every null key dropped."""
    if isinstance(value, dict):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [without_nulls(v) for v in value]
    return value


def test_status_survives_a_merge_patch_dropping_nulls() -> None:
    status = rich_status().model_copy(update={"observed_generation": None, "placement": None})
    wire = status.model_dump(mode="json", by_alias=True)
    assert wire["lastDecision"]["vertices"][0]["memoryLevelAfter"] is None  # ⊥: stripped
    stored = without_nulls(wire)
    assert api.Status.model_validate(stored) == status


def test_every_field_a_merge_patch_can_drop_is_optional_in_the_crd() -> None:
    """A key that may hold null must not be `required`, or the API server rejects the patch."""
    def walk(node: dict[str, Any]) -> None:
        for name, prop in node.get("properties", {}).items():
            if prop.get("nullable"):
                assert name not in node.get("required", ()), name
            walk(prop)
        if isinstance(node.get("items"), dict):
            walk(node["items"])
    walk(crd.openapi_schema())


def test_summary_for_printer_columns() -> None:
    summary = rich_status().summary
    assert summary.operators == 3 and summary.step == 1
    assert summary.last_action.startswith("scale-up Session Window Count (q11) m0→1")
    # CPU and Memory are what the 2 TaskManager pods request; the tasks use less.
    assert (summary.task_managers, summary.cpu, summary.memory) == (2, 8.0, "4Gi")
    assert summary.price == 8.536
    assert summary.task_cpu == 7.0 and summary.task_memory.endswith("Mi")


def test_infinite_true_processing_rate_is_stored_as_unknown() -> None:
    op = api.OperatorStatus(vertex_id="v", parallelism=1, memory_level=None, managed_mib=0,
                            true_processing_rate=math.inf)
    (stored,) = with_operators(api.Status(), [op]).operators
    assert stored.true_processing_rate is None


def test_condition_transition_time_moves_only_when_status_changes() -> None:
    s = with_condition(api.Status(), api.ConditionType.READY, True, "Evaluated", "ok", now=100.0)
    first = s.condition(api.ConditionType.READY)
    assert first is not None and first.last_transition_time == api.timestamp(100.0)
    s = with_condition(s, api.ConditionType.READY, True, "Evaluated", "still ok", now=200.0,
                         observed_generation=2)
    same = s.condition(api.ConditionType.READY)
    assert same is not None
    assert same.last_transition_time == api.timestamp(100.0)
    assert same.message == "still ok" and same.observed_generation == 2
    s = with_condition(s, api.ConditionType.READY, True, "Disabled", "off", now=250.0)
    renamed = s.condition(api.ConditionType.READY)
    assert renamed is not None and renamed.reason == "Disabled"
    assert renamed.last_transition_time == api.timestamp(100.0)  # a new reason is no transition
    s = with_condition(s, api.ConditionType.READY, False, "TargetNotFound", "gone", now=300.0)
    flipped = s.condition(api.ConditionType.READY)
    assert flipped is not None and flipped.status is api.ConditionStatus.FALSE
    assert flipped.last_transition_time == api.timestamp(300.0)
    assert len(s.conditions) == 1


def test_conditions_are_kept_in_a_stable_order_and_serialized_as_rfc3339() -> None:
    s = api.Status()
    for type_ in reversed(api.ConditionType):
        s = with_condition(s, type_, api.ConditionStatus.UNKNOWN, "Starting", "", now=1.5)
    assert [c.type for c in s.conditions] == list(api.ConditionType)
    wire = s.model_dump(mode="json", by_alias=True)["conditions"][0]
    assert wire["lastTransitionTime"] == "1970-01-01T00:00:01Z"
    assert wire["type"] == "Ready" and wire["status"] == "Unknown"


def test_condition_reason_must_be_camel_case() -> None:
    with pytest.raises(ValidationError, match="reason"):
        with_condition(api.Status(), api.ConditionType.READY, True, "not camel", "", now=0.0)


def test_policy_state_round_trip() -> None:
    state = policy_state(api.Status())
    assert state.step == 0 and state.history == () and state.last_reconfiguration_time is None
    status = rich_status()
    assert status.step == 1 and len(status.history) == 1
    assert status.last_reconfiguration_time == load_recording(RECORDED).time
    waits = {"sink": 10.0, "count": 5.0}
    waiting = with_policy_state(status, replace(policy_state(status),
                                               scale_down_wanted_since=waits))
    assert [w.vertex_id for w in waiting.scale_down_wanted_since] == ["count", "sink"]
    assert dict(policy_state(waiting).scale_down_wanted_since) == waits
    again = with_policy_state(api.Status(), policy_state(status))
    # All but when the last window was evaluated: that is the last decision's time,
    # written with the decision (with_decision), not with the state.
    assert policy_state(status).last_evaluated == status.last_decision.time  # type: ignore[union-attr]
    assert policy_state(again) == replace(policy_state(status), last_evaluated=None)
    assert status.summary.step == status.step


def test_policy_state_reads_back_which_skewed_vertices_were_saturated() -> None:
    """The skew hysteresis relaxes the saturation bound only for a vertex saturated last
    time: after a restart the controller reads that back from the last decision."""
    status = rich_status()
    assert status.last_decision is not None

    def finding(vertex_id: str, saturated: bool) -> SkewFinding:
        return SkewFinding(vertex_id=vertex_id, parallelism=4, keyed=True,
                           hottest_busyness=0.9 if saturated else 0.5, mean_busyness=0.3,
                           ratio=3.0 if saturated else 1.7, hottest_share=0.5,
                           from_records=True, saturated=saturated, scale_out_helps=False,
                           message="m")

    decision = status.last_decision.model_copy(
        update={"skew": (finding("hot", True), finding("warm", False))})
    back = api.Status.model_validate_json(
        with_decision(status, decision).model_dump_json(by_alias=True))
    state = policy_state(back)
    assert state.skewed == {"hot", "warm"} and state.skew_saturated == {"hot"}


def test_with_policy_state_keeps_only_the_newest_records() -> None:
    rec = load_recording(RECORDED)
    result = evaluate(rec.graph, rec.observation, policy_state(api.Status()),
                      rec.spec().scaling_params(), rec.time)
    (record,) = result.state.history
    records = tuple(record.model_copy(update={"step": i}) for i in range(15))
    status = with_policy_state(api.Status(), replace(result.state, history=records))
    assert [r.step for r in status.history] == list(range(5, 15))
    assert len(status.history) == HISTORY_LIMIT


def test_summary_names_the_most_telling_change_or_none() -> None:
    decision = rich_status().last_decision
    assert decision is not None
    calm = decision.model_copy(update={
        "reconfigures": False,
        "vertices": tuple(v.model_copy(update={"action": Action.NONE}) for v in decision.vertices),
    })
    assert with_decision(api.Status(), calm).summary.last_action == "none"
    out = decision.model_copy(update={"vertices": (decision.vertices[0].model_copy(update={
        "action": Action.SCALE_OUT, "parallelism_after": 5}),)})
    assert with_decision(api.Status(), out).summary.last_action == (
        "scale-out Source: Nexmark Bids p2→5")


def test_the_smallest_task_manager_has_task_heap_for_every_slot() -> None:
    """1 GiB is the CRD's lower bound of a shape's memory because Flink (default memory
    options) starts such a TaskManager with task heap for each of up to 256 slots, and
    one with 960 MiB not at all."""
    from packer.flink_memory import task_manager_memory

    smallest = api.TaskManagerShape(memory=f"{api.MIN_TASK_MANAGER_MIB:g}Mi", slots=256)
    assert smallest.slot_footprint().heap_mib > 0
    with pytest.raises(ValueError, match="no task heap"):
        task_manager_memory(960)
    with pytest.raises(ValidationError, match="must be at least 1Gi"):
        api.TaskManagerShape(memory="1023Mi")


def test_a_condition_message_past_its_limit_is_cut_not_refused() -> None:
    # A metrics-unavailable message naming hundreds of vertices would otherwise fail the
    # pass (InternalError) and write no status at all.
    long = "no metrics for " + ", ".join(f"vertex {i:05d}" for i in range(5_000))
    s = with_condition(api.Status(), api.ConditionType.METRICS_AVAILABLE, False,
                       "MetricsUnavailable", long, now=0.0)
    message = s.conditions[0].message
    assert len(message) == 32768 and message.startswith("no metrics for vertex 00000")
