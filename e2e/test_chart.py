"""The Helm chart, checked by helm and by a real API server with RBAC on.

Three tiers. Helm alone: lint, what each install shape renders, the CRD copy,
every value read by a template, the dashboard's metric names, the Dockerfile's
build context. The API server (tests marked e2e): server-side dry run and apply
of three install shapes, pods scheduled on kwok nodes, PodSecurity "restricted"
admission, the ServiceAccount's exact effective rules, the ServiceMonitor against
the Prometheus Operator's CRD, the GitOps docs' field list against managedFields,
`helm install/upgrade/uninstall`. And the controller: two replicas started with
the chart's args and env under the ServiceAccount's token, one active, the
standby taking over, and the dashboard's queries answered by real scrapes.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import tomllib
import zipfile
from collections.abc import Callable, Iterator
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.conftest import Cluster, Prometheus, wait_until
from e2e.demo import HYBRID_SCALER, ControllerProcess, flink_deployment, policy
from e2e.pki import write_kubeconfig
from e2e.stack import StackInfo, cache_dir, find_tools
from tests.golden import FLINK_1_20

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "charts" / "hybrid-scaler"
# Built by e2e/scripts/build-tools.sh into the same cache as the control plane.
HELM = str(cache_dir() / "bin" / "helm")

# Value sets a user would install: one replica cluster-wide (the default), two
# peered replicas cluster-wide, two peered replicas serving chosen namespaces.
WATCHED = ("team-a", "team-b")
FLINK_OPERATOR_NS = "flink-ops"  # where the namespaced variant reads the operator's defaults
VARIANTS: dict[str, list[str]] = {
    "default": [],
    "ha": ["--set", "replicas=2"],
    "namespaced-ha": ["--set", "replicas=2", "--set", f"watchNamespaces={{{','.join(WATCHED)}}}",
                      "--set", f"flinkOperator.configMap.namespace={FLINK_OPERATOR_NS}"],
}


def helm(*args: str) -> str:
    done = subprocess.run([HELM, *args], capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, f"helm {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def render(release: str, namespace: str, *values: str, crds: bool = False) -> list[dict[str, Any]]:
    flags = ["--include-crds"] if crds else []
    out = helm("template", release, str(CHART), "--namespace", namespace, *flags, *values)
    return [d for d in yaml.safe_load_all(out) if d]


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]


def container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    spec = one(docs, "Deployment")["spec"]["template"]["spec"]
    assert len(spec["containers"]) == 1
    return dict(spec["containers"][0])


def run_options(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """The container's arguments as `hybrid-scaler run` itself parses them (unknown ones fail)."""
    import typer.main

    from controller.cli import app

    command, *args = container(docs)["args"]
    assert command == "run"
    cli = typer.main.get_command(app)
    return dict(cli.commands["run"].make_context("run", args).params)  # type: ignore[attr-defined]


# --- helm alone -------------------------------------------------------------------


def test_chart_ships_the_generated_crd() -> None:
    # A copy, not a symlink: Argo CD refuses symlinks that leave the chart.
    generated = ROOT / "crds" / "hybridscalingpolicy.yaml"
    shipped = CHART / "crds" / "hybridscalingpolicy.yaml"
    assert not shipped.is_symlink()
    assert shipped.read_bytes() == generated.read_bytes(), (
        "charts/hybrid-scaler/crds/ is stale: "
        "cp crds/hybridscalingpolicy.yaml charts/hybrid-scaler/crds/"
    )


@pytest.mark.parametrize("variant", [*VARIANTS, "servicemonitor"])
def test_helm_lint(variant: str) -> None:
    values = VARIANTS.get(variant, ["--set", "metrics.serviceMonitor.enabled=true"])
    out = helm("lint", "--strict", str(CHART), *values)
    assert "0 chart(s) failed" in out


def test_every_value_is_used_by_a_template() -> None:
    # A key no template reads would be a setting that silently does nothing.
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    read = set()
    for template in (CHART / "templates").iterdir():
        read |= set(re.findall(r"\.Values\.([\w.]+)", template.read_text()))

    def leaves(tree: dict[str, Any], prefix: str = "") -> Iterator[str]:
        for key, value in tree.items():
            if isinstance(value, dict) and value:
                yield from leaves(value, f"{prefix}{key}.")
            else:
                yield prefix + key

    unused = [k for k in leaves(values) if not any(k == r or k.startswith(r + ".") for r in read)]
    assert not unused, f"values no template reads: {unused}"


def test_zero_replicas_is_refused() -> None:
    done = subprocess.run(
        [HELM, "template", "x", str(CHART), "--set", "replicas=0"], capture_output=True, text=True
    )
    assert done.returncode != 0 and "replicas must be at least 1" in done.stderr


def test_one_replica_runs_standalone_with_recreate() -> None:
    docs = render("hs", "ops")
    deployment = one(docs, "Deployment")
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    options = run_options(docs)
    assert options["standalone"] is True and not options["namespace"]
    assert not [d for d in docs if d["apiVersion"].startswith("kopf.dev/")]
    assert not [d for d in docs if d["kind"] == "PodDisruptionBudget"]
    assert {d["kind"] for d in docs if d["kind"].endswith("Role")} == {"ClusterRole"}


