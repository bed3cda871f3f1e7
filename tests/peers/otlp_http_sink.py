"""An OTLP/HTTP receiver that keeps what it is sent: the stand-in for Loki's OTLP endpoint
(Loki is AGPL and is not built here), so a test sees the grade log events that the
Collector's logs/out pipeline delivers."""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord


class OtlpHttpSink:
    def __init__(self) -> None:
        self.logs: list[ExportLogsServiceRequest] = []
        self._lock = threading.Lock()
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path.endswith("/v1/logs"):
                    with sink._lock:
                        sink.logs.append(ExportLogsServiceRequest.FromString(body))
                reply = ExportLogsServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def host_port(self) -> str:
        return f"127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> OtlpHttpSink:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def records(self) -> list[LogRecord]:
        with self._lock:
            return [
                r
                for req in self.logs
                for rl in req.resource_logs
                for sl in rl.scope_logs
                for r in sl.log_records
            ]

    def wait_for(self, ok: Callable[[list[LogRecord]], bool], timeout: float = 30.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if ok(self.records()):
                return True
            time.sleep(0.2)
        return ok(self.records())
