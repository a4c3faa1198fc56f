"""Greedy packings and the lower bound: first-fit-decreasing, Flink's own first fit.

Tasks of one vertex are identical, so both heuristics work on *groups* of equal
slots: first fit of n identical items fills each open TaskManager as far as it
goes, in order, then opens new ones. That is what per-item first fit does, in
O(groups × TaskManagers) instead of O(slots × TaskManagers).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from packer.types import TaskManagerShape, TaskSlot

Demand = tuple[int, ...]
T = TypeVar("T")


@dataclass(frozen=True)
class Group:
    """Slots with one vertex id and one demand (integer units); `slots` in input order."""

    vertex_id: str
    demand: Demand
    slots: tuple[TaskSlot, ...]

    @property
    def size(self) -> int:
        return len(self.slots)


def group_slots(slots: Sequence[TaskSlot]) -> list[Group]:
    """Groups in order of first appearance."""
    members: dict[tuple[str, Demand], list[TaskSlot]] = {}
    for slot in slots:
        members.setdefault((slot.vertex_id, slot.demand()), []).append(slot)
    return [Group(v, d, tuple(s)) for (v, d), s in members.items()]


def bin_capacity(shape: TaskManagerShape) -> Demand:
    """Capacity per dimension; a slot cap becomes one more dimension where every slot costs 1."""
    cap = shape.capacity()
    return cap if shape.max_slots is None else (*cap, shape.max_slots)


def group_demand(group: Group, shape: TaskManagerShape) -> Demand:
    return group.demand if shape.max_slots is None else (*group.demand, 1)


def how_many_fit(free: Sequence[int], demand: Sequence[int], wanted: int) -> int:
    """How many items of `demand` fit into `free`, at most `wanted`."""
    fit = wanted
    for f, d in zip(free, demand, strict=True):
        if d > 0:
            fit = min(fit, f // d)
    return fit


def first_fit_groups(
    groups: Sequence[Group], shape: TaskManagerShape
) -> list[dict[int, int]] | None:
    """First fit of `groups` in the given order. Returns per TaskManager {group index: count},
    or None when some group's slot does not fit an empty TaskManager of `shape`."""
    items = [(i, group_demand(g, shape), g.size) for i, g in enumerate(groups)]
    return first_fit_counts(items, bin_capacity(shape))


def first_fit_counts(
    items: Sequence[tuple[int, Demand, int]],
    capacity: Demand,
    rooms: list[list[int]] | None = None,
    contents: list[dict[int, int]] | None = None,
) -> list[dict[int, int]] | None:
    """First fit of (key, demand, count) items, in order, into open TaskManagers, then new
    ones of `capacity`. `rooms` (free capacity) and `contents` ({key: count}) describe the
    open ones and grow in place. None when an item does not fit an empty TaskManager."""
    rooms = [] if rooms is None else rooms
    contents = [] if contents is None else contents
    # TaskManagers too full for the smallest item in some dimension take nothing more;
    # first fit fills them front to back, so skipping that prefix saves most of the scan.
    smallest = [min((d[k] for _, d, n in items if n), default=0) for k in range(len(capacity))]
    start = 0
    for key, demand, count in items:
        if any(d > c for d, c in zip(demand, capacity, strict=True)):
            return None
        left = count
        while start < len(rooms) and any(r < m for r, m in zip(rooms[start], smallest,
                                                              strict=True)):
            start += 1
        b = start
        while left > 0:
            if b == len(rooms):
                rooms.append(list(capacity))
                contents.append({})
            fit = how_many_fit(rooms[b], demand, left)
            if fit:
                for k, d in enumerate(demand):
                    rooms[b][k] -= d * fit
                contents[b][key] = contents[b].get(key, 0) + fit
                left -= fit
            b += 1
    return contents


def decreasing(groups: Sequence[Group], shape: TaskManagerShape) -> list[int]:
    """Group indices, largest first: by the largest share of a dimension, then the sum."""
    capacity = bin_capacity(shape)

    def size(i: int) -> tuple[float, float, int]:
        shares = [d / c if c else 0.0 for d, c in zip(group_demand(groups[i], shape), capacity,
                                                       strict=True)]
        return (-max(shares, default=0.0), -sum(shares), i)

    return sorted(range(len(groups)), key=size)


def first_fit_in_order(
    groups: Sequence[Group], shape: TaskManagerShape, order: Sequence[int]
) -> list[dict[int, int]] | None:
    """First fit taking groups in `order`; counts keyed by the groups' own indices."""
    packed = first_fit_groups([groups[i] for i in order], shape)
    if packed is None:
        return None
    return [{order[i]: n for i, n in tm.items()} for tm in packed]


