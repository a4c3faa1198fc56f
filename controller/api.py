"""The HybridScalingPolicy custom resource as pydantic models: the one source of truth.

`crds/hybridscalingpolicy.yaml` and the field reference in `docs/api.md` are
generated from these models (`controller/crd.py`). The DS2 and Justin sections
(`cpu`, `memory`, `limits`) are the core's own models from `policies.spec`, so
the core reads exactly what the user wrote. Cross-field rules are written twice
on purpose, once as pydantic validators (local `hybrid-scaler validate`, the
controller) and once as CEL in `CEL_RULES` (the API server); `tests/api/` checks
that both reject the same inputs. The status changes a pass makes are in
controller/record.py; this file is the schema alone, kept whole (past 400 lines) so
it reads top to bottom like the CRD it generates.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from enum import StrEnum
from types import MappingProxyType
from typing import Annotated, Any, NamedTuple, get_args, get_origin

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from controller.adapters import dial
from packer.pricing import PodPricing, ShapeBounds
from policies import explain
from policies.bill import Prices
from policies.decision import (
    Decision,
    EpochTime,
    HistoryRecord,
)
from policies.learning import POINTS_PER_VERTEX, VertexLearning
from policies.params import HISTORY_LIMIT, ScalingParams
from policies.restart_cost import Enactment, ObservedStep
from policies.spec import (
    DURATION_MAX_LENGTH,
    HOUR,
    SAFE_DURATION_PATTERN,
    CostSpec,
    CpuScaling,
    Duration,
    Limits,
    MemoryMiB,
    MemoryScaling,
    ParallelismOverride,
    Policy,
    SkewSpec,
    SpecModel,
    TaskFootprint,
    Within,
)

GROUP = "hybridscaler.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "HybridScalingPolicy"
PLURAL = "hybridscalingpolicies"
SINGULAR = "hybridscalingpolicy"
SHORT_NAMES = ("hsp",)
CATEGORIES = ("flink", "autoscaling")

DESCRIPTION = (
    "HybridScalingPolicy scales the operators of one FlinkDeployment out (parallelism, DS2) "
    "or up (managed memory per task, Justin)."
)

TARGET_API_VERSION = "flink.apache.org/v1beta1"
TARGET_KIND = "FlinkDeployment"

MIN_RESOLUTION = 5.0
# Flink 1.20's default memory options need ~982 MiB of process memory before a
# TaskManager has any task heap (packer.flink_memory: metaspace, overhead, framework,
# network and managed memory come first); 1 GiB leaves a slot ~25 MiB of heap.
MIN_TASK_MANAGER_MIB = 1024.0

# Kubernetes object names (DNS-1123 subdomain) and metav1.Condition's reason format.
_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
_REASON_PATTERN = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"


# --- spec ------------------------------------------------------------------------------


class Mode(StrEnum):
    ACTIVE = "Active"  # decide and patch the FlinkDeployment
    RECOMMEND = "Recommend"  # decide and record in status and Events, patch nothing
    DISABLED = "Disabled"  # do not evaluate at all


class Realization(StrEnum):
    """How a decision reaches Flink (docs/flink-contract.md)."""

    FINE_GRAINED = "fineGrained"  # default scheduler, per-operator memory, restart per decision
    ADAPTIVE = "adaptive"  # in-place parallelism, one managed-memory size for all slots


class TargetRef(SpecModel):
    """The FlinkDeployment (same namespace) this policy scales."""

    api_version: str = Field(
        TARGET_API_VERSION, max_length=64, description=f"must be {TARGET_API_VERSION}"
    )
    kind: str = Field(TARGET_KIND, max_length=64, description="must be " + TARGET_KIND)
    name: str = Field(
        min_length=1, max_length=253, pattern=_NAME_PATTERN,
        description="name of the FlinkDeployment in the policy's namespace",
    )

    @field_validator("api_version", "kind")
    @classmethod
    def _flink_deployment(cls, value: str, info: ValidationInfo) -> str:
        expected = {"api_version": TARGET_API_VERSION, "kind": TARGET_KIND}[info.field_name or ""]
        if value != expected:
            raise ValueError(f"must be {expected}")
        return value


_KEY_PATTERN = r"^[-._a-zA-Z0-9]+$"  # a Secret's data key (Kubernetes' own rule)


class SecretKeyRef(SpecModel):
    """One key of a Secret in the policy's own namespace (there is no namespace field:
    a policy can never name another namespace's Secret)."""

    name: str = Field(min_length=1, max_length=253, pattern=_NAME_PATTERN,
                      description="name of the Secret in the policy's namespace")
    key: str = Field(min_length=1, max_length=253, pattern=_KEY_PATTERN,
                     description="key in the Secret's data")


