"""Test OTLP receivers: real servers on 127.0.0.1 that record every export request.

`OtlpGrpcReceiver` serves the three OTLP gRPC services (traces, logs, metrics) from the
generated `opentelemetry.proto.collector.*` stubs; `OtlpHttpReceiver` serves
`POST /v1/traces|logs|metrics` (binary protobuf, gzip or not) on the stdlib HTTP server.
Both keep the decoded requests and the headers they came with, can be told to fail
(`fail_with`) to exercise an exporter's error path, and wait for data without sleeping in
the test (`wait_for`).

    with OtlpGrpcReceiver() as receiver:
        exporter = OTLPSpanExporter(endpoint=receiver.endpoint)
        ...
        assert receiver.wait_for(lambda r: len(r.spans()) == 3)
"""

from __future__ import annotations

import gzip
import threading
import time
import zlib
from collections.abc import Callable
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc
from opentelemetry.proto.collector.metrics.v1 import (
    metrics_service_pb2,
    metrics_service_pb2_grpc,
)
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

__all__ = ["OtlpGrpcReceiver", "OtlpHttpReceiver", "OtlpRecorder"]

_REQUEST_TYPES: dict[str, Any] = {
    "traces": trace_service_pb2.ExportTraceServiceRequest,
    "logs": logs_service_pb2.ExportLogsServiceRequest,
    "metrics": metrics_service_pb2.ExportMetricsServiceRequest,
}
_RESPONSE_TYPES: dict[str, Any] = {
    "traces": trace_service_pb2.ExportTraceServiceResponse,
    "logs": logs_service_pb2.ExportLogsServiceResponse,
    "metrics": metrics_service_pb2.ExportMetricsServiceResponse,
}


def _untyped(module: Any) -> Any:
    """The generated gRPC modules have no type hints; this keeps mypy's strict mode quiet
    about calling into them without silencing anything else."""
    return module


class OtlpRecorder:
    """The requests received so far, by signal, and helpers to read them flat."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.requests: dict[str, list[Any]] = {"traces": [], "logs": [], "metrics": []}
        self.headers: dict[str, list[dict[str, str]]] = {"traces": [], "logs": [], "metrics": []}

    def _record(self, signal: str, request: Any, headers: dict[str, str]) -> None:
        with self._cond:
            self.requests[signal].append(request)
            self.headers[signal].append(headers)
            self._cond.notify_all()

    def clear(self) -> None:
        with self._cond:
            for signal in self.requests:
                self.requests[signal].clear()
                self.headers[signal].clear()

    def wait_for(self, predicate: Callable[[OtlpRecorder], bool], timeout: float = 10.0) -> bool:
        """True as soon as `predicate(self)` holds; False when `timeout` passes first."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not predicate(self):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
            return True

    def resource_spans(self) -> list[Any]:
        with self._cond:
            return [rs for req in self.requests["traces"] for rs in req.resource_spans]

    def spans(self) -> list[Any]:
        return [s for rs in self.resource_spans() for ss in rs.scope_spans for s in ss.spans]

    def resource_logs(self) -> list[Any]:
        with self._cond:
            return [rl for req in self.requests["logs"] for rl in req.resource_logs]

    def log_records(self) -> list[Any]:
        return [r for rl in self.resource_logs() for sl in rl.scope_logs for r in sl.log_records]

    def resource_metrics(self) -> list[Any]:
        with self._cond:
            return [rm for req in self.requests["metrics"] for rm in req.resource_metrics]

    def metrics(self) -> list[Any]:
        return [m for rm in self.resource_metrics() for sm in rm.scope_metrics for m in sm.metrics]

    def metric(self, name: str, *, first: bool = False) -> Any:
        """The last (or first) received copy of a metric: cumulative metrics repeat in every
        export, but exemplars only come with the collection that saw the measurement."""
        found = [m for m in self.metrics() if m.name == name]
        if not found:
            return None
        return found[0] if first else found[-1]


class _GrpcService:
    def __init__(self, receiver: OtlpGrpcReceiver, signal: str) -> None:
        self.receiver = receiver
        self.signal = signal

    def Export(self, request: Any, context: grpc.ServicerContext) -> Any:
        headers = {k: str(v) for k, v in context.invocation_metadata()}
        self.receiver._record(self.signal, request, headers)
        code = self.receiver.fail_with
        if code is not None:
            context.abort(code, f"test receiver told to fail with {code.name}")
        return _RESPONSE_TYPES[self.signal]()


class OtlpGrpcReceiver(OtlpRecorder):
    """OTLP/gRPC on 127.0.0.1:<free port>; `endpoint` is what an exporter is given.

    `fail_with` (a grpc.StatusCode) makes every Export fail with that status after the
    request has been recorded.
    """

    def __init__(self) -> None:
        super().__init__()
        self.fail_with: grpc.StatusCode | None = None
        self._server: grpc.Server | None = None
        self.port = 0

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> OtlpGrpcReceiver:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        _untyped(trace_service_pb2_grpc).add_TraceServiceServicer_to_server(
            _GrpcService(self, "traces"), server
        )
        _untyped(logs_service_pb2_grpc).add_LogsServiceServicer_to_server(
            _GrpcService(self, "logs"), server
        )
        _untyped(metrics_service_pb2_grpc).add_MetricsServiceServicer_to_server(
            _GrpcService(self, "metrics"), server
        )
        self.port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        self._server = server
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=None).wait(5)
            self._server = None

    def __enter__(self) -> OtlpGrpcReceiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _HttpHandler(BaseHTTPRequestHandler):
    server: _HttpServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: pytest shows stderr of failing tests, and access logs are noise there."""

    def do_POST(self) -> None:
        receiver = self.server.receiver
        signal = self.path.rstrip("/").rsplit("/", 1)[-1]
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.path.rstrip("/") != f"/v1/{signal}" or signal not in _REQUEST_TYPES:
            self._answer(404, b"")
            return
        encoding = (self.headers.get("Content-Encoding") or "").lower()
        if encoding == "gzip":
            body = gzip.decompress(body)
        elif encoding == "deflate":
            body = zlib.decompress(body)
        request = _REQUEST_TYPES[signal]()
        request.ParseFromString(body)
        receiver._record(signal, request, {k.lower(): v for k, v in self.headers.items()})
        if receiver.fail_with is not None:
            self._answer(receiver.fail_with, b"")
            return
        self._answer(200, _RESPONSE_TYPES[signal]().SerializeToString())

    def _answer(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _HttpServer(ThreadingHTTPServer):
    daemon_threads = True
    receiver: OtlpHttpReceiver


class OtlpHttpReceiver(OtlpRecorder):
    """OTLP/HTTP (binary protobuf) on 127.0.0.1:<free port>; `endpoint` is the base URL.

    `fail_with` (an HTTP status, e.g. 400 or 503) answers every request with it after the
    request has been recorded.
    """

    def __init__(self) -> None:
        super().__init__()
        self.fail_with: int | None = None
        self._server: _HttpServer | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> OtlpHttpReceiver:
        server = _HttpServer(("127.0.0.1", 0), _HttpHandler)
        server.receiver = self
        self.port = server.server_address[1]
        # A short poll interval: stop() waits for the serve loop to notice, 0.5 s by default.
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="otlp-http-receiver",
            daemon=True,
        )
        self._thread.start()
        self._server = server
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None

    def __enter__(self) -> OtlpHttpReceiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
