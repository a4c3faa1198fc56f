"""The stand-in for the Flink Kubernetes Operator plus Flink, in one process.

It hosts the twin (`simulator.serve.TwinServer`: Flink-format `/metrics`, and the
JobManager REST API of each deployment on a loopback port of its own, also reachable
as `http://<name>-rest.<namespace>.svc:8081` through the twin's port used as an HTTP
proxy) and plays
the operator for every FlinkDeployment whose `spec.flinkConfiguration` names a twin
job model (`hybridscaler.twin.job-model`, docs/flink-contract.md); others are left
alone, as a real operator would leave them to another.

Per deployment, like the operator with a stateful upgrade mode:
* first sight: the job starts; a JobManager pod and `spec.taskManager.replicas`
  TaskManager pods of the spec's shape are created (kwok runs them);
* a change of only `pipeline.jobvertex-parallelism-overrides`, on a deployment
  with `jobmanager.scheduler: adaptive` and Flink >= 1.18: the job is rescaled in
  place (`rescales_in_place` has the operator's rule): same job id, same pods, no
  savepoint, the lifecycle stays STABLE;
* any other spec change: `lifecycleState` UPGRADING and `jobStatus.state` RESTARTING,
  the twin restarts the job with the new configuration (downtime modelled by the
  twin, scaled for tests), pods are replaced by a new attempt's; once the twin runs
  again: STABLE and RUNNING, with the new job id;
* a configuration the job cannot run (bad overrides, unknown model): `status.error`,
  and the last good configuration keeps running (a new deployment: FAILED);
* `spec.job.state: suspended`: the job stops, pods go, SUSPENDED / FINISHED;
* deletion: the job stops; pods go with their owner (garbage collector).

Run by `e2e.stack`; `python -m e2e.standin --help` for the flags.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import signal
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from e2e import realflink
from simulator import flink_format as ff
from simulator.serve import JOB_MODEL_KEY, SLOTS_KEY, ConfigError, TwinServer, parse_memory_mib

log = logging.getLogger("standin")

GROUP, VERSION, PLURAL = "flink.apache.org", "v1beta1", "flinkdeployments"
FLINK_VERSION = ff.FLINK_VERSION
DEFAULT_IMAGE = "flink:1.20"
# Labels Flink's native Kubernetes integration puts on its pods.
TYPE_LABEL = {"type": "flink-native-kubernetes"}
ATTEMPT_LABEL = "hybridscaler.dev/attempt"
OVERRIDES_KEY = "pipeline.jobvertex-parallelism-overrides"
SCHEDULER_KEY = "jobmanager.scheduler"


def _now_ms() -> int:
    return int(time.time() * 1000)


def _memory_quantity(value: Any, default: str) -> str:
    """A Flink memory size ("2048m", "2g") as a Kubernetes quantity: in Flink 'm' means MiB."""
    return f"{math.ceil(parse_memory_mib(value if value is not None else default))}Mi"


@dataclass
class Tracked:
    """What the stand-in knows of one FlinkDeployment it handles."""

    spec_json: str  # the last spec acted on (run, or refused with status.error), canonical JSON
    attempt: int  # pods of other attempts are stale
    running_reported: bool  # STABLE/RUNNING already decided for this attempt
    pods_ok: bool  # this attempt's pods exist and no stale ones do
    suspended: bool = False
    running_spec: dict[str, Any] | None = None  # the spec of the job the twin runs
    # Status not yet written. API writes are retried on later passes, while the twin
    # is told each spec exactly once (a retry must not restart the job again).
    pending: dict[str, Any] | None = None


class StandIn:
    def __init__(self, api: client.ApiClient, twin: TwinServer,
                 real: realflink.RealFlink | None = None, make_pods: bool = True) -> None:
        self.twin = twin
        # False on a real kubelet (the kind tier): pods of a Flink image would only fail
        # to pull, and TaskManager-sized requests would not fit its node.
        self.make_pods = make_pods
        self.real = real  # real Flink, for deployments that ask for it (e2e/realflink.py)
        self._real_keys: set[tuple[str, str]] = set()
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)
        self._objects: dict[tuple[str, str], dict[str, Any]] = {}
        self._tracked: dict[tuple[str, str], Tracked] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()

    # ---- watching ------------------------------------------------------------------

    def watch_forever(self) -> None:
        """Keep `_objects` equal to the cluster's FlinkDeployments (list, then watch)."""
        while not self._stop.is_set():
            try:
                listed: dict[str, Any] = self.custom.list_cluster_custom_object(  # type: ignore[assignment]
                    GROUP, VERSION, PLURAL)
                with self._lock:
                    self._objects = {_key(o): o for o in listed["items"]}
                version = listed["metadata"]["resourceVersion"]
                stream: Iterator[dict[str, Any]] = watch.Watch().stream(  # type: ignore[no-untyped-call]
                    self.custom.list_cluster_custom_object, GROUP, VERSION, PLURAL,
                    resource_version=version, timeout_seconds=60)
                for event in stream:
                    obj = event["object"]
                    if event["type"] == "ERROR":
                        break  # e.g. 410 Gone: list again
                    with self._lock:
                        if event["type"] == "DELETED":
                            self._objects.pop(_key(obj), None)
                        else:
                            self._objects[_key(obj)] = obj
                    if self._stop.is_set():
                        return
            except Exception as error:  # the API server or the CRD is not there yet
                log.info("watch: %s; retrying", error)
                self._stop.wait(1.0)

    def stop(self) -> None:
        self._stop.set()

    # ---- reconciling ------------------------------------------------------------------

    def reconcile_forever(self, interval_s: float = 0.25) -> None:
        while not self._stop.wait(interval_s):
            self.reconcile_all()

    def reconcile_all(self) -> None:
        with self._lock:
            objects = dict(self._objects)
        for key in set(self._tracked) - set(objects):
            self._forget(key)
        for key, obj in objects.items():
            conf = obj.get("spec", {}).get("flinkConfiguration") or {}
            if self.real is not None and realflink.wanted(conf):
                self._real_keys.add(key)
                self.real.observe(key, obj["spec"])
            elif JOB_MODEL_KEY not in conf:
                continue
            try:
                self._reconcile(key, obj)
            except ApiException as error:
                # Conflicts and races with deletion resolve on a later pass.
                log.info("%s/%s: %s %s", *key, error.status, error.reason)
            except Exception:
                # One deployment's surprise must not stop the stand-in serving the others.
                log.exception("%s/%s: reconcile failed; retrying", *key)

    def _engine(self, key: tuple[str, str]) -> Any:
        """Who runs this deployment's job: real Flink or the twin (same calls)."""
        return self.real if key in self._real_keys else self.twin

    def _forget(self, key: tuple[str, str]) -> None:
        self._tracked.pop(key, None)
        engine = self._engine(key)
        self._real_keys.discard(key)
        if key in engine.jobs():
            engine.remove_job(*key)
            log.info("%s/%s deleted: job stopped", *key)

    def _reconcile(self, key: tuple[str, str], obj: dict[str, Any]) -> None:
        spec = obj.get("spec", {})
        spec_json = json.dumps(spec, sort_keys=True)
        generation = int(obj["metadata"].get("generation", 1))
        tracked = self._tracked.get(key)
        suspended = (spec.get("job") or {}).get("state") == "suspended"
        if tracked is None or tracked.spec_json != spec_json:
            tracked = self._apply_spec(key, obj, tracked, suspended, spec_json, generation)
            self._tracked[key] = tracked
        if not tracked.pods_ok:
            tracked.pods_ok = self._sync_pods(obj, tracked)
        # Like the operator, report SUSPENDED only once the cluster is torn down.
        if tracked.pods_ok or not tracked.suspended:
            self._flush_status(obj, tracked)
        if tracked.suspended or key not in self._engine(key).jobs():
            return  # suspended, or a spec that never ran
        status = self._engine(key).status(*key)
        if status["state"] == "RUNNING" and not tracked.running_reported:
            tracked.pending = self._running_status(obj, tracked, status)
            tracked.running_reported = True
            self._flush_status(obj, tracked)

    def _apply_spec(self, key: tuple[str, str], obj: dict[str, Any], tracked: Tracked | None,
                    suspended: bool, spec_json: str, generation: int) -> Tracked:
        spec = obj["spec"]
        engine = self._engine(key)
        hosted = key in engine.jobs()
        conf = {str(k): str(v) for k, v in (spec.get("flinkConfiguration") or {}).items()}
        task_manager = spec.get("taskManager") or {}
        if suspended:
            if hosted:
                engine.remove_job(*key)
            log.info("%s/%s suspended", *key)
            return Tracked(spec_json, tracked.attempt if tracked else 0, False, False,
                           suspended=True, pending={
                "lifecycleState": "SUSPENDED", "observedGeneration": generation,
                "jobManagerDeploymentStatus": "MISSING",
                "jobStatus": {"state": "FINISHED", "updateTime": str(_now_ms())},
                "reconciliationStatus": self._reconciliation(obj, "DEPLOYED"),
                "taskManager": {"replicas": 0, "labelSelector": _tm_selector(key[1])},
                "error": None,
            })
        if (tracked is not None and tracked.running_spec is not None and hosted
                and rescales_in_place(tracked.running_spec, spec)):
            return self._rescale_in_place(key, obj, tracked, conf, spec_json, generation)
        try:
            if hosted:
                status = engine.reconfigure(*key, conf, task_manager)
            else:
                status = engine.add_job(*key, conf, task_manager)
        except (ConfigError, KeyError, ValueError, OSError) as error:
            # Like the operator's validation: report, keep what runs.
            log.info("%s/%s: cannot run this spec: %s", *key, error)
            patch: dict[str, Any] = {"error": f"{type(error).__name__}: {error}",
                                     "observedGeneration": generation}
            if not hosted:
                patch["lifecycleState"] = "FAILED"
            if tracked is None:
                return Tracked(spec_json, 0, True, True, pending=patch)
            tracked.spec_json, tracked.pending = spec_json, {**(tracked.pending or {}), **patch}
            return tracked
        attempt = (tracked.attempt if tracked else 0) + 1
        first = not hosted
        lifecycle = "DEPLOYED" if first else "UPGRADING"
        job_state = "CREATED" if first else "RESTARTING"
        log.info("%s/%s generation %d: %s (attempt %d)", *key, generation,
                 "deploying" if first else "restarting", attempt)
        return Tracked(spec_json, attempt, False, False, running_spec=spec, pending={
            "lifecycleState": lifecycle, "observedGeneration": generation,
            "jobManagerDeploymentStatus": "DEPLOYING",
            "jobStatus": {"jobName": key[1], "jobId": status["jobId"], "state": job_state,
                          "startTime": str(_now_ms()), "updateTime": str(_now_ms())},
            "reconciliationStatus": self._reconciliation(
                obj, "DEPLOYED" if first else "UPGRADING"),
            "taskManager": {"replicas": self._tm_count(spec, status),
                            "labelSelector": _tm_selector(key[1])},
            "clusterInfo": self._cluster_info(spec, status),
            "error": None,
        })

    def _rescale_in_place(self, key: tuple[str, str], obj: dict[str, Any], tracked: Tracked,
                          conf: dict[str, str], spec_json: str, generation: int) -> Tracked:
        """The operator's in-place scaling: it sets the running job's resource
        requirements and records the spec as reconciled; the job, its id and its pods
        stay, so the lifecycle stays STABLE."""
        try:
            status = self._engine(key).reconfigure(*key, conf, in_place=True)
        except (ConfigError, KeyError, ValueError) as error:
            log.info("%s/%s: cannot rescale in place: %s", *key, error)
            tracked.spec_json, tracked.pending = spec_json, {
                **(tracked.pending or {}), "error": f"{type(error).__name__}: {error}",
                "observedGeneration": generation}
            return tracked
        log.info("%s/%s generation %d: rescaled in place (job %s)", *key, generation,
                 status["jobId"])
        reconciled = self._reconciliation(obj, "DEPLOYED")
        reconciled["lastStableSpec"] = reconciled["lastReconciledSpec"]
        tracked.spec_json, tracked.running_spec = spec_json, obj["spec"]
        tracked.pending = {**(tracked.pending or {}), "observedGeneration": generation,
                           "reconciliationStatus": reconciled, "error": None}
        return tracked

    def _running_status(self, obj: dict[str, Any], tracked: Tracked,
                        status: Mapping[str, Any]) -> dict[str, Any]:
        reconciled = self._reconciliation(obj, "DEPLOYED")
        reconciled["lastStableSpec"] = reconciled["lastReconciledSpec"]
        log.info("%s/%s running (job %s, attempt %d)", obj["metadata"]["namespace"],
                 obj["metadata"]["name"], status["jobId"], tracked.attempt)
        return {
            "lifecycleState": "STABLE",
            "jobManagerDeploymentStatus": "READY",
            "jobStatus": {"jobName": obj["metadata"]["name"], "jobId": status["jobId"],
                          "state": "RUNNING", "updateTime": str(_now_ms())},
            "reconciliationStatus": reconciled,
        }

    # ---- status -------------------------------------------------------------------------

    def _flush_status(self, obj: dict[str, Any], tracked: Tracked) -> None:
        if tracked.pending is None:
            return
        meta = obj["metadata"]
        self.custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, meta["namespace"], PLURAL, meta["name"], {"status": tracked.pending})
        tracked.pending = None

    @staticmethod
    def _reconciliation(obj: dict[str, Any], state: str) -> dict[str, Any]:
        # The operator stores the reconciled spec as a JSON string with this envelope.
        meta = obj["metadata"]
        reconciled = {"spec": obj["spec"], "resource_metadata": {
            "apiVersion": f"{GROUP}/{VERSION}",
            "metadata": {"generation": meta.get("generation", 1)},
            "firstDeployment": False}}
        return {"reconciliationTimestamp": _now_ms(), "state": state,
                "lastReconciledSpec": json.dumps(reconciled)}

    @staticmethod
    def _tm_count(spec: Mapping[str, Any], status: Mapping[str, Any]) -> int:
        replicas = (spec.get("taskManager") or {}).get("replicas")
        if replicas is not None:
            return int(replicas)
        # Native mode: as many TaskManagers as the widest vertex needs slots.
        slots = int((spec.get("flinkConfiguration") or {}).get(SLOTS_KEY, "1"))
        widest = max((int(v["parallelism"]) for v in status["configuration"].values()), default=1)
        return math.ceil(widest / max(slots, 1))

    def _cluster_info(self, spec: Mapping[str, Any], status: Mapping[str, Any]) -> dict[str, str]:
        tm = (spec.get("taskManager") or {}).get("resource") or {}
        jm = (spec.get("jobManager") or {}).get("resource") or {}
        count = self._tm_count(spec, status)
        cpu = float(jm.get("cpu", 1.0)) + count * float(tm.get("cpu", 1.0))
        memory = (parse_memory_mib(jm.get("memory", "1024m"))
                  + count * parse_memory_mib(tm.get("memory", "1024m")))
        return {"flink-version": FLINK_VERSION, "flink-revision": "twin",
                "total-cpu": f"{cpu:g}", "total-memory": str(int(memory * 2**20))}

    # ---- pods ---------------------------------------------------------------------------

    def _sync_pods(self, obj: dict[str, Any], tracked: Tracked) -> bool:
        """Other attempts' pods go (the operator tears the old cluster down), and this
        attempt's JobManager and TaskManager pods are created; False to retry later."""
        namespace, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
        self._delete_stale_pods(namespace, name, None if tracked.suspended else tracked.attempt)
        engine = self._engine((namespace, name))
        if not self.make_pods or tracked.suspended or (namespace, name) not in engine.jobs():
            return True
        count = self._tm_count(obj["spec"], engine.status(namespace, name))
        wanted: list[Any] = [self._pod(obj, "jobmanager", f"{name}-jobmanager-{tracked.attempt}",
                            tracked.attempt)]
        wanted += [self._pod(obj, "taskmanager", f"{name}-taskmanager-{tracked.attempt}-{i}",
                             tracked.attempt) for i in range(1, count + 1)]
        for pod in wanted:
            try:
                self.core.create_namespaced_pod(namespace, pod)
            except ApiException as error:
                if error.status == 409:
                    continue  # created on an earlier pass
                # The namespace's default ServiceAccount may not exist yet: retry.
                log.info("%s/%s: pod %s: %s", namespace, name, pod["metadata"]["name"],
                         error.reason)
                return False
        return True

    def _pod(self, obj: dict[str, Any], component: str, pod_name: str,
             attempt: int) -> dict[str, Any]:
        meta, spec = obj["metadata"], obj["spec"]
        section = spec.get("jobManager" if component == "jobmanager" else "taskManager") or {}
        resource = section.get("resource") or {}
        amount = {"cpu": str(resource.get("cpu", 1.0)),
                  "memory": _memory_quantity(resource.get("memory"), "1024m")}
        return {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": pod_name, "namespace": meta["namespace"],
                "labels": {"app": meta["name"], "component": component, **TYPE_LABEL,
                           ATTEMPT_LABEL: str(attempt)},
                "ownerReferences": [{"apiVersion": f"{GROUP}/{VERSION}",
                                     "kind": "FlinkDeployment", "name": meta["name"],
                                     "uid": meta["uid"], "controller": True,
                                     "blockOwnerDeletion": False}],
            },
            "spec": {
                "automountServiceAccountToken": False,
                "containers": [{
                    "name": "flink-main-container",
                    "image": spec.get("image") or DEFAULT_IMAGE,
                    "args": [component],
                    "resources": {"requests": amount, "limits": amount},
                }],
            },
        }

    def _delete_stale_pods(self, namespace: str, name: str, keep_attempt: int | None) -> None:
        selector = f"app={name},{ATTEMPT_LABEL}"  # only pods the stand-in made
        if keep_attempt is not None:
            selector += f",{ATTEMPT_LABEL}!={keep_attempt}"
        pods = self.core.list_namespaced_pod(namespace, label_selector=selector)
        for pod in pods.items:
            if pod.metadata is None:
                continue
            try:
                self.core.delete_namespaced_pod(str(pod.metadata.name), namespace,
                                                grace_period_seconds=0)
            except ApiException as error:
                if error.status != 404:
                    raise


