"""Differential fuzz of the wire core's decoder (`otlp_proto`, rust/attest_wire/src/decode/)
against protobuf's parse of the same bytes.

The grading process decodes a request's bytes straight into spans and log records. What it
builds must be what protobuf's parser (upb, `FromString`) sees in those bytes, read by the
rules the decoders share: ids as hex, the last of a repeated attribute key wins, an unset
value is None, a kvlist a dict, an array a list; only GenAI candidates decoded in full, and
a skeleton's `hydrate` giving what a full decode gives. The reference walk below reads the
parsed message with those rules; it is the oracle, not a second decoder anyone runs.

Inputs: generated requests (every AnyValue kind, events, statuses, shared and odd ids), the
same with span and attribute encodings repeated so the parser merges them (a field given
twice, a value's oneof switched or merged), byte mutations, and the wire grammar of
test_wire_differential.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from google.protobuf.message import DecodeError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status

from attest_otel.errors import InputError
from attest_otel.ingest.candidate import (
    GENAI_EVENT_PREFIXES,
    is_genai_candidate,
    is_genai_key,
    is_genai_scope,
)
from attest_otel.ingest.decode import decode_bytes, decode_request, hydrate, is_skeleton
from tests.fuzz.strategies import (
    any_values,
    byte_mutations,
    comparable,
    log_requests,
    trace_requests,
)
from tests.fuzz.test_wire_differential import ld, placed

EXAMPLES = int(os.environ.get("DECODE_FUZZ_EXAMPLES", "60"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# -- the reference walk over the parsed message ------------------------------------------------


def ref_value(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    if which == "array_value":
        return [ref_value(v) for v in value.array_value.values]
    if which == "kvlist_value":
        return ref_attributes(value.kvlist_value.values)
    if which in ("string_value", "bool_value", "int_value", "double_value", "bytes_value"):
        return getattr(value, which)
    return None


def ref_attributes(kvs: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in kvs:
        out[kv.key] = ref_value(kv.value)
    return out


def ref_spans(req: ExportTraceServiceRequest) -> list[tuple[str, bool]]:
    """(comparable span, is a candidate) of every span, as protobuf's parse has them."""
    from attest_otel.model import Event
    from attest_otel.model import Span as Decoded

    out = []
    for rs in req.resource_spans:
        resource = ref_attributes(rs.resource.attributes)
        for ss in rs.scope_spans:
            for ps in ss.spans:
                span = Decoded(
                    ps.trace_id.hex(),
                    ps.span_id.hex(),
                    ps.parent_span_id.hex() or None,
                    ps.name,
                    ps.start_time_unix_nano,
                    ps.end_time_unix_nano,
                    ps.kind,
                    ps.status.code,
                    ps.status.message,
                    ref_attributes(ps.attributes),
                    [
                        Event(e.name, e.time_unix_nano, ref_attributes(e.attributes))
                        for e in ps.events
                    ],
                    resource,
                    ss.scope.name,
                    ss.scope.version,
                )
                keys = [kv.key for kv in ps.attributes]
                out.append((comparable(span), is_genai_candidate(ps.name, keys, ss.scope.name)))
    return out


def ids_ok(req: ExportTraceServiceRequest) -> bool:
    return all(
        len(s.trace_id) == 16 and len(s.span_id) == 8 and len(s.parent_span_id) in (0, 8)
        for rs in req.resource_spans
        for ss in rs.scope_spans
        for s in ss.spans
    )


def assert_decodes_like_protobuf(data: bytes) -> None:
    """`data` holds a traces request protobuf accepts: the core decodes it to what the parse
    holds, in full and lazily (skeletons exactly the non-candidates, hydrated to the same)."""
    req = ExportTraceServiceRequest.FromString(data)
    if not ids_ok(req):
        with pytest.raises(InputError, match="id must be"):
            decode_request(data)
        return
    expected = ref_spans(req)
    full = decode_request(data, lazy=False)
    assert [comparable(s) for s in full.spans] == [c for c, _ in expected]
    assert full.genai_span_count == full.span_count == len(expected)
    lazy = decode_request(data)
    assert lazy.genai_span_count == sum(1 for _, candidate in expected if candidate)
    for span, (want, candidate) in zip(lazy.spans, expected, strict=True):
        if not candidate:
            assert span.attributes == {} and span.events == []
            assert is_skeleton(span) == (want != comparable(span))
            hydrate(span, max_attribute_chars=None)
        assert comparable(span) == want
        assert span.source.record() in data


def merged(req: ExportTraceServiceRequest, extras: list[bytes]) -> bytes:
    """`req` encoded by hand with `extras[i]` appended to span i's encoding: protobuf merges
    the two (a scalar given twice: the last wins; a repeated field: appended; a message:
    merged)."""
    out = b""
    i = 0
    for rs in req.resource_spans:
        rs_bytes = ResourceSpans(resource=rs.resource, schema_url=rs.schema_url).SerializeToString()
        for ss in rs.scope_spans:
            ss_bytes = ScopeSpans(scope=ss.scope).SerializeToString()
            for span in ss.spans:
                ss_bytes += ld(2, span.SerializeToString() + extras[i % len(extras)])
                i += 1
            rs_bytes += ld(2, ss_bytes)
        out += ld(1, rs_bytes)
    return out


