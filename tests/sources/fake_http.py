"""A tiny HTTP server on a free loopback port that answers as a backend would.

Routes map a path to a `Reply` (or a function of the request returning one). A reply can
be slow (headers after `delay_s`), dribble its body, or be cut short (a `Content-Length`
larger than what is sent, then the connection closes): the awkward answers a real
backend gives on a bad day. Everything it was asked is kept in `requests`.
"""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit


@dataclass
class Reply:
    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    """Wait this long before sending anything (bounded by the server's stop)."""
    drip_s: float = 0.0
    """Send the body one byte at a time with this pause between bytes."""
    truncate_to: int | None = None
    """Announce the whole body's length but send only this many bytes, then close."""


@dataclass
class Seen:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]


Route = Reply | Callable[[Seen], Reply]


class FakeBackend:
    def __init__(
        self, routes: dict[str, Route] | None = None, *, tls: ssl.SSLContext | None = None
    ) -> None:
        self.routes: dict[str, Route] = dict(routes or {})
        self.requests: list[Seen] = []
        self._stop = threading.Event()
        backend = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                seen = Seen(
                    "GET",
                    unquote(parts.path),
                    parse_qs(parts.query),
                    {k.lower(): v for k, v in self.headers.items()},
                )
                backend.requests.append(seen)
                route = backend.routes.get(seen.path)
                if route is None:
                    reply = Reply(404, b"404 page not found\n", "text/plain; charset=utf-8")
                elif callable(route):
                    reply = route(seen)
                else:
                    reply = route
                self._answer(reply)

            def _answer(self, reply: Reply) -> None:
                if reply.delay_s and backend._stop.wait(reply.delay_s):
                    return
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", reply.content_type)
                    self.send_header("Content-Length", str(len(reply.body)))
                    for k, v in reply.headers.items():
                        self.send_header(k, v)
                    if reply.truncate_to is not None:
                        self.send_header("Connection", "close")
                    self.end_headers()
                    body = reply.body
                    if reply.truncate_to is not None:
                        self.wfile.write(body[: reply.truncate_to])
                        self.wfile.flush()
                        self.close_connection = True
                        return
                    if reply.drip_s:
                        for i in range(len(body)):
                            if backend._stop.wait(reply.drip_s):
                                return
                            self.wfile.write(body[i : i + 1])
                            self.wfile.flush()
                        return
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._scheme = "http"
        if tls is not None:
            self._server.socket = tls.wrap_socket(self._server.socket, server_side=True)
            self._scheme = "https"
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), name="fake-backend", daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"{self._scheme}://{host}:{port}"

    def start(self) -> FakeBackend:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def refused_url() -> str:
    """A loopback URL where nothing listens (the port was free a moment ago)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"
