"""Logs and metrics requests on the wire: cut into records and framed again, their traces
named when refused, OTLP/JSON of every signal, and log records held with their trace."""

from __future__ import annotations

import json

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import KeyValue

from attest_otel.sidecar.buffer import TraceBuffer
from attest_otel.sidecar.config import BufferConfig
from attest_otel.sidecar.json_in import otlp_json_to_protobuf
from attest_otel.sidecar.log_wire import (
    LOGS,
    METRICS,
    TRACES,
    is_genai_record,
    refused_trace_ids,
    split_logs,
    tag,
    untag,
)
from attest_otel.sidecar.wire import encode_groups, split_request

T1 = bytes.fromhex("11" * 16)
T2 = bytes.fromhex("22" * 16)


def _logs(records: list[tuple[bytes, str]], scope: str = "app") -> bytes:
    request = ExportLogsServiceRequest()
    rl = request.resource_logs.add()
    rl.resource.attributes.append(KeyValue(key="service.name"))
    rl.resource.attributes[0].value.string_value = "billing-app"
    sl = rl.scope_logs.add()
    sl.scope.name = scope
    for i, (trace_id, event) in enumerate(records):
        record = sl.log_records.add()
        record.time_unix_nano = 1000 + i
        record.trace_id = trace_id
        record.span_id = bytes([i + 1]) * 8
        record.event_name = event
        record.body.string_value = f"record {i}"
    data: bytes = request.SerializeToString()
    return data


def test_a_logs_request_is_cut_into_records_that_frame_again_under_their_origin() -> None:
    data = _logs([(T1, "gen_ai.client.inference.operation.details"), (T2, "app.event"), (T1, "")])
    groups = split_logs(data)
    assert len(groups) == 1
    group, heads = groups[0]
    assert [t for t, _e, _r in group.spans] == [T1, T2, T1]
    assert [span_id for span_id, _ in heads] == [b"\x01" * 8, b"\x02" * 8, b"\x03" * 8]
    ones = [r for t, _e, r in group.spans if t == T1]
    again = ExportLogsServiceRequest.FromString(encode_groups([(group.context, ones)]))
    records = again.resource_logs[0].scope_logs[0].log_records
    assert [r.body.string_value for r in records] == ["record 0", "record 2"]
    assert again.resource_logs[0].scope_logs[0].scope.name == "app"
    assert again.resource_logs[0].resource.attributes[0].value.string_value == "billing-app"


def test_genai_records_are_known_by_event_scope_or_key() -> None:
    data = _logs([(T1, "gen_ai.choice"), (T1, "app.event")])
    group, _ = split_logs(data)[0]
    flags = [is_genai_record(group, event, record) for _t, event, record in group.spans]
    assert flags == [True, False]
    scoped, _ = split_logs(_logs([(T1, "x")], scope="opentelemetry.instrumentation.openai_v2"))[0]
    assert all(is_genai_record(scoped, e, r) for _t, e, r in scoped.spans)


def test_durable_log_records_say_their_signal() -> None:
    data = _logs([(T1, "x")])
    assert untag(tag(LOGS, data)) == (LOGS, data)
    assert untag(tag(METRICS, b"\x0a\x00")) == (METRICS, b"\x0a\x00")
    traces = ExportTraceServiceRequest().SerializeToString() or b"\x0a\x00"
    assert untag(tag(TRACES, traces)) == (TRACES, traces)


def test_a_refused_request_names_its_traces_in_protobuf_and_json() -> None:
    assert refused_trace_ids(LOGS, _logs([(T1, "a"), (T2, "b")]), False) == {T1.hex(), T2.hex()}
    traces = ExportTraceServiceRequest()
    span = traces.resource_spans.add().scope_spans.add().spans.add()
    span.trace_id, span.span_id, span.name = T2, b"\x05" * 8, "execute_tool x"
    assert refused_trace_ids(TRACES, traces.SerializeToString(), False) == {T2.hex()}
    body = json.dumps({"resourceLogs": [{"scopeLogs": [{"logRecords": [{"traceId": T1.hex()}]}]}]})
    assert refused_trace_ids(LOGS, body.encode(), True) == {T1.hex()}
    assert refused_trace_ids(TRACES, b"\xff\xff\xff", False) == set()


