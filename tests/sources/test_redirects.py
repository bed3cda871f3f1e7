"""The source client follows redirects within the origin only (issue 16, item 4): a request
carries the user's headers (an API key, a tenant id), and a redirect must not take them to
another host. Two stdlib servers on ports the OS picks: one redirects, one records."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from attest_otel.errors import SourceError
from attest_otel.sources.http import HttpClient, HttpOptions


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    location = ""
    seen: list[tuple[str, str | None]]


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.server.seen.append((self.path, self.headers.get("X-Api-Key")))
        if self.path.startswith("/moved") and self.server.location:
            self.send_response(302)
            self.send_header("Location", self.server.location)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")


def _serve() -> _Server:
    server = _Server(("127.0.0.1", 0), _Handler)
    server.seen = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def servers() -> Iterator[tuple[_Server, _Server]]:
    one, other = _serve(), _serve()
    try:
        yield one, other
    finally:
        for s in (one, other):
            s.shutdown()
            s.server_close()


def test_redirects_are_followed_within_the_origin_only(
    servers: tuple[_Server, _Server],
) -> None:
    one, other = servers
    base = f"http://127.0.0.1:{one.server_address[1]}"
    options = HttpOptions(headers=(("X-Api-Key", "secret"),))
    one.location = "/final"
    with HttpClient("jaeger", options) as client:
        assert client.get(f"{base}/moved").status == 200
    assert one.seen == [("/moved", "secret"), ("/final", "secret")]
    one.location = f"http://127.0.0.1:{other.server_address[1]}/steal"
    with (
        HttpClient("jaeger", options) as client,
        pytest.raises(SourceError, match="redirected to another origin"),
    ):
        client.get(f"{base}/moved")
    assert other.seen == []  # the key never went to the other origin
