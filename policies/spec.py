"""The tunable parts of a HybridScalingPolicy that the scaling core reads.

These pydantic models are at once the core's parameters and sections of the
HybridScalingPolicy CRD (`controller/api.py` composes them; `crds/` is generated
from that). Fields are snake_case in Python and camelCase on the wire. Defaults
are the Justin paper's (§5): busyness kept in [20 %, 80 %], Δθ = 0.8,
Δτ = 1 ms, maxLevel = 3, 158 MiB base managed memory per task.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    WithJsonSchema,
    model_validator,
)
from pydantic.alias_generators import to_camel

from policies import levels

_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)(ms|s|m|h))+$")
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"


def parse_duration(value: Any) -> float:
    """'2m' -> 120.0, '1m30s' -> 90.0, '500ms' -> 0.5; numbers are seconds."""
    if isinstance(value, bool):
        raise ValueError("a duration is a string such as '30s', '2m' or '500ms'")
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str) and _DURATION.match(value.strip()):
        return sum(float(n) * _DURATION_UNITS[u] for n, u in _DURATION_PART.findall(value))
    raise ValueError(f"invalid duration {value!r}: use forms such as '30s', '2m', '1m30s', '500ms'")


def format_duration(seconds: float) -> str:
    if seconds != int(seconds):
        return f"{round(seconds * 1000)}ms"
    whole = int(seconds)
    if whole and whole % 3600 == 0:
        return f"{whole // 3600}h"
    if whole and whole % 60 == 0:
        return f"{whole // 60}m"
    return f"{whole}s"


Duration = Annotated[
    float,
    BeforeValidator(parse_duration),
    PlainSerializer(format_duration, return_type=str),
    WithJsonSchema({"type": "string", "pattern": DURATION_PATTERN}),
]

_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|Ti|k|M|G|T)?$")
_BYTES = {
    None: 1, "Ki": 1024, "Mi": 1024**2, "Gi": 1024**3, "Ti": 1024**4,
    "k": 1000, "M": 1000**2, "G": 1000**3, "T": 1000**4,
}
MEMORY_PATTERN = r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|k|M|G|T)?$"


def parse_memory_mib(value: Any) -> float:
    """A Kubernetes memory quantity ('158Mi', '2Gi', '1G') in MiB. Plain numbers are MiB."""
    if isinstance(value, bool):
        raise ValueError("a memory size is a quantity such as '158Mi' or '2Gi'")
    if isinstance(value, int | float):
        return float(value)
    match = _QUANTITY.match(str(value).strip())
    if not match:
        raise ValueError(f"invalid memory quantity {value!r}: use forms such as '158Mi' or '2Gi'")
    number, unit = match.groups()
    return float(number) * _BYTES[unit] / 1024**2


def format_memory_mib(mib: float) -> str:
    if mib >= 1024 and mib % 1024 == 0:
        return f"{int(mib // 1024)}Gi"
    return f"{int(mib)}Mi" if mib == int(mib) else f"{round(mib * 1024)}Ki"


MemoryMiB = Annotated[
    float,
    BeforeValidator(parse_memory_mib),
    PlainSerializer(format_memory_mib, return_type=str),
    WithJsonSchema({"type": "string", "pattern": MEMORY_PATTERN}),
]


class SpecModel(BaseModel):
    """Base for CRD sections: camelCase on the wire, immutable, unknown fields rejected."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, frozen=True, extra="forbid"
    )


class ParallelismOverride(SpecModel):
    """Bounds for one vertex, chosen by operator uid (preferred) or by vertex id."""

    # maxLength/maxItems bound the CRD's CEL cost estimate (controller/api.py).
    operator_uid: str | None = Field(
        None, max_length=256, description="uid of any operator in the vertex's chain"
    )
    vertex_id: str | None = Field(
        None, max_length=64, description="Flink JobVertexID (32 hex characters)"
    )
    min_parallelism: int | None = Field(None, ge=1, description="replaces cpu.minParallelism")
    max_parallelism: int | None = Field(None, ge=1, description="replaces cpu.maxParallelism")

    @model_validator(mode="after")
    def _one_selector(self) -> ParallelismOverride:
        if (self.operator_uid is None) == (self.vertex_id is None):
            raise ValueError("set exactly one of operatorUid or vertexId")
        return self


