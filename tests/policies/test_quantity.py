"""Memory sizes: Kubernetes quantities in a policy, Flink's syntax in a FlinkDeployment."""

from __future__ import annotations

import math
from typing import Any

import pytest

from policies.quantity import parse_flink_memory_bytes, parse_quantity_bytes
from policies.spec import MemoryScaling, parse_memory_mib

KI, MI, GI, TI = 1024, 1024**2, 1024**3, 1024**4


@pytest.mark.parametrize(("text", "expected"), [
    ("2048Mi", 2048 * MI), ("2Gi", 2 * GI), ("1.5Gi", 1.5 * GI), ("64Ki", 64 * KI),
    ("1Ti", TI),
    ("1G", 10**9), ("500M", 500 * 10**6), ("3k", 3000), ("2T", 2 * 10**12),
    ("2048", 2048), ("0", 0), (" 158Mi ", 158 * MI),
])
def test_kubernetes_quantities(text: str, expected: float) -> None:
    assert parse_quantity_bytes(text) == expected


@pytest.mark.parametrize("value", [
    2048, 2048.0, True, None,  # a number: bytes to Kubernetes, MiB to whoever wrote it
    "2048m",  # milli in Kubernetes, MiB in Flink
    "2gi", "2 Gi", "-1Mi", "1e3", "Mi", "", "2KiB", "1Pi",
])
def test_anything_else_is_refused_with_the_forms_it_takes(value: Any) -> None:
    with pytest.raises(ValueError, match=r"2048Mi|158Mi"):
        parse_quantity_bytes(value)


def test_milli_gets_a_hint() -> None:
    with pytest.raises(ValueError, match="'m' is milli"):
        parse_quantity_bytes("2048m")


def test_a_bare_number_string_is_bytes_in_the_policy_too() -> None:
    # The defect of issue 11: 2048 (number) was read as MiB and '2048' (string) as bytes.
    assert parse_memory_mib("2048") == 2048 / MI
    assert parse_memory_mib("2048Mi") == 2048
    with pytest.raises(ValueError, match="quantity string"):
        parse_memory_mib(2048)
    with pytest.raises(ValueError, match="quantity string"):
        MemoryScaling.model_validate({"baseManagedMemory": 158})


@pytest.mark.parametrize(("text", "expected"), [
    # Flink's MemorySize: binary units, any case, optional "b", bare number = bytes.
    ("2048m", 2048 * MI), ("2048M", 2048 * MI), ("2g", 2 * GI), ("2gb", 2 * GI),
    ("1536 mb", 1536 * MI), ("512k", 512 * KI), ("1t", TI), ("4096", 4096), (4096, 4096),
    # The Flink operator also takes Kubernetes quantities.
    ("2Gi", 2 * GI), ("1536Mi", 1536 * MI), ("1.5Gi", 1.5 * GI),
])
def test_flink_memory_sizes(text: Any, expected: float) -> None:
    assert parse_flink_memory_bytes(text) == expected


@pytest.mark.parametrize("text", ["lots", "2 GiB please", "", "-1g", True,
                                  # Past what Flink's MemorySize (a long of bytes) holds.
                                  "1" * 400 + "m", "8388608t", 10**400, math.inf, math.nan])
def test_unreadable_flink_memory_sizes(text: Any) -> None:
    with pytest.raises(ValueError, match="unreadable memory size"):
        parse_flink_memory_bytes(text)
