"""The next hop the sidecar forwards to: an OTLP/gRPC server that keeps the raw bytes.

Raw, because the tests assert that a request with no GenAI span arrives as exactly the
bytes it was sent as. It can be told to answer UNAVAILABLE (`down`), to be slow (`delay_s`),
and can be stopped and started again on the same port (a downstream outage).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent import futures
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

_SERVICES = {
    "opentelemetry.proto.collector.trace.v1.TraceService": "traces",
    "opentelemetry.proto.collector.logs.v1.LogsService": "logs",
    "opentelemetry.proto.collector.metrics.v1.MetricsService": "metrics",
}


class Downstream:
    def __init__(self, port: int = 0, credentials: grpc.ServerCredentials | None = None) -> None:
        self.port = port
        self.credentials = credentials
        self.down = False
        self.delay_s = 0.0
        self.requests: dict[str, list[bytes]] = {"traces": [], "logs": [], "metrics": []}
        self.metadata: dict[str, list[dict[str, str]]] = {"traces": [], "logs": [], "metrics": []}
        """The metadata (headers) each request came with, by signal."""
        self.refused = 0
        self.all_down = False
        """With `down`: logs and metrics are refused too (else only traces)."""
        self._cond = threading.Condition()
        self._server: grpc.Server | None = None

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> Downstream:
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=8),
            options=[("grpc.max_receive_message_length", 64 << 20)],
        )
        handlers = []
        for service, signal in _SERVICES.items():
            handlers.append(
                grpc.method_handlers_generic_handler(
                    service,
                    {
                        "Export": grpc.unary_unary_rpc_method_handler(
                            self._handler(signal),
                            request_deserializer=None,
                            response_serializer=None,
                        )
                    },
                )
            )
        server.add_generic_rpc_handlers(handlers)
        address = f"127.0.0.1:{self.port}"
        self.port = (
            server.add_secure_port(address, self.credentials)
            if self.credentials
            else server.add_insecure_port(address)
        )
        server.start()
        self._server = server
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(None).wait(5)
            self._server = None

    def _handler(self, signal: str) -> Callable[[bytes, Any], bytes]:
        def export(request: bytes, context: Any) -> bytes:
            if self.delay_s:
                time.sleep(self.delay_s)
            if self.down and (signal == "traces" or self.all_down):
                with self._cond:
                    self.refused += 1
                context.abort(grpc.StatusCode.UNAVAILABLE, "downstream told to be down")
            with self._cond:
                self.requests[signal].append(request)
                self.metadata[signal].append({k: str(v) for k, v in context.invocation_metadata()})
                self._cond.notify_all()
            return b""

        return export

    # --- reading what arrived ----------------------------------------------------------------

    def trace_requests(self) -> list[bytes]:
        with self._cond:
            return list(self.requests["traces"])

    def spans(self) -> list[Any]:
        out = []
        for raw in self.trace_requests():
            req = ExportTraceServiceRequest.FromString(raw)
            out.extend(s for rs in req.resource_spans for ss in rs.scope_spans for s in ss.spans)
        return out

    def span_ids(self) -> list[str]:
        return [s.span_id.hex() for s in self.spans()]

    def wait_for(self, predicate: Callable[[Downstream], bool], timeout: float = 15.0) -> bool:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                self._cond.release()
                try:
                    ok = predicate(self)
                finally:
                    self._cond.acquire()
                if ok:
                    return True
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(min(remaining, 0.2))

    def wait_spans(self, span_ids: set[str], timeout: float = 15.0) -> bool:
        return self.wait_for(lambda d: span_ids <= set(d.span_ids()), timeout)