def test_two_replicas_peer_cluster_wide() -> None:
    docs = render("hs", "ops", *VARIANTS["ha"])
    deployment = one(docs, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"]["type"] == "RollingUpdate"
    options = run_options(docs)
    assert options["peering"] == one(docs, "ClusterKopfPeering")["metadata"]["name"]
    assert options["standalone"] is False and not options["namespace"]
    # One replica survives a node drain, and replicas prefer different nodes.
    selector = deployment["spec"]["selector"]["matchLabels"]
    budget = one(docs, "PodDisruptionBudget")["spec"]
    assert budget == {"minAvailable": 1, "selector": {"matchLabels": selector}}
    spread = deployment["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    term = spread["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]
    assert term["labelSelector"]["matchLabels"] == selector


SHARDED = ["--set", "shards=3", "--set", "replicas=2"]


def test_helm_lint_sharded() -> None:
    assert "0 chart(s) failed" in helm("lint", "--strict", str(CHART), *SHARDED)


def test_zero_shards_is_refused() -> None:
    done = subprocess.run(
        [HELM, "template", "x", str(CHART), "--set", "shards=0"], capture_output=True, text=True
    )
    assert done.returncode != 0 and "shards must be at least 1" in done.stderr


@pytest.mark.parametrize("namespaced", [False, True])
def test_shards_render_one_deployment_each_with_their_index_and_peering(
        namespaced: bool) -> None:
    from controller.operator.shard import peering_name

    values = [*SHARDED, *(["--set", f"watchNamespaces={{{','.join(WATCHED)}}}"]
                          if namespaced else [])]
    docs = render("hs", "ops", *values)
    deployments = [d for d in docs if d["kind"] == "Deployment"]
    assert [d["metadata"]["name"] for d in deployments] == [f"hs-hybrid-scaler-shard-{i}"
                                                            for i in range(3)]
    peering_kind = "KopfPeering" if namespaced else "ClusterKopfPeering"
    peerings = {d["metadata"]["name"] for d in docs if d["kind"] == peering_kind}
    selectors = []
    for i, deployment in enumerate(deployments):
        options = run_options([deployment])
        assert (options["shard_index"], options["shards"]) == (i, 3)
        assert options["standalone"] is False and deployment["spec"]["replicas"] == 2
        # The controller appends the shard to --peering: the chart made that object.
        assert peering_name(options["peering"], i, 3) in peerings
        selector = deployment["spec"]["selector"]["matchLabels"]
        assert selector["hybridscaler.dev/shard"] == str(i)
        assert deployment["spec"]["template"]["metadata"]["labels"].items() >= selector.items()
        selectors.append(selector)
        # A drain keeps one replica of every shard; a standby avoids its own shard's node.
        budget = [d for d in docs if d["kind"] == "PodDisruptionBudget"
                  and d["spec"]["selector"]["matchLabels"] == selector]
        assert len(budget) == 1 and budget[0]["spec"]["minAvailable"] == 1
        spread = deployment["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
        term = spread["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]
        assert term["labelSelector"]["matchLabels"] == selector
    assert len(peerings) == 3
    # The shards share one ServiceAccount and one set of rights, which names every
    # shard's peering object.
    assert len([d for d in docs if d["kind"] == "ServiceAccount"]) == 1
    accounts = {d["spec"]["template"]["spec"]["serviceAccountName"] for d in deployments}
    assert len(accounts) == 1
    roles = [d for d in docs if d["kind"] == ("Role" if namespaced else "ClusterRole")]
    assert len(roles) == (len(WATCHED) if namespaced else 1)
    for role in roles:
        named = [set(r["resourceNames"]) for r in role["rules"] if "resourceNames" in r]
        assert named == [peerings]
    # The metrics Service selects every shard's pods.
    service = one(docs, "Service")["spec"]["selector"]
    assert all(selector.items() >= service.items() for selector in selectors)


def test_one_shard_is_the_unsharded_chart() -> None:
    assert render("hs", "ops", "--set", "shards=1", *VARIANTS["ha"]) == render(
        "hs", "ops", *VARIANTS["ha"])
    options = run_options(render("hs", "ops"))
    assert (options["shard_index"], options["shards"]) == (0, 1)


def test_watch_namespaces_gives_roles_and_peerings_per_namespace() -> None:
    docs = render("hs", "ops", *VARIANTS["namespaced-ha"])
    options = run_options(docs)
    assert options["namespace"] == list(WATCHED)
    peerings = {d["metadata"]["name"] for d in docs if d["kind"] == "KopfPeering"}
    assert peerings == {options["peering"]}
    for kind in ("Role", "RoleBinding", "KopfPeering"):
        namespaces = sorted(d["metadata"]["namespace"] for d in docs if d["kind"] == kind)
        # and where the variant reads the Flink operator's ConfigMap
        assert namespaces == sorted([*WATCHED, *([FLINK_OPERATOR_NS] if kind != "KopfPeering"
                                                 else [])])
    # Nothing cluster-wide: the controller reads no nodes (nor pods).
    assert not [d for d in docs if d["kind"] in ("ClusterRole", "ClusterRoleBinding")]


def test_listing_pods_is_granted_only_with_resize_enabled() -> None:
    """Resizing in place needs the TaskManager pods' IPs (`list` on pods, nothing more);
    without resize.enabled no rule names pods (a pod spec can carry secret values)."""
    def pod_rules(*values: str) -> list[dict[str, Any]]:
        return [rule for d in render("hs", "ops", *values) if d["kind"].endswith("Role")
                for rule in d.get("rules") or [] if "pods" in rule.get("resources", [])]

    assert pod_rules() == []
    assert pod_rules("--set", "resize.enabled=true") == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]
    namespaced = pod_rules("--set", "resize.enabled=true", "--set", "watchNamespaces={a,b}")
    assert len(namespaced) == 2  # one Role per namespace served, nothing cluster-wide
    args = one(render("hs", "ops", "--set", "resize.agentUrl=http://{pod}.tm:{port}"),
               "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--resize-agent-url=http://{pod}.tm:{port}" in args


def test_the_flink_operators_configmap_is_read_only_where_the_chart_is_told_where_it_is() -> None:
    """Its default configuration can switch the operator's own autoscaler on; reading it
    takes a Role in the operator's namespace, so it is off until a namespace is given."""
    def config_map_rules(*values: str) -> list[dict[str, Any]]:
        return [d for d in render("hs", "ops", *values) if d["kind"].endswith("Role")
                and any("configmaps" in r.get("resources", []) for r in d.get("rules") or [])]

    assert config_map_rules() == []
    assert run_options(render("hs", "ops"))["flink_operator_config"] is None
    given = ("--set", "flinkOperator.configMap.namespace=flink-ops")
    [role] = config_map_rules(*given)
    assert role["kind"] == "Role" and role["metadata"]["namespace"] == "flink-ops"
    assert role["rules"] == [{"apiGroups": [""], "resources": ["configmaps"],
                              "resourceNames": ["flink-operator-config"], "verbs": ["get"]}]
    assert (run_options(render("hs", "ops", *given))["flink_operator_config"]
            == "flink-ops/flink-operator-config")


def test_the_owned_fields_admission_policy_is_optional_and_names_the_service_account() -> None:
    kinds = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
    assert not [d for d in render("hs", "ops") if d["kind"] in kinds]
    docs = render("hs", "ops", "--set", "admissionPolicy.enabled=true")
    policy, binding = one(docs, kinds[0]), one(docs, kinds[1])
    assert binding["spec"] == {"policyName": policy["metadata"]["name"],
                               "validationActions": ["Deny"]}
    account = one(docs, "ServiceAccount")["metadata"]["name"]
    [condition] = policy["spec"]["matchConditions"]
    assert f"'system:serviceaccount:ops:{account}'" in condition["expression"]


def test_pod_is_non_root_with_read_only_root_and_a_liveness_probe() -> None:
    docs = render("hs", "ops")
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    c = container(docs)
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert c["livenessProbe"]["httpGet"]["port"] == "health"
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    options = run_options(docs)
    assert options["liveness_port"] == ports["health"]
    assert options["metrics_port"] == ports["metrics"]
    assert c["resources"]["requests"] and c["resources"]["limits"]
    assert options["prometheus_url"].startswith("http")


def test_service_monitor_scrapes_the_metrics_service() -> None:
    docs = render("hs", "ops", "--set", "metrics.serviceMonitor.enabled=true",
                  "--set", "metrics.serviceMonitor.labels.release=kps")
    service = one(docs, "Service")
    monitor = one(docs, "ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "kps"
    selected = monitor["spec"]["selector"]["matchLabels"]
    assert selected.items() <= service["metadata"]["labels"].items()
    assert service["spec"]["selector"] == one(docs, "Deployment")["spec"]["selector"]["matchLabels"]
    assert monitor["spec"]["endpoints"][0]["port"] == service["spec"]["ports"][0]["name"]
    # The policy counters' own `namespace` label wins over the target's.
    assert monitor["spec"]["endpoints"][0]["honorLabels"] is True


def test_dockerfile_builds_what_the_package_declares() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    copied = {
        src for line in re.findall(r"^COPY (?!--from)(.+)$", dockerfile, re.M)
        for src in line.split()[:-1]
    }
    for src in copied:
        assert (ROOT / src).exists(), f"Dockerfile copies {src}, which is not in the repository"
    packages = {p.rstrip("*") for p in project["tool"]["setuptools"]["packages"]["find"]["include"]}
    assert packages <= copied, f"the image would miss packages {packages - copied}"
    assert project["project"]["readme"] in copied
    entrypoint = json.loads(re.search(r"^ENTRYPOINT (.+)$", dockerfile, re.M).group(1))  # type: ignore[union-attr]
    assert entrypoint[0] in project["project"]["scripts"]
    user = re.search(r"^USER (\d+):(\d+)$", dockerfile, re.M)
    assert user, "USER must be numeric so that runAsNonRoot can be verified"
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert int(user.group(1)) == values["podSecurityContext"]["runAsUser"]
    ignored = {line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()}
    assert not copied & ignored, f".dockerignore hides {copied & ignored} from the build"


def test_docker_build_context_builds_the_controller_wheel(tmp_path: Path) -> None:
    # What `RUN pip install .` sees: only the Dockerfile's COPY sources.
    dockerfile = (ROOT / "Dockerfile").read_text()
    context = tmp_path / "src"
    context.mkdir()
    for line in re.findall(r"^COPY (?!--from)(.+)$", dockerfile, re.M):
        for src in line.split()[:-1]:
            copy = shutil.copytree if (ROOT / src).is_dir() else shutil.copy
            copy(ROOT / src, context / src)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(tmp_path),
         str(context)], capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr
    [wheel] = tmp_path.glob("*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        entry_points = next(z.read(n).decode() for n in names if n.endswith("entry_points.txt"))
    assert "hybrid-scaler = controller.cli:app" in entry_points
    assert {"controller/operator/run.py", "controller/operator/handlers.py",
            "simulator/jobs/q11.yaml"} <= names


DASHBOARD = CHART / "dashboards" / "hybrid-scaler.json"
GOLDEN_SCRAPE = FLINK_1_20 / "prom-scrape.txt"


def dashboard_queries() -> list[str]:
    board = json.loads(DASHBOARD.read_text())
    queries = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    queries += [a["expr"] for a in board["annotations"]["list"] if "expr" in a]
    return queries


def controller_series() -> dict[str, set[str]]:
    """Sample names the controller exports (controller/telemetry.py), with their labels."""
    from prometheus_client.metrics import MetricWrapperBase

    from controller import telemetry

    suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"]}
    series: dict[str, set[str]] = {}
    for metric in vars(telemetry).values():
        if isinstance(metric, MetricWrapperBase):
            labels = set(metric._labelnames)
            for suffix in suffixes.get(str(metric._type), [""]):
                series[metric._name + suffix] = labels | ({"le"} if suffix == "_bucket" else set())
    return series


def test_dashboard_panels_query_what_flink_and_the_controller_export() -> None:
    board = json.loads(DASHBOARD.read_text())
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids)) and board["uid"]
    assert all(p.get("targets") for p in board["panels"] if p["type"] != "row")
    cells = [(x, y) for p in board["panels"] for g in [p["gridPos"]]
             for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])]
    assert len(cells) == len(set(cells)), "dashboard panels overlap"
    assert all(x < 24 for x, _ in cells), "dashboard panels overflow the 24-column grid"
    # The ConfigMap carries the file verbatim.
    cm = one(render("hs", "ops"), "ConfigMap")
    assert json.loads(cm["data"]["hybrid-scaler.json"]) == board

    flink_names = set(re.findall(r"^(flink_\w+)", GOLDEN_SCRAPE.read_text(), re.M))
    ours = controller_series()
    for query in dashboard_queries():
        for pattern in re.findall(r'__name__=~"([^"]+)"', query):
            assert any(re.fullmatch(pattern, n) for n in flink_names), f"{pattern}: no such metric"
        for name in re.findall(r"\b(flink_\w+)", re.sub(r'"[^"]*"', "", query)):
            assert name in flink_names, f"Flink 1.20 does not export {name}"
        for name in re.findall(r"\b(hybridscaler_\w+)", query):
            assert name in ours, f"the controller does not export {name} (controller/telemetry.py)"
            for matchers in re.findall(name + r"\{([^}]*)\}", query):
                unknown = set(re.findall(r"(\w+)\s*[=!~]", matchers)) - ours[name]
                assert not unknown, f"{name} has no label(s) {unknown}"
            grouped = re.findall(r"by \(([^)]*)\) \((?:\w+\()?" + name, query)
            assert grouped, f"cannot find how {query!r} aggregates {name}"
            for labels in grouped:
                missing = {x.strip() for x in labels.split(",")} - ours[name]
                assert not missing, f"{name} has no label(s) {missing}"


