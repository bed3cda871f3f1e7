"""Hostile senders against a real `serve` (issue 26, items 4, 5, 8; docs/hostile-input-network.md).

Slow sockets are driven from outside the sidecar process, as an attacker would: half-open
connections that never finish their headers, and senders that drip their body. What must
hold is that ordinary senders keep their latency, measured in the same run before and
during the attack. Requests the next hop would refuse (invalid UTF-8 in a string field,
nesting past a protobuf parser's depth limit) are refused before they are acknowledged.
"""

from __future__ import annotations

import http.client
import json
import socket
import statistics
import threading
import time
from pathlib import Path

import grpc
import pytest
from google.protobuf import json_format
from google.rpc import error_details_pb2, status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from attest_otel._proto.attest_otel.v1 import grader_pb2_grpc, result_pb2
from attest_otel.sidecar.wire import field_bytes
from tests.fakes.messages_server import MessagesServer, verdict
from tests.sidecar.downstream import Downstream
from tests.sidecar.helpers import Sidecar, free_port

pytestmark = pytest.mark.timeout(180)

_EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


def _request(name: bytes, span_id: int, extra: bytes = b"") -> bytes:
    """A plain (non-GenAI) request of one span named `name` (its bytes as given), with
    `extra` appended to the span's encoding."""
    span = Span(
        trace_id=(span_id + 1).to_bytes(16, "big"),
        span_id=span_id.to_bytes(8, "big"),
        name="N" * len(name),
        start_time_unix_nano=1,
        end_time_unix_nano=2,
    )
    request = ExportTraceServiceRequest()
    request.resource_spans.add().scope_spans.add().spans.append(span)
    data = request.SerializeToString().replace(b"N" * len(name), name)
    if extra:
        scope_spans = request.resource_spans[0].scope_spans[0]
        encoded = scope_spans.spans[0].SerializeToString().replace(b"N" * len(name), name)
        inner = field_bytes(0x12, encoded + extra)  # ScopeSpans.spans
        data = field_bytes(0x0A, field_bytes(0x12, inner))  # ResourceSpans.scope_spans
    return data


def _deep_attribute(depth: int) -> bytes:
    """Span.attributes (field 9) holding an AnyValue nested `depth` arrays deep."""
    value = field_bytes(0x0A, b"x")  # AnyValue.string_value
    for _ in range(depth):
        array = field_bytes(0x0A, value)  # ArrayValue.values
        value = field_bytes(0x2A, array)  # AnyValue.array_value
    key_value = field_bytes(0x0A, b"deep") + field_bytes(0x12, value)
    return field_bytes(0x4A, key_value)


def _post(port: int, body: bytes, conn: http.client.HTTPConnection | None = None) -> int:
    own = conn is None
    conn = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("POST", "/v1/traces", body, {"Content-Type": "application/x-protobuf"})
    response = conn.getresponse()
    response.read()
    if own:
        conn.close()
    return response.status


def test_invalid_utf8_and_deep_messages_are_refused_before_acknowledgment(
    sidecar: Sidecar, downstream: Downstream
) -> None:
    sidecar.start()
    bad_utf8 = _request(b"GET /\xff\xfe", 1)
    deep = _request(b"GET /deep", 2, _deep_attribute(5000))
    with pytest.raises(Exception):  # noqa: B017 - what protobuf does with each of them
        ExportTraceServiceRequest.FromString(bad_utf8)
    with pytest.raises(Exception):  # noqa: B017
        ExportTraceServiceRequest.FromString(deep)
    channel = grpc.insecure_channel(sidecar.grpc_endpoint)
    export = channel.unary_unary(_EXPORT)
    try:
        for body in (bad_utf8, deep):
            assert _post(sidecar.http_port, body) == 400
            with pytest.raises(grpc.RpcError) as refused:
                export(body, timeout=10)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        # The same shape with valid content is taken and forwarded.
        good = _request(b"GET /ok", 3, _deep_attribute(20))
        assert _post(sidecar.http_port, good) == 200
        export(_request(b"GET /ok2", 4), timeout=10)
    finally:
        channel.close()
    assert downstream.wait_spans({(3).to_bytes(8, "big").hex(), (4).to_bytes(8, "big").hex()})
    time.sleep(0.5)
    assert len(downstream.spans()) == 2, "a refused request reached the next hop"
    text = sidecar.log()
    assert "Traceback" not in text