class BasicAuth(SpecModel):
    """HTTP basic authentication, as prometheus-operator's `basicAuth`."""

    username: SecretKeyRef = Field(description="the Secret key holding the user name")
    password: SecretKeyRef = Field(description="the Secret key holding the password")


class Authorization(SpecModel):
    """An `Authorization: <type> <credentials>` header, as prometheus-operator's
    `authorization`."""

    type: str = Field("Bearer", min_length=1, max_length=32, pattern=r"^[A-Za-z][-A-Za-z0-9]*$",
                      description="the scheme (Bearer by default; Basic is spec.metrics.basicAuth)")
    credentials: SecretKeyRef = Field(description="the Secret key holding the credentials")


class MetricsSpec(SpecModel):
    """Where and how metrics are read (the paper: 2 min window, 1 min stabilization, 5 s)."""

    prometheus_url: str | None = Field(
        None, max_length=dial.MAX_URL_LENGTH,
        description=("Prometheus base URL for this policy (http(s)://host[:port][/path]; no "
                     "credentials (see basicAuth, authorization), backslashes, percent-encoding, "
                     "query or non-canonical IP forms); unset: the controller's --prometheus-url"),
        json_schema_extra={"x-kubernetes-validations": dial.url_rules()},  # type: ignore[dict-item]
    )
    basic_auth: BasicAuth | None = Field(
        None, description=("HTTP basic authentication to prometheusUrl, read from Secrets in "
                           "the policy's namespace each pass (requires prometheusUrl)"))
    authorization: Authorization | None = Field(
        None, description=("an Authorization header to prometheusUrl, read from a Secret in "
                           "the policy's namespace each pass (requires prometheusUrl)"))
    window: Annotated[Duration, Within(high=HOUR)] = Field(
        120.0, description="metrics are averaged over this window")
    stabilization: Annotated[Duration, Within(high=HOUR)] = Field(
        60.0, description="after a reconfiguration, wait this long before the window starts"
    )
    # At least 5 s: each resolution is one full evaluation (PromQL, Flink REST, solver),
    # so a tenant's 1ms would cost the controller a core (issue 16.3).
    resolution: Annotated[Duration, Within(MIN_RESOLUTION, HOUR)] = Field(
        5.0, description="query step, and how often the policy is evaluated"
    )

    @field_validator("prometheus_url")
    @classmethod
    def _one_reading(cls, value: str | None) -> str | None:
        # The same parser the controller dials with (the CRD's CEL says the same).
        if value is not None:
            try:
                dial.parse_url(value, "spec.metrics.prometheusUrl")
            except dial.UrlRefused as e:
                raise ValueError(e.phrase) from None
        return value

    @model_validator(mode="after")
    def _resolution_fits(self) -> MetricsSpec:
        if self.resolution > self.window:
            raise ValueError("metrics: resolution must be <= window")
        return self

    @model_validator(mode="after")
    def _credentials_fit(self) -> MetricsSpec:
        if self.basic_auth is not None and self.authorization is not None:
            raise ValueError("metrics: set at most one of basicAuth or authorization")
        if (self.basic_auth or self.authorization) and self.prometheus_url is None:
            # The controller's own Prometheus has its own credentials (--prometheus-token-file).
            raise ValueError("metrics: basicAuth and authorization require prometheusUrl")
        return self


