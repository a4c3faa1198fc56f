"""The owned FlinkDeployment fields: rendering, parsing back, comparing, refusing."""

from __future__ import annotations

import json
from typing import Any

import pytest

from controller import realize
from controller.api import ResizeSpec, SecretKeyRef
from controller.realize import (
    FORST_WRITE_BUFFER_RATIO_KEY,
    MANAGED_FRACTION_KEY,
    OVERRIDES_KEY,
    RESOURCES_KEY,
    WRITE_BUFFER_RATIO_KEY,
    apply_body,
    current_fields,
    desired_fields,
    engine,
    memory_levels,
    parse_memory_mib,
    parse_overrides,
    parse_resources,
    refusal,
    render_overrides,
    requested_pods,
    resizable,
    task_manager_managed_bytes,
    write_buffer_ratio_key,
)
from policies.model import JobGraph, Vertex, VertexConfig
from policies.restart_cost import Engine
from policies.spec import CostSpec

A, B = "a" * 32, "b" * 32
GRAPH = JobGraph((Vertex(A, "src", 128, 2, 0, ("src",)),
                  Vertex(B, "agg", 128, 2, 0, ("agg", "agg-sink"))))


def desired(p_b: int = 4, level_b: int | None = 1, per_operator: bool = True) -> Any:
    config = {A: VertexConfig(2, None), B: VertexConfig(p_b, level_b)}
    return desired_fields(GRAPH, config, cpu_per_task=1.0, heap_per_task_mib=134.4,
                          base_managed_mib=158, tm_cpu=4.0, tm_memory_mib=2048, replicas=3,
                          per_operator=per_operator)


def test_overrides_round_trip_in_a_stable_order() -> None:
    text = render_overrides({B: 4, A: 2})
    assert text == f"{A}:2,{B}:4"
    assert parse_overrides(text) == {A: 2, B: 4}
    assert parse_overrides(None) == {} and parse_overrides("junk,x:y") == {}


@pytest.mark.parametrize(("text", "mib"), [
    ("2048m", 2048), ("2g", 2048), ("2Gi", 2048), ("1536Mi", 1536), (str(2 * 1024**3), 2048),
    (None, None), ("lots", None),
])
def test_memory_sizes(text: str | None, mib: int | None) -> None:
    assert parse_memory_mib(text) == mib


def test_the_apply_document_holds_only_owned_fields() -> None:
    body = apply_body("q11", "ns", desired())
    assert body["metadata"] == {"name": "q11", "namespace": "ns"}
    assert set(body["spec"]) == {"flinkConfiguration", "taskManager"}
    assert set(body["spec"]["flinkConfiguration"]) == {OVERRIDES_KEY, RESOURCES_KEY}
    assert body["spec"]["taskManager"] == {"resource": {"cpu": 4.0, "memory": "2048m"},
                                           "replicas": 3}
    resources = json.loads(body["spec"]["flinkConfiguration"][RESOURCES_KEY])
    # Chained operators share a slot-sharing group, so their entries are equal.
    assert resources["agg"] == resources["agg-sink"] == {
        "cpuCores": 1.0, "taskHeapMb": 134, "managedMemoryMb": 316}
    assert resources["src"]["managedMemoryMb"] == 0
    adaptive = apply_body("q11", "ns", desired(per_operator=False))
    assert RESOURCES_KEY not in adaptive["spec"]["flinkConfiguration"]


def test_applied_fields_read_back_equal_so_a_second_apply_is_skipped() -> None:
    want = desired()
    deployment = apply_body("q11", "ns", want)
    assert want.differences(current_fields(deployment)) == []
    assert desired(p_b=6).differences(current_fields(deployment)) == [OVERRIDES_KEY]
    assert desired(level_b=2).differences(current_fields(deployment)) == [RESOURCES_KEY]
    assert set(want.differences(current_fields({}))) == {
        OVERRIDES_KEY, RESOURCES_KEY, "taskManager.resource.cpu",
        "taskManager.resource.memory", "taskManager.replicas"}


