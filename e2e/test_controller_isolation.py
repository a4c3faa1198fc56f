"""One tenant cannot stall, probe or read through the controller (issue 16 items 1, 2, 6).

The real API server with the chart's RBAC, the real Prometheus, the twin; hostile
endpoints are loopback sockets that accept and never answer (`Blackhole`) or answer
with a body that must never reach status or Events. The controller here reaches Flink
REST through a small proxy that hangs for FlinkDeployments named `hung*`, and allows
tenants' Prometheus URLs on 127.0.0.1 only (the stack runs on loopback).
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import select
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import requests
import yaml
from kubernetes import client

from e2e.conftest import Cluster, wait_until
from e2e.demo import ControllerProcess, flink_deployment, policy
from e2e.stack import StackInfo, proxy_env
from e2e.test_controller import condition, events, hsp
from policies.decision import epoch_seconds
from tests.controller.netfaults import Answering, Blackhole

pytestmark = pytest.mark.e2e

# Short windows: an evaluation is due 10 s after the job starts, then every 10–15 s.
WINDOW_S, RESOLUTION_S = 10, 5
METRICS = {"window": f"{WINDOW_S}s", "resolution": f"{RESOLUTION_S}s", "stabilization": "0s"}
SECRET = "SECRET-BODY-7f3a"


class RestProxy:
    """An HTTP proxy in front of the twin's (the controller reaches each JobManager as
    `http://<name>-rest.<namespace>.svc:8081` through `http_proxy`, e2e/stack.proxy_env),
    which never answers for deployments whose name starts with `hung`."""

    def __init__(self, twin_url: str) -> None:
        self.stop = threading.Event()
        self.hung_requests = 0
        # GET /jobs/overview per FlinkDeployment name: every pass of a policy on it asks once.
        self.overviews: collections.Counter[str] = collections.Counter()
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                # A proxy request carries the absolute URL: http://<name>-rest.<ns>.svc:8081/...
                host = urlsplit(self.path).hostname or ""
                if urlsplit(self.path).path == "/jobs/overview":
                    with outer.lock:
                        outer.overviews[host.split("-rest.", 1)[0]] += 1
                if host.startswith("hung"):
                    outer.hung_requests += 1
                    outer.stop.wait()
                    return
                reply = requests.get(self.path, timeout=10,
                                     proxies={"http": twin_url})
                self.send_response(reply.status_code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply.content)))
                self.end_headers()
                self.wfile.write(reply.content)

            def log_message(self, *_: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()


class Tarpit:
    """A Prometheus for one tenant's policies that answers every query with an empty
    result after `delay_s`: well within a call's timeout, so no breaker ever trips, yet
    each pass holds its worker for a while (an evaluation asks two queries, the
    operator ids and one combined range query). Each policy's URL has its
    name as path prefix (`<url>/<policy>`); its instant query (the operator ids, asked
    first) counts a pass. `busy` is how many of this tenant's queries are being answered
    now: each of its passes in flight has exactly one, so it is the tenant's busy workers."""

    BODY = b'{"status":"success","data":{"resultType":"matrix","result":[]}}'

    def __init__(self, delay_s: float = 0.75) -> None:
        self.lock = threading.Lock()
        self.passes: collections.Counter[str] = collections.Counter()
        self.busy = self.most_busy = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                policy, _, api = self.path.lstrip("/").partition("/")
                with outer.lock:
                    outer.busy += 1
                    outer.most_busy = max(outer.most_busy, outer.busy)
                    if api.startswith("api/v1/query?"):
                        outer.passes[policy] += 1
                try:
                    # A pass whose budget ends mid-call gives up and hangs up: that query
                    # is no longer anyone's, and its worker may already run another pass.
                    gone = hung_up(self.connection, delay_s)
                finally:
                    with outer.lock:  # before answering: `busy` may only undercount
                        outer.busy -= 1
                if gone:
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(Tarpit.BODY)))
                self.end_headers()
                with contextlib.suppress(OSError):
                    self.wfile.write(Tarpit.BODY)

            do_POST = do_GET

            def log_message(self, *_: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def watch(self) -> None:
        """Count `most_busy` from now on."""
        with self.lock:
            self.most_busy = self.busy

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def rest_proxy(e2e_stack: StackInfo) -> Iterator[RestProxy]:
    proxy = RestProxy(e2e_stack.twin_url)
    yield proxy
    proxy.close()


@pytest.fixture(scope="module")
def isolated_controller(e2e_stack: StackInfo, controller_kubeconfig: Path, rest_proxy: RestProxy,
                        tmp_path_factory: pytest.TempPathFactory
                        ) -> Iterator[ControllerProcess]:
    log = tmp_path_factory.mktemp("controller") / "controller.log"
    process = ControllerProcess(str(controller_kubeconfig), e2e_stack.prometheus_url,
                                proxy_env(rest_proxy.url), log).start()
    yield process
    process.stop()


@pytest.fixture
def blackholes() -> Iterator[list[Blackhole]]:
    made: list[Blackhole] = []
    yield made
    for hole in made:
        hole.close()


@pytest.fixture
def second_namespace(cluster: Cluster) -> Iterator[str]:
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    cluster.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    cluster.core.delete_namespace(name)


def apply(cluster: Cluster, *docs: dict[str, Any], check: bool = True
          ) -> subprocess.CompletedProcess[str]:
    return cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(docs), check=check)


