"""End to end: the real SDK exporters send grades to test OTLP receivers (gRPC and HTTP)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest

from attest_otel import semconv
from attest_otel.errors import ExportError, ListenError, UsageError
from attest_otel.export.delivery import ExportReport
from attest_otel.export.otlp_config import resolve_endpoint, resolve_protocol
from attest_otel.export.telemetry import build_telemetry
from attest_otel.model import CheckResult, Finding, Run
from tests.fakes.otlp_server import OtlpGrpcReceiver, OtlpHttpReceiver

from .sample import AGENT_SPAN_ID, TRACE_ID, graded_run, passing_run, tool_span_id


@dataclass
class Delivery:
    receiver: OtlpGrpcReceiver | OtlpHttpReceiver
    report: ExportReport
    run: Run
    result: CheckResult


def _deliver(receiver: OtlpGrpcReceiver | OtlpHttpReceiver, protocol: str) -> Delivery:
    run, result = graded_run()
    telemetry = build_telemetry(
        endpoint=receiver.endpoint,
        protocol=protocol,
        spans=True,
        logs=True,
        metrics=True,
        prometheus=None,
    )
    try:
        telemetry.emit_grade(run, result, grade_span=True)
        report = telemetry.flush()
    finally:
        telemetry.shutdown()
    return Delivery(receiver, report, run, result)


@pytest.fixture
def over_grpc(otlp_receiver: OtlpGrpcReceiver) -> Delivery:
    return _deliver(otlp_receiver, "grpc")


def _attrs(key_values: Any) -> dict[str, Any]:
    return {kv.key: getattr(kv.value, kv.value.WhichOneof("value")) for kv in key_values}


def _dead_endpoint() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


# --- delivered over OTLP/gRPC ----------------------------------------------------------------


def test_the_report_counts_what_each_signal_sent_over_grpc(over_grpc: Delivery) -> None:
    report = over_grpc.report
    assert report.ok, report.summary()
    traces, logs, metrics = (report.get(s) for s in ("traces", "logs", "metrics"))
    assert traces is not None and traces.sent == 1
    assert logs is not None and logs.sent == 13
    assert metrics is not None and metrics.sent > 0
    assert traces.destination == f"{over_grpc.receiver.endpoint} (grpc)"
    assert report.summary().startswith("sent 1 span to ")


def test_the_grade_span_arrives_in_the_runs_trace_under_the_agent_span(over_grpc: Delivery) -> None:
    (span,) = over_grpc.receiver.spans()
    assert span.name == "attest.grade"
    assert span.trace_id.hex() == TRACE_ID
    assert span.parent_span_id.hex() == AGENT_SPAN_ID
    assert {link.span_id.hex() for link in span.links} == {
        tool_span_id(f.step) for f in over_grpc.result.findings
    }
    assert all(link.trace_id.hex() == TRACE_ID for link in span.links)
    about = [_attrs(e.attributes)[semconv.ATTEST_SPAN_ID] for e in span.events]
    assert about[-1] == AGENT_SPAN_ID
    assert len(about) == len(over_grpc.result.findings) + 1
    resource = _attrs(over_grpc.receiver.resource_spans()[0].resource.attributes)
    assert resource["service.name"] == "attest-otel"


def test_log_records_carry_trace_id_span_id_and_event_name(over_grpc: Delivery) -> None:
    records = over_grpc.receiver.log_records()
    assert len(records) == 13
    assert {r.trace_id.hex() for r in records} == {TRACE_ID}
    assert [r.span_id.hex() for r in records] == [
        tool_span_id(f.step) for f in over_grpc.result.findings
    ] + [AGENT_SPAN_ID]
    assert {r.event_name for r in records} == {"gen_ai.evaluation.result"}
    assert {_attrs(r.attributes)["event.name"] for r in records} == {"gen_ai.evaluation.result"}


def test_metrics_arrive_with_their_names_values_and_trace_exemplars(over_grpc: Delivery) -> None:
    receiver = over_grpc.receiver
    assert {m.name for m in receiver.metrics()} == {
        "attest.tool_use.score",
        "attest.tool_use.runs",
        "attest.tool_use.calls",
        "attest.tool_use.errors",
    }
    calls = receiver.metric("attest.tool_use.calls", first=True)
    assert calls.unit == "{call}"
    assert calls.sum.is_monotonic
    assert sum(p.as_int for p in calls.sum.data_points) == 12
    score = receiver.metric("attest.tool_use.score", first=True)
    assert score.unit == "1"
    (point,) = score.histogram.data_points
    assert list(point.explicit_bounds) == [0, 0.25, 0.5, 0.75, 0.9, 1]
    assert point.count == 1 and point.sum == pytest.approx(0.5)
    (exemplar,) = point.exemplars
    assert exemplar.trace_id.hex() == TRACE_ID
    assert exemplar.span_id.hex() == AGENT_SPAN_ID
    call_exemplars = [e for p in calls.sum.data_points for e in p.exemplars]
    assert call_exemplars and {e.trace_id.hex() for e in call_exemplars} == {TRACE_ID}


# --- delivered over OTLP/HTTP ----------------------------------------------------------------


def test_all_three_signals_also_arrive_over_otlp_http(otlp_http_receiver: OtlpHttpReceiver) -> None:
    delivery = _deliver(otlp_http_receiver, "http/protobuf")
    assert delivery.report.ok, delivery.report.summary()
    (span,) = otlp_http_receiver.spans()
    assert span.trace_id.hex() == TRACE_ID and span.parent_span_id.hex() == AGENT_SPAN_ID
    assert len(otlp_http_receiver.log_records()) == 13
    assert otlp_http_receiver.metric("attest.tool_use.runs") is not None
    traces = delivery.report.get("traces")
    assert traces is not None
    assert traces.destination == f"{otlp_http_receiver.endpoint}/v1/traces (http/protobuf)"


def test_the_standard_otel_variables_choose_endpoint_protocol_and_service_name(
    otlp_http_receiver: OtlpHttpReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlp_http_receiver.endpoint)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-tenant=blue")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "grader-7")
    with build_telemetry(
        endpoint=None, protocol=None, spans=True, logs=False, metrics=False, prometheus=None
    ) as telemetry:
        telemetry.emit_grade(*passing_run(), grade_span=True)
        assert telemetry.flush().ok
    resource = _attrs(otlp_http_receiver.resource_spans()[0].resource.attributes)
    assert resource["service.name"] == "grader-7"
    assert otlp_http_receiver.headers["traces"][0]["x-tenant"] == "blue"


def test_explicit_headers_are_sent_as_grpc_metadata(otlp_receiver: OtlpGrpcReceiver) -> None:
    with build_telemetry(
        endpoint=otlp_receiver.endpoint,
        protocol="grpc",
        spans=False,
        logs=True,
        metrics=False,
        prometheus=None,
        headers={"authorization": "Bearer t0ken"},
    ) as telemetry:
        telemetry.emit_grade(*passing_run(), grade_span=False)
        assert telemetry.flush().ok
    assert otlp_receiver.headers["logs"][0]["authorization"] == "Bearer t0ken"


# --- turning outputs off ---------------------------------------------------------------------


def test_without_grade_span_only_the_log_events_and_metrics_go_out(
    otlp_receiver: OtlpGrpcReceiver,
) -> None:
    with build_telemetry(
        endpoint=otlp_receiver.endpoint,
        protocol="grpc",
        spans=True,
        logs=True,
        metrics=True,
        prometheus=None,
    ) as telemetry:
        telemetry.emit_grade(*passing_run(), grade_span=False)
        report = telemetry.flush()
    assert report.ok
    assert otlp_receiver.spans() == []
    assert len(otlp_receiver.log_records()) == 2
    assert otlp_receiver.metrics()


def test_outputs_that_are_off_send_nothing_and_are_not_in_the_report(
    otlp_receiver: OtlpGrpcReceiver,
) -> None:
    with build_telemetry(
        endpoint=otlp_receiver.endpoint,
        protocol="grpc",
        spans=False,
        logs=False,
        metrics=True,
        prometheus=None,
    ) as telemetry:
        telemetry.emit_grade(*passing_run(), grade_span=True)
        report = telemetry.flush()
    assert [s.signal for s in report.signals] == ["metrics"]
    assert otlp_receiver.spans() == [] and otlp_receiver.log_records() == []


# --- failures --------------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_a_dead_endpoint_fails_the_flush_within_the_timeout_and_says_why(protocol: str) -> None:
    endpoint = _dead_endpoint()
    telemetry = build_telemetry(
        endpoint=endpoint,
        protocol=protocol,
        spans=True,
        logs=True,
        metrics=True,
        prometheus=None,
        timeout_s=1.0,
    )
    telemetry.emit_grade(*graded_run(), grade_span=True)
    started = time.monotonic()
    report = telemetry.flush()
    elapsed = time.monotonic() - started
    shutdown_started = time.monotonic()
    telemetry.shutdown()
    assert elapsed < 2.5
    assert time.monotonic() - shutdown_started < 1.5
    assert not report.ok
    assert {s.signal for s in report.failures} == {"traces", "logs", "metrics"}
    line = report.summary()
    assert "\n" not in line
    # Signals that failed with the same reasons share a clause; under load the metrics'
    # export can also meet a deadline the others did not, so the grouping varies.
    assert line.startswith("could not export 1 span")
    assert "13 log records" in line and " metric points" in line
    assert endpoint in line and "connection refused" in line
    with pytest.raises(ExportError) as raised:
        report.raise_for_failure()
    assert raised.value.exit_code == 4


def test_a_receiver_that_rejects_the_data_is_reported_with_its_grpc_status(
    otlp_receiver: OtlpGrpcReceiver,
) -> None:
    otlp_receiver.fail_with = grpc.StatusCode.INVALID_ARGUMENT
    with build_telemetry(
        endpoint=otlp_receiver.endpoint,
        protocol="grpc",
        spans=True,
        logs=False,
        metrics=False,
        prometheus=None,
        timeout_s=2.0,
    ) as telemetry:
        telemetry.emit_grade(*passing_run(), grade_span=True)
        report = telemetry.flush()
    traces = report.get("traces")
    assert traces is not None and traces.failed == 1
    assert traces.error == "gRPC INVALID_ARGUMENT"


def test_a_receiver_that_rejects_the_data_is_reported_with_its_http_status(
    otlp_http_receiver: OtlpHttpReceiver,
) -> None:
    otlp_http_receiver.fail_with = 400
    with build_telemetry(
        endpoint=otlp_http_receiver.endpoint,
        protocol="http/protobuf",
        spans=False,
        logs=True,
        metrics=False,
        prometheus=None,
        timeout_s=2.0,
    ) as telemetry:
        telemetry.emit_grade(*passing_run(), grade_span=False)
        report = telemetry.flush()
    logs = report.get("logs")
    assert logs is not None and logs.failed == 2
    assert logs.error is not None and logs.error.startswith("HTTP 400")


def test_a_grade_that_cannot_be_encoded_is_reported_not_raised(
    otlp_receiver: OtlpGrpcReceiver,
) -> None:
    run, _ = passing_run()
    broken = CheckResult(
        "tool_use",
        True,
        "pass",
        1.0,
        "",
        [
            Finding("pass", "correct", "x", "", None, 0, None)  # type: ignore[arg-type]
        ],
        {},
    )
    with build_telemetry(
        endpoint=otlp_receiver.endpoint,
        protocol="grpc",
        spans=True,
        logs=True,
        metrics=False,
        prometheus=None,
    ) as telemetry:
        telemetry.emit_grade(run, broken, grade_span=True)
        report = telemetry.flush()
    assert not report.ok
    (encode,) = [s for s in report.signals if s.signal == "encode"]
    assert encode.failed == 2  # the grade span and the log events of one run
    assert report.summary().startswith("could not build the telemetry of 2 graded runs: ")


# --- configuration ---------------------------------------------------------------------------


def test_endpoints_resolve_as_the_otlp_exporter_spec_reads_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert resolve_endpoint("traces", "grpc", "collector:4317") == "http://collector:4317"
    assert resolve_endpoint("logs", "http/protobuf", "http://c:4318/") == "http://c:4318/v1/logs"
    assert (
        resolve_endpoint("logs", "http/protobuf", "http://c:4318/v1/logs")
        == "http://c:4318/v1/logs"
    )
    assert resolve_endpoint("metrics", "grpc", None) == "http://localhost:4317"
    assert resolve_endpoint("metrics", "http/protobuf", None) == "http://localhost:4318/v1/metrics"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "https://otel.example:4318")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://traces.example/custom")
    assert resolve_endpoint("logs", "http/protobuf", None) == "https://otel.example:4318/v1/logs"
    assert resolve_endpoint("traces", "http/protobuf", None) == "https://traces.example/custom"
    assert resolve_endpoint("traces", "grpc", "explicit:1") == "http://explicit:1"


def test_protocols_other_than_grpc_and_http_protobuf_are_usage_errors(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert resolve_protocol("traces", None) == "grpc"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    assert resolve_protocol("traces", None) == "http/protobuf"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_LOGS_PROTOCOL", "grpc")
    assert resolve_protocol("logs", None) == "grpc"
    with pytest.raises(UsageError, match="http/json is not supported"):
        resolve_protocol("traces", "http/json")
    with pytest.raises(UsageError, match="unknown OTLP protocol"):
        build_telemetry(
            endpoint=None,
            protocol="carrier-pigeon",
            spans=True,
            logs=False,
            metrics=False,
            prometheus=None,
        )


def test_a_non_positive_timeout_or_label_cap_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="timeout"):
        build_telemetry(
            endpoint=None,
            protocol=None,
            spans=False,
            logs=False,
            metrics=False,
            prometheus=None,
            timeout_s=0,
        )
    with pytest.raises(UsageError, match="label cap"):
        build_telemetry(
            endpoint=None,
            protocol=None,
            spans=False,
            logs=False,
            metrics=False,
            prometheus=None,
            label_cap=0,
        )


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


def test_a_prometheus_address_that_is_taken_or_malformed_is_reported(busy_port: int) -> None:
    with pytest.raises(
        ListenError, match=f"cannot serve Prometheus metrics on 127.0.0.1:{busy_port}"
    ):
        build_telemetry(
            endpoint=None,
            protocol=None,
            spans=False,
            logs=False,
            metrics=False,
            prometheus=f"127.0.0.1:{busy_port}",
        )
    with pytest.raises(UsageError, match="HOST:PORT"):
        build_telemetry(
            endpoint=None,
            protocol=None,
            spans=False,
            logs=False,
            metrics=False,
            prometheus="localhost",
        )


def test_with_the_sdk_disabled_nothing_is_built_and_nothing_is_reported_lost(
    otlp_receiver: OtlpGrpcReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_SDK_DISABLED", "TRUE")
    with build_telemetry(
        endpoint=otlp_receiver.endpoint,
        protocol="grpc",
        spans=True,
        logs=True,
        metrics=True,
        prometheus=None,
    ) as telemetry:
        telemetry.emit_grade(*passing_run(), grade_span=True)
        report = telemetry.flush()
    assert report.ok and not report.signals
    assert otlp_receiver.spans() == []


def test_the_metric_recorder_is_reachable_for_runs_graded_elsewhere() -> None:
    """The sidecar records the runs its grading processes graded through `metrics`
    (`record_many`); without it those runs would never reach the metrics."""
    from attest_otel.export.metrics import ToolUseMetrics

    telemetry = build_telemetry(
        endpoint=None,
        protocol=None,
        spans=False,
        logs=False,
        metrics=False,
        prometheus="127.0.0.1:0",
    )
    try:
        assert isinstance(telemetry.metrics, ToolUseMetrics)
    finally:
        telemetry.shutdown(timeout_s=1)
    none = build_telemetry(
        endpoint=None, protocol=None, spans=True, logs=False, metrics=False, prometheus=None
    )
    try:
        assert none.metrics is None
    finally:
        none.shutdown(timeout_s=1)