# --- the API server ---------------------------------------------------------------

RELEASE_NS = {"default": "hs-default", "ha": "hs-ha", "namespaced-ha": "hs-namespaced"}
# Granted to every authenticated user by the API server's default roles.
EVERYONE = {
    ("authorization.k8s.io", "selfsubjectaccessreviews", "create", ""),
    ("authorization.k8s.io", "selfsubjectrulesreviews", "create", ""),
    ("authentication.k8s.io", "selfsubjectreviews", "create", ""),
}


class Kube:
    """kubectl against the e2e control plane, as its admin."""

    def __init__(self, kubeconfig: Path) -> None:
        self.kubeconfig = kubeconfig
        self.kubectl = find_tools().kubectl

    def run(
        self, *args: str, stdin: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [self.kubectl, "--kubeconfig", str(self.kubeconfig), *args],
            input=stdin, capture_output=True, text=True, timeout=120,
        )
        if check:
            assert done.returncode == 0, f"kubectl {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
        return done

    def apply(self, docs: list[dict[str, Any]], *flags: str) -> str:
        return self.run("apply", "--server-side", "--field-manager=helm-test", *flags, "-f", "-",
                        stdin=yaml.safe_dump_all(docs)).stdout

    def namespaces(self, *names: str) -> None:
        self.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}}
                    for n in names])

    def can_i(self, sa: str, verb: str, what: str, namespace: str | None = None) -> bool:
        """kubectl auth can-i; `what` is resource[:subresource][/name]."""
        where = ["-n", namespace] if namespace else []
        what, _, name = what.partition("/")
        resource, _, sub = what.partition(":")
        flags = [f"--subresource={sub}"] if sub else []
        target = f"{resource}/{name}" if name else resource
        done = self.run("auth", "can-i", verb, target, f"--as={sa}", *where, *flags, check=False)
        assert done.returncode in (0, 1), done.stderr
        return done.returncode == 0

    def rules(self, sa: str, namespace: str) -> set[tuple[str, str, str, str]]:
        """Every (apiGroup, resource, verb, resourceName) the subject holds in a namespace,
        as the API server computes it (a SelfSubjectRulesReview made as that subject)."""
        review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview",
                  "spec": {"namespace": namespace}}
        out = self.run("create", f"--as={sa}", "--validate=false", "-o", "json", "-f", "-",
                       stdin=json.dumps(review)).stdout
        status = json.loads(out)["status"]
        assert not status.get("incomplete"), status
        return {
            (group, resource, verb, name)
            for rule in status["resourceRules"]
            for group in rule.get("apiGroups", [""])
            for resource in rule["resources"]
            for verb in rule["verbs"]
            for name in rule.get("resourceNames") or [""]
        }


