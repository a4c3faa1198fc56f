"""No tenant can freeze, probe or fight the controller (issue 21), on the real API server
with the chart's RBAC, the real Prometheus and the twin. Hostile endpoints are loopback
servers: a Prometheus that trickles a byte every 50 ms, one that answers 200 MB, and a
victim on 127.0.0.2 (outside the controller's allow-list of 127.0.0.1/32) that URL
tricks try to reach. Counts, not timings.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from functools import partial
from typing import Any

import pytest
import requests
from kubernetes import client

from e2e.conftest import Cluster, wait_until
from e2e.demo import ControllerProcess, flink_deployment, policy
from e2e.stack import StackInfo
from e2e.test_controller import condition, controller, events, generation, hsp
from e2e.test_controller_isolation import METRICS, RESOLUTION_S, WINDOW_S, apply, reading
from tests.controller.netfaults import Answering, Streaming
from tests.controller.test_dial import EMPTY, MIB, tricks

pytestmark = pytest.mark.e2e
__all__ = ["controller"]  # the module-scoped controller fixture, shared

OWNER = "hybridscaler.dev/owner"


def metrics_reason(cluster: Cluster, namespace: str, name: str) -> str | None:
    c = condition(hsp(cluster, namespace, name), "MetricsAvailable")
    return c.get("reason") if c.get("status") == "False" else None


def refused(cluster: Cluster, namespace: str, name: str) -> bool:
    return metrics_reason(cluster, namespace, name) == "MetricsUrlRefused"


def policies(cluster: Cluster, namespace: str) -> list[str]:
    found: Any = cluster.custom.list_namespaced_custom_object(
        "hybridscaler.dev", "v1alpha1", namespace, "hybridscalingpolicies")
    return [p["metadata"]["name"] for p in found["items"]]


@pytest.fixture
def servers() -> Iterator[list[Any]]:
    made: list[Any] = []
    yield made
    for s in made:
        s.close()


def test_trickling_and_200_mb_prometheus_are_the_endpoints_fault(
    controller: ControllerProcess, cluster: Cluster, namespace: str, servers: list[Any],
) -> None:
    trickle = Streaming(b" ", total=10**9, every_s=0.05)
    huge = Streaming(b"x" * MIB, total=200 * MIB)
    servers += [trickle, huge]
    apply(cluster, flink_deployment(namespace, "q5", model="q5"))
    cluster.wait_flink(namespace, "q5")
    apply(cluster,
          reading(namespace, "trickle", "q5", trickle.url),
          reading(namespace, "huge", "q5", huge.url))
    # Before: the trickling policy never wrote a status (its worker read forever), and
    # the 200 MB answer was read whole and blamed on Flink REST.
    wait_until(lambda: metrics_reason(cluster, namespace, "trickle") == "MetricsTimedOut",
               WINDOW_S + 12 * RESOLUTION_S, "trickle: MetricsAvailable=False/MetricsTimedOut")
    wait_until(lambda: metrics_reason(cluster, namespace, "huge") == "MetricsAnswerTooLarge",
               WINDOW_S + 12 * RESOLUTION_S, "huge: MetricsAvailable=False/MetricsAnswerTooLarge")
    assert trickle.finished == 0 and huge.finished == 0
    for name, server in (("trickle", trickle), ("huge", huge)):
        message = condition(hsp(cluster, namespace, name), "MetricsAvailable")["message"]
        assert "spec.metrics.prometheusUrl" in message and str(server.port) not in message
    assert huge.sent < 100 * MIB  # dropped while streaming, not read whole
    # Deleted mid-call and recreated three times: each recreated policy is evaluated again
    # (the deleted one's pass ended at its deadline and gave its worker back).
    for _ in range(3):
        cluster.custom.delete_namespaced_custom_object(
            "hybridscaler.dev", "v1alpha1", namespace, "hybridscalingpolicies", "trickle")
        wait_until(lambda: "trickle" not in policies(cluster, namespace), 60, "the policy gone")
        apply(cluster, reading(namespace, "trickle", "q5", trickle.url))
        wait_until(lambda: metrics_reason(cluster, namespace, "trickle") == "MetricsTimedOut",
                   WINDOW_S + 12 * RESOLUTION_S, "the recreated policy evaluated")


def test_no_url_trick_reaches_outside_the_allow_list(
    controller: ControllerProcess, cluster: Cluster, namespace: str, servers: list[Any],
) -> None:
    allowed, victim = Answering(200, EMPTY), Answering(200, EMPTY, host="127.0.0.2")
    servers += [allowed, victim]
    apply(cluster, flink_deployment(namespace, "q5", model="q5"))
    cluster.wait_flink(namespace, "q5")
    forms = tricks(allowed.url, victim.url)
    admitted: list[str] = []
    for i, url in enumerate(forms):
        done = apply(cluster, reading(namespace, f"t{i:02d}", "q5", url), check=False)
        if done.returncode == 0:
            admitted.append(f"t{i:02d}")
        else:
            assert "spec.metrics.prometheusUrl" in done.stderr, (url, done.stderr)
    # The API server refuses most of them; any it admits is refused by the controller
    # (a condition) without a dial.
    for name in admitted:
        wait_until(partial(refused, cluster, namespace, name),
                   WINDOW_S + 12 * RESOLUTION_S, f"{name}: MetricsUrlRefused")
    assert victim.requests == 0
    # Credentials in a URL are refused by the API server and so written nowhere.
    done = apply(cluster, reading(namespace, "creds", "q5", "http://user:s3cret@127.0.0.1:1"),
                 check=False)
    assert done.returncode != 0 and "credentials" in done.stderr
    assert all("s3cret" not in m for _, m in events(cluster, namespace, "creds"))


def test_two_policies_on_one_deployment_do_not_fight(
    controller: ControllerProcess, cluster: Cluster, namespace: str,
) -> None:
    apply(cluster, flink_deployment(namespace, "q11"))
    cluster.wait_flink(namespace, "q11")
    apply(cluster, policy(namespace, "small", "q11", metrics=METRICS,
                          cpu={"maxParallelism": 2}))
    wait_until(lambda: (cluster.flink(namespace, "q11")["metadata"].get("annotations") or {})
               .get(OWNER, "").startswith("small/"), 60, "the first policy owns q11")
    apply(cluster, policy(namespace, "large", "q11", metrics=METRICS,
                          cpu={"minParallelism": 6}))

    def blocked() -> bool:
        ready = condition(hsp(cluster, namespace, "large"), "Ready")
        return ready.get("reason") == "TargetOwnedElsewhere"

    wait_until(blocked, 60, "Ready=False/TargetOwnedElsewhere on the second policy")
    assert "small" in condition(hsp(cluster, namespace, "large"), "Ready")["message"]
    # Over ten resolutions the deployment changes only by the owner's own steps: before,
    # the two flipped parallelism 9 <-> 2 every pass (generation 1 -> 48 in 2 minutes).
    start = generation(cluster, namespace, "q11")
    time.sleep(10 * RESOLUTION_S)
    assert generation(cluster, namespace, "q11") - start <= 2
    warned = [m for r, m in events(cluster, namespace, "large") if r == "TargetOwnedElsewhere"]
    assert len(warned) == 1 and "small" in warned[0], warned
    assert "Reapplied" not in [r for r, _ in events(cluster, namespace, "large")]
    # The owner is deleted: ownership passes on.
    cluster.custom.delete_namespaced_custom_object(
        "hybridscaler.dev", "v1alpha1", namespace, "hybridscalingpolicies", "small")
    wait_until(lambda: (cluster.flink(namespace, "q11")["metadata"].get("annotations") or {})
               .get(OWNER, "").startswith("large/"), 60, "the second policy owns q11")
    wait_until(lambda: not blocked(), 60, "the second policy evaluating")


def test_a_restart_loop_is_named_and_not_decided_from(
    controller: ControllerProcess, cluster: Cluster, namespace: str, e2e_stack: StackInfo,
) -> None:
    apply(cluster, flink_deployment(namespace, "q5", model="q5"))
    cluster.wait_flink(namespace, "q5")
    apply(cluster, policy(namespace, "q5", "q5", mode="Recommend", metrics=METRICS))
    wait_until(lambda: (hsp(cluster, namespace, "q5").get("status") or {}).get("job"),
               WINDOW_S + 6 * RESOLUTION_S, "a pass saw the job")
    decided = (hsp(cluster, namespace, "q5")["status"].get("lastDecision") or {}).get("time")
    fail = f"{e2e_stack.twin_url}/control/jobs/{namespace}/q5/fail"
    # The job crashes and comes back under a new id every ~4 s, for 12 resolutions.
    for _ in range(15):
        assert requests.post(fail, timeout=10).status_code == 200
        time.sleep(RESOLUTION_S * 0.8)
    status = hsp(cluster, namespace, "q5")["status"]
    scaling = condition(hsp(cluster, namespace, "q5"), "Scaling")
    assert scaling.get("reason") == "JobRestarted", scaling
    assert status["job"]["unexplainedRestarts"] >= 3, status["job"]
    warned = [r for r, _ in events(cluster, namespace, "q5") if r == "JobRestarted"]
    assert len(warned) == 1, warned  # one per streak, not one per restart
    # Before: Ready=True/Evaluating and Scaling Steady, deciding from the loop's windows.
    assert (status.get("lastDecision") or {}).get("time") == decided


def test_a_failover_in_place_is_named_from_num_restarts(
    controller: ControllerProcess, cluster: Cluster, namespace: str, e2e_stack: StackInfo,
) -> None:
    """A restart in place keeps the job's id and start; Flink's numRestarts (REST) shows it,
    and the policy names it as it names a restart loop."""
    apply(cluster, flink_deployment(namespace, "q5", model="q5"))
    cluster.wait_flink(namespace, "q5")
    apply(cluster, policy(namespace, "q5", "q5", mode="Recommend", metrics=METRICS))
    wait_until(lambda: ((hsp(cluster, namespace, "q5").get("status") or {}).get("job")
                        or {}).get("restarts") == 0,
               WINDOW_S + 6 * RESOLUTION_S, "a pass saw the job and its numRestarts")
    jid = hsp(cluster, namespace, "q5")["status"]["job"]["id"]
    failover = f"{e2e_stack.twin_url}/control/jobs/{namespace}/q5/failover"
    for _ in range(3):
        assert requests.post(failover, timeout=10).status_code == 200
        time.sleep(RESOLUTION_S)  # < WINDOW_S: one streak, whatever the pass phase

    def named() -> dict[str, Any] | None:
        policy_now = hsp(cluster, namespace, "q5")
        job = (policy_now.get("status") or {}).get("job") or {}
        return job if (job.get("restarts") == 3 and condition(policy_now, "Scaling")
                       .get("reason") == "JobRestarted") else None

    job = wait_until(named, 6 * RESOLUTION_S, "numRestarts 3 seen and the job named")
    assert job["id"] == jid and job["unexplainedRestarts"] >= 1, job
    warned = [r for r, _ in events(cluster, namespace, "q5") if r == "JobRestarted"]
    assert len(warned) == 1, warned


def test_a_lowered_max_parallelism_takes_effect(
    controller: ControllerProcess, cluster: Cluster, namespace: str,
) -> None:
    apply(cluster, flink_deployment(namespace, "q11"))
    cluster.wait_flink(namespace, "q11")
    apply(cluster, policy(namespace, "q11", "q11", metrics=METRICS))

    def widest() -> int:
        operators = (hsp(cluster, namespace, "q11").get("status") or {}).get("operators") or []
        return max((int(o["parallelism"]) for o in operators), default=0)

    wait_until(lambda: widest() > 2, 240, "q11 scaled beyond parallelism 2")
    # A GitOps edit lowers the bound below what runs: before, the policy stayed Steady.
    apply(cluster, policy(namespace, "q11", "q11", metrics=METRICS, cpu={"maxParallelism": 2}))

    def bounded() -> str | None:
        reason = str(((hsp(cluster, namespace, "q11").get("status") or {})
                      .get("lastDecision") or {}).get("reason", ""))
        return reason if "maxParallelism is 2" in reason else None

    wait_until(bounded, 120, "a step that names the lowered maxParallelism")
    wait_until(lambda: widest() <= 2, 60, "every operator within maxParallelism 2")


def test_prometheus_credentials_come_from_the_policys_own_secrets(
    controller: ControllerProcess, cluster: Cluster, namespace: str, servers: list[Any],
) -> None:
    """The chart's `get` on secrets, by name, in the policy's namespace: the header
    arrives; a missing key is a condition naming the field; the value is written nowhere."""
    prometheus = Answering(200, EMPTY)
    servers.append(prometheus)
    password = "pa55-e2e-" + namespace
    cluster.core.create_namespaced_secret(namespace, client.V1Secret(
        metadata=client.V1ObjectMeta(name="prom-auth"),
        string_data={"user": "reader", "password": password}))
    apply(cluster, flink_deployment(namespace, "q5", model="q5"))
    cluster.wait_flink(namespace, "q5")
    auth = {"username": {"name": "prom-auth", "key": "user"},
            "password": {"name": "prom-auth", "key": "password"}}
    apply(cluster, reading(namespace, "basic", "q5", prometheus.url, basicAuth=auth))
    expected = "Basic " + base64.b64encode(f"reader:{password}".encode()).decode()
    wait_until(lambda: prometheus.authorization == expected,
               WINDOW_S + 12 * RESOLUTION_S, "the basic-auth header reached Prometheus")
    cluster.custom.delete_namespaced_custom_object(
        "hybridscaler.dev", "v1alpha1", namespace, "hybridscalingpolicies", "basic")
    wrong = {**auth, "password": {"name": "prom-auth", "key": "nope"}}
    apply(cluster, reading(namespace, "wrong", "q5", prometheus.url, basicAuth=wrong))
    wait_until(lambda: metrics_reason(cluster, namespace, "wrong")
               == "MetricsCredentialsUnavailable",
               WINDOW_S + 12 * RESOLUTION_S, "wrong: MetricsCredentialsUnavailable")
    message = condition(hsp(cluster, namespace, "wrong"), "MetricsAvailable")["message"]
    assert message.startswith(
        "spec.metrics.basicAuth.password: secret 'prom-auth' has no key 'nope'"), message
    # No namespace can be named: the schema has no such field.
    other = {**auth, "password": {"name": "prom-auth", "key": "password",
                                  "namespace": "kube-system"}}
    done = apply(cluster, reading(namespace, "other", "q5", prometheus.url, basicAuth=other),
                 check=False)
    assert done.returncode != 0 and "namespace" in done.stderr, done.stderr
    for name in ("basic", "wrong"):
        assert all(password not in m for _, m in events(cluster, namespace, name))
    assert password not in str(hsp(cluster, namespace, "wrong"))
    assert password not in controller.log.read_text()
