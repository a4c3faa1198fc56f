"""The price of a configuration in the unit a cluster bills: the TaskManager pods it needs.

A Kubernetes cluster reserves `spec.taskManager.resource` × `spec.taskManager.replicas`,
not tasks. So a configuration's price is the pods its placement requests, at
spec.cost's prices. Three levers decide it, and all three are chosen here:

* **slot sharing** (`share_slots`): which vertices share a slot sharing group. A
  vertex without managed memory rides in a neighbour's slot when that adds no slot
  (Flink's default group does the same for every operator); a vertex with managed
  memory keeps its own group, so its memory is its own. One slot of a group holds
  one subtask of each member: the group needs max(parallelism) slots, each with the
  largest member's heap and network, the members' managed memory summed, and their
  planned CPU summed (without a plan, the footprint's, shared as in Flink's default).
* **the TaskManager shape** (`fit_shape`, `candidate_shapes`): cores, process memory
  and Flink's managed and network fractions, within the user's bounds, sized to the
  slot mix by Flink's own memory model (`flink_memory`), so memory given to caches
  is not padded with task heap nobody uses. Or the user's explicit menu.
* **the packing**: the exact packer (`packer.pack`, CP-SAT) on the few shapes billed
  least; it says whether the count is proven minimal.

Screen, then price exactly: every candidate shape is billed the TaskManagers Flink's own
first fit needs × its price (`billed`: the replicas written, which the exact placement
never exceeds); only the best `EXACT_SHAPES` go to CP-SAT. Pure and deterministic.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import NamedTuple

from packer.flink_memory import (
    DEFAULT_OPTIONS,
    MIB,
    FlinkMemoryOptions,
    process_mib_for,
    task_manager_memory,
)
from packer.greedy import flink_count, lower_bound, lower_bound_counts, unfit_slot
from packer.types import CurrentPlacement, Placement, TaskManagerShape, TaskSlot
from policies.bill import PodBill, TaskCpu
from policies.bill import Prices as Prices  # re-exported: the prices pricing is done at
from policies.levels import managed_mib
from policies.model import Configuration, JobGraph, VertexConfig

EXACT_SHAPES = 3
"""Shapes the exact packer prices after the bound has screened all candidates."""
GROWN_ROOM = 2
"""A fitted shape Flink's own first fit needs more TaskManagers of is billed again with
room for up to this many more of the largest slot (`_with_room`)."""
BALANCED_COUNTS = 24
"""The most TaskManager counts a balanced packing is fitted for (`candidate_shapes`): two
per slot sharing group, up to this many (BALANCED_WORK lowers it past 10 groups)."""
BALANCED_WORK = 240
"""Balanced counts × slot sharing groups at most: 24 counts up to 10 groups, fewer past it
(one at 200), so a job of many groups is screened in bounded time."""
FRACTION_STEP = 0.001
"""Managed and network fractions are written with three decimals."""
PAPER_SHAPE = TaskManagerShape("4cpu-2048mi-4slots", 4.0, 2048.0, max_slots=4)
"""The paper's TaskManager, and how upstream's runs are realized: 4 cores, 2 GiB, 4 slots."""


@dataclass(frozen=True)
class ShapeBounds:
    """Which TaskManagers may be chosen. The defaults fit an 8-core, 32 GiB node with
    a core and 4 GiB left to the kubelet, system daemons and DaemonSets (also any larger
    node); Flink's memory options are its defaults (a cluster that changes them says so)."""

    min_cpu: float = 1.0
    max_cpu: float = 7.0
    cpu_step: float = 0.5
    min_memory_mib: float = 1024.0
    max_memory_mib: float = 28672.0
    memory_step_mib: float = 64.0
    max_slots: int = 16
    menu: tuple[TaskManagerShape, ...] = ()  # when given, only these shapes
    options: FlinkMemoryOptions = DEFAULT_OPTIONS

    def __post_init__(self) -> None:
        if not 0 < self.min_cpu <= self.max_cpu:
            raise ValueError("shape bounds: need 0 < min_cpu <= max_cpu")
        if not 0 < self.min_memory_mib <= self.max_memory_mib:
            raise ValueError("shape bounds: need 0 < min_memory <= max_memory")
        if self.cpu_step <= 0 or self.memory_step_mib <= 0 or self.max_slots < 1:
            raise ValueError("shape bounds: steps must be > 0 and max_slots >= 1")


