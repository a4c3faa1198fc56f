"""The independent feasibility checker.

Written apart from the solver on purpose: it re-adds every slot's resources in
MiB and cores from the raw inputs, with none of the solver's grouping or integer
units, so a bug there cannot hide itself here. `pack` runs it on every answer,
and the tests run it on everything.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from packer.types import CurrentPlacement, Placement, Status, TaskManagerShape, TaskSlot

# Resources are counted in whole micro-cores and bytes, rounding each slot's request
# down like Flink does; so a TaskManager may exceed by less than one unit per slot.
_RESOLUTION = {"cpu": 1e-6, "heap": 2.0**-20, "managed": 2.0**-20, "network": 2.0**-20}
_NOISE = 1e-9


def _offers(shape: TaskManagerShape) -> dict[str, float]:
    memory = shape.memory
    return {
        "cpu": shape.cpu_cores,
        "heap": memory.task_heap / 2**20,
        "managed": memory.managed / 2**20,
        "network": memory.network / 2**20,
    }


def _needs(slot: TaskSlot) -> dict[str, float]:
    return {
        "cpu": slot.cpu_cores,
        "heap": slot.heap_mib,
        "managed": slot.managed_mib,
        "network": slot.network_mib,
    }


def _fits_alone(slot: TaskSlot, shape: TaskManagerShape) -> bool:
    offers = _offers(shape)
    return all(v <= offers[k] + _RESOLUTION[k] + _NOISE for k, v in _needs(slot).items())


def check(
    placement: Placement,
    slots: Sequence[TaskSlot],
    shapes: Sequence[TaskManagerShape],
    current: CurrentPlacement | None = None,
) -> list[str]:
    """Every way `placement` is wrong for `slots` and `shapes`; empty when it is valid."""
    problems: list[str] = []
    if placement.status is Status.INFEASIBLE:
        if placement.task_managers:
            problems.append("an infeasible placement lists TaskManagers")
        if not placement.reason:
            problems.append("an infeasible placement gives no reason")
        for allowed in shapes:
            if all(_fits_alone(s, allowed) for s in slots):
                problems.append(f"marked infeasible, but shape {allowed.name} holds every slot")
        return problems

    by_name = {s.name: s for s in shapes}
    shape = by_name.get(placement.shape or "")
    if shape is None:
        return [f"placement uses shape {placement.shape!r}, which is not allowed"]

    wanted = {s.key: s for s in slots}
    seen: dict[tuple[str, int], str] = {}
    names: set[str] = set()
    for tm in placement.task_managers:
        if tm.name in names:
            problems.append(f"TaskManager name {tm.name} is used twice")
        names.add(tm.name)
        if tm.shape != shape.name:
            problems.append(f"TaskManager {tm.name} has shape {tm.shape}, not {shape.name}")
        if not tm.slots:
            problems.append(f"TaskManager {tm.name} holds no task")
        for key in tm.slots:
            if key not in wanted:
                problems.append(f"TaskManager {tm.name} holds unknown task {key}")
            elif key in seen:
                problems.append(f"task {key} is on both {seen[key]} and {tm.name}")
            seen[key] = tm.name
        problems.extend(_capacity_problems(tm.name, tm.slots, tm.utilisation, wanted, shape))
    for key in wanted:
        if key not in seen:
            problems.append(f"task {key} is not placed")

    count = len(placement.task_managers)
    if placement.lower_bound > count:
        problems.append(f"lower bound {placement.lower_bound} exceeds the count {count}")
    if placement.status is Status.OPTIMAL and placement.lower_bound != count:
        problems.append(f"status optimal but lower bound {placement.lower_bound} != count {count}")
    if slots and count > placement.ffd_count:
        problems.append(
            f"{count} TaskManagers, more than first-fit-decreasing's {placement.ffd_count}"
        )
    if placement.flink_count is not None and placement.flink_count < placement.lower_bound:
        problems.append("Flink's allocator count is below the lower bound")
    if current is not None:
        moved = sum(
            1 for key, name in current.assignment.items()
            if key in seen and (current.shape != shape.name or seen[key] != name)
        )
        if moved != placement.moved:
            problems.append(f"placement says {placement.moved} tasks move, but {moved} do")
    return problems


def _capacity_problems(
    name: str,
    keys: Sequence[tuple[str, int]],
    reported: Mapping[str, float],
    wanted: dict[tuple[str, int], TaskSlot],
    shape: TaskManagerShape,
) -> list[str]:
    problems: list[str] = []
    offers = _offers(shape)
    members = [wanted[k] for k in keys if k in wanted]
    for dim, offered in offers.items():
        used = sum(_needs(s)[dim] for s in members)
        if used > offered + len(members) * _RESOLUTION[dim] + _NOISE:
            problems.append(f"TaskManager {name} needs {used:g} {dim}, has {offered:g}")
        share = used / offered if offered else 0.0
        if abs(reported.get(dim, -1.0) - share) > 1e-6:
            problems.append(f"TaskManager {name} reports {dim} utilisation "
                            f"{reported.get(dim)}, is {share:.6f}")
    if shape.max_slots is not None and len(keys) > shape.max_slots:
        problems.append(f"TaskManager {name} runs {len(keys)} tasks, max {shape.max_slots}")
    return problems