@pytest.fixture(scope="module")
def kube(admin_kubeconfig: Path) -> Kube:
    return Kube(admin_kubeconfig)


@pytest.fixture(scope="module")
def installed(kube: Kube) -> Iterator[dict[str, list[dict[str, Any]]]]:
    """Every variant's CRDs and manifests applied to the control plane, each in its namespace."""
    kube.namespaces(*RELEASE_NS.values(), *WATCHED, "elsewhere", FLINK_OPERATOR_NS)
    # One release name per variant: ClusterRoles are cluster-scoped and would collide.
    docs = {v: render(v, RELEASE_NS[v], *VARIANTS[v], crds=True) for v in VARIANTS}
    crds = [d for d in docs["default"] if d["kind"] == "CustomResourceDefinition"]
    # The stack applied crds/ already; never let a stale chart copy replace it.
    test_chart_ships_the_generated_crd()
    kube.apply(crds, "--force-conflicts")
    for crd in crds:
        kube.run("wait", "--for=condition=Established", "--timeout=60s",
                 f"crd/{crd['metadata']['name']}")
    manifests = {v: [d for d in ds if d["kind"] != "CustomResourceDefinition"]
                 for v, ds in docs.items()}
    for objects in manifests.values():
        kube.apply(objects, "--dry-run=server")  # the check, kept explicit
        kube.apply(objects)
    yield manifests
    for objects in manifests.values():
        kube.run("delete", "--ignore-not-found", "--wait=false", "-f", "-",
                 stdin=yaml.safe_dump_all(objects), check=False)


def sa_of(variant: str, manifests: dict[str, list[dict[str, Any]]]) -> str:
    name = one(manifests[variant], "ServiceAccount")["metadata"]["name"]
    return f"system:serviceaccount:{RELEASE_NS[variant]}:{name}"


def needed(peering: str | None, peering_kind: str) -> set[tuple[str, str, str, str]]:
    """What the controller calls (issue 7, less what no code reads: issue 16.4), in one
    namespace it serves."""
    read_patch = ("get", "list", "watch", "patch")
    rules = {("hybridscaler.dev", "hybridscalingpolicies", v, "") for v in read_patch}
    rules |= {("hybridscaler.dev", "hybridscalingpolicies/status", "patch", "")}
    rules |= {("flink.apache.org", "flinkdeployments", v, "") for v in ("get", "patch")}
    rules |= {("", "events", "create", "")}
    rules |= {("", "secrets", "get", "")}  # a policy's Prometheus credentials, by name
    if peering:
        rules |= {("kopf.dev", peering_kind, v, "") for v in ("list", "watch")}
        rules |= {("kopf.dev", peering_kind, v, peering) for v in ("get", "patch")}
    return rules


FD = "flinkdeployments.flink.apache.org"


@pytest.mark.e2e
def test_rendered_manifests_pass_server_side_dry_run_and_apply(
    kube: Kube, installed: dict[str, list[dict[str, Any]]]
) -> None:
    for objects in installed.values():
        out = kube.run("get", "-o", "name", "-f", "-", stdin=yaml.safe_dump_all(objects)).stdout
        assert len(out.split()) == len(objects)


@pytest.mark.e2e
def test_deployments_roll_out_on_the_stack(
    kube: Kube, installed: dict[str, list[dict[str, Any]]]
) -> None:
    # kwok runs no containers, but the scheduler places the pods with their requests
    # and the ReplicaSet controller creates them through admission, as on a real cluster.
    for variant, objects in installed.items():
        deployment = one(objects, "Deployment")
        name, ns = deployment["metadata"]["name"], RELEASE_NS[variant]
        kube.run("rollout", "status", f"deployment/{name}", "-n", ns, "--timeout=120s")
        selector = ",".join(f"{k}={v}" for k, v in
                            deployment["spec"]["selector"]["matchLabels"].items())
        nodes = kube.run("get", "pods", "-n", ns, "-l", selector, "-o",
                         "jsonpath={.items[*].spec.nodeName}").stdout.split()
        assert len(nodes) == deployment["spec"]["replicas"]
        assert len(set(nodes)) == len(nodes), f"{variant}: replicas share a node: {nodes}"


