"""packer.pricing: a configuration's price is the TaskManager pods it needs."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import replace
from types import MappingProxyType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import packer.pricing
from packer import check
from packer.flink_memory import DEFAULT_OPTIONS, task_manager_memory
from packer.pricing import (
    PAPER_SHAPE,
    PodPricing,
    Prices,
    ShapeBounds,
    SlotGroup,
    VertexSlot,
    candidate_shapes,
    cheapest,
    fit_shape,
    own_groups,
    price,
    share_slots,
    upstream_pods,
)
from packer.types import Status
from policies.bill import TaskCpu
from policies.model import JobGraph, ShipStrategy, VertexConfig
from tests.policies.builders import chain
from tests.policies.builders import vertex as job_vertex

PRICES = Prices()
HEAP = PAPER_SHAPE.memory.task_heap_mib / 4
NET = PAPER_SHAPE.memory.network_mib / 4


@pytest.fixture(autouse=True)
def _cold_shapes() -> Iterator[None]:
    """candidate_shapes remembers its answers: a test that counts what it computes (with
    a patched helper) must not read an earlier test's."""
    packer.pricing.forget_shapes()
    yield
    packer.pricing.forget_shapes()


def vertex(vid: str, p: int, managed: float, *neighbours: str) -> VertexSlot:
    return VertexSlot(vid, p, 1.0, HEAP, managed, NET, neighbours)


def q11(p: int, managed: float) -> list[VertexSlot]:
    """A source, a stateful session window, a sink: q11's graph."""
    return [vertex("src", 2, 0, "session"), vertex("session", p, managed, "src", "sink"),
            vertex("sink", 1, 0, "session")]


# --- Flink's memory split of a fitted shape -------------------------------------------


@pytest.mark.parametrize(("cpu", "heap", "managed", "network"), [
    (1, HEAP, 632, NET), (7, 7 * HEAP, 7 * 632, 7 * NET), (4, 4 * HEAP, 0, 4 * NET),
    (2, 2 * HEAP, 2 * 1264, 2 * NET), (6, 6 * HEAP, 6 * 158, 6 * NET),
])
def test_a_fitted_shape_offers_what_its_slots_take_by_flinks_own_split(
        cpu: float, heap: float, managed: float, network: float) -> None:
    shape = fit_shape(cpu, heap, managed, network, ShapeBounds(), PRICES)
    assert shape is not None and shape.cpu_cores == cpu
    # Flink's own derivation with the fractions written: every dimension is enough ...
    split = task_manager_memory(shape.process_mib, shape.memory_options)
    assert split.task_heap_mib >= heap and split.managed_mib >= managed
    assert split.network_mib >= network
    # ... and one memory step less is not (the shape is the smallest that fits).
    assert fit_shape(cpu, heap, managed, network,
                     ShapeBounds(max_memory_mib=shape.process_mib - 64), PRICES) is None
    assert shape.process_mib % 64 == 0
    # The fractions are Flink options with three decimals, in [0, 1).
    for f in (shape.memory_options.managed_fraction, shape.memory_options.network_fraction):
        assert 0 <= f < 1 and round(f, 3) == f
    # Only the two fractions differ from Flink's defaults.
    assert shape.memory_options.jvm_metaspace_mib == DEFAULT_OPTIONS.jvm_metaspace_mib
    assert shape.price == pytest.approx(PRICES.of(cpu, shape.process_mib))


def test_a_cache_heavy_slot_mix_gets_a_larger_managed_fraction_not_a_larger_pod() -> None:
    """7 slots of 632 MiB managed: the fitted fraction is why under 7 GiB is enough."""
    shape = fit_shape(7, 7 * HEAP, 7 * 632, 7 * NET, ShapeBounds(), PRICES)
    assert shape is not None
    assert shape.memory_options.managed_fraction > 0.7
    assert shape.process_mib < 7 * 1024
    assert task_manager_memory(shape.process_mib).managed_mib < 7 * 632  # at Flink's 0.4


