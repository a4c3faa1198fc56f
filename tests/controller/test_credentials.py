"""A tenant Prometheus' credentials come from Secrets in the policy's own namespace
(controller.adapters.secrets), reach a real loopback server as the Authorization
header, and never appear in a condition message or a log line. Secrets are served by
an in-memory reader standing in for the API server (the port's fake)."""

from __future__ import annotations

import base64
import logging
from collections.abc import Iterator

import pytest

from controller import api
from controller.adapters import secrets
from controller.adapters.prometheus import RefusedMetrics
from controller.operator import handlers
from controller.operator.settings import RUNTIME
from controller.ports import MetricsError
from controller.record import METRICS_REASONS, Reason

from .netfaults import Answering

EMPTY = b'{"status":"success","data":{"resultType":"vector","result":[]}}'
PASSWORD = "s3cret-pa55"
TOKEN = "tok-9f8e7d"


class Secrets:
    """Secrets by (namespace, name), each {key: text}; records what was read."""

    def __init__(self, data: dict[tuple[str, str], dict[str, str]]) -> None:
        self.data = data
        self.reads: list[tuple[str, str]] = []

    def __call__(self, namespace: str, name: str) -> dict[str, str]:
        self.reads.append((namespace, name))
        if (namespace, name) not in self.data:
            raise secrets.SecretMissing("does not exist")
        return {k: base64.b64encode(v.encode()).decode()
                for k, v in self.data[namespace, name].items()}


@pytest.fixture
def prometheus(monkeypatch: pytest.MonkeyPatch) -> Iterator[Answering]:
    server = Answering(200, EMPTY)
    monkeypatch.setattr(RUNTIME, "allowed_prometheus", [server.url.removeprefix("http://")])
    monkeypatch.setattr(RUNTIME, "prometheus_url", "http://prometheus.monitoring.svc:9090")
    handlers._allowed.cache_clear()
    handlers._prometheus.cache_clear()
    yield server
    handlers._allowed.cache_clear()
    handlers._prometheus.cache_clear()
    server.close()


def spec(url: str, **auth: object) -> api.MetricsSpec:
    return api.MetricsSpec.model_validate({"prometheusUrl": url, **auth})


BASIC = {"basicAuth": {"username": {"name": "prom-auth", "key": "user"},
                       "password": {"name": "prom-auth", "key": "password"}}}
BEARER = {"authorization": {"credentials": {"name": "prom-token", "key": "token"}}}
STORE = {("team-a", "prom-auth"): {"user": "reader", "password": PASSWORD + "\n"},
         ("team-a", "prom-token"): {"token": TOKEN}}


def ask(server: Answering, metrics_spec: api.MetricsSpec, read: Secrets) -> None:
    metrics = handlers._metrics(server.url, "team-a", metrics_spec, read)
    assert not isinstance(metrics, RefusedMetrics), metrics.reason
    metrics.operator_ids("0" * 32, 0.0)


def test_basic_auth_arrives_as_the_authorization_header(prometheus: Answering) -> None:
    ask(prometheus, spec(prometheus.url, **BASIC), Secrets(STORE))
    expected = base64.b64encode(f"reader:{PASSWORD}".encode()).decode()
    assert prometheus.authorization == f"Basic {expected}"


def test_a_bearer_token_arrives_and_a_rotated_one_is_used_next_pass(
        prometheus: Answering) -> None:
    store = {k: dict(v) for k, v in STORE.items()}
    ask(prometheus, spec(prometheus.url, **BEARER), Secrets(store))
    assert prometheus.authorization == f"Bearer {TOKEN}"
    store["team-a", "prom-token"]["token"] = "rotated"
    ask(prometheus, spec(prometheus.url, **BEARER), Secrets(store))
    assert prometheus.authorization == "Bearer rotated"
    # The cached client of this URL carries no header of its own.
    ask(prometheus, spec(prometheus.url), Secrets(store))
    assert prometheus.authorization is None


