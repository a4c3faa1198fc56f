"""What the controller dials and for how long: deadlines, circuit breakers, the allow-list,
and answer bodies kept out of messages. The adapters run against real loopback sockets
that hang or answer with a hostile body."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path

import pytest

from controller.adapters import dial, outbound
from controller.adapters.flink_rest import FlinkRest
from controller.adapters.outbound import AllowList, Breakers, deadline
from controller.adapters.prometheus import Prometheus
from controller.operator.fairness import FairPool, pass_budget
from controller.ports import FlinkRestError, MetricsError
from e2e.pki import make_pki

from .netfaults import Answering, Blackhole

SECRET = b'{"kind":"Status","message":"SECRET-BODY forbidden: User cannot list secrets"}'


@pytest.fixture
def blackhole() -> Iterator[Blackhole]:
    hole = Blackhole()
    yield hole
    hole.close()


def test_allow_list_matches_names_suffixes_ports_and_cidrs() -> None:
    allowed = AllowList(["prometheus.monitoring.svc", ".metrics.example", "thanos:10902",
                         "10.0.0.0/8"], always=["http://default-prom:9090"], resolve=False)
    for url in ("http://prometheus.monitoring.svc:9090", "https://a.metrics.example",
                "http://thanos:10902", "http://10.1.2.3:9090", "http://default-prom:9090/"):
        assert allowed.refusal(url) is None, url
    for url in ("http://thanos:9090", "http://11.0.0.1:9090", "https://kubernetes.default.svc",
                "http://169.254.169.254/latest", "http://default-prom:9091",
                "http://metrics.example.evil"):
        why = allowed.refusal(url)
        assert why is not None and "spec.metrics.prometheusUrl" in why, url
    assert "http(s)" in (allowed.refusal("file:///etc/passwd") or "")


def test_allow_list_checks_every_address_of_a_name() -> None:
    assert AllowList(["127.0.0.0/8"]).refusal("http://localhost:9090") is None
    assert AllowList(["10.0.0.0/8"]).refusal("http://localhost:9090") is not None


def test_a_hung_prometheus_costs_one_budget_then_is_not_dialled(blackhole: Blackhole) -> None:
    breakers = Breakers(cooldown_s=60)
    prom = Prometheus(blackhole.url, breakers=breakers)
    with deadline(2.0), pytest.raises(MetricsError, match=r"did not answer within 1\.0s"):
        prom.query("up", 0)
    # Other passes (other policies on the same URL) fail fast, without a connection.
    accepted = blackhole.accepted
    with deadline(2.0), pytest.raises(MetricsError, match=r"not asked: .*timed out recently"):
        prom.query_range("up", 0, 10, 1)
    assert blackhole.accepted == accepted == 1


def test_a_call_starved_by_the_budget_does_not_trip_the_breaker(blackhole: Blackhole) -> None:
    breakers = Breakers()
    prom = Prometheus(blackhole.url, breakers=breakers)
    # A 4 s budget of which 0.3 s are left: the call gets less than its share.
    token = outbound.PASS_DEADLINE.set(outbound.Deadline(4.0, time.monotonic() + 0.3))
    try:
        with pytest.raises(MetricsError, match="did not answer"):
            prom.query("up", 0)
    finally:
        outbound.PASS_DEADLINE.reset(token)
    # still closed
    breakers.check(dial.parse_url(blackhole.url, "spec.metrics.prometheusUrl").endpoint)


def test_a_used_up_budget_dials_nothing(blackhole: Blackhole) -> None:
    with deadline(0.0), pytest.raises(MetricsError, match=r"budget .* is used up"):
        Prometheus(blackhole.url, breakers=Breakers()).query("up", 0)
    assert blackhole.accepted == 0


def test_a_hung_jobmanager_costs_one_budget_then_is_not_dialled(blackhole: Blackhole) -> None:
    rest = FlinkRest(blackhole.url + "/ns/job", breakers=Breakers())
    with deadline(2.0), pytest.raises(FlinkRestError, match="did not answer within"):
        rest.job()
    with deadline(2.0), pytest.raises(FlinkRestError, match="not asked"):
        rest.job()
    assert blackhole.accepted == 1


def test_answer_bodies_never_reach_the_messages(caplog: pytest.LogCaptureFixture) -> None:
    server = Answering(403, SECRET)
    try:
        with pytest.raises(MetricsError) as prom_error, caplog.at_level("DEBUG"):
            Prometheus(server.url, breakers=Breakers()).query("up", 0)
        assert "answered HTTP 403" in str(prom_error.value)
        assert "SECRET" not in str(prom_error.value)
        assert "SECRET-BODY" in caplog.text  # logged at debug, for the operator
        with pytest.raises(FlinkRestError) as rest_error:
            FlinkRest(server.url, breakers=Breakers()).job()
        assert "403" in str(rest_error.value) and "SECRET" not in str(rest_error.value)
    finally:
        server.close()


def test_tls_is_verified_and_the_token_file_is_sent(tmp_path: Path) -> None:
    make_pki(tmp_path)
    empty = b'{"status":"success","data":{"resultType":"vector","result":[]}}'
    server = Answering(200, empty, tls=(tmp_path / "apiserver.crt", tmp_path / "apiserver.key"))
    try:
        with pytest.raises(MetricsError, match="unreachable") as unverified:
            Prometheus(server.url, breakers=Breakers()).query("up", 0)
        # What answered (a TLS server) is not for the tenant to learn.
        assert "SSL" not in str(unverified.value) and "TLS" not in str(unverified.value)
        assert server.authorization is None
        (tmp_path / "token").write_text("s3cret\n")
        prom = Prometheus(server.url, ca_file=str(tmp_path / "ca.crt"),
                          token_file=str(tmp_path / "token"), breakers=Breakers())
        assert prom.query("up", 0) == []
        assert server.authorization == "Bearer s3cret"
        (tmp_path / "token").write_text("rotated")  # re-read on every request
        prom.query("up", 0)
        assert server.authorization == "Bearer rotated"
    finally:
        server.close()


def test_a_success_closes_the_breaker() -> None:
    breakers = Breakers(cooldown_s=0.0)
    breakers.failed("http://x:1")
    breakers.succeeded("http://x:1")
    breakers.check("http://x:1")
    cooling = Breakers(cooldown_s=30)
    cooling.failed("http://x:1")
    with pytest.raises(outbound.CircuitOpen):
        cooling.check("http://x:1")


def test_the_budget_follows_the_resolution() -> None:
    assert pass_budget(5.0) == 4.0
    assert pass_budget(0.5) == 1.0
    assert pass_budget(3600.0) == 60.0


def _queue(pool: FairPool, namespace: str, n: int) -> list[asyncio.Future[None]]:
    loop = asyncio.get_running_loop()
    futures = [loop.create_future() for _ in range(n)]
    pool.waiting.setdefault(namespace, deque()).extend(futures)
    return futures


def test_a_freed_worker_goes_to_the_namespace_below_its_share() -> None:
    async def scenario() -> list[dict[str, int]]:
        pool = FairPool(4)
        _queue(pool, "hostile", 12)
        pool._grant()
        seen = [dict(pool.running)]  # alone, a namespace uses all but one worker
        _queue(pool, "healthy", 3)
        pool._grant()
        seen.append(dict(pool.running))  # the last one: the newcomer starts at once
        pool._release("hostile")  # a hung pass ends; the last free worker is kept
        seen.append(dict(pool.running))
        _queue(pool, "third", 1)
        pool._grant()
        seen.append(dict(pool.running))  # ... for a tenant running nothing
        pool._release("hostile")  # kept again
        seen.append(dict(pool.running))
        pool._release("hostile")  # two free: one to the fewest running, one kept
        seen.append(dict(pool.running))
        pool.executor.shutdown()
        return seen

    assert asyncio.run(scenario()) == [
        {"hostile": 3}, {"hostile": 3, "healthy": 1}, {"hostile": 2, "healthy": 1},
        {"hostile": 2, "healthy": 1, "third": 1}, {"hostile": 1, "healthy": 1, "third": 1},
        {"hostile": 1, "healthy": 1, "third": 1}]


def test_a_contended_pool_splits_the_workers_and_keeps_one_for_a_newcomer() -> None:
    async def scenario() -> list[dict[str, int]]:
        pool = FairPool(8)
        _queue(pool, "hostile", 12)
        _queue(pool, "healthy", 8)
        pool._grant()
        seen = [dict(pool.running)]
        _queue(pool, "newcomer", 1)
        pool._grant()
        seen.append(dict(pool.running))
        pool.executor.shutdown()
        return seen

    assert asyncio.run(scenario()) == [{"hostile": 4, "healthy": 3},
                                       {"hostile": 4, "healthy": 3, "newcomer": 1}]


def test_the_busy_gauge_follows_the_pool() -> None:
    from controller import telemetry

    def busy() -> dict[str, float]:
        return {s.labels["namespace"]: s.value
                for s in telemetry.WORKERS_BUSY.collect()[0].samples
                if s.labels["namespace"].startswith("gauge-")}  # other tests' pools

    async def scenario() -> list[dict[str, float]]:
        pool = FairPool(8)
        _queue(pool, "gauge-hostile", 12)
        _queue(pool, "gauge-healthy", 1)
        pool._grant()
        seen = [busy()]
        pool._release("gauge-healthy")
        seen.append(busy())
        pool.executor.shutdown()
        return seen

    assert asyncio.run(scenario()) == [
        {"gauge-hostile": 4, "gauge-healthy": 1}, {"gauge-hostile": 7}]
    assert telemetry.WORKERS._value.get() == 8


def _budget() -> float | None:
    d = outbound.PASS_DEADLINE.get()
    return None if d is None else d.budget_s


def test_passes_run_on_the_pool_under_a_deadline() -> None:
    async def scenario() -> float | None:
        pool = FairPool(2)
        try:
            return await pool.run("ns", _budget, budget_s=3.0)
        finally:
            pool.executor.shutdown()

    assert asyncio.run(scenario()) == 3.0