def test_otlp_json_logs_and_metrics_become_protobuf_with_their_ids() -> None:
    logs = {
        "resourceLogs": [
            {
                "scopeLogs": [
                    {
                        "logRecords": [
                            {
                                "traceId": T1.hex(),
                                "spanId": "0102030405060708",
                                "eventName": "gen_ai.choice",
                                "body": {"stringValue": "hi"},
                            }
                        ]
                    }
                ]
            }
        ]
    }
    parsed = ExportLogsServiceRequest.FromString(
        otlp_json_to_protobuf(json.dumps(logs).encode(), LOGS)
    )
    record = parsed.resource_logs[0].scope_logs[0].log_records[0]
    assert (record.trace_id, record.span_id.hex(), record.event_name) == (
        T1,
        "0102030405060708",
        "gen_ai.choice",
    )
    metrics = {
        "resourceMetrics": [
            {
                "scopeMetrics": [
                    {
                        "metrics": [
                            {
                                "name": "m",
                                "sum": {
                                    "dataPoints": [
                                        {"asInt": "3", "exemplars": [{"traceId": T2.hex()}]}
                                    ]
                                },
                            }
                        ]
                    }
                ]
            }
        ]
    }
    parsed_m = ExportMetricsServiceRequest.FromString(
        otlp_json_to_protobuf(json.dumps(metrics).encode(), METRICS)
    )
    point = parsed_m.resource_metrics[0].scope_metrics[0].metrics[0].sum.data_points[0]
    assert (point.as_int, point.exemplars[0].trace_id) == (3, T2)


def _span_request(trace_id: bytes) -> bytes:
    request = ExportTraceServiceRequest()
    span = request.resource_spans.add().scope_spans.add().spans.add()
    span.trace_id, span.span_id, span.name = trace_id, b"\x09" * 8, "invoke_agent a"
    data: bytes = request.SerializeToString()
    return data


def test_log_records_are_held_with_their_trace_and_a_refusal_becomes_its_gap() -> None:
    now = [0.0]
    released: list[object] = []
    buffer = TraceBuffer(
        BufferConfig(grace_s=1.0, idle_timeout_s=10.0),
        probe=lambda *a: set(),
        release=released.extend,
        clock=lambda: now[0],
    )
    buffer.note_refused([T1], "a traces request of this trace was refused: too big")
    # GenAI-looking records of a trace not seen yet open it; plain ones of an unknown trace pass.
    group, _ = split_logs(_logs([(T1, "gen_ai.choice"), (T2, "app.event")]))[0]
    routed = buffer.route_logs([(group, [True, False])], None)
    assert (routed.held_records, routed.passthrough_records) == (1, 1)
    now[0] = 0.5
    spans = buffer.route(split_request(_span_request(T1)), {T1}, None)
    assert spans.held_spans == 1
    now[0] = 0.8  # a record of the held trace: held too, and the grace starts again
    group, _ = split_logs(_logs([(T1, "app.event")]))[0]
    assert buffer.route_logs([(group, [False])], None).held_records == 1
    (trace,) = buffer.release_all()
    assert (trace.spans, trace.log_count, trace.last_s) == (1, 2, 0.8)
    assert trace.gaps == ["a traces request of this trace was refused: too big"]
    logs = ExportLogsServiceRequest.FromString(bytes(trace.logs))
    assert sum(len(sl.log_records) for rl in logs.resource_logs for sl in rl.scope_logs) == 2
    assert buffer.held_bytes == 0
    # after grading, a record of the trace is late: forwarded at once
    group, _ = split_logs(_logs([(T1, "gen_ai.choice")]))[0]
    late = buffer.route_logs([(group, [True])], None)
    assert (late.late_records, late.passthrough_records, late.held_records) == (1, 1, 0)


def test_a_stored_trace_keeps_its_log_records_beside_its_spans() -> None:
    from attest_otel.store.blob import split, with_logs

    spans = _span_request(T1)
    logs = _logs([(T1, "gen_ai.choice")])
    stored = with_logs(spans, logs) + with_logs(_span_request(T2), _logs([(T2, "x")]))
    # a traces parser reads the spans and skips the records
    parsed = ExportTraceServiceRequest.FromString(stored)
    assert [rs.scope_spans[0].spans[0].trace_id for rs in parsed.resource_spans] == [T1, T2]
    got_spans, got_logs = split(stored)
    assert got_spans == spans + _span_request(T2)
    assert got_logs == logs + _logs([(T2, "x")])
    assert split(spans) == (spans, b"")
    assert with_logs(spans, b"") == spans


def test_records_without_a_trace_are_never_held() -> None:
    buffer = TraceBuffer(BufferConfig(), probe=lambda *a: set(), release=lambda t: None)
    group, _ = split_logs(_logs([(b"\x00" * 16, "gen_ai.choice"), (b"", "gen_ai.choice")]))[0]
    routed = buffer.route_logs([(group, [True, True])], None)
    assert (routed.held_records, routed.passthrough_records) == (0, 2)
    assert buffer.held_traces == 0
