"""OTLP/HTTP round trips, server parses: the event-loop server against a thread per connection.

docs/pipeline.md ("Measured limits") quoted ~340 K spans/s for the stdlib
`ThreadingHTTPServer`; the OTLP/HTTP receiver is now `attest_otel/httpserver.py` (an asyncio
loop holding every connection, pool threads seeing whole requests). Both are measured in
one run on the same requests (`bench_decode.make_request`, 24 traces: 600 spans, 0.42 MB),
posted over kept-alive connections by `--clients` threads,
each request parsed with `ParseFromString` on the server and answered 200. Best of
`--rounds` rounds of `--requests` requests.

    .venv/bin/python bench/bench_http_roundtrip.py
"""

from __future__ import annotations

import argparse
import http.client
import random
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

sys.path.insert(0, str(Path(__file__).parent))
from bench_decode import make_request

from attest_otel.sidecar.http_receiver import HttpReceiver
from attest_otel.sidecar.receivers import OK, Outcome


def _accept(body: bytes) -> Outcome:
    ExportTraceServiceRequest.FromString(body)
    return OK


def _threading_server() -> tuple[ThreadingHTTPServer, int]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            _accept(body)
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, int(server.server_address[1])


def _round(port: int, body: bytes, requests: int, clients: int) -> float:
    """Seconds for `requests` posts spread over `clients` kept-alive connections."""
    per = requests // clients

    def client() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        for _ in range(per):
            conn.request("POST", "/v1/traces", body, {"Content-Type": "application/x-protobuf"})
            response = conn.getresponse()
            response.read()
            assert response.status == 200, response.status
        conn.close()

    threads = [threading.Thread(target=client) for _ in range(clients)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    request = make_request(random.Random(7), 24)
    spans = sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)
    body = request.SerializeToString()
    receiver = HttpReceiver("127.0.0.1:0", _accept, max_body_bytes=64 << 20)
    event_loop_port = receiver.start()
    threaded, threaded_port = _threading_server()
    print(f"requests of {spans} spans, {len(body) / 1e6:.2f} MB; {args.clients} clients")
    try:
        for name, port in (
            ("httpserver (event loop)", event_loop_port),
            ("ThreadingHTTPServer", threaded_port),
        ):
            _round(port, body, 20, args.clients)  # warm up
            best = min(_round(port, body, args.requests, args.clients) for _ in range(args.rounds))
            total = args.requests // args.clients * args.clients * spans
            print(f"{name:26} {total / best / 1000:6.0f} K spans/s")
    finally:
        receiver.stop()
        threaded.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
