"""`content: keep | truncate | drop`: what of a run's content the sidecar's own outputs
(grade events on spans, log events) carry. The model-prompt side is in
tests/grade/test_injection.py."""

from __future__ import annotations

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
    OTLPSpanExporter as GrpcSpanExporter,
)
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

from attest_otel import semconv
from attest_otel.content import TRUNCATED_MARKER, ContentPolicy
from attest_otel.export.results import evaluations
from tests.export.sample import graded_run
from tests.fakes.messages_server import MessagesServer, verdict
from tests.sidecar.downstream import Downstream
from tests.sidecar.helpers import Sidecar, agent_run, attr, provider

pytestmark = pytest.mark.timeout(60)

EXPLANATION = semconv.GEN_AI_EVALUATION_EXPLANATION
SECRET = "card 4111-1111-1111-1111 of Jane Roe declined"


def test_the_one_mapping_keeps_truncates_or_drops_explanations() -> None:
    run, result = graded_run()
    kept = [e.event_attributes.get(EXPLANATION) for e in evaluations(run, result)]
    assert all(isinstance(k, str) for k in kept) and max(len(str(k)) for k in kept) > 40

    truncate = ContentPolicy("truncate", 40)
    cut = [e.event_attributes.get(EXPLANATION) for e in evaluations(run, result, truncate)]
    for before, after in zip(kept, cut, strict=True):
        assert isinstance(after, str) and len(after) <= 40
        assert after == before or after.endswith(TRUNCATED_MARKER)
    assert any(str(a).endswith(TRUNCATED_MARKER) for a in cut)

    for evaluation in evaluations(run, result, ContentPolicy("drop")):
        assert EXPLANATION not in evaluation.event_attributes
        # The verdict itself still leaves: only run content is dropped.
        assert semconv.GEN_AI_EVALUATION_SCORE_LABEL in evaluation.event_attributes
    # Nothing is left behind in the process: the next caller without a policy keeps content.
    assert evaluations(run, result)[-1].event_attributes.get(EXPLANATION) == kept[-1]


def _logged_attributes(downstream: Downstream) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for raw in downstream.requests["logs"]:
        request = ExportLogsServiceRequest.FromString(raw)
        for rl in request.resource_logs:
            for sl in rl.scope_logs:
                for record in sl.log_records:
                    out.append({kv.key: attr([kv], kv.key) for kv in record.attributes})
    return out


@pytest.mark.parametrize("mode", ["drop", "truncate"])
def test_sidecar_events_and_log_events_follow_the_content_mode(
    sidecar: Sidecar, downstream: Downstream, mode: str
) -> None:
    # grading.processes 1: the setting must reach the grading worker process too.
    sidecar.config = {"content": {"max_chars": 32}, "grading": {"processes": 1}}
    sidecar.extra_args = ["--content", mode]
    sidecar.start()
    tp = provider(GrpcSpanExporter(endpoint=sidecar.grpc_endpoint, insecure=True))
    _, ids = agent_run(
        tp.get_tracer("tests.sidecar.content"),
        tools=[("charge_card", None)],
        answer=f"Done: {SECRET}, paid anyway.",
    )
    assert tp.force_flush()
    assert downstream.wait_spans(set(ids)), sidecar.log()
    tp.shutdown()
    assert sidecar.terminate() == 0

    by_id = {s.span_id.hex(): s for s in downstream.spans()}
    events = [e for i in ids for e in by_id[i].events if e.name == "gen_ai.evaluation.result"]
    assert events, sidecar.log()
    logged = _logged_attributes(downstream)
    assert logged, sidecar.log()
    explanations = [attr(e.attributes, EXPLANATION) for e in events]
    explanations += [a.get(EXPLANATION) for a in logged]
    if mode == "drop":
        assert explanations == [None] * len(explanations)
    else:
        assert all(isinstance(x, str) and len(x) <= 32 for x in explanations), explanations
        assert any(str(x).endswith(TRUNCATED_MARKER) for x in explanations)


@pytest.mark.parametrize("mode", ["drop", "truncate"])
def test_sidecar_model_checks_never_send_dropped_content_and_cut_truncated_content(
    sidecar: Sidecar, downstream: Downstream, messages_server: MessagesServer, mode: str
) -> None:
    import html
    import re

    messages_server.responder = verdict({"outcome": "claimed_success", "reason": "Says paid."})
    sidecar.env = {"ANTHROPIC_API_KEY": "test", "ANTHROPIC_BASE_URL": messages_server.url}
    sidecar.config = {
        "grading": {"model": {"enabled": True}},
        "content": {"mode": mode, "max_chars": 40},
    }
    sidecar.start()
    tp = provider(GrpcSpanExporter(endpoint=sidecar.grpc_endpoint, insecure=True))
    _, ids = agent_run(
        tp.get_tracer("tests.sidecar.content"),
        tools=[("charge_card", None)],
        answer=f"Done: {SECRET}, paid anyway.",
    )
    assert tp.force_flush()
    assert downstream.wait_spans(set(ids)), sidecar.log()
    tp.shutdown()
    assert sidecar.terminate() == 0

    tool = {s.span_id.hex(): s for s in downstream.spans()}[ids[0]]
    recovery = attr(tool.attributes, semconv.ATTEST_RECOVERY)
    if mode == "drop":
        assert messages_server.calls == 0
        assert recovery == "unchecked", sidecar.log()
    else:
        assert messages_server.calls >= 1
        assert recovery == "claimed_success", sidecar.log()
        for request in messages_server.requests:
            (turn,) = request["messages"]
            text = "".join(block["text"] for block in turn["content"])
            fenced = re.findall(r"<(\w+)>\n(.*?)\n</\1>", text, flags=re.DOTALL)
            assert fenced
            for _name, body in fenced:
                assert len(html.unescape(body)) <= 40
            assert SECRET not in text


@pytest.mark.parametrize("mode", ["truncate", "drop"])
def test_the_store_and_grade_trace_follow_the_content_mode(
    sidecar: Sidecar, downstream: Downstream, mode: str
) -> None:
    import grpc

    from attest_otel._proto.attest_otel.v1 import grader_pb2, grader_pb2_grpc

    secret = "customer 4111-1111-1111-1111 " * 20
    sidecar.config = {"content": {"mode": mode, "max_chars": 32}}
    sidecar.start()
    tp = provider(GrpcSpanExporter(endpoint=sidecar.grpc_endpoint, insecure=True))
    tid, ids = agent_run(tp.get_tracer("t"), tools=(("lookup", secret),), answer=secret)
    tp.force_flush()
    tp.shutdown()
    assert downstream.wait_spans(set(ids)), sidecar.log()
    with grpc.insecure_channel(sidecar.grpc_endpoint) as channel:
        stub = grader_pb2_grpc.GraderStub(channel)
        import time

        deadline = time.monotonic() + 10
        while True:
            try:
                graded = stub.GradeTrace(grader_pb2.GradeTraceRequest(trace_id=tid), timeout=10)
                break
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.NOT_FOUND or time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
    assert [r.span_id for r in graded.runs] == [ids[-1]]
    answer = graded.runs[0]
    assert "4111-1111-1111-1111 customer" not in str(answer)
    if mode == "drop":
        assert not answer.HasField("run") and answer.result.verdict
    else:
        output = answer.run.steps[0].tool_call.output.string_value
        assert len(output) == 32 and output.endswith(TRUNCATED_MARKER)
    assert sidecar.terminate() == 0
    stored = b"".join(p.read_bytes() for p in sidecar.tmp.glob("store.db*"))
    assert b"4111-1111-1111-1111 customer" not in stored