def first_fit_decreasing(
    slots: Sequence[TaskSlot], shape: TaskManagerShape
) -> list[list[TaskSlot]] | None:
    """FFD of `slots` onto TaskManagers of `shape`; None if a slot fits no empty TaskManager."""
    groups = group_slots(slots)
    packed = first_fit_in_order(groups, shape, decreasing(groups, shape))
    return None if packed is None else materialise(packed, groups)


def flink_first_fit(
    slots: Sequence[TaskSlot], shape: TaskManagerShape
) -> list[list[TaskSlot]] | None:
    """Replay Flink's FineGrainedSlotManager on a fresh cluster of `shape` TaskManagers.

    Flink's DefaultResourceAllocationStrategy (load-balance mode NONE) takes the
    job's requirements one ResourceProfile at a time, fills pending TaskManagers
    in list order with as many slots of that profile as fit, and starts a new
    default TaskManager (filled the same way) while some remain. Requirements are
    keyed by profile, so equal-sized slots of different vertices form one request.
    We assume requests arrive in order of first appearance in `slots`: pass them
    in topological vertex order, subtasks by index. None: a slot fits no TaskManager.
    """
    groups = [Group("", d, tuple(s)) for d, s in _by_profile((s.demand(), s) for s in slots)]
    packed = first_fit_groups(groups, shape)
    return None if packed is None else materialise(packed, groups)


def flink_count(requests: Iterable[tuple[Demand, int]], shape: TaskManagerShape) -> int | None:
    """How many TaskManagers `flink_first_fit` needs for (slot demand, slots) requests in
    job order, counted without building the slots. None: a slot fits no TaskManager."""
    items = [(i, group_demand(Group("", d, ()), shape), sum(counts))
             for i, (d, counts) in enumerate(_by_profile(requests))]
    packed = first_fit_counts(items, bin_capacity(shape))
    return None if packed is None else len(packed)


def _by_profile(pairs: Iterable[tuple[Demand, T]]) -> list[tuple[Demand, list[T]]]:
    """Flink keys slot requests by resource profile: one request per profile, in order of
    first appearance."""
    merged: dict[Demand, list[T]] = {}
    for demand, item in pairs:
        merged.setdefault(demand, []).append(item)
    return list(merged.items())


def materialise(packed: Sequence[dict[int, int]], groups: Sequence[Group]) -> list[list[TaskSlot]]:
    """Turn counts per group into slots, handing out each group's slots in order."""
    taken = [0] * len(groups)
    result: list[list[TaskSlot]] = []
    for items in packed:
        tm: list[TaskSlot] = []
        for index, n in sorted(items.items()):
            tm.extend(groups[index].slots[taken[index] : taken[index] + n])
            taken[index] += n
        result.append(tm)
    return result


def unfit_slot(slots: Sequence[TaskSlot], shape: TaskManagerShape) -> TaskSlot | None:
    """The first slot that does not fit an empty TaskManager of `shape`, if any."""
    capacity = shape.capacity()
    for slot in slots:
        if any(d > c for d, c in zip(slot.demand(), capacity, strict=True)):
            return slot
    return None


def lower_bound(slots: Sequence[TaskSlot], shape: TaskManagerShape) -> int:
    """A TaskManager count no placement onto `shape` can beat.

    The largest of: per dimension, total demand over capacity (rounded up); and per
    dimension, the number of slots larger than half a TaskManager (no two share one).
    Raises ValueError when a slot fits no TaskManager of `shape` at all.
    """
    unfit = unfit_slot(slots, shape)
    count = lower_bound_counts(((g.demand, g.size) for g in group_slots(slots)), shape)
    if unfit is not None or count is None:
        raise ValueError(f"slot {(unfit or slots[0]).label} does not fit an empty "
                         f"TaskManager {shape.name}")
    return count


def lower_bound_counts(requests: Iterable[tuple[Demand, int]],
                       shape: TaskManagerShape) -> int | None:
    """`lower_bound` of (slot demand, slots) requests, counted without building the slots
    (as `flink_count` counts). None: a slot fits no TaskManager."""
    capacity = bin_capacity(shape)
    demands = [(group_demand(Group("", d, ()), shape), n) for d, n in requests if n > 0]
    if any(d > c for demand, _ in demands for d, c in zip(demand, capacity, strict=True)):
        return None
    if not demands:
        return 0
    best = 1
    for k, cap in enumerate(capacity):
        total = sum(d[k] * n for d, n in demands)
        if total == 0:
            continue
        best = max(best, -(-total // cap), sum(n for d, n in demands if 2 * d[k] > cap))
    return best
