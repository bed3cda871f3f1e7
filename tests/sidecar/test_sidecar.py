"""The sidecar as a user runs it: a subprocess between the OTel SDK's exporters and a
downstream OTLP server, everything real, on free loopback ports.

Timers are short (grace 0.3 s, idle 1.5 s, backoff <= 0.5 s) so the module stays fast.
"""

from __future__ import annotations

import collections
import gzip
import json
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
    OTLPSpanExporter as GrpcSpanExporter,
)
from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
    OTLPSpanExporter as HttpSpanExporter,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, Span

from attest_otel._proto.attest_otel.v1 import grader_pb2, grader_pb2_grpc, result_pb2
from tests.sidecar.downstream import Downstream
from tests.sidecar.helpers import REPO, Sidecar, agent_run, attr, free_port, plain_request, provider

pytestmark = pytest.mark.timeout(60)

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


def _export_call(endpoint: str) -> Any:
    channel = grpc.insecure_channel(endpoint)
    return channel, channel.unary_unary(EXPORT, request_serializer=None, response_deserializer=None)


def _plain_pb_request(n: int = 5, seed: int = 1, genai_key: bool = False) -> bytes:
    import random

    rng = random.Random(seed)
    rs = ResourceSpans()
    rs.resource.attributes.append(
        KeyValue(key="service.name", value=AnyValue(string_value="orders"))
    )
    ss = rs.scope_spans.add()
    ss.scope.name = "opentelemetry.instrumentation.flask"
    trace_id = rng.randbytes(16)
    for i in range(n):
        span = Span(
            trace_id=trace_id,
            span_id=rng.randbytes(8),
            name=f"GET /orders/{i}",
            kind=Span.SPAN_KIND_SERVER,
            start_time_unix_nano=1_700_000_000_000_000_000,
            end_time_unix_nano=1_700_000_000_100_000_000,
        )
        span.attributes.append(
            KeyValue(key="http.request.method", value=AnyValue(string_value="GET"))
        )
        span.attributes.append(
            KeyValue(key="user_agent.original", value=AnyValue(string_value="curl/8"))
        )
        if genai_key:
            span.attributes.append(
                KeyValue(key="gen_ai.agent.name", value=AnyValue(string_value="x"))
            )
        ss.spans.append(span)
    req = ExportTraceServiceRequest()
    req.resource_spans.append(rs)
    data: bytes = req.SerializeToString()
    return data


def _ids_of(data: bytes) -> list[str]:
    req = ExportTraceServiceRequest.FromString(data)
    return [s.span_id.hex() for rs in req.resource_spans for ss in rs.scope_spans for s in ss.spans]


