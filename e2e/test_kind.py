"""The kind tier: the controller's image in a real pod on a kind cluster built here.

`e2e/scripts/kind.sh up` builds the node image (our Go builds of Kubernetes
v1.32.3, Debian's containerd, CNI plugins, etcd and catatonit, CoreDNS from its
Go module), creates a one-node kind cluster from it with podman, and loads the
controller image (e2e/scripts/image.sh). The twin (the stand-in for Flink and its
operator, e2e/standin.py) and a Prometheus scraping it run on the host, on the
address the node's pods reach the host at. Then the chart is installed the way
docs/install.md says, with two replicas, and the tests check what only a real
kubelet shows: both pods Ready under the chart's liveness probe and security
context, the ServiceAccount token mounted by the kubelet, kopf's peering between
the two pods, the metrics port through the Service, a policy's conditions written
by the controller in the pod, a twin job converged by it, and in-place pod resize.

Where containers cannot run, `kind.sh` says why and how to fix it, and every test
here fails with that message; none skips.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from controller.realize import FIELD_MANAGER
from controller.record import EVENT_REASONS
from e2e import kind_twin
from e2e.conftest import wait_until
from e2e.demo import flink_deployment, policy
from e2e.kind_twin import HostTwin
from e2e.stack import cache_dir, flink_crd

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.containers,
              pytest.mark.timeout(3600)]

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "charts" / "hybrid-scaler"
KIND_SH = ROOT / "e2e" / "scripts" / "kind.sh"
RELEASE, NS = "hybrid-scaler", "hybrid-scaler-system"
APP_NS = "flink-apps"
TWIN_NS = "twin-apps"


class Kube:
    def __init__(self, kubeconfig: str) -> None:
        self.kubeconfig = kubeconfig

    def __call__(self, *args: str, stdin: str | None = None, check: bool = True) -> str:
        built = cache_dir() / "bin" / "kubectl"
        kubectl = str(built) if os.access(built, os.X_OK) else "kubectl"
        done = subprocess.run([kubectl, "--kubeconfig", self.kubeconfig, *args], input=stdin,
                              capture_output=True, text=True, timeout=300)
        if check:
            assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
        return done.stdout

    def json(self, *args: str) -> Any:
        return json.loads(self(*args, "-o", "json"))


# A cluster of the tests' own: a demo's (`make demo KIND=1`) is neither reused nor
# deleted by them.
KIND_ENV = {**os.environ, "HYBRID_SCALER_KIND_CLUSTER": "hybrid-scaler-test",
            "HYBRID_SCALER_KIND_DIR": str(Path(os.environ.get("XDG_RUNTIME_DIR") or "/tmp")
                                          / "hybrid-scaler-kind-test")}


@pytest.fixture(scope="module")
def cluster() -> Iterator[Kube]:
    # Two test runs on one machine share podman and the cluster's name: the second waits
    # for the first rather than reuse, then delete, a cluster still in use.
    lock_path = cache_dir() / "kind" / "test-cluster.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = subprocess.run(["bash", str(KIND_SH), "up"], capture_output=True, text=True,
                              timeout=3600, env=KIND_ENV)
        assert done.returncode == 0, f"kind.sh up failed:\n{done.stderr[-5000:]}"
        k = Kube(done.stdout.strip().splitlines()[-1])
        k("apply", "--server-side", "--force-conflicts", "-f", str(flink_crd()))
        yield k
        if not os.environ.get("HYBRID_SCALER_KIND_KEEP"):
            subprocess.run(["bash", str(KIND_SH), "down"], capture_output=True, timeout=600,
                           env=KIND_ENV)


@pytest.fixture(scope="module")
def host_twin(cluster: Kube, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostTwin]:
    try:
        twin = kind_twin.start(cluster.kubeconfig, tmp_path_factory.mktemp("kind-twin"))
    except kind_twin.KindTwinError as error:
        pytest.fail(str(error))
    yield twin
    kind_twin.stop(twin)


@pytest.fixture(scope="module")
def kube(cluster: Kube, host_twin: HostTwin, tmp_path_factory: pytest.TempPathFactory
         ) -> Iterator[Kube]:
    # The chart as docs/install.md installs it, with the host's twin and Prometheus.
    values_file = tmp_path_factory.mktemp("kind-chart") / "values.yaml"
    values_file.write_text(yaml.safe_dump(host_twin.chart_values()))
    helm = str(cache_dir() / "bin" / "helm")
    done = subprocess.run(
        [helm, "--kubeconfig", cluster.kubeconfig, "upgrade", "--install", RELEASE, str(CHART),
         "--namespace", NS, "--create-namespace", "--wait", "--timeout", "10m",
         "--set", "image.repository=localhost/hybrid-scaler", "--set", "replicas=2",
         "-f", str(values_file)],
        capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"helm install failed:\n{done.stdout}\n{done.stderr}"
    # helm's --wait counts replicas less the rollout's maxUnavailable (1 of 2 here), so it
    # can return with one pod still being created: wait for both, as docs/install.md does.
    cluster("rollout", "status", f"deploy/{RELEASE}", "-n", NS, "--timeout=600s")
    yield cluster
    subprocess.run([helm, "--kubeconfig", cluster.kubeconfig, "uninstall", RELEASE, "-n", NS],
                   capture_output=True, timeout=300)


def controller_pods(kube: Kube) -> list[dict[str, Any]]:
    pods: list[dict[str, Any]] = kube.json(
        "get", "pods", "-n", NS, "-l", "app.kubernetes.io/name=hybrid-scaler")["items"]
    return pods


def test_the_controller_pods_run_as_the_chart_says(kube: Kube) -> None:
    pods = controller_pods(kube)
    assert len(pods) == 2
    for pod in pods:
        [status] = pod["status"]["containerStatuses"]
        assert status["ready"] and "running" in status["state"], status
        assert status["image"].endswith("localhost/hybrid-scaler:0.1.0"), status["image"]
        assert pod["spec"]["serviceAccountName"] == RELEASE
        # The kubelet mounted the ServiceAccount's projected token.
        assert any("projected" in v for v in pod["spec"]["volumes"]), pod["spec"]["volumes"]
        # As the image's own user, on a read-only root file system.
        uid = kube("exec", "-n", NS, pod["metadata"]["name"], "--", "sh", "-c",
                   "id -u; touch /x 2>/dev/null && echo writable; echo end").split()
        assert uid == ["10001", "end"], uid


def test_the_two_replicas_peer_through_kopf(kube: Kube) -> None:
    names = {p["metadata"]["name"] for p in controller_pods(kube)}

    def peers() -> set[str] | None:
        peering = kube.json("get", "clusterkopfpeering", RELEASE)
        seen = set(peering.get("status") or {})
        return seen if seen == names else None

    wait_until(peers, 300, f"both pods {names} in the ClusterKopfPeering", interval_s=2)


def test_the_metrics_port_serves_through_the_service(kube: Kube) -> None:
    def scrape(path: str) -> str | None:
        out = kube("get", "--raw", f"/api/v1/namespaces/{NS}/{path}/proxy/metrics", check=False)
        return out if "\nhybridscaler_workers " in out else None

    wait_until(lambda: scrape(f"services/{RELEASE}-metrics:9464"), 300,
               "the controller's /metrics through its Service", interval_s=2)


def workers_of_the_active_replica(kube: Kube) -> list[str] | None:
    # The Service picks either replica; the active one has started the --workers
    # pool (once it serves a policy) and says so on its own metrics port.
    texts = [kube("get", "--raw", f"/api/v1/namespaces/{NS}/pods/{p['metadata']['name']}:9464"
                  "/proxy/metrics", check=False) for p in controller_pods(kube)]
    return [t for t in texts if "\nhybridscaler_workers 8.0" in t] or None


def test_a_policy_gets_the_controllers_verdict_in_kubectl_describe(kube: Kube) -> None:
    kube("create", "namespace", APP_NS, check=False)
    deployment = {
        "apiVersion": "flink.apache.org/v1beta1", "kind": "FlinkDeployment",
        "metadata": {"name": "q11", "namespace": APP_NS},
        "spec": {"image": "flink:1.20", "flinkVersion": "v1_20",
                 "serviceAccount": "flink", "mode": "native",
                 "jobManager": {"resource": {"cpu": 1, "memory": "1024m"}},
                 "taskManager": {"resource": {"cpu": 1, "memory": "2048m"}},
                 "job": {"jarURI": "local:///opt/flink/job.jar", "parallelism": 2,
                         "upgradeMode": "savepoint"}},
    }
    policy = {
        "apiVersion": "hybridscaler.dev/v1alpha1", "kind": "HybridScalingPolicy",
        "metadata": {"name": "q11", "namespace": APP_NS},
        "spec": {"targetRef": {"apiVersion": "flink.apache.org/v1beta1",
                               "kind": "FlinkDeployment", "name": "q11"},
                 "mode": "Recommend"},
    }
    kube("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List",
                                                "items": [deployment, policy]}))

    # No JobManager answers at q11-rest: the pass stops at collect, and says so.
    def verdict() -> dict[str, Any] | None:
        hsp = kube.json("get", "hsp", "q11", "-n", APP_NS)
        ready = [c for c in hsp.get("status", {}).get("conditions", []) if c["type"] == "Ready"]
        return ready[0] if ready and ready[0]["reason"] == "JobUnavailable" else None

    wait_until(verdict, 300, "the controller's Ready condition on the policy", interval_s=2)
    described = kube("describe", "hsp", "q11", "-n", APP_NS)
    assert "JobUnavailable" in described, described
    # Exactly one replica evaluates: the active one of the peering.
    active = wait_until(lambda: workers_of_the_active_replica(kube), 120,
                        "a replica running the chart's 8 workers", interval_s=2)
    assert len(active) == 1, "both replicas run a worker pool: peering elected no single one"


def test_in_place_resize_reaches_the_containers_cgroup(kube: Kube) -> None:
    # The growth path for runtime slot resizing: the pods/resize subresource
    # (InPlacePodVerticalScaling, alpha in 1.32, on in e2e/kind/cluster.yaml) raises a
    # running container's memory limit without a restart, and the kubelet writes it
    # to the container's cgroup (v1 here: memory.limit_in_bytes).
    def resources(limit: str) -> dict[str, Any]:
        return {"requests": {"cpu": "100m", "memory": "64Mi"},
                "limits": {"cpu": "500m", "memory": limit}}

    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "resize-probe", "namespace": APP_NS},
        "spec": {"containers": [{
            "name": "c", "image": "localhost/hybrid-scaler:0.1.0", "imagePullPolicy": "Never",
            "command": ["/bin/sh", "-c", "exec sleep 100000"],
            "resources": resources("128Mi"),
            "resizePolicy": [{"resourceName": "memory", "restartPolicy": "NotRequired"}],
        }]},
    }
    kube("create", "namespace", APP_NS, check=False)
    kube("delete", "pod", "resize-probe", "-n", APP_NS, "--ignore-not-found", "--wait=true")
    kube("apply", "-f", "-", stdin=json.dumps(pod))
    kube("wait", "--for=condition=Ready", "pod/resize-probe", "-n", APP_NS, "--timeout=300s")

    def cgroup_limit() -> int:
        return int(kube("exec", "resize-probe", "-n", APP_NS, "--",
                        "cat", "/sys/fs/cgroup/memory/memory.limit_in_bytes"))

    assert cgroup_limit() == 128 * 2**20
    before = kube.json("get", "pod", "resize-probe", "-n", APP_NS)["status"]["containerStatuses"][0]
    kube("patch", "pod", "resize-probe", "-n", APP_NS, "--subresource", "resize", "-p",
         json.dumps({"spec": {"containers": [{"name": "c", "resources": resources("256Mi")}]}}))
    wait_until(lambda: cgroup_limit() == 256 * 2**20, 120,
               "the container's cgroup memory limit at 256 MiB", interval_s=2)

    def reported() -> dict[str, Any] | None:
        status = kube.json("get", "pod", "resize-probe", "-n", APP_NS)["status"]
        container: dict[str, Any] = status["containerStatuses"][0]
        limits = (container.get("resources") or {}).get("limits") or {}
        return container if limits.get("memory") == "256Mi" else None

    # The kubelet writes the cgroup first and the pod's status at its next sync.
    after = wait_until(reported, 120, "the pod's status reporting the 256 MiB limit",
                       interval_s=2)
    assert after["containerID"] == before["containerID"] and after["restartCount"] == 0
    kube("delete", "pod", "resize-probe", "-n", APP_NS, "--wait=false")


def test_the_controller_in_a_pod_converges_a_twin_job(kube: Kube, host_twin: HostTwin) -> None:
    # The same FlinkDeployment and policy as the local tier's (e2e/demo.py): q11 on one
    # TaskManager, short windows, Active. Only the controller in the pod can step it.
    # A cluster kept from an earlier run (HYBRID_SCALER_KIND_KEEP) holds a stepped q11.
    kube("delete", "namespace", TWIN_NS, "--ignore-not-found", "--wait=true", "--timeout=120s")
    kube("create", "namespace", TWIN_NS)
    kube("apply", "-f", "-", stdin=json.dumps(flink_deployment(TWIN_NS, "q11")))

    def stable() -> dict[str, Any] | None:
        obj: dict[str, Any] = kube.json("get", "flinkdeployment", "q11", "-n", TWIN_NS)
        status = obj.get("status") or {}
        running = (status.get("jobStatus") or {}).get("state") == "RUNNING"
        return obj if running and status.get("lifecycleState") == "STABLE" else None

    initial = wait_until(stable, 120, "the stand-in running q11", interval_s=1)
    kube("apply", "-f", "-", stdin=json.dumps(policy(TWIN_NS, "q11", "q11")))

    wait_until(lambda: host_twin.converged(TWIN_NS, "q11"), 600,
               "q11 at its target rate, stepped by the controller's pod", interval_s=2)
    hsp = kube.json("get", "hsp", "q11", "-n", TWIN_NS)
    assert hsp["status"]["step"] >= 1, hsp["status"]
    deployment = kube.json("get", "flinkdeployment", "q11", "-n", TWIN_NS,
                           "--show-managed-fields")
    assert deployment["metadata"]["generation"] > initial["metadata"]["generation"]
    # Our field manager on the patch; no controller runs but the one in the pod.
    managers = {m["manager"] for m in deployment["metadata"]["managedFields"]}
    assert FIELD_MANAGER in managers, managers
    described = kube("describe", "hsp", "q11", "-n", TWIN_NS)
    assert any(str(reason) in described for reason in EVENT_REASONS.values()), described