@pytest.mark.parametrize("text", [
    "[" * 100_000 + "]" * 100_000, "{\"a\": 1}", "[1]", "{", "{\"a\": {\"cpuCores\": \"x\"}}",
    # Numbers past a float's or a Java int's range, as flink-plugin refuses them too.
    "{\"a\": {\"cpuCores\": 1, \"taskHeapMb\": 1e400}}",
    "{\"a\": {\"cpuCores\": 1, \"managedMemoryMb\": " + "9" * 400 + "}}",
    "{\"a\": {\"cpuCores\": " + "9" * 400 + "}}", "{\"a\": {\"cpuCores\": 1e400}}",
    "{\"a\": {\"cpuCores\": 0}}", "{\"a\": {\"cpuCores\": true}}",
    "{\"a\": {\"cpuCores\": 1, \"managedMemoryMb\": 2147483648}}",
])
def test_unreadable_operator_resources_differ_and_are_written_again(text: str) -> None:
    """The tenant owns the FlinkDeployment: whatever stands under our key (nested past the
    parser's depth too) reads as absent, so the pass writes its own instead of failing."""
    want = desired()
    deployment = apply_body("q11", "ns", want)
    deployment["spec"]["flinkConfiguration"][RESOURCES_KEY] = text
    assert current_fields(deployment).operator_resources is None
    assert want.differences(current_fields(deployment)) == [RESOURCES_KEY]


def test_operator_resources_parsed_once_are_a_fresh_mapping_each_read() -> None:
    """A pass reads the value several times and the parse is kept: what one reader does
    with its mapping must not change what the next one reads."""
    text = apply_body("q11", "ns", desired())["spec"]["flinkConfiguration"][RESOURCES_KEY]
    first = parse_resources(text)
    assert first is not None and first
    first.clear()
    hits = realize._parsed_resources.cache_info().hits
    again = parse_resources(text)
    assert again is not None and set(again) == set(json.loads(text))
    assert realize._parsed_resources.cache_info().hits == hits + 1  # not parsed again


def test_whole_sizes_written_as_floats_read_as_flink_plugin_reads_them() -> None:
    """316.0 is 316 to Jackson: a value written so reads as the same resources."""
    want = desired()
    deployment = apply_body("q11", "ns", want)
    conf = deployment["spec"]["flinkConfiguration"]
    conf[RESOURCES_KEY] = json.dumps({uid: {**e, "managedMemoryMb": float(e["managedMemoryMb"])}
                                      for uid, e in json.loads(conf[RESOURCES_KEY]).items()})
    assert want.differences(current_fields(deployment)) == []


def test_tenant_written_sizes_past_any_range_read_as_unknown() -> None:
    """Overrides, the TaskManager's memory and its memory fractions as the tenant may
    write them: what cannot be read is unknown (or left out), never an exception."""
    assert parse_overrides("a:2,b:²,c:" + "9" * 5000 + ",d:7") == {"a": 2, "d": 7}
    assert parse_memory_mib("1" * 400 + "m") is None
    assert task_manager_managed_bytes(apply_body("q11", "ns", desired())) is not None
    for fraction in ("1e400", "-inf", "nan"):
        deployment = apply_body("q11", "ns", desired())
        deployment["spec"]["flinkConfiguration"][MANAGED_FRACTION_KEY] = fraction
        assert task_manager_managed_bytes(deployment) is None, fraction


def test_memory_levels_come_from_the_deployment() -> None:
    deployment = apply_body("q11", "ns", desired(level_b=2))
    assert memory_levels(deployment, GRAPH, 158) == {A: None, B: 2}
    assert memory_levels({}, GRAPH, 158) == {A: 0, B: 0}  # never set: Flink's default slot


def deployment(upgrade: str | None, state: str = "RUNNING", lifecycle: str = "STABLE"
               ) -> dict[str, Any]:
    job = {} if upgrade is None else {"upgradeMode": upgrade}
    return {"spec": {"job": job},
            "status": {"jobStatus": {"state": state}, "lifecycleState": lifecycle}}


def test_refusals() -> None:
    assert refusal(deployment("savepoint")) is None
    assert refusal(deployment("last-state")) is None
    assert "stateless" in (refusal(deployment("stateless")) or "")
    assert "stateless" in (refusal(deployment(None)) or "")  # the CRD's default
    assert "RESTARTING" in (refusal(deployment("savepoint", "RESTARTING", "UPGRADING")) or "")



def test_task_heap_is_never_zero_because_flink_rejects_such_a_group() -> None:
    fields = desired_fields(GRAPH, {A: VertexConfig(1, None), B: VertexConfig(1, 0)},
                            cpu_per_task=0.25, heap_per_task_mib=0.4, base_managed_mib=158,
                            tm_cpu=1.0, tm_memory_mib=1024, replicas=1, per_operator=True)
    assert fields.operator_resources is not None
    assert {r.task_heap_mb for r in fields.operator_resources.values()} == {1}


