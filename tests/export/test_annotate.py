"""Grades written into held protobuf spans, as the sidecar forwards them."""

from __future__ import annotations

from typing import Any

from opentelemetry.proto.trace.v1.trace_pb2 import Span as PbSpan

from attest_otel import semconv
from attest_otel.export.annotate import annotate_graded, annotate_spans, annotation_bytes
from attest_otel.grade.grader import grade
from tests.adapt.spans import Trace, js

from .sample import AGENT_SPAN_ID, TRACE_ID, graded_run, passing_run, tool_span_id

NOW = 1_700_000_000_000_000_000


def _span(span_id: str, name: str = "execute_tool") -> PbSpan:
    return PbSpan(trace_id=bytes.fromhex(TRACE_ID), span_id=bytes.fromhex(span_id), name=name)


def _attrs(span: PbSpan) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in span.attributes:
        out[kv.key] = getattr(kv.value, kv.value.WhichOneof("value"))
    return out


def _events(span: PbSpan) -> list[dict[str, Any]]:
    return [
        {
            "name": e.name,
            **{kv.key: getattr(kv.value, kv.value.WhichOneof("value")) for kv in e.attributes},
        }
        for e in span.events
    ]


def test_each_tool_span_gets_an_evaluation_event_and_the_same_attest_attributes() -> None:
    run, result = graded_run()
    spans = {tool_span_id(s): _span(tool_span_id(s)) for s, _ in run.tool_calls}
    annotate_spans(spans, run, result, now_ns=NOW)
    silent = spans[tool_span_id(8)]
    (event,) = _events(silent)
    assert event["name"] == "gen_ai.evaluation.result"
    assert event["gen_ai.evaluation.name"] == "attest.tool_use"
    assert event["gen_ai.evaluation.score.label"] == "error_silent"
    assert event["gen_ai.evaluation.score.value"] == 0.0
    assert event["attest.recovery"] == "unchecked"
    attrs = _attrs(silent)
    assert attrs == {k: v for k, v in event.items() if k.startswith("attest.")}
    assert silent.events[0].time_unix_nano == NOW


def test_booleans_stay_booleans_and_steps_stay_integers_on_the_wire() -> None:
    run, result = graded_run()
    spans = {tool_span_id(6): _span(tool_span_id(6))}
    annotate_spans(spans, run, result, now_ns=NOW)
    by_key = {kv.key: kv.value for kv in spans[tool_span_id(6)].attributes}
    assert by_key[semconv.ATTEST_ALLOWED].WhichOneof("value") == "bool_value"
    assert by_key[semconv.ATTEST_STEP].WhichOneof("value") == "int_value"


def test_the_agent_span_gets_the_run_score_verdict_and_summary() -> None:
    run, result = graded_run()
    agent = _span(AGENT_SPAN_ID, "invoke_agent")
    assert annotate_spans({AGENT_SPAN_ID: agent}, run, result, now_ns=NOW) == 1
    attrs = _attrs(agent)
    assert attrs[semconv.ATTEST_TOOL_USE_VERDICT] == "fail"
    assert attrs[semconv.ATTEST_TOOL_USE_CALLS] == 12
    assert attrs[semconv.ATTEST_TOOL_USE_FAILED_CALLS] == 5
    (event,) = _events(agent)
    assert event["gen_ai.evaluation.explanation"] == result.summary
    assert event["gen_ai.evaluation.score.value"] == result.score


def test_spans_the_run_does_not_name_are_left_alone_and_not_counted() -> None:
    run, result = graded_run()
    bystander = _span("00000000000000ff", "GET /orders")
    spans = {"00000000000000ff": bystander, tool_span_id(0): _span(tool_span_id(0))}
    assert annotate_spans(spans, run, result, now_ns=NOW) == 1
    assert not bystander.events and not bystander.attributes


def test_annotating_again_replaces_the_previous_grade_instead_of_adding_to_it() -> None:
    run, result = graded_run()
    span = _span(tool_span_id(2))
    span.attributes.add(key="gen_ai.tool.name").value.string_value = "charge_card"
    spans = {tool_span_id(2): span}
    annotate_spans(spans, run, result, now_ns=NOW)
    # the regrade found no error any more: recovery and recovered_at must disappear
    for finding in result.findings:
        finding.metadata["recovery"] = None
        finding.metadata["recovered_at"] = None
    annotate_spans(spans, run, result, now_ns=NOW + 1)
    assert len(span.events) == 1
    assert span.events[0].time_unix_nano == NOW + 1
    attrs = _attrs(span)
    assert semconv.ATTEST_RECOVERY not in attrs
    assert attrs["gen_ai.tool.name"] == "charge_card"
    assert sum(kv.key == semconv.ATTEST_VERDICT for kv in span.attributes) == 1


