"""The one way the controller dials Prometheus, Flink REST and flink-plugin's agents: one URL
parser, one request.

One parser. A URL is parsed once, strictly, into `Url` (scheme, host, port, path);
the allow-list is checked against that parse and the request is built from the same
parts (`http.client` gets host and port, never the string). What two parsers could
read differently is refused: backslashes, userinfo (`user:pass@`), percent-encoding,
queries and fragments, upper case or non-canonical IP forms (`127.1`, `0x7f.0.0.1`,
`2130706433`, `0177.0.0.1`, `[0:0::1]`), ports past 65535 and `.`/`..` path segments.
`url_rules` say the same for the CRD (CEL), in the same words, so the API server
refuses them before the controller sees them; an IPv6 host with Kubernetes' IP library
(`isIP`, `ip.isCanonical`: Kubernetes 1.31+), which refuses what `parse_url` refuses:
a form other than the RFC 5952 one (`[0:0::1]`), an IPv4-mapped address
(`[::ffff:7f00:1]`), or not an address at all (`[1:2:3]`).

One deadline. A call has one deadline for connecting, sending and reading the whole
answer: every socket operation gets only the time left, so a peer that trickles a
byte a second is cut off when the deadline passes, not per read. The answer is read
in chunks up to a size limit and dropped past it. `stop_all` ends every call in
flight at once (the process is shutting down).

Errors name the endpoint by the field the user wrote (`spec.metrics.prometheusUrl`),
never by what answered: no exception class names, no TLS or socket messages.
"""

from __future__ import annotations

import contextlib
import http.client
import io
import ipaddress
import json
import logging
import re
import socket
import ssl
import threading
import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

log = logging.getLogger(__name__)
MAX_URL_LENGTH = 2048
LOGGED_BODY_BYTES = 200
CHUNK_BYTES = 64 * 1024

# Written without backslashes (CEL string literals in the CRD): [.] is a dot.
_OCTET = "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_IPV4 = f"({_OCTET}[.]){{3}}{_OCTET}"
# A DNS name whose last label starts with a letter: `127.1` or `0x7f000001` would
# otherwise pass as names and be read as IPv4 addresses by a resolver.
_NAME = "([a-z0-9]([-a-z0-9]*[a-z0-9])?[.])*[a-z]([-a-z0-9]*[a-z0-9])?"
_IPV6 = "[[][0-9a-f:]+[]]"
_PATH = "(/[-A-Za-z0-9._~!$&()*+,;=:]*)*"
URL_PATTERN = f"^https?://({_IPV4}|{_NAME}|{_IPV6})(:[1-9][0-9]{{0,4}})?{_PATH}$"
_URL = re.compile(URL_PATTERN.replace("[[]", r"\[").replace("[]]", r"\]"))

# What two parsers may read differently, refused by name before the pattern is tried.
FORBIDDEN: tuple[tuple[tuple[str, ...], str], ...] = (
    (("\\",), "must not contain a backslash"),
    (("@",), "must not carry credentials (user:password@host); credentials come from "
             "Secrets named in spec.metrics.basicAuth or spec.metrics.authorization"),
    (("%",), "must not contain percent-encoding"),
    (("?", "#"), "must not have a query or a fragment"),
)
PATTERN_MESSAGE = ("must be http(s)://host[:port][/path] with a lowercase DNS name, a "
                   "dotted-quad IPv4 address or a bracketed, compressed IPv6 address as host")
PORT_MESSAGE = "must have a port between 1 and 65535"
DOT_SEGMENT_MESSAGE = "must not have . or .. path segments"
IPV6_MESSAGE = ("must write an IPv6 host as an address in canonical form (RFC 5952: the "
                "longest run of zero groups as ::, no leading zeros), an IPv4-mapped one as "
                "IPv4")
_BRACKETED_HOST = f"^https?://{_IPV6}(:[0-9]*)?(/|$)"  # the pattern's IPv6 host
# After the pattern (a port of one to five digits): a five-digit one up to 65535 only.
_FIVE_DIGIT_PORT = "^https?://[^/]*:[0-9]{5}(/|$)"
_PORT_UP_TO_65535 = ("^https?://[^/]*:(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}"
                     "|6[0-4][0-9]{3}|[1-5][0-9]{4})(/|$)")
_DOT_SEGMENT = "/[.][.]?(/|$)"