def test_secrets_are_read_in_the_policys_namespace_only(prometheus: Answering) -> None:
    read = Secrets(STORE)
    handlers._metrics(prometheus.url, "team-b", spec(prometheus.url, **BASIC), read)
    assert read.reads == [("team-b", "prom-auth")]
    assert prometheus.requests == 0
    assert "namespace" not in api.SecretKeyRef.model_fields


@pytest.mark.parametrize(("store", "auth", "message"), [
    ({}, BASIC, "spec.metrics.basicAuth.username: secret 'prom-auth' does not exist"),
    ({("team-a", "prom-auth"): {"user": "reader"}}, BASIC,
     "spec.metrics.basicAuth.password: secret 'prom-auth' has no key 'password'"),
    ({("team-a", "prom-auth"): {"user": "a:b", "password": PASSWORD}}, BASIC,
     "spec.metrics.basicAuth.username: secret 'prom-auth' key 'user' must not contain ':'"),
    ({("team-a", "prom-token"): {"token": TOKEN + "\r\nX-Evil: 1"}}, BEARER,
     "spec.metrics.authorization.credentials: secret 'prom-token' key 'token' must be "
     "non-empty printable ASCII"),
    ({("team-a", "prom-token"): {"token": "x" * (secrets.MAX_VALUE_BYTES + 3)}}, BEARER,
     "spec.metrics.authorization.credentials: secret 'prom-token' key 'token' is over "
     "4096 bytes"),
])
def test_an_unreadable_credential_is_a_clear_condition_and_nothing_is_dialled(
        prometheus: Answering, caplog: pytest.LogCaptureFixture,
        store: dict[tuple[str, str], dict[str, str]], auth: dict[str, object],
        message: str) -> None:
    caplog.set_level(logging.DEBUG)
    metrics = handlers._metrics(prometheus.url, "team-a", spec(prometheus.url, **auth),
                                Secrets(store))
    assert isinstance(metrics, RefusedMetrics)
    why = metrics.observe(None, "0" * 32, 0.0, 60.0, 5.0)  # type: ignore[arg-type]
    assert why.reason == f"{message}; Prometheus was not contacted"
    assert METRICS_REASONS[why.kind] == Reason.METRICS_CREDENTIALS_UNAVAILABLE
    assert prometheus.requests == 0
    for value in (PASSWORD, TOKEN, "a:b"):
        assert value not in why.reason and value not in caplog.text


def test_a_secret_value_is_never_logged(prometheus: Answering,
                                        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    failing = Answering(403, b"denied")
    try:
        failing_spec = spec(failing.url, **BEARER)
        RUNTIME.allowed_prometheus.append(failing.url.removeprefix("http://"))
        handlers._allowed.cache_clear()
        metrics = handlers._metrics(failing.url, "team-a", failing_spec, Secrets(STORE))
        with pytest.raises(MetricsError) as refused:
            metrics.operator_ids("0" * 32, 0.0)
        assert failing.authorization == f"Bearer {TOKEN}"
        assert "answered HTTP 403" in str(refused.value) and TOKEN not in str(refused.value)
    finally:
        failing.close()
    assert TOKEN not in caplog.text


def test_the_operators_own_prometheus_gets_no_tenant_credentials(
        prometheus: Answering, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(RUNTIME, "prometheus_url", prometheus.url)
    handlers._prometheus.cache_clear()
    read = Secrets(STORE)
    ask(prometheus, spec(prometheus.url, **BEARER), read)
    assert prometheus.authorization is None and read.reads == []


def test_a_secret_holding_user_name_and_password_is_read_once(prometheus: Answering) -> None:
    read = Secrets(STORE)
    ask(prometheus, spec(prometheus.url, **BASIC), read)
    assert read.reads == [("team-a", "prom-auth")]
    assert prometheus.authorization is not None and prometheus.authorization.startswith("Basic ")
