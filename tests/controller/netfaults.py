"""Loopback servers that misbehave, for the adapters' and the controller's fault tests.

`Blackhole` accepts TCP connections and never answers (a hung Prometheus or JobManager);
`Answering` answers every request with a fixed status and body. Both count connections,
so a test can tell whether the controller dialled at all.
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class Blackhole:
    """Accepts connections on `host`, reads nothing, answers nothing, holds them open."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self._socket = socket.socket()
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind((host, 0))
        self._socket.listen(64)
        self.host, self.port = host, int(self._socket.getsockname()[1])
        self.url = f"http://{host}:{self.port}"
        self.accepted = 0
        self._held: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._socket.accept()
            except OSError:
                return
            with self._lock:
                self.accepted += 1
                self._held.append(conn)

    def close(self) -> None:
        self._socket.close()
        with self._lock:
            for conn in self._held:
                conn.close()


class Answering:
    """An HTTP server answering every GET with `status` and `body`."""

    def __init__(self, status: int, body: bytes, host: str = "127.0.0.1",
                 tls: tuple[Path, Path] | None = None) -> None:
        """`tls`: (certificate, key) to serve HTTPS with."""
        outer = self
        self.requests = 0
        self.authorization: str | None = None

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.requests += 1
                outer.authorization = self.headers.get("Authorization")
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_POST = do_GET

            def log_message(self, *_: object) -> None:
                pass

        self._server = ThreadingHTTPServer((host, 0), Handler)
        self.url = f"{_scheme(self._server, tls)}://{host}:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class Streaming:
    """An HTTP server answering every GET with 200 and a body it writes `chunk` by
    `chunk`, `every_s` apart, up to `total` bytes (a trickling Prometheus with a tiny
    chunk, a 200 MB answer with a large one). `length` sends a Content-Length (else the
    body ends when the connection closes); `announced`, a Content-Length other than
    `total` (a body cut short). Counts requests and bytes it got written."""

    def __init__(self, chunk: bytes, total: int, every_s: float = 0.0, length: bool = False,
                 host: str = "127.0.0.1", announced: int | None = None,
                 tls: tuple[Path, Path] | None = None) -> None:
        outer = self
        self.requests = 0
        self.sent = 0
        self.finished = 0  # answers written in full
        self._lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with outer._lock:
                    outer.requests += 1
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                if length or announced is not None:
                    self.send_header("Content-Length", str(announced or total))
                self.end_headers()
                written = 0
                try:
                    while written < total:
                        piece = chunk[:total - written]
                        self.wfile.write(piece)
                        self.wfile.flush()
                        written += len(piece)
                        with outer._lock:
                            outer.sent += len(piece)
                        if every_s:
                            time.sleep(every_s)
                except OSError:
                    return  # the client hung up
                with outer._lock:
                    outer.finished += 1

            def log_message(self, *_: object) -> None:
                pass

        self._server = ThreadingHTTPServer((host, 0), Handler)
        self._server.daemon_threads = True
        self.host, self.port = host, int(self._server.server_address[1])
        self.url = f"{_scheme(self._server, tls)}://{host}:{self.port}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _scheme(server: ThreadingHTTPServer, tls: tuple[Path, Path] | None) -> str:
    """Serve HTTPS with `tls` (certificate, key) when given; the URL's scheme."""
    if tls is None:
        return "http"
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*tls)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    return "https"