def test_each_entry_asks_for_its_slots_planned_cpu_and_a_group_for_its_slots() -> None:
    """`slot_cpu`: one slot's CPU per vertex as priced (a group's, its members' summed);
    a vertex without one asks for the footprint's."""
    config = {A: VertexConfig(2, None), B: VertexConfig(4, 1)}
    common: dict[str, Any] = dict(cpu_per_task=1.0, heap_per_task_mib=134.4,
                                  base_managed_mib=158, tm_cpu=2.5, tm_memory_mib=2048,
                                  replicas=2, per_operator=True)
    own = desired_fields(GRAPH, config, slot_cpu={B: 0.7}, **common)
    assert own.operator_resources is not None
    assert {uid: r.cpu_cores for uid, r in own.operator_resources.items()} == {
        "src": 1.0, "agg": 0.7, "agg-sink": 0.7}
    shared = desired_fields(GRAPH, config, groups={A: B, B: B}, slot_cpu={A: 0.9, B: 0.9},
                            **common)
    assert shared.operator_resources is not None
    assert {r.cpu_cores for r in shared.operator_resources.values()} == {0.9}
    assert json.loads(apply_body("job", "ns", shared)["spec"]["flinkConfiguration"][
        RESOURCES_KEY])["agg"]["cpuCores"] == 0.9


def _tm(**fields: Any) -> dict[str, Any]:
    return {"spec": {"taskManager": fields}}


def test_requested_pods_are_the_deployments_resource_times_its_replicas() -> None:
    cost = CostSpec()
    bill = requested_pods(current_fields(
        _tm(resource={"cpu": 2, "memory": "4g"}, replicas=3)), cost)
    assert bill is not None and (bill.task_managers, bill.cpu_cores, bill.memory_mib) == (
        3, 6.0, 12288)
    assert bill.price == pytest.approx(6 + 12 * cost.memory_gib_price)
    # Native mode leaves replicas unset: the placement's count stands in.
    native = current_fields(_tm(resource={"cpu": 2, "memory": "4g"}))
    assert requested_pods(native, cost) is None
    placed = requested_pods(native, cost, task_managers=5)
    assert placed is not None and placed.task_managers == 5


@pytest.mark.parametrize("task_manager", [
    {}, {"resource": {"cpu": 2}, "replicas": 1}, {"resource": {"memory": "2g"}, "replicas": 1},
    {"resource": {"cpu": -1, "memory": "2g"}, "replicas": 1},
    {"resource": {"cpu": "nan", "memory": "2g"}, "replicas": 1},
    {"resource": {"cpu": 1, "memory": "2g"}, "replicas": -2},
    {"resource": {"cpu": 1, "memory": "2g"}, "replicas": "3"},
])
def test_requested_pods_of_an_unreadable_deployment_are_unknown(
        task_manager: dict[str, Any]) -> None:
    assert requested_pods(current_fields(_tm(**task_manager)), CostSpec()) is None


RESIZE = ResizeSpec(token=SecretKeyRef(name="resize-token", key="token"))


@pytest.mark.parametrize(("backend", "resizes", "engine_", "ratio_key"), [
    ("dev.hybridscaler.flink.resize.ResizableRocksDBStateBackendFactory", True, Engine.ROCKSDB,
     WRITE_BUFFER_RATIO_KEY),
    # flink-plugin's ForSt backend (Flink 2.2): resized in place, priced and sized as ForSt.
    ("dev.hybridscaler.flink.resize.ResizableForStStateBackendFactory", True, Engine.FORST,
     FORST_WRITE_BUFFER_RATIO_KEY),
    ("forst", False, Engine.FORST, FORST_WRITE_BUFFER_RATIO_KEY),
    ("rocksdb", False, Engine.ROCKSDB, WRITE_BUFFER_RATIO_KEY),
    ("dev.hybridscaler.flink.resize.ResizableForStStateBackendFactoryX", False, Engine.ROCKSDB,
     WRITE_BUFFER_RATIO_KEY),
])
def test_a_deployment_on_a_resizable_backend_is_resized_in_place(
        backend: str, resizes: bool, engine_: Engine, ratio_key: str) -> None:
    conf = {"state.backend.type": backend}
    deployment = {"spec": {"flinkConfiguration": conf}}
    assert resizable(deployment, RESIZE) is resizes
    assert resizable(deployment, None) is False  # no token: no agent to call
    assert engine(deployment) == engine_
    assert write_buffer_ratio_key(conf) == ratio_key