@pytest.mark.e2e
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_service_account_holds_exactly_what_the_controller_needs(
    kube: Kube, installed: dict[str, list[dict[str, Any]]], variant: str
) -> None:
    sa = sa_of(variant, installed)
    peered = [d for d in installed[variant] if d["apiVersion"].startswith("kopf.dev/")]
    peering = peered[0]["metadata"]["name"] if peered else None
    if variant == "namespaced-ha":
        for ns in WATCHED:
            assert kube.rules(sa, ns) - EVERYONE == needed(peering, "kopfpeerings")
        assert kube.rules(sa, "elsewhere") - EVERYONE == set()
        assert kube.rules(sa, RELEASE_NS[variant]) - EVERYONE == set()
        # The Flink operator's default configuration: its one ConfigMap, read by name.
        assert kube.rules(sa, FLINK_OPERATOR_NS) - EVERYONE == {
            ("", "configmaps", "get", "flink-operator-config")}
    else:
        want = needed(peering, "clusterkopfpeerings")
        for ns in ("elsewhere", RELEASE_NS[variant]):
            assert kube.rules(sa, ns) - EVERYONE == want


@pytest.mark.e2e
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_service_account_cannot_list_secrets_or_patch_anything_else(
    kube: Kube, installed: dict[str, list[dict[str, Any]]], variant: str
) -> None:
    sa = sa_of(variant, installed)
    served = WATCHED[0] if variant == "namespaced-ha" else "elsewhere"

    def can(verb: str, what: str, ns: str = served) -> bool:
        return kube.can_i(sa, verb, what, ns)

    assert can("patch", FD)
    assert can("patch", "hybridscalingpolicies.hybridscaler.dev:status")
    assert can("create", "events")
    # A policy's Prometheus credentials, by name only: no listing or watching them all.
    assert can("get", "secrets")
    for verb, what in [
        ("list", "secrets"), ("watch", "secrets"), ("patch", "secrets"), ("create", "secrets"),
        ("get", "configmaps"), ("patch", "configmaps"),
        ("create", FD), ("update", FD), ("delete", FD),
        ("patch", f"{FD}:status"),
        # Nothing lists or watches FlinkDeployments or reads the status subresource.
        ("list", FD), ("watch", FD),
        ("get", "hybridscalingpolicies.hybridscaler.dev:status"),
        ("create", "hybridscalingpolicies.hybridscaler.dev"),
        ("update", "hybridscalingpolicies.hybridscaler.dev"),
        ("delete", "hybridscalingpolicies.hybridscaler.dev"),
        # No code reads pods or nodes (issue 16.4): a pod spec can carry secret values.
        ("get", "pods"), ("list", "pods"), ("watch", "pods"),
        ("patch", "pods"), ("delete", "pods"), ("create", "pods:exec"),
        ("patch", "events"), ("delete", "events"),
        ("patch", "deployments.apps"), ("patch", "services"), ("patch", "serviceaccounts"),
        ("create", "serviceaccounts/token"), ("create", "rolebindings.rbac.authorization.k8s.io"),
        ("patch", "leases.coordination.k8s.io"),
    ]:
        assert not can(verb, what), f"{sa} may {verb} {what} in {served}"
    for verb, what in [("get", "nodes"), ("list", "nodes"), ("watch", "nodes"),
                       ("patch", "nodes"), ("delete", "nodes"), ("impersonate", "users"),
                       ("patch", "customresourcedefinitions.apiextensions.k8s.io"),
                       ("patch", "clusterroles.rbac.authorization.k8s.io"),
                       ("patch", "clusterkopfpeerings.kopf.dev/someone-else")]:
        assert not kube.can_i(sa, verb, what), f"{sa} may {verb} {what}"
    if variant == "namespaced-ha":
        assert can("get", "configmaps/flink-operator-config", FLINK_OPERATOR_NS)
        assert not can("get", "configmaps/other", FLINK_OPERATOR_NS)
        assert not can("list", "configmaps", FLINK_OPERATOR_NS)
        assert not can("patch", FD, "elsewhere")
        assert not can("list", "hybridscalingpolicies.hybridscaler.dev", "elsewhere")


# The ServiceMonitor CRD, from the Prometheus Operator's Go module (the module proxy
# is reachable where GitHub is not).
PROMETHEUS_OPERATOR = "github.com/prometheus-operator/prometheus-operator@v0.79.2"
SERVICEMONITOR_CRD = "example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml"


@pytest.mark.e2e
def test_service_monitor_is_valid_against_the_prometheus_operator_crd(kube: Kube) -> None:
    env = {**os.environ, "GOSUMDB": "off", "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=mod"}
    done = subprocess.run(["go", "mod", "download", "-json", PROMETHEUS_OPERATOR],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    crd = Path(json.loads(done.stdout)["Dir"]) / SERVICEMONITOR_CRD
    kube.run("apply", "--server-side", "--force-conflicts", "-f", str(crd))
    kube.run("wait", "--for=condition=Established", "--timeout=60s",
             "crd/servicemonitors.monitoring.coreos.com")
    ns = "hs-monitoring"
    kube.namespaces(ns)
    docs = render("monitored", ns, "--set", "metrics.serviceMonitor.enabled=true")
    monitor = one(docs, "ServiceMonitor")
    kube.apply([monitor], "--dry-run=server")
    kube.apply([monitor])
    kube.run("delete", "servicemonitor", monitor["metadata"]["name"], "-n", ns)


@pytest.mark.e2e
def test_pod_template_is_admitted_under_restricted_pod_security(kube: Kube) -> None:
    ns = "hs-restricted"
    kube.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": ns, "labels": {"pod-security.kubernetes.io/enforce": "restricted",
                               "pod-security.kubernetes.io/enforce-version": "latest"}}}])
    docs = render("restricted", ns)
    kube.apply([one(docs, "ServiceAccount")])
    template = one(docs, "Deployment")["spec"]["template"]
    pod = {"apiVersion": "v1", "kind": "Pod", "spec": template["spec"],
           "metadata": {"name": "hybrid-scaler-admission", "namespace": ns, **template["metadata"]}}
    done = kube.run("create", "--dry-run=server", "-f", "-", stdin=json.dumps(pod), check=False)
    assert done.returncode == 0, done.stderr
    assert "Warning" not in done.stderr, done.stderr
    # The check itself can fail: a root container is refused in the same namespace.
    pod["spec"]["containers"][0]["securityContext"] = {"runAsUser": 0}
    pod["spec"]["securityContext"] = {}
    refused = kube.run("create", "--dry-run=server", "-f", "-", stdin=json.dumps(pod), check=False)
    assert refused.returncode != 0 and "restricted" in refused.stderr


