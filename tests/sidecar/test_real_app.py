"""A real app through `serve`: the openai SDK under the official instrumentation, with its
content in log records, exported by the OTel SDK's own OTLP exporters (issue 24).

Before logs were taken, this app's failing run came out of the sidecar as PASS: the spans
hold no content, the tool results are in the log records, and `LogsService` answered
UNIMPLEMENTED. The grade the sidecar writes on each agent span must equal `grade --file`
over the same traces and logs; every log record the app sent arrives downstream once;
metrics arrive too.
"""

from __future__ import annotations

import collections
import re
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import Gauge, Metric, NumberDataPoint

from tests.sidecar.downstream import Downstream
from tests.sidecar.helpers import Sidecar, free_port
from tests.sidecar.real_app import (
    app_log_records,
    app_metric_requests,
    captured_log_records,
    file_grades,
    grades_on_spans,
    run_app,
    store_grades,
)

RUNS = 3
FAIL = [1]


def _run(
    sidecar: Sidecar,
    downstream: Downstream,
    tmp_path: Path,
    protocol: str,
    buffer: dict[str, Any] | None = None,
    **app: Any,
) -> tuple[dict[str, Any], Path]:
    sidecar.config = {"buffer": {"grace_s": 0.3, "idle_timeout_s": 5.0, **(buffer or {})}}
    sidecar.start()
    endpoint = sidecar.grpc_endpoint if protocol == "grpc" else sidecar.http_url
    capture = tmp_path / "capture.jsonl"
    result = run_app(
        {
            "endpoint": endpoint,
            "protocol": protocol,
            "runs": RUNS,
            "fail": FAIL,
            "capture": str(capture),
            **app,
        }
    )
    traces = {run["trace_id"] for run in result["runs"]}
    assert downstream.wait_for(lambda d: traces <= set(grades_on_spans(d)), timeout=30), (
        sidecar.log()
    )
    return result, capture


def _same_as_file(downstream: Downstream, capture: Path, result: dict[str, Any]) -> None:
    on_spans = grades_on_spans(downstream)
    from_file = file_grades(capture)
    traces = {run["trace_id"] for run in result["runs"]}
    assert {t: on_spans[t] for t in traces} == {t: from_file[t] for t in traces}
    failing = {run["trace_id"] for run in result["runs"] if run["fail"]}
    assert {t for t in traces if on_spans[t][0] == "fail"} == failing
    assert all(on_spans[t][2] == 2 for t in traces)  # both tool calls read


def _logs_once(downstream: Downstream, capture: Path) -> None:
    sent = collections.Counter(captured_log_records(capture))
    assert sent, "the app sent no log records"
    assert downstream.wait_for(
        lambda d: collections.Counter(app_log_records(d)) == sent, timeout=15
    ), (collections.Counter(app_log_records(downstream)), sent)


def _metrics_arrived(downstream: Downstream) -> None:
    def names(d: Downstream) -> set[str]:
        return {
            m.name
            for r in app_metric_requests(d)
            for rm in r.resource_metrics
            for sm in rm.scope_metrics
            for m in sm.metrics
        }

    assert downstream.wait_for(lambda d: "gen_ai.client.token.usage" in names(d), timeout=15)


def test_grpc_app_graded_as_grade_file_with_its_log_records(
    sidecar: Sidecar, downstream: Downstream, tmp_path: Path
) -> None:
    result, capture = _run(sidecar, downstream, tmp_path, "grpc")
    _same_as_file(downstream, capture, result)
    _logs_once(downstream, capture)
    _metrics_arrived(downstream)
    assert "UNIMPLEMENTED" not in result["stderr"]


def test_http_protobuf_gzip_app(sidecar: Sidecar, downstream: Downstream, tmp_path: Path) -> None:
    result, capture = _run(sidecar, downstream, tmp_path, "http", gzip=True)
    _same_as_file(downstream, capture, result)
    _logs_once(downstream, capture)
    _metrics_arrived(downstream)


