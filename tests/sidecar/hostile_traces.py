"""Hostile traces for the sidecar tests, built as OTLP protobuf bytes."""

from __future__ import annotations

import json
import os

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, Span


def _kv(key: str, value: str) -> KeyValue:
    return KeyValue(key=key, value=AnyValue(string_value=value))


def agent_trace(
    tools: int = 1, answer: str = "Your invoice is paid.", name: str | None = None
) -> tuple[bytes, str, str]:
    """One agent run with `tools` tool calls: (request bytes, trace id hex, agent span id hex)."""
    trace_id, agent_id = os.urandom(16), os.urandom(8)
    rs = ResourceSpans()
    rs.resource.attributes.append(_kv("service.name", "agent-service"))
    ss = rs.scope_spans.add()
    ss.scope.name = "agent"
    start = 1_700_000_000_000_000_000
    agent = Span(
        trace_id=trace_id,
        span_id=agent_id,
        name=name or "invoke_agent billing_agent",
        start_time_unix_nano=start,
        end_time_unix_nano=start + 10**9,
    )
    agent.attributes.extend(
        [
            _kv("gen_ai.operation.name", "invoke_agent"),
            _kv("gen_ai.agent.name", "billing_agent"),
            _kv(
                "gen_ai.input.messages",
                json.dumps([{"role": "user", "parts": [{"type": "text", "content": "Paid?"}]}]),
            ),
            _kv(
                "gen_ai.output.messages",
                json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": answer}]}]),
            ),
        ]
    )
    ss.spans.append(agent)
    for i in range(tools):
        tool = Span(
            trace_id=trace_id,
            span_id=os.urandom(8),
            parent_span_id=agent_id,
            name="execute_tool lookup_invoice",
            start_time_unix_nano=start + i,
            end_time_unix_nano=start + i + 1,
        )
        tool.attributes.extend(
            [
                _kv("gen_ai.operation.name", "execute_tool"),
                _kv("gen_ai.tool.name", "lookup_invoice"),
                _kv("gen_ai.tool.call.id", f"call_{i}"),
                _kv("gen_ai.tool.call.result", "invoice 42: paid"),
            ]
        )
        ss.spans.append(tool)
    data = ExportTraceServiceRequest(resource_spans=[rs]).SerializeToString()
    return data, trace_id.hex(), agent_id.hex()
