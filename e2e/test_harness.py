"""The harness itself: the control plane, the real CRDs, Prometheus and the stand-in."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml
from prometheus_client import CollectorRegistry, Gauge, start_http_server

from e2e import stack
from e2e.conftest import (
    FLINK_GROUP,
    FLINK_PLURAL,
    FLINK_VERSION,
    OVERRIDES_KEY,
    Cluster,
    FlinkDeploymentFactory,
    Prometheus,
    Twin,
    flink_status,
    transitions,
    vertex_id,
    wait_until,
)
from e2e.stack import StackInfo

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parent.parent
BUSY = "flink_taskmanager_job_task_busyTimeMsPerSecond"
# A scrape interval plus the scrape's own duration; waits on Prometheus allow several
# of them, since a loaded 2-core machine delays scrapes.
ONE_SCRAPE_S = stack.SCRAPE_INTERVAL_S + 3.0


def test_a_missing_prerequisite_is_named_with_how_to_get_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "openssl").symlink_to(subprocess.check_output(["which", "openssl"], text=True)
                                     .strip())
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setenv("HYBRID_SCALER_CACHE", str(tmp_path / "cache"))
    missing = stack.PrerequisiteMissing
    with pytest.raises(missing, match="etcd not found: apt-get install etcd-server"):
        stack.find_tools()
    (bin_dir / "etcd").symlink_to("/bin/true")
    with pytest.raises(missing, match=r"kube-apiserver not found.*build-tools\.sh"):
        stack.find_tools()


def test_the_real_crds_are_served(cluster: Cluster) -> None:
    resources = cluster.kubectl("api-resources", "-o", "name").stdout.split()
    assert "flinkdeployments.flink.apache.org" in resources
    assert "hybridscalingpolicies.hybridscaler.dev" in resources
    # It is the operator's own CRD (1.10.0), status schema and scale subresource included.
    crd = json.loads(cluster.kubectl(
        "get", "crd", "flinkdeployments.flink.apache.org", "-o", "json").stdout)
    version = crd["spec"]["versions"][0]
    assert version["name"] == "v1beta1"
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    assert "UPGRADING" in status["lifecycleState"]["enum"]
    assert version["subresources"]["scale"]["specReplicasPath"] == ".spec.taskManager.replicas"


def test_rbac_is_on_and_the_controller_holds_only_its_own_rights(
    cluster: Cluster, controller_kubeconfig: Path
) -> None:
    def can(verb: str, resource: str) -> bool:
        done = cluster.kubectl("auth", "can-i", verb, resource, "--all-namespaces",
                               kubeconfig=controller_kubeconfig, check=False)
        return done.stdout.strip() == "yes"

    who = cluster.kubectl("auth", "whoami", "-o", "json", kubeconfig=controller_kubeconfig)
    username = json.loads(who.stdout)["status"]["userInfo"]["username"]
    assert username == (f"system:serviceaccount:{stack.CONTROLLER_NAMESPACE}:"
                        f"{stack.CONTROLLER_SERVICE_ACCOUNT}")
    # What the code uses (issue 21): FlinkDeployments read one at a time and patched,
    # never listed or watched; a tenant's Secret read by name, never listed.
    assert can("get", "flinkdeployments.flink.apache.org")
    assert can("patch", "flinkdeployments.flink.apache.org")
    assert not can("watch", "flinkdeployments.flink.apache.org")
    assert can("patch", "hybridscalingpolicies.hybridscaler.dev")
    assert can("get", "secrets") and not can("list", "secrets")
    assert not can("create", "clusterrolebindings")


def test_a_flink_deployment_gets_its_pods_running_on_kwok_nodes(
    cluster: Cluster, namespace: str, flink_deployment: FlinkDeploymentFactory, twin: Twin
) -> None:
    obj = flink_deployment("read", replicas=3, cpu=2, memory="3g")
    nodes = json.loads(cluster.kubectl("get", "nodes", "-l", "type=kwok", "-o", "json").stdout)
    kwok_nodes = {n["metadata"]["name"] for n in nodes["items"]}

    def running_pods() -> list[dict[str, Any]] | None:
        pods = cluster.pods(namespace, "app=read")
        ok = len(pods) == 4 and all(p["status"]["phase"] == "Running" for p in pods)
        return pods if ok else None

    pods = wait_until(running_pods, 60, "1 JobManager and 3 TaskManager pods Running")
    assert {p["spec"]["nodeName"] for p in pods} <= kwok_nodes
    task_managers = [p for p in pods if p["metadata"]["labels"]["component"] == "taskmanager"]
    assert len(task_managers) == 3
    for pod in task_managers:
        asked = pod["spec"]["containers"][0]["resources"]["requests"]
        assert asked == {"cpu": "2", "memory": "3Gi"}  # Flink's "3g" is 3 GiB, not 3 GB
    status = obj["status"]
    assert status["taskManager"] == {"replicas": 3,
                                     "labelSelector": "app=read,component=taskmanager"}
    # The job the operator reports is the one the JobManager REST API serves.
    overview = twin.rest(namespace, "read", "jobs/overview")["jobs"]
    assert [j["jid"] for j in overview] == [status["jobStatus"]["jobId"]]
    assert overview[0]["state"] == "RUNNING"


def test_each_deployment_has_its_own_rest_endpoint_also_under_its_service_name(
    namespace: str, flink_deployment: FlinkDeploymentFactory, twin: Twin, e2e_stack: StackInfo
) -> None:
    flink_deployment("read")
    flink_deployment("update", model="update")
    urls = {name: twin.rest_url(namespace, name) for name in ("read", "update")}
    assert len(set(urls.values())) == 2 and all(u.count("/") == 2 for u in urls.values())
    env = e2e_stack.controller_env()
    for name, url in urls.items():
        direct = requests.get(f"{url}/v1/jobs/overview", timeout=5).json()
        # The controller's production default URL, through the proxy it is started with.
        service = requests.get(f"http://{name}-rest.{namespace}.svc:8081/v1/jobs/overview",
                               proxies={"http": env["http_proxy"]}, timeout=5).json()
        assert [j["jid"] for j in service["jobs"]] == [j["jid"] for j in direct["jobs"]]


def test_prometheus_answers_busy_time_of_the_job(
    flink_deployment: FlinkDeploymentFactory, prometheus: Prometheus
) -> None:
    obj = flink_deployment("read")
    job_id = obj["status"]["jobStatus"]["jobId"]
    series = prometheus.wait_for(
        f'{BUSY}{{job_id="{job_id}"}}', lambda r: len(r) > 0, timeout_s=4 * ONE_SCRAPE_S)
    assert {s["metric"]["job"] for s in series} == {"twin"}
    assert all(0.0 <= float(s["value"][1]) <= 1000.0 for s in series)
    # The read benchmark is CPU-bound on its stateful vertex at the default parallelism.
    by_task = {s["metric"]["task_name"]: float(s["value"][1]) for s in series}
    assert by_task["Read_State"] > 500.0


def test_patching_parallelism_overrides_restarts_the_job_and_changes_its_metrics(
    cluster: Cluster, namespace: str, flink_deployment: FlinkDeploymentFactory,
    twin: Twin, prometheus: Prometheus
) -> None:
    obj = flink_deployment("read", replicas=1)
    old_job = obj["status"]["jobStatus"]["jobId"]
    vertex = vertex_id(twin, namespace, "read", old_job, "Read State")
    prometheus.wait_for(f'count({BUSY}{{job_id="{old_job}",task_id="{vertex}"}}) == 1',
                        lambda r: len(r) == 1, timeout_s=4 * ONE_SCRAPE_S)

    patched = cluster.custom.patch_namespaced_custom_object(
        FLINK_GROUP, FLINK_VERSION, namespace, FLINK_PLURAL, "read",
        {"spec": {"flinkConfiguration": {OVERRIDES_KEY: f"{vertex}:3"}}})
    generation = int(patched["metadata"]["generation"])  # type: ignore[index]
    assert generation == 2
    seen = transitions(cluster, namespace, "read", obj["metadata"]["resourceVersion"],
                        generation)
    # The operator's stateful upgrade, as a user watching `kubectl get flinkdep` sees it
    # (the first event is the patch itself, before the operator reacts).
    assert seen == [("STABLE", "RUNNING"), ("UPGRADING", "RESTARTING"), ("STABLE", "RUNNING")]

    new_job = cluster.flink(namespace, "read")["status"]["jobStatus"]["jobId"]
    assert new_job != old_job  # a savepoint upgrade submits a new job
    vertices = twin.rest(namespace, "read", f"jobs/{new_job}")["vertices"]
    assert [v["parallelism"] for v in vertices if v["id"] == vertex] == [3]
    # Prometheus gets the new job's three subtasks, and the old job's series go stale
    # (the controller must not read them). How soon is a matter of scrape timing on a
    # shared machine, so the wait is generous; it is not what this test measures.
    prometheus.wait_for(
        f'count({BUSY}{{job_id="{new_job}",task_id="{vertex}"}})',
        lambda r: len(r) == 1 and r[0]["value"][1] == "3", timeout_s=4 * ONE_SCRAPE_S,
        what="the new job's 3 busy-time series")
    prometheus.wait_for(f'{BUSY}{{job_id="{old_job}"}}', lambda r: r == [],
                        timeout_s=4 * ONE_SCRAPE_S, what="the old job's series to go stale")

    def attempts() -> set[str]:
        return {p["metadata"]["labels"]["hybridscaler.dev/attempt"]
                for p in cluster.pods(namespace, "app=read")}

    # The TaskManager pods are replaced by the new attempt's.

    wait_until(lambda: attempts() == {"2"}, 30, "only the new attempt's pods")


def test_the_policy_crd_from_crds_applies(cluster: Cluster, namespace: str) -> None:
    crd_file = REPO / "crds" / "hybridscalingpolicy.yaml"
    assert crd_file.is_file(), "crds/hybridscalingpolicy.yaml is missing: run `make crds`"
    out = cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crd_file))
    assert "serverside-applied" in out.stdout
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                    "crd/hybridscalingpolicies.hybridscaler.dev")
    example = REPO / "examples" / "minimal.yaml"
    cluster.kubectl("apply", "-n", namespace, "-f", str(example))
    got = json.loads(cluster.kubectl("get", "hsp", "-n", namespace, "-o", "json").stdout)
    assert [p["metadata"]["name"] for p in got["items"]] == [
        yaml.safe_load(example.read_text())["metadata"]["name"]]


def test_an_invalid_policy_is_rejected_by_the_api_server_naming_the_field(
    cluster: Cluster, namespace: str
) -> None:
    invalid = REPO / "examples" / "invalid" / "invalid-policy.yaml"
    done = cluster.kubectl("apply", "-n", namespace, "-f", str(invalid), check=False)
    assert done.returncode != 0
    assert "is invalid" in done.stderr
    assert "spec.memory.maxLevel" in done.stderr
    assert "spec.mode" in done.stderr
    left = cluster.kubectl("get", "hsp", "-n", namespace, "-o", "name").stdout
    assert left.strip() == ""


@pytest.mark.slow
def test_stack_cli_up_is_idempotent_and_down_leaves_nothing(tmp_path: Path) -> None:
    run_dir = tmp_path / "stack"
    env = {**os.environ, "HYBRID_SCALER_E2E_DIR": str(run_dir)}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "e2e.stack", *args], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=300)

    first = cli("up")
    assert first.returncode == 0, first.stderr + first.stdout
    info = StackInfo.load(run_dir)
    assert info is not None and stack.healthy(info)
    assert f"logs in {run_dir}-logs" in first.stdout
    again = cli("up")
    assert again.returncode == 0 and "already up" in again.stdout
    assert StackInfo.load(run_dir) == info  # same processes, same ports
    assert cli("status").returncode == 0
    exports = cli("env").stdout
    assert f"export KUBECONFIG={info.kubeconfig}" in exports
    # A process still using the stack (a test session, a demo) keeps `down` away.
    user = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (run_dir / "users" / str(user.pid)).write_text("a test session")
        refused = cli("down")
        assert refused.returncode == 1 and f"in use by pid {user.pid}" in refused.stderr
        assert stack.healthy(info)
    finally:
        user.kill()
        user.wait()
    down = cli("down")
    assert down.returncode == 0, down.stderr
    assert not run_dir.exists()
    for name, pid in info.pids.items():
        assert not stack.is_stack_process(pid, str(run_dir)), f"{name} still runs"
    assert cli("status").returncode == 1


@pytest.mark.slow
def test_a_port_taken_before_its_component_binds_it_makes_the_stack_start_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    picks = iter([taken.getsockname()[1]])  # the first port picked goes to etcd
    free_port = stack.free_port
    monkeypatch.setattr(stack, "free_port", lambda: next(picks, None) or free_port())
    lines: list[str] = []
    run_dir = tmp_path / "stack"
    try:
        info, started = stack.up(run_dir, echo=lines.append)
        assert started and stack.healthy(info)
        assert any("starting again" in line for line in lines), lines
    finally:
        stack.down(run_dir)
        taken.close()


def test_a_spec_flink_cannot_run_is_reported_and_the_last_good_job_keeps_running(
    cluster: Cluster, namespace: str, flink_deployment: FlinkDeploymentFactory, twin: Twin
) -> None:
    obj = flink_deployment("read", replicas=1)
    job_id = obj["status"]["jobStatus"]["jobId"]
    vertex = vertex_id(twin, namespace, "read", job_id, "Read State")

    def patch_overrides(value: str) -> None:
        cluster.custom.patch_namespaced_custom_object(
            FLINK_GROUP, FLINK_VERSION, namespace, FLINK_PLURAL, "read",
            {"spec": {"flinkConfiguration": {OVERRIDES_KEY: value}}})

    patch_overrides(f"{vertex}:0")
    failed = wait_until(lambda: (cluster.flink(namespace, "read").get("status") or {})
                        .get("error"), 30, "status.error")
    assert "parallelism 0" in failed
    assert twin.status(namespace, "read")["jobId"] == job_id  # nothing restarted
    assert flink_status(cluster.flink(namespace, "read")) == ("STABLE", "RUNNING")
    # Fixing the spec clears the error and upgrades the job.
    patch_overrides(f"{vertex}:2")
    fixed = cluster.wait_flink(namespace, "read", min_generation=3)
    assert "error" not in fixed["status"]
    assert fixed["status"]["jobStatus"]["jobId"] != job_id


def test_a_new_deployment_naming_an_unknown_job_model_fails_with_the_reason(
    cluster: Cluster, namespace: str, flink_deployment: FlinkDeploymentFactory
) -> None:
    flink_deployment("typo", model="q99", wait=False)
    failed = cluster.wait_flink(namespace, "typo", lifecycle="FAILED", job_state=None)
    assert "q99" in failed["status"]["error"]
    assert cluster.pods(namespace, "app=typo") == []


def test_suspending_stops_the_job_and_its_pods_and_resuming_starts_them_again(
    cluster: Cluster, namespace: str, flink_deployment: FlinkDeploymentFactory
) -> None:
    flink_deployment("nap", replicas=1)

    def set_state(state: str) -> None:
        cluster.custom.patch_namespaced_custom_object(
            FLINK_GROUP, FLINK_VERSION, namespace, FLINK_PLURAL, "nap",
            {"spec": {"job": {"state": state}}})

    set_state("suspended")
    cluster.wait_flink(namespace, "nap", lifecycle="SUSPENDED", job_state="FINISHED",
                       min_generation=2)
    wait_until(lambda: cluster.pods(namespace, "app=nap") == [] or None, 30, "pods to go")
    set_state("running")
    cluster.wait_flink(namespace, "nap", min_generation=3)
    wait_until(lambda: len(cluster.pods(namespace, "app=nap")) == 2, 30, "2 pods again")


def test_deleting_a_flink_deployment_stops_its_job_and_its_pods_go(
    cluster: Cluster, namespace: str, flink_deployment: FlinkDeploymentFactory, twin: Twin
) -> None:
    flink_deployment("gone", replicas=2)
    wait_until(lambda: len(cluster.pods(namespace, "app=gone")) == 3, 30, "3 pods")
    cluster.custom.delete_namespaced_custom_object(
        FLINK_GROUP, FLINK_VERSION, namespace, FLINK_PLURAL, "gone")

    def job_gone() -> bool:
        try:
            twin.status(namespace, "gone")
        except requests.HTTPError as error:
            return error.response is not None and error.response.status_code == 404
        return False

    wait_until(job_gone, 30, "the twin to stop the job")
    # The garbage collector deletes pods whose owner is gone.
    wait_until(lambda: cluster.pods(namespace, "app=gone") == [] or None, 60, "pods to go")


def test_a_scrape_target_added_by_a_test_is_scraped(
    scrape_target: Callable[[str, str], None], prometheus: Prometheus
) -> None:
    registry = CollectorRegistry()
    Gauge("hybrid_e2e_probe", "a value only this test exports", registry=registry).set(42)
    # Port 0: the kernel picks a free port at bind, so no other process can take it first.
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    try:
        scrape_target("e2e-probe", f"127.0.0.1:{server.server_port}")
        # file_sd notices the file within its refresh interval, then one scrape.
        series = prometheus.wait_for('hybrid_e2e_probe{job="e2e-probe"}', lambda r: len(r) == 1,
                                     timeout_s=4 * ONE_SCRAPE_S)
        assert series[0]["value"][1] == "42"
    finally:
        server.shutdown()
        thread.join(timeout=5)


def test_down_also_reaps_stacks_of_killed_pytest_sessions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HYBRID_SCALER_E2E_DIR", str(tmp_path / "stack"))
    dead = stack.pytest_run_dir(2**22 + 1)  # above Linux's pid_max: never a live process
    alive = stack.pytest_run_dir(os.getpid())
    procs = {}
    for run_dir in (dead, alive):
        run_dir.mkdir()
        procs[run_dir] = subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(120)", str(run_dir)],
            start_new_session=True)
        state = {"run_dir": str(run_dir), "log_dir": str(run_dir) + "-logs",
                 "pids": {"sleeper": procs[run_dir].pid}}
        (run_dir / "state.json").write_text(json.dumps(
            {field: state.get(field, "") for field in StackInfo.__dataclass_fields__}
            | {"controller_rbac": False, "downtime_scale": 0.1, "started_at": 0.0}))
    try:
        assert stack.reap_orphans() == [dead]
        assert procs[dead].wait(timeout=15) != 0  # killed
        assert not dead.exists()
        assert procs[alive].poll() is None and alive.exists()
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait()
