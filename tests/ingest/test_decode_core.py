"""What is new with the wire core's decoder: the span source a skeleton is hydrated from,
the id errors it names, and the sidecar's grading from bytes (no parsed request)."""

from __future__ import annotations

import gc
import pickle

import pytest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import (
    AnyValue,
    ArrayValue,
    InstrumentationScope,
    KeyValue,
)
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs, ScopeLogs
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans
from opentelemetry.proto.trace.v1.trace_pb2 import Span as PbSpan

from attest_otel.content import KEEP
from attest_otel.errors import InputError
from attest_otel.grade.grader import grade
from attest_otel.ingest.decode import decode_bytes, decode_request, hydrate, is_skeleton
from attest_otel.ingest.otlp_proto import SpanSource
from attest_otel.model import Event
from attest_otel.sidecar.grading_worker import grade_decoded
from tests.fuzz.test_wire_differential import ld, nested_value

TRACE = bytes(range(16))


def _kv(key: str, **value: object) -> KeyValue:
    return KeyValue(key=key, value=AnyValue(**value))  # type: ignore[arg-type]


def _request(*spans: PbSpan, scope: str = "my.app") -> bytes:
    ss = ScopeSpans(scope=InstrumentationScope(name=scope), spans=list(spans))
    req = ExportTraceServiceRequest(resource_spans=[ResourceSpans(scope_spans=[ss])])
    return req.SerializeToString()


def _http_span(n: int = 1) -> PbSpan:
    return PbSpan(
        trace_id=TRACE,
        span_id=bytes([n]) * 8,
        name="GET /orders",
        attributes=[_kv("http.request.method", string_value="GET"), _kv("n", int_value=n)],
        events=[PbSpan.Event(name="retry", time_unix_nano=5, attributes=[_kv("try", int_value=2)])],
    )


def test_a_skeleton_is_hydrated_from_its_source_to_what_a_full_decode_gives() -> None:
    data = _request(_http_span())
    skeleton = decode_request(data).spans[0]
    assert skeleton.attributes == {} and skeleton.events == []
    assert isinstance(skeleton.source, SpanSource) and skeleton.source.pending
    assert is_skeleton(skeleton)

    hydrate(skeleton)

    assert skeleton.attributes == {"http.request.method": "GET", "n": 1}
    assert skeleton.events == [Event("retry", 5, {"try": 2})]
    assert not is_skeleton(skeleton)
    assert skeleton == decode_request(data, lazy=False).spans[0]


def test_a_span_with_nothing_left_to_decode_is_no_skeleton() -> None:
    bare = PbSpan(trace_id=TRACE, span_id=b"\x01" * 8, name="GET /")
    span = decode_request(_request(bare)).spans[0]
    assert not span.source.pending and not is_skeleton(span)


def test_the_source_outlives_the_request_bytes_and_gives_the_span_encoding() -> None:
    spans = decode_request(_request(_http_span(1), _http_span(2))).spans
    gc.collect()  # only the sources hold the request's bytes now
    assert [PbSpan.FromString(s.source.record()) for s in spans] == [_http_span(1), _http_span(2)]
    hydrate(spans[1])
    assert spans[1].attributes["n"] == 2


def test_a_source_pickles_as_the_span_bytes_and_hydrates_after() -> None:
    span = decode_request(_request(_http_span(), _http_span(2))).spans[1]
    back = pickle.loads(pickle.dumps(span))
    assert back.source == span.source and back.source.record() == span.source.record()
    assert back.source != decode_request(_request(_http_span())).spans[0].source
    hydrate(back)
    assert back.attributes["n"] == 2


def test_hydrate_cuts_long_strings_as_the_decoders_do() -> None:
    ps = _http_span()
    ps.attributes.append(_kv("blob", string_value="x" * 50))
    span = decode_request(_request(ps)).spans[0]
    hydrate(span, max_attribute_chars=10)
    assert span.attributes["blob"] == "x" * 10 + "…[truncated 40 chars]"


@pytest.mark.parametrize(
    ("ids", "problem"),
    [
        ({"trace_id": b"\x01\x02\x03"}, "trace id must be 16 bytes, got 3 bytes (010203)"),
        ({"span_id": b""}, "span id must be 8 bytes, got 0 bytes (empty)"),
        ({"parent_span_id": b"\xff" * 9}, "parent span id must be 8 bytes, got 9 bytes (ff"),
    ],
)
def test_an_id_of_the_wrong_length_is_named_with_its_place(
    ids: dict[str, bytes], problem: str
) -> None:
    fields = {"trace_id": TRACE, "span_id": b"\x02" * 8, "name": "chat x"} | ids
    data = _request(_http_span(), PbSpan(**fields))  # type: ignore[arg-type]
    with pytest.raises(InputError) as err:
        decode_request(data)
    assert f"resourceSpans[0].scopeSpans[0].spans[1]: {problem}" in str(err.value)


