"""The placement written to the FlinkDeployment is the one priced (issue 20)."""

from __future__ import annotations

import json

import pytest

from controller.realize import (
    MANAGED_FRACTION_KEY,
    NETWORK_FRACTION_KEY,
    OVERRIDES_KEY,
    RESOURCES_KEY,
    parse_memory_mib,
    parse_overrides,
)
from packer.flink_memory import task_manager_memory
from packer.pricing import Prices, ShapeBounds, cheapest, vertex_slots
from policies.model import VertexConfig
from tests.controller.test_loop import COUNTER, SOURCE, World, graph, policy


def test_the_written_pods_are_the_priced_ones() -> None:
    world = World()
    world.run()
    [body] = world.deployments.applied
    conf = body["spec"]["flinkConfiguration"]
    tm = body["spec"]["taskManager"]
    placement = world.store.last.placement
    assert placement is not None and placement.pods is not None

    # Price the configuration that was written, independently of the pass.
    resources = json.loads(conf[RESOURCES_KEY])
    overrides = parse_overrides(conf[OVERRIDES_KEY])
    assert overrides == {SOURCE: 2, COUNTER: 2}
    spec = policy().spec
    footprint = spec.scaling_params().footprint
    configuration = {SOURCE: VertexConfig(2, None), COUNTER: VertexConfig(2, 1)}
    priced = cheapest(
        vertex_slots(graph(), configuration, spec.memory.managed_mib, footprint.cpu_cores,
                     footprint.heap_mib, footprint.network_mib),
        ShapeBounds(), Prices(spec.cost.cpu_core_price, spec.cost.memory_gib_price),
        time_limit_s=spec.placement.solver_time_limit)
    assert priced is not None

    # The FlinkDeployment holds exactly that: shape, fractions, replicas, groups.
    assert tm["replicas"] == priced.replicas == placement.task_managers
    assert tm["resource"]["cpu"] == priced.shape.cpu_cores
    assert parse_memory_mib(tm["resource"]["memory"]) == priced.shape.process_mib
    options = priced.shape.memory_options
    assert float(conf[MANAGED_FRACTION_KEY]) == options.managed_fraction
    assert float(conf[NETWORK_FRACTION_KEY]) == options.network_fraction
    assert "taskmanager.numberOfTaskSlots" not in conf  # the user's
    groups = priced.group_of()
    assert {uid: e.get("slotSharingGroup") for uid, e in resources.items()} == {
        "src": groups[SOURCE], "counter": groups[COUNTER]}
    # Status says what the pods request and what they cost, and whether it is proven.
    assert placement.pods is not None
    assert placement.pods.task_managers == priced.replicas
    assert placement.pods.cpu == pytest.approx(priced.bill.cpu_cores)
    assert placement.pods.memory == pytest.approx(priced.bill.memory_mib, abs=0.5)
    assert placement.pods.price == pytest.approx(priced.price, abs=1e-3)
    assert placement.solver_status == priced.placement.status.value.upper()
    assert placement.slot_sharing_groups == {g.name: list(g.members) for g in priced.groups}

    # Flink, given the written options, gives every TaskManager what its slots take.
    split = task_manager_memory(float(parse_memory_mib(tm["resource"]["memory"]) or 0),
                                options)
    group_slot = resources["counter"]
    per_tm = max(len(t.slots) for t in priced.placement.task_managers)
    assert split.managed_mib >= per_tm * group_slot["managedMemoryMb"]
    assert split.task_heap_mib >= per_tm * group_slot["taskHeapMb"]


def test_the_capacity_policys_planned_cpu_is_what_is_priced_and_written() -> None:
    """The capacity policy plans each task's CPU (status.learned[].taskCpu): the pods are
    priced with it, and each operator's entry asks for its slot's share, a group's slot
    for its members' summed."""
    world = World()
    world.run(policy(policy="capacity"))
    [body] = world.deployments.applied
    conf = body["spec"]["flinkConfiguration"]
    status = world.store.last
    planned = {v.vertex_id: v.task_cpu for v in status.learned if v.task_cpu is not None}
    assert set(planned) == {SOURCE, COUNTER}
    assert planned[COUNTER] < 1.0  # below the footprint's core: the plan is in effect
    footprint = policy(policy="capacity").spec.scaling_params().footprint
    placement = status.placement
    assert placement is not None and placement.pods is not None
    resources = json.loads(conf[RESOURCES_KEY])
    groups = placement.slot_sharing_groups or {}
    assert groups
    for name, members in groups.items():
        expected = round(sum(planned[m] for m in members), 6)
        for uid, vid in (("src", SOURCE), ("counter", COUNTER)):
            if vid in members:
                assert resources[uid]["cpuCores"] == pytest.approx(expected), name
    # The pods requested cover the slots' CPU, and are the bill in status.
    slots_cpu = sum(max(parse_overrides(conf[OVERRIDES_KEY])[m] for m in members)
                    * sum(planned[m] for m in members) for members in groups.values())
    tm = body["spec"]["taskManager"]
    assert tm["replicas"] * tm["resource"]["cpu"] >= slots_cpu - 1e-6
    assert placement.pods.cpu == pytest.approx(tm["replicas"] * tm["resource"]["cpu"])
    assert all(cpu < footprint.cpu_cores for cpu in planned.values())


def test_a_recommendation_keeps_the_cpu_that_runs() -> None:
    """Recommend mode patches nothing: the CPU it planned is advice, and what the policy
    keeps as the running slots' CPU stays what runs (here, nothing planned yet)."""
    world = World()
    world.run(policy("Recommend", policy="capacity"))
    assert not world.deployments.applied
    assert world.store.last.learned
    assert all(v.task_cpu is None for v in world.store.last.learned)


def test_a_recommendation_keeps_what_only_a_realized_step_changes() -> None:
    """The running slots' CPU, whether it was grown after throttling, and whether a vertex
    got the footprint's core back change only with a step that runs: advice neither plans
    them nor uses up the safety net."""
    from controller.place import _running_cpu
    from policies.learning import VertexLearning

    running = VertexLearning(vertex_id="src", task_cpu=0.3, task_cpu_grown=True,
                             busy_cpu_short=True)
    assert _running_cpu(running) == {"task_cpu": 0.3, "task_cpu_grown": True,
                                     "busy_cpu_short": True}
    assert _running_cpu(None) == {"task_cpu": None, "task_cpu_grown": False,
                                  "busy_cpu_short": False}
    advised = VertexLearning(vertex_id="src", task_cpu=1.0, task_cpu_grown=True,
                             busy_cpu_short=True)
    kept = advised.model_copy(update=_running_cpu(VertexLearning(vertex_id="src")))
    assert (kept.task_cpu, kept.task_cpu_grown, kept.busy_cpu_short) == (None, False, False)