def reading(namespace: str, name: str, target: str, url: str, **metrics: Any
            ) -> dict[str, Any]:
    """A Recommend policy on `target` that reads its metrics from `url` (a tenant's
    Prometheus), with the short windows."""
    return policy(namespace, name, target, mode="Recommend",
                  metrics={**METRICS, "prometheusUrl": url, **metrics})


def status_of(cluster: Cluster, namespace: str, name: str, type_: str) -> dict[str, Any]:
    return condition(hsp(cluster, namespace, name), type_)


def test_a_hung_prometheus_is_reported_within_a_resolution_and_then_left_alone(
    isolated_controller: ControllerProcess, cluster: Cluster, namespace: str,
    blackholes: list[Blackhole],
) -> None:
    hole = Blackhole()
    blackholes.append(hole)
    apply(cluster, flink_deployment(namespace, "q5", model="q5"))
    cluster.wait_flink(namespace, "q5")
    apply(cluster, reading(namespace, "q5", "q5", hole.url))
    # Before issue 16 a pass against it blocked ~90 s (10 s × urllib3 retries × queries).
    wait_until(lambda: status_of(cluster, namespace, "q5", "MetricsAvailable")
               .get("status") == "False", WINDOW_S + 6 * RESOLUTION_S,
               "MetricsAvailable=False within the first evaluating passes")
    message = status_of(cluster, namespace, "q5", "MetricsAvailable")["message"]
    assert "did not answer within" in message or "not asked" in message, message
    # The breaker: passes every 5 s, yet the hung address is not dialled again during its
    # cool-down (30 s).
    dialled = hole.accepted
    time.sleep(4 * RESOLUTION_S)
    assert dialled >= 1 and hole.accepted - dialled <= 1, (dialled, hole.accepted)
    assert status_of(cluster, namespace, "q5", "MetricsAvailable")["status"] == "False"


def test_a_hung_jobmanager_is_reported_and_then_left_alone(
    isolated_controller: ControllerProcess, cluster: Cluster, namespace: str,
    rest_proxy: RestProxy,
) -> None:
    apply(cluster, flink_deployment(namespace, "hung", model="read"))
    cluster.wait_flink(namespace, "hung")
    apply(cluster, policy(namespace, "hung", "hung", mode="Recommend", metrics=METRICS))

    def job_unavailable() -> dict[str, Any] | None:
        ready = status_of(cluster, namespace, "hung", "Ready")
        return ready if ready.get("reason") == "JobUnavailable" else None

    ready = wait_until(job_unavailable, 6 * RESOLUTION_S, "Ready=False, JobUnavailable")
    assert ready["status"] == "False" and "did not answer within" in ready["message"], ready
    dialled = rest_proxy.hung_requests
    time.sleep(4 * RESOLUTION_S)
    # Before: each pass (every 5 s) held a worker for the whole 5 s REST timeout.
    assert rest_proxy.hung_requests - dialled <= 1, (dialled, rest_proxy.hung_requests)


