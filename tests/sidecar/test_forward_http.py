"""Forwarding over OTLP/HTTP (`HttpSender`) to a real HTTP server on a port the OS picked.

The downstream is scripted per request: 413 for bodies over a size (the sender must split),
a `partial_success` with rejected spans, an answer that comes after the forward timeout
(the usual source of duplicates: counted in `possible_duplicates`, and the downstream does
see the spans twice), and it records the headers each request came with.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from attest_otel.sidecar.config import ForwardConfig
from attest_otel.sidecar.forward import Forwarder, ForwardItem

pytestmark = pytest.mark.timeout(60)


class _Downstream(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.bodies: list[bytes] = []
        self.headers_seen: list[dict[str, str]] = []
        self.answer: Callable[[bytes, int], tuple[int, bytes, float]] = lambda b, n: (200, b"", 0)
        self.lock = threading.Lock()

    def span_ids(self) -> list[bytes]:
        with self.lock:
            bodies = list(self.bodies)
        return [
            s.span_id
            for b in bodies
            for rs in ExportTraceServiceRequest.FromString(b).resource_spans
            for ss in rs.scope_spans
            for s in ss.spans
        ]


class _Handler(BaseHTTPRequestHandler):
    server: _Downstream
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        with self.server.lock:
            n = len(self.server.bodies)
            status, payload, delay = self.server.answer(body, n)
            if status == 200:
                self.server.bodies.append(body)
            self.server.headers_seen.append({k.lower(): v for k, v in self.headers.items()})
        time.sleep(delay)
        self.send_response(status)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


@pytest.fixture
def downstream() -> Iterator[_Downstream]:
    server = _Downstream()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def _request(n: int) -> bytes:
    request = ExportTraceServiceRequest()
    spans = request.resource_spans.add().scope_spans.add().spans
    for i in range(n):
        span = spans.add()
        span.trace_id, span.span_id, span.name = b"\x01" * 16, i.to_bytes(8, "big"), "x" * 200
    data: bytes = request.SerializeToString()
    return data


def _forward(downstream: _Downstream, data: bytes, spans: int, **kw: Any) -> Forwarder:
    settings = ForwardConfig(
        endpoint=f"127.0.0.1:{downstream.server_address[1]}",
        protocol="http/protobuf",
        workers=1,
        initial_backoff_s=0.05,
        max_backoff_s=0.2,
        **kw,
    )
    done: list[tuple[int, ...]] = []
    fwd = Forwarder(settings, on_done=done.append)
    fwd.start()
    fwd.offer(ForwardItem(data, spans, (7,), mergeable=False))
    assert fwd.shutdown(20)
    assert done == [(7,)]
    return fwd


def test_413_splits_until_the_pieces_fit_and_headers_go_with_each(
    downstream: _Downstream,
) -> None:
    downstream.answer = lambda body, n: (413, b"", 0) if len(body) > 4000 else (200, b"", 0)
    fwd = _forward(downstream, _request(64), 64, headers={"x-api-key": "k1"})
    assert sorted(downstream.span_ids()) == [i.to_bytes(8, "big") for i in range(64)]
    assert all(len(b) <= 4000 for b in downstream.bodies)
    assert {h.get("x-api-key") for h in downstream.headers_seen} == {"k1"}
    assert fwd.stats.spans_forwarded == 64 and fwd.stats.possible_duplicates == 0


def test_partial_success_rejections_are_counted_not_retried(downstream: _Downstream) -> None:
    partial = ExportTraceServiceResponse()
    partial.partial_success.rejected_spans = 3
    partial.partial_success.error_message = "3 spans too old"
    downstream.answer = lambda body, n: (200, partial.SerializeToString(), 0)
    fwd = _forward(downstream, _request(10), 10)
    assert len(downstream.bodies) == 1
    assert (fwd.stats.spans_rejected, fwd.stats.spans_forwarded) == (3, 7)


def test_an_answer_after_the_timeout_means_a_counted_duplicate(downstream: _Downstream) -> None:
    # The first attempt is taken (and kept) by the downstream but answered too late.
    downstream.answer = lambda body, n: (200, b"", 1.5 if n == 0 else 0)
    fwd = _forward(downstream, _request(5), 5, timeout_s=0.5)
    ids = downstream.span_ids()
    assert len(ids) == 10 and len(set(ids)) == 5  # every span arrived twice...
    assert fwd.stats.possible_duplicates == 5  # ...and the sidecar says so
    assert fwd.stats.spans_forwarded == 5