def owned_pointers(fields_v1: dict[str, Any], prefix: str = "") -> set[str]:
    """JSON pointers of the leaves in a managedFields fieldsV1 tree ("f:spec": {"f:x": {}})."""
    pointers: set[str] = set()
    for key, sub in fields_v1.items():
        if key == ".":
            continue
        path = f"{prefix}/{key.removeprefix('f:').replace('~', '~0').replace('/', '~1')}"
        pointers |= owned_pointers(sub, path) if sub else {path}
    return pointers


def documented_pointers() -> list[set[str]]:
    """Every list of FlinkDeployment JSON pointers docs/gitops.md tells users to ignore."""
    text = (ROOT / "docs" / "gitops.md").read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", text, re.S)
    lists = [set(re.findall(r"^\s+- (/spec/\S+)$", b, re.M)) for b in blocks]
    return [p for p in lists if p]


@pytest.mark.e2e
def test_gitops_docs_ignore_exactly_the_fields_the_scaler_owns(
    kube: Kube, installed: dict[str, list[dict[str, Any]]]
) -> None:
    from controller import realize

    ns = "elsewhere"
    git = {
        "apiVersion": "flink.apache.org/v1beta1", "kind": "FlinkDeployment",
        "metadata": {"name": "gitops-probe", "namespace": ns},
        "spec": {
            "image": "flink:1.20", "flinkVersion": "v1_20", "serviceAccount": "flink",
            "flinkConfiguration": {"taskmanager.numberOfTaskSlots": "2"},
            "jobManager": {"resource": {"cpu": 1, "memory": "1024m"}},
            "taskManager": {"resource": {"cpu": 1, "memory": "2048m"}},
            "job": {"jarURI": "local:///opt/flink/usrlib/job.jar", "upgradeMode": "savepoint"},
        },
    }
    kube.run("delete", "flinkdeployment", "gitops-probe", "-n", ns, "--ignore-not-found")
    kube.run("apply", "--server-side", "--field-manager=argocd-controller", "-f", "-",
             stdin=json.dumps(git))
    every_field = realize.OwnedFields(
        overrides={"bc764cd8ddf7a0cff126f51c16239658": 4},
        operator_resources={"counter-v2": realize.OperatorResources(1.0, 128, 316)},
        tm_cpu=2.0, tm_memory_mib=4096, replicas=3,
        flink_options={realize.MANAGED_FRACTION_KEY: "0.6", realize.NETWORK_FRACTION_KEY: "0.05"},
    )
    body = realize.apply_body("gitops-probe", ns, every_field)
    # As the chart's ServiceAccount: server-side apply is a patch, which the chart allows.
    kube.run("apply", "--server-side", "--field-manager", realize.FIELD_MANAGER,
             "--force-conflicts", f"--as={sa_of('default', installed)}", "-f", "-",
             stdin=json.dumps(body))
    live = json.loads(kube.run("get", "flinkdeployment", "gitops-probe", "-n", ns, "-o", "json",
                               "--show-managed-fields").stdout)
    managers = {m["manager"]: m for m in live["metadata"]["managedFields"]}
    owned = owned_pointers(managers[realize.FIELD_MANAGER]["fieldsV1"])
    owned -= {"/metadata/name", "/metadata/namespace"}
    assert owned == {
        "/spec/flinkConfiguration/pipeline.jobvertex-parallelism-overrides",
        "/spec/flinkConfiguration/hybridscaler.operator-resources",
        "/spec/taskManager/resource/cpu", "/spec/taskManager/resource/memory",
        "/spec/taskManager/replicas",
        "/spec/flinkConfiguration/taskmanager.memory.managed.fraction",
        "/spec/flinkConfiguration/taskmanager.memory.network.fraction",
    }
    documented = documented_pointers()
    assert len(documented) >= 3  # Argo CD, Flux Kustomization, Flux HelmRelease
    for pointers in documented:
        assert pointers == owned
    # Git's other fields stay Git's.
    assert live["spec"]["jobManager"]["resource"]["memory"] == "1024m"
    assert live["spec"]["flinkConfiguration"]["taskmanager.numberOfTaskSlots"] == "2"
    kube.run("delete", "flinkdeployment", "gitops-probe", "-n", ns)


def _patch(kube: Kube, name: str, ns: str, patch: dict[str, Any], *flags: str
           ) -> subprocess.CompletedProcess[str]:
    return kube.run("patch", "flinkdeployment", name, "-n", ns, "--type=merge",
                    "-p", json.dumps(patch), *flags, check=False)