def test_the_app_the_issue_reported_no_agent_or_tool_spans(
    sidecar: Sidecar, downstream: Downstream, tmp_path: Path
) -> None:
    """Only the instrumentation's model spans under a plain root: the calls are known from
    the conversation in the log records alone (before: PASS 1.00 with 0 calls)."""
    result, capture = _run(sidecar, downstream, tmp_path, "grpc", bare=True)
    _same_as_file(downstream, capture, result)
    _logs_once(downstream, capture)
    # The log records were stored with the spans: graded again from the store, the runs
    # read the same calls.
    assert sidecar.terminate() == 0
    traces = {run["trace_id"] for run in result["runs"]}
    from_file = file_grades(capture)
    assert store_grades(tmp_path / "store.db", traces) == {t: from_file[t] for t in traces}


def test_http_json_gzip_app(sidecar: Sidecar, downstream: Downstream, tmp_path: Path) -> None:
    result, capture = _run(sidecar, downstream, tmp_path, "json", gzip=True)
    _same_as_file(downstream, capture, result)
    _logs_once(downstream, capture)


def test_logs_before_their_spans(sidecar: Sidecar, downstream: Downstream, tmp_path: Path) -> None:
    """The spans' exporter 2 s late: the log records are held, waiting for their trace."""
    result, capture = _run(sidecar, downstream, tmp_path, "grpc", spans_delay_s=2.0)
    _same_as_file(downstream, capture, result)
    _logs_once(downstream, capture)


def test_logs_seconds_after_their_spans(
    sidecar: Sidecar, downstream: Downstream, tmp_path: Path
) -> None:
    """The logs' exporter 2 s late, inside a 3 s grace: the run waits for its records."""
    result, capture = _run(
        sidecar, downstream, tmp_path, "grpc", buffer={"grace_s": 3.0}, logs_delay_s=2.0
    )
    _same_as_file(downstream, capture, result)
    _logs_once(downstream, capture)
    assert "after their trace was graded" not in sidecar.log()


