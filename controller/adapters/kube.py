"""The loop's ports onto a real API server (kubernetes client) and kopf's event poster."""

from __future__ import annotations

import datetime
import logging
import re
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError
from urllib3.exceptions import HTTPError

from controller import api
from controller.api import Status
from controller.owner import OWNER_ANNOTATION
from controller.ports import OperatorDefaultsUnreadable, PatchRefused, StatusConflict
from controller.realize import FIELD_MANAGER, FLINK_GROUP, FLINK_PLURAL, FLINK_VERSION
from controller.upstream import DefaultsUnreadable, operator_defaults

log = logging.getLogger(__name__)
T = TypeVar("T")
RETRIED = frozenset({409, 429, 500, 502, 503, 504})
# What admission answers when it turns a write down: 403 (a webhook's default, a quota,
# RBAC), 422 and 400 (a ValidatingAdmissionPolicy, the CRD's schema, a webhook's choice).
REFUSED = frozenset({400, 403, 422})
CAS_ATTEMPTS = 3  # status writes whose precondition failed on a change outside status


def retrying(call: Callable[[], T], attempts: int = 5, backoff_s: float = 0.2,
             retried: frozenset[int] = RETRIED) -> T:
    """Retry conflicts, throttling and server hiccups with a short exponential backoff."""
    for attempt in range(attempts):
        try:
            return call()
        except ApiException as e:
            if e.status not in retried or attempt == attempts - 1:
                raise
            log.info("API server answered %s; retrying", e.status)
            time.sleep(backoff_s * 2**attempt)
    raise AssertionError("unreachable")


