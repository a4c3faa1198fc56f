"""What the controller may dial, and for how long: pass deadlines, per-endpoint circuit
breakers and the allow-list for Prometheus URLs written by tenants.

A pass runs under one `Deadline` (set by the operator shell around the pass, read
here through a context variable, so the loop needs no parameter for it). Every
Prometheus and Flink REST call takes its timeout from it, so a hung endpoint costs a
pass at most its budget, not `timeout × retries × queries`. An endpoint that timed
out is not dialled again by any pass until its cool-down ends (`Breakers`), so many
policies pointing at one hung address hold no worker threads.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import ssl
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from controller.adapters import dial
from controller.adapters.dial import Url, UrlRefused, parse_url

# A call given less than this (or than half the budget) that times out says more about
# the budget than about the endpoint: it does not trip the breaker.
TRIP_AFTER_S = 2.0
DEFAULT_CALL_TIMEOUT_S = 10.0
# Cool-down after a timeout; doubled for each further timeout in a row, up to the cap.
COOLDOWN_S = 30.0
COOLDOWN_MAX_S = 300.0
# Bodies of unexpected answers are logged (at debug) cut to this length, never reported.


class NotAsked(Exception):
    """The call was not made: no budget left, or the endpoint is cooling down."""


class DeadlineExceeded(NotAsked, TimeoutError):
    """The pass has no time left for another call."""


@dataclass(frozen=True)
class Deadline:
    """The end of a pass's outbound budget, on the monotonic clock."""

    budget_s: float
    ends: float

    @staticmethod
    def after(budget_s: float) -> Deadline:
        return Deadline(budget_s, time.monotonic() + budget_s)

    def remaining(self) -> float:
        return max(0.0, self.ends - time.monotonic())

    def call_timeout(self) -> float:
        """One call may use at most half the budget, so a hung first endpoint still
        leaves time to ask the others (and to say which one hung)."""
        left = self.remaining()
        if left <= 0.05:
            raise DeadlineExceeded(f"the pass's {self.budget_s:g}s budget for outbound calls "
                                   "is used up")
        return min(left, self.budget_s / 2)


PASS_DEADLINE: ContextVar[Deadline | None] = ContextVar("hybridscaler_pass_deadline",
                                                        default=None)


@contextlib.contextmanager
def deadline(budget_s: float) -> Iterator[Deadline]:
    """Run the body under a fresh pass deadline."""
    d = Deadline.after(budget_s)
    token = PASS_DEADLINE.set(d)
    try:
        yield d
    finally:
        PASS_DEADLINE.reset(token)


def call_timeout(default_s: float = DEFAULT_CALL_TIMEOUT_S) -> float:
    """The timeout for the next call: from the pass's deadline, else `default_s`."""
    d = PASS_DEADLINE.get()
    return default_s if d is None else min(default_s, d.call_timeout())


def trips(timeout_s: float) -> bool:
    """Whether a call that timed out after `timeout_s` counts against its endpoint."""
    d = PASS_DEADLINE.get()
    return timeout_s >= min(TRIP_AFTER_S, (d.budget_s / 2) if d else TRIP_AFTER_S)


class CircuitOpen(NotAsked, ConnectionError):
    """The endpoint timed out recently; it is not dialled until its cool-down ends."""


class Breakers:
    """Per endpoint (scheme://host:port), when it may be dialled again. Thread-safe and
    bounded: the least recently touched endpoints are forgotten beyond `capacity`."""

    def __init__(self, cooldown_s: float = COOLDOWN_S, cooldown_max_s: float = COOLDOWN_MAX_S,
                 capacity: int = 4096) -> None:
        self.cooldown_s, self.cooldown_max_s, self.capacity = cooldown_s, cooldown_max_s, capacity
        self._open: OrderedDict[str, tuple[float, int]] = OrderedDict()  # until, timeouts
        self._lock = threading.Lock()

    def check(self, endpoint: str) -> None:
        with self._lock:
            until, _ = self._open.get(endpoint, (0.0, 0))
        wait = until - time.monotonic()
        if wait > 0:
            # Wall-clock and rounded, so the message (and a status holding it) stays put
            # from pass to pass during one cool-down.
            again = time.strftime("%H:%M:%SZ", time.gmtime(round(time.time() + wait, -1)))
            raise CircuitOpen(f"{endpoint} timed out recently; not dialled again before "
                              f"{again}")

    def failed(self, endpoint: str) -> None:
        with self._lock:
            _, timeouts = self._open.pop(endpoint, (0.0, 0))
            cooldown = min(self.cooldown_max_s, self.cooldown_s * 2**min(timeouts, 16))
            self._open[endpoint] = (time.monotonic() + cooldown, timeouts + 1)
            while len(self._open) > self.capacity:
                self._open.popitem(last=False)

    def succeeded(self, endpoint: str) -> None:
        with self._lock:
            self._open.pop(endpoint, None)


BREAKERS = Breakers()


def admit(endpoint: str, breakers: Breakers, default_s: float) -> float:
    """The timeout for a call to `endpoint` now; raises `NotAsked` when none may be made."""
    breakers.check(endpoint)
    return call_timeout(default_s)


def timed_out(endpoint: str, breakers: Breakers, timeout_s: float) -> None:
    """Count a timeout against `endpoint`, unless the budget rather than it was short."""
    if trips(timeout_s):
        breakers.failed(endpoint)


