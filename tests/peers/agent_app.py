"""A small instrumented agent app: the OTel SDK's own OTLP/gRPC exporters, traces and log
records, sent where OTEL_EXPORTER_OTLP_ENDPOINT says (the Collector under test).

Each agent run is an `invoke_agent` span with a `chat` model span and `execute_tool` spans
(current GenAI conventions, docs/dialects.md); the model's conversation also goes out as a
`gen_ai.client.inference.operation.details` log record in the chat span's context, where
instrumentations that keep content out of spans put it. Plain HTTP requests are mixed in.

    python -m tests.peers.agent_app RUNS PACE_S SPANS_OUT LOGS_OUT

RUNS agent runs (each with a plain request beside it), PACE_S seconds apart, so that a
dashboard's rate windows see a steady load.

SPANS_OUT and LOGS_OUT get the very spans and log records sent, as OTLP JSON lines (one
request per line), for `grade --file` to compare against.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from google.protobuf.json_format import MessageToJson
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry._logs import SeverityNumber
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import (
    BatchLogRecordProcessor,
    InMemoryLogRecordExporter,
    SimpleLogRecordProcessor,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode

from tests.sidecar.helpers import plain_request

SCENARIOS: list[tuple[str, list[tuple[str, str | None]], str]] = [
    ("billing_agent", [("lookup_invoice", "invoice 42: paid")], "Invoice 42 is paid."),
    ("billing_agent", [("lookup_invoice", None), ("lookup_invoice", "paid")], "It is paid."),
    ("refund_agent", [("issue_refund", None)], "Your refund has been issued."),
    ("support_agent", [("search_kb", "reset via settings"), ("open_ticket", "T-7")], "Done."),
]
"""(agent, [(tool, result or None when it failed)], answer): passes, a retried error, an
unrecovered error the answer hides."""


def _messages(role: str, text: str) -> str:
    return json.dumps([{"role": role, "parts": [{"type": "text", "content": text}]}])


def agent_run(
    tracer: trace.Tracer, logger: Any, agent: str, tools: list[tuple[str, str | None]], answer: str
) -> None:
    question = f"Please help ({agent})"
    with tracer.start_as_current_span(
        f"invoke_agent {agent}",
        attributes={
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": agent,
            "gen_ai.provider.name": "anthropic",
        },
    ) as root:
        with tracer.start_as_current_span(
            "chat claude-haiku-4-5",
            kind=SpanKind.CLIENT,
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": "anthropic",
                "gen_ai.request.model": "claude-haiku-4-5",
            },
        ):
            logger.emit(
                event_name="gen_ai.client.inference.operation.details",
                severity_number=SeverityNumber.INFO,
                context=otel_context.get_current(),
                attributes={
                    "gen_ai.operation.name": "chat",
                    "gen_ai.input.messages": _messages("user", question),
                    "gen_ai.output.messages": _messages("assistant", answer),
                },
            )
        for i, (tool, result) in enumerate(tools):
            attrs: dict[str, Any] = {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": tool,
                "gen_ai.tool.call.id": f"call_{i}",
                "gen_ai.tool.call.arguments": json.dumps({"n": i}),
            }
            if result is not None:
                attrs["gen_ai.tool.call.result"] = result
            with tracer.start_as_current_span(f"execute_tool {tool}", attributes=attrs) as span:
                if result is None:
                    span.set_status(Status(StatusCode.ERROR, f"{tool} failed: timeout"))
        root.set_attribute("gen_ai.input.messages", _messages("user", question))
        root.set_attribute("gen_ai.output.messages", _messages("assistant", answer))


def main(argv: list[str]) -> int:
    runs, pace_s = int(argv[0]), float(argv[1])
    spans_out, logs_out = Path(argv[2]), Path(argv[3])
    resource = Resource.create({"service.name": "support-desk"})
    kept_spans = InMemorySpanExporter()
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(insecure=True)))
    tracer_provider.add_span_processor(SimpleSpanProcessor(kept_spans))
    kept_logs = InMemoryLogRecordExporter()
    logger_provider = LoggerProvider(resource=resource)
    logger_provider.add_log_record_processor(
        BatchLogRecordProcessor(OTLPLogExporter(insecure=True))
    )
    logger_provider.add_log_record_processor(SimpleLogRecordProcessor(kept_logs))
    tracer = tracer_provider.get_tracer("support-desk.agents")
    logger = logger_provider.get_logger("support-desk.agents")
    for i in range(runs):
        agent, tools, answer = SCENARIOS[i % len(SCENARIOS)]
        agent_run(tracer, logger, agent, tools, answer)
        plain_request(tracer)
        time.sleep(pace_s)
    tracer_provider.force_flush()
    logger_provider.force_flush()
    tracer_provider.shutdown()
    logger_provider.shutdown()
    spans_out.write_text(
        MessageToJson(encode_spans(kept_spans.get_finished_spans()), indent=None) + "\n"
    )
    logs_out.write_text(
        MessageToJson(encode_logs(kept_logs.get_finished_logs()), indent=None) + "\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
