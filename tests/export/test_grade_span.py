"""The `attest.grade` span, recorded by the real SDK into memory."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from attest_otel import semconv
from attest_otel.export.grade_span import emit_grade_span, remote_span_context

from .sample import AGENT_SPAN_ID, TRACE_ID, graded_run, passing_run, tool_span_id


@pytest.fixture
def recorded() -> Iterator[tuple[trace.Tracer, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider.get_tracer("test"), exporter
    provider.shutdown()


def _only_span(exporter: InMemorySpanExporter) -> ReadableSpan:
    (span,) = exporter.get_finished_spans()
    return span


def test_the_grade_span_is_a_child_of_the_agent_span_in_the_same_trace(
    recorded: tuple[trace.Tracer, InMemorySpanExporter],
) -> None:
    tracer, exporter = recorded
    run, result = graded_run()
    emit_grade_span(tracer, run, result, now_ns=10)
    span = _only_span(exporter)
    assert span.name == "attest.grade"
    assert f"{span.context.trace_id:032x}" == TRACE_ID
    assert span.parent is not None
    assert f"{span.parent.span_id:016x}" == AGENT_SPAN_ID
    assert span.parent.is_remote


def test_the_grade_span_links_each_graded_tool_span_once_with_its_verdict(
    recorded: tuple[trace.Tracer, InMemorySpanExporter],
) -> None:
    tracer, exporter = recorded
    run, result = graded_run()
    emit_grade_span(tracer, run, result, now_ns=10)
    span = _only_span(exporter)
    linked = {f"{link.context.span_id:016x}": link for link in span.links}
    assert set(linked) == {tool_span_id(f.step) for f in result.findings}
    assert all(f"{link.context.trace_id:032x}" == TRACE_ID for link in span.links)
    silent = linked[tool_span_id(8)].attributes or {}
    assert silent[semconv.ATTEST_VERDICT] == "error_silent"
    assert silent[semconv.ATTEST_STEP] == 8


def test_each_event_names_the_span_it_is_about_and_the_last_is_the_run(
    recorded: tuple[trace.Tracer, InMemorySpanExporter],
) -> None:
    tracer, exporter = recorded
    run, result = graded_run()
    emit_grade_span(tracer, run, result, now_ns=10)
    span = _only_span(exporter)
    assert len(span.events) == len(result.findings) + 1
    assert {e.name for e in span.events} == {"gen_ai.evaluation.result"}
    about = [dict(e.attributes or {})[semconv.ATTEST_SPAN_ID] for e in span.events]
    assert about == [tool_span_id(f.step) for f in result.findings] + [AGENT_SPAN_ID]
    run_event = dict(span.events[-1].attributes or {})
    assert run_event[semconv.GEN_AI_EVALUATION_SCORE_LABEL] == "fail"
    assert (span.attributes or {})[semconv.ATTEST_TOOL_USE_VERDICT] == "fail"


def test_a_run_from_a_file_gets_a_grade_span_of_its_own_as_a_new_root(
    recorded: tuple[trace.Tracer, InMemorySpanExporter],
) -> None:
    tracer, exporter = recorded
    run, result = passing_run(trace_id=None)
    emit_grade_span(tracer, run, result)
    span = _only_span(exporter)
    assert span.parent is None
    assert not span.links


def test_the_callers_current_span_does_not_become_the_parent_of_a_root_grade(
    recorded: tuple[trace.Tracer, InMemorySpanExporter],
) -> None:
    tracer, exporter = recorded
    run, result = passing_run(trace_id=None)
    with tracer.start_as_current_span("caller"):
        emit_grade_span(tracer, run, result)
    grade = next(s for s in exporter.get_finished_spans() if s.name == "attest.grade")
    assert grade.parent is None


def test_ids_that_are_not_hex_give_no_span_context() -> None:
    assert remote_span_context("zz", "00000000000000a0") is None
    assert remote_span_context(TRACE_ID, None) is None
    assert remote_span_context("0" * 32, "00000000000000a0") is None
    context = remote_span_context(TRACE_ID.upper(), AGENT_SPAN_ID)
    assert context is not None and context.trace_flags.sampled