def _refusal(port: int, body: bytes, content_type: str) -> tuple[int, str, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("POST", "/v1/traces", body, {"Content-Type": content_type})
        response = conn.getresponse()
        return response.status, response.getheader("Content-Type") or "", response.read()
    finally:
        conn.close()


def test_a_400_carries_the_status_and_bad_request_detail_in_the_requests_encoding(
    sidecar: Sidecar,
) -> None:
    """The OTLP specification's "Bad Data": 400, a google.rpc.Status of code 3 whose details
    hold a google.rpc.BadRequest, in the request's encoding (docs/hostile-input-network.md)."""
    sidecar.start()
    bad_utf8 = _request(b"GET /\xff\xfe", 1)
    status, ctype, body = _refusal(sidecar.http_port, bad_utf8, "application/x-protobuf")
    assert (status, ctype) == (400, "application/x-protobuf")
    decoded = status_pb2.Status.FromString(body)
    assert decoded.code == 3 and "UTF-8" in decoded.message
    assert [d.type_url for d in decoded.details] == ["type.googleapis.com/google.rpc.BadRequest"]
    bad_request = error_details_pb2.BadRequest()
    assert decoded.details[0].Unpack(bad_request)
    assert [v.description for v in bad_request.field_violations] == [decoded.message]

    bad_json = b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"name": 5}]}]}]}'
    status, ctype, body = _refusal(sidecar.http_port, bad_json, "application/json")
    assert (status, ctype) == (400, "application/json")
    # protobuf's own JSON mapping reads it back, the Any resolved to its type.
    parsed = json_format.Parse(body, status_pb2.Status())
    assert parsed.code == 3 and parsed.message
    assert parsed.details[0].Unpack(bad_request)
    assert bad_request.field_violations[0].description == parsed.message

    # A refusal that is not bad data (413) keeps the Status without the detail.
    huge = b"{" + b" " * (5 * 1024 * 1024) + b"}"
    status, _, body = _refusal(sidecar.http_port, huge, "application/json")
    assert status == 413
    assert "details" not in json.loads(body)


def _latencies(port: int, count: int) -> list[float]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    out = []
    try:
        for i in range(count):
            started = time.perf_counter()
            assert _post(port, _request(b"GET /orders", 1000 + i), conn) == 200
            out.append(time.perf_counter() - started)
    finally:
        conn.close()
    return out


def _p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[98]


def test_300_slow_sockets_leave_normal_senders_their_latency(sidecar: Sidecar) -> None:
    sidecar.start()
    port = sidecar.http_port
    _latencies(port, 20)  # warm up
    before = _latencies(port, 200)
    half_open = []
    for _ in range(300):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: x\r\n")  # headers never end
        half_open.append(s)
    dripping = []
    for _ in range(40):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(
            b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
            b"Content-Length: 100000\r\n\r\n\x0a"
        )
        dripping.append(s)
    try:
        time.sleep(0.3)
        during = _latencies(port, 200)
        for s in dripping:  # a byte each: the body is still coming
            s.sendall(b"\x00")
        # Every slow socket is still held open (none was closed to make room).
        held = sum(1 for s in half_open + dripping if _still_open(s))
    finally:
        for s in half_open + dripping:
            s.close()
    p99_before, p99_during = _p99(before), _p99(during)
    print(
        f"p99 of 200 sequential requests: {p99_before * 1000:.1f} ms alone, "
        f"{p99_during * 1000:.1f} ms with 300 half-open and 40 dripping sockets "
        f"({held} of 340 still open)"
    )
    assert held == 340
    # Seconds each, before (the red team: 7-9.5 s added by 40 slow senders); the bound
    # leaves room for a shared machine, not for a request waiting on a slow one.
    assert p99_during < max(3 * p99_before, p99_before + 0.25), (p99_before, p99_during)


