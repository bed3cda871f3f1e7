"""OTLP requests for the sidecar benchmark: agent traces and plain HTTP/DB traces.

The agent trace follows pipeline.md's workload (1 `invoke_agent` + 10 `chat` + 10
`execute_tool` spans, 9-11 attributes each, JSON content of 200-2000 bytes, 5 % of tool
spans in error), so the figures compare with the measured ceilings there. The plain trace
is a server span with HTTP client and DB children carrying the usual semconv attributes.
"""

from __future__ import annotations

import json
import os
import random

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, Span, Status

SPANS_PER_TRACE = 21


def _kv(key: str, value: str | int | float | bool) -> KeyValue:
    if isinstance(value, bool):
        return KeyValue(key=key, value=AnyValue(bool_value=value))
    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    if isinstance(value, float):
        return KeyValue(key=key, value=AnyValue(double_value=value))
    return KeyValue(key=key, value=AnyValue(string_value=value))


def _text(rng: random.Random, lo: int, hi: int) -> str:
    words = ["alpha", "beta", "gamma", "delta", "order", "invoice", "weather", "paris", "ok"]
    out: list[str] = []
    size = rng.randint(lo, hi)
    while sum(len(w) + 1 for w in out) < size:
        out.append(rng.choice(words))
    return " ".join(out)


def _span(
    trace_id: bytes,
    span_id: bytes,
    parent: bytes,
    name: str,
    start: int,
    attrs: list[KeyValue],
    *,
    kind: int = 1,
    error: bool = False,
) -> Span:
    span = Span(
        trace_id=trace_id,
        span_id=span_id,
        parent_span_id=parent,
        name=name,
        kind=kind,  # type: ignore[arg-type]
        start_time_unix_nano=start,
        end_time_unix_nano=start + 1_000_000,
    )
    span.attributes.extend(attrs)
    if error:
        span.status.CopyFrom(Status(code=Status.STATUS_CODE_ERROR, message="tool failed"))
    return span


def agent_trace(rng: random.Random, start: int) -> list[Span]:
    tid = rng.randbytes(16)
    agent_id = rng.randbytes(8)
    spans: list[Span] = []
    for i in range(10):
        chat_attrs = [
            _kv("gen_ai.operation.name", "chat"),
            _kv("gen_ai.provider.name", "anthropic"),
            _kv("gen_ai.request.model", "claude-haiku-4-5"),
            _kv("gen_ai.response.model", "claude-haiku-4-5"),
            _kv("gen_ai.usage.input_tokens", rng.randint(100, 4000)),
            _kv("gen_ai.usage.output_tokens", rng.randint(10, 400)),
            _kv("gen_ai.response.finish_reasons", "tool_call"),
            _kv(
                "gen_ai.input.messages",
                json.dumps(
                    [
                        {
                            "role": "user",
                            "parts": [{"type": "text", "content": _text(rng, 300, 1500)}],
                        }
                    ]
                ),
            ),
            _kv(
                "gen_ai.output.messages",
                json.dumps(
                    [
                        {
                            "role": "assistant",
                            "parts": [
                                {
                                    "type": "tool_call",
                                    "id": f"call_{i}",
                                    "name": f"tool_{i % 3}",
                                    "arguments": {"q": _text(rng, 20, 80)},
                                }
                            ],
                        }
                    ]
                ),
            ),
        ]
        spans.append(
            _span(
                tid,
                rng.randbytes(8),
                agent_id,
                "chat claude-haiku-4-5",
                start + i * 2_000_000,
                chat_attrs,
                kind=3,
            )
        )
        error = rng.random() < 0.05
        tool_attrs = [
            _kv("gen_ai.operation.name", "execute_tool"),
            _kv("gen_ai.tool.name", f"tool_{i % 3}"),
            _kv("gen_ai.tool.call.id", f"call_{i}"),
            _kv("gen_ai.tool.type", "function"),
            _kv("gen_ai.tool.call.arguments", json.dumps({"q": _text(rng, 100, 400)})),
            _kv("gen_ai.tool.call.result", _text(rng, 200, 2000)),
            _kv("gen_ai.agent.name", "bench_agent"),
            _kv("code.function", "run_tool"),
            _kv("thread.id", rng.randint(1, 64)),
        ]
        spans.append(
            _span(
                tid,
                rng.randbytes(8),
                agent_id,
                f"execute_tool tool_{i % 3}",
                start + i * 2_000_000 + 1_000_000,
                tool_attrs,
                error=error,
            )
        )
    agent_attrs = [
        _kv("gen_ai.operation.name", "invoke_agent"),
        _kv("gen_ai.agent.name", "bench_agent"),
        _kv("gen_ai.provider.name", "anthropic"),
        _kv("gen_ai.request.model", "claude-haiku-4-5"),
        _kv(
            "gen_ai.input.messages",
            json.dumps(
                [{"role": "user", "parts": [{"type": "text", "content": _text(rng, 200, 600)}]}]
            ),
        ),
        _kv(
            "gen_ai.output.messages",
            json.dumps(
                [
                    {
                        "role": "assistant",
                        "parts": [{"type": "text", "content": _text(rng, 200, 800)}],
                    }
                ]
            ),
        ),
        _kv("gen_ai.usage.input_tokens", 12000),
        _kv("gen_ai.usage.output_tokens", 900),
        _kv("gen_ai.conversation.id", rng.randbytes(6).hex()),
        _kv("server.address", "api.anthropic.com"),
    ]
    spans.append(_span(tid, agent_id, b"", "invoke_agent bench_agent", start, agent_attrs))
    return spans