def test_bounds_are_respected_and_refused_when_nothing_fits() -> None:
    bounds = ShapeBounds(min_cpu=2, max_cpu=4, min_memory_mib=4096, max_memory_mib=8192)
    shape = fit_shape(1, HEAP, 158, NET, bounds, PRICES)
    assert shape is not None and shape.cpu_cores == 2 and shape.process_mib == 4096
    assert fit_shape(5, 5 * HEAP, 0, 5 * NET, bounds, PRICES) is None  # more cores than 4
    assert fit_shape(1, HEAP, 9000, NET, bounds, PRICES) is None  # more memory than 8 GiB
    with pytest.raises(ValueError, match="min_cpu"):
        ShapeBounds(min_cpu=8, max_cpu=4)


def test_a_slot_no_shape_holds_is_refused_without_counting_taskmanagers(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A hostile spec's maxCpu of a thousandth of a core: every slot's one core fits no
    # TaskManager, and before, the search counted up to 2,000,000 TaskManagers to say so.
    def counted(*args: object) -> None:
        raise AssertionError("TaskManagers counted for slots no shape holds")

    monkeypatch.setattr(packer.pricing, "_per_task_manager", counted)
    bounds = ShapeBounds(min_cpu=0.001, max_cpu=0.001, cpu_step=0.001)
    groups = own_groups(q11(2_000, 632))
    assert candidate_shapes(groups, bounds, PRICES) == ()
    assert price(groups, bounds, PRICES) is None


def test_balanced_packings_are_fitted_for_a_bounded_number_of_taskmanager_counts(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # 200 vertices with managed memory, 2 to 20 tasks each: two counts per group would be
    # 400 balanced packings, each as dear as groups × TaskManagers (16 s before the bound).
    fitted: list[int] = []
    real = packer.pricing._balanced

    def counting(by_weight: object, n: int, prices: Prices) -> object:
        fitted.append(n)
        return real(by_weight, n, prices)  # type: ignore[arg-type]

    monkeypatch.setattr(packer.pricing, "_balanced", counting)
    vertices = [vertex(f"v{i:03d}", 2 + i % 19, 158 * (1 + i % 3)) for i in range(200)]
    assert candidate_shapes(own_groups(vertices), ShapeBounds(), PRICES)
    # BALANCED_WORK over 200 groups: one count past the fewest (the fewest itself too).
    assert 0 < len(fitted) <= max(1, packer.pricing.BALANCED_WORK // 200) + 1
    # Each TaskManager of the ceil mix holds a slot of every group: 200 groups fit no
    # 16-slot TaskManager, so no count is tried for it.
    tried: list[int] = []
    per_task_manager = packer.pricing._per_task_manager

    def counted(groups: object, n: int) -> object:
        tried.append(n)
        return per_task_manager(groups, n)  # type: ignore[arg-type]

    monkeypatch.setattr(packer.pricing, "_per_task_manager", counted)
    packer.pricing.forget_shapes()
    assert candidate_shapes(own_groups(vertices), ShapeBounds(), PRICES)
    assert set(tried) <= set(fitted)  # only where a balanced packing is compared with it


@pytest.mark.parametrize("max_slots", [2, 4, 16])
@pytest.mark.parametrize("parallelisms", [(1, 7, 3), (40, 5), (12, 12, 1, 1), (64,)])
def test_every_feasible_ceil_mix_is_offered_at_its_count(
        max_slots: int, parallelisms: tuple[int, ...]) -> None:
    """For every TaskManager count n whose ceil(slots / n) of each group fits max_slots,
    a shape holding that mix is offered at no more than n of it: the counts skipped
    (too few TaskManagers to hold every slot) are never among them."""
    groups = own_groups([vertex(f"v{i}", p, 158 * i) for i, p in enumerate(parallelisms)])
    bounds = ShapeBounds(max_slots=max_slots)
    offered = candidate_shapes(groups, bounds, PRICES)
    checked = 0
    for n in range(1, max(parallelisms) + 1):
        counts = [-(-g.slots // n) for g in groups]
        mix = [sum(c * getattr(g, d) for c, g in zip(counts, groups, strict=True))
               for d in ("cpu_cores", "heap_mib", "managed_mib", "network_mib")]
        shape = fit_shape(*mix, bounds, PRICES)
        if sum(counts) > max_slots or shape is None:  # too many slots, or cores
            continue
        checked += 1
        assert any(f.shape.name == shape.name and f.feasible <= n * shape.price + 1e-9
                   for f in offered), (n, shape.name)
    assert checked or len(groups) > max_slots  # a slot of every group on each: none fits


# --- slot sharing -----------------------------------------------------------------------


def test_stateless_vertices_ride_in_a_neighbours_slot_when_that_adds_no_slot() -> None:
    groups = share_slots(q11(7, 632))
    assert [(g.name, g.members, g.slots) for g in groups] == [
        ("session", ("session", "src", "sink"), 7)]
    (g,) = groups
    # One slot holds a subtask of each member: one task's CPU and heap, the members'
    # managed memory summed (riders have none).
    assert (g.cpu_cores, g.managed_mib) == (1.0, 632)


def test_a_rider_with_more_tasks_than_its_neighbour_has_slots_does_not_ride() -> None:
    groups = share_slots([vertex("src", 8, 0, "agg"), vertex("agg", 3, 316, "src", "sink"),
                          vertex("sink", 1, 0, "agg")])
    assert {g.name: (g.members, g.slots) for g in groups} == {
        "agg": (("agg", "sink"), 3), "stateless": (("src",), 8)}


def test_vertices_with_managed_memory_keep_their_own_groups() -> None:
    groups = share_slots([vertex("a", 4, 158, "b"), vertex("b", 4, 632, "a")])
    assert {g.name: g.members for g in groups} == {"a": ("a",), "b": ("b",)}
    assert own_groups([vertex("a", 2, 0), vertex("b", 3, 0)]) == (
        SlotGroup("a", ("a",), 2, 1.0, HEAP, 0, NET), SlotGroup("b", ("b",), 3, 1.0, HEAP, 0, NET))


def test_sharing_is_chosen_by_price() -> None:
    shared = price(share_slots(q11(7, 632)), ShapeBounds(), PRICES)
    alone = price(own_groups(q11(7, 632)), ShapeBounds(), PRICES)
    best = cheapest(q11(7, 632), ShapeBounds(), PRICES)
    assert shared is not None and alone is not None and best is not None
    assert shared.price < alone.price and best.price == shared.price
    assert best.group_of() == {"session": "session", "src": "session", "sink": "session"}


# --- the price --------------------------------------------------------------------------


def test_q11_with_the_cache_costs_less_than_upstreams_pods_in_each_dimension() -> None:
    """7 tasks at 632 MiB against upstream's 20 at 158 MiB on 5 paper TaskManagers."""
    ours = cheapest(q11(7, 632), ShapeBounds(), PRICES)
    theirs = upstream_pods({"src": 2, "session": 20, "sink": 1})
    assert ours is not None and ours.proven
    assert (theirs.task_managers, theirs.cpu_cores, theirs.memory_mib) == (5, 20, 10240)
    assert ours.bill.cpu_cores <= theirs.cpu_cores and ours.bill.memory_mib <= theirs.memory_mib
    assert ours.price <= 0.6 * theirs.price


def test_the_price_is_the_placement_it_comes_with() -> None:
    priced = cheapest([vertex("a", 13, 316, "b"), vertex("b", 5, 0, "a")], ShapeBounds(),
                      PRICES)
    assert priced is not None
    slots = [s for g in priced.groups for s in g.task_slots()]
    assert check(priced.placement, slots, [priced.shape]) == []
    assert priced.replicas >= priced.placement.count
    assert priced.bill.cpu_cores == priced.replicas * priced.shape.cpu_cores
    assert priced.bill.memory_mib == priced.replicas * priced.shape.process_mib
    assert priced.price == pytest.approx(PRICES.of(priced.bill.cpu_cores, priced.bill.memory_mib))
    # No candidate shape's feasible packing is cheaper than what was chosen.
    ranked = candidate_shapes(priced.groups, ShapeBounds(), PRICES)
    assert priced.price <= min(f.feasible for f in ranked) + 1e-9


def test_a_group_of_one_slot_takes_room_in_one_taskmanager_not_in_each() -> None:
    """Ten slots of half a core and three single-slot groups of a core: 8 cores in all.
    Sized for ceil(slots/n) of every group on each of 2 TaskManagers, each would carry
    all three singles (2 × 5.5 cores); balanced, one carries two and the other one."""
    groups = [SlotGroup("big", ("big",), 10, 0.5, HEAP, 632.0, NET),
              *(SlotGroup(f"one{i}", (f"one{i}",), 1, 1.0, HEAP, 158.0, NET) for i in range(3))]
    priced = price(groups, ShapeBounds(), PRICES)
    assert priced is not None
    assert priced.bill.cpu_cores <= 9.0
    slots = [s for g in groups for s in g.task_slots()]
    assert check(priced.placement, slots, [priced.shape]) == []


def test_balancing_is_tried_at_every_count_not_only_where_the_ceil_mix_changes() -> None:
    """12 and 7 slots give the same ceil-per-TaskManager mix (3 and 2) on 4 and on 5
    TaskManagers; balanced, 5 TaskManagers of 3 cores hold them (17.51/h), where the
    best shape of the ceil mixes costs 20.20/h."""
    groups = [SlotGroup("a", ("a",), 12, 0.6, HEAP, 632.0, NET),
              SlotGroup("b", ("b",), 7, 0.9, HEAP, 316.0, NET)]
    priced = price(groups, ShapeBounds(), PRICES)
    assert priced is not None and priced.price < 18.0


def test_many_single_slot_groups_are_balanced_too() -> None:
    """Seventeen groups of one slot (6.8 cores): no group has more slots than one
    TaskManager count, yet they need two TaskManagers, and balanced they fit 2 × 3.5."""
    groups = [SlotGroup("heavy", ("heavy",), 1, 2.0, HEAP, 632.0, NET),
              *(SlotGroup(f"s{i}", (f"s{i}",), 1, 0.3, HEAP, 158.0, NET) for i in range(16))]
    priced = price(groups, ShapeBounds(), PRICES)
    assert priced is not None and priced.bill.cpu_cores <= 7.0


def test_shapes_are_screened_by_what_flinks_own_first_fit_bills() -> None:
    """A shape fitted tightly to a balanced packing may need more TaskManagers in Flink's
    slot order than the packer's bound says (the replicas written): with balanced
    candidates screened by the bound alone, the pods of this mix cost 12.85/h (5
    TaskManagers for a placement of 4). The price is what Flink's first fit bills."""
    groups = [SlotGroup("a", ("a",), 1, 0.5, HEAP, 0.0, NET),
              SlotGroup("b", ("b",), 11, 0.5, HEAP, 632.0, NET),
              SlotGroup("c", ("c",), 5, 0.1, HEAP, 632.0, NET)]
    priced = price(groups, ShapeBounds(), PRICES)
    assert priced is not None
    assert priced.replicas == priced.placement.count
    assert priced.price < 11.0
    assert priced.price == pytest.approx(packer.pricing.billed(priced.groups, priced.shape))


def planned_chain(*specs: tuple[int, float, float]) -> list[VertexSlot]:
    """Vertices in a line, each (tasks, planned CPU, managed MiB) with its own group."""
    ids = [f"v{i}" for i in range(len(specs))]
    return [VertexSlot(ids[i], p, cpu, HEAP, managed, NET,
                       tuple(ids[j] for j in (i - 1, i + 1) if 0 <= j < len(ids)), planned=True)
            for i, (p, cpu, managed) in enumerate(specs)]


def test_a_shape_flinks_first_fit_overflows_is_offered_with_room() -> None:
    """2 slots of 0.2 cores and 158 MiB, then 15 of 0.1 and 316: the shape fitted to 2
    TaskManagers of the ceil mix (1 core) overflows in Flink's job order (its first slots
    take 0.4 of the core together), so it bills 3; with the shapes fitted tight only, the
    mix was priced 5.09/h, above the 4.39/h the same mix costs at 0.3 cores (whose shape,
    rounded up to 1.5 cores, has the room). With room for another slot's CPU: 2."""
    priced = cheapest(planned_chain((2, 0.2, 158.0), (15, 0.1, 316.0)), ShapeBounds(), PRICES)
    at_more = cheapest(planned_chain((2, 0.3, 158.0), (15, 0.1, 316.0)), ShapeBounds(), PRICES)
    assert priced is not None and at_more is not None
    assert priced.replicas == 2 and priced.price <= at_more.price < 5.0
    assert priced.price == pytest.approx(packer.pricing.billed(priced.groups, priced.shape))
    assert check(priced.placement, [s for g in priced.groups for s in g.task_slots()],
                 [priced.shape]) == []


def test_the_exact_packer_proves_optimality_up_to_200_slots_with_shape_choice() -> None:
    vertices = [vertex("join", 120, 632, "a", "b"), vertex("agg", 60, 316, "join"),
                vertex("a", 10, 0, "join"), vertex("b", 10, 0, "join"),
                vertex("win", 20, 158, "agg")]
    priced = cheapest(vertices, ShapeBounds(), PRICES, time_limit_s=10.0)
    assert priced is not None
    assert sum(g.slots for g in priced.groups) <= 200
    assert priced.placement.status is Status.OPTIMAL and priced.proven


def test_a_menu_is_priced_by_the_same_rule() -> None:
    small = PAPER_SHAPE
    large = type(PAPER_SHAPE)("8cpu-16gi-8slots", 8.0, 16384.0, max_slots=8)
    priced = cheapest(q11(7, 632), ShapeBounds(menu=(small, large)), PRICES)
    assert priced is not None and priced.shape.name == large.name  # 632 MiB fits no paper slot
    assert priced.replicas == 1 and math.isclose(priced.price, PRICES.of(8, 16384))
    # A menu shape runs with Flink's default fractions.
    assert priced.shape.memory_options == DEFAULT_OPTIONS


def test_no_shape_within_the_bounds_holds_the_slot() -> None:
    assert cheapest(q11(7, 40_000), ShapeBounds(), PRICES) is None


def test_upstream_is_flinks_default_group_on_the_papers_taskmanager() -> None:
    pods = upstream_pods([1, 30, 1, 1])
    assert (pods.task_managers, pods.cpu_cores, pods.memory_mib) == (8, 32, 16384)
    assert pods.price == pytest.approx(32 + 16 * 0.134)
    assert upstream_pods([30], prices=Prices(2.0, 1.0)).price == pytest.approx(64 + 16)


def test_more_groups_than_a_taskmanager_holds_one_of_each_are_still_priced() -> None:
    """Ten groups with managed memory and at most 7 cores a TaskManager: no TaskManager
    takes one slot of each, but shapes of k largest slots do."""
    vertices = [vertex(f"v{i}", 2, 158 * (1 + i % 3)) for i in range(10)]
    priced = cheapest(vertices, ShapeBounds(), PRICES)
    assert priced is not None and priced.bill.cpu_cores >= 20
    slots = [s for g in priced.groups for s in g.task_slots()]
    assert check(priced.placement, slots, [priced.shape]) == []


# --- the planner's price: choosing among configurations -------------------------------

PODS = PodPricing(1.0, HEAP, NET, 158.0)
JOB = chain(job_vertex("src", 1, None), job_vertex("agg", 4, 0, max_p=128),
            job_vertex("sink", 6, None), ship=ShipStrategy.HASH)
AGG_OPTIONS = (VertexConfig(4, 2), VertexConfig(6, 1), VertexConfig(8, 0))


def _start(agg: VertexConfig) -> dict[str, VertexConfig]:
    return {"src": VertexConfig(1, None), "agg": agg, "sink": VertexConfig(6, None)}


def test_the_planner_chooses_the_mix_whose_pods_cost_least_not_the_fewest_tasks() -> None:
    """Per task, 4 tasks at level 2 are cheapest; in pods, 6 tasks at level 1 are: the
    sink's 6 tasks then ride in the aggregate's slots instead of needing their own."""
    prices = {o: PODS.price(JOB, _start(o)) for o in AGG_OPTIONS}
    config, price_ = PODS.cheapest(JOB, {"agg": AGG_OPTIONS}, _start(AGG_OPTIONS[0]))
    assert config["agg"] == min(prices, key=prices.__getitem__) == VertexConfig(6, 1)
    assert price_ == pytest.approx(min(prices.values()))
    assert prices[VertexConfig(6, 1)] < prices[VertexConfig(4, 2)]
    # Here Flink's first fit reaches the packing the screen prices, so the bill is not
    # above it (elsewhere Flink may need more TaskManagers, and the solver bills those).
    for option in AGG_OPTIONS:
        assert PODS.bound(JOB, _start(option)) >= prices[option] - 1e-9


def test_the_planners_screen_never_promises_less_than_the_bill() -> None:
    """The planner ranks mixes by `bound` and prices the best few exactly: a bound below
    what the pods are billed (the fitted packing's price, where Flink's own first fit
    needs more TaskManagers) would rank a dearer mix first. Fitted prices alone
    undercut the bill on these three mixes."""
    mixes = [((0, 1, 2), (8, 5, 1)), ((0, 2, None), (8, 11, 1)), ((1, 0, 2), (5, 8, 3))]
    for levels, parallelism in mixes:
        job = chain(*(job_vertex(f"v{i}", 1, lv) for i, lv in enumerate(levels)),
                    ship=ShipStrategy.HASH)
        config = {f"v{i}": VertexConfig(p, lv)
                  for i, (lv, p) in enumerate(zip(levels, parallelism, strict=True))}
        assert PODS.bound(job, config) >= PODS.price(job, config) - 1e-9, config


LEVEL_OF_MIB = {0.0: None, 158.0: 0, 316.0: 1, 632.0: 2, 1264.0: 3}


def planned_job(specs: list[tuple[int, float, float]]
                ) -> tuple[JobGraph, dict[str, VertexConfig], TaskCpu]:
    """A chain of (tasks, planned CPU, managed MiB) as the planner hands it to `PODS`."""
    job = chain(*(job_vertex(f"v{i}", 1, LEVEL_OF_MIB[m]) for i, (_, _, m) in enumerate(specs)),
                ship=ShipStrategy.HASH)
    config = {f"v{i}": VertexConfig(p, LEVEL_OF_MIB[m]) for i, (p, _, m) in enumerate(specs)}
    cpus = {f"v{i}": c for i, (_, c, _) in enumerate(specs)}
    return job, config, lambda vid, _config: cpus[vid]


@pytest.mark.parametrize("specs", [
    # The screen billed a shape with room (5 cores, 62.09/h) that the exact path's pruning
    # skipped (64.32/h): pruned by the packing it was fitted to, though with room it
    # needed fewer TaskManagers than that packing (review of the change).
    [(11, 0.7, 1264.0), (32, 0.7, 0.0), (23, 1.0, 0.0), (2, 0.5, 158.0)],
    [(17, 1.0, 158.0), (21, 0.2, 316.0), (20, 0.5, 632.0)],
    [(6, 0.1, 316.0), (3, 0.7, 158.0), (22, 1.0, 158.0)],
])
def test_the_screen_with_room_never_promises_less_than_the_bill(
        specs: list[tuple[int, float, float]]) -> None:
    job, config, cpu = planned_job(specs)
    assert PODS.bound(job, config, cpu) >= PODS.price(job, config, cpu) - 1e-9


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 32), st.sampled_from([0.1, 0.2, 0.5, 0.7, 1.0]),
                          st.sampled_from(sorted(LEVEL_OF_MIB))), min_size=1, max_size=4))
def test_the_planners_screen_is_never_below_the_exact_price(
        specs: list[tuple[int, float, float]]) -> None:
    """The planner ranks mixes by `bound`: one below what the exact path bills would rank a
    dearer mix first. The exact path bills every shape the screen does (and more)."""
    job, config, cpu = planned_job(specs)
    assert PODS.bound(job, config, cpu) >= PODS.price(job, config, cpu) - 1e-9


def test_equal_bills_keep_the_planners_own_choice() -> None:
    """With the aggregate at 6 tasks, a sink of 5 or 6 tasks rides in its slots: the same
    pods. Whichever the planner started from is kept."""
    sinks = (VertexConfig(6, None), VertexConfig(5, None))
    starts = [{**_start(VertexConfig(6, 1)), "sink": sink} for sink in sinks]
    assert PODS.price(JOB, starts[0]) == PODS.price(JOB, starts[1])
    for start in starts:
        config, _ = PODS.cheapest(JOB, {"sink": sinks}, start)
        assert config == start
    config, _ = PODS.cheapest(JOB, {}, _start(VertexConfig(4, 2)))
    assert config == _start(VertexConfig(4, 2))


@pytest.mark.parametrize("bounded", ["combinations", "work"])
def test_past_the_combination_cap_one_vertex_at_a_time_still_finds_the_cheaper_mix(
        monkeypatch: pytest.MonkeyPatch, bounded: str) -> None:
    pods = PODS
    if bounded == "combinations":
        monkeypatch.setattr(packer.pricing, "MAX_COMBINATIONS", 1)
    else:  # 2 configurations of 3 vertices, one short of the 3 combinations
        pods = replace(PODS, screen_work=6)
    config, price_ = pods.cheapest(JOB, {"agg": AGG_OPTIONS}, _start(AGG_OPTIONS[0]))
    assert config["agg"] == VertexConfig(6, 1)
    assert price_ < pods.price(JOB, _start(AGG_OPTIONS[0]))


def test_the_screen_of_a_large_job_stops_at_its_work_bound_and_never_costs_more() -> None:
    """40 vertices, each with 3 options: 3^40 mixes, and one vertex at a time could
    screen dozens of rounds. It screens at most MAX_SCREEN_WORK / 40 configurations
    (a pass's CPU bounded on any graph), and what it picks is no dearer than the start."""
    job = chain(*[job_vertex(f"v{i:02d}", 2, 0) for i in range(40)])
    start = MappingProxyType({v.id: VertexConfig(2, 0) for v in job.vertices})
    options = {v.id: (VertexConfig(2, 0), VertexConfig(3, 1), VertexConfig(4, None))
               for v in job.vertices}
    screened: list[object] = []

    class Counting(PodPricing):
        def bound(self, *args: object, **kwargs: object) -> float:
            screened.append(args[1])
            return super().bound(*args, **kwargs)  # type: ignore[arg-type]

    pods = Counting(PODS.cpu_cores, PODS.heap_mib, PODS.network_mib, PODS.base_managed_mib)
    config, price_ = pods.cheapest(job, options, start)
    assert 1 < len(screened) <= packer.pricing.MAX_SCREEN_WORK // 40
    assert price_ <= pods.price(job, start) + 1e-9
    assert pods.cheapest(job, options, start) == (config, price_)  # deterministic
    # The oracle's search (screen_work None) is not bounded: it screens on.
    screened.clear()
    replace(pods, screen_work=None).cheapest(job, options, start)
    assert len(screened) > packer.pricing.MAX_SCREEN_WORK // 40


# --- planned CPU per task ---------------------------------------------------------------


def test_planned_cpu_is_summed_in_a_shared_slot_and_the_footprint_is_shared() -> None:
    """Without a plan a slot's CPU is the footprint's, shared by its members as in Flink's
    default group; with one, each member's task uses its own, so a slot needs their sum."""
    planned = [replace(v, cpu_cores=c, planned=True, parallelism=7)
               for v, c in zip(q11(7, 632), (0.3, 0.6, 0.1), strict=True)]
    (shared,) = share_slots(planned)
    assert shared.cpu_cores == pytest.approx(1.0)  # 0.3 + 0.6 + 0.1
    (footprint,) = share_slots(q11(7, 632))
    assert footprint.cpu_cores == 1.0  # the largest, as before


def test_planned_cpu_never_asks_for_more_than_the_footprint_and_lowers_the_bill() -> None:
    def cpu(vid: str, _config: VertexConfig) -> float:
        return {"src": 0.2, "agg": 0.5, "sink": 0.1}[vid]

    start = _start(VertexConfig(6, 1))
    capped = {v.vertex_id: v.cpu_cores for v in PODS.vertices(JOB, start, lambda *_: 3.0)}
    assert capped == {"src": 1.0, "agg": 1.0, "sink": 1.0}  # the footprint's core at most
    slots = {v.vertex_id: v.cpu_cores for v in PODS.vertices(JOB, start, cpu)}
    planned, footprint = PODS.exact(JOB, start, cpu), PODS.exact(JOB, start)
    assert planned is not None and footprint is not None
    assert planned.bill.cpu_cores < footprint.bill.cpu_cores
    # The placement holds every slot as priced: the group's CPU is its members' summed.
    for group in planned.groups:
        assert group.cpu_cores == pytest.approx(sum(slots[m] for m in group.members))
    assert check(planned.placement, [s for g in planned.groups for s in g.task_slots()],
                 [planned.shape]) == []


def test_the_planner_prices_options_with_their_planned_cpu() -> None:
    """A memory level that makes a task faster asks for less CPU: with the plan, the option
    whose tasks are idler wins where the footprint's price would not see it."""
    def cpu(vid: str, config: VertexConfig) -> float:
        if vid != "agg":
            return 0.1
        return 0.2 if config.memory_level == 2 else 1.0

    options = (VertexConfig(6, 0), VertexConfig(6, 2))
    start = _start(options[0])
    config, price_ = PODS.cheapest(JOB, {"agg": options}, start, cpu)
    assert config["agg"] == VertexConfig(6, 2)
    assert price_ == pytest.approx(PODS.price(JOB, {**start, "agg": options[1]}, cpu))
    assert PODS.cheapest(JOB, {"agg": options}, start)[0]["agg"] == VertexConfig(6, 0)


def test_with_planned_cpu_a_rider_rides_only_where_it_adds_no_cpu_to_idle_slots() -> None:
    """Flink asks every slot of a group for the same profile: a p=1 rider in a 7-slot group
    would ask for its CPU seven times. With a plan it rides only in a group of its own
    parallelism; the leftovers share a group per parallelism."""
    planned = [replace(v, cpu_cores=c, planned=True)
               for v, c in zip(q11(7, 632), (0.3, 0.6, 0.1), strict=True)]
    groups = {g.name: (g.members, g.slots, g.cpu_cores) for g in share_slots(planned)}
    assert groups == {"session": (("session",), 7, 0.6),
                      "stateless-2": (("src",), 2, 0.3), "stateless-1": (("sink",), 1, 0.1)}
    # CPU the slots ask for: 7 × 0.6 + 2 × 0.3 + 0.1, not 7 × (0.3 + 0.6 + 0.1).
    assert sum(g.slots * g.cpu_cores for g in share_slots(planned)) == pytest.approx(4.9)
    # A rider with exactly its host's slots still rides; one leftover group keeps its name.
    same = [replace(v, parallelism=7) if v.vertex_id == "src" else v for v in planned]
    assert {g.name: g.members for g in share_slots(same)} == {
        "session": ("session", "src"), "stateless": ("sink",)}
    # Without a plan the footprint's core is shared: riders ride as in Flink's default group.
    assert [g.members for g in share_slots(q11(7, 632))] == [("session", "src", "sink")]