class KubeDeployments:
    """FlinkDeployments: read, and server-side apply of the fields we own."""

    def __init__(self, objects: client.CustomObjectsApi, hold: str | None = None) -> None:
        self.objects = objects
        self.hold = hold  # TEST ONLY (settings.HOLD_APPLY_ENV): wait here before patching

    def get(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        try:
            found: Any = retrying(lambda: self.objects.get_namespaced_custom_object(
                FLINK_GROUP, FLINK_VERSION, namespace, FLINK_PLURAL, name))
            return dict(found)
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    def apply(self, namespace: str, name: str, body: Mapping[str, Any]) -> str:
        """Apply without force first; on a conflict take over our fields only and say from whom.

        The apply document holds nothing but the owned fields, so forcing moves
        ownership of exactly those and leaves every other manager's fields alone.
        """
        if self.hold:
            hold_before_apply(Path(self.hold), namespace, name)

        def patch(force: bool) -> Any:
            return self.objects.patch_namespaced_custom_object(
                FLINK_GROUP, FLINK_VERSION, namespace, FLINK_PLURAL, name, dict(body),
                field_manager=FIELD_MANAGER, force=force,
                _content_type="application/apply-patch+yaml",
            )

        try:
            # A 409 here is a field owned by another manager, which no retry clears.
            retrying(lambda: patch(False), retried=RETRIED - {409})
            return ""
        except ApiException as e:
            if e.status in REFUSED:
                raise PatchRefused(e.status) from None
            if e.status != 409:
                raise
            managers = sorted(set(re.findall(r'conflict with \\?"([^"\\]+)\\?"', str(e.body))))
        try:
            retrying(lambda: patch(True))
        except ApiException as e:
            if e.status in REFUSED:
                raise PatchRefused(e.status) from None
            raise
        return ("took over fields owned by " + ", ".join(managers or ["another manager"])
                + " (server-side apply conflict)")


class KubeOwners:
    """The owner annotation on FlinkDeployments (controller/owner.py), and whether the
    policy it names still exists."""

    def __init__(self, objects: client.CustomObjectsApi) -> None:
        self.objects = objects

    def alive(self, namespace: str, policy: str, uid: str, deployment: str) -> bool:
        try:
            found: Any = retrying(lambda: self.objects.get_namespaced_custom_object(
                api.GROUP, api.VERSION, namespace, api.PLURAL, policy))
        except ApiException as e:
            if e.status == 404:
                return False
            raise
        meta, spec = found.get("metadata") or {}, found.get("spec") or {}
        # Only an Active owner holds the deployment: one switched to Recommend, or
        # pointed at another deployment (spec.targetRef may be edited), lets go.
        return (meta.get("uid") == uid and not meta.get("deletionTimestamp")
                and spec.get("mode") == api.Mode.ACTIVE.value
                and (spec.get("targetRef") or {}).get("name") == deployment)

    def claim(self, namespace: str, deployment: str, owner: str,
              resource_version: str | None) -> bool:
        # A merge patch carrying resourceVersion is a compare-and-swap.
        body = {"metadata": {"annotations": {OWNER_ANNOTATION: owner},
                             **({"resourceVersion": resource_version}
                                if resource_version else {})}}
        try:
            retrying(lambda: self.objects.patch_namespaced_custom_object(
                FLINK_GROUP, FLINK_VERSION, namespace, FLINK_PLURAL, deployment, body,
                _content_type="application/merge-patch+json"),
                retried=RETRIED - {409})
        except ApiException as e:
            if e.status in (404, 409):
                return False
            raise
        log.info("%s/%s: now owned by policy %s", namespace, deployment, owner)
        return True


def plain(value: Any) -> Any:
    """A JSON-like value as plain dicts and lists (kopf's bodies are mapping views)."""
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def hold_before_apply(directory: Path, namespace: str, name: str) -> None:
    """TEST ONLY: announce `<namespace>.<name>.held` and wait for `.release`, so a test can
    act (kill -9) between a step's commit and its patch, deterministically."""
    held, release = (directory / f"{namespace}.{name}.held",
                     directory / f"{namespace}.{name}.release")
    held.write_text(str(time.time()))
    log.warning("holding the patch of %s/%s until %s exists (test hook)", namespace, name,
                release)
    while not release.exists():
        time.sleep(0.05)
    release.unlink()
    held.unlink()


def status_of(obj: Mapping[str, Any]) -> Status:
    """A policy's status as the loop reads it; never forgets history over one bad field."""
    try:
        return Status.model_validate(dict(obj.get("status") or {}))
    except ValidationError as e:
        log.warning("status does not parse (%s); starting from the parts that do", e)
        raw = dict(obj.get("status") or {})
        keep = {k: raw[k] for k in ("history", "step", "lastReconfigurationTime") if k in raw}
        return Status.model_validate(keep)


class KubeStatusStore:
    """Writes a policy's whole status through the status subresource, on condition that
    the policy is still at the resourceVersion this store last read or wrote."""

    def __init__(self, objects: client.CustomObjectsApi, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        self.objects = objects
        self.namespace, self.name = meta.get("namespace") or "default", meta.get("name") or ""
        self.obj: Mapping[str, Any] = dict(obj)
        self.version: str | None = meta.get("resourceVersion")
        self.last: Status = status_of(obj)  # the status at `version`

    def latest(self) -> tuple[Mapping[str, Any], Status]:
        return self.obj, self.last

    def save(self, status: Status) -> None:
        # Replace the whole status (a merge patch would keep map keys we dropped); unset
        # fields are left out, and read back as their defaults.
        value = status.model_dump(by_alias=True, mode="json", exclude_none=True)
        self._patch([{"op": "add", "path": "/status", "value": value}])
        self.last = status

    def confirm(self) -> None:
        # The same precondition with nothing to change: the API server checks it and
        # stores nothing (a no-op patch keeps the resourceVersion).
        self._patch([])

    def _patch(self, ops: list[dict[str, Any]]) -> None:
        # Setting resourceVersion makes the patch a compare-and-swap: the API server
        # answers 409 if the object moved on since. Only a change of the status makes
        # the pass stale (another replica's write); a change elsewhere (a spec edit,
        # kopf's finalizer and annotations) is retried at the new version.
        def patch() -> Any:
            body = ops if self.version is None else [
                {"op": "replace", "path": "/metadata/resourceVersion",
                 "value": self.version}, *ops]
            return self.objects.patch_namespaced_custom_object_status(
                api.GROUP, api.VERSION, self.namespace, api.PLURAL, self.name, body,
                _content_type="application/json-patch+json")

        for attempt in range(1, CAS_ATTEMPTS + 1):
            try:
                saved: Any = retrying(patch, retried=RETRIED - {409})
                break
            except ApiException as e:
                if e.status != 409:
                    raise
                based_on = plain(self.obj.get("status"))
                self.reload()
                if plain(self.obj.get("status")) != based_on or attempt == CAS_ATTEMPTS:
                    raise StatusConflict(f"the status of {self.namespace}/{self.name} "
                                         f"changed since it was read") from None
        self.obj = dict(saved)
        self.version = (self.obj.get("metadata") or {}).get("resourceVersion")

    def reload(self) -> None:
        found: Any = retrying(lambda: self.objects.get_namespaced_custom_object(
            api.GROUP, api.VERSION, self.namespace, api.PLURAL, self.name))
        self.obj = dict(found)
        self.version = (self.obj.get("metadata") or {}).get("resourceVersion")
        self.last = status_of(self.obj)


class KubeEvents:
    """Kubernetes Events on the policy, posted by the pass itself, synchronously.

    Not through kopf's poster (`kopf.event`): that queues onto kopf's event loop, which
    stops posting when the controller shuts down and is closed soon after, while
    passes started before still run on the worker threads. Their Events were dropped,
    or raised `RuntimeError: Event loop is closed`, which failed the pass as an
    InternalError and lost its status. Posted here, an Event is on the API server
    before the pass saves its status, whenever the pass ends. A failed post is
    logged and never fails the pass: Events are a log, status is the record.
    """

    def __init__(self, core: client.CoreV1Api, body: Mapping[str, Any], component: str,
                 instance: str, name_prefix: str) -> None:
        meta = body.get("metadata") or {}
        self.core = core
        self.namespace = meta.get("namespace") or "default"
        # As kopf builds it (kopf._cogs.structs.bodies.build_object_reference).
        self.ref = {k: v for k, v in (
            ("apiVersion", body.get("apiVersion")), ("kind", body.get("kind")),
            ("name", meta.get("name")), ("uid", meta.get("uid")),
            ("namespace", self.namespace)) if v}
        self.component, self.instance, self.name_prefix = component, instance, name_prefix

    def emit(self, type_: str, reason: str, message: str) -> None:
        now = datetime.datetime.now(datetime.UTC).isoformat()
        event: Any = {
            "metadata": {"namespace": self.namespace, "generateName": self.name_prefix},
            "type": type_, "reason": reason, "message": message, "action": reason,
            "reportingComponent": self.component, "reportingInstance": self.instance,
            "source": {"component": self.component},  # kubectl describe's "From"
            "involvedObject": self.ref,
            "firstTimestamp": now, "lastTimestamp": now, "eventTime": now, "count": 1,
        }
        try:
            retrying(lambda: self.core.create_namespaced_event(self.namespace, event),
                     attempts=3)
        except Exception as e:  # a lost Event must not fail (or hide) the pass
            log.warning("%s/%s: could not post the %s Event %s (%s)", self.namespace,
                        self.ref.get("name"), type_, reason, type(e).__name__)
            return
        log.info("%s %s: %s", type_, reason, message)


class KubeOperatorDefaults:
    """The Flink operator's default configuration (its ConfigMap, `namespace/name`), as
    the autoscaler's switches in each of its files: read at most every `ttl_s` for every
    policy (the operator itself re-reads it every 5 minutes), `retry_s` after a failure.
    One caller reads while the others go on with what was read before; only the first
    read is waited for."""

    def __init__(self, core: client.CoreV1Api, where: str, ttl_s: float = 60.0,
                 retry_s: float = 10.0, timeout_s: float = 5.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.core, self.where, self.timeout_s = core, where, timeout_s
        self.ttl_s, self.retry_s = ttl_s, retry_s
        self.namespace, _, self.name = where.partition("/")
        self.clock = clock
        self._changed = threading.Condition()
        self._reading = False
        self._due: float | None = None  # None: never read
        self._read: Mapping[str, Mapping[str, Any]] | OperatorDefaultsUnreadable = {}

    def __call__(self) -> Mapping[str, Mapping[str, Any]]:
        with self._changed:
            while self._reading and self._due is None:
                self._changed.wait()
            mine = not self._reading and (self._due is None or self.clock() >= self._due)
            self._reading = self._reading or mine
            read = self._read
        if mine:
            read = OperatorDefaultsUnreadable(f"ConfigMap {self.where}: not read")
            try:
                read = self._get()
            finally:
                with self._changed:
                    failed = isinstance(read, OperatorDefaultsUnreadable)
                    self._read, self._reading = read, False
                    self._due = self.clock() + (self.retry_s if failed else self.ttl_s)
                    self._changed.notify_all()
        if isinstance(read, OperatorDefaultsUnreadable):
            raise OperatorDefaultsUnreadable(str(read))  # one per caller: no shared traceback
        return read

    def _get(self) -> Mapping[str, Mapping[str, Any]] | OperatorDefaultsUnreadable:
        try:
            found = self.core.read_namespaced_config_map(
                self.name, self.namespace, _request_timeout=self.timeout_s)
        except ApiException as e:
            return OperatorDefaultsUnreadable(f"ConfigMap {self.where}: HTTP {e.status}")
        except (HTTPError, OSError):
            return OperatorDefaultsUnreadable(f"ConfigMap {self.where}: the API server did "
                                              f"not answer within {self.timeout_s:.0f}s")
        try:
            return operator_defaults(found.data or {})
        except DefaultsUnreadable as e:
            return OperatorDefaultsUnreadable(f"ConfigMap {self.where}: {e}")