@st.composite
def span_extras(draw: st.DrawFn) -> bytes:
    """More of a span, to merge into it: a new name or status, an attribute whose value is
    given twice (merged by protobuf: a oneof switched, two arrays joined), one whose value or
    key is given twice within one encoding, an event."""
    out = b""
    if draw(st.booleans()):
        out += Span(name=draw(st.text(max_size=6))).SerializeToString()
    if draw(st.booleans()):
        out += Span(status=Status(message=draw(st.text(max_size=4)))).SerializeToString()
    if draw(st.booleans()):
        key = draw(st.sampled_from(("gen_ai.prompt", "k", "gen_ai.operation.name")))
        first = KeyValue(key=key, value=draw(any_values)).SerializeToString()
        second = KeyValue(value=draw(any_values)).SerializeToString()
        out += ld(9, first + second)
    if draw(st.booleans()):
        # One occurrence each, a field given twice inside: a string value followed by
        # another member of the oneof (the last wins), and the key given again after the
        # value. The decoder reads a key-then-value KeyValue and a lone string straight;
        # these must not look like one.
        key = draw(st.sampled_from(("gen_ai.prompt", "k")))
        text = AnyValue(string_value=draw(st.text(max_size=4))).SerializeToString()
        value = text + draw(any_values).SerializeToString()
        kv = KeyValue(key=key).SerializeToString() + ld(2, value)
        if draw(st.booleans()):
            kv += KeyValue(key=draw(st.sampled_from(("k2", key)))).SerializeToString()
        out += ld(9, kv)
    if draw(st.booleans()):
        out += Span(events=[Span.Event(name="e", time_unix_nano=1)]).SerializeToString()
    return out


# -- traces ---------------------------------------------------------------------------------------


@FUZZ
@given(trace_requests())
def test_generated_requests_decode_like_protobuf(req: ExportTraceServiceRequest) -> None:
    assert_decodes_like_protobuf(req.SerializeToString())


@FUZZ
@given(trace_requests(max_spans=4), st.lists(span_extras(), min_size=1, max_size=3))
def test_merged_fields_decode_like_protobuf(
    req: ExportTraceServiceRequest, extras: list[bytes]
) -> None:
    assert_decodes_like_protobuf(merged(req, extras))


@FUZZ
@given(st.data())
def test_mutated_requests_decode_like_protobuf_or_fail_cleanly(data: st.DataObject) -> None:
    encoded = data.draw(trace_requests(max_spans=3)).SerializeToString()
    mutated = data.draw(byte_mutations(encoded))
    try:
        ExportTraceServiceRequest.FromString(mutated)
    except DecodeError:
        with pytest.raises(InputError):
            decode_request(mutated)
        return
    assert_decodes_like_protobuf(mutated)


@FUZZ
@given(placed())
def test_the_wire_grammar_decodes_like_protobuf_or_fails_cleanly(encoded: bytes) -> None:
    try:
        ExportTraceServiceRequest.FromString(encoded)
    except DecodeError:
        with pytest.raises(InputError):
            decode_request(encoded)
        return
    assert_decodes_like_protobuf(encoded)


# -- logs -----------------------------------------------------------------------------------------


def ref_logs(req: ExportLogsServiceRequest, lazy: bool) -> list[tuple[Any, ...]]:
    out = []
    for rl in req.resource_logs:
        for sl in rl.scope_logs:
            for lr in sl.log_records:
                attrs = ref_attributes(lr.attributes)
                keep = (
                    not lazy
                    or is_genai_scope(sl.scope.name)
                    or lr.event_name.startswith(GENAI_EVENT_PREFIXES)
                    or any(is_genai_key(k) for k in attrs)
                    or any(
                        kv.key == "event.name"
                        and kv.value.string_value.startswith(GENAI_EVENT_PREFIXES)
                        for kv in lr.attributes
                    )
                )
                if not keep:
                    continue
                named = attrs.get("event.name")
                out.append(
                    (
                        lr.trace_id.hex(),
                        lr.span_id.hex(),
                        lr.event_name or (named if isinstance(named, str) else ""),
                        lr.time_unix_nano or lr.observed_time_unix_nano,
                        repr(ref_value(lr.body) if lr.HasField("body") else None),
                        repr(attrs),
                    )
                )
    return out


@FUZZ
@given(log_requests(), st.booleans())
def test_log_records_decode_like_protobuf(req: ExportLogsServiceRequest, lazy: bool) -> None:
    data = req.SerializeToString()
    decoded = decode_request(data, logs=True, lazy=lazy)
    got = [
        (r.trace_id, r.span_id, r.event_name, r.time_ns, repr(r.body), repr(r.attributes))
        for r in decoded.logs
    ]
    assert got == ref_logs(req, lazy)
    assert decoded.log_count == sum(
        len(sl.log_records) for rl in req.resource_logs for sl in rl.scope_logs
    )
    assert decode_bytes(data, lazy=lazy).logs == decoded.logs  # told from the bytes too
