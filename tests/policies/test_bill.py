"""The pod bill: what a placement's TaskManager pods request, priced per hour."""

from __future__ import annotations

import math

import pytest

from policies.bill import PodBill, describe_change, pod_bill, slot_cpu

PRICES = {"cpu_core_price": 1.0, "memory_gib_price": 0.134}


def test_the_bill_is_the_shape_times_the_replicas_at_the_spec_prices() -> None:
    # The q11 under upstream: 5 TaskManagers of 4 cores and 2 GiB.
    bill = pod_bill(4, 2048, 5, **PRICES)
    assert (bill.task_managers, bill.cpu_cores, bill.memory_mib) == (5, 20, 10240)
    assert bill.price == pytest.approx(20 + 10 * 0.134)
    assert pod_bill(4, 2048, 0, **PRICES) == PodBill(0, 0, 0, 0)
    assert pod_bill(0.5, 1536, 3, cpu_core_price=2.0, memory_gib_price=1.0).price == \
        pytest.approx(3 * 0.5 * 2 + 3 * 1.5)


@pytest.mark.parametrize("cpu, memory, replicas", [
    (-1, 2048, 1), (4, -1, 1), (4, 2048, -1), (math.nan, 2048, 1), (4, math.inf, 1)])
def test_a_bill_of_impossible_pods_is_refused(cpu: float, memory: float, replicas: int) -> None:
    with pytest.raises(ValueError, match="finite, non-negative"):
        pod_bill(cpu, memory, replicas, **PRICES)


def test_the_change_says_before_after_and_the_price_difference() -> None:
    before, after = pod_bill(4, 2048, 9, **PRICES), pod_bill(2, 4096, 5, **PRICES)
    assert describe_change(before, after) == (
        "pods 9 TaskManagers: 36 cores, 18 GiB, 38.41/h → 5 TaskManagers: 10 cores, 20 GiB, "
        "12.68/h, saving 25.73/h")
    assert describe_change(after, before).endswith("costing 25.73/h more")
    assert describe_change(None, after) == "pods → 5 TaskManagers: 10 cores, 20 GiB, 12.68/h"
    assert describe_change(after, after) == (
        "pods unchanged (5 TaskManagers: 10 cores, 20 GiB, 12.68/h)")
    # Another shape at the same price is no "+0.00".
    assert describe_change(pod_bill(2, 0, 2, **PRICES), pod_bill(4, 0, 1, **PRICES)).endswith(
        "the same price")
    assert pod_bill(1.5, 512, 1, **PRICES).describe() == "1 TaskManager: 1.5 cores, 512 MiB, 1.57/h"
    assert pod_bill(1, 1024, 1, **PRICES).describe().startswith("1 TaskManager: 1 core, 1 GiB")


@pytest.mark.parametrize(("busyness", "footprint", "cpu"), [
    (0.0, 1.0, 0.1), (0.01, 1.0, 0.1), (0.1, 1.0, 0.1), (0.1000000001, 1.0, 0.1),
    (0.11, 1.0, 0.2), (0.62, 1.0, 0.7), (0.95, 1.0, 1.0), (3.0, 1.0, 1.0),
    (0.62, 0.5, 0.5), (math.nan, 1.0, 1.0), (math.inf, 0.5, 0.5),
])
def test_a_slot_asks_for_its_planned_busyness_in_tenths_of_a_core_up_to_the_footprint(
        busyness: float, footprint: float, cpu: float) -> None:
    assert slot_cpu(busyness, footprint) == cpu
