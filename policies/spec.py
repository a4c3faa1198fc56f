"""The tunable parts of a HybridScalingPolicy that the scaling core reads.

These pydantic models are at once the core's parameters and sections of the
HybridScalingPolicy CRD (`controller/api.py` composes them; `crds/` is generated
from that). Fields are snake_case in Python and camelCase on the wire. The scaling
thresholds are the Justin paper's (§5): busyness kept in [20 %, 80 %], Δθ = 0.8,
Δτ = 1 ms, maxLevel = 3, 158 MiB base managed memory per task; the catch-up (30 min)
is the Flink autoscaler's, and the policy is the capacity policy (docs/api.md,
"Defaults, and why").
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    PlainSerializer,
    WithJsonSchema,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import core_schema

from policies import levels
from policies.quantity import MIB, QUANTITY_PATTERN, parse_quantity_bytes

_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)(ms|s|m|h))+$")
_DURATION_PART = re.compile(r"(\d+)(?:\.(\d+))?(ms|s|m|h)")
_DURATION_NS = {"ms": 10**6, "s": 10**9, "m": 60 * 10**9, "h": 3600 * 10**9}
DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"
# Durations the API server can convert: CEL's duration() is Go's, int64 nanoseconds
# (~2.5 million hours), and fails on more. At most 5 integer digits per number in at
# most 32 characters stays far below that; a bound's CEL rule converts only such text.
DURATION_MAX_LENGTH = 32
SAFE_DURATION_PATTERN = r"^([0-9]{1,5}(\.[0-9]+)?(ms|s|m|h))+$"
_SAFE_DURATION = re.compile(SAFE_DURATION_PATTERN)


def parse_duration(value: Any) -> float:
    """'2m' -> 120.0, '1m30s' -> 90.0, '500ms' -> 0.5; numbers are seconds.

    Text is read as Go (and so the API server's CEL) reads it: to whole nanoseconds,
    a fraction of a nanosecond dropped.
    """
    if isinstance(value, bool):
        raise ValueError("a duration is a string such as '30s', '2m' or '500ms'")
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str) and _DURATION.match(value.strip()):
        if len(value.strip()) > DURATION_MAX_LENGTH:
            raise ValueError(f"a duration has at most {DURATION_MAX_LENGTH} characters")
        ns = 0
        for whole, fraction, unit in _DURATION_PART.findall(value):
            scale = _DURATION_NS[unit]
            ns += int(whole) * scale
            if fraction:
                ns += int(fraction) * scale // 10 ** len(fraction)
        return ns / 1e9
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
    WithJsonSchema({"type": "string", "pattern": DURATION_PATTERN,
                    "maxLength": DURATION_MAX_LENGTH}),
]

MEMORY_PATTERN = QUANTITY_PATTERN
MEMORY_MAX_LENGTH = 32


def parse_memory_mib(value: Any) -> float:
    """A Kubernetes memory quantity ('158Mi', '2Gi', '1G', '2048' bytes) in MiB."""
    return parse_quantity_bytes(value) / MIB


def format_memory_mib(mib: float) -> str:
    if mib >= 1024 and mib % 1024 == 0:
        return f"{int(mib // 1024)}Gi"
    return f"{int(mib)}Mi" if mib == int(mib) else f"{round(mib * 1024)}Ki"


MemoryMiB = Annotated[
    float,
    BeforeValidator(parse_memory_mib),
    PlainSerializer(format_memory_mib, return_type=str),
    WithJsonSchema({"type": "string", "pattern": MEMORY_PATTERN, "maxLength": MEMORY_MAX_LENGTH}),
]


@dataclass(frozen=True)
class Within:
    """Bounds of a Duration (seconds) or MemoryMiB (MiB) field, written once: pydantic
    checks them on the parsed value, and the CRD carries them as CEL rules on the field
    (`x-kubernetes-validations`), with the same messages. The API server names the field."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False  # > low instead of >= low
    memory: bool = False  # a MemoryMiB field; else a Duration

    def messages(self) -> tuple[str | None, str | None]:
        text = format_memory_mib if self.memory else format_duration
        low = None if self.low is None else (
            f"must be more than {text(self.low)}" if self.low_open
            else f"must be at least {text(self.low)}")
        high = None if self.high is None else f"must be at most {text(self.high)}"
        return low, high

    @staticmethod
    def _literal(pattern: str) -> str:
        """A regex as a CEL string literal: CEL has no '\\.' escape, '[.]' means the same."""
        text = pattern.replace("\\.", "[.]")
        if "\\" in text or "'" in text:
            raise ValueError(f"cannot write {pattern!r} as a CEL string literal")
        return f"'{text}'"

    def rules(self) -> list[dict[str, str]]:
        """The CEL rules on the field's string (`self`), guarded so that they never fail to
        convert: text the pattern refuses (the schema reports it) passes them."""
        low_msg, high_msg = self.messages()
        out = []
        if self.memory:
            guard = f"!self.matches({self._literal(MEMORY_PATTERN)}) || "
            for bound, op, msg in ((self.low, ">" if self.low_open else ">=", low_msg),
                                   (self.high, "<=", high_msg)):
                if bound is not None:
                    out.append({"rule": f"{guard}quantity(self).compareTo("
                                        f"quantity('{format_memory_mib(bound)}')) {op} 0",
                                "message": str(msg)})
            return out
        safe = (f"(size(self) <= {DURATION_MAX_LENGTH} && "
                f"self.matches({self._literal(SAFE_DURATION_PATTERN)}))")
        if self.low is not None:
            op = ">" if self.low_open else ">="
            out.append({"rule": f"!{safe} || duration(self) {op} "
                                f"duration('{format_duration(self.low)}')",
                        "message": str(low_msg)})
        if self.high is not None:
            # Too many digits to convert is too long a duration: "at most" says so.
            out.append({"rule": f"!self.matches({self._literal(DURATION_PATTERN)}) || ({safe} && "
                                f"duration(self) <= duration('{format_duration(self.high)}'))",
                        "message": str(high_msg)})
        return out

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler
                                     ) -> core_schema.CoreSchema:
        low_msg, high_msg = self.messages()

        def check(value: float) -> float:
            if self.low is not None and (value <= self.low if self.low_open else value < self.low):
                raise ValueError(low_msg)
            if self.high is not None and value > self.high:
                raise ValueError(high_msg)
            return value

        def convertible(value: Any) -> Any:
            # Text CEL cannot convert to a duration is, for the API server, too long.
            if (not self.memory and self.high is not None and isinstance(value, str)
                    and not _SAFE_DURATION.match(value.strip())
                    and _DURATION.match(value.strip())):
                raise ValueError(high_msg)
            return value

        return core_schema.no_info_before_validator_function(
            convertible, core_schema.no_info_after_validator_function(check, handler(source)))

    def __get_pydantic_json_schema__(self, schema: core_schema.CoreSchema,
                                     handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        return dict(handler(schema)) | {"x-kubernetes-validations": self.rules()}


# Flink's upper bound of a vertex's max parallelism (KeyGroupRangeAssignment, 2^15).
MAX_PARALLELISM = 32768
HOUR = 3600.0
DAY = 86400.0


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
    min_parallelism: int | None = Field(
        None, ge=1, le=MAX_PARALLELISM, description="replaces cpu.minParallelism")
    max_parallelism: int | None = Field(
        None, ge=1, le=MAX_PARALLELISM, description="replaces cpu.maxParallelism")
    exclude: bool = Field(
        False, description="never rescale this vertex, and never let it trigger a rescale"
    )

    @model_validator(mode="after")
    def _one_selector(self) -> ParallelismOverride:
        if (self.operator_uid is None) == (self.vertex_id is None):
            raise ValueError("set exactly one of operatorUid or vertexId")
        if (self.min_parallelism is not None and self.max_parallelism is not None
                and self.min_parallelism > self.max_parallelism):
            raise ValueError("minParallelism must be <= maxParallelism")
        return self


class CpuScaling(SpecModel):
    """DS2, with the semantics of the Flink Kubernetes Operator's autoscaler."""

    utilization_min: float = Field(0.2, gt=0, lt=1, description="scale in below this utilization")
    utilization_target: float = Field(0.5, gt=0, le=1, description="utilization to size for")
    utilization_max: float = Field(0.8, gt=0, le=1, description="scale out above this utilization")
    min_parallelism: int = Field(
        1, ge=1, le=MAX_PARALLELISM, description="fewest tasks of any vertex")
    max_parallelism: int = Field(
        200, ge=1, le=MAX_PARALLELISM,
        description="most tasks of any vertex (also capped by its max parallelism)",
    )
    overrides: tuple[ParallelismOverride, ...] = Field(
        (), max_length=100,
        description="per-vertex parallelism bounds, by operator uid or vertex id",
    )
    max_scale_up_factor: float = Field(
        10.0, gt=0, le=1e6,  # upstream's default, 1e5, fits; past it ceil() overflows
        description="new parallelism <= ceil(p * (1 + factor))"
    )
    max_scale_down_factor: float = Field(
        0.6, gt=0, lt=1, description="new parallelism >= p * (1 - factor)"
    )
    scale_down_delay: Annotated[Duration, Within(high=DAY)] = Field(
        300.0, description="a vertex must want fewer tasks this long before it gets them"
    )
    # The Flink autoscaler's default (job.autoscaler.catch-up.duration). The utilization
    # target's headroom drains an ordinary backlog anyway; a shorter time sizes steps for
    # backlogs that are gone by the next window (docs/policies.md, "The catch-up default").
    catch_up_duration: Annotated[Duration, Within(high=DAY)] = Field(
        1800.0, description="size sources to drain their lag within this time (0 disables)"
    )
    restart_time: Annotated[Duration, Within(high=DAY)] = Field(
        0.0, description="downtime of one rescale; sized to catch up within catchUpDuration"
    )
    backlog_lag_threshold: Annotated[Duration, Within(high=DAY)] = Field(
        300.0,
        description="a source lagging more than this much input is processing backlog: "
        "no scale-down, scale-up only at full load",
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

    def parallelism_range(self, vertex_id: str, operator_uids: tuple[str, ...],
                          max_parallelism: int) -> tuple[int, int]:
        """[low, upper] a vertex may run at: its bounds within the job's max parallelism,
        which a higher minParallelism yields to (Flink cannot run more)."""
        low, high = self.bounds_for(vertex_id, operator_uids)
        upper = min(high, max_parallelism)
        return min(low, upper), upper

    def excludes(self, vertex_id: str, operator_uids: tuple[str, ...]) -> bool:
        """True when an override excludes this vertex from scaling."""
        return any(
            o.exclude and (o.vertex_id == vertex_id or o.operator_uid in operator_uids)
            for o in self.overrides
        )


class MemoryScaling(SpecModel):
    """Justin (Algorithm 1): scale a stateful vertex up instead of out when its cache is short."""

    enabled: bool = Field(True, description="false: DS2 only; memory levels stay as they are")
    base_managed_memory: Annotated[MemoryMiB, Within(1, 64 * 1024, memory=True)] = Field(
        158.0, description="managed memory per task at level 0; level m gives base * 2^m"
    )
    max_level: int = Field(
        3, ge=1, le=8, description="levels 0..maxLevel-1 are reachable (3: 158, 316, 632 MiB)"
    )
    cache_hit_rate_threshold: float = Field(
        0.8, ge=0, le=1, description="Δθ: scale up when the block-cache hit rate is below this"
    )
    state_latency_threshold: Annotated[Duration, Within(high=10.0)] = Field(
        0.001, description="Δτ: scale up when mean state access latency is above this"
    )
    min_improvement: float = Field(
        0.05, ge=0, lt=1,
        description="relative gain in hit rate or latency that counts as 'the scale-up helped'",
    )

    def managed_mib(self, level: int | None) -> float:
        return levels.managed_mib(level, self.base_managed_memory)


class Policy(StrEnum):
    """Which decision procedure runs (docs/policies.md compares them)."""

    DS2 = "ds2"  # parallelism only, as the Flink autoscaler sizes it
    JUSTIN = "justin"  # DS2, then Algorithm 1: scale up instead of out while the cache is short
    CAPACITY = "capacity"  # learned capacity surface, cheapest (parallelism, memory) in one jump


class CostSpec(SpecModel):
    """What the capacity policy minimises, and what a restart costs it.

    The default prices are a public cloud's on-demand ratio (one vCPU costs about as much
    as 7.5 GiB of memory); only their ratio matters.
    """

    cpu_core_price: float = Field(1.0, gt=0, le=1e6, description="price of one CPU core per hour")
    memory_gib_price: float = Field(
        0.134, gt=0, le=1e6, description="price of one GiB of task memory per hour")
    restart_downtime: Annotated[Duration, Within(high=HOUR)] | None = Field(
        None, description="expected downtime of one restart; unset: the controller's estimate "
                          "for how the step is enacted")
    payback_period: Annotated[Duration, Within(60.0, DAY)] = Field(
        3600.0, description="a restart that only saves resources must pay for its downtime "
                            "within this time")


class SkewSpec(SpecModel):
    """What to do for a vertex that more tasks cannot relieve (a hot key): recommend
    buffering (policies/buffering.py), and apply it to SQL jobs only when asked."""

    apply_sql_settings: bool = Field(
        False, description="Active mode: when a SQL aggregation is skew-limited, write "
                           "mini-batch and two-phase aggregation settings into the "
                           "FlinkDeployment's flinkConfiguration with the next scaling step, "
                           "or as a step of their own when none comes (they take effect "
                           "at its restart); unset or false: only recommend")
    mini_batch_latency: Annotated[Duration, Within(0.001, 60.0)] = Field(
        2.0, description="table.exec.mini-batch.allow-latency: the most a record waits "
                         "in a batch")
    mini_batch_size: int = Field(
        5000, ge=1, le=1_000_000,
        description="table.exec.mini-batch.size: records buffered per batch at most")


class Limits(SpecModel):
    """Caps on the whole job's task resources: proposals are clipped, a running job moved within."""

    max_cpu_cores: float | None = Field(None, gt=0, description="total CPU cores of all tasks")
    max_memory: Annotated[MemoryMiB, Within(1, memory=True)] | None = Field(
        None, description="total task memory: heap, network and managed"
    )


class TaskFootprint(SpecModel):
    """What one task costs apart from managed memory (derived from the TaskManager shape)."""

    cpu_cores: float = Field(1.0, gt=0)
    heap_mib: float = Field(0.0, ge=0)
    network_mib: float = Field(0.0, ge=0)
