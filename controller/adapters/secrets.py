"""A policy's Prometheus credentials, read from Secrets in the policy's own namespace.

The reference has no namespace field (controller.api.SecretKeyRef): the namespace is
always the policy's, so a tenant can never make the controller read another tenant's
Secret. Values are read each pass (a rotated Secret is picked up), bounded in size,
and become an Authorization header on the dial path only: never logged, never in a
status, an Event or an error message. Errors name the field and the Secret, never a
value and never what the API server said.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from typing import Any

from controller import api

# A token or password past this is not a credential (and would be a header the
# Prometheus in front of it refuses anyway).
MAX_VALUE_BYTES = 4096
KUBE_TIMEOUT_S = 5.0

# (namespace, name) -> the Secret's data (base64 values), or raises `SecretMissing`.
ReadSecret = Callable[[str, str], dict[str, str]]


class SecretMissing(Exception):
    """The Secret does not exist or the controller may not read it (`why` says which)."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


class CredentialsError(ValueError):
    """A credential could not be read; the message names the field, never a value."""


def kube_reader(core: Any) -> ReadSecret:
    """`ReadSecret` over a kubernetes `CoreV1Api` (the controller's `get` on secrets)."""
    from kubernetes.client.exceptions import ApiException

    def read(namespace: str, name: str) -> dict[str, str]:
        try:
            secret = core.read_namespaced_secret(name, namespace,
                                                 _request_timeout=KUBE_TIMEOUT_S)
        except ApiException as e:
            # The status code only: the API server's message is not the tenant's to read.
            if e.status == 404:
                raise SecretMissing("does not exist") from None
            if e.status == 403:
                raise SecretMissing("cannot be read by the controller (RBAC)") from None
            raise SecretMissing(f"could not be read (HTTP {e.status})") from None
        return dict(secret.data or {})

    return read


def value(read: ReadSecret, namespace: str, ref: api.SecretKeyRef, field: str) -> str:
    """The text under `ref.key` of Secret `ref.name` in `namespace`, or `CredentialsError`."""
    where = f"{field}: secret {ref.name!r}"
    try:
        data = read(namespace, ref.name)
    except SecretMissing as e:
        raise CredentialsError(f"{where} {e.why}") from None
    if ref.key not in data:
        raise CredentialsError(f"{where} has no key {ref.key!r}")
    encoded = data[ref.key] or ""
    if len(encoded) > (MAX_VALUE_BYTES + 2) // 3 * 4:
        raise CredentialsError(f"{where} key {ref.key!r} is over {MAX_VALUE_BYTES} bytes")
    try:
        raw = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise CredentialsError(f"{where} key {ref.key!r} is not base64") from None
    # Stripped: `echo token > file; kubectl create secret --from-file` adds a newline.
    text = raw.decode("latin-1").strip()
    # Printable ASCII only: a CR or LF would end the header and start another one.
    if not text or not text.isascii() or not text.isprintable():
        raise CredentialsError(f"{where} key {ref.key!r} must be non-empty printable ASCII")
    return text


def authorization(read: ReadSecret, namespace: str, metrics: api.MetricsSpec) -> str | None:
    """The Authorization header value `metrics` asks for, None when it asks for none.
    A Secret named twice (user name and password side by side) is read once."""
    base = "spec.metrics"
    read = _once(read)
    if metrics.basic_auth is not None:
        auth = metrics.basic_auth
        user = value(read, namespace, auth.username, f"{base}.basicAuth.username")
        if ":" in user:
            raise CredentialsError(f"{base}.basicAuth.username: secret {auth.username.name!r} "
                                   f"key {auth.username.key!r} must not contain ':'")
        password = value(read, namespace, auth.password, f"{base}.basicAuth.password")
        return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    if metrics.authorization is not None:
        a = metrics.authorization
        return f"{a.type} " + value(read, namespace, a.credentials,
                                     f"{base}.authorization.credentials")
    return None


def _once(read: ReadSecret) -> ReadSecret:
    """`read`, asking the API server at most once per Secret."""
    seen: dict[tuple[str, str], dict[str, str]] = {}

    def cached(namespace: str, name: str) -> dict[str, str]:
        if (namespace, name) not in seen:
            seen[namespace, name] = read(namespace, name)
        return seen[namespace, name]

    return cached
