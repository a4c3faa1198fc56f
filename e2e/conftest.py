"""Fixtures for end-to-end tests on the local stack (`e2e/stack.py`, docs/e2e.md).

Mark e2e tests with `pytestmark = pytest.mark.e2e`. The stack comes up once per
session, on first use of any fixture below, and goes down at the end; a healthy
stack that was already running (`make e2e-up`) is reused and left running.

Session-scoped
  e2e_stack              StackInfo: URLs, kubeconfig paths, run and log dirs
  admin_kubeconfig       Path: admin (system:masters) kubeconfig
  controller_kubeconfig  Path: kubeconfig of ServiceAccount hybrid-scaler-system/
                         hybrid-scaler (a TokenRequest token), holding the chart's RBAC
  cluster                Cluster: admin kubectl(), apply(), kubernetes clients (core,
                         custom), flink(ns, name), wait_flink(...)
  prometheus             Prometheus: query(promql), wait_for(promql, predicate)
  twin                   Twin: status(ns, name) (the twin's view of a job) and
                         rest(ns, name, path) (the JobManager REST API it serves);
                         rest_url(ns, name): that deployment's REST address (host:port);
                         a controller process gets StackInfo.controller_env() instead
  real_flink             RealFlinkStack: url (a proxy in front of every real JobManager,
                         deployments with `hybridscaler.standin.engine: flink`), rest(ns,
                         name, path); the job module is built first if it is not
Function-scoped
  namespace              str: a fresh namespace, deleted after the test
  flink_deployment       factory(name, model="read", replicas=2, ...) -> dict: creates
                         a FlinkDeployment the stand-in runs in `namespace` and waits
                         until it is STABLE/RUNNING; returns the object
  scrape_target          factory(job, "127.0.0.1:port"): Prometheus scrapes that
                         address's /metrics as `job` until the test ends

Helpers: `wait_until` polls and reports what it saw last; `transitions` lists the
(lifecycleState, jobState) pairs a FlinkDeployment goes through after a change;
`vertex_id` finds a vertex of a twin job by name. Timeouts are generous (CPU is shared).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import requests
import yaml
from kubernetes import client, config, watch
from prometheus_api_client import PrometheusConnect

from e2e import realflink, stack
from e2e.stack import StackInfo

T = TypeVar("T")

FLINK_GROUP, FLINK_VERSION, FLINK_PLURAL = "flink.apache.org", "v1beta1", "flinkdeployments"
JOB_MODEL_KEY = "hybridscaler.twin.job-model"
OVERRIDES_KEY = "pipeline.jobvertex-parallelism-overrides"


def wait_until(probe: Callable[[], T | None], timeout_s: float, what: str,
               interval_s: float = 0.25) -> T:
    """Poll `probe` until it returns something truthy; fail naming `what` and the last value."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while True:
        try:
            last = probe()
        except (requests.RequestException, client.ApiException) as error:
            last = error
        else:
            if last:
                return last  # type: ignore[no-any-return]
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s:.0f} s waiting for {what}; last: {last!r}")
        time.sleep(interval_s)


class Cluster:
    """The admin's view of the API server: kubectl and the Python client."""

    def __init__(self, info: StackInfo) -> None:
        self.info = info
        self.kubeconfig = Path(info.kubeconfig)
        self.api = config.new_client_from_config(config_file=info.kubeconfig)  # type: ignore[no-untyped-call]
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True,
                kubeconfig: Path | None = None) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [stack.find_tools().kubectl, "--kubeconfig", str(kubeconfig or self.kubeconfig),
             *args], input=stdin, capture_output=True, text=True, timeout=120)
        if check and done.returncode != 0:
            pytest.fail(f"kubectl {' '.join(args)} failed: {done.stderr.strip()}")
        return done

    def apply(self, *docs: dict[str, Any], server_side: bool = True) -> str:
        flags = ["--server-side", "--force-conflicts"] if server_side else []
        return self.kubectl("apply", *flags, "-f", "-", stdin=yaml.safe_dump_all(docs)).stdout

    def flink(self, namespace: str, name: str) -> dict[str, Any]:
        obj: dict[str, Any] = self.custom.get_namespaced_custom_object(  # type: ignore[assignment]
            FLINK_GROUP, FLINK_VERSION, namespace, FLINK_PLURAL, name)
        return obj

    def wait_flink(self, namespace: str, name: str, *, lifecycle: str = "STABLE",
                   job_state: str | None = "RUNNING", min_generation: int = 1,
                   timeout_s: float = 90) -> dict[str, Any]:
        """Wait until the stand-in reports `lifecycle`/`job_state` (None: any) for a
        generation >= `min_generation`; returns the object."""

        def reached() -> dict[str, Any] | None:
            obj = self.flink(namespace, name)
            status = obj.get("status") or {}
            done = (status.get("lifecycleState") == lifecycle
                    and job_state in (None, (status.get("jobStatus") or {}).get("state"))
                    and int(status.get("observedGeneration") or 0) >= min_generation)
            return obj if done else None

        return wait_until(reached, timeout_s,
                          f"FlinkDeployment {namespace}/{name} {lifecycle}/{job_state}")

    def pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        """Pods as plain dicts with the API's camelCase keys."""
        pods = self.core.list_namespaced_pod(namespace, label_selector=selector)
        return list(self.api.sanitize_for_serialization(pods)["items"])


