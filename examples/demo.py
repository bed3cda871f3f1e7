"""`make demo`: grade the built-in examples, then show a grade arriving as telemetry.

1. attest run files: `attest-otel tools examples/runs.jsonl`
2. real framework traces: `attest-otel grade --file examples/traces/...`
3. `grade --export` to a local OTLP receiver this script starts, and what arrived there:
   the attest.grade span with its events, the log-based events, and the metrics.

Every command is run as a user would run it, through the installed `attest-otel` script.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

HERE = Path(__file__).parent
CLI = str(Path(sys.executable).parent / "attest-otel")


def banner(text: str) -> None:
    print(f"\n\033[1m== {text} ==\033[0m", flush=True)


def run(*args: str) -> None:
    print(f"$ attest-otel {' '.join(args)}", flush=True)
    subprocess.run([CLI, *args], check=False)


class Receiver:
    """The smallest OTLP/gRPC backend: keeps what it is sent so the demo can show it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.spans: list[Any] = []
        self.logs: list[Any] = []
        self.metrics: list[Any] = []
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        receiver = self

        class Traces(trace_service_pb2_grpc.TraceServiceServicer):  # type: ignore[misc]
            def Export(self, request: Any, context: Any) -> Any:
                with receiver.lock:
                    for rs in request.resource_spans:
                        for ss in rs.scope_spans:
                            receiver.spans.extend(ss.spans)
                return trace_service_pb2.ExportTraceServiceResponse()

        class Logs(logs_service_pb2_grpc.LogsServiceServicer):  # type: ignore[misc]
            def Export(self, request: Any, context: Any) -> Any:
                with receiver.lock:
                    for rl in request.resource_logs:
                        for sl in rl.scope_logs:
                            receiver.logs.extend(sl.log_records)
                return logs_service_pb2.ExportLogsServiceResponse()

        class Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):  # type: ignore[misc]
            def Export(self, request: Any, context: Any) -> Any:
                with receiver.lock:
                    for rm in request.resource_metrics:
                        for sm in rm.scope_metrics:
                            receiver.metrics.extend(sm.metrics)
                return metrics_service_pb2.ExportMetricsServiceResponse()

        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(), self.server)
        logs_service_pb2_grpc.add_LogsServiceServicer_to_server(Logs(), self.server)
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(Metrics(), self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")

    def __enter__(self) -> Receiver:
        self.server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.stop(grace=None)


def attribute(attrs: Any, key: str) -> Any:
    for kv in attrs:
        if kv.key == key:
            value = kv.value
            return getattr(value, value.WhichOneof("value")) if value.WhichOneof("value") else None
    return None


def show_received(receiver: Receiver) -> None:
    with receiver.lock:
        for span in receiver.spans:
            print(
                f"  span {span.name} trace={span.trace_id.hex()} parent={span.parent_span_id.hex()}"
                f" links={len(span.links)}"
            )
            for event in span.events:
                label = attribute(event.attributes, "gen_ai.evaluation.score.label")
                tool = attribute(event.attributes, "gen_ai.tool.name") or "(run)"
                about = attribute(event.attributes, "attest.span_id")
                print(f"    event {event.name}: {tool} -> {label} (about span {about})")
        print(
            f"  log records: {len(receiver.logs)} "
            f"(event names: {sorted({r.event_name for r in receiver.logs})})"
        )
        print(f"  metrics: {sorted({m.name for m in receiver.metrics})}")


def main() -> None:
    banner("attest run files: attest-otel tools examples/runs.jsonl")
    run("tools", str(HERE / "runs.jsonl"))

    for trace in sorted((HERE / "traces").glob("*.json")):
        banner(f"a real framework trace: {trace.name}")
        run("grade", "--file", str(trace))

    banner("grades as telemetry: grade --export to a local OTLP receiver")
    with Receiver() as receiver:
        run(
            "grade",
            "--file",
            str(HERE / "traces" / "pydantic_ai_fallback.json"),
            "--export",
            "--otlp-endpoint",
            f"http://127.0.0.1:{receiver.port}",
        )
        show_received(receiver)


if __name__ == "__main__":
    main()