@dataclass(frozen=True)
class VertexSlot:
    """What one task of a vertex asks for alone (its own group), and its neighbours."""

    vertex_id: str
    parallelism: int
    cpu_cores: float
    heap_mib: float
    managed_mib: float
    network_mib: float
    neighbours: tuple[str, ...] = ()
    # `cpu_cores` is the CPU the task is planned to use (a share of a core), not the
    # footprint's whole slot: a group's slot then needs its members' CPU summed.
    planned: bool = False


@dataclass(frozen=True)
class SlotGroup:
    """One slot sharing group: its members and ONE slot's resources."""

    name: str
    members: tuple[str, ...]
    slots: int
    cpu_cores: float
    heap_mib: float
    managed_mib: float
    network_mib: float

    def task_slots(self) -> list[TaskSlot]:
        return [TaskSlot(self.name, i, self.cpu_cores, self.managed_mib, self.heap_mib,
                         self.network_mib) for i in range(self.slots)]

    def demand(self) -> tuple[int, int, int, int]:
        """One slot's demand in the packer's units (`TaskSlot.demand`)."""
        return TaskSlot(self.name, 0, self.cpu_cores, self.managed_mib, self.heap_mib,
                        self.network_mib).demand()


@dataclass(frozen=True)
class Priced:
    """A configuration's pods: the grouping, the shape, the placement and the bill."""

    groups: tuple[SlotGroup, ...]
    shape: TaskManagerShape
    placement: Placement
    replicas: int  # what Flink's own first-fit allocator needs (>= the placement's count)
    prices: Prices
    screened: int  # candidate shapes the screen ranked by their bill
    exact: int  # shapes the exact packer priced

    @property
    def bill(self) -> PodBill:
        """`replicas` pods of the shape: what they request, and their price per hour."""
        return self.prices.bill(self.shape.cpu_cores, self.shape.process_mib, self.replicas)

    @property
    def price(self) -> float:
        """Per hour, at spec.cost's prices."""
        return self.bill.price

    @property
    def proven(self) -> bool:
        """The TaskManager count is proven minimal for this shape (else only feasible)."""
        return self.placement.status.value == "optimal"

    def group_of(self) -> dict[str, str]:
        return {v: g.name for g in self.groups for v in g.members}


