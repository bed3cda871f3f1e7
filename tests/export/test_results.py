"""The shared mapping from a graded run to attributes, pinned by a golden file.

Set ATTEST_OTEL_UPDATE_GOLDEN=1 to rewrite the golden after an intended change, and read
the diff: every line of it is a change to what users' dashboards and queries see.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format  # type: ignore[import-untyped]
from opentelemetry.proto.trace.v1.trace_pb2 import Span as PbSpan

from attest_otel import semconv
from attest_otel.export.annotate import annotate_spans
from attest_otel.export.results import evaluations, finding_span_id
from attest_otel.model import Finding

from .sample import AGENT_SPAN_ID, NO_METADATA_SPAN_STEP, TRACE_ID, graded_run, tool_span_id

GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "golden" / "export_every_verdict.json"
NOW_NS = 1_700_000_000_000_000_000


def _held_spans() -> dict[str, PbSpan]:
    run, _ = graded_run()
    spans = {
        AGENT_SPAN_ID: PbSpan(
            trace_id=bytes.fromhex(TRACE_ID),
            span_id=bytes.fromhex(AGENT_SPAN_ID),
            name="invoke_agent refund-agent",
        )
    }
    for step, call in run.tool_calls:
        span = PbSpan(
            trace_id=bytes.fromhex(TRACE_ID),
            span_id=bytes.fromhex(tool_span_id(step)),
            parent_span_id=bytes.fromhex(AGENT_SPAN_ID),
            name=f"execute_tool {call.name}",
        )
        span.attributes.add(key="gen_ai.tool.name").value.string_value = call.name
        spans[tool_span_id(step)] = span
    return spans


def _encoded() -> dict[str, Any]:
    run, result = graded_run()
    spans = _held_spans()
    changed = annotate_spans(spans, run, result, now_ns=NOW_NS)
    return {
        "evaluations": [
            {
                "about": e.about,
                "span_id": e.span_id,
                "severity": e.severity,
                "span_attributes": e.span_attributes,
                "event_attributes": e.event_attributes,
            }
            for e in evaluations(run, result)
        ],
        "annotated_spans_changed": changed,
        "annotated_spans": {span_id: _otlp_json(span) for span_id, span in spans.items()},
    }


def _otlp_json(span: PbSpan) -> dict[str, Any]:
    """OTLP/JSON as a reader knows it: hex ids (json_format would write base64)."""
    out: dict[str, Any] = json_format.MessageToDict(span)
    for key, raw in (
        ("traceId", span.trace_id),
        ("spanId", span.span_id),
        ("parentSpanId", span.parent_span_id),
    ):
        if raw:
            out[key] = raw.hex()
    return out


def test_every_verdict_encodes_as_in_the_golden_file() -> None:
    encoded = _encoded()
    if os.environ.get("ATTEST_OTEL_UPDATE_GOLDEN"):
        # Update mode never passes: the rewritten file is for a human to read (git diff)
        # before a run without the variable can bless it.
        old = GOLDEN.read_text() if GOLDEN.exists() else ""
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(json.dumps(encoded, indent=2, ensure_ascii=False) + "\n")
        changed = "changed" if GOLDEN.read_text() != old else "unchanged"
        pytest.fail(
            f"{GOLDEN.name} rewritten ({changed}): review `git diff` and run again "
            "without ATTEST_OTEL_UPDATE_GOLDEN",
            pytrace=False,
        )
    assert encoded == json.loads(GOLDEN.read_text())


def test_the_golden_run_covers_every_verdict_and_every_recovery() -> None:
    _, result = graded_run()
    verdicts = {f.verdict for f in result.findings}
    recoveries = {f.metadata["recovery"] for f in result.findings} - {None}
    assert verdicts == {
        "disallowed_tool",
        "error_claimed_success",
        "error_silent",
        "incorrect",
        "review",
        "correct",
    }
    assert recoveries == {
        "retried",
        "fallback",
        "acknowledged",
        "silent",
        "claimed_success",
        "unchecked",
    }


def test_null_metadata_is_left_out_rather_than_written_empty() -> None:
    run, result = graded_run()
    first = evaluations(run, result)[0].span_attributes
    assert semconv.ATTEST_RECOVERY not in first
    assert semconv.ATTEST_RECOVERED_AT not in first
    assert first[semconv.ATTEST_APPROPRIATE] is True


def test_only_a_correct_call_scores_one() -> None:
    run, result = graded_run()
    scores = {
        e.event_attributes[semconv.GEN_AI_EVALUATION_SCORE_LABEL]: e.event_attributes[
            semconv.GEN_AI_EVALUATION_SCORE_VALUE
        ]
        for e in evaluations(run, result)
        if e.about == "call"
    }
    assert scores.pop("correct") == 1.0
    assert set(scores.values()) == {0.0}


def test_the_run_evaluation_carries_score_verdict_and_summary_on_the_agent_span() -> None:
    run, result = graded_run()
    last = evaluations(run, result)[-1]
    assert last.about == "run"
    assert last.span_id == AGENT_SPAN_ID
    assert last.event_attributes[semconv.GEN_AI_EVALUATION_SCORE_VALUE] == result.score
    assert last.event_attributes[semconv.GEN_AI_EVALUATION_SCORE_LABEL] == "fail"
    assert last.event_attributes[semconv.GEN_AI_EVALUATION_EXPLANATION] == result.summary
    assert last.span_attributes == {
        semconv.ATTEST_TOOL_USE_SCORE: result.score,
        semconv.ATTEST_TOOL_USE_VERDICT: "fail",
        semconv.ATTEST_TOOL_USE_CALLS: 12,
        semconv.ATTEST_TOOL_USE_FAILED_CALLS: 5,
    }


def test_a_finding_without_a_span_id_finds_its_span_through_the_run_step() -> None:
    run, result = graded_run()
    finding = next(f for f in result.findings if f.step == NO_METADATA_SPAN_STEP)
    assert "span_id" not in finding.metadata
    assert finding_span_id(run, finding) == tool_span_id(NO_METADATA_SPAN_STEP)


def test_a_finding_with_no_span_anywhere_has_no_span_id() -> None:
    run, _ = graded_run()
    lost = Finding("pass", "correct", "x", "ok", None, 999, {})
    assert finding_span_id(run, lost) is None