def _rejected(port: int, reason: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    m = re.search(
        r'attest_sidecar_requests_rejected_total\{[^}]*reason="' + reason + r'"[^}]*\} ([0-9.e+]+)',
        text,
    )
    return float(m.group(1)) if m else 0.0


def test_oversize_tool_span_is_refused_counted_logged_and_a_gap_of_its_run(
    sidecar: Sidecar, downstream: Downstream, tmp_path: Path
) -> None:
    """A 5 MiB tool span under the default limits (HTTP 20 MiB would take it: the limit
    here is the gRPC one). The model's last answer takes 5.5 s, so the batch with the tool
    span leaves on the processor's 5 s schedule, alone, and the agent span after it."""
    prom = free_port()
    sidecar.extra_args = ["--prometheus", f"127.0.0.1:{prom}"]
    sidecar.config = {
        "buffer": {"grace_s": 0.3, "idle_timeout_s": 20.0},
        "telemetry": {"metrics": True},
    }
    sidecar.start()
    capture = tmp_path / "capture.jsonl"
    result = run_app(
        {
            "endpoint": sidecar.grpc_endpoint,
            "protocol": "grpc",
            "runs": 1,
            "fail": [],
            "capture": str(capture),
            "big_tool_mib": 5,
            "model_delay_s": 5.5,
        }
    )
    trace_id = result["runs"][0]["trace_id"]
    assert downstream.wait_for(lambda d: trace_id in grades_on_spans(d), timeout=30), sidecar.log()
    log = sidecar.log()
    assert re.search(
        r"refused a traces request from \S+ \(too_large\): a request of 5\.\d MiB", log
    )
    assert _rejected(prom, "too_large") >= 1
    graded = [line for line in log.splitlines() if "graded run" in line and trace_id in line]
    assert graded and "a traces request of this trace was refused" in graded[-1], log
    assert "over the 4 MiB limit" in graded[-1]
    assert "verdict=review" in graded[-1], graded[-1]  # not read whole: never a plain pass


def test_grpc_oversize_request_names_its_trace(sidecar: Sidecar, downstream: Downstream) -> None:
    """Over the limit, under the read cap: RESOURCE_EXHAUSTED (no RetryInfo), counted, and
    the trace it named is graded with the refusal as a gap when its other spans come."""
    from tests.sidecar.helpers import agent_run, provider

    sidecar.config = {"buffer": {"grace_s": 2.0, "idle_timeout_s": 5.0}}
    sidecar.start()
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    exporter = OTLPSpanExporter(endpoint=sidecar.grpc_endpoint, insecure=True)
    tp = provider(exporter)
    tracer = tp.get_tracer("test")
    trace_id, _ids = agent_run(tracer)
    big = ExportTraceServiceRequest()
    span = big.resource_spans.add().scope_spans.add().spans.add()
    span.trace_id = bytes.fromhex(trace_id)
    span.span_id = bytes.fromhex("00000000000000aa")
    span.name = "execute_tool fetch"
    span.attributes.append(KeyValue(key="payload", value=AnyValue(string_value="x" * (5 << 20))))
    with grpc.insecure_channel(
        sidecar.grpc_endpoint, options=[("grpc.max_send_message_length", -1)]
    ) as channel:
        call = channel.unary_unary(
            "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
            request_serializer=None,
            response_deserializer=None,
        )
        with pytest.raises(grpc.RpcError) as refused:
            call(big.SerializeToString(), timeout=10)
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "over the 4 MiB limit" in str(refused.value.details())
    tp.shutdown()
    assert downstream.wait_for(lambda d: trace_id in grades_on_spans(d), timeout=20)
    time.sleep(0.5)
    log = sidecar.log()
    assert "(too_large)" in log
    graded = [line for line in log.splitlines() if "graded run" in line and trace_id in line]
    assert graded and "was refused" in graded[-1], log


def _metrics_request() -> bytes:
    request = ExportMetricsServiceRequest()
    metric = request.resource_metrics.add().scope_metrics.add().metrics.add()
    metric.CopyFrom(
        Metric(
            name="app.queue.depth",
            gauge=Gauge(data_points=[NumberDataPoint(as_int=7, time_unix_nano=1)]),
        )
    )
    data: bytes = request.SerializeToString()
    return data


def test_metrics_pass_through_untouched_on_grpc_and_http(
    sidecar: Sidecar, downstream: Downstream
) -> None:
    sidecar.start()
    data = _metrics_request()
    with grpc.insecure_channel(sidecar.grpc_endpoint) as channel:
        call = channel.unary_unary(
            "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export",
            request_serializer=None,
            response_deserializer=None,
        )
        call(data, timeout=5)
    request = urllib.request.Request(
        f"{sidecar.http_url}/v1/metrics",
        data=data,
        method="POST",
        headers={"Content-Type": "application/x-protobuf"},
    )
    with urllib.request.urlopen(request, timeout=5) as r:
        assert r.status == 200
    assert downstream.wait_for(lambda d: len(d.requests["metrics"]) >= 2, timeout=10)
    assert downstream.requests["metrics"][:2] == [data, data]


@pytest.mark.parametrize("form", ["protobuf+gzip", "json"])
def test_http_oversize_body_is_a_413_that_names_its_trace(
    sidecar: Sidecar, downstream: Downstream, form: str
) -> None:
    """Over the HTTP limit (1 MiB here): 413, counted, logged with the sender, and the trace
    the body names graded with the refusal as a gap, read through gzip or from JSON."""
    import gzip
    import json

    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    from tests.sidecar.helpers import agent_run, provider

    sidecar.config = {
        "buffer": {"grace_s": 2.0, "idle_timeout_s": 5.0},
        "receivers": {"http": {"max_request_body_size_mib": 1, "max_json_body_size_mib": 1}},
    }
    sidecar.start()
    tp = provider(OTLPSpanExporter(endpoint=sidecar.grpc_endpoint, insecure=True))
    trace_id, _ids = agent_run(tp.get_tracer("test"))
    payload = "x" * (3 << 20)
    headers = {}
    if form == "json":
        document = {
            "resourceSpans": [
                {
                    "scopeSpans": [
                        {
                            "spans": [
                                {
                                    "traceId": trace_id,
                                    "spanId": "00000000000000aa",
                                    "name": "execute_tool fetch",
                                    "attributes": [
                                        {"key": "payload", "value": {"stringValue": payload}}
                                    ],
                                }
                            ]
                        }
                    ]
                }
            ]
        }
        body = json.dumps(document).encode()
        headers["Content-Type"] = "application/json"
    else:
        big = ExportTraceServiceRequest()
        span = big.resource_spans.add().scope_spans.add().spans.add()
        span.trace_id = bytes.fromhex(trace_id)
        span.span_id = bytes.fromhex("00000000000000aa")
        span.name = "execute_tool fetch"
        span.attributes.append(KeyValue(key="payload", value=AnyValue(string_value=payload)))
        body = gzip.compress(big.SerializeToString())  # small on the wire, 3 MiB inflated
        headers.update({"Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"})
    request = urllib.request.Request(
        f"{sidecar.http_url}/v1/traces", data=body, method="POST", headers=headers
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 413
    tp.shutdown()
    assert downstream.wait_for(lambda d: trace_id in grades_on_spans(d), timeout=20)
    time.sleep(0.5)
    log = sidecar.log()
    assert re.search(r"refused a traces request from 127\.0\.0\.1 \(too_large\)", log), log
    graded = [line for line in log.splitlines() if "graded run" in line and trace_id in line]
    assert graded and "was refused" in graded[-1] and "1 MiB limit" in graded[-1], log


def test_logs_and_metrics_survive_a_kill_9_under_buffer_dir(
    sidecar: Sidecar, downstream: Downstream, tmp_path: Path
) -> None:
    """Acknowledged log records (held with a trace or passed on) and metrics are in the
    durable log with their signal, and come back after a `kill -9`."""
    from tests.sidecar.test_log_wire import _logs

    sidecar.extra_args = ["--buffer-dir", str(tmp_path / "buffer")]
    sidecar.start()
    downstream.down = downstream.all_down = True
    logs = _logs([(bytes.fromhex("ab" * 16), "gen_ai.choice"), (bytes.fromhex("cd" * 16), "x")])
    metrics = _metrics_request()
    with grpc.insecure_channel(sidecar.grpc_endpoint) as channel:
        for method, body in (
            ("/opentelemetry.proto.collector.logs.v1.LogsService/Export", logs),
            ("/opentelemetry.proto.collector.metrics.v1.MetricsService/Export", metrics),
        ):
            channel.unary_unary(method, request_serializer=None, response_deserializer=None)(
                body, timeout=5
            )
    sidecar.kill()
    downstream.down = downstream.all_down = False
    sidecar.start()  # same ports, same buffer dir: replays

    def records(d: Downstream) -> list[bytes]:
        from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
            ExportLogsServiceRequest,
        )

        return [
            r.trace_id
            for raw in d.requests["logs"]
            for rl in ExportLogsServiceRequest.FromString(raw).resource_logs
            for sl in rl.scope_logs
            for r in sl.log_records
            if r.event_name in ("gen_ai.choice", "x")
        ]

    assert downstream.wait_for(lambda d: len(records(d)) >= 2, timeout=20), sidecar.log()
    assert sorted(records(downstream)) == sorted(
        [bytes.fromhex("ab" * 16), bytes.fromhex("cd" * 16)]
    )
    assert downstream.wait_for(lambda d: metrics in d.requests["metrics"], timeout=10)
    assert sidecar.terminate() == 0