def get(url: Url, path: str, params: Mapping[str, str] | None, *,
        failed: Callable[[str, str], Exception], breakers: Breakers, default_s: float,
        field: str, what: str, max_bytes: int, headers: Mapping[str, str] | None = None,
        tls: ssl.SSLContext | None = None, proxy: dial.Proxy | None = None) -> bytes:
    """`dial.request` (GET) within the pass's budget and behind `url`'s breaker: a call that times
    out trips it, one that answers resets it. Every failure is raised as
    `failed(message, kind)` (kind as `dial.CallFailed`'s; "timeout" for an open breaker)."""
    return request("GET", url, path, params, failed=failed, breakers=breakers,
                   default_s=default_s, field=field, what=what, max_bytes=max_bytes,
                   headers=headers, tls=tls, proxy=proxy)


def request(method: str, url: Url, path: str, params: Mapping[str, str] | None, *,
            failed: Callable[[str, str], Exception], breakers: Breakers, default_s: float,
            field: str, what: str, max_bytes: int, headers: Mapping[str, str] | None = None,
            body: bytes | None = None, tls: ssl.SSLContext | None = None,
            proxy: dial.Proxy | None = None,
            status_kinds: Mapping[int, str] | None = None) -> bytes:
    """`get` with another method and a JSON `body`; `status_kinds` names the kind of an
    answer's HTTP code where the caller tells them apart (else "http")."""
    try:
        timeout = admit(url.endpoint, breakers, default_s)
    except NotAsked as e:
        # Cooling down after a timeout is still the endpoint's fault.
        raise failed(f"{what} ({field}) not asked: {e}",
                     "timeout" if isinstance(e, CircuitOpen) else "") from e
    try:
        answer = dial.request(method, url, path, params, field=field, what=what,
                              timeout_s=timeout, max_bytes=max_bytes, headers=headers,
                              body=body, tls=tls, proxy=proxy)
    except dial.CallFailed as e:
        if e.kind == "timeout":
            timed_out(url.endpoint, breakers, timeout)
        raise failed(str(e), (status_kinds or {}).get(e.status or 0, e.kind)) from None
    breakers.succeeded(url.endpoint)
    return answer


def request_json(method: str, url: Url, path: str, params: Mapping[str, str] | None, *,
                 failed: Callable[[str, str], Exception], field: str, what: str,
                 max_bytes: int, **call: Any) -> Any:
    """`request`, its answer parsed (`dial.decode_json`, at most `dial.PARSED_PER_BYTE`
    times `max_bytes`): an answer too large to parse, or not JSON, fails as
    `failed(message, kind)` as well ("too-large", "malformed")."""
    answer = request(method, url, path, params, failed=failed, field=field, what=what,
                     max_bytes=max_bytes, **call)
    try:
        return dial.decode_json(answer, f"{what} ({field})", dial.PARSED_PER_BYTE * max_bytes)
    except dial.CallFailed as e:
        raise failed(str(e), e.kind) from None


def get_json(url: Url, path: str, params: Mapping[str, str] | None, *,
             failed: Callable[[str, str], Exception], field: str, what: str,
             max_bytes: int, **call: Any) -> Any:
    """`get`, its answer parsed as `request_json` parses it."""
    return request_json("GET", url, path, params, failed=failed, field=field, what=what,
                        max_bytes=max_bytes, **call)


Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class AllowList:
    """Hosts a tenant's `spec.metrics.prometheusUrl` may name.

    Entries are host names (`prometheus.monitoring.svc`; a leading dot, `.example.com`,
    allows every name below it), `host:port`, or CIDRs (`10.0.0.0/8`), which match IP
    literals and names whose every address lies in them. The operator's default
    Prometheus is always allowed. The check is made before anything is dialled.
    """

    def __init__(self, entries: Sequence[str], always: Sequence[str] = (),
                 resolve: bool = True) -> None:
        self.names: set[str] = set()
        self.suffixes: list[str] = []
        self.host_ports: set[tuple[str, int]] = set()
        self.networks: list[Network] = []
        self.resolve = resolve
        self.always = {parse_url(u, "--prometheus-url").endpoint for u in always}
        for raw in entries:
            entry = raw.strip().lower()
            if not entry:
                continue
            if "/" in entry:
                self.networks.append(ipaddress.ip_network(entry, strict=False))
            elif entry.startswith("."):
                self.suffixes.append(entry)
            elif entry.count(":") == 1 and entry.rsplit(":", 1)[1].isdigit():
                host, port = entry.rsplit(":", 1)
                self.host_ports.add((host, int(port)))
            else:
                self.names.add(entry.strip("[]"))

    def refusal(self, url: Url | str, field: str = "spec.metrics.prometheusUrl") -> str | None:
        """Why `url` may not be dialled, naming the field, or None. A string is parsed
        first (controller.adapters.dial); the request must be built from the same `Url`."""
        if isinstance(url, str):
            try:
                url = parse_url(url, field)
            except UrlRefused as e:
                return f"{e}; it was not contacted"
        if url.endpoint in self.always:
            return None
        host, port = url.host, url.port
        if host in self.names or (host, port) in self.host_ports or any(
                host.endswith(s) for s in self.suffixes):
            return None
        if self.networks and self._in_networks(host, port):
            return None
        return (f"{field}: host {host}:{port} is not in the controller's "
                f"allow-list of Prometheus hosts; it was not contacted (ask the operator to add "
                f"it, or leave prometheusUrl unset for the default Prometheus)")

    def _in_networks(self, host: str, port: int) -> bool:
        try:
            addresses = [ipaddress.ip_address(host)]
        except ValueError:
            if not self.resolve:
                return False
            try:
                infos = socket.getaddrinfo(host, port, proto=socket.IPPROTO_TCP)
            except OSError:
                return False
            addresses = [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]
        return bool(addresses) and all(
            any(a in n for n in self.networks) for a in addresses)
