"""Memory sizes, in the two syntaxes the scaler reads: Kubernetes quantities and Flink's.

A HybridScalingPolicy writes memory as a Kubernetes quantity (`parse_quantity_bytes`):
binary suffixes Ki, Mi, Gi, Ti (2^10 ...), decimal k, M, G, T (10^3 ...), and a
string without suffix is bytes, as everywhere in Kubernetes ('2048' is 2 KiB).
A JSON/YAML number is refused where a quantity is asked for: the CRD types these
fields as strings, and `memory: 2048` meaning MiB is the usual mistake.

A FlinkDeployment's `resource.memory` is read as the Flink Kubernetes Operator reads
it (`parse_flink_memory_bytes`): Flink's MemorySize syntax first, where every unit
is binary and case-insensitive ('2048m' and '2048M' are 2 GiB, '2g' 2 GiB, a bare
number bytes), else a Kubernetes quantity ('2Gi', '1536Mi'). Note that '2048m' is
2 GiB to Flink but 2.048 bytes (milli) to Kubernetes.
"""

from __future__ import annotations

import re
from typing import Any

MIB = 1024**2

# The subset of Kubernetes' quantity syntax a policy may use (no milli, no exponent).
QUANTITY_PATTERN = r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|k|M|G|T)?$"
_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|Ti|k|M|G|T)?$")
_SUFFIX = {
    None: 1, "Ki": 1024, "Mi": 1024**2, "Gi": 1024**3, "Ti": 1024**4,
    "k": 1000, "M": 1000**2, "G": 1000**3, "T": 1000**4,
}
# Flink's MemorySize: b/k/m/g/t with an optional "b" ("mb"), any case, spaces allowed.
_FLINK = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)
_FLINK_UNIT = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
# Flink's MemorySize holds its bytes in a Java long: anything larger it refuses.
FLINK_MAX_BYTES = 2**63 - 1


def parse_quantity_bytes(value: Any) -> float:
    """A Kubernetes memory quantity in bytes: '2Gi', '500M', '2048' (bytes).

    Raises ValueError, saying which forms are accepted, for anything else.
    """
    if not isinstance(value, str):
        raise ValueError(
            f"a memory size is a quantity string such as '2048Mi' or '2Gi', not {value!r} "
            "(a bare number would be bytes)"
        )
    match = _QUANTITY.match(value.strip())
    if not match:
        hint = " ('m' is milli in Kubernetes: write Mi)" if value.strip().endswith("m") else ""
        raise ValueError(
            f"invalid memory quantity {value!r}: use forms such as '158Mi', '2Gi' or '1G'{hint}"
        )
    number, suffix = match.groups()
    return float(number) * _SUFFIX[suffix]


def parse_flink_memory_bytes(value: Any) -> float:
    """A FlinkDeployment memory size in bytes: Flink's syntax, else a Kubernetes quantity.

    Numbers are bytes. Raises ValueError for text neither syntax reads, and for a size
    Flink's MemorySize cannot hold (past a Java long of bytes, or not a finite number).
    """
    size = _flink_memory_bytes(value)
    if not (isinstance(size, float) and abs(size) <= FLINK_MAX_BYTES):  # NaN fails too
        raise ValueError(f"unreadable memory size {value!r}")
    return size


def _flink_memory_bytes(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        try:
            return float(value)
        except OverflowError:  # an int past a float's range
            return None
    flink = _FLINK.match(str(value))
    if flink:
        return float(flink.group(1)) * _FLINK_UNIT[flink.group(2).lower()]
    try:
        return parse_quantity_bytes(str(value))
    except ValueError:
        return None