def _still_open(s: socket.socket) -> bool:
    s.setblocking(False)
    try:
        return s.recv(1, socket.MSG_PEEK) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        s.setblocking(True)


def test_1000_idle_sockets_on_metrics_cost_no_threads_and_a_scrape_still_works(
    tmp_path: Path, downstream: Downstream
) -> None:
    metrics_port = free_port()
    sidecar = Sidecar(
        tmp_path,
        downstream.endpoint,
        config={"telemetry": {"prometheus": f"127.0.0.1:{metrics_port}"}},
    )
    try:
        sidecar.start()
        assert sidecar.proc is not None
        threads_before = _threads(sidecar.proc.pid)
        idle = [socket.create_connection(("127.0.0.1", metrics_port)) for _ in range(1000)]
        try:
            time.sleep(0.5)
            threads_during = _threads(sidecar.proc.pid)
            started = time.perf_counter()
            conn = http.client.HTTPConnection("127.0.0.1", metrics_port, timeout=10)
            conn.request("GET", "/metrics")
            response = conn.getresponse()
            body = response.read()
            scrape_s = time.perf_counter() - started
            conn.close()
        finally:
            for s in idle:
                s.close()
        print(
            f"/metrics with 1000 idle sockets: threads {threads_before} -> {threads_during}, "
            f"scrape {scrape_s * 1000:.0f} ms"
        )
        assert response.status == 200 and b"attest_sidecar" in body
        # prometheus_client's server took a thread per connection: 1,000 more.
        assert threads_during - threads_before <= 4
    finally:
        sidecar.stop_quietly()


