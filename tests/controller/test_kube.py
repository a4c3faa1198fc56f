"""The API server adapters: retries (conflicts, throttling, server errors, nothing else) and
Events that never fail a pass."""

from __future__ import annotations

import threading

import pytest
from kubernetes.client import V1ConfigMap
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import MaxRetryError

from controller.adapters.kube import (
    RETRIED,
    KubeDeployments,
    KubeEvents,
    KubeOperatorDefaults,
    KubeOwners,
    retrying,
)
from controller.ports import OperatorDefaultsUnreadable, PatchRefused


class Flaky:
    def __init__(self, *statuses: int) -> None:
        self.statuses = list(statuses)
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.statuses:
            raise ApiException(status=self.statuses.pop(0), reason="test")
        return "done"


def test_conflicts_are_retried_until_they_clear() -> None:
    call = Flaky(409, 409, 503)
    assert retrying(call, backoff_s=0) == "done"
    assert call.calls == 4


def test_other_errors_are_not_retried() -> None:
    call = Flaky(404)
    with pytest.raises(ApiException) as raised:
        retrying(call, backoff_s=0)
    assert raised.value.status == 404 and call.calls == 1


def test_a_conflict_that_never_clears_is_raised() -> None:
    call = Flaky(*[409] * 10)
    with pytest.raises(ApiException):
        retrying(call, attempts=3, backoff_s=0)
    assert call.calls == 3


def test_a_field_conflict_is_not_retried_but_a_server_hiccup_is() -> None:
    no_conflicts = RETRIED - {409}
    hiccup = Flaky(503)
    assert retrying(hiccup, backoff_s=0, retried=no_conflicts) == "done"
    assert hiccup.calls == 2
    conflict = Flaky(409)
    with pytest.raises(ApiException):
        retrying(conflict, backoff_s=0, retried=no_conflicts)
    assert conflict.calls == 1


class Core:
    """CoreV1Api's create_namespaced_event, answering with `error` if given."""

    def __init__(self, error: Exception | None = None) -> None:
        self.error = error
        self.posted: list[tuple[str, dict[str, object]]] = []

    def create_namespaced_event(self, namespace: str, body: dict[str, object]) -> None:
        if self.error is not None:
            raise self.error
        self.posted.append((namespace, body))


POLICY = {"apiVersion": "hybridscaler.dev/v1alpha1", "kind": "HybridScalingPolicy",
          "metadata": {"name": "p", "namespace": "ns", "uid": "u-1"}}


def test_an_event_names_the_policy_and_who_posted_it() -> None:
    core = Core()
    KubeEvents(core, POLICY, "hybrid-scaler", "host/shard-1-of-2",  # type: ignore[arg-type]
               "hybrid-scaler-").emit("Warning", "InternalError", "boom")
    [(namespace, body)] = core.posted
    assert namespace == "ns"
    assert body["involvedObject"] == {"apiVersion": "hybridscaler.dev/v1alpha1",
                                      "kind": "HybridScalingPolicy", "name": "p",
                                      "uid": "u-1", "namespace": "ns"}
    assert (body["type"], body["reason"], body["message"]) == ("Warning", "InternalError",
                                                                "boom")
    assert body["reportingInstance"] == "host/shard-1-of-2"
    assert body["source"] == {"component": "hybrid-scaler"}


@pytest.mark.parametrize("error", [ApiException(status=403, reason="Forbidden"),
                                   ConnectionError("refused")])
def test_an_event_that_cannot_be_posted_never_fails_the_pass(
    error: Exception, caplog: pytest.LogCaptureFixture
) -> None:
    KubeEvents(Core(error), POLICY, "c", "i", "p-").emit(  # type: ignore[arg-type]
        "Normal", "ScaledOut", "step 1")
    assert "could not post the Normal Event ScaledOut" in caplog.text


class Objects:
    """CustomObjectsApi's patch, answering every apply with `status` and a webhook's text."""

    def __init__(self, status: int) -> None:
        self.status = status

    def patch_namespaced_custom_object(self, *args: object, **kwargs: object) -> None:
        error = ApiException(status=self.status, reason="test")
        error.body = 'admission webhook "deny.example" denied: <script>call 555-0100</script>'
        raise error


@pytest.mark.parametrize("status", [400, 403, 422])
def test_an_admission_refusal_is_raised_with_its_code_and_never_its_text(status: int) -> None:
    with pytest.raises(PatchRefused) as raised:
        KubeDeployments(Objects(status)).apply("ns", "q11", {"spec": {}})  # type: ignore[arg-type]
    assert raised.value.code == status and str(raised.value) == f"HTTP {status}"
    assert raised.value.__cause__ is None and raised.value.__suppress_context__


def test_a_server_error_on_apply_is_not_an_admission_refusal() -> None:
    with pytest.raises(ApiException):
        KubeDeployments(Objects(404)).apply("ns", "q11", {"spec": {}})  # type: ignore[arg-type]


