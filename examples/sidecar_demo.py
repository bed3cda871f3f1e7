"""`make demo`, sidecar part: a scripted agent -> attest-otel serve -> a backend that prints.

Starts a stand-in backend (an OTLP/gRPC server in this process that prints every graded
run as it arrives) and the sidecar on free ports with its embedded store; runs a small
agent instrumented with the real OpenTelemetry SDK (three runs: clean, a recovered tool
error, an unrecovered one), waits for the grades, then runs `grade --trace-id` on the
failing run from the store, and stops everything.

    .venv/bin/python examples/sidecar_demo.py
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Status, StatusCode, Tracer

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _value(kvs: Any, key: str) -> Any:
    for kv in kvs:
        if kv.key == key:
            which = kv.value.WhichOneof("value")
            return getattr(kv.value, which) if which else None
    return None


class Backend:
    """Prints each agent span that arrives with a grade on it."""

    def __init__(self) -> None:
        self.graded: list[str] = []
        self.lock = threading.Lock()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        services = (
            "opentelemetry.proto.collector.trace.v1.TraceService",
            "opentelemetry.proto.collector.logs.v1.LogsService",
            "opentelemetry.proto.collector.metrics.v1.MetricsService",
        )
        self.server.add_generic_rpc_handlers(
            [
                grpc.method_handlers_generic_handler(
                    service,
                    {
                        "Export": grpc.unary_unary_rpc_method_handler(
                            self.export if "Trace" in service else (lambda r, c: b""),
                            request_deserializer=None,
                            response_serializer=None,
                        )
                    },
                )
                for service in services
            ]
        )
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def export(self, request: bytes, context: Any) -> bytes:
        req = ExportTraceServiceRequest.FromString(request)
        for rs in req.resource_spans:
            for ss in rs.scope_spans:
                for span in ss.spans:
                    verdict = _value(span.attributes, "attest.tool_use.verdict")
                    if verdict is None:
                        continue
                    score = _value(span.attributes, "attest.tool_use.score")
                    print(
                        f"  backend <- {span.name}: {verdict.upper()} score {score:.2f} "
                        f"(trace {span.trace_id.hex()})",
                        flush=True,
                    )
                    with self.lock:
                        self.graded.append(span.trace_id.hex())
        return b""


def agent(tracer: Tracer, name: str, tools: list[tuple[str, str | None]], answer: str) -> str:
    """One scripted run of a tool loop; a None result is a tool that raised."""
    with tracer.start_as_current_span(
        f"invoke_agent {name}",
        attributes={
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": name,
            "gen_ai.input.messages": json.dumps(
                [{"role": "user", "parts": [{"type": "text", "content": "Pay invoice 42"}]}]
            ),
            "gen_ai.output.messages": json.dumps(
                [{"role": "assistant", "parts": [{"type": "text", "content": answer}]}]
            ),
        },
    ) as run:
        for i, (tool, result) in enumerate(tools):
            attrs: dict[str, Any] = {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": tool,
                "gen_ai.tool.call.id": f"c{i}",
            }
            if result is not None:
                attrs["gen_ai.tool.call.result"] = result
            with tracer.start_as_current_span(f"execute_tool {tool}", attributes=attrs) as span:
                if result is None:
                    span.set_status(Status(StatusCode.ERROR, f"{tool}: card network timeout"))
            time.sleep(0.05)
        return format(run.get_span_context().trace_id, "032x")


def main() -> int:
    backend = Backend()
    grpc_port, http_port = free_port(), free_port()
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "store.db"
        config = Path(tmp) / "sidecar.yaml"
        config.write_text(
            "buffer: {grace_s: 0.5}\ntelemetry: {metrics: false}\ngrading: {processes: 0}\n"
        )
        print(
            f"== attest-otel serve on 127.0.0.1:{grpc_port} (gRPC) / :{http_port} (HTTP), "
            f"forwarding to 127.0.0.1:{backend.port}"
        )
        sidecar = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "attest_otel.cli",
                "serve",
                "--config",
                str(config),
                "--grpc-endpoint",
                f"127.0.0.1:{grpc_port}",
                "--http-endpoint",
                f"127.0.0.1:{http_port}",
                "--forward-endpoint",
                f"127.0.0.1:{backend.port}",
                "--store",
                str(store),
                "--log-level",
                "warning",
            ],
            cwd=ROOT,
        )
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/readyz", timeout=1):
                        break
                except OSError:
                    if time.monotonic() > deadline or sidecar.poll() is not None:
                        print("the sidecar did not start", file=sys.stderr)
                        return 1
                    time.sleep(0.1)
            provider = TracerProvider(resource=Resource.create({"service.name": "demo-agent"}))
            provider.add_span_processor(
                BatchSpanProcessor(
                    OTLPSpanExporter(endpoint=f"127.0.0.1:{grpc_port}", insecure=True),
                    schedule_delay_millis=100,
                )
            )
            tracer = provider.get_tracer("demo-agent")
            print("== the agent runs three times (real OpenTelemetry SDK, GenAI conventions)")
            agent(
                tracer,
                "billing_agent",
                [("lookup_invoice", "invoice 42: due"), ("charge_card", "charged 42.00")],
                "Paid.",
            )
            agent(
                tracer,
                "billing_agent",
                [("charge_card", None), ("charge_card", "charged 42.00")],
                "Paid.",
            )
            failing = agent(
                tracer, "billing_agent", [("charge_card", None)], "Done! Your invoice is paid."
            )
            provider.force_flush()
            deadline = time.monotonic() + 15
            while len(backend.graded) < 3 and time.monotonic() < deadline:
                time.sleep(0.1)
            provider.shutdown()
            time.sleep(0.5)  # the store is written just after forwarding
            print(f"== attest-otel grade --trace-id {failing} (from the store)")
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "attest_otel.cli",
                    "grade",
                    "--trace-id",
                    failing,
                    "--store",
                    str(store),
                ],
                cwd=ROOT,
                check=False,
            )
        finally:
            sidecar.terminate()
            sidecar.wait(30)
            backend.server.stop(None)
    print("== stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
