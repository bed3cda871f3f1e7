"""Grade by id from a real Phoenix: fixture traces go in through the OTel SDK's own OTLP
exporter, come back through Phoenix's REST spans API, and grade as the original files do."""

from __future__ import annotations

import json
import time

import pytest
from click.testing import CliRunner
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event as SdkEvent
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from attest_otel.adapt import runs_from_spans
from attest_otel.errors import SourceError
from attest_otel.grade.grader import grade
from attest_otel.ingest.decode import decode_file, hydrate
from attest_otel.model import Span
from attest_otel.sources import HttpOptions, TraceNotFoundError, parse_source
from tests.sources import shapes

PROJECT = "attest-otel-test"
WAIT_S = 40.0
FIXTURES = [
    "anthropic_openinference__retry",
    "langgraph_openinference__fallback",
    "strands__unrecovered_ignores",
]


def _context(trace_id: str, span_id: str, *, remote: bool = False) -> SpanContext:
    return SpanContext(
        int(trace_id, 16),
        int(span_id, 16),
        is_remote=remote,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )


def _sdk_span(s: Span) -> ReadableSpan:
    """The fixture span as the SDK would have finished it (ids, times and all)."""
    return ReadableSpan(
        name=s.name,
        context=_context(s.trace_id, s.span_id),
        parent=_context(s.trace_id, s.parent_id, remote=True) if s.parent_id else None,
        resource=Resource({**s.resource, "openinference.project.name": PROJECT}),
        attributes=s.attributes,
        events=[SdkEvent(e.name, e.attributes, e.time_ns) for e in s.events],
        kind=SpanKind(s.kind - 1) if s.kind else SpanKind.INTERNAL,
        status=Status(StatusCode(s.status_code), s.status_message or None),
        start_time=s.start_ns,
        end_time=s.end_ns,
        instrumentation_scope=InstrumentationScope(s.scope_name, s.scope_version or None),
    )


def _send(phoenix_url: str, spans: list[Span]) -> None:
    exporter = OTLPSpanExporter(endpoint=f"{phoenix_url}/v1/traces", timeout=10)
    try:
        assert exporter.export([_sdk_span(s) for s in spans]) is SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()


def _fetch_when_stored(source_text: str, trace_id: str, count: int) -> list[Span]:
    """Phoenix stores spans in the background: ask until all of them are there."""
    source = parse_source(source_text, http=HttpOptions(timeout_s=10))
    deadline = time.monotonic() + WAIT_S
    try:
        while True:
            try:
                spans = source.fetch(trace_id).spans
                if len(spans) >= count:
                    return spans
            except SourceError as e:  # the project appears with its first stored span
                if "not found" not in str(e):
                    raise
            if time.monotonic() > deadline:
                pytest.fail(f"Phoenix did not store all {count} spans of {trace_id} in {WAIT_S:g}s")
            time.sleep(0.5)
    finally:
        source.close()


def _grades(spans: list[Span]) -> list[dict[str, object]]:
    return [grade(r, judge=None).to_dict() for t in runs_from_spans(spans) for r in t.runs]


@pytest.fixture(scope="module")
def sent(phoenix_url: str) -> dict[str, list[Span]]:
    originals = {name: shapes.original_spans(name) for name in FIXTURES}
    for spans in originals.values():
        _send(phoenix_url, spans)
    return originals


@pytest.mark.parametrize("name", FIXTURES)
def test_a_trace_sent_to_phoenix_grades_back_by_id_as_the_original_file_does(
    phoenix_url: str, sent: dict[str, list[Span]], name: str
) -> None:
    original = sent[name]
    tid = original[0].trace_id
    got = _fetch_when_stored(f"phoenix:{phoenix_url}#{PROJECT}", tid, len(original))

    assert _grades(got) == _grades(original)
    by_id = {s.span_id: s for s in got}
    assert set(by_id) == {s.span_id for s in original}
    for s in original:
        back = by_id[s.span_id]
        assert (back.trace_id, back.parent_id, back.name, back.status_code) == (
            s.trace_id,
            s.parent_id,
            s.name,
            s.status_code,
        )
        assert [e.name for e in back.events] == [e.name for e in s.events]
        assert abs(back.start_ns - s.start_ns) < 1000  # Phoenix keeps microseconds
        for key in ("metadata", "tool.parameters"):
            if key in s.attributes:  # Phoenix stores these JSON strings as objects
                assert key in back.attributes


def test_without_a_project_name_every_project_is_searched(
    phoenix_url: str, sent: dict[str, list[Span]]
) -> None:
    original = sent[FIXTURES[0]]
    got = _fetch_when_stored(f"phoenix:{phoenix_url}", original[0].trace_id, len(original))
    assert {s.span_id for s in got} == {s.span_id for s in original}


def test_an_unknown_trace_id_is_one_line_naming_phoenix(phoenix_url: str) -> None:
    source = parse_source(f"phoenix:{phoenix_url}#{PROJECT}")
    with pytest.raises(TraceNotFoundError) as caught:
        source.fetch("0af7651916cd43dd8448eb211c80319c")
    assert str(caught.value) == (
        f"trace ID 0af7651916cd43dd8448eb211c80319c not found in phoenix at {phoenix_url} "
        f"(project {PROJECT})"
    )


def test_grade_from_source_prints_the_grade_of_a_phoenix_trace(
    phoenix_url: str, sent: dict[str, list[Span]]
) -> None:
    import click

    from attest_otel.cli.sources import grade_from_source

    name = "strands__unrecovered_ignores"
    original = sent[name]
    tid = original[0].trace_id
    _fetch_when_stored(f"phoenix:{phoenix_url}#{PROJECT}", tid, len(original))

    @click.command()
    def cmd() -> None:
        grade_from_source(trace_id=tid, source=f"phoenix:{phoenix_url}#{PROJECT}", as_json=True)

    result = CliRunner().invoke(cmd, [], catch_exceptions=False)
    (trace,) = json.loads(result.output)
    decoded = decode_file(shapes.fixture(name))
    assert [r["result"] for r in trace["runs"]] == _grades([hydrate(s) for s in decoded.spans])