def plain_trace(rng: random.Random, start: int) -> list[Span]:
    tid = rng.randbytes(16)
    root = rng.randbytes(8)
    spans = [
        _span(
            tid,
            root,
            b"",
            "GET /api/orders/{id}",
            start,
            [
                _kv("http.request.method", "GET"),
                _kv("http.route", "/api/orders/{id}"),
                _kv("url.path", f"/api/orders/{rng.randint(1, 10**6)}"),
                _kv("url.scheme", "https"),
                _kv("http.response.status_code", 200),
                _kv("server.address", "orders.internal"),
                _kv("server.port", 443),
                _kv("user_agent.original", "Mozilla/5.0 (X11; Linux x86_64) Firefox/140.0"),
                _kv("network.protocol.version", "1.1"),
                _kv("client.address", "10.1.2.3"),
            ],
            kind=2,
        )
    ]
    for i in range(SPANS_PER_TRACE - 1):
        if i % 2:
            attrs = [
                _kv("db.system.name", "postgresql"),
                _kv("db.namespace", "orders"),
                _kv("db.operation.name", "SELECT"),
                _kv("db.collection.name", "order_items"),
                _kv(
                    "db.query.text",
                    "SELECT * FROM order_items WHERE order_id = $1 AND " + _text(rng, 100, 600),
                ),
                _kv("server.address", "pg.internal"),
                _kv("server.port", 5432),
                _kv("db.response.returned_rows", rng.randint(0, 50)),
                _kv("code.function", "load_items"),
            ]
            name = "SELECT orders.order_items"
        else:
            attrs = [
                _kv("http.request.method", "POST"),
                _kv("url.full", f"https://pricing.internal/v2/quote/{rng.randint(1, 10**6)}"),
                _kv("http.response.status_code", 200),
                _kv("server.address", "pricing.internal"),
                _kv("server.port", 443),
                _kv("network.protocol.version", "2"),
                _kv("http.request.body.size", rng.randint(100, 3000)),
                _kv("http.response.body.size", rng.randint(100, 30000)),
                _kv("user_agent.original", "python-httpx/0.28"),
                _kv("request.note", _text(rng, 200, 1500)),
            ]
            name = "POST"
        spans.append(_span(tid, rng.randbytes(8), root, name, start + i * 100_000, attrs, kind=3))
    return spans


def _resource(service: str) -> ResourceSpans:
    rs = ResourceSpans()
    rs.resource.attributes.extend(
        [
            _kv("service.name", service),
            _kv("service.version", "1.4.2"),
            _kv("telemetry.sdk.language", "python"),
            _kv("host.name", os.uname().nodename),
        ]
    )
    return rs


def build_request(rng: random.Random, traces: int, genai_share: float) -> bytes:
    """One request of `traces` traces of 21 spans; `genai_share` of the traces are agent
    traces. Agent spans and plain spans sit under two resources, as two services batched
    by one Collector would send them."""
    start = 1_700_000_000_000_000_000 + rng.randint(0, 10**12)
    agent_rs = _resource("agent-service")
    agent_ss = agent_rs.scope_spans.add()
    agent_ss.scope.name = "opentelemetry.instrumentation.genai"
    plain_rs = _resource("orders-service")
    plain_ss = plain_rs.scope_spans.add()
    plain_ss.scope.name = "opentelemetry.instrumentation.requests"
    n_agent = round(traces * genai_share)
    for i in range(traces):
        if i < n_agent:
            agent_ss.spans.extend(agent_trace(rng, start + i * 10**8))
        else:
            plain_ss.spans.extend(plain_trace(rng, start + i * 10**8))
    req = ExportTraceServiceRequest()
    if n_agent:
        req.resource_spans.append(agent_rs)
    if n_agent < traces:
        req.resource_spans.append(plain_rs)
    return req.SerializeToString()


def build_requests(count: int, traces: int, genai_share: float, seed: int = 7) -> list[bytes]:
    rng = random.Random(seed)
    return [build_request(rng, traces, genai_share) for _ in range(count)]
