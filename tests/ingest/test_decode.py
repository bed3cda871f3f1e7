"""Decoding OTLP from files, bytes and requests: every encoding gives the same spans."""

from __future__ import annotations

import base64
import copy
import gzip
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format  # type: ignore[import-untyped]
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue, KeyValueList
from opentelemetry.proto.trace.v1.trace_pb2 import Span as PbSpan
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode

from attest_otel.errors import InputError
from attest_otel.ingest.decode import (
    Decoded,
    decode_bytes,
    decode_file,
    decode_request,
    hydrate,
    is_skeleton,
)
from attest_otel.ingest.otlp_json import JsonSpan
from attest_otel.ingest.otlp_proto import SpanSource
from attest_otel.model import STATUS_ERROR, STATUS_OK, STATUS_UNSET, Event, Span
from tests import otlp_encodings as encodings
from tests.otlp_encodings import length_prefixed, to_protobuf_json, to_protobuf_json_snake_case

FIXTURES = Path(__file__).parent.parent / "fixtures" / "otlp"

# -- inputs made with the real OTel SDK -------------------------------------------------------


def sdk_traces() -> ExportTraceServiceRequest:
    """An agent trace: invoke_agent -> (GET /inventory -> execute_tool lookup), chat;
    plus a second, non-GenAI trace. Built with the SDK, encoded with the OTLP exporter's
    encoder; kvlist and bytes values (which the SDK refuses on spans) are added afterwards."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(
        resource=Resource({"service.name": "shop-agent", "deployment.environment.name": "test"})
    )
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    app = provider.get_tracer("shop.app", "1.2.3")
    http = provider.get_tracer("opentelemetry.instrumentation.requests", "0.50b0")

    with app.start_as_current_span(
        "invoke_agent shop",
        kind=trace.SpanKind.INTERNAL,
        attributes={
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "shop",
            "attest.allowed_tools": ["lookup", "order"],
            "gen_ai.request.temperature": 0.25,
            "gen_ai.request.max_tokens": 9_007_199_254_740_993,  # > 2**53: int64 survives JSON
            "gen_ai.request.stream": False,
            "gen_ai.request.seeds": [1, -2, 3],
            "gen_ai.request.flags": [True, False],
            "gen_ai.request.weights": [0.5, 1.5],
        },
    ):
        with (
            http.start_as_current_span(
                "GET /inventory",
                kind=trace.SpanKind.CLIENT,
                attributes={"http.request.method": "GET", "http.response.status_code": 200},
            ),
            app.start_as_current_span(
                "execute_tool lookup",
                attributes={
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": "lookup",
                    "gen_ai.tool.call.arguments": '{"sku": "A-1"}',
                },
                record_exception=False,
                set_status_on_exception=False,
            ) as tool,
        ):
            tool.add_event(
                "exception",
                {"exception.type": "TimeoutError", "exception.message": "slow"},
                timestamp=1_700_000_000_123_456_789,
            )
            tool.set_status(Status(StatusCode.ERROR, "slow"))
        with app.start_as_current_span(
            "chat gpt-5", kind=trace.SpanKind.CLIENT, attributes={"gen_ai.request.model": "gpt-5"}
        ) as chat:
            chat.add_event("gen_ai.choice", {"index": 0})
            chat.set_status(Status(StatusCode.OK))
    with http.start_as_current_span(
        "SELECT orders", kind=trace.SpanKind.SERVER, attributes={"db.system.name": "postgresql"}
    ):
        pass
    req = encode_spans(exporter.get_finished_spans())
    agent = span_named(req, "invoke_agent shop")
    agent.attributes.append(
        KeyValue(
            key="attest.tool_fallbacks",
            value=AnyValue(
                kvlist_value=KeyValueList(
                    values=[
                        KeyValue(
                            key="lookup",
                            value=AnyValue(
                                array_value=ArrayValue(values=[AnyValue(string_value="search")])
                            ),
                        ),
                        KeyValue(key="nothing", value=AnyValue()),
                    ]
                )
            ),
        )
    )
    agent.attributes.append(KeyValue(key="gen_ai.blob", value=AnyValue(bytes_value=b"\x00\xffab")))
    return req


def sdk_logs(req: ExportTraceServiceRequest) -> ExportLogsServiceRequest:
    """Two log records emitted through the SDK inside the agent span: a GenAI event and an
    ordinary application log."""
    agent = span_named(req, "invoke_agent shop")
    context = trace.set_span_in_context(
        trace.NonRecordingSpan(
            trace.SpanContext(
                trace_id=int.from_bytes(agent.trace_id, "big"),
                span_id=int.from_bytes(agent.span_id, "big"),
                is_remote=False,
            )
        )
    )
    exporter = InMemoryLogRecordExporter()  # type: ignore[no-untyped-call]
    provider = LoggerProvider(resource=Resource({"service.name": "shop-agent"}))
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    logger = provider.get_logger("opentelemetry.instrumentation.openai_v2")
    logger.emit(
        timestamp=1_700_000_000_000_000_001,
        context=context,
        event_name="gen_ai.user.message",
        body={"content": "Is A-1 in stock?", "role": "user"},
        attributes={"gen_ai.system": "openai"},
    )
    plain = provider.get_logger("shop.app")
    plain.emit(timestamp=1_700_000_000_000_000_002, context=context, body="cache warm")
    return encode_logs(exporter.get_finished_logs())


def span_named(req: ExportTraceServiceRequest, name: str) -> PbSpan:
    for rs in req.resource_spans:
        for ss in rs.scope_spans:
            for ps in ss.spans:
                if ps.name == name:
                    found: PbSpan = ps
                    return found
    raise LookupError(name)


# -- encodings of the same request ------------------------------------------------------------


def to_otlp_json(req: Any, *, int64_as_numbers: bool = False) -> bytes:
    """Upper-case hex ids here: hex is case-insensitive, and the decoder must know it."""
    return encodings.to_otlp_json(req, int64_as_numbers=int64_as_numbers, upper_hex=True)


ENCODINGS: list[tuple[str, Callable[[ExportTraceServiceRequest], bytes]]] = [
    ("protobuf", lambda req: req.SerializeToString()),
    ("protobuf, length-prefixed as the file exporter writes it", length_prefixed),
    ("OTLP/JSON with int64 as strings", to_otlp_json),
    ("OTLP/JSON with int64 as numbers", lambda req: to_otlp_json(req, int64_as_numbers=True)),
    ("protobuf JSON mapping (base64 ids, enum names)", to_protobuf_json),
    ("protobuf JSON mapping with snake_case keys", to_protobuf_json_snake_case),
    ("gzipped protobuf", lambda req: gzip.compress(req.SerializeToString())),
    ("gzipped OTLP/JSON", lambda req: gzip.compress(to_otlp_json(req))),
]


def comparable(span: Span) -> tuple[Any, ...]:
    """Everything but `source` (which is the protobuf Span or the raw JSON dict)."""
    return (
        span.trace_id,
        span.span_id,
        span.parent_id,
        span.name,
        span.kind,
        span.start_ns,
        span.end_ns,
        span.status_code,
        span.status_message,
        span.attributes,
        [(e.name, e.time_ns, e.attributes) for e in span.events],
        span.resource,
        span.scope_name,
        span.scope_version,
    )


def by_name(decoded: Decoded) -> dict[str, Span]:
    return {span.name: span for span in decoded.spans}


# -- every encoding, the same spans -----------------------------------------------------------


def test_a_protobuf_request_decodes_to_hex_ids_parents_kinds_status_and_values() -> None:
    req = sdk_traces()
    decoded = decode_request(req)
    spans = by_name(decoded)
    agent, http, tool, chat = (
        spans[n]
        for n in ("invoke_agent shop", "GET /inventory", "execute_tool lookup", "chat gpt-5")
    )

    assert (
        agent.trace_id
        == base64.b16encode(span_named(req, "invoke_agent shop").trace_id).lower().decode()
    )
    assert len(agent.trace_id) == 32 and len(agent.span_id) == 16
    assert agent.parent_id is None
    assert http.parent_id == agent.span_id
    assert tool.parent_id == http.span_id  # a tool below a non-GenAI span keeps its parent
    assert chat.parent_id == agent.span_id
    assert {s.trace_id for s in (agent, http, tool, chat)} == {agent.trace_id}
    assert spans["SELECT orders"].trace_id != agent.trace_id

    assert (agent.kind, http.kind, chat.kind, spans["SELECT orders"].kind) == (1, 3, 3, 2)
    assert (tool.status_code, tool.status_message) == (STATUS_ERROR, "slow")
    assert tool.is_error
    assert chat.status_code == STATUS_OK
    assert agent.status_code == STATUS_UNSET
    assert 0 < agent.start_ns < tool.start_ns <= tool.end_ns < agent.end_ns

    assert agent.attributes == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "shop",
        "attest.allowed_tools": ["lookup", "order"],
        "gen_ai.request.temperature": 0.25,
        "gen_ai.request.max_tokens": 9_007_199_254_740_993,
        "gen_ai.request.stream": False,
        "gen_ai.request.seeds": [1, -2, 3],
        "gen_ai.request.flags": [True, False],
        "gen_ai.request.weights": [0.5, 1.5],
        "attest.tool_fallbacks": {"lookup": ["search"], "nothing": None},
        "gen_ai.blob": b"\x00\xffab",
    }
    assert tool.events == [
        Event(
            "exception",
            1_700_000_000_123_456_789,
            {"exception.type": "TimeoutError", "exception.message": "slow"},
        )
    ]
    assert [e.name for e in chat.events] == ["gen_ai.choice"]
    assert agent.resource == {"service.name": "shop-agent", "deployment.environment.name": "test"}
    assert (agent.scope_name, agent.scope_version) == ("shop.app", "1.2.3")
    assert (http.scope_name, http.scope_version) == (
        "opentelemetry.instrumentation.requests",
        "0.50b0",
    )
    # The source is the span's place in the request's bytes (the wire core decodes them).
    assert isinstance(agent.source, SpanSource)
    assert PbSpan.FromString(agent.source.record()).name == "invoke_agent shop"
    assert decoded.span_count == 5
    assert decoded.genai_span_count == 3


@pytest.mark.parametrize(
    "encode",
    [e for _, e in ENCODINGS],
    ids=[f"{name} gives the same spans" for name, _ in ENCODINGS],
)
def test_every_encoding_gives_the_same_spans(
    encode: Callable[[ExportTraceServiceRequest], bytes],
) -> None:
    req = sdk_traces()
    expected = [comparable(s) for s in decode_request(req).spans]

    decoded = decode_bytes(encode(req))

    assert [comparable(s) for s in decoded.spans] == expected
    assert (decoded.span_count, decoded.genai_span_count) == (5, 3)


@pytest.mark.parametrize(
    ("content_type", "encode"),
    [
        ("application/x-protobuf", lambda req: req.SerializeToString()),
        ("application/json", to_otlp_json),
        ("application/json; charset=utf-8", to_protobuf_json),
        (None, lambda req: b"\n  \t" + to_otlp_json(req)),
    ],
    ids=[
        "protobuf content type is trusted",
        "JSON content type is trusted",
        "JSON content type with parameters is trusted",
        "JSON with leading whitespace is sniffed",
    ],
)
def test_content_type_or_sniffing_picks_the_encoding(
    content_type: str | None, encode: Callable[[ExportTraceServiceRequest], bytes]
) -> None:
    req = sdk_traces()
    decoded = decode_bytes(encode(req), content_type)
    assert [comparable(s) for s in decoded.spans] == [
        comparable(s) for s in decode_request(req).spans
    ]


def test_json_spans_keep_their_own_text_as_source() -> None:
    decoded = decode_bytes(to_otlp_json(sdk_traces()))
    agent = by_name(decoded)["invoke_agent shop"]
    assert isinstance(agent.source, JsonSpan)
    assert json.loads(agent.source.text)["name"] == "invoke_agent shop"


def test_a_pretty_printed_protobuf_json_file_decodes(tmp_path: Path) -> None:
    path = tmp_path / "trace.json"
    path.write_text(json_format.MessageToJson(sdk_traces(), indent=2))
    assert decode_file(path).span_count == 5


def test_a_json_array_of_requests_decodes_each() -> None:
    body = b"[" + to_otlp_json(sdk_traces()) + b"," + to_protobuf_json(sdk_traces()) + b"]"
    assert decode_bytes(body).span_count == 10


# -- laziness ---------------------------------------------------------------------------------


def test_non_genai_spans_are_skeletons_with_structure_but_no_attributes() -> None:
    for data in (sdk_traces().SerializeToString(), to_otlp_json(sdk_traces())):
        spans = by_name(decode_bytes(data))
        http = spans["GET /inventory"]
        assert (http.attributes, http.events) == ({}, [])
        assert http.parent_id == spans["invoke_agent shop"].span_id
        assert http.kind == 3 and http.start_ns > 0
        assert is_skeleton(http)
        assert not is_skeleton(spans["invoke_agent shop"])


def test_hydrate_fills_a_skeleton_as_a_full_decode_would() -> None:
    for data in (sdk_traces().SerializeToString(), to_otlp_json(sdk_traces())):
        full = by_name(decode_bytes(data, lazy=False))["GET /inventory"]
        skeleton = by_name(decode_bytes(data))["GET /inventory"]

        assert hydrate(skeleton) is skeleton
        assert comparable(skeleton) == comparable(full)
        assert skeleton.attributes == {
            "http.request.method": "GET",
            "http.response.status_code": 200,
        }
        assert not is_skeleton(skeleton)


def test_lazy_false_decodes_every_span_in_full() -> None:
    decoded = decode_bytes(sdk_traces().SerializeToString(), lazy=False)
    assert decoded.genai_span_count == decoded.span_count == 5
    assert by_name(decoded)["SELECT orders"].attributes == {"db.system.name": "postgresql"}


def test_spans_of_one_resource_share_one_resource_dict() -> None:
    for data in (sdk_traces().SerializeToString(), to_otlp_json(sdk_traces())):
        spans = decode_bytes(data).spans
        assert all(span.resource is spans[0].resource for span in spans)


def test_by_trace_groups_spans_in_input_order() -> None:
    decoded = decode_request(sdk_traces())
    groups = decoded.by_trace()
    assert [len(spans) for spans in groups.values()] == [4, 1]
    agent_trace = by_name(decoded)["invoke_agent shop"].trace_id
    assert groups[agent_trace] == [s for s in decoded.spans if s.trace_id == agent_trace]


# -- logs -------------------------------------------------------------------------------------


def test_a_logs_request_gives_the_genai_events_with_their_span() -> None:
    traces = sdk_traces()
    agent = span_named(traces, "invoke_agent shop")

    decoded = decode_request(sdk_logs(traces))

    assert decoded.log_count == 2
    [record] = decoded.logs  # the plain application log is not kept
    assert record.event_name == "gen_ai.user.message"
    assert (record.trace_id, record.span_id) == (agent.trace_id.hex(), agent.span_id.hex())
    assert record.time_ns == 1_700_000_000_000_000_001
    assert record.body == {"content": "Is A-1 in stock?", "role": "user"}
    assert record.attributes == {"gen_ai.system": "openai"}


@pytest.mark.parametrize(
    "encode",
    [lambda r: r.SerializeToString(), to_otlp_json, to_protobuf_json, to_protobuf_json_snake_case],
    ids=[
        "a protobuf logs request is recognised",
        "an OTLP/JSON logs request is recognised",
        "a protobuf-JSON logs request is recognised",
        "a snake_case logs request is recognised",
    ],
)
def test_logs_requests_decode_in_every_encoding(encode: Callable[[Any], bytes]) -> None:
    logs = sdk_logs(sdk_traces())
    decoded = decode_bytes(encode(logs))
    assert decoded.logs == decode_request(logs).logs
    assert decoded.spans == []


def test_the_event_name_attribute_stands_in_for_the_event_name_field() -> None:
    body = {
        "resourceLogs": [
            {
                "scopeLogs": [
                    {
                        "logRecords": [
                            {
                                "timeUnixNano": "5",
                                "attributes": [
                                    {"key": "event.name", "value": {"stringValue": "gen_ai.choice"}}
                                ],
                                "body": {"stringValue": "done"},
                            }
                        ]
                    }
                ]
            }
        ]
    }
    [record] = decode_bytes(json.dumps(body).encode()).logs
    assert (record.event_name, record.trace_id, record.span_id, record.body) == (
        "gen_ai.choice",
        "",
        "",
        "done",
    )


# -- files of several requests ----------------------------------------------------------------


def test_json_lines_with_several_requests_and_a_logs_line_decode_together(tmp_path: Path) -> None:
    traces = sdk_traces()
    second = copy.deepcopy(traces)
    for rs in second.resource_spans:
        for ss in rs.scope_spans:
            for ps in ss.spans:
                ps.trace_id = bytes(15) + b"\x01"
    path = tmp_path / "otel.jsonl"
    path.write_bytes(
        to_otlp_json(traces)
        + b"\n"
        + to_otlp_json(sdk_logs(traces))
        + b"\n\n"
        + to_protobuf_json_snake_case(second)
        + b"\n"
    )

    decoded = decode_file(path)

    assert decoded.span_count == 10
    assert len(decoded.logs) == 1
    assert len(decoded.by_trace()) == 3  # 2 traces, then the second request's one trace


def test_the_collector_file_exporter_fixture_decodes() -> None:
    decoded = decode_file(FIXTURES / "collector_file_exporter.jsonl")

    spans = by_name(decoded)
    assert list(spans) == [
        "invoke_agent weather",
        "POST /forecast",
        "execute_tool get_forecast",
        "GET /healthz",
    ]
    tool = spans["execute_tool get_forecast"]
    assert tool.trace_id == "5b8efff798038103d269b633813fc60c"  # upper-case hex in the file
    assert tool.parent_id == "1111111111111111"
    assert spans["POST /forecast"].parent_id == "eee19b7ec3c1b174"
    assert (tool.status_code, tool.status_message) == (STATUS_ERROR, "upstream timeout")
    assert tool.start_ns == 1_700_000_001_100_000_000  # given as a JSON number
    assert tool.attributes["gen_ai.tool.call.arguments"] == '{"city": "Oslo"}'
    assert spans["POST /forecast"].attributes == {}
    assert [r.event_name for r in decoded.logs] == ["gen_ai.user.message"]
    assert decoded.logs[0].body == {"content": "Weather in Oslo?"}
    assert (decoded.span_count, decoded.genai_span_count, decoded.log_count) == (4, 2, 2)


def test_the_snake_case_protobuf_json_fixture_decodes() -> None:
    decoded = decode_file(FIXTURES / "protobuf_json_mapping_snake_case.json")
    agent, tool = decoded.spans
    assert (agent.trace_id, agent.span_id) == (
        "5b8efff798038103d269b633813fc60c",
        "eee19b7ec3c1b174",
    )
    assert tool.parent_id == agent.span_id
    assert agent.status_code == STATUS_OK and tool.status_code == STATUS_ERROR
    assert agent.kind == 1
    assert agent.attributes["attest.allowed_tools"] == ["get_forecast"]


def test_a_length_prefixed_file_may_mix_traces_and_logs() -> None:
    traces = sdk_traces()
    decoded = decode_bytes(length_prefixed(traces, sdk_logs(traces), traces))
    assert decoded.span_count == 10
    assert len(decoded.logs) == 1


def test_concatenated_gzip_members_are_all_read() -> None:
    member = gzip.compress(to_otlp_json(sdk_traces()) + b"\n")
    assert decode_bytes(member + member).span_count == 10


def test_an_empty_body_is_an_empty_request() -> None:
    for data in (b"", b"{}", b"  \n"):
        assert decode_bytes(data) == Decoded()


# -- errors: one line, where and what ---------------------------------------------------------


def _truncated_protobuf() -> bytes:
    data: bytes = sdk_traces().SerializeToString()
    return data[:-7]


def _bomb() -> bytes:
    return gzip.compress(b"0" * (4 * 1024 * 1024))


def _bad_id_protobuf() -> bytes:
    req = sdk_traces()
    span_named(req, "chat gpt-5").trace_id = b"\x01\x02\x03"
    data: bytes = req.SerializeToString()
    return data


ERRORS: list[tuple[str, bytes, dict[str, Any], str, int | None]] = [
    (
        "text that is neither JSON nor protobuf says so",
        b"hello world, this is not telemetry",
        {},
        "not OTLP: neither JSON nor protobuf",
        None,
    ),
    ("broken JSON names the column", b'{"resourceSpans": [}', {}, "invalid JSON at column 20", 1),
    (
        "JSON that is not OTLP names the keys it found",
        b'{"data": []}',
        {},
        "not OTLP: expected resourceSpans, got keys 'data'",
        None,
    ),
    (
        "a JSON number is not a request",
        b"[42]",
        {},
        "not OTLP: expected a JSON object with resourceSpans, got int",
        None,
    ),
    (
        "a short hex trace id is refused",
        b'{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"abc","spanId":"00f067aa0ba902b7"}]}]}]}',
        {},
        "resourceSpans[0].scopeSpans[0].spans[0]: trace id must be 16 bytes (32 hex chars), "
        "got 'abc' (3 chars)",
        None,
    ),
    (
        "a non-hex trace id is refused",
        b'{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"zz8efff798038103d269b633813fc60c",'
        b'"spanId":"00f067aa0ba902b7"}]}]}]}',
        {},
        "trace id is not hex",
        None,
    ),
    (
        "a missing span id is refused",
        b'{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"5b8efff798038103d269b633813fc60c"}]}]}]}',
        {},
        "resourceSpans[0].scopeSpans[0].spans[0]: span id is missing",
        None,
    ),
    (
        "a protobuf trace id of the wrong length is refused",
        _bad_id_protobuf(),
        {},
        "trace id must be 16 bytes, got 3 bytes (010203)",
        None,
    ),
    ("truncated protobuf says truncated", _truncated_protobuf(), {}, "truncated protobuf", None),
    (
        "an unknown span kind name is refused",
        b'{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"5b8efff798038103d269b633813fc60c",'
        b'"spanId":"00f067aa0ba902b7","kind":"SPAN_KIND_SIDEWAYS"}]}]}]}',
        {},
        "unknown span kind 'SPAN_KIND_SIDEWAYS'",
        None,
    ),
    (
        "a bad intValue in a GenAI span is refused",
        b'{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"5b8efff798038103d269b633813fc60c",'
        b'"spanId":"00f067aa0ba902b7","name":"chat","attributes":[{"key":"n","value":{"intValue":"x"}}]}]}]}]}',
        {},
        "bad intValue: 'x'",
        None,
    ),
    (
        "a gzip bomb stops at the inflate bound",
        _bomb(),
        {"max_inflated_bytes": 1024 * 1024},
        "gzip data inflates to more than 1048576 bytes (max_inflated_bytes)",
        None,
    ),
    ("truncated gzip says truncated", _bomb()[:200], {}, "truncated gzip data", None),
    (
        "a truncated length-prefixed file names the message",
        length_prefixed(sdk_traces())[:-3],
        {},
        "message 1 at byte 0: truncated protobuf",
        None,
    ),
    ("invalid UTF-8 in JSON is refused", b'{"a": "\xff"}', {}, "not UTF-8 text (byte 7)", None),
    (
        "scopeSpans that is no list is refused where it stands",
        b'{"resourceSpans":[{"scopeSpans":{"spans":[]}}]}',
        {},
        "resourceSpans[0]: scopeSpans must be a list, got {'spans': []}",
        None,
    ),
    (
        "a scopeSpans entry that is no object is refused with its path",
        b'{"resourceSpans":[{"scopeSpans":[{"spans":[]},7]}]}',
        {},
        "resourceSpans[0].scopeSpans[1]: expected an object, got 7",
        None,
    ),
    (
        "scopeLogs that is no list is refused where it stands",
        b'{"resourceLogs":[{"scopeLogs":"x"}]}',
        {},
        "resourceLogs[0]: scopeLogs must be a list, got 'x'",
        None,
    ),
    (
        "a scopeLogs entry that is no object is refused with its path",
        b'{"resourceLogs":[{"scopeLogs":[[]]}]}',
        {},
        "resourceLogs[0].scopeLogs[0]: expected an object, got []",
        None,
    ),
]


@pytest.mark.parametrize(
    ("data", "kwargs", "message", "line"),
    [e[1:] for e in ERRORS],
    ids=[e[0] for e in ERRORS],
)
def test_bad_input_raises_one_clear_input_error(
    data: bytes, kwargs: dict[str, Any], message: str, line: int | None
) -> None:
    with pytest.raises(InputError) as caught:
        decode_bytes(data, source="in.otlp", **kwargs)
    error = caught.value
    assert message in str(error)
    assert str(error).startswith("in.otlp")
    assert "\n" not in str(error)
    assert error.line == line


def test_a_bad_line_in_the_middle_of_json_lines_names_the_line() -> None:
    path = FIXTURES / "invalid_line_3_truncated.jsonl"
    with pytest.raises(InputError) as caught:
        decode_file(path)
    assert caught.value.line == 3
    assert str(caught.value).startswith(f"{path}:3: invalid JSON at column")


def test_a_bad_span_in_json_lines_names_its_line_and_path(tmp_path: Path) -> None:
    good = to_otlp_json(sdk_traces())
    bad = json.loads(good)
    bad["resourceSpans"][0]["scopeSpans"][0]["spans"][1]["spanId"] = "1234"
    path = tmp_path / "x.jsonl"
    path.write_bytes(good + b"\n" + json.dumps(bad).encode() + b"\n")
    with pytest.raises(InputError) as caught:
        decode_file(path)
    assert caught.value.line == 2
    assert "resourceSpans[0].scopeSpans[0].spans[1]: span id must be 8 bytes" in str(caught.value)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("invalid_short_trace_id.json", "trace id must be 16 bytes (32 hex chars), got '5b8e"),
        ("invalid_jaeger_json.json", "not OTLP: expected resourceSpans, got keys 'data'"),
        ("invalid_not_otlp.csv", "not OTLP: neither JSON nor protobuf"),
        ("does_not_exist.json", "cannot read: No such file or directory"),
    ],
    ids=[
        "a fixture with a short trace id is refused",
        "a Jaeger JSON fixture is not OTLP",
        "a CSV fixture is not OTLP",
        "a missing file cannot be read",
    ],
)
def test_bad_fixture_files_raise_input_errors(name: str, message: str) -> None:
    with pytest.raises(InputError) as caught:
        decode_file(FIXTURES / name)
    assert message in str(caught.value)
    assert str(caught.value).startswith(str(FIXTURES / name))


# -- JSON details -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"doubleValue": "Infinity"}, float("inf")),
        ({"doubleValue": "-Infinity"}, float("-inf")),
        ({"doubleValue": 3}, 3.0),
        ({"intValue": "-9223372036854775808"}, -(2**63)),
        ({"int_value": 7}, 7),
        ({"bytesValue": "AP9hYg"}, b"\x00\xffab"),
        ({"bytes_value": "-_8="}, b"\xfb\xff"),
        ({"boolValue": False}, False),
        ({"arrayValue": {}}, []),
        ({"kvlistValue": {"values": [{"key": "k"}]}}, {"k": None}),
        ({}, None),
    ],
    ids=[
        "Infinity as protobuf JSON writes it",
        "minus Infinity as protobuf JSON writes it",
        "a whole double written as an integer stays a float",
        "the smallest int64 as a string",
        "a snake_case int as a number",
        "unpadded base64 bytes",
        "URL-safe snake_case base64 bytes",
        "false stays a bool",
        "an empty array",
        "a kvlist entry without a value",
        "an empty value",
    ],
)
def test_json_attribute_values(value: dict[str, Any], expected: Any) -> None:
    request = {
        "resourceSpans": [
            {
                "scopeSpans": [
                    {
                        "spans": [
                            {
                                "traceId": "5b8efff798038103d269b633813fc60c",
                                "spanId": "eee19b7ec3c1b174",
                                "name": "chat",
                                "attributes": [{"key": "v", "value": value}],
                            }
                        ]
                    }
                ]
            }
        ]
    }
    [span] = decode_bytes(json.dumps(request).encode()).spans
    assert span.attributes["v"] == expected
    assert type(span.attributes["v"]) is type(expected)


def test_nan_doubles_from_protobuf_json_are_read() -> None:
    body = (
        b'{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"5b8efff798038103d269b633813fc60c",'
        b'"spanId":"eee19b7ec3c1b174","name":"chat","attributes":[{"key":"x","value":'
        b'{"doubleValue":"NaN"}}]}]}]}]}'
    )
    [span] = decode_bytes(body).spans
    assert span.attributes["x"] != span.attributes["x"]  # NaN


def test_the_old_instrumentation_library_keys_are_read() -> None:
    body = {
        "resourceSpans": [
            {
                "instrumentationLibrarySpans": [
                    {
                        "instrumentationLibrary": {"name": "pydantic-ai", "version": "0.1"},
                        "spans": [
                            {
                                "traceId": "5b8efff798038103d269b633813fc60c",
                                "spanId": "eee19b7ec3c1b174",
                                "name": "model request",
                            }
                        ],
                    }
                ]
            }
        ]
    }
    [span] = decode_bytes(json.dumps(body).encode()).spans
    assert (span.scope_name, span.scope_version) == ("pydantic-ai", "0.1")
