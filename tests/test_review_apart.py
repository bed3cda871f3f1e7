"""Runs not read whole are shown apart, with why, everywhere a grade goes (issue 24, item 3).

`review` counts as passed, so the pass rate alone would show them green. The grades here are
real: the example traces of tests/fixtures/gaps and whole fixtures, graded by the pipeline.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from attest_otel import semconv
from attest_otel.export.metrics import ToolUseMetrics, metric_views
from attest_otel.export.results import evaluations
from attest_otel.ingest.decode import decode_file
from attest_otel.model import CheckResult, Run
from attest_otel.pipeline import grade_traces
from attest_otel.report.html import render_html
from attest_otel.report.stats import GradeRecord, build_report
from attest_otel.report.text import render_text

FIXTURES = Path(__file__).resolve().parent / "fixtures"
UNREAD = ["asked_no_span", "requests_not_received"]
WHOLE = ["langgraph_openinference__all_ok", "openai_v2_events__unrecovered_claims"]
ASKED = "The model asked for charge_card but no tool span or call accounts for it."


def _graded() -> list[tuple[Run, CheckResult]]:
    paths = [FIXTURES / "gaps" / f"{n}.json" for n in UNREAD]
    paths += [FIXTURES / "traces" / f"{n}.json" for n in WHOLE]
    out = []
    for path in paths:
        decoded = decode_file(path)
        for trace in grade_traces(decoded.spans, decoded.logs):
            out += [(g.run, g.result) for g in trace.runs]
    return out


def _records() -> list[GradeRecord]:
    return [
        GradeRecord(run.trace_id or "", run.agent, i + 1, result.to_dict(), run.span_id or "")
        for i, (run, result) in enumerate(_graded())
    ]


def test_the_graded_runs_are_two_unread_one_pass_and_one_fail() -> None:
    assert [r.verdict for _, r in _graded()] == ["review", "review", "pass", "fail"]


def test_report_counts_and_lists_the_runs_not_read_whole_with_their_reasons() -> None:
    report = build_report(_records(), since_ns=None, until_ns=10)
    assert report.overall.passed == 3  # review counts as passed, as for exit codes
    assert (report.review, report.unread) == (2, 2)
    data = report.to_dict()["review"]
    assert (data["runs"], data["not_read_whole"]) == (2, 2)
    assert [r["reasons"] for r in data["latest"]][1] == [ASKED]
    text = render_text(report, width=200)
    assert "2 runs could not be read whole: counted as passed above" in text
    assert ASKED in text


def test_a_report_without_review_runs_says_nothing_about_them() -> None:
    whole = [r for r in _records() if r.result["verdict"] != "review"]
    report = build_report(whole, since_ns=None, until_ns=10)
    assert report.review == 0
    assert "read whole" not in render_text(report)
    assert 'id="review"' not in render_html(report)


def test_the_html_report_has_the_runs_to_review_apart_with_their_reasons() -> None:
    page = render_html(
        build_report(_records(), since_ns=None, until_ns=10),
        trace_url="http://jaeger/trace/{trace_id}",
    )
    assert '<h2 id="review">Runs to review</h2>' in page
    assert "2 runs could not be read whole" in page
    assert ASKED in page
    run, _ = _graded()[0]
    assert f'href="http://jaeger/trace/{run.trace_id}"' in page


@pytest.fixture
def reader() -> Iterator[InMemoryMetricReader]:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader], views=metric_views(), shutdown_on_exit=False)
    reader.provider = provider  # type: ignore[attr-defined]
    yield reader
    provider.shutdown()


def test_metrics_count_the_runs_not_read_whole_as_verdict_review(
    reader: InMemoryMetricReader,
) -> None:
    provider: MeterProvider = reader.provider  # type: ignore[attr-defined]
    metrics = ToolUseMetrics(provider.get_meter("test"))
    for run, result in _graded():
        metrics.record(run, result)
    data = reader.get_metrics_data()
    assert data is not None
    runs: dict[str, int] = {}
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                if metric.name == semconv.METRIC_RUNS:
                    for p in metric.data.data_points:
                        verdict = str(p.attributes[semconv.ATTEST_TOOL_USE_VERDICT])
                        runs[verdict] = runs.get(verdict, 0) + int(p.value)
    assert runs == {"review": 2, "pass": 1, "fail": 1}


def test_the_agent_span_annotation_says_review_and_why() -> None:
    run, result = _graded()[0]
    (about_run,) = [e for e in evaluations(run, result) if e.about == "run"]
    assert about_run.span_id == run.span_id
    assert about_run.severity == "warn"
    assert about_run.span_attributes[semconv.ATTEST_TOOL_USE_VERDICT] == "review"
    assert about_run.span_attributes[semconv.ATTEST_TOOL_USE_GAPS] == ASKED
    event = about_run.event_attributes
    assert event[semconv.GEN_AI_EVALUATION_SCORE_LABEL] == "review"
    assert ASKED in str(event[semconv.GEN_AI_EVALUATION_EXPLANATION])
    whole_run, whole = _graded()[2]
    (about_whole,) = [e for e in evaluations(whole_run, whole) if e.about == "run"]
    assert semconv.ATTEST_TOOL_USE_GAPS not in about_whole.span_attributes


def test_grade_prints_review_with_why_and_exits_0() -> None:
    from click.testing import CliRunner

    from attest_otel.cli import main

    out = CliRunner().invoke(
        main, ["grade", "--file", str(FIXTURES / "gaps" / "asked_no_span.json")]
    )
    assert out.exit_code == 0, out.output  # review counts as passed
    assert "REVIEW" in out.stdout
    assert "not read whole:" in out.stdout and ASKED in " ".join(out.stdout.split())
    assert "1 to review (1 could not be read whole)" in out.stdout
    data = CliRunner().invoke(
        main, ["grade", "--json", "--file", str(FIXTURES / "gaps" / "asked_no_span.json")]
    )
    (run,) = json.loads(data.stdout)["traces"][0]["runs"]
    assert run["gaps"] == [ASKED] == run["result"]["metadata"]["gaps"]