class TaskManagerShape(SpecModel):
    """One allowed TaskManager size; the packer chooses among them."""

    cpu: float = Field(4.0, gt=0, le=512, description="CPU cores of one TaskManager")
    memory: Annotated[MemoryMiB, Within(MIN_TASK_MANAGER_MIB, 1024**2, memory=True)] = Field(
        2048.0,
        description="process memory of one TaskManager (taskmanager.memory.process.size)",
    )
    slots: int = Field(4, ge=1, le=256, description="task slots of one TaskManager")

    def name(self) -> str:
        return f"{self.cpu:g}cpu-{round(self.memory)}mi-{self.slots}slots"

    def slot_footprint(self) -> TaskFootprint:
        """One slot's share of CPU, task heap and network memory, as Flink splits the TM."""
        # On use: `packer` loads OR-Tools, which `hybrid-scaler crd/validate` do not need.
        from packer.flink_memory import task_manager_memory

        split = task_manager_memory(self.memory)
        return TaskFootprint(
            cpu_cores=self.cpu / self.slots,
            heap_mib=split.task_heap_mib / self.slots,
            network_mib=split.network_mib / self.slots,
        )


_BOUNDS = ShapeBounds()  # the defaults are the packer's, written once


class TaskManagerSpec(SpecModel):
    """The TaskManagers the job may run on: chosen by price within these bounds (the
    defaults fit an 8-core, 32 GiB node), or from an explicit menu of shapes."""

    shapes: tuple[TaskManagerShape, ...] = Field(
        (), max_length=8,
        description=(
            "an explicit menu of TaskManager shapes (the packer picks the cheapest); empty "
            "(default): the shape is chosen within minCpu..maxCpu and minMemory..maxMemory. "
            "A task's CPU, heap and network footprint is one slot of the first shape, else "
            "of the paper's TaskManager (4 cores, 2 GiB, 4 slots)"
        ),
    )
    # More than 0, as an exclusive minimum: kube-apiserver 1.32 lets an integer 0 past
    # `minimum: 0.01` (e2e/test_validity.py found it). A vanishing maxCpu costs the
    # planner nothing: a slot no TaskManager within the bounds holds ends its search.
    min_cpu: float = Field(_BOUNDS.min_cpu, gt=0, le=512,
                           description="fewest CPU cores of one TaskManager")
    max_cpu: float = Field(_BOUNDS.max_cpu, gt=0, le=512,
                           description="most CPU cores of one TaskManager")
    cpu_step: float = Field(_BOUNDS.cpu_step, gt=0, le=64,
                            description="TaskManager CPU is a multiple of this")
    min_memory: Annotated[MemoryMiB, Within(MIN_TASK_MANAGER_MIB, 1024**2, memory=True)] = Field(
        _BOUNDS.min_memory_mib, description="least process memory of one TaskManager")
    max_memory: Annotated[MemoryMiB, Within(MIN_TASK_MANAGER_MIB, 1024**2, memory=True)] = Field(
        _BOUNDS.max_memory_mib, description="most process memory of one TaskManager")
    memory_step: Annotated[MemoryMiB, Within(1, 1024**2, memory=True)] = Field(
        _BOUNDS.memory_step_mib,
        description="TaskManager process memory is a multiple of this")
    max_slots: int = Field(_BOUNDS.max_slots, ge=1, le=256,
                           description="most task slots on one TaskManager")
    realization: Realization = Field(
        Realization.FINE_GRAINED, description="fineGrained (per-operator memory) or adaptive"
    )

    def footprint_shape(self) -> TaskManagerShape:
        """Whose slot is one task's CPU, heap and network: the first shape, or the paper's."""
        return self.shapes[0] if self.shapes else TaskManagerShape()

    def shape_bounds(self) -> ShapeBounds:
        """The packer's bounds: these, or only the menu's shapes when one is given."""
        from packer.types import TaskManagerShape as Shape

        menu = tuple(Shape(name=s.name(), cpu_cores=s.cpu, process_mib=s.memory,
                           max_slots=s.slots) for s in dict.fromkeys(self.shapes))
        return ShapeBounds(
            min_cpu=self.min_cpu, max_cpu=self.max_cpu, cpu_step=self.cpu_step,
            min_memory_mib=self.min_memory, max_memory_mib=self.max_memory,
            memory_step_mib=self.memory_step, max_slots=self.max_slots, menu=menu)

    def bounds_problem(self) -> str | None:
        """Bounds no TaskManager can meet, naming the fields (checked when placing)."""
        if self.min_cpu > self.max_cpu:
            return (f"spec.taskManager.minCpu ({self.min_cpu:g}) must be <= "
                    f"spec.taskManager.maxCpu ({self.max_cpu:g})")
        if self.min_memory > self.max_memory:
            return (f"spec.taskManager.minMemory ({self.min_memory:g} MiB) must be <= "
                    f"spec.taskManager.maxMemory ({self.max_memory:g} MiB)")
        return None