@pytest.mark.e2e
def test_admission_policy_keeps_the_service_account_to_its_owned_fields(
    kube: Kube, installed: dict[str, list[dict[str, Any]]]
) -> None:
    """RBAC's `patch` covers the whole FlinkDeployment; with admissionPolicy.enabled the
    API server refuses the controller's ServiceAccount any change outside the fields
    docs/controller.md says it writes, and lets everyone else be."""
    from controller import realize

    kinds = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
    guard = [d for d in render("default", RELEASE_NS["default"], "--set",
                               "admissionPolicy.enabled=true") if d["kind"] in kinds]
    sa, ns, name = sa_of("default", installed), "elsewhere", "guarded"
    deployment = {
        "apiVersion": "flink.apache.org/v1beta1", "kind": "FlinkDeployment",
        "metadata": {"name": name, "namespace": ns, "labels": {"team": "a"}},
        "spec": {
            "image": "flink:1.20", "flinkVersion": "v1_20", "serviceAccount": "flink",
            "flinkConfiguration": {"taskmanager.numberOfTaskSlots": "2"},
            "jobManager": {"resource": {"cpu": 1, "memory": "1024m"}},
            "taskManager": {"resource": {"cpu": 1, "memory": "2048m"}, "replicas": 1},
            "job": {"jarURI": "local:///opt/flink/usrlib/job.jar", "upgradeMode": "savepoint",
                    "state": "suspended"},
        },
    }
    as_sa = f"--as={sa}"
    kube.run("delete", "flinkdeployment", name, "-n", ns, "--ignore-not-found")
    kube.apply([deployment])
    # Without the policy, RBAC alone lets the ServiceAccount change the image.
    image = {"spec": {"image": "evil:latest"}}
    assert _patch(kube, name, ns, image, as_sa, "--dry-run=server").returncode == 0
    kube.apply(guard)
    try:
        # The API server loads a new policy asynchronously.
        wait_until(lambda: _patch(kube, name, ns, image, as_sa,
                                  "--dry-run=server").returncode != 0 or None,
                   60, "the admission policy to take effect")
        refused = _patch(kube, name, ns, image, as_sa)
        assert refused.returncode != 0 and "ValidatingAdmissionPolicy" in refused.stderr
        assert "may change only the FlinkDeployment fields it owns" in refused.stderr
        outsides: list[dict[str, Any]] = [
            {"spec": {"flinkConfiguration": {"taskmanager.numberOfTaskSlots": "8"}}},
            {"spec": {"flinkConfiguration": {"state.backend.type": "hashmap"}}},
            {"spec": {"taskManager": {"podTemplate": {"spec": {"hostNetwork": True}}}}},
            {"spec": {"taskManager": {"resource": {"ephemeralStorage": "1Gi"}}}},
            {"spec": {"jobManager": {"replicas": 2}}},
            {"spec": {"job": {"state": "running"}}},
            {"metadata": {"labels": {"team": "b"}}},
            {"metadata": {"annotations": {"x": "y"}}},
        ]
        for outside in outsides:
            done = _patch(kube, name, ns, outside, as_sa, "--dry-run=server")
            assert done.returncode != 0 and "denied" in done.stderr, (outside, done.stderr)
        # Its own fields, as the controller writes them (server-side apply, forced).
        body = realize.apply_body(name, ns, realize.OwnedFields(
            overrides={"bc764cd8ddf7a0cff126f51c16239658": 4},
            operator_resources={"counter-v2": realize.OperatorResources(1.0, 128, 316)},
            tm_cpu=2.0, tm_memory_mib=4096, replicas=3))
        kube.run("apply", "--server-side", "--field-manager", realize.FIELD_MANAGER,
                 "--force-conflicts", as_sa, "-f", "-", stdin=json.dumps(body))
        live = json.loads(kube.run("get", "flinkdeployment", name, "-n", ns, "-o",
                                   "json").stdout)["spec"]
        assert live["taskManager"] == {"resource": {"cpu": 2.0, "memory": "4096m"},
                                       "replicas": 3}
        assert live["flinkConfiguration"][realize.OVERRIDES_KEY] == (
            "bc764cd8ddf7a0cff126f51c16239658:4")
        # Any other user is not matched: the admin changes the image.
        assert _patch(kube, name, ns, image).returncode == 0
    finally:
        kube.run("delete", "-f", "-", "--ignore-not-found", stdin=yaml.safe_dump_all(guard),
                 check=False)
        kube.run("delete", "flinkdeployment", name, "-n", ns, "--ignore-not-found")


# --- the controller under the chart's ServiceAccount ------------------------------------


PASSES = "hybridscaler_reconcile_seconds_count"  # observed once per loop pass


def counter(metrics_text: str, name: str) -> float:
    """Sum of a counter's samples in a /metrics exposition (0 when absent)."""
    return sum(float(line.rsplit(" ", 1)[1]) for line in metrics_text.splitlines()
               if line.startswith(name + "{") or line.startswith(name + " "))


def peers(kube: Kube, peering: str, namespace: str, expected: set[str]) -> bool:
    """Whether the KopfPeering holds a keep-alive of each expected peer."""
    done = kube.run("get", "kopfpeering", peering, "-n", namespace, "-o", "json")
    return expected <= set(json.loads(done.stdout).get("status") or {})


def purge(kube: Kube, namespace: str) -> None:
    """Remove this test's objects, also policies whose controller is gone (finalizers)."""
    for name in kube.run("get", "hsp", "-n", namespace, "-o", "name").stdout.split():
        kube.run("patch", name, "-n", namespace, "--type=merge",
                 "-p", '{"metadata":{"finalizers":null}}')
    kube.run("delete", "hsp,flinkdeployment", "--all", "-n", namespace, "--ignore-not-found")


def chart_replica(docs: list[dict[str, Any]], kubeconfig: Path, pod: str, stack_info: StackInfo,
                  tmp: Path, monkeypatch: pytest.MonkeyPatch) -> ControllerProcess:
    """One replica of the chart's Deployment as a local process: the container's args and
    env, its own ports (two pods share this host) and the stack's Prometheus and twin."""
    logs = Path(stack_info.log_dir) / "test_chart"  # kept by the harness for post-mortems
    logs.mkdir(parents=True, exist_ok=True)
    # The chart's own --flink-rest-url (in-cluster Service names) is kept: the proxy
    # environment resolves them to the twin, as cluster DNS would in a pod.
    process = ControllerProcess(str(kubeconfig), stack_info.prometheus_url,
                                stack_info.controller_env(), logs / f"{pod}.log")
    local = {"--liveness-port": str(process.liveness_port),
             "--metrics-port": str(process.metrics_port),
             "--prometheus-url": stack_info.prometheus_url}
    args = [a.split("=", 1) for a in container(docs)["args"]]
    process.argv = [str(HYBRID_SCALER), *(f"{a[0]}={local.get(a[0], a[-1])}" if len(a) == 2
                                          else a[0] for a in args)]
    with monkeypatch.context() as env:  # the child's environment only
        for var in container(docs)["env"]:
            value = pod if var.get("valueFrom") else str(var["value"])
            env.setenv(var["name"], value.replace("/tmp", str(tmp)))
        return process.start()


@pytest.fixture
def golden_flink(scrape_target: Callable[[str, str], None]) -> Iterator[str]:
    """Prometheus scrapes a real Flink 1.20 job's /metrics (the golden sample); yields its
    job_name."""
    text = GOLDEN_SCRAPE.read_bytes()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(text)

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    scrape_target("flink-golden", f"127.0.0.1:{server.server_address[1]}")
    yield re.findall(r'job_name="([^"]+)"', text.decode())[0]
    server.shutdown()