def test_events_of_other_evaluators_survive_a_regrade() -> None:
    run, result = passing_run()
    span = _span(tool_span_id(0))
    other = span.events.add(name="gen_ai.evaluation.result")
    other.attributes.add(key="gen_ai.evaluation.name").value.string_value = "relevance"
    annotate_spans({tool_span_id(0): span}, run, result, now_ns=NOW)
    annotate_spans({tool_span_id(0): span}, run, result, now_ns=NOW)
    names = [
        next(kv.value.string_value for kv in e.attributes if kv.key == "gen_ai.evaluation.name")
        for e in span.events
    ]
    assert names == ["relevance", "attest.tool_use"]


def _sub_agent_trace() -> tuple[list[tuple[Any, Any]], str]:
    """A lead agent whose model asked for the `researcher` sub-agent by name, with no tool
    span: the sub-agent's span is a call of the lead's run and the agent span of its own."""
    t = Trace()
    lead = t.span(
        "invoke_agent lead",
        {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "lead"},
        start=0,
        end=100,
    )
    user = {"role": "user", "parts": [{"type": "text", "content": "Research X"}]}
    ask = {"type": "tool_call", "id": "r1", "name": "researcher", "arguments": {}}
    chat = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "x"}
    t.span(
        "chat m",
        {
            **chat,
            "gen_ai.input.messages": js([user]),
            "gen_ai.output.messages": js([{"role": "assistant", "parts": [ask]}]),
        },
        parent=lead,
        start=1,
        end=5,
    )
    said = {"role": "assistant", "parts": [{"type": "text", "content": "X is Y."}]}
    sub = t.span(
        "invoke_agent researcher",
        {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "researcher",
            "gen_ai.output.messages": js([said]),
        },
        parent=lead,
        start=10,
        end=40,
    )
    told = {
        "role": "tool",
        "parts": [{"type": "tool_call_response", "id": "r1", "response": "X is Y."}],
    }
    t.span(
        "chat m",
        {
            **chat,
            "gen_ai.input.messages": js([user, {"role": "assistant", "parts": [ask]}, told]),
            "gen_ai.output.messages": js([said]),
        },
        parent=lead,
        start=41,
        end=50,
    )
    graded = [(run, grade(run, judge=None)) for run in t.runs()]
    assert [r.agent for r, _ in graded] == ["lead", "researcher"]
    assert graded[0][0].steps[0].tool_call.span_id == sub.span_id  # type: ignore[union-attr]
    return graded, sub.span_id


def _evaluated(span: PbSpan) -> list[tuple[str, str | None]]:
    """(what the event judged: a tool's name or the run's agent, its label) per event."""
    out = []
    for e in span.events:
        attrs = {kv.key: kv.value.string_value for kv in e.attributes}
        out.append(
            (
                attrs.get("gen_ai.tool.name") or attrs.get("gen_ai.agent.name") or "",
                attrs.get("gen_ai.evaluation.score.label"),
            )
        )
    return out


def test_a_span_that_is_a_call_and_a_run_carries_both_evaluations() -> None:
    graded, sub_id = _sub_agent_trace()
    span = _span(sub_id, "invoke_agent researcher")
    assert annotate_graded({sub_id: span}, graded, now_ns=NOW) == 1
    assert _evaluated(span) == [("researcher", "correct"), ("researcher", "pass")]
    attrs = _attrs(span)
    assert attrs[semconv.ATTEST_VERDICT] == "correct"
    assert attrs[semconv.ATTEST_TOOL_USE_VERDICT] == "pass"
    # graded again (a late span): the old pair replaced, not doubled
    annotate_graded({sub_id: span}, graded, now_ns=NOW + 1)
    assert len(span.events) == 2 and {e.time_unix_nano for e in span.events} == {NOW + 1}


def test_appended_bytes_carry_both_evaluations_too() -> None:
    graded, sub_id = _sub_agent_trace()
    by_messages = _span(sub_id, "invoke_agent researcher")
    annotate_graded({sub_id: by_messages}, graded, now_ns=NOW)
    plain = _span(sub_id, "invoke_agent researcher").SerializeToString()
    extra = annotation_bytes(graded, now_ns=NOW)[sub_id]
    assert PbSpan.FromString(plain + extra) == by_messages