class Prometheus:
    def __init__(self, url: str) -> None:
        self.url = url
        self.connect = PrometheusConnect(url=url, disable_ssl=True)

    def query(self, promql: str) -> list[dict[str, Any]]:
        return list(self.connect.custom_query(query=promql))

    def wait_for(self, promql: str, predicate: Callable[[list[dict[str, Any]]], bool],
                 timeout_s: float = 30, what: str | None = None) -> list[dict[str, Any]]:
        def probe() -> tuple[list[dict[str, Any]]] | None:
            result = self.query(promql)
            return (result,) if predicate(result) else None  # truthy even when empty

        return wait_until(probe, timeout_s, what or f"PromQL {promql}", interval_s=0.5)[0]


class Twin:
    """The twin's control API (its view of each job) and the REST API it serves per job."""

    def __init__(self, info: StackInfo) -> None:
        self.url = info.twin_url
        self.info = info

    def status(self, namespace: str, name: str) -> dict[str, Any]:
        reply = requests.get(f"{self.url}/control/jobs/{namespace}/{name}", timeout=5)
        reply.raise_for_status()
        return dict(reply.json())

    def rest_url(self, namespace: str, name: str) -> str:
        return self.info.flink_rest_url(namespace, name)

    def rest(self, namespace: str, name: str, path: str) -> Any:
        reply = requests.get(f"{self.rest_url(namespace, name)}/{path.lstrip('/')}", timeout=5)
        reply.raise_for_status()
        return reply.json()


class RealFlinkStack:
    """Deployments the stand-in runs on real Flink (e2e/realflink.py): their JobManagers'
    REST APIs, under one URL as the twin's are."""

    def __init__(self, info: StackInfo) -> None:
        state = wait_until(lambda: _read_json(Path(info.run_dir) / realflink.STATE_FILE), 30,
                           "the stand-in's real-Flink REST proxy")
        self.url = str(state["restUrl"])

    def rest(self, namespace: str, name: str, path: str) -> Any:
        reply = requests.get(f"{self.url}/{namespace}/{name}/{path.lstrip('/')}", timeout=10)
        reply.raise_for_status()
        return reply.json()


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return None


# --- session fixtures ---------------------------------------------------------------------


