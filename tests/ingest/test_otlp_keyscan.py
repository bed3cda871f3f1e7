"""The raw-bytes key scan only ever skips work: decoding with it equals decoding without it."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from attest_otel.ingest import otlp_proto
from attest_otel.ingest.decode import decode_bytes
from attest_otel.ingest.otlp_keyscan import ScopeKeyScan

KEYS = [
    "http.request.method",
    "user_agent.original",
    "db.query.text",
    "gen_ai.operation.name",
    "llm.model_name",
    "tool_arguments",
    "agent_name",
    "attest.allowed_tools",
    "x" * 200 + "gen_ai.",  # a long key that contains, but does not start with, a prefix
    "gen_ai." + "y" * 300,  # a key whose length needs a two-byte varint
]
VALUES = ["GET", "gen_ai.looks_like_a_key", "agent smith", "", "tool_x", "plain"]
SCOPES = ["opentelemetry.instrumentation.httpx", "my.app", "openai.agents", ""]
NAMES = ["GET /orders", "SELECT orders", "chat gpt-5", "handle"]


def _request(layout: list[list[list[list[tuple[str, str]]]]]) -> ExportTraceServiceRequest:
    """resources -> scopes -> spans -> (key, value) attributes; scope and span names cycle."""
    req = ExportTraceServiceRequest()
    for r, scopes in enumerate(layout):
        rs = ResourceSpans()
        for s, spans in enumerate(scopes):
            ss = ScopeSpans(scope=InstrumentationScope(name=SCOPES[(r + s) % len(SCOPES)]))
            for n, kvs in enumerate(spans):
                ss.spans.append(
                    Span(
                        trace_id=bytes([r + 1]) * 16,
                        span_id=bytes([s + 1, n + 1]) * 4,
                        name=NAMES[(r + s + n) % len(NAMES)],
                        attributes=[
                            KeyValue(key=k, value=AnyValue(string_value=v)) for k, v in kvs
                        ],
                    )
                )
            rs.scope_spans.append(ss)
        req.resource_spans.append(rs)
    return req


def _walk(req: ExportTraceServiceRequest, data: bytes | None) -> tuple[Any, ...]:
    spans: list[Any] = []
    counts = otlp_proto.walk_traces(req, spans, lazy=True, data=data)
    return counts, [(s.span_id, s.attributes, s.events) for s in spans]


attribute = st.tuples(st.sampled_from(KEYS), st.sampled_from(VALUES))
layouts = st.lists(
    st.lists(st.lists(st.lists(attribute, max_size=4), max_size=4), max_size=3),
    min_size=1,
    max_size=3,
)


@settings(max_examples=200, deadline=None)
@given(layouts)
def test_the_scan_never_changes_what_is_decoded(layout: Any) -> None:
    req = _request(layout)
    data = req.SerializeToString()
    assert _walk(req, data) == _walk(req, None)


def test_a_plain_scope_is_skipped_and_a_genai_key_is_found() -> None:
    req = _request(
        [[[[("http.request.method", "GET")]], [[("db.query.text", "x"), ("gen_ai.x", "y")]]]]
    )
    scan = ScopeKeyScan(req.SerializeToString())
    assert scan.may_hold_genai_key(0, 0, 2) is False
    assert scan.may_hold_genai_key(0, 1, 2) is True


def test_a_key_written_after_its_value_is_still_found() -> None:
    # KeyValue with field 2 (value) before field 1 (key): legal, and parsed the same by upb.
    key = b"gen_ai.operation.name"
    value = AnyValue(string_value="chat").SerializeToString()
    kv = b"\x12" + bytes([len(value)]) + value + b"\x0a" + bytes([len(key)]) + key
    span = Span(trace_id=b"\x01" * 16, span_id=b"\x02" * 8, name="handle").SerializeToString()
    span += b"\x4a" + bytes([len(kv)]) + kv
    scope = InstrumentationScope(name="my.app").SerializeToString()
    ss = b"\x0a" + bytes([len(scope)]) + scope + b"\x12" + bytes([len(span)]) + span
    rs = b"\x12" + bytes([len(ss)]) + ss
    data = b"\x0a" + bytes([len(rs)]) + rs
    decoded = decode_bytes(data, "application/x-protobuf")
    assert decoded.genai_span_count == 1
    assert decoded.spans[0].attributes == {"gen_ai.operation.name": "chat"}


def test_a_key_with_an_overlong_length_varint_is_still_found() -> None:
    # Length 21 written in three bytes (0x95 0x80 0x00): not minimal, accepted by parsers.
    key = b"gen_ai.operation.name"
    kv = b"\x0a\x95\x80\x00" + key
    span = Span(trace_id=b"\x01" * 16, span_id=b"\x02" * 8, name="handle").SerializeToString()
    span += b"\x4a" + bytes([len(kv)]) + kv
    scope = InstrumentationScope(name="my.app").SerializeToString()
    ss = b"\x0a" + bytes([len(scope)]) + scope + b"\x12" + bytes([len(span)]) + span
    rs = b"\x12" + bytes([len(ss)]) + ss
    data = b"\x0a" + bytes([len(rs)]) + rs
    decoded = decode_bytes(data, "application/x-protobuf")
    assert decoded.genai_span_count == 1
    assert decoded.spans[0].attributes == {"gen_ai.operation.name": None}  # no value


def test_framing_that_cannot_be_followed_means_maybe() -> None:
    scan = ScopeKeyScan(b"\x0a\xff")  # a length that runs off the end
    assert scan.may_hold_genai_key(0, 0, 1) is True
