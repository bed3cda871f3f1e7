"""Cutting and re-framing requests at the wire level, and the byte-level GenAI test."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from attest_otel.ingest.candidate import is_genai_candidate
from attest_otel.sidecar import wire
from attest_otel.sidecar.receivers import otlp_json_to_protobuf

TRACES = sorted((Path(__file__).parents[1] / "fixtures" / "traces").glob("*.json"))
TRACES = [p for p in TRACES if not p.name.endswith(".labels.json")]


def _fixture_requests(path: Path) -> list[bytes]:
    text = path.read_text()
    try:
        docs = [json.loads(text)]
    except json.JSONDecodeError:
        docs = [json.loads(line) for line in text.splitlines() if line.strip()]
    return [otlp_json_to_protobuf(json.dumps(d).encode()) for d in docs if "resourceSpans" in d]


def _request(n_resources: int = 2, n_spans: int = 30, seed: int = 3) -> bytes:
    rng = random.Random(seed)
    req = ExportTraceServiceRequest()
    for r in range(n_resources):
        rs = req.resource_spans.add()
        rs.resource.attributes.add(key="service.name").value.string_value = f"svc{r}"
        rs.schema_url = "https://opentelemetry.io/schemas/1.26.0"
        ss = rs.scope_spans.add()
        ss.scope.name = f"scope{r}"
        ss.scope.version = "1.0"
        for i in range(n_spans):
            span = ss.spans.add(
                trace_id=rng.randbytes(16),
                span_id=rng.randbytes(8),
                name=f"span {i}" * rng.randint(1, 30),
            )
            if i % 3:
                span.parent_span_id = rng.randbytes(8)
            if i % 5 == 0:
                span.trace_state = "vendor=x"
            span.attributes.add(key="blob").value.string_value = "x" * rng.randint(0, 20000)
    data: bytes = req.SerializeToString()
    return data


def test_a_split_request_re_framed_is_the_same_request() -> None:
    data = _request()
    groups = wire.split_request(data)
    assert [g.scope_name() for g in groups] == ["scope0", "scope1"]
    rebuilt = wire.encode_groups((g.context, [s[2] for s in g.spans]) for g in groups)
    assert ExportTraceServiceRequest.FromString(rebuilt) == ExportTraceServiceRequest.FromString(
        data
    )


def test_trace_ids_and_names_are_read_from_the_bytes() -> None:
    data = _request()
    parsed = ExportTraceServiceRequest.FromString(data)
    expected = [
        (s.trace_id, s.name.encode())
        for rs in parsed.resource_spans
        for ss in rs.scope_spans
        for s in ss.spans
    ]
    got = [(tid, name) for g in wire.split_request(data) for tid, name, _ in g.spans]
    assert got == expected


def test_a_span_with_fields_out_of_order_is_still_read() -> None:
    span = Span(trace_id=b"\x01" * 16, span_id=b"\x02" * 8, name="invoke_agent x")
    reordered = (
        wire.field_bytes(0x2A, b"invoke_agent x")
        + wire.field_bytes(0x12, b"\x02" * 8)
        + wire.field_bytes(0x0A, b"\x01" * 16)
    )
    assert Span.FromString(reordered) == span
    assert wire.span_trace_id(reordered) == b"\x01" * 16


@pytest.mark.parametrize("cut", [1, 7, 100, -1])
def test_truncated_framing_is_a_wire_error(cut: int) -> None:
    data = _request(n_resources=1, n_spans=3)
    with pytest.raises(wire.WireError):
        wire.split_request(data[:cut])


def test_split_to_size_keeps_every_span_and_respects_the_size() -> None:
    data = _request(n_spans=60)
    pieces = wire.split_to_size(data, 64 * 1024)
    assert len(pieces) > 2 and all(len(p) <= 64 * 1024 for p in pieces)
    merged = ExportTraceServiceRequest()
    for piece in pieces:
        merged.MergeFromString(piece)
    spans = sorted(
        s.span_id for rs in merged.resource_spans for ss in rs.scope_spans for s in ss.spans
    )
    original = ExportTraceServiceRequest.FromString(data)
    assert spans == sorted(
        s.span_id for rs in original.resource_spans for ss in rs.scope_spans for s in ss.spans
    )


@pytest.mark.parametrize("path", TRACES, ids=[p.stem for p in TRACES])
def test_byte_level_genai_test_covers_every_candidate_of_the_fixtures(path: Path) -> None:
    """The sidecar decides on the bytes; it must never miss a span the decoder would decode."""
    for data in _fixture_requests(path):
        parsed = ExportTraceServiceRequest.FromString(data)
        pb_spans = [
            (ss.scope.name, s)
            for rs in parsed.resource_spans
            for ss in rs.scope_spans
            for s in ss.spans
        ]
        cut = [(g, ref) for g in wire.split_request(data) for ref in g.spans]
        assert len(cut) == len(pb_spans)
        for (scope, span), (group, (_tid, name, record)) in zip(pb_spans, cut, strict=True):
            expected = is_genai_candidate(span.name, [kv.key for kv in span.attributes], scope)
            found = (
                group.is_genai_scope()
                or wire.is_genai_name(name)
                or wire.GENAI_KEY_BYTES.search(record) is not None
            )
            assert found or not expected, (path.name, span.name)


def test_plain_http_keys_like_user_agent_do_not_look_genai() -> None:
    span = Span(trace_id=b"\x01" * 16, span_id=b"\x02" * 8, name="GET /")
    for key in ("user_agent.original", "http.request.method", "url.full", "db.query.text"):
        span.attributes.add(key=key).value.string_value = "agent tool chat"
    assert wire.GENAI_KEY_BYTES.search(span.SerializeToString()) is None
    span.attributes.add(key="gen_ai.agent.name").value.string_value = "a"
    assert wire.GENAI_KEY_BYTES.search(span.SerializeToString()) is not None