class CpuScaling(SpecModel):
    """DS2, with the semantics of the Flink Kubernetes Operator's autoscaler."""

    utilization_min: float = Field(0.2, gt=0, lt=1, description="scale in below this utilization")
    utilization_target: float = Field(0.5, gt=0, le=1, description="utilization to size for")
    utilization_max: float = Field(0.8, gt=0, le=1, description="scale out above this utilization")
    min_parallelism: int = Field(1, ge=1, description="fewest tasks of any vertex")
    max_parallelism: int = Field(
        200, ge=1, description="most tasks of any vertex (also capped by its max parallelism)"
    )
    overrides: tuple[ParallelismOverride, ...] = Field(
        (), max_length=100,
        description="per-vertex parallelism bounds, by operator uid or vertex id",
    )
    max_scale_up_factor: float = Field(
        10.0, gt=0, description="new parallelism <= ceil(p * (1 + factor))"
    )
    max_scale_down_factor: float = Field(
        0.6, gt=0, lt=1, description="new parallelism >= p * (1 - factor)"
    )
    scale_down_delay: Duration = Field(
        300.0, description="a vertex must want fewer tasks this long before it gets them"
    )
    catch_up_duration: Duration = Field(
        300.0, description="size sources to drain their lag within this time (0 disables)"
    )

    @model_validator(mode="after")
    def _ordered(self) -> CpuScaling:
        if not self.utilization_min <= self.utilization_target <= self.utilization_max:
            raise ValueError("cpu: utilizationMin <= utilizationTarget <= utilizationMax must hold")
        if self.min_parallelism > self.max_parallelism:
            raise ValueError("cpu: minParallelism must be <= maxParallelism")
        return self

    def bounds_for(self, vertex_id: str, operator_uids: tuple[str, ...]) -> tuple[int, int]:
        """[min, max] parallelism for a vertex: the last matching override wins per field."""
        low, high = self.min_parallelism, self.max_parallelism
        for o in self.overrides:
            by_uid = o.operator_uid is not None and o.operator_uid in operator_uids
            if o.vertex_id == vertex_id or by_uid:
                low = o.min_parallelism if o.min_parallelism is not None else low
                high = o.max_parallelism if o.max_parallelism is not None else high
        return low, max(low, high)


class MemoryScaling(SpecModel):
    """Justin (Algorithm 1): scale a stateful vertex up instead of out when its cache is short."""

    enabled: bool = Field(True, description="false: DS2 only; memory levels stay as they are")
    base_managed_memory: MemoryMiB = Field(
        158.0, gt=0, description="managed memory per task at level 0; level m gives base * 2^m"
    )
    max_level: int = Field(
        3, ge=1, le=8, description="levels 0..maxLevel-1 are reachable (3: 158, 316, 632 MiB)"
    )
    cache_hit_rate_threshold: float = Field(
        0.8, ge=0, le=1, description="Δθ: scale up when the block-cache hit rate is below this"
    )
    state_latency_threshold: Duration = Field(
        0.001, description="Δτ: scale up when mean state access latency is above this"
    )
    min_improvement: float = Field(
        0.05, ge=0, lt=1,
        description="relative gain in hit rate or latency that counts as 'the scale-up helped'",
    )

    def managed_mib(self, level: int | None) -> float:
        return levels.managed_mib(level, self.base_managed_memory)


class Limits(SpecModel):
    """Caps on the whole job's task resources; a decision above them is clipped."""

    max_cpu_cores: float | None = Field(None, gt=0, description="total CPU cores of all tasks")
    max_memory: MemoryMiB | None = Field(
        None, gt=0, description="total task memory: heap, network and managed"
    )


class TaskFootprint(SpecModel):
    """What one task costs apart from managed memory (derived from the TaskManager shape)."""

    cpu_cores: float = Field(1.0, gt=0)
    heap_mib: float = Field(0.0, ge=0)
    network_mib: float = Field(0.0, ge=0)