def check_dashboard(prometheus: Prometheus, flink_job: str) -> None:
    """Every dashboard query parses in a real Prometheus, and returns series when its
    metrics are there: Flink's (from the golden scrape) and the controller's loop passes."""
    for query in dashboard_queries():
        concrete = (query.replace("$job", flink_job).replace("$__rate_interval", "1m")
                    .replace("$base_managed_mib", "158")
                    .replace('"$namespace"', '".*"').replace('"$policy"', '".*"'))
        result = prometheus.query(concrete)  # raises on a PromQL error
        if "flink_" in query or "hybridscaler_reconcile_seconds" in query:
            assert result, f"no data for {concrete}"


@pytest.mark.e2e
def test_two_replicas_under_the_charts_token_serve_policies_with_one_active(
    kube: Kube, installed: dict[str, list[dict[str, Any]]], e2e_stack: StackInfo,
    cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    prometheus: Prometheus, scrape_target: Callable[[str, str], None], golden_flink: str,
) -> None:
    docs, release_ns = installed["namespaced-ha"], RELEASE_NS["namespaced-ha"]
    account = one(docs, "ServiceAccount")["metadata"]["name"]
    token = kube.run("create", "token", account, "-n", release_ns, "--duration=1h").stdout.strip()
    kubeconfig = tmp_path / "token.kubeconfig"
    write_kubeconfig(kubeconfig, e2e_stack.api_server, Path(e2e_stack.ca_file), token,
                     sa_of("namespaced-ha", installed), release_ns)
    ns, peering = WATCHED[0], one(docs, "Deployment")["metadata"]["name"]
    purge(kube, ns)
    replicas = [chart_replica(docs, kubeconfig, f"replica-{i}", e2e_stack, tmp_path, monkeypatch)
                for i in range(2)]
    try:
        # Both replicas keep their peering alive in every namespace they serve.
        for served in WATCHED:
            wait_until(partial(peers, kube, peering, served, {"replica-0", "replica-1"}), 60,
                       f"both replicas in the KopfPeering of {served}")

        cluster.apply(flink_deployment(ns, "probe", model="read"))
        cluster.wait_flink(ns, "probe")
        cluster.apply(policy(ns, "probe", "probe", mode="Recommend"))

        def seen() -> dict[str, Any] | None:
            obj = json.loads(kube.run("get", "hsp", "probe", "-n", ns, "-o", "json").stdout)
            status = obj.get("status") or {}
            observed = status.get("observedGeneration") == obj["metadata"]["generation"]
            return obj if observed and status.get("conditions") else None

        wait_until(seen, 120, "the policy's status written by the controller")
        def passes() -> list[float]:
            return [counter(r.metrics(), PASSES) for r in replicas]

        def most_passes() -> float:
            return max(passes())

        first = wait_until(most_passes, 60, "a loop pass")
        # Two more passes of the active replica: a second active one would show by now.
        wait_until(lambda: most_passes() >= first + 2, 90, "two more loop passes")
        active = [i for i, n in enumerate(passes()) if n > 0]
        assert len(active) == 1, f"loop passes per replica: {passes()}"

        # The standby takes over when the active replica stops.
        standby = replicas[1 - active[0]]
        replicas[active[0]].stop()
        wait_until(lambda: counter(standby.metrics(), PASSES) > 0, 90,
                   "the standby replica to take over")
        # The dashboard, on the controller's metrics and a real Flink job's.
        scrape_target("hybrid-scaler-chart", f"127.0.0.1:{standby.metrics_port}")
        prometheus.wait_for(f"rate({PASSES}[1m])", bool, 60, "two scrapes of the controller")
        check_dashboard(prometheus, golden_flink)
        for replica in replicas:
            log = replica.log.read_text()
            assert "Forbidden" not in log and " 403" not in log, replica.log
    finally:
        # While a replica still runs, so that it removes its finalizer from the policy.
        kube.run("delete", "hsp", "--all", "-n", ns, "--timeout=60s", check=False)
        for replica in replicas:
            replica.stop()
        purge(kube, ns)


@pytest.mark.e2e
def test_helm_install_upgrade_uninstall_as_documented(
    kube: Kube, installed: dict[str, list[dict[str, Any]]]
) -> None:
    """docs/install.md's commands against the API server, including switching replicas
    1 -> 2 -> 1 (Recreate <-> RollingUpdate) as an ordinary upgrade."""
    ns, release = "hs-helm", "hs-helm"
    target = ["--kubeconfig", str(kube.kubeconfig), "--namespace", ns]
    chart = str(CHART)
    helm("install", release, chart, *target, "--create-namespace", "--wait", "--timeout=5m")

    def deployment() -> dict[str, Any]:
        out = kube.run("get", "deployment", f"{release}-hybrid-scaler", "-n", ns, "-o", "json")
        return dict(json.loads(out.stdout))

    assert deployment()["spec"]["strategy"]["type"] == "Recreate"
    helm("upgrade", release, chart, *target, "--reuse-values", "--set", "replicas=2",
         "--wait", "--timeout=5m")
    assert deployment()["spec"]["strategy"]["type"] == "RollingUpdate"
    kube.run("get", "clusterkopfpeering", f"{release}-hybrid-scaler")
    kube.run("get", "poddisruptionbudget", f"{release}-hybrid-scaler", "-n", ns)
    helm("upgrade", release, chart, *target, "--reuse-values", "--set", "replicas=1",
         "--wait", "--timeout=5m")
    assert deployment()["spec"]["strategy"] == {"type": "Recreate"}
    helm("uninstall", release, *target, "--wait", "--timeout=5m")

    def left() -> str:
        return kube.run("get", "all,sa,cm,role,rolebinding,pdb", "-n", ns, "-o", "name").stdout

    # Helm waits for what it deleted; the pods go after, by the garbage collector.
    wait_until(lambda: "hybrid-scaler" not in left() or None, 60, "the release's objects to go")
    cluster_wide = kube.run("get", "clusterrole,clusterrolebinding,clusterkopfpeering",
                            "-o", "name").stdout
    assert f"{release}-hybrid-scaler" not in cluster_wide
    # CRDs stay (Helm never deletes them): policies survive an uninstall.
    kube.run("get", "crd", "hybridscalingpolicies.hybridscaler.dev")