def rescales_in_place(running: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    """Whether the operator applies `wanted` to a job running `running` by in-place
    scaling instead of an upgrade.

    Operator >= 1.7 (FLINK-32057, apache/flink-kubernetes-operator#614) applies a change
    of only `pipeline.jobvertex-parallelism-overrides` through Flink 1.18's resource
    requirements REST API when the adaptive scheduler runs the job: its spec diff
    classes that key as SCALE in native mode, while any other change, including
    `spec.taskManager.replicas` (SCALE only in standalone mode), is an UPGRADE. Since
    1.8 (FLINK-34619, #793) the resource does not pass through UPGRADING for it.
    """
    def without_overrides(spec: Mapping[str, Any]) -> dict[str, Any]:
        conf = dict(spec.get("flinkConfiguration") or {})
        conf.pop(OVERRIDES_KEY, None)
        return {**spec, "flinkConfiguration": conf}

    conf = wanted.get("flinkConfiguration") or {}
    return (str(conf.get(SCHEDULER_KEY, "")).strip().lower() == "adaptive"
            and _flink_version(wanted) >= (1, 18)
            and without_overrides(running) == without_overrides(wanted)
            and (running.get("flinkConfiguration") or {}).get(OVERRIDES_KEY)
            != conf.get(OVERRIDES_KEY))


def _flink_version(spec: Mapping[str, Any]) -> tuple[int, int]:
    """(1, 18) for `flinkVersion: v1_18`; (0, 0) when absent or unreadable."""
    major, _, minor = str(spec.get("flinkVersion") or "").removeprefix("v").partition("_")
    return (int(major), int(minor)) if major.isdigit() and minor.isdigit() else (0, 0)


def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
    return str(obj["metadata"]["namespace"]), str(obj["metadata"]["name"])


def _tm_selector(name: str) -> str:
    return f"app={name},component=taskmanager"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--port", type=int, required=True, help="the twin's HTTP port")
    parser.add_argument("--host", default="127.0.0.1",
                        help="the twin's address (the kind tier: the address pods reach the "
                             "host at)")
    parser.add_argument("--no-pods", action="store_true",
                        help="create no JobManager and TaskManager pods (a real kubelet "
                             "would try to run them)")
    parser.add_argument("--downtime-scale", type=float, default=0.1,
                        help="multiplies the twin's modelled restart downtime")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--run-dir", help="the stack's run directory (identifies this process)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    api = config.new_client_from_config(config_file=args.kubeconfig)  # type: ignore[no-untyped-call]
    twin = TwinServer(host=args.host, port=args.port, seed=args.seed,
                      downtime_scale=args.downtime_scale).start()
    real = (realflink.RealFlink(Path(args.run_dir), fallback_url=twin.url).start()
            if args.run_dir else None)
    standin = StandIn(api, twin, real, make_pods=not args.no_pods)
    stopped = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        standin.stop()
        stopped.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    threading.Thread(target=standin.watch_forever, name="watch", daemon=True).start()
    threading.Thread(target=standin.reconcile_forever, name="reconcile", daemon=True).start()
    log.info("twin serving on %s", twin.url)
    stopped.wait()
    if real is not None:
        real.stop()  # no JVM outlives the stand-in
    twin.stop()


if __name__ == "__main__":
    main()