class PlacementSpec(SpecModel):
    """Bin packing of tasks onto TaskManagers (OR-Tools CP-SAT)."""

    solver_time_limit: Annotated[Duration, Within(0, 60, low_open=True)] = Field(
        2.0, description="CP-SAT time budget; past it the first-fit-decreasing packing is used"
    )


RESIZE_PORT = 9260  # flink-plugin's default hybridscaler.resize.port
RESIZED_LIMIT = 64  # vertices one resize step keeps in status (expected and observed)


class ResizeSpec(SpecModel):
    """Memory steps without a restart: flink-plugin's TaskManager agent resizes the live
    RocksDB (or ForSt) block caches (docs/flink-plugin.md, "Resizing in place"). The
    deployment must run a resizable backend (state.backend.type
    dev.hybridscaler.flink.resize.ResizableRocksDBStateBackendFactory, or on Flink 2.2 with
    ForSt dev.hybridscaler.flink.resize.ResizableForStStateBackendFactory); otherwise, and
    for every step that changes more than managed memory, steps restart the job."""

    token: SecretKeyRef = Field(
        description="the Secret key holding the agent's token (the file the TaskManagers "
                    "read as hybridscaler.resize.token-file), in the policy's namespace")
    port: int = Field(RESIZE_PORT, ge=1, le=65535,
                      description="the agent's port on each TaskManager pod "
                                  "(hybridscaler.resize.port)")


class HybridScalingPolicySpec(SpecModel):
    """What to scale and how. Every section but targetRef has defaults: the Justin paper's
    thresholds, upstream's catch-up, the capacity policy, and TaskManagers fitted within
    bounds that suit common nodes (docs/api.md, "Defaults, and why")."""

    target_ref: TargetRef
    mode: Mode = Field(
        Mode.RECOMMEND,
        description="Active patches the FlinkDeployment; Recommend (default) only records",
    )
    policy: Policy = Field(
        Policy.CAPACITY,
        description="ds2 (parallelism only), justin (DS2 then Algorithm 1) or capacity "
                    "(learned capacity surface, cheapest configuration in one jump)",
    )
    metrics: MetricsSpec = MetricsSpec()
    cpu: CpuScaling = CpuScaling()
    memory: MemoryScaling = MemoryScaling()
    limits: Limits = Limits()
    cost: CostSpec = CostSpec()
    task_manager: TaskManagerSpec = TaskManagerSpec()
    placement: PlacementSpec = PlacementSpec()
    skew: SkewSpec = SkewSpec()
    resize: ResizeSpec | None = Field(
        None, description="resize managed memory in place through flink-plugin's agent; "
                          "unset (default): every step restarts the job")

    def scaling_params(self) -> ScalingParams:
        """The core's parameters; a task's CPU, heap and network are its share of a slot
        of the first allowed shape, whichever shape it is placed on. In fine-grained mode
        configurations are priced as the pods the placement will request."""
        footprint = self.task_manager.footprint_shape().slot_footprint()
        pods = None
        if (self.task_manager.realization == Realization.FINE_GRAINED
                and self.task_manager.bounds_problem() is None):
            pods = PodPricing(
                footprint.cpu_cores, footprint.heap_mib, footprint.network_mib,
                self.memory.base_managed_memory, self.task_manager.shape_bounds(),
                Prices(self.cost.cpu_core_price, self.cost.memory_gib_price),
                time_limit_s=min(0.5, self.placement.solver_time_limit))
        return ScalingParams(
            policy=self.policy, cost=self.cost,
            cpu=self.cpu, memory=self.memory, limits=self.limits,
            footprint=footprint, pods=pods,
        )


class ObjectMeta(BaseModel):
    """The part of metadata a policy file needs; the API server owns the rest."""

    model_config = ConfigDict(extra="allow", frozen=True)

    name: str = Field(min_length=1, max_length=253, pattern=_NAME_PATTERN)
    namespace: str | None = None


class HybridScalingPolicy(SpecModel):
    """A whole policy document, as `kubectl apply` sends it."""

    api_version: str = Field(API_VERSION)
    kind: str = Field(KIND)
    metadata: ObjectMeta
    spec: HybridScalingPolicySpec
    status: Status | None = None

    @model_validator(mode="after")
    def _our_kind(self) -> HybridScalingPolicy:
        if (self.api_version, self.kind) != (API_VERSION, KIND):
            raise ValueError(f"apiVersion/kind must be {API_VERSION}/{KIND}")
        return self


