"""Decision records: what the core decided, why, and what Justin must remember.

These are pydantic models so the controller stores them in the policy's status
verbatim (`status.lastDecision`, `status.history`): a restarted controller reads
them back and Justin continues where it stopped.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PlainSerializer, WithJsonSchema
from pydantic.alias_generators import to_camel

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def epoch_seconds(value: Any) -> Any:
    """Seconds since the epoch, rounded to the microsecond that RFC 3339 on the wire keeps.

    Accepts an RFC 3339 string (what the status holds), a datetime, or a number (statuses
    written before times became strings, and the core's own `now`). Rounding here, where
    a time enters a record, keeps a record equal to itself read back from JSON.
    """
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise ValueError(f"not an RFC 3339 time: {value!r}") from None
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        delta = value - _EPOCH
        return ((delta.days * 86400 + delta.seconds) * 10**6 + delta.microseconds) / 10**6
    if isinstance(value, int | float) and not isinstance(value, bool):
        return round(float(value), 6)
    return value  # pydantic's float validation reports it


def rfc3339(seconds: float) -> str:
    """`2026-11-22T06:58:27.251110Z`: UTC, microsecond precision."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# A point in time: a float of epoch seconds in Python (the core's clock), an RFC 3339 UTC
# string with microseconds in JSON and in the policy's status (Kubernetes API conventions).
EpochTime = Annotated[
    float,
    BeforeValidator(epoch_seconds),
    PlainSerializer(rfc3339, return_type=str, when_used="json"),
    WithJsonSchema({"type": "string", "format": "date-time"}),
]


class Action(StrEnum):
    """The kind of change a decision makes to one vertex."""

    NONE = "none"
    SCALE_OUT = "scale-out"
    SCALE_IN = "scale-in"
    SCALE_UP = "scale-up"
    MEMORY_ROLLBACK = "memory-rollback"
    STRIP_MEMORY = "strip-memory"


class Branch(StrEnum):
    """Which branch of Algorithm 1 (or of DS2 alone) produced a vertex's decision."""

    NOT_TRIGGERED = "not-triggered"  # DS2 saw every vertex within its utilization bounds
    MEMORY_DISABLED = "memory-disabled"  # spec.memory.enabled is false: DS2 only
    STATELESS = "stateless"  # line 3-4: no RocksDB metrics -> m = ⊥
    UNCHANGED = "unchanged"  # line 6 false: DS2 keeps p; memory stays
    SCALE_IN = "scale-in"  # DS2 lowers p; Justin never answers excess capacity with memory
    SCALED_UP_HELPED = "scaled-up-helped"  # lines 8-12: improved, scale up again
    SCALED_UP_HELPED_AT_MAX = "scaled-up-helped-at-max"  # line 9 false: DS2's p, memory stays
    SCALED_UP_NO_GAIN = "scaled-up-no-gain"  # line 14: roll back memory, DS2's p
    MEMORY_PRESSURE = "memory-pressure"  # lines 16-19: cancel scale-out, scale up
    MEMORY_PRESSURE_AT_MAX = "memory-pressure-at-max"  # line 16 false on maxLevel: scale out
    NO_MEMORY_PRESSURE = "no-memory-pressure"  # line 16 false on thresholds: scale out
    CLIPPED = "clipped"  # spec.limits lowered what the policy asked for
    NO_METRICS = "no-metrics"  # the observation lacks this vertex: nothing is decided
    OUT_OF_BOUNDS = "out-of-bounds"  # the running job breaks a spec bound or limit: moved in
    # The capacity policy (policies/capacity.py):
    DEFICIT = "deficit"  # busiest subtask above utilizationMax: cheapest sufficient config
    SURPLUS = "surplus"  # a cheaper configuration sufficed over the delay and pays back
    SURPLUS_WAITING = "surplus-waiting"  # cheaper would do: waiting out the delay
    RIDE_ALONG = "ride-along"  # takes its plan in a restart that happens anyway
    STEADY = "steady"  # the current configuration is the one to keep
    SKEW_LIMITED = "skew-limited"  # a hot key: more tasks stopped helping
    CAPACITY_UNKNOWN = "capacity-unknown"  # too idle to measure, or excluded
    CACHE_WARMING = "cache-warming"  # block cache refilling after a restart: window held back


class RecordModel(BaseModel):
    """Base for what the status stores: camelCase, immutable; fields of a newer controller
    are kept as read (controller.api.StatusModel says why)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True,
                              extra="allow")


class VertexDecision(RecordModel):
    vertex_id: str
    vertex_name: str = ""
    action: Action
    branch: Branch
    reason: str = Field(description="one sentence with the numbers that made the branch fire")
    parallelism_before: int
    parallelism_after: int
    memory_level_before: int | None
    memory_level_after: int | None
    scaled_up: bool = Field(False, description="the paper's v: this step raised the memory level")
    busyness: float | None = None
    true_processing_rate: float | None = None
    target_rate: float | None = None
    utilization: float | None = Field(
        None, description="target rate / true processing rate: the busyness DS2 expects"
    )
    cache_hit_rate: float | None = None
    state_latency_ns: float | None = None
    predicted_capacity: float | None = Field(
        None, description="capacity policy: predicted true processing rate after the step")


class Totals(RecordModel):
    cpu_cores: float
    memory_mib: float


class SkewFinding(RecordModel):
    """One skewed vertex: the busiest subtask against the mean, and what more tasks can do."""

    vertex_id: str
    vertex_name: str = ""
    parallelism: int
    keyed: bool = Field(description="the vertex has a hashed (keyBy) input: its load is per key")
    hottest_busyness: float = Field(description="busiest subtask's busyness over the window")
    mean_busyness: float
    ratio: float = Field(description="hottest / mean busyness")
    hottest_share: float = Field(
        description="the busiest subtask's share of the vertex's input (records when the "
                    "per-subtask rates are collected, else estimated from busyness)")
    from_records: bool = Field(description="hottest_share is measured from records, not busyness")
    hot_key_group_share: float | None = Field(
        None, description="estimated share of the hottest key group(s); None when not keyed")
    best_hottest_busyness: float | None = Field(
        None, description="the busiest subtask's busyness at max parallelism (estimate)")
    saturated: bool = Field(description="the busiest subtask is at or above cpu.utilizationMax")
    scale_out_helps: bool = Field(
        description="more tasks can bring the busiest subtask below cpu.utilizationMax")
    useful_parallelism: int | None = Field(
        None, description="where scale-out stops relieving the busiest subtask (blocked only)")
    message: str


class Forecast(RecordModel):
    """What the capacity policy expects a decision to cost and save."""

    cost_before_per_hour: float = Field(description="price of the tasks now (spec.cost)")
    cost_after_per_hour: float = Field(description="price of the tasks after the step")
    expected_downtime_s: float = Field(0.0, description="downtime the step is expected to cost")
    restart_cost: float = Field(0.0, description="downtime and catch-up, in the same price")


class Decision(RecordModel):
    """One evaluation's outcome. `reconfigures` is true when any vertex changes."""

    time: EpochTime = Field(description="when the core evaluated (RFC 3339, microseconds)")
    step: int = Field(description="count of reconfigurations so far, this one included")
    # Also a restart at the same configuration that writes the SQL settings (buffering).
    reconfigures: bool
    reason: str
    vertices: tuple[VertexDecision, ...]
    before: Totals
    after: Totals
    clipped: bool = False
    clip_reason: str = ""
    skew: tuple[SkewFinding, ...] = Field(
        (), description="vertices whose busiest subtask is far above the mean (policies/skew.py)")
    forecast: Forecast | None = None

    def vertex(self, vertex_id: str) -> VertexDecision:
        for v in self.vertices:
            if v.vertex_id == vertex_id:
                return v
        raise KeyError(vertex_id)


class VertexHistory(RecordModel):
    """Per vertex, what Justin's next step needs: o.v, θ and τ of the previous step."""

    vertex_id: str
    parallelism: int
    memory_level: int | None
    scaled_up: bool
    cache_hit_rate: float | None
    state_latency_ns: float | None
    # What DS2's scale-in floor reads (ds2.scale_outs); None in statuses stored before it:
    # the parallelism before the step, and the target rate (records/s, without the lag's
    # catch-up) and the utilization that rate put on that parallelism.
    parallelism_before: int | None = None
    target_rate: float | None = None
    utilization: float | None = None
    # Unused since a rescale restarts every scale-down wait (kept for stored statuses).
    scale_down_wanted_since: EpochTime | None = None


# A step's reason as its history record keeps it: long enough for any step a person
# reads, short enough that ten records of a job with thousands of vertices stay a
# small part of the status object (etcd stores it whole).
HISTORY_REASON_LIMIT = 2048


class HistoryRecord(RecordModel):
    time: EpochTime
    step: int
    vertices: tuple[VertexHistory, ...]
    # Why the step was taken, kept with the step: Events expire (an hour by default) and
    # status.lastDecision holds only the latest evaluation. "" in statuses stored before.
    reason: str = Field("", max_length=HISTORY_REASON_LIMIT, description=(
        f"why the step was taken: its decision's reason, cut at {HISTORY_REASON_LIMIT} "
        "characters"))

    def vertex(self, vertex_id: str) -> VertexHistory | None:
        for v in self.vertices:
            if v.vertex_id == vertex_id:
                return v
        return None
