"""The ports: everything a pass needs from outside the process, as Protocols and values.

The pass (controller/loop.py) talks only to these. The real adapters live in
`controller/adapters/` (kube, prometheus, flink_rest); in-memory ones backed by the
twin, which `hybrid-scaler simulate` drives, in `controller/adapters/twin.py`; the
unit tests use hand-written fakes. The split follows the Flink operator's
flink-autoscaler module (ScalingRealizer, MetricsCollector, EventHandler).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from controller.api import ResizeSpec, Status
from policies.model import JobGraph, Observation

# --- the Kubernetes side: the FlinkDeployment, the policy's status, Events --------------


class Deployments(Protocol):
    """FlinkDeployments, read whole and written by server-side apply of our fields."""

    def get(self, namespace: str, name: str) -> Mapping[str, Any] | None: ...

    def apply(self, namespace: str, name: str, body: Mapping[str, Any]) -> str:
        """Server-side apply of `body`; returns a note for humans (e.g. fields taken over).
        Raises `PatchRefused` when admission turns the patch down."""
        ...


class PatchRefused(RuntimeError):
    """The API server refused our patch at admission (a webhook, a ResourceQuota, a
    ValidatingAdmissionPolicy, RBAC or the CRD's schema): only its HTTP code is kept,
    never its text, which a webhook writes."""

    def __init__(self, code: int) -> None:
        super().__init__(f"HTTP {code}")
        self.code = code


class Owners(Protocol):
    """Who scales a FlinkDeployment (controller/owner.py)."""

    def alive(self, namespace: str, policy: str, uid: str, deployment: str) -> bool:
        """Whether the policy of that name and uid exists (not being deleted), is Active,
        and still targets `deployment`."""
        ...

    def claim(self, namespace: str, deployment: str, owner: str,
              resource_version: str | None) -> bool:
        """Set the owner annotation, if the deployment is still at `resource_version`;
        False if it moved on (a concurrent claim)."""
        ...


class StatusConflict(RuntimeError):
    """The policy changed since the status a pass decided from was read (HTTP 409)."""


class StatusStore(Protocol):
    """The policy's status subresource; a save replaces the whole status.

    Saves are conditional: they succeed only if the policy is still the version last
    read or saved through this store. Otherwise `save` re-reads it and raises
    `StatusConflict`; `latest` then holds the policy as it is now.
    """

    def save(self, status: Status) -> None: ...

    def confirm(self) -> None:
        """Raise `StatusConflict` (having re-read) unless the policy is still the version
        last read or saved: a check before acting on the status without writing it."""
        ...

    def latest(self) -> tuple[Mapping[str, Any], Status]:
        """The policy object and its status, as last read or saved (the version saves
        are conditional on)."""
        ...


class Events(Protocol):
    """Kubernetes Events on the policy (`kubectl describe hsp` reads them as a log)."""

    def emit(self, type_: str, reason: str, message: str) -> None: ...


# --- the Flink REST side ------------------------------------------------------------------


class FlinkRestError(RuntimeError):
    """The JobManager could not be reached or answered with something we cannot use."""

    def __init__(self, message: str, kind: str = "") -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class JobSummary:
    jid: str
    name: str
    state: str
    start_time_ms: int
    last_modification_ms: int
    # Flink's numRestarts of this job (failovers in place included); None: not answered.
    restarts: int | None = None


class JobReader(Protocol):
    """One FlinkDeployment's JobManager; failures raise `FlinkRestError`."""

    def job(self) -> JobSummary | None: ...

    def job_graph(
        self, jid: str, uid_candidates: Iterable[str] = (),
        operator_ids: Mapping[str, Iterable[str]] | None = None,
    ) -> JobGraph: ...

    def configuration(self, jid: str, keys: Iterable[str]) -> Mapping[str, str] | None:
        """Those of `keys` the job's JobManager configuration sets, and their values (GET
        /jobs/<jid>/jobmanager/config: what the Flink operator deployed, its default
        configuration under the spec's); None when not answered."""
        ...


# --- metrics --------------------------------------------------------------------------------


class MetricsError(RuntimeError):
    """The metrics source could not answer a query. `kind` says whose fault: "timeout",
    "too-large", "malformed" or "unreachable" are the endpoint's (controller.adapters.dial)."""

    def __init__(self, message: str, kind: str = "") -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class MetricsUnavailable:
    reason: str
    kind: str = ""  # MetricsError.kind when a call failed


@dataclass(frozen=True)
class Collected:
    observation: Observation
    # Per vertex, the RocksDB block cache per task in bytes (max over column families).
    cache_capacity_bytes: Mapping[str, float] = field(default_factory=dict)
    # The last completed checkpoint's full size in bytes (what a restart restores);
    # None: no checkpoint completed, or not known.
    checkpoint_bytes: float | None = None


class Metrics(Protocol):
    """One window of every signal for a job, all or nothing, and its chains' operator ids."""

    def observe(self, graph: JobGraph, job_id: str, now: float, window_s: float,
                resolution_s: float) -> Collected | MetricsUnavailable: ...

    def operator_ids(self, job_id: str, now: float) -> Mapping[str, Iterable[str]]:
        """Per vertex, the operator ids of its chain; may raise `MetricsError`."""
        ...


# --- flink-plugin's agents: resizing block caches in place ---------------------------------


@dataclass(frozen=True)
class CacheTarget:
    """One JobVertex's block cache per task, as flink-plugin's agent keys slots: the vertex
    name as Flink's REST shows it (its task threads' name)."""

    task: str
    cache_bytes: int


class ResizeFailed(RuntimeError):
    """A resize was not done. `kind`: "unreachable" (no agent answered, or no TaskManager
    pod runs), "missing" (no agent holds a slot of a task: the job is between attempts, or
    the backend is not installed), "unauthorized" (401), "refused" (409: over budget,
    resizing disabled on a TaskManager), "malformed" (an answer we cannot read),
    "credentials" (the token's Secret, or no right to list pods). The message names the
    field and the TaskManager pod, never the agent's text."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class Resized:
    """What the agents did: per task, the smallest block cache its subtasks read back, and
    the tasks whose slots this call resized (the rest already held their target)."""

    read_back: Mapping[str, int]
    changed: tuple[str, ...] = ()


class OperatorDefaultsUnreadable(RuntimeError):
    """The Flink operator's default configuration could not be read: only where it is and
    the HTTP code are kept, never what answered."""


# The Flink operator's default configuration as the autoscaler's switches in each of its
# files (`controller.upstream.operator_defaults`); raises `OperatorDefaultsUnreadable`.
OperatorDefaults = Callable[[], Mapping[str, Mapping[str, Any]]]


class Resizer(Protocol):
    """The agents on one FlinkDeployment's TaskManagers (docs/flink-plugin.md)."""

    def resize(self, job_id: str, targets: Iterable[CacheTarget], budget_bytes: int
               ) -> Resized:
        """Give every subtask of each target's task its cache, on every TaskManager that
        runs one; grant each TaskManager `budget_bytes` of block cache first. Slots that
        already hold their target are left alone (so calling it every pass re-applies a
        resize a failover undid). Raises `ResizeFailed`."""
        ...


# --- all of them, for one pass ------------------------------------------------------------


Clock = Callable[[], float]  # seconds since the epoch


@dataclass
class Ports:
    deployments: Deployments
    store: StatusStore
    events: Events
    flink: Callable[[str, str], JobReader]  # (namespace, deployment name) -> REST client
    metrics: Callable[[str], Metrics]  # Prometheus URL -> metrics reader
    clock: Clock = time.time
    default_prometheus_url: str = "http://prometheus:9090"
    owners: Owners | None = None  # None: ownership is not checked (the twin, unit fakes)
    # (namespace, deployment name, spec.resize) -> its TaskManagers' agents; None: the
    # controller cannot resize (every step restarts).
    resizers: Callable[[str, str, ResizeSpec], Resizer] | None = None
    # None: the Flink operator's default configuration is not read (--flink-operator-config)
    operator_defaults: OperatorDefaults | None = None