def _safe_duration(field: str) -> str:
    """CEL: the field's text converts with duration() (its own bounds' rules say otherwise)."""
    return (f"(size({field}) <= {DURATION_MAX_LENGTH} && "
            f"{field}.matches({Within._literal(SAFE_DURATION_PATTERN)}))")


class Rule(NamedTuple):
    """One CEL `x-kubernetes-validations` entry; `field_path` is relative to the section."""

    rule: str
    message: str
    field_path: str | None = None


# CEL rules the CRD attaches to each section's schema; each has a pydantic twin above or
# in policies.spec. Single-field bounds (maxLevel >= 1, thresholds in [0, 1]) are the
# schema's minimum/maximum instead: the API server runs CEL only on objects that pass
# the schema, so a CEL copy of a bound could never fire.
CEL_RULES: Mapping[type[BaseModel], tuple[Rule, ...]] = MappingProxyType({
    TargetRef: (
        Rule(f"self.apiVersion == '{TARGET_API_VERSION}'",
             f"spec.targetRef.apiVersion must be {TARGET_API_VERSION}", ".apiVersion"),
        Rule(f"self.kind == '{TARGET_KIND}'",
             f"spec.targetRef.kind must be {TARGET_KIND}", ".kind"),
    ),
    MetricsSpec: (
        Rule(f"!({_safe_duration('self.resolution')} && {_safe_duration('self.window')}) || "
             "duration(self.resolution) <= duration(self.window)",
             "spec.metrics.resolution must be <= spec.metrics.window", ".resolution"),
        Rule("!has(self.basicAuth) || !has(self.authorization)",
             "spec.metrics: set at most one of basicAuth or authorization", ".authorization"),
        Rule("(!has(self.basicAuth) && !has(self.authorization)) || has(self.prometheusUrl)",
             "spec.metrics: basicAuth and authorization require prometheusUrl",
             ".prometheusUrl"),
    ),
    CpuScaling: (
        Rule("self.utilizationMin <= self.utilizationTarget",
             "spec.cpu.utilizationMin must be <= spec.cpu.utilizationTarget", ".utilizationMin"),
        Rule("self.utilizationTarget <= self.utilizationMax",
             "spec.cpu.utilizationTarget must be <= spec.cpu.utilizationMax", ".utilizationTarget"),
        Rule("self.minParallelism <= self.maxParallelism",
             "spec.cpu.minParallelism must be <= spec.cpu.maxParallelism", ".minParallelism"),
    ),
    ParallelismOverride: (
        Rule("has(self.operatorUid) != has(self.vertexId)",
             "spec.cpu.overrides[]: set exactly one of operatorUid or vertexId"),
        Rule("!has(self.minParallelism) || !has(self.maxParallelism) || "
             "self.minParallelism <= self.maxParallelism",
             "spec.cpu.overrides[].minParallelism must be <= maxParallelism", ".minParallelism"),
    ),
})


# --- status ----------------------------------------------------------------------------


def _utc_seconds(value: datetime) -> datetime:
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).replace(microsecond=0)


# metav1.Time: RFC3339 in UTC with second precision, so it round-trips exactly.
Timestamp = Annotated[
    datetime,
    AfterValidator(_utc_seconds),
    PlainSerializer(lambda t: t.strftime("%Y-%m-%dT%H:%M:%SZ"), return_type=str),
    WithJsonSchema({"type": "string", "format": "date-time"}),
]


def timestamp(epoch_seconds: float) -> datetime:
    return _utc_seconds(datetime.fromtimestamp(epoch_seconds, UTC))


