"""Retries of API calls: conflicts (409), throttling and server errors, nothing else."""

from __future__ import annotations

import pytest
from kubernetes.client.exceptions import ApiException

from controller.adapters.kube import RETRIED, retrying


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