class Policies:
    """CustomObjectsApi's get of one HybridScalingPolicy (None: 404)."""

    def __init__(self, found: dict[str, object] | None) -> None:
        self.found = found

    def get_namespaced_custom_object(self, *args: object) -> dict[str, object]:
        if self.found is None:
            raise ApiException(status=404, reason="test")
        return self.found


def owner(mode: str = "Active", target: str = "q11", uid: str = "u1") -> dict[str, object]:
    return {"metadata": {"name": "first", "uid": uid},
            "spec": {"mode": mode, "targetRef": {"name": target}}}


def test_an_owner_holds_its_deployment_only_while_it_is_active_and_points_at_it() -> None:
    def alive(found: dict[str, object] | None) -> bool:
        return KubeOwners(Policies(found)).alive(  # type: ignore[arg-type]
            "ns", "first", "u1", "q11")

    assert alive(owner())
    assert not alive(None)  # deleted
    assert not alive(owner(uid="u2"))  # replaced by a new object of its name
    assert not alive(owner(mode="Recommend"))
    # Its spec.targetRef edited to another deployment: it lets this one go.
    assert not alive(owner(target="q12"))


class ConfigMaps:
    """CoreV1Api's read_namespaced_config_map: `answers` in turn (an exception is raised)."""

    def __init__(self, *answers: object) -> None:
        self.answers = list(answers)
        self.reads: list[tuple[str, str]] = []

    def read_namespaced_config_map(self, name: str, namespace: str, **_: object) -> object:
        self.reads.append((namespace, name))
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return V1ConfigMap(data=answer)


def test_the_operators_defaults_are_read_once_per_ttl_for_every_policy() -> None:
    core = ConfigMaps({"flink-conf.yaml": "job.autoscaler.enabled: true\nother: 1"},
                      {"flink-conf.yaml": "job.autoscaler.enabled: false"})
    now = [0.0]
    read = KubeOperatorDefaults(core, "flink-operator/flink-operator-config",  # type: ignore[arg-type]
                                ttl_s=60, clock=lambda: now[0])
    assert read() == {"flink-conf.yaml": {"job.autoscaler.enabled": "true"}}
    now[0] = 59
    assert read() == {"flink-conf.yaml": {"job.autoscaler.enabled": "true"}}
    assert core.reads == [("flink-operator", "flink-operator-config")]
    now[0] = 60
    assert read() == {"flink-conf.yaml": {"job.autoscaler.enabled": "false"}}
    assert len(core.reads) == 2


@pytest.mark.parametrize("error, said", [
    (ApiException(status=403, reason="Forbidden: <a webhook's text>"), "HTTP 403"),
    (ApiException(status=404, reason="Not Found"), "HTTP 404"),
    (MaxRetryError(None, "/api", "refused"), "did not answer"),  # type: ignore[arg-type]
    ({"config.yaml": "job: [unclosed"}, "its config.yaml does not parse"),
])
def test_an_unreadable_configmap_says_where_and_why_and_is_read_again_after_retry_s(
        error: object, said: str) -> None:
    core = ConfigMaps(error, {"config.yaml": "job.autoscaler.enabled: false"})
    now = [0.0]
    read = KubeOperatorDefaults(core, "ops/cm", retry_s=10,  # type: ignore[arg-type]
                                clock=lambda: now[0])
    raised = []
    for _ in range(2):
        with pytest.raises(OperatorDefaultsUnreadable) as caught:
            read()
        raised.append(caught.value)
        assert said in str(caught.value) and "ConfigMap ops/cm" in str(caught.value)
        assert "webhook" not in str(caught.value) and "unclosed" not in str(caught.value)
    assert raised[0] is not raised[1]  # one per caller: no traceback shared between threads
    assert len(core.reads) == 1
    now[0] = 10
    assert read() == {"config.yaml": {"job.autoscaler.enabled": False}}


def test_callers_go_on_with_what_was_read_while_one_reads_again() -> None:
    """Only the first read is waited for: a slow API server holds one caller, not all."""
    release = threading.Event()
    entered = threading.Event()

    class Slow(ConfigMaps):
        def read_namespaced_config_map(self, name: str, namespace: str, **_: object) -> object:
            if self.reads:
                entered.set()
                assert release.wait(10)
            return super().read_namespaced_config_map(name, namespace)

    core = Slow({"flink-conf.yaml": "job.autoscaler.enabled: false"},
                {"flink-conf.yaml": "job.autoscaler.enabled: true"})
    now = [0.0]
    read = KubeOperatorDefaults(core, "ops/cm", ttl_s=60,  # type: ignore[arg-type]
                                clock=lambda: now[0])
    first = {"flink-conf.yaml": {"job.autoscaler.enabled": "false"}}
    assert read() == first
    now[0] = 61
    reader = threading.Thread(target=read)
    reader.start()
    assert entered.wait(10)
    assert read() == first  # not held by the read in flight
    release.set()
    reader.join(10)
    assert read() == {"flink-conf.yaml": {"job.autoscaler.enabled": "true"}}
    assert len(core.reads) == 2