def _threads(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise AssertionError("no thread count")


def test_slow_grade_run_calls_take_their_own_threads_and_never_delay_an_export(
    sidecar: Sidecar, downstream: Downstream, messages_server: MessagesServer
) -> None:
    """Item 8: eight GradeRun calls waiting on a slow model held all eight gRPC threads,
    and an Export waited for them (39 s measured by the red team)."""
    messages_server.responder = verdict(
        {"outcome": "claimed_success", "reason": "Says paid."}, delay_s=4.0
    )
    sidecar.env = {"ANTHROPIC_API_KEY": "test", "ANTHROPIC_BASE_URL": messages_server.url}
    sidecar.config = {"grading": {"model": {"enabled": True}}}
    sidecar.start()
    channel = grpc.insecure_channel(sidecar.grpc_endpoint)
    stub = grader_pb2_grpc.GraderStub(channel)
    run = result_pb2.Run(task="pay invoice 42", final_answer="Paid, all done.")
    step = run.steps.add()
    step.tool_call.name = "pay"
    step.tool_call.output.string_value = "Error: card declined"
    step.tool_call.is_error = True
    outcomes: list[str] = []

    def grade() -> None:
        try:
            stub.GradeRun(run, timeout=30)
            outcomes.append("OK")
        except grpc.RpcError as e:
            outcomes.append(e.code().name)

    callers = [threading.Thread(target=grade) for _ in range(8)]
    try:
        for t in callers:
            t.start()
        deadline = time.monotonic() + 10
        while messages_server.calls == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert messages_server.calls >= 1, sidecar.log()
        export = channel.unary_unary(_EXPORT)
        started = time.perf_counter()
        export(_request(b"GET /during", 77), timeout=30)
        export_s = time.perf_counter() - started
    finally:
        for t in callers:
            t.join(40)
        channel.close()
    print(f"Export during 8 slow GradeRun calls: {export_s * 1000:.0f} ms; outcomes {outcomes}")
    assert export_s < 1.0, export_s
    assert outcomes.count("OK") == 2 and outcomes.count("RESOURCE_EXHAUSTED") == 6, outcomes


def test_a_fail_turned_pass_by_late_spans_says_so_and_names_their_sender(
    tmp_path: Path, sidecar: Sidecar, downstream: Downstream
) -> None:
    """Item 6: a late "successful retry" from any service.name turned a stored FAIL into a
    PASS without a word. The rules still decide, but the flip is a WARNING naming who sent
    the late spans, and the stored grade says what it was before and what changed."""
    from opentelemetry import trace as otel
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.trace import NonRecordingSpan

    from attest_otel.store import TraceStore
    from tests.sidecar.helpers import agent_run, provider

    sidecar.start()
    tp = provider(OTLPSpanExporter(endpoint=sidecar.grpc_endpoint, insecure=True))
    trace_id, ids = agent_run(
        tp.get_tracer("tests.sidecar"),
        tools=[("charge_card", None)],
        answer="Your card was charged.",
    )
    agent_id = ids[-1]
    tp.force_flush()
    assert downstream.wait_spans(set(ids)), sidecar.log()
    store = TraceStore(tmp_path / "store.db", readonly=True)

    def verdicts() -> list[str]:
        stored = store.get_trace(trace_id)
        return [g.result["verdict"] for g in stored.grades] if stored else []

    deadline = time.monotonic() + 10
    while not verdicts() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert verdicts() == ["fail"], sidecar.log()

    intruder = provider(
        OTLPSpanExporter(endpoint=sidecar.grpc_endpoint, insecure=True), service="intruder"
    )
    agent = otel.SpanContext(
        int(trace_id, 16),
        int(agent_id, 16),
        is_remote=True,
        trace_flags=otel.TraceFlags(otel.TraceFlags.SAMPLED),
    )
    with intruder.get_tracer("x").start_as_current_span(
        "execute_tool charge_card",
        context=otel.set_span_in_context(NonRecordingSpan(agent)),
        attributes={
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "charge_card",
            "gen_ai.tool.call.id": "call_retry",
            "gen_ai.tool.call.arguments": json.dumps({"invoice": 42}),
            "gen_ai.tool.call.result": "charged: ok",
        },
    ):
        pass
    intruder.force_flush()
    deadline = time.monotonic() + 15
    while verdicts() != ["pass"] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert verdicts() == ["pass"], sidecar.log()  # the rules decide: a retry that worked
    stored = store.get_trace(trace_id)
    assert stored is not None
    note = stored.grades[0].result["metadata"]["regraded"]
    assert note["previous_verdict"] == "fail" and note["late_spans_from"] == ["intruder"]
    assert note["sender_authenticated"] is False and note["findings_changed"], note
    warnings = [line for line in sidecar.log().splitlines() if "from FAIL into PASS" in line]
    assert len(warnings) == 1 and "intruder" in warnings[0], sidecar.log()
    assert "self-declared" in warnings[0]
    tp.shutdown()
    intruder.shutdown()


def test_grade_trace_refuses_an_answer_over_the_send_limit_before_grading(
    sidecar: Sidecar, downstream: Downstream
) -> None:
    """Item 8: the reply size was checked only after grading (and the model budget spent):
    a run whose content alone passes the 4 MiB send limit is refused before."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    from attest_otel._proto.attest_otel.v1 import grader_pb2
    from tests.sidecar.helpers import agent_run, provider

    sidecar.start()
    tp = provider(OTLPSpanExporter(endpoint=f"{sidecar.http_url}/v1/traces"))
    tools = [(f"lookup_{i}", f"page {i}: " + "x" * (600 << 10)) for i in range(10)]
    trace_id, ids = agent_run(tp.get_tracer("tests.sidecar"), tools=tools)
    assert tp.force_flush()
    assert downstream.wait_spans(set(ids), timeout=30), sidecar.log()
    channel = grpc.insecure_channel(sidecar.grpc_endpoint)
    stub = grader_pb2_grpc.GraderStub(channel)
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                stub.GradeTrace(grader_pb2.GradeTraceRequest(trace_id=trace_id), timeout=30)
                raise AssertionError("6 MiB of tool results fitted in the 4 MiB send limit")
            except grpc.RpcError as e:
                if e.code() == grpc.StatusCode.NOT_FOUND and time.monotonic() < deadline:
                    time.sleep(0.2)  # not stored yet
                    continue
                assert e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, e.details()
                assert "answer limit" in (e.details() or "") and "grade --trace-id" in (
                    e.details() or ""
                )
                break
    finally:
        channel.close()
        tp.shutdown()