def test_blackhole_tenants_do_not_stall_healthy_ones(
    isolated_controller: ControllerProcess, cluster: Cluster, namespace: str,
    second_namespace: str, blackholes: list[Blackhole], rest_proxy: RestProxy,
) -> None:
    """12 policies each pointing at its own blackhole Prometheus, next to 3 healthy ones.

    Counts, not times. The circuit breaker: once a blackhole timed out, the passes of its
    policy go on (each asks the JobManager for /jobs/overview, counted by the proxy) but
    do not dial it again during its cool-down, so after the first dials there are far
    fewer dials than passes. Without the breaker every pass dials it about twice (a call
    may use half the pass budget). And each healthy policy keeps deciding meanwhile.
    """
    hostile, healthy = namespace, second_namespace
    blackholes.extend(Blackhole() for _ in range(12))
    apply(cluster, flink_deployment(hostile, "victim", model="read"),
          *(flink_deployment(healthy, f"ok{i}", model=model)
            for i, model in enumerate(("q5", "q3", "read"))))
    for i in range(3):
        cluster.wait_flink(healthy, f"ok{i}")
    cluster.wait_flink(hostile, "victim")
    apply(cluster, *(reading(hostile, f"h{i:02d}", "victim", hole.url)
                     for i, hole in enumerate(blackholes)))
    apply(cluster, *(policy(healthy, f"ok{i}", f"ok{i}", mode="Recommend", metrics=METRICS)
                     for i in range(3)))
    wait_until(lambda: all(hole.accepted for hole in blackholes), WINDOW_S + 60,
               "every hostile policy dialling its blackhole")

    dialled, passes = dials(blackholes), rest_proxy.overviews["victim"]
    decided: dict[str, list[float]] = {f"ok{i}": [] for i in range(3)}
    # 6 more passes per hostile policy (30 s if nothing waits); each needs a window
    # (2 resolutions) of the healthy ones, so a free pool gives each healthy policy ~3
    # decisions meanwhile. Before issue 16 a healthy policy decided about once in 100 s.
    while rest_proxy.overviews["victim"] - passes < 6 * len(blackholes):
        for name, times in decided.items():
            last = (hsp(cluster, healthy, name).get("status") or {}).get("lastDecision") or {}
            if (stamp := last.get("time")) is not None:
                t = float(epoch_seconds(stamp))
                if not times or times[-1] != t:
                    times.append(t)
        time.sleep(1)
    hostile_passes = rest_proxy.overviews["victim"] - passes
    redialled = dials(blackholes) - dialled
    gaps = [b - a for times in decided.values() for a, b in itertools.pairwise(times)]
    print(f"next to 12 blackhole tenants: {hostile_passes} hostile passes dialled "
          f"{redialled} times; healthy decision gaps {sorted(gaps)}")
    # A breaker's cool-down (30 s, doubling) spans ~6 passes: ~1 dial in 6 passes. Without
    # it: ~2 per pass.
    assert redialled <= hostile_passes / 3, (redialled, hostile_passes)
    assert all(len(times) >= 2 for times in decided.values()), decided
    hostile_conditions = [status_of(cluster, hostile, f"h{i:02d}", "MetricsAvailable")
                          for i in range(12)]
    assert all(c.get("status") == "False" for c in hostile_conditions), hostile_conditions


def test_slow_tenants_hold_at_most_their_share_of_workers(
    isolated_controller: ControllerProcess, cluster: Cluster, namespace: str,
    second_namespace: str, rest_proxy: RestProxy,
) -> None:
    """Two tenants, 40 policies each, whose Prometheus answers every query slowly but in
    time (`Tarpit`): no breaker trips, and each evaluating pass holds a worker ~1.5 s
    every ~6.5 s, so each tenant alone wants ~9 of the pool's 8 workers and, once both
    run, always has passes waiting. Per-namespace fairness: each then holds at most half
    of the workers, whatever the order the passes came in. With one FIFO pool the split
    follows the queue, and one tenant at times holds 5 or more.

    The pool gives a free worker to whoever waits, but the last one only to a tenant
    running nothing: a tenant alone may hold 7, which is why both must stay backlogged.
    With 20 policies each and shorter passes their demand came in bursts, and each
    tenant held all it could in the other's pauses.

    Counted at the tarpits: each pass in flight has at most one query being answered (a
    pass that gives up on a query hangs up). Only counted once both tenants contend:
    after every policy's second pass began, no first pass (granted before the other
    tenant's policies existed) still runs.
    """
    tenants = {namespace: Tarpit(), second_namespace: Tarpit()}
    try:
        for ns in tenants:
            apply(cluster, flink_deployment(ns, "slow", model="read"))
        for ns in tenants:
            cluster.wait_flink(ns, "slow")
        names = [f"s{i:02d}" for i in range(40)]
        for ns, tarpit in tenants.items():
            apply(cluster, *(policy(ns, name, "slow", mode="Recommend",
                                    metrics={**METRICS, "prometheusUrl": f"{tarpit.url}/{name}"})
                             for name in names))

        def each_at_least(n: int) -> bool:
            return all(t.passes[name] >= n for t in tenants.values() for name in names)

        wait_until(lambda: each_at_least(2) or None, WINDOW_S + 240,
                   "every slow policy's second pass")
        for tarpit in tenants.values():
            tarpit.watch()
        wait_until(lambda: each_at_least(4) or None, 480, "two more passes of each")
        held = {ns: t.most_busy for ns, t in tenants.items()}
        print(f"most workers held by one of two slow tenants (8 in the pool): {held}")
        assert all(1 <= n <= 4 for n in held.values()), held
    finally:
        for tarpit in tenants.values():
            tarpit.close()