@pytest.fixture(scope="session")
def e2e_stack(request: pytest.FixtureRequest) -> Iterator[StackInfo]:
    shared = stack.default_run_dir()
    running = StackInfo.load(shared)
    if running is not None and stack.healthy(running):
        yield running  # someone's `make e2e-up`: use it, leave it
        return
    # A stack of this session's own, in its own directory unless one was named, so
    # concurrent sessions on one machine do not share (and tear down) each other's.
    stack.reap_orphans()
    explicit = "HYBRID_SCALER_E2E_DIR" in os.environ
    run_dir = shared if explicit else stack.pytest_run_dir(os.getpid())
    try:
        info, started = stack.up(run_dir, echo=lambda line: print(line, flush=True))
    except stack.PrerequisiteMissing as error:
        pytest.fail(f"e2e prerequisites missing: {error}", pytrace=False)
    yield info
    if started:
        stack.down(run_dir)
        if request.session.testsfailed == 0 and not explicit:
            shutil.rmtree(info.log_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def admin_kubeconfig(e2e_stack: StackInfo) -> Path:
    return Path(e2e_stack.kubeconfig)


@pytest.fixture(scope="session")
def controller_kubeconfig(e2e_stack: StackInfo) -> Path:
    assert e2e_stack.controller_rbac, (
        "the chart's RBAC was not granted to the controller's ServiceAccount: see "
        f"{e2e_stack.log_dir} and the `e2e stack` output")
    return Path(e2e_stack.controller_kubeconfig)


@pytest.fixture(scope="session")
def cluster(e2e_stack: StackInfo) -> Cluster:
    return Cluster(e2e_stack)


@pytest.fixture(scope="session")
def prometheus(e2e_stack: StackInfo) -> Prometheus:
    return Prometheus(e2e_stack.prometheus_url)


@pytest.fixture(scope="session")
def twin(e2e_stack: StackInfo) -> Twin:
    return Twin(e2e_stack)


@pytest.fixture(scope="session")
def real_flink(e2e_stack: StackInfo) -> RealFlinkStack:
    for flink in realflink.BUILDS:  # the tests run clusters on each
        try:
            realflink.job_build(flink)
        except FileNotFoundError:
            realflink.build_job(flink)
    return RealFlinkStack(e2e_stack)


# --- per-test fixtures -----------------------------------------------------------------------


@pytest.fixture
def namespace(cluster: Cluster) -> Iterator[str]:
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    cluster.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    cluster.core.delete_namespace(name)


FlinkDeploymentFactory = Callable[..., dict[str, Any]]


@pytest.fixture
def flink_deployment(cluster: Cluster, namespace: str) -> FlinkDeploymentFactory:
    def create(name: str = "job", model: str = "read", *, replicas: int | None = 2,
               slots: int = 4, cpu: float = 4.0, memory: str = "2048m",
               configuration: dict[str, str] | None = None, wait: bool = True) -> dict[str, Any]:
        """A FlinkDeployment as a user of the Flink operator writes it, naming a twin model."""
        task_manager: dict[str, Any] = {"resource": {"cpu": cpu, "memory": memory}}
        if replicas is not None:
            task_manager["replicas"] = replicas
        manifest = {
            "apiVersion": f"{FLINK_GROUP}/{FLINK_VERSION}", "kind": "FlinkDeployment",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "image": "flink:1.20", "flinkVersion": "v1_20", "serviceAccount": "flink",
                "flinkConfiguration": {JOB_MODEL_KEY: model,
                                       "taskmanager.numberOfTaskSlots": str(slots),
                                       **(configuration or {})},
                "jobManager": {"resource": {"cpu": 1, "memory": "1024m"}},
                "taskManager": task_manager,
                "job": {"jarURI": "local:///opt/flink/usrlib/job.jar",
                        "upgradeMode": "savepoint", "state": "running"},
            },
        }
        cluster.custom.create_namespaced_custom_object(
            FLINK_GROUP, FLINK_VERSION, namespace, FLINK_PLURAL, manifest)
        return cluster.wait_flink(namespace, name) if wait else cluster.flink(namespace, name)

    return create


@pytest.fixture
def scrape_target(e2e_stack: StackInfo) -> Iterator[Callable[[str, str], None]]:
    added: list[Path] = []

    def add(job: str, address: str) -> None:
        added.append(stack.add_scrape_target(e2e_stack, job, address))

    yield add
    for path in added:
        path.unlink(missing_ok=True)


def flink_status(obj: dict[str, Any]) -> tuple[str, str]:
    """(lifecycleState, jobStatus.state) of a FlinkDeployment."""
    status = obj.get("status") or {}
    return str(status.get("lifecycleState")), str((status.get("jobStatus") or {}).get("state"))


def vertex_id(twin: Twin, namespace: str, name: str, job_id: str, vertex_name: str) -> str:
    job = twin.rest(namespace, name, f"jobs/{job_id}")
    return next(str(v["id"]) for v in job["vertices"] if v["name"] == vertex_name)


def transitions(cluster: Cluster, namespace: str, name: str, resource_version: str,
                 generation: int, timeout_s: float = 90) -> list[tuple[str, str]]:
    """Every (lifecycleState, jobState) the FlinkDeployment went through, until it is
    STABLE/RUNNING again at `generation`."""
    seen: list[tuple[str, str]] = []
    stream = watch.Watch().stream(  # type: ignore[no-untyped-call]
        cluster.custom.list_namespaced_custom_object, FLINK_GROUP, FLINK_VERSION, namespace,
        FLINK_PLURAL, field_selector=f"metadata.name={name}",
        resource_version=resource_version, timeout_seconds=int(timeout_s))
    for event in stream:
        obj = event["object"]
        state = flink_status(obj)
        if not seen or seen[-1] != state:
            seen.append(state)
        observed = int((obj.get("status") or {}).get("observedGeneration") or 0)
        if state == ("STABLE", "RUNNING") and observed >= generation:
            return seen
    pytest.fail(f"{namespace}/{name} not STABLE/RUNNING at generation {generation}; saw {seen}")