def test_a_log_record_id_of_the_wrong_length_is_named_with_its_place() -> None:
    record = LogRecord(event_name="gen_ai.choice", trace_id=b"\x01" * 15)
    req = ExportLogsServiceRequest(
        resource_logs=[ResourceLogs(scope_logs=[ScopeLogs(log_records=[record])])]
    )
    with pytest.raises(InputError, match=r"logRecords\[0\]: trace id must be 16 bytes, got 15"):
        decode_request(req.SerializeToString(), logs=True)


def test_values_nested_past_protobufs_limit_are_an_input_error() -> None:
    def deep(depth: int) -> bytes:  # three messages a level
        attribute = ld(9, ld(1, b"k") + ld(2, nested_value(depth)))
        return ld(1, ld(2, ld(2, ld(1, TRACE) + ld(2, b"\x01" * 8) + attribute)))

    for decode in (decode_request, decode_bytes):
        with pytest.raises(InputError, match="nested too deeply"):
            decode(deep(40))  # upb refuses these bytes
        assert decode(deep(28), lazy=False).spans[0].attributes["k"]["k"]["k"]  # inside


def test_a_value_given_twice_is_merged_as_protobuf_merges_it() -> None:
    first = _kv("gen_ai.prompt", array_value=ArrayValue(values=[AnyValue(int_value=1)]))
    second = KeyValue(value=AnyValue(array_value=ArrayValue(values=[AnyValue(int_value=2)])))
    span = PbSpan(trace_id=TRACE, span_id=b"\x01" * 8).SerializeToString()
    span += ld(9, first.SerializeToString() + second.SerializeToString())
    span += PbSpan(name="renamed").SerializeToString()
    data = ld(1, ld(2, ld(2, span)))
    decoded = decode_request(data).spans[0]
    assert (decoded.name, decoded.attributes) == ("renamed", {"gen_ai.prompt": [1, 2]})


def _agent_trace() -> bytes:
    agent = PbSpan(
        trace_id=TRACE,
        span_id=b"\x01" * 8,
        name="invoke_agent shop",
        attributes=[
            _kv("gen_ai.operation.name", string_value="invoke_agent"),
            _kv("gen_ai.agent.name", string_value="shop"),
        ],
    )
    tool = PbSpan(
        trace_id=TRACE,
        span_id=b"\x02" * 8,
        parent_span_id=b"\x01" * 8,
        name="execute_tool lookup",
        attributes=[
            _kv("gen_ai.operation.name", string_value="execute_tool"),
            _kv("gen_ai.tool.name", string_value="lookup"),
        ],
    )
    return _request(agent, tool)


def test_a_trace_graded_before_is_graded_again_from_its_bytes_alone() -> None:
    """The sidecar grades from bytes: a trace that carries an earlier grade is parsed only
    then, to replace it in the spans, and gives what grading the parsed request gives."""
    data = _agent_trace()

    def graded(request: ExportTraceServiceRequest | None, data: bytes) -> bytes:
        out, runs = grade_decoded(
            request,
            decode_request(data),
            None,
            lambda run: grade(run, judge=None),
            KEEP,
            data=data,
            now_ns=7,
        )
        assert len(runs) == 1
        return out

    once = graded(None, data)
    assert once != data
    again = graded(None, once)
    assert again == graded(ExportTraceServiceRequest.FromString(once), once)
    spans = ExportTraceServiceRequest.FromString(again).resource_spans[0].scope_spans[0].spans
    assert [len(s.events) for s in spans] == [
        len(s.events)
        for s in ExportTraceServiceRequest.FromString(once).resource_spans[0].scope_spans[0].spans
    ]  # the earlier grade replaced, not doubled


def test_bytes_said_to_be_checked_still_fail_cleanly_when_they_are_not() -> None:
    """The grading process skips the validation the sidecar did on receipt (`checked`):
    bytes that were never checked are still an InputError, with upb's reason only when the
    validation runs."""
    data = _request(_http_span()).replace(b"GET /orders", b"GET /\xff\xfeders")
    with pytest.raises(InputError, match="a string field holds invalid UTF-8"):
        decode_request(data)
    with pytest.raises(InputError, match="malformed OTLP"):
        decode_request(data, checked=True)
    with pytest.raises(InputError):
        decode_request(data[:-3], checked=True)  # cut inside a span