def _post(
    url: str,
    body: bytes,
    ctype: str = "application/x-protobuf",
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(
        url, data=body, method="POST", headers={"Content-Type": ctype, **(headers or {})}
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


# --- the happy path ------------------------------------------------------------------------------


def test_sdk_exporters_grpc_and_http_every_span_arrives_once_and_tool_spans_are_annotated(
    sidecar: Sidecar, downstream: Downstream, tmp_path: Path
) -> None:
    sidecar.config = {"grading": {"processes": 1}}  # the default: grading in a worker process
    sidecar.start()
    grpc_tp = provider(GrpcSpanExporter(endpoint=sidecar.grpc_endpoint, insecure=True))
    http_tp = provider(HttpSpanExporter(endpoint=f"{sidecar.http_url}/v1/traces"))
    sent: dict[str, list[str]] = {}
    runs: dict[str, tuple[str, list[str]]] = {}
    plain: set[str] = set()
    for name, tp in (("grpc", grpc_tp), ("http", http_tp)):
        tracer = tp.get_tracer("tests.sidecar")
        runs[f"{name}-clean"] = agent_run(tracer, tools=[("lookup_invoice", "invoice 42: paid")])
        runs[f"{name}-recovered"] = agent_run(
            tracer, tools=[("lookup_invoice", None), ("lookup_invoice", "invoice 42: paid")]
        )
        runs[f"{name}-unrecovered"] = agent_run(
            tracer, tools=[("charge_card", None)], answer="Done, your card was charged."
        )
        for _ in range(3):
            _, ids = plain_request(tracer)
            plain.update(ids)
        tp.force_flush()
    for tid, ids in runs.values():
        sent[tid] = ids
    every = set(plain) | {i for ids in sent.values() for i in ids}
    assert downstream.wait_spans(every), sidecar.log()

    spans = downstream.spans()
    counts = collections.Counter(s.span_id.hex() for s in spans)
    assert {i for i, c in counts.items() if c > 1} == set()
    assert set(counts) == every
    by_id = {s.span_id.hex(): s for s in spans}
    for key, (_tid, ids) in runs.items():
        *tool_ids, agent_id = ids
        for tool_id in tool_ids:
            tool = by_id[tool_id]
            assert [e.name for e in tool.events] == ["gen_ai.evaluation.result"], key
            event = tool.events[0]
            assert attr(event.attributes, "gen_ai.evaluation.name") == "attest.tool_use"
            assert attr(tool.attributes, "attest.verdict") is not None
        verdict = attr(by_id[agent_id].attributes, "attest.tool_use.verdict")
        assert verdict == ("fail" if key.endswith("-unrecovered") else "pass"), key
    for span_id in plain:
        span = by_id[span_id]
        assert list(span.events) == []
        assert not any(kv.key.startswith("attest.") for kv in span.attributes)

    # The grade is in the store: `grade --trace-id` reads it back (text, JSON, unknown id).
    tid = runs["grpc-unrecovered"][0]
    store = str(tmp_path / "store.db")
    cmd = [sys.executable, "-m", "attest_otel.cli", "grade", "--trace-id"]
    deadline = time.monotonic() + 10
    while True:
        out = subprocess.run(
            [*cmd, tid, "--store", store, "--json"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
        if out.returncode != 2 or time.monotonic() > deadline:
            break
        time.sleep(0.2)  # the store is written just after forwarding
    assert out.returncode == 1, out.stderr
    [trace] = json.loads(out.stdout)["traces"]
    assert trace["trace_id"] == tid
    assert [run["result"]["verdict"] for run in trace["runs"]] == ["fail"]
    text = subprocess.run(
        [*cmd, runs["http-clean"][0], "--store", store],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert text.returncode == 0 and "PASS" in text.stdout, text.stderr
    unknown = subprocess.run(
        [*cmd, "0" * 32, "--store", store], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert unknown.returncode == 2
    assert unknown.stdout == "" and len(unknown.stderr.strip().splitlines()) == 1

    grpc_tp.shutdown()
    http_tp.shutdown()
    assert sidecar.terminate() == 0
    # Log events of the grades went to the telemetry endpoint (the downstream here).
    assert downstream.requests["logs"], sidecar.log()


def test_a_request_without_genai_spans_is_forwarded_as_the_same_bytes(
    sidecar: Sidecar, downstream: Downstream
) -> None:
    sidecar.start()
    channel, export = _export_call(sidecar.grpc_endpoint)
    sent_grpc = _plain_pb_request(seed=1)
    export(sent_grpc, timeout=5)
    sent_http = _plain_pb_request(seed=2)
    status, _headers, _body = _post(
        f"{sidecar.http_url}/v1/traces",
        gzip.compress(sent_http),
        headers={"Content-Encoding": "gzip"},
    )
    assert status == 200
    assert downstream.wait_for(lambda d: len(d.trace_requests()) >= 2), sidecar.log()
    assert sorted(downstream.trace_requests()) == sorted([sent_grpc, sent_http])
    channel.close()


def test_late_spans_of_a_graded_trace_are_forwarded_as_they_are(
    sidecar: Sidecar, downstream: Downstream
) -> None:
    sidecar.start()
    tp = provider(GrpcSpanExporter(endpoint=sidecar.grpc_endpoint, insecure=True))
    tracer = tp.get_tracer("tests.sidecar")
    from opentelemetry import trace

    with tracer.start_as_current_span("POST /checkout") as root:  # the agent's parent
        tid, ids = agent_run(tracer)
        tp.force_flush()
        assert downstream.wait_spans(set(ids)), sidecar.log()
        root_id = format(root.get_span_context().span_id, "016x")
        assert trace.get_current_span() is root
    tp.force_flush()
    assert downstream.wait_spans({root_id})
    late = next(s for s in downstream.spans() if s.span_id.hex() == root_id)
    assert list(late.events) == [] and not any(
        kv.key.startswith("attest.") for kv in late.attributes
    )
    assert tid == late.trace_id.hex()
    tp.shutdown()
    assert sidecar.terminate() == 0
    assert "spans_late=1" in sidecar.log()


# --- failures downstream and overload ------------------------------------------------------------


def test_downstream_down_for_a_while_then_up_loses_nothing(
    sidecar: Sidecar, downstream: Downstream
) -> None:
    sidecar.start()
    port = downstream.port
    downstream.stop()  # connection refused for a while
    tp = provider(GrpcSpanExporter(endpoint=sidecar.grpc_endpoint, insecure=True))
    tracer = tp.get_tracer("tests.sidecar")
    ids: set[str] = set()
    for _ in range(3):
        ids.update(agent_run(tracer)[1])
        ids.update(plain_request(tracer)[1])
    tp.force_flush()
    time.sleep(1.5)  # grace passes, grades are queued, forwarding retries meanwhile
    revived = Downstream(port).start()
    try:
        assert revived.wait_spans(ids, timeout=20), sidecar.log()
        assert collections.Counter(revived.span_ids()).most_common(1)[0][1] == 1
    finally:
        tp.shutdown()
        assert sidecar.terminate() == 0
        revived.stop()
    assert "retry" in sidecar.log()


def test_overload_answers_retryable_and_loses_nothing(
    sidecar: Sidecar, downstream: Downstream
) -> None:
    sidecar.config = {"forward": {"max_queue_spans": 20, "workers": 1}}
    sidecar.start()
    downstream.down = True
    channel, export = _export_call(sidecar.grpc_endpoint)
    accepted: list[bytes] = []
    refused_grpc: grpc.RpcError | None = None
    for seed in range(20):
        body = _plain_pb_request(n=5, seed=100 + seed)
        try:
            export(body, timeout=5)
            accepted.append(body)
        except grpc.RpcError as e:
            refused_grpc = e
            break
    assert refused_grpc is not None, "the queue never filled"
    assert refused_grpc.code() == grpc.StatusCode.UNAVAILABLE
    trailers = dict(refused_grpc.trailing_metadata() or ())
    info = error_details_pb2.RetryInfo.FromString(trailers["google.rpc.retryinfo-bin"])
    assert info.retry_delay.seconds >= 1
    details = status_pb2.Status.FromString(trailers["grpc-status-details-bin"])
    assert details.code == 14 and details.details[0].Is(error_details_pb2.RetryInfo.DESCRIPTOR)

    status, headers, body = _post(f"{sidecar.http_url}/v1/traces", _plain_pb_request(seed=999))
    assert status == 503 and int(headers["Retry-After"]) >= 1
    assert status_pb2.Status.FromString(body).code == 14
    with urllib.request.urlopen(f"{sidecar.http_url}/healthz") as r:
        assert r.status == 200
    with pytest.raises(urllib.error.HTTPError) as not_ready:
        urllib.request.urlopen(f"{sidecar.http_url}/readyz")
    assert not_ready.value.code == 503

    # The SDK's exporter honours the retry delay; once the downstream is back it all arrives.
    tp = provider(GrpcSpanExporter(endpoint=sidecar.grpc_endpoint, insecure=True, timeout=20))
    tracer = tp.get_tracer("tests.sidecar")
    sdk_ids = set(plain_request(tracer)[1]) | set(agent_run(tracer)[1])
    flushed = threading.Thread(target=tp.force_flush, daemon=True)
    flushed.start()
    time.sleep(1.0)
    downstream.down = False
    flushed.join(25)
    expected = {i for b in accepted for i in _ids_of(b)} | sdk_ids
    assert downstream.wait_spans(expected, timeout=20), sidecar.log()
    tp.shutdown()
    channel.close()
    assert sidecar.terminate() == 0


def test_sigterm_under_load_drains_everything_accepted(
    sidecar: Sidecar, downstream: Downstream
) -> None:
    # A long grace keeps agent traces held when SIGTERM comes: shutdown must grade them.
    sidecar.config = {"buffer": {"grace_s": 5.0, "idle_timeout_s": 8.0}}
    sidecar.start()
    channel, export = _export_call(sidecar.grpc_endpoint)
    tp = provider(GrpcSpanExporter(endpoint=sidecar.grpc_endpoint, insecure=True))
    tracer = tp.get_tracer("tests.sidecar")
    held: set[str] = set()
    for _ in range(5):
        held.update(agent_run(tracer)[1])
    tp.force_flush()
    accepted: list[bytes] = []
    stop = threading.Event()

    def load() -> None:
        seed = 0
        while not stop.is_set():
            body = _plain_pb_request(n=20, seed=5000 + seed)
            seed += 1
            try:
                export(body, timeout=5)
                accepted.append(body)
            except grpc.RpcError:
                return  # refused (shutting down) or gone: not acknowledged, not expected

    sender = threading.Thread(target=load, daemon=True)
    sender.start()
    time.sleep(0.5)
    assert sidecar.terminate() == 0
    stop.set()
    sender.join(5)
    assert len(accepted) > 3
    expected = held | {i for b in accepted for i in _ids_of(b)}
    assert downstream.wait_spans(expected, timeout=5), sidecar.log()
    annotated = {s.span_id.hex() for s in downstream.spans() if s.events}
    assert annotated and annotated <= held
    tp.shutdown()
    channel.close()


def test_kill_9_with_buffer_dir_loses_no_acknowledged_span(
    sidecar: Sidecar, downstream: Downstream, tmp_path: Path
) -> None:
    sidecar.extra_args = ["--buffer-dir", str(tmp_path / "buffer")]
    sidecar.start()
    downstream.down = True  # nothing can leave before the crash
    channel, export = _export_call(sidecar.grpc_endpoint)
    acked: set[str] = set()
    for seed in range(10):
        body = _plain_pb_request(n=10, seed=7000 + seed)
        export(body, timeout=5)
        acked.update(_ids_of(body))
    tp = provider(GrpcSpanExporter(endpoint=sidecar.grpc_endpoint, insecure=True))
    tracer = tp.get_tracer("tests.sidecar")
    for _ in range(3):
        acked.update(agent_run(tracer)[1])
    tp.force_flush()
    tp.shutdown()
    channel.close()
    sidecar.kill()
    downstream.down = False
    sidecar.start()  # same ports, same buffer dir: replays
    assert downstream.wait_spans(acked, timeout=20), sidecar.log()
    annotated = [s for s in downstream.spans() if s.name.startswith("execute_tool")]
    assert annotated and all(s.events for s in annotated)
    assert sidecar.terminate() == 0
    leftover = sorted(p.name for p in (tmp_path / "buffer").iterdir())
    assert [p for p in leftover if p.endswith(".log")] == []


# --- bad requests ----------------------------------------------------------------------------------


def test_malformed_oversize_and_wrongly_typed_requests_get_the_right_status(
    sidecar: Sidecar, downstream: Downstream
) -> None:
    sidecar.config = {"receivers": {"http": {"max_request_body_size_mib": 1}}}
    sidecar.start()
    url = f"{sidecar.http_url}/v1/traces"
    good = _plain_pb_request(seed=42)

    def next_good_request_works(seed: int) -> None:
        body = _plain_pb_request(seed=seed)
        assert _post(url, body)[0] == 200
        assert downstream.wait_for(lambda d: body in d.trace_requests(), 10)

    truncated = good[: len(good) // 2]
    status, headers, body = _post(url, truncated)
    assert status == 400 and headers["Content-Type"] == "application/x-protobuf"
    assert status_pb2.Status.FromString(body).code == 3
    next_good_request_works(1)

    status, headers, body = _post(
        url, b'{"resourceSpans": [{"scopeSpans": 5}]}', "application/json"
    )
    assert status == 400 and headers["Content-Type"] == "application/json"
    assert json.loads(body)["code"] == 3
    next_good_request_works(2)

    status, _, _ = _post(url, good, "text/plain")
    assert status == 415
    next_good_request_works(3)

    status, _, body = _post(url, b"\0" * (1024 * 1024 + 1))
    assert status == 413
    bomb = gzip.compress(b"\0" * (3 * 1024 * 1024))
    status, _, _ = _post(url, bomb, headers={"Content-Encoding": "gzip"})
    assert status == 413
    status, _, _ = _post(url, b"not gzip", headers={"Content-Encoding": "gzip"})
    assert status == 400
    next_good_request_works(4)

    channel, export = _export_call(sidecar.grpc_endpoint)
    with pytest.raises(grpc.RpcError) as bad:
        export(truncated, timeout=5)
    assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.RpcError) as big:
        export(b"\x0a" + b"\xff" * 5 * 1024 * 1024, timeout=10)
    assert big.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    export(_plain_pb_request(seed=5), timeout=5)
    channel.close()

    # OTLP/JSON as the spec writes it (hex ids, integer enums, int64 as strings).
    doc = {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": [{"key": "service.name", "value": {"stringValue": "json-svc"}}]
                },
                "scopeSpans": [
                    {
                        "scope": {"name": "manual"},
                        "spans": [
                            {
                                "traceId": "5b8efff798038103d269b633813fc60c",
                                "spanId": "eee19b7ec3c1b174",
                                "name": "GET /json",
                                "kind": 2,
                                "startTimeUnixNano": "1700000000000000000",
                                "endTimeUnixNano": "1700000000100000000",
                                "status": {"code": 1},
                            }
                        ],
                    }
                ],
            }
        ]
    }
    status, headers, body = _post(url, json.dumps(doc).encode(), "application/json")
    assert (status, headers["Content-Type"], json.loads(body)) == (200, "application/json", {})
    assert downstream.wait_spans({"eee19b7ec3c1b174"})
    assert sidecar.terminate() == 0


# --- the Grader API and self-metrics -------------------------------------------------------------


def test_grader_api_and_prometheus_self_metrics(sidecar: Sidecar, downstream: Downstream) -> None:
    prom = free_port()
    sidecar.extra_args = ["--prometheus", f"127.0.0.1:{prom}"]
    sidecar.start()
    tp = provider(GrpcSpanExporter(endpoint=sidecar.grpc_endpoint, insecure=True))
    tid, ids = agent_run(tp.get_tracer("tests.sidecar"))
    tp.force_flush()
    assert downstream.wait_spans(set(ids)), sidecar.log()

    channel = grpc.insecure_channel(sidecar.grpc_endpoint)
    stub = grader_pb2_grpc.GraderStub(channel)
    run = result_pb2.Run(task="pay invoice 42", final_answer="Paid.")
    step = run.steps.add()
    step.tool_call.name = "pay"
    step.tool_call.output.string_value = "Error: card declined"
    result = stub.GradeRun(run, timeout=10)
    assert result.check == "tool_use" and not result.passed
    deadline = time.monotonic() + 5
    while True:
        try:
            graded = stub.GradeTrace(grader_pb2.GradeTraceRequest(trace_id=tid), timeout=10)
            break
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.NOT_FOUND or time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    assert [r.span_id for r in graded.runs] == [ids[-1]]
    assert graded.runs[0].result.verdict == "pass" and graded.runs[0].agent == "billing_agent"
    with pytest.raises(grpc.RpcError) as missing:
        stub.GradeTrace(grader_pb2.GradeTraceRequest(trace_id="1" * 32), timeout=10)
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND
    channel.close()

    with urllib.request.urlopen(f"http://127.0.0.1:{prom}/metrics", timeout=5) as r:
        text = r.read().decode()
    assert "attest_sidecar_spans_received_total" in text
    assert "attest_sidecar_traces_graded_total{" in text and 'reason="complete"' in text
    assert "attest_sidecar_queue_spans" in text
    tp.shutdown()
    assert sidecar.terminate() == 0