class StatusModel(BaseModel):
    """Base for status parts: camelCase, immutable. Fields of a newer controller are kept
    as read and written back with the rest: the status is saved whole, and in a rolling
    upgrade the older replica may be the one saving it."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, frozen=True, extra="allow"
    )


class ConditionType(StrEnum):
    READY = "Ready"  # the target exists and the last evaluation ran
    METRICS_AVAILABLE = "MetricsAvailable"  # every vertex had fresh metrics over the window
    SCALING = "Scaling"  # a reconfiguration is in progress or within stabilization
    LIMIT_REACHED = "LimitReached"  # spec.limits clipped the last decision
    SKEWED = "Skewed"  # a vertex's busiest subtask is saturated and more tasks cannot help


class ConditionStatus(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


# What metav1.Condition's message holds.
CONDITION_MESSAGE_LIMIT = 32768


class Condition(StatusModel):
    """A Kubernetes API convention condition (the shape of metav1.Condition)."""

    type: ConditionType
    status: ConditionStatus
    reason: str = Field(min_length=1, max_length=1024, pattern=_REASON_PATTERN,
                        description="CamelCase, machine-readable")
    message: str = Field("", max_length=CONDITION_MESSAGE_LIMIT, description="for humans")
    last_transition_time: Timestamp = Field(description="when status last changed")
    observed_generation: int | None = Field(None, ge=0)


class OperatorStatus(StatusModel):
    """The current picture of one vertex (a chain of operators). None: not measured."""

    vertex_id: str
    name: str = ""
    parallelism: int = Field(ge=1)
    memory_level: int | None = Field(description="None is ⊥: no managed memory (stateless)")
    managed_mib: float = Field(ge=0, description="managed memory per task, MiB")
    busyness: float | None = None
    true_processing_rate: float | None = Field(None, description="records/s; None when idle")
    cache_hit_rate: float | None = None
    state_latency_ns: float | None = None


class PodRequest(StatusModel):
    """TaskManager pods of one shape: their summed requests, priced at spec.cost."""

    task_managers: int = Field(ge=0)
    cpu: float = Field(ge=0, description="CPU cores of all pods")
    memory: MemoryMiB = Field(description="memory of all pods")
    price: float = Field(ge=0, description="per hour at spec.cost")


class PlacementStatus(StatusModel):
    task_managers: int = Field(ge=0)
    shape: TaskManagerShape
    lower_bound: int = Field(ge=0, description="no packing can use fewer TaskManagers")
    solver_status: str = Field(description="optimal, feasible or fallback (first-fit decreasing)")
    moved_tasks: int = Field(0, ge=0, description="tasks that change TaskManager")
    pods_before: PodRequest | None = Field(
        None, description="what the TaskManager pods requested when the step was decided")
    pods: PodRequest | None = Field(
        None, description="what the TaskManager pods request for this placement")
    managed_fraction: float | None = Field(
        None, description="taskmanager.memory.managed.fraction of the chosen shape")
    network_fraction: float | None = Field(
        None, description="taskmanager.memory.network.fraction of the chosen shape")
    slot_sharing_groups: dict[str, list[str]] | None = Field(
        None, description="slot sharing group -> its vertex ids, as written to Flink")


class Target(StatusModel):
    """The owned FlinkDeployment fields of the last committed step (docs/flink-contract.md);
    every Active pass applies them where the deployment differs."""

    step: int = Field(ge=0, description="the step of status.history these fields realize")
    flink_configuration: dict[str, str] = Field(
        description="pipeline.jobvertex-parallelism-overrides and, in fineGrained mode, "
                    "hybridscaler.operator-resources")
    task_manager_cpu: float | None = Field(None, description="spec.taskManager.resource.cpu")
    task_manager_memory: str | None = Field(
        None, description="spec.taskManager.resource.memory")
    task_manager_replicas: int | None = Field(
        None, description="spec.taskManager.replicas; unset: left as it is")


ENACTMENTS_LIMIT = 10


class StepEnactment(StatusModel):
    """How a committed step is enacted and what it costs (policies/restart_cost.py)."""

    step: int = Field(ge=0, description="the step of status.history")
    kind: str = Field(description="resize, in-place, last-state or savepoint: the cheapest "
                                  "way Flink, its operator and flink-plugin can enact the step")
    state_bytes: int | None = Field(
        None, ge=0, description="the last completed checkpoint's full size; None: unknown")
    expected_downtime_s: float = Field(
        ge=0, description="from the cost model measured on real Flink, for this kind and state")
    applied_time: EpochTime | None = Field(None, description="when the step was patched")
    applied_unseen: bool = Field(
        False, description="a later pass found the step already on the FlinkDeployment (the "
        "controller stopped after its patch, before it recorded it), or applied it again over "
        "a drift before its downtime was seen: its downtime is not observed")
    observed_downtime_s: float | None = Field(
        None, ge=0, description="from the patch until the job was RUNNING again, as the "
                                "controller saw it (to within one pass); None: not yet")
    last_state_downtime_s: float | None = Field(
        None, ge=0, description="a savepoint step with a completed checkpoint: the expected "
        "downtime had spec.job.upgradeMode been last-state, when that is shorter (the controller "
        "never changes upgradeMode: docs/flink-plugin.md, 'Choosing the upgrade mode')")
    expected_cache_bytes: dict[str, int] | None = Field(
        None, max_length=RESIZED_LIMIT,
        description="a resize: per resized vertex (its name), the block cache per task "
                    "requested of the TaskManagers' agents")
    observed_cache_bytes: dict[str, int] | None = Field(
        None, max_length=RESIZED_LIMIT,
        description="a resize: per resized vertex, the block cache per task RocksDB's "
                    "block-cache-capacity metric showed")
    fallback: str | None = Field(
        None, max_length=1024,
        description="a resize that could not be done or verified: why; the step was then "
                    "enacted by restart")
    resized_over: str | None = Field(
        None, max_length=64, pattern="^[0-9a-f]*$",
        description="a resize: a digest of the FlinkDeployment's owned fields it was chosen "
                    "for, which it leaves as they are; any change while it is in effect is "
                    "an edit, undone by restart")

    def describe(self) -> str:
        """'by savepoint, expected 45.3 s of downtime (last-state would take ~43.7 s: …)'."""
        how = {"in-place": "in place", "resize": "resized in place (no restart)"}.get(
            self.kind, f"by {self.kind}")
        text = f"{how}, {explain.downtime(self.expected_downtime_s)}"
        if self.last_state_downtime_s is not None:
            text += (f" (last-state would take ~{self.last_state_downtime_s:g} s: "
                     "spec.job.upgradeMode)")
        return text


class Summary(StatusModel):
    """Flat values for `kubectl get hsp` columns and `kubectl describe`: what the
    TaskManager pods request (what the cluster reserves and bills), beside what the
    tasks use (the Justin paper's accounting)."""

    operators: int = 0
    task_managers: int = Field(0, ge=0, description="TaskManager pods the FlinkDeployment "
                                                     "requests (spec.taskManager.replicas)")
    cpu: float = Field(0.0, description="CPU cores the TaskManager pods request: "
                                        "spec.taskManager.resource.cpu × replicas")
    memory: str = Field("0Mi", description="memory the TaskManager pods request: "
                                           "spec.taskManager.resource.memory × replicas")
    price: float = Field(0.0, ge=0, description="price per hour of those requests at spec.cost")
    task_cpu: float = Field(0.0, description="CPU cores the tasks use after the last decision "
                                             "(one slot's share per task)")
    task_memory: str = Field("0Mi", description="memory the tasks use after the last decision "
                                                "(heap, network and managed per task)")
    step: int = 0
    last_action: str = Field("", description="e.g. 'scale-up count 4 (level 0→1)'")


class ReplacedTarget(StatusModel):
    """The FlinkDeployment this policy scaled before one of the same name replaced it."""

    uid: str = Field(description="metadata.uid of the replaced FlinkDeployment")
    step: int = Field(ge=0, description="the steps taken on it, now discarded")
    time: Timestamp = Field(description="when the controller found the new object")


class ObservedJob(StatusModel):
    """The job the last full pass saw on the JobManager (controller/jobhealth.py)."""

    id: str = Field(max_length=64, description="the job id")
    state: str = Field("", max_length=32, description="its state on the JobManager")
    restarted_time: EpochTime = Field(description="its start")
    seen_time: EpochTime = Field(description="when a pass last saw it so")
    unexplained_restarts: int = Field(
        0, ge=0, description="restarts without a step of this policy, in a row")
    last_unexplained_restart_time: EpochTime | None = None
    restarts: int | None = Field(
        None, ge=0, description="its numRestarts (failovers in place included), if answered")


class ScaleDownWait(StatusModel):
    vertex_id: str
    since: EpochTime = Field(description="when DS2 first wanted fewer tasks for this vertex")


def _absent_is_none(model: type[BaseModel], data: Any) -> Any:
    """Read a field that may be None but is missing as None, in `model` and its nested models.

    The API server never stores a null written by a merge patch (kopf's way of
    writing status): it drops the key. So every optional value may come back absent.
    """
    if not isinstance(data, dict):
        return data
    out = dict(data)
    for name, field in model.model_fields.items():
        key = field.alias or name
        if key not in out and field.is_required() and _admits_none(field.annotation):
            out[key] = None
        elif key in out:
            out[key] = _nested(field.annotation, out[key])
    return out


def _admits_none(annotation: Any) -> bool:
    return annotation is None or type(None) in get_args(annotation)


def _nested(annotation: Any, value: Any) -> Any:
    """Descend into `value` along `annotation` (X | None, tuple[X, ...], a model)."""
    options = (annotation, *get_args(annotation))
    if isinstance(value, list):
        sequence = next((o for o in options if get_origin(o) in (tuple, list)), None)
        return value if sequence is None else [_nested(get_args(sequence)[0], v) for v in value]
    model = next((o for o in options if isinstance(o, type) and issubclass(o, BaseModel)), None)
    return value if model is None else _absent_is_none(model, value)


# The changes a pass makes to the status are functions of controller/record.py.
class Status(StatusModel):
    """Written only by the controller; holds the history a restarted controller resumes from."""

    observed_generation: int | None = Field(None, ge=0)
    conditions: tuple[Condition, ...] = ()
    operators: tuple[OperatorStatus, ...] = ()
    last_decision: Decision | None = None
    history: tuple[HistoryRecord, ...] = Field(
        (), max_length=HISTORY_LIMIT, description=f"newest last, at most {HISTORY_LIMIT}"
    )
    step: int = Field(0, ge=0, description="reconfigurations so far")
    # A list, not a map: a merge patch replaces a list whole but merges a map's keys,
    # so a vertex whose wait ended would linger in a map.
    scale_down_wanted_since: tuple[ScaleDownWait, ...] = Field(
        (), max_length=1000, description="vertices waiting out cpu.scaleDownDelay"
    )
    last_reconfiguration_time: EpochTime | None = None
    cpu_short_since: EpochTime | None = Field(
        None, description="capacity policy: end of the first of two windows running in "
                          "which the tasks waited for CPU while the job fell behind")
    learned: tuple[VertexLearning, ...] = Field(
        (), max_length=1000,
        description="capacity policy: per vertex, the data points and judgements it learned "
                    f"from (at most {POINTS_PER_VERTEX} configurations each)")
    placement: PlacementStatus | None = None
    target: Target | None = None
    enactments: tuple[StepEnactment, ...] = Field(
        (), max_length=ENACTMENTS_LIMIT,
        description=f"newest last, at most {ENACTMENTS_LIMIT}: expected and observed downtime")
    # History belongs to one job: a FlinkDeployment deleted and recreated under the
    # same name has a new uid, and starts a fresh history (controller/gate.py).
    target_uid: str | None = Field(None, description="metadata.uid of the FlinkDeployment "
                                   "this history belongs to")
    replaced_target: ReplacedTarget | None = None
    job: ObservedJob | None = None
    summary: Summary = Summary()

    @model_validator(mode="before")
    @classmethod
    def _fill_absent(cls, data: Any) -> Any:
        return _absent_is_none(cls, data)

    def condition(self, type_: ConditionType) -> Condition | None:
        return next((c for c in self.conditions if c.type == type_), None)

    def enactment(self, step: int) -> StepEnactment | None:
        """How step `step` was enacted, while the bounded history holds it."""
        return next((e for e in self.enactments if e.step == step), None)

    def observed_steps(self) -> tuple[ObservedStep, ...]:
        """The applied steps whose downtime was observed, as the policy layer learns from
        them (policies/restart_cost.py); an entry of an unknown kind is left out."""
        kinds = {k.value: k for k in Enactment}
        return tuple(ObservedStep(kinds[e.kind], e.state_bytes, e.observed_downtime_s)
                     for e in self.enactments
                     if e.observed_downtime_s is not None and e.kind in kinds)

HybridScalingPolicy.model_rebuild()


def parse_policy(data: Mapping[str, Any]) -> HybridScalingPolicy:
    """A policy document (dict from YAML/JSON, or a kopf body) as a validated model."""
    return HybridScalingPolicy.model_validate(dict(data))