def upstream_pods(parallelism: Mapping[str, int] | Iterable[int],
                  shape: TaskManagerShape = PAPER_SHAPE, prices: Prices | None = None
                  ) -> PodBill:
    """How Flink runs a parallelism with its default slot sharing group: one slot holds a
    subtask of every vertex, so max(parallelism) slots on TaskManagers of `shape`."""
    values = list(parallelism.values()) if isinstance(parallelism, Mapping) else list(parallelism)
    slots = max(values, default=0)
    per_tm = shape.max_slots or 1
    return (prices or Prices()).bill(shape.cpu_cores, shape.process_mib, -(-slots // per_tm))


# --- slot sharing ---------------------------------------------------------------------


def vertex_slots(graph: JobGraph, configuration: Configuration,
                 managed_mib: Callable[[int | None], float], cpu_cores: float, heap_mib: float,
                 network_mib: float, task_cpu: TaskCpu | None = None) -> list[VertexSlot]:
    """Each vertex's task alone (one task's footprint and its level's managed memory),
    with its neighbours in the job graph, in topological order. `task_cpu`: the CPU the
    planner expects each task to use, never above the footprint's `cpu_cores`; without
    it, every task asks for the footprint's."""
    return [
        VertexSlot(
            vid, configuration[vid].parallelism,
            cpu_cores if task_cpu is None else min(cpu_cores, task_cpu(vid, configuration[vid])),
            heap_mib, managed_mib(configuration[vid].memory_level), network_mib,
            tuple(dict.fromkeys([e.source for e in graph.inputs(vid)]
                                + [e.target for e in graph.outputs(vid)])),
            planned=task_cpu is not None)
        for vid in graph.topological_order()
    ]


def own_groups(vertices: Sequence[VertexSlot]) -> tuple[SlotGroup, ...]:
    """Every vertex in its own group (what flink-plugin did before groups were chosen)."""
    return tuple(SlotGroup(v.vertex_id, (v.vertex_id,), v.parallelism, v.cpu_cores,
                           v.heap_mib, v.managed_mib, v.network_mib) for v in vertices)


def share_slots(vertices: Sequence[VertexSlot]) -> tuple[SlotGroup, ...]:
    """Vertices without managed memory ride in a neighbour's group where that adds no
    slot (the neighbour's group has at least as many slots); those left over share one
    group of their own, as in Flink's default group. A vertex with managed memory keeps
    its own group: its cache is sized for its own tasks and no rider takes from it.

    With planned CPU, a slot sharing group asks for one resource profile per slot (Flink
    requests every slot of a group alike), so a rider's CPU is added to all the group's
    slots, not only to the ones its subtasks run in: it rides only where the group has
    exactly as many slots as it has tasks, and the riders left over share a group per
    parallelism (`stateless-<p>` when there are several).
    Deterministic: `vertices` in topological order, first qualifying neighbour with the
    most slots."""
    by_id = {v.vertex_id: v for v in vertices}
    group_of: dict[str, str] = {}
    members: dict[str, list[str]] = {}
    for v in vertices:
        if v.managed_mib > 0:
            group_of[v.vertex_id] = v.vertex_id
            members[v.vertex_id] = [v.vertex_id]
    riders = [v for v in vertices if v.managed_mib <= 0]
    changed = True
    while changed:
        changed = False
        for v in riders:
            if v.vertex_id in group_of:
                continue
            hosts = [group_of[n] for n in v.neighbours if n in group_of]
            hosts = [g for g in hosts if _slots(members[g], by_id) >= v.parallelism
                     and not (v.planned and _slots(members[g], by_id) > v.parallelism)]
            if hosts:
                host = max(hosts, key=lambda g: (_slots(members[g], by_id), -hosts.index(g)))
                group_of[v.vertex_id] = host
                members[host].append(v.vertex_id)
                changed = True
    left = [v for v in riders if v.vertex_id not in group_of]
    if any(v.planned for v in left):
        by_p: dict[int, list[str]] = {}
        for v in sorted(left, key=lambda v: -v.parallelism):
            by_p.setdefault(v.parallelism, []).append(v.vertex_id)
        for p, ids in by_p.items():
            members["stateless" if len(by_p) == 1 else f"stateless-{p}"] = ids
    elif left:
        members["stateless"] = [v.vertex_id for v in left]
    return tuple(_group(name, [by_id[m] for m in ms]) for name, ms in members.items())


def groupings(vertices: Sequence[VertexSlot]) -> list[tuple[SlotGroup, ...]]:
    """The groupings priced: riders in a neighbour's slot, and every vertex on its own
    (one, when they are the same)."""
    return list(dict.fromkeys((share_slots(vertices), own_groups(vertices))))


def _slots(ids: Sequence[str], by_id: Mapping[str, VertexSlot]) -> int:
    return max(by_id[i].parallelism for i in ids)


def _group(name: str, members: Sequence[VertexSlot]) -> SlotGroup:
    # One subtask of each member shares the slot: the largest heap and network (as in
    # Flink's default group), the members' managed memory summed (each a consumer). CPU:
    # the footprint's slot is shared as in Flink's default group (the largest); planned
    # CPU is what each task uses, so the members' is summed.
    cpu = (sum if any(m.planned for m in members) else max)(m.cpu_cores for m in members)
    return SlotGroup(
        name, tuple(m.vertex_id for m in members), max(m.parallelism for m in members),
        round(cpu, 6), max(m.heap_mib for m in members),
        sum(m.managed_mib for m in members), max(m.network_mib for m in members))


# --- TaskManager shapes -----------------------------------------------------------------


def _up(value: float, step: float) -> float:
    return math.ceil(value / step - 1e-9) * step


@functools.lru_cache(maxsize=4096)  # the screen fits the same demands for many mixes
def fit_shape(cpu_cores: float, heap_mib: float, managed_mib: float, network_mib: float,
              bounds: ShapeBounds, prices: Prices) -> TaskManagerShape | None:
    """The cheapest TaskManager within `bounds` whose Flink memory split (exactly as
    Flink computes it) offers at least this task heap, managed and network memory,
    with the managed and network fractions set to what the slots take. None if none fits."""
    options = bounds.options
    cpu = max(bounds.min_cpu, _up(cpu_cores, bounds.cpu_step))
    if cpu > bounds.max_cpu + 1e-9:
        return None
    network = max(network_mib, options.network_min_mib)
    if network > options.network_max_mib:
        return None
    flink = heap_mib + managed_mib + network + options.fixed_mib
    process = max(bounds.min_memory_mib,
                  _up(process_mib_for(flink, options), bounds.memory_step_mib))
    for _ in range(64):  # each try adds one memory step; a handful is the most ever needed
        if process > bounds.max_memory_mib + 1e-9:
            return None
        shape = _shape_at(cpu, process, heap_mib, managed_mib, network, options, prices)
        if shape is not None:
            return shape
        process += bounds.memory_step_mib
    return None


def _shape_at(cpu: float, process: float, heap: float, managed: float, network: float,
              options: FlinkMemoryOptions, prices: Prices) -> TaskManagerShape | None:
    try:
        total = task_manager_memory(process, replace(options, managed_fraction=0.0)).total_flink
    except ValueError:
        return None
    managed_f = _up(managed * MIB / total, FRACTION_STEP) if managed > 0 else 0.0
    network_f = _up(network * MIB / total, FRACTION_STEP)
    if managed_f + network_f >= 1.0:
        return None
    fitted = replace(options, managed_fraction=round(managed_f, 3),
                     network_fraction=round(network_f, 3))
    try:
        split = task_manager_memory(process, fitted)
    except ValueError:
        return None
    if (split.managed_mib + 1e-6 < managed or split.network_mib + 1e-6 < network
            or split.task_heap_mib + 1e-6 < heap):
        return None
    name = (f"{cpu:g}cpu-{process:.0f}mi-m{fitted.managed_fraction:g}"
            f"-n{fitted.network_fraction:g}")
    return TaskManagerShape(name, cpu, process, max_slots=None,
                            cost=prices.of(cpu, process), memory_options=fitted)


def _per_task_manager(groups: Sequence[SlotGroup], n: int
                      ) -> tuple[list[int], tuple[float, float, float, float]]:
    """ceil(slots/n) of each group on each of n TaskManagers: always enough for all slots."""
    counts = [-(-g.slots // n) for g in groups]
    pairs = list(zip(counts, groups, strict=True))
    return counts, (sum(c * g.cpu_cores for c, g in pairs), sum(c * g.heap_mib for c, g in pairs),
                    sum(c * g.managed_mib for c, g in pairs),
                    sum(c * g.network_mib for c, g in pairs))


def _balanced(by_weight: Sequence[SlotGroup], n: int, prices: Prices
              ) -> tuple[int, tuple[float, float, float, float]]:
    """n TaskManagers holding every slot, balanced: each gets floor(slots/n) of every
    group, and each group's remaining slots go one each to the TaskManagers its priced
    size loads least (groups `by_weight`, the heaviest slot first). A group of one slot
    then takes room in one TaskManager, not in all n (`_per_task_manager`). Returns the
    most slots on one TaskManager and the most of each dimension: a shape of those holds
    this packing. TaskManagers that got the same slots are one entry with a count, so the
    work grows with the groups, not with n."""
    # (priced load, slots, cpu, heap, managed, network, TaskManagers alike)
    alike = [(0.0, 0, 0.0, 0.0, 0.0, 0.0, n)]
    for g in by_weight:
        each, rest = divmod(g.slots, n)
        grown = []
        for _, slots, cpu, heap, managed, network, count in sorted(alike):
            extra = min(rest, count)
            rest -= extra
            for k, tms in ((each + 1, extra), (each, count - extra)):
                if tms:
                    c, h = cpu + k * g.cpu_cores, heap + k * g.heap_mib
                    m, w = managed + k * g.managed_mib, network + k * g.network_mib
                    grown.append((prices.of(c, h + m + w), slots + k, c, h, m, w, tms))
        alike = grown
    return (max(a[1] for a in alike),
            (max(a[2] for a in alike), max(a[3] for a in alike), max(a[4] for a in alike),
             max(a[5] for a in alike)))


Demand = tuple[float, float, float, float]  # one TaskManager's CPU, heap, managed, network


class FittedShape(NamedTuple):
    """A candidate shape, the price of the packing it was fitted to, that packing's
    TaskManagers and one TaskManager's demand in it (None: a menu's shape)."""

    feasible: float
    shape: TaskManagerShape
    task_managers: int
    demand: Demand | None


# The planner's screen and its exact pricing of the finalists ask for the same groups'
# shapes; remembered, the finalists' are not fitted again (all arguments are frozen).
@functools.lru_cache(maxsize=256)
def candidate_shapes(groups: tuple[SlotGroup, ...], bounds: ShapeBounds,
                     prices: Prices) -> tuple[FittedShape, ...]:
    """Every shape fitted to n TaskManagers holding ceil(slots/n) of each group, or a
    balanced packing of them (`_balanced`), for each n where either changes, and to k
    of the largest slot; each with the price of that (feasible) packing. Or the menu,
    priced by its lower bound. Cheapest first."""
    if bounds.menu:
        slots = [s for g in groups for s in g.task_slots()]
        menu = [s if s.cost is not None else replace(s, cost=prices.of(s.cpu_cores,
                                                                         s.process_mib))
                for s in bounds.menu]
        fits = [s for s in menu if unfit_slot(slots, s) is None]
        counted = ((s, lower_bound(slots, s)) for s in fits)
        return tuple(sorted((FittedShape(n * s.price, s, n, None) for s, n in counted),
                            key=lambda f: (f.feasible, f.shape.name)))
    if any(fit_shape(g.cpu_cores, g.heap_mib, g.managed_mib, g.network_mib, bounds,
                     prices) is None for g in groups if g.slots):
        return ()  # a slot no TaskManager within the bounds holds: nothing to count
    seen: dict[str, FittedShape] = {}

    def offer(demand: Demand, n: int) -> None:
        shape = fit_shape(*demand, bounds, prices)
        if shape is not None and (shape.name not in seen
                                  or n * shape.price < seen[shape.name].feasible):
            seen[shape.name] = FittedShape(n * shape.price, shape, n, demand)

    # k slots of the largest slot in every dimension: always holds any k slots, so it
    # prices every mix, also one with more groups than a TaskManager can take one of each.
    slots_total = sum(g.slots for g in groups)
    largest = _largest(groups)
    for k in range(1, min(bounds.max_slots, max(slots_total, 1)) + 1):
        offer((k * largest[0], k * largest[1], k * largest[2], k * largest[3]),
              -(-slots_total // k))
    # Largest first: each group's slots over go where they weigh least (`_balanced`).
    by_weight = sorted(groups, key=lambda g: (-prices.of(g.cpu_cores, g.heap_mib + g.managed_mib
                                                         + g.network_mib), g.name))
    # Balanced from the fewest TaskManagers the largest shape allows to two more per
    # group, at most BALANCED_COUNTS of them and BALANCED_WORK over the groups: a
    # balanced packing costs groups × TaskManagers alike, so with many groups the counts
    # would make it cubic (200 vertices took 16 s, then 50 s of a 55 s decision). Past
    # them, the shapes of k largest slots and the ceil-per-TaskManager ones remain.
    by_slots = -(-slots_total // bounds.max_slots)
    fewest = max(by_slots, math.ceil(sum(g.slots * g.cpu_cores for g in groups)
                                     / bounds.max_cpu - 1e-9))
    balance_up_to = fewest + min(2 * len(groups), BALANCED_COUNTS,
                                 max(1, BALANCED_WORK // max(1, len(groups))))
    # The ceil mix puts a slot of every group on each TaskManager, so it holds at most
    # max_slots groups, and fewer than `by_slots` TaskManagers hold more slots than that.
    ceil_mix = sum(g.slots > 0 for g in groups) <= bounds.max_slots
    last: list[int] | None = None
    # Past the largest group's slot count the ceil mix stops changing, but with many
    # small groups the fewest TaskManagers can lie beyond it: balancing still runs there.
    for n in range(max(1, by_slots if ceil_mix else fewest),
                   max(max((g.slots for g in groups), default=0), balance_up_to) + 1):
        balancing = fewest <= n <= balance_up_to and sum(g.slots % n > 0 for g in groups) > 1
        if not (ceil_mix or balancing):
            continue
        counts, need = _per_task_manager(groups, n)
        if counts != last and sum(counts) <= bounds.max_slots:
            offer(need, n)
        last = counts
        # Balancing moves nothing unless two groups or more leave slots over; it depends
        # on n even where the ceil-per-TaskManager counts do not.
        if balancing:
            most, balanced = _balanced(by_weight, n, prices)
            if most <= bounds.max_slots and balanced != need:
                offer(balanced, n)
    return tuple(sorted(seen.values(), key=lambda f: (f.feasible, f.shape.name)))


def _largest(groups: Sequence[SlotGroup]) -> Demand:
    """The largest slot in each dimension (CPU, task heap, managed, network)."""
    return (max((g.cpu_cores for g in groups), default=0.0),
            max((g.heap_mib for g in groups), default=0.0),
            max((g.managed_mib for g in groups), default=0.0),
            max((g.network_mib for g in groups), default=0.0))


def _with_room(groups: Sequence[SlotGroup], fit: FittedShape, bounds: ShapeBounds,
               prices: Prices) -> list[TaskManagerShape]:
    """Flink places slots first-fit in job order, not as the packing a shape was fitted
    to: a shape fitted tight can need more TaskManagers there (what `billed` counts),
    where one with room for another largest slot or two, in CPU, in memory or in both,
    would not. Without these a larger demand could be priced lower than a smaller one
    (its shape, rounded up, has the room). Asked only of a shape Flink's first fit needs
    more of than its packing."""
    if fit.demand is None:
        return []  # a menu's shape: offered as it is
    largest = _largest(groups)
    cpu, *memory = fit.demand
    shapes = []
    for more in range(1, GROWN_ROOM + 1):
        for cpu_room, memory_room in ((more, 0), (0, more), (more, more)):
            shape = fit_shape(cpu + cpu_room * largest[0],
                              *(d + memory_room * big
                                for d, big in zip(memory, largest[1:], strict=True)),
                              bounds, prices)
            if shape is not None:
                shapes.append(shape)
    return shapes


def _billed(groups: Sequence[SlotGroup], fits: Sequence[FittedShape], bounds: ShapeBounds,
            prices: Prices) -> list[tuple[float, float, str, TaskManagerShape]]:
    """(bill, feasible price, name, shape) of each fitted shape, and of the shapes with
    room (`_with_room`) of those Flink's first fit overflows, where their lower bound
    (`greedy.lower_bound_counts`) leaves them a chance to beat the best bill so far: with
    room, a shape can need fewer TaskManagers than the count it was fitted for, so its
    bill is bounded only by that."""
    # Each group's (slot demand, slots): built once, when the first shape with room is bounded.
    requests: list[tuple[tuple[int, ...], int]] | None = None
    bills = {f.shape.name: (billed(groups, f.shape), f.feasible, f.shape.name, f.shape)
             for f in fits}
    best = min((b for b, *_ in bills.values()), default=math.inf)
    for fit in fits:
        if bills[fit.shape.name][0] <= fit.feasible + 1e-9:
            continue  # Flink's first fit needs no more than its packing
        for shape in _with_room(groups, fit, bounds, prices):
            feasible = fit.task_managers * shape.price  # ties: the least packing's
            if shape.name in bills:
                bill, known, *_ = bills[shape.name]
                bills[shape.name] = (bill, min(known, feasible), shape.name, shape)
            else:
                if requests is None:
                    requests = [(g.demand(), g.slots) for g in groups if g.slots]
                least = lower_bound_counts(requests, shape)
                if least is None or least * shape.price >= best - 1e-9:
                    continue  # a slot it cannot hold, or no packing on it beats the best
                grown = billed(groups, shape)
                bills[shape.name] = (grown, feasible, shape.name, shape)
                best = min(best, grown)
    return list(bills.values())


def forget_shapes() -> None:
    """Forget the remembered candidate shapes (a benchmark times a cold decision)."""
    candidate_shapes.cache_clear()
    fit_shape.cache_clear()


# --- the price --------------------------------------------------------------------------


def price(groups: Sequence[SlotGroup], bounds: ShapeBounds, prices: Prices,
          current: CurrentPlacement | None = None,
          time_limit_s: float = 2.0) -> Priced | None:
    """The cheapest pods for these groups: screen every candidate shape by its bill
    (`billed`), price the best `EXACT_SHAPES` with the exact packer (fewest moves from
    `current` among equal prices). None when no shape within the bounds holds the largest slot."""
    import packer  # CP-SAT loads on first use

    slots = [s for g in groups for s in g.task_slots()]
    ranked = list(candidate_shapes(tuple(groups), bounds, prices))
    if not slots:
        ranked = ranked or [FittedShape(
            0.0, fit_shape(0, 0, 0, 0, bounds, prices) or PAPER_SHAPE, 0, None)]
    if not ranked:
        return None
    screened = _screen(groups, ranked, bounds, prices)
    placement = packer.pack(slots, screened, current=current, time_limit_s=time_limit_s)
    chosen = next((s for s in screened if s.name == placement.shape), None)
    if chosen is None:
        return None
    replicas = max(placement.count, placement.flink_count or 0)
    return Priced(tuple(groups), chosen, placement, replicas, prices, len(ranked),
                  len(screened))


def billed(groups: Sequence[SlotGroup], shape: TaskManagerShape) -> float:
    """What pods of `shape` cost for these groups: the TaskManagers Flink's own first fit
    needs (`greedy.flink_count`) × price, the replicas written. The exact packer's
    placement never needs more (that fit is one of its starting points). inf when a slot
    fits no TaskManager."""
    count = flink_count(((g.demand(), g.slots) for g in groups if g.slots), shape)
    return math.inf if count is None else count * shape.price


def _screen(groups: Sequence[SlotGroup], ranked: Sequence[FittedShape], bounds: ShapeBounds,
            prices: Prices) -> list[TaskManagerShape]:
    """The best few by what they are billed (`billed`), with room where Flink's order
    needs it (`_billed`); ties by the feasible price. A shape fitted tightly to a packing
    may need more TaskManagers in Flink's slot order than that packing."""
    bills = sorted(_billed(groups, ranked, bounds, prices), key=lambda x: x[:3])
    return [s for *_, s in bills[:EXACT_SHAPES]]


def cheapest(vertices: Sequence[VertexSlot], bounds: ShapeBounds, prices: Prices,
             current: CurrentPlacement | None = None,
             time_limit_s: float = 2.0) -> Priced | None:
    """The cheaper of two groupings, each priced exactly: riders in a neighbour's slot
    (`share_slots`), or every vertex on its own (`own_groups`)."""
    best: Priced | None = None
    choices = groupings(vertices)
    for groups in choices:  # the time limit holds for the whole choice
        priced = price(groups, bounds, prices, current, time_limit_s / len(choices))
        if priced is not None and (best is None or priced.price < best.price - 1e-9):
            best = priced
    return best


# --- the planner's price ----------------------------------------------------------------


MAX_COMBINATIONS = 512
"""Every combination is screened up to this many (and up to what `MAX_SCREEN_WORK`
affords); past it, the search moves one vertex at a time from the start."""
MAX_SCREEN_WORK = 1024
"""Configurations screened × their vertices, at most, in one choice: 128 configurations
of 8 vertices, 51 of 20, 5 of 200 (`choose`). The suite's jobs screen at most 27 of 8
vertices. Before the bound, a 20-vertex job with 5 moving vertices of 3 options each
screened all 243 mixes, and a 100-vertex decision took 12 s of a 2-core machine's CPU
(docs/controller.md, "Isolation between tenants")."""


@dataclass(frozen=True)
class PodPricing:
    """How a configuration becomes pods, for the planner and the oracle: one task's CPU,
    heap and network, managed memory per memory level, the shapes allowed, the prices.

    `cheapest` is the planner's choice among per-vertex options: every combination (or,
    past `MAX_COMBINATIONS` or `MAX_SCREEN_WORK`, one vertex at a time from the start
    until nothing improves or the work is spent) ranked by the screen's bound, the best
    `EXACT_SHAPES` priced by the exact packer."""

    cpu_cores: float
    heap_mib: float
    network_mib: float
    base_managed_mib: float
    bounds: ShapeBounds = ShapeBounds()
    prices: Prices = field(default_factory=Prices)
    time_limit_s: float = 0.5  # the exact packer's, per configuration
    # Configurations screened × their vertices in one choice; None: no bound (the
    # oracle's search, which no pass waits for).
    screen_work: int | None = MAX_SCREEN_WORK

    def vertices(self, graph: JobGraph, configuration: Configuration,
                 task_cpu: TaskCpu | None = None) -> list[VertexSlot]:
        return vertex_slots(graph, configuration,
                            lambda level: managed_mib(level, self.base_managed_mib),
                            self.cpu_cores, self.heap_mib, self.network_mib, task_cpu)

    def bound(self, graph: JobGraph, configuration: Configuration,
              task_cpu: TaskCpu | None = None) -> float:
        """The screen: over both groupings, the least that the best few candidate shapes
        (by their fitted packing's price, a menu's by its lower bound), and their shapes
        with room where Flink's order overflows them (`_billed`), are billed by Flink's
        own first fit (`billed`). The exact price may be lower where another shape is
        billed less, never higher (`_screen` bills a superset)."""
        vertices = self.vertices(graph, configuration, task_cpu)
        best = math.inf
        for groups in groupings(vertices):
            ranked = candidate_shapes(tuple(groups), self.bounds, self.prices)
            for bill, *_ in _billed(groups, ranked[:EXACT_SHAPES], self.bounds, self.prices):
                best = min(best, bill)
        return best

    def exact(self, graph: JobGraph, configuration: Configuration,
              task_cpu: TaskCpu | None = None) -> Priced | None:
        return cheapest(self.vertices(graph, configuration, task_cpu), self.bounds,
                        self.prices, time_limit_s=self.time_limit_s)

    def price(self, graph: JobGraph, configuration: Configuration,
              task_cpu: TaskCpu | None = None) -> float:
        """Per hour, the pods the exact packer places (inf when nothing holds a slot)."""
        priced = self.exact(graph, configuration, task_cpu)
        return math.inf if priced is None else priced.price

    def cheapest(self, graph: JobGraph, options: Mapping[str, Sequence[VertexConfig]],
                 start: Configuration, task_cpu: TaskCpu | None = None
                 ) -> tuple[Configuration, float]:
        """The configuration of least pod price with each vertex at one of its `options`
        (a vertex without options keeps `start`'s), and its price. Ties keep `start`'s
        choices, so a planner's own order decides among equal bills."""
        config, priced = self.choose(graph, options, start, task_cpu)
        return config, math.inf if priced is None else priced.price

    def choose(self, graph: JobGraph, options: Mapping[str, Sequence[VertexConfig]],
               start: Configuration, task_cpu: TaskCpu | None = None
               ) -> tuple[Configuration, Priced | None]:
        """`cheapest`, with its pods (None: nothing holds a slot)."""
        choices = {vid: list(dict.fromkeys([start[vid], *options.get(vid, ())]))
                   for vid in start}
        bounds: dict[tuple[tuple[str, VertexConfig], ...], float] = {}

        def bound_of(config: Mapping[str, VertexConfig]) -> float:
            key = _key(config)
            if key not in bounds:
                bounds[key] = self.bound(graph, MappingProxyType(dict(config)), task_cpu)
            return bounds[key]

        # A bound's work grows with the vertices it packs: MAX_SCREEN_WORK counts both,
        # so a pass's CPU stays bounded (deterministically) on any graph.
        affordable = (math.inf if self.screen_work is None
                      else self.screen_work // max(1, len(start)))
        combinations = math.prod(len(c) for c in choices.values())
        if combinations <= min(MAX_COMBINATIONS, affordable):
            for combo in itertools.product(*choices.values()):
                bound_of(dict(zip(choices, combo, strict=True)))
        else:
            config = dict(start)
            here = bound_of(config)
            improved = True
            while improved and len(bounds) < affordable:
                improved = False
                for vid, alternatives in choices.items():
                    for alternative in alternatives:
                        trial = {**config, vid: alternative}
                        if len(bounds) >= affordable and _key(trial) not in bounds:
                            break  # screened all it may: the best found so far stands
                        if bound_of(trial) < here - 1e-9:
                            config, here, improved = trial, bound_of(trial), True
        start_key = _key(start)
        ranked = sorted(bounds.items(), key=lambda kv: (
            kv[1], _moves(kv[0], start_key)))[:EXACT_SHAPES]
        best: tuple[float, int, Configuration, Priced] | None = None
        for key, _ in ranked:
            mix: Configuration = MappingProxyType(dict(key))
            priced = self.exact(graph, mix, task_cpu)
            moves = _moves(key, start_key)
            if priced is not None and (best is None or (priced.price, moves) < best[:2]):
                best = (priced.price, moves, mix, priced)
        if best is None:
            return start, self.exact(graph, start, task_cpu)
        return best[2], best[3]


def _key(config: Mapping[str, VertexConfig]) -> tuple[tuple[str, VertexConfig], ...]:
    """A configuration as a hashable key, the same for the same mix in any order."""
    return tuple(sorted(config.items()))


def _moves(key: Sequence[tuple[str, VertexConfig]],
           start: Sequence[tuple[str, VertexConfig]]) -> int:
    return sum(a != b for a, b in zip(key, start, strict=True))