def _cel(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def url_rules() -> list[dict[str, str]]:
    """The CRD's x-kubernetes-validations of a URL field: what `parse_url` refuses, in the
    same words (the API server puts the field's path in front)."""
    rules = [{"rule": " && ".join(f"!self.contains({_cel(s)})" for s in subs),
              "message": message} for subs, message in FORBIDDEN]
    rules.append({"rule": f"self.matches({_cel(URL_PATTERN)})", "message": PATTERN_MESSAGE})
    rules.append({"rule": f"!self.matches({_cel(_FIVE_DIGIT_PORT)}) || "
                          f"self.matches({_cel(_PORT_UP_TO_65535)})", "message": PORT_MESSAGE})
    rules.append({"rule": f"!self.matches({_cel(_DOT_SEGMENT)})",
                  "message": DOT_SEGMENT_MESSAGE})
    # Kubernetes' IP library (1.31+): isIP refuses IPv4-mapped addresses, isCanonical
    # compares with the RFC 5952 form, as `ipaddress.IPv6Address.compressed` writes it.
    # The host is cut out with string functions, whose result the API server's cost
    # estimate bounds by the field's length (url()'s is unbounded: 100x over budget).
    host = "self.substring(self.indexOf('[') + 1, self.indexOf(']'))"
    # Only a host the pattern lets by: one it refuses gets the pattern's message alone.
    rules.append({"rule": f"!self.matches({_cel(_BRACKETED_HOST)}) || "
                          f"(isIP({host}) && ip.isCanonical({host}))",
                  "message": IPV6_MESSAGE})
    return rules


class Stopping(BaseException):
    """The process is stopping and this call was ended: the pass ends without writing
    a status or an Event (a BaseException, so the loop's error handling lets it by)."""


class UrlRefused(ValueError):
    """The URL is ambiguous or not an http(s) URL; the message names the field, `phrase`
    is the rest (what pydantic and the CRD say after the field's path)."""

    def __init__(self, field: str, phrase: str) -> None:
        super().__init__(f"{field} {phrase}")
        self.phrase = phrase


@dataclass(frozen=True)
class Url:
    """A parsed http(s) URL; requests are built from these parts, never from text."""

    scheme: str
    host: str  # lowercase name, dotted quad, or an IPv6 address without brackets
    port: int
    path: str  # "" or starting with "/", no trailing "/"

    @property
    def endpoint(self) -> str:
        """scheme://host:port: what a breaker guards and the allow-list names."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"

    def __str__(self) -> str:
        return self.endpoint + self.path


def parse_url(raw: str, field: str) -> Url:
    """`raw` as a `Url`, or `UrlRefused` saying why, naming `field`."""
    text = raw.strip()
    if len(text) > MAX_URL_LENGTH:
        raise UrlRefused(field, f"must be at most {MAX_URL_LENGTH} characters")
    if not text.isascii() or any(c.isspace() or not c.isprintable() for c in text):
        raise UrlRefused(field, "must be printable ASCII without spaces")
    for subs, message in FORBIDDEN:
        if any(s in text for s in subs):
            raise UrlRefused(field, f"{message}")
    if not _URL.match(text):
        raise UrlRefused(field, f"{PATTERN_MESSAGE}")
    scheme, rest = text.split("://", 1)
    authority, slash, path = rest.partition("/")
    path = (slash + path).rstrip("/")
    if authority.startswith("["):
        host, _, port_text = authority[1:].partition("]")
        port_text = port_text[1:]
        try:
            address = ipaddress.IPv6Address(host)
        except ValueError:
            raise UrlRefused(field, IPV6_MESSAGE) from None
        if address.ipv4_mapped is not None or address.compressed != host:
            raise UrlRefused(field, IPV6_MESSAGE)
    else:
        host, _, port_text = authority.partition(":")
    port = int(port_text) if port_text else (443 if scheme == "https" else 80)
    if not 1 <= port <= 65535:
        raise UrlRefused(field, PORT_MESSAGE)
    if any(seg in (".", "..") for seg in path.split("/")):
        raise UrlRefused(field, DOT_SEGMENT_MESSAGE)
    return Url(scheme, host, port, path)


# --- one request under one deadline -------------------------------------------------------


class CallFailed(Exception):
    """A call did not give a usable answer. `kind` is one of: timeout, too-large,
    unreachable, malformed, http (then `status` is set). The message names the field."""

    def __init__(self, kind: str, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.kind, self.status = kind, status


_LIVE: weakref.WeakSet[_DeadlineSocket] = weakref.WeakSet()
_LIVE_LOCK = threading.Lock()
_STOPPED = threading.Event()


def stop_all() -> None:
    """End every call in flight now and refuse new ones (the process is stopping)."""
    _STOPPED.set()
    with _LIVE_LOCK:
        live = list(_LIVE)
    for s in live:
        s.abort()


def stopping() -> bool:
    return _STOPPED.is_set()


class _DeadlineSocket:
    """A connected socket whose every operation gets only the time left until `ends`."""

    def __init__(self, sock: socket.socket, ends: float) -> None:
        self._sock, self.ends = sock, ends
        self._io_refs, self._closed = 0, False
        with _LIVE_LOCK:
            _LIVE.add(self)

    def _arm(self) -> None:
        left = self.ends - time.monotonic()
        if left <= 0 or _STOPPED.is_set():
            raise TimeoutError("deadline")
        self._sock.settimeout(left)

    def recv_into(self, buffer: Any, nbytes: int = 0) -> int:
        self._arm()
        return self._sock.recv_into(buffer, nbytes)

    def sendall(self, data: Any) -> None:
        self._arm()
        self._sock.sendall(data)

    def makefile(self, mode: str = "rb", **_: Any) -> io.BufferedReader:
        self._io_refs += 1
        return io.BufferedReader(socket.SocketIO(self, "rb"))  # type: ignore[arg-type]

    def _decref_socketios(self) -> None:  # socket.SocketIO.close calls it
        # As socket.socket: closed for real once its last file is closed too.
        self._io_refs -= 1
        if self._closed and self._io_refs <= 0:
            self._close()

    def abort(self) -> None:
        """Wake a blocked read or write (from another thread): it fails at once."""
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._closed = True
        if self._io_refs <= 0:
            self._close()

    def _close(self) -> None:
        with _LIVE_LOCK:
            _LIVE.discard(self)
        self._sock.close()

    def fileno(self) -> int:
        return self._sock.fileno()


class _Connection(http.client.HTTPConnection):
    """Connects within the call's deadline; the socket then keeps to it (TLS included:
    in `_TlsConnection` this wraps the TLS socket HTTPSConnection.connect made)."""

    ends = 0.0

    def connect(self) -> None:
        self.timeout = _left(self.ends)
        super().connect()
        self.sock = _DeadlineSocket(self.sock, self.ends)


class _TlsConnection(_Connection, http.client.HTTPSConnection):
    pass


def _left(ends: float) -> float:
    left = ends - time.monotonic()
    if left <= 0 or _STOPPED.is_set():
        raise TimeoutError("deadline")
    return left


@dataclass(frozen=True)
class Proxy:
    """An operator-configured HTTP proxy (never a tenant's): host and port."""

    host: str
    port: int


def request(method: str, url: Url, path: str, params: Mapping[str, str] | None, *,
            field: str, what: str, timeout_s: float, max_bytes: int,
            headers: Mapping[str, str] | None = None, body: bytes | None = None,
            tls: ssl.SSLContext | None = None, proxy: Proxy | None = None) -> bytes:
    """`method` `url.path + path?params` (with a JSON `body`, if any) and return the whole
    body of a 200 answer.

    Connecting, sending and reading the complete answer share one deadline of
    `timeout_s`; a body past `max_bytes` is dropped. `what` and `field` name the
    endpoint in errors ("Prometheus (spec.metrics.prometheusUrl)").
    """
    name = f"{what} ({field})"
    if _STOPPED.is_set():
        raise Stopping(f"{name} not asked: the controller is stopping")
    ends = time.monotonic() + timeout_s
    target = quote(url.path + path, safe="/-._~!$&()*+,;=:")
    if params:
        target += "?" + urlencode(params)
    host, port = (proxy.host, proxy.port) if proxy else (url.host, url.port)
    conn: _Connection
    if url.scheme == "https":
        conn = _TlsConnection(host, port, context=tls or ssl.create_default_context())
        if proxy:
            conn.set_tunnel(url.host, url.port)
    else:
        conn = _Connection(host, port)
        if proxy:  # absolute-form request line, as HTTP proxies expect
            target = url.endpoint + target
    conn.ends = ends
    try:
        conn.putrequest(method, target, skip_accept_encoding=True)
        conn.putheader("Accept", "application/json")
        conn.putheader("Accept-Encoding", "identity")
        if body is not None:
            conn.putheader("Content-Type", "application/json")
            conn.putheader("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            conn.putheader(key, value)
        conn.endheaders(body)
        response = conn.getresponse()
        if response.status != 200:
            # For the operator's debug log only, cut short; never into a message.
            log.debug("%s answered HTTP %d: %r", name, response.status,
                      response.read(LOGGED_BODY_BYTES))
            raise CallFailed("http", f"{name} answered HTTP {response.status}",
                             response.status)
        length = response.getheader("Content-Length")
        if length is not None and length.isdigit() and int(length) > max_bytes:
            raise _too_large(name, max_bytes)
        answer = bytearray()
        while chunk := response.read(CHUNK_BYTES):
            answer += chunk
            if len(answer) > max_bytes:
                raise _too_large(name, max_bytes)
        # read() returns b"" at an early EOF too: a stop, or a peer that closed short of
        # the length it announced, is not an answer.
        if _STOPPED.is_set():
            raise _stopping(name)
        if response.length:
            raise _unreachable(name)
        return bytes(answer)
    except CallFailed:
        raise
    except (OSError, http.client.HTTPException, ssl.SSLError, ValueError) as error:
        # TimeoutError is an OSError: a socket operation past the deadline.
        if _STOPPED.is_set():
            raise _stopping(name) from None
        if isinstance(error, TimeoutError) or time.monotonic() >= ends:
            raise CallFailed("timeout", f"{name} did not answer within "
                             f"{timeout_s:.1f}s") from None
        # Which error (refused, reset, TLS, not HTTP) would tell the tenant what listens.
        raise _unreachable(name) from None
    finally:
        conn.close()


# A JSON answer parsed takes up to 30 times its bytes (2 MiB of `[[1]],[[1]],…` takes
# 64 MiB in CPython), so its structure is counted before it is parsed (`parsed_bytes`),
# and an answer whose values would take more than this many times the reader's byte
# limit is dropped unparsed. The controller's own largest answers stay below it: a
# Prometheus range answer of whole-second timestamps and "0" values is bounded at 17.8
# times its bytes (18.9 at 2,000 points a series), an instant vector at 13.
PARSED_PER_BYTE = 20
# The most one parsed value of each kind takes, with the slot that holds it (CPython
# 3.11, 64-bit: a list or dict and its over-allocation; a str's header; an int or float;
# a dict entry's share of its table and of the parser's key memo, which doubles at
# powers of two), measured on answers of one kind each at several sizes
# (tests/controller/test_dial.py), and the parser's own fixed overhead.
CONTAINER_BYTES, STRING_BYTES, ELEMENT_BYTES, ENTRY_BYTES = 80, 64, 48, 64
PARSE_OVERHEAD_BYTES = 64 * 1024
# UTF-8 lead bytes of characters past Latin-1 (a str of them takes 2 bytes a character)
# and past the BMP (4 bytes): one such character widens the whole decoded text.
_PAST_LATIN1 = re.compile(rb"[\xc4-\xef]")
_PAST_BMP = re.compile(rb"[\xf0-\xff]")


def parsed_bytes(raw: bytes) -> int:
    """An upper bound of the memory `raw` takes once parsed as JSON, counted in its bytes:
    the text it is decoded to, its strings' characters again (as wide as the widest
    character, or as a `\\u` escape may make them while they are built), and one value
    per bracket, quote, comma and colon, counted even where they are a string's own
    characters (which only raises the bound)."""
    width = 4 if _PAST_BMP.search(raw) else 2 if _PAST_LATIN1.search(raw) else 1
    # An escape builds its string in a growing buffer: up to 6.25 bytes a character.
    strings_width = 7 if b"\\u" in raw else width
    containers = raw.count(b"[") + raw.count(b"{")
    return (len(raw) * (width + strings_width) + PARSE_OVERHEAD_BYTES
            + CONTAINER_BYTES * containers
            + STRING_BYTES * (raw.count(b'"') // 2)
            + ELEMENT_BYTES * (raw.count(b",") + containers)
            + ENTRY_BYTES * raw.count(b":"))


def decode_json(raw: bytes, name: str, max_parsed: int) -> Any:
    """`raw` parsed as JSON, or CallFailed: too-large when parsing it would take more than
    `max_parsed` bytes (`parsed_bytes`), malformed when it is not JSON or nests deeper
    than the parser recurses. `name` names the endpoint; the answer is never quoted."""
    if parsed_bytes(raw) > max_parsed:
        raise CallFailed("too-large", f"{name} answered JSON that would take more than "
                         f"{max_parsed // 2**20} MiB to read; the answer was dropped")
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):  # RecursionError: nested past the parser's depth
        raise CallFailed("malformed", f"{name} did not answer JSON") from None


def _stopping(name: str) -> Stopping:
    return Stopping(f"{name}: call ended, the controller is stopping")


def _unreachable(name: str) -> CallFailed:
    return CallFailed("unreachable", f"{name} is unreachable or did not speak HTTP(S) as expected")


def _too_large(name: str, max_bytes: int) -> CallFailed:
    return CallFailed("too-large", f"{name} answered more than {max_bytes // 2**20} MiB; "
                      f"the answer was dropped")