def test_a_prometheus_url_outside_the_allow_list_is_refused_and_never_dialled(
    isolated_controller: ControllerProcess, cluster: Cluster, namespace: str,
    blackholes: list[Blackhole],
) -> None:
    outside = Blackhole(host="127.0.0.2")  # loopback, but not 127.0.0.1/32
    blackholes.append(outside)
    apply(cluster, flink_deployment(namespace, "read", model="read"))
    cluster.wait_flink(namespace, "read")
    apply(cluster, reading(namespace, "read", "read", outside.url))
    wait_until(lambda: status_of(cluster, namespace, "read", "MetricsAvailable")
               .get("status") == "False", 120, "MetricsAvailable=False")
    message = status_of(cluster, namespace, "read", "MetricsAvailable")["message"]
    assert "spec.metrics.prometheusUrl" in message and "allow-list" in message, message
    assert outside.accepted == 0


def test_answer_bodies_never_reach_status_or_events(
    isolated_controller: ControllerProcess, e2e_stack: StackInfo, cluster: Cluster,
    namespace: str,
) -> None:
    """Two probes a tenant could try: an endpoint answering 403 with a body, and the API
    server itself over TLS (its certificate is not trusted: verified, refused)."""
    echo = Answering(403, f'{{"status":"error","error":"{SECRET}"}}'.encode())
    try:
        apply(cluster, flink_deployment(namespace, "q3", model="q3"))
        cluster.wait_flink(namespace, "q3")
        apply(cluster,
              reading(namespace, "echo", "q3", echo.url),
              reading(namespace, "apiserver", "q3", e2e_stack.api_server))
        for name in ("echo", "apiserver"):
            wait_until(partial(unavailable, cluster, namespace, name), 120,
                       f"{name}: MetricsAvailable=False")
        echoed = status_of(cluster, namespace, "echo", "MetricsAvailable")["message"]
        assert "answered HTTP 403" in echoed and SECRET not in echoed, echoed
        tls = status_of(cluster, namespace, "apiserver", "MetricsAvailable")["message"]
        # The field, never what answered: no SSLError for a TLS port (issue 21).
        assert "spec.metrics.prometheusUrl" in tls and "unreachable" in tls, tls
        assert "SSL" not in tls and "TLS" not in tls, tls
        wait_until(lambda: len(events(cluster, namespace, "echo")) > 0, 30, "an Event")
        for name in ("echo", "apiserver"):
            status = yaml.safe_dump(hsp(cluster, namespace, name).get("status"))
            told = " ".join(m for _, m in events(cluster, namespace, name))
            for leaked in (SECRET, "Forbidden", "forbidden", '"kind"', "Unauthorized"):
                assert leaked not in status and leaked not in told, (name, leaked)
    finally:
        echo.close()


def hung_up(connection: socket.socket, wait_s: float) -> bool:
    """Wait `wait_s`, or until the client closes `connection` (then True)."""
    ends = time.monotonic() + wait_s
    while (left := ends - time.monotonic()) > 0:
        readable, _, _ = select.select([connection], [], [], min(left, 0.005))
        if readable:
            try:
                if not connection.recv(1, socket.MSG_PEEK):
                    return True
            except OSError:
                return True
    return False


def dials(holes: list[Blackhole]) -> int:
    return sum(hole.accepted for hole in holes)


def unavailable(cluster: Cluster, namespace: str, name: str) -> bool:
    return status_of(cluster, namespace, name, "MetricsAvailable").get("status") == "False"

