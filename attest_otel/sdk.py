"""Grading what the OpenTelemetry SDK recorded in this process: a test's in-memory spans.

A developer testing an agent in pytest already has `InMemorySpanExporter` (and
`InMemoryLogRecordExporter` when content goes to log records). `grade_spans` encodes what they
hold as OTLP, exactly as the SDK's OTLP exporters would send it, and grades it through
`pipeline.grade_traces`: the same reading and rules as `grade --file` and the sidecar, so a
test and production cannot disagree about the same spans.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from attest_otel.grade.grader import judge_for_tool_use
from attest_otel.ingest.decode import decode_bytes
from attest_otel.pipeline import GradedRun, Reading, grade_traces
from attest_otel.policy import Policy, load_policy

if TYPE_CHECKING:
    from opentelemetry.sdk._logs import ReadableLogRecord
    from opentelemetry.sdk.trace import ReadableSpan

__all__ = ["grade_spans"]


def grade_spans(
    spans: Iterable[ReadableSpan],
    logs: Iterable[ReadableLogRecord] = (),
    *,
    policy: str | Path | Policy | None = None,
    allowed_tools: list[str] | None = None,
    fallbacks: dict[str, list[str]] | None = None,
    appropriate: bool = False,
    check_answer: bool = False,
    model: str | None = None,
) -> list[GradedRun]:
    """Every run in `spans` (finished SDK spans) and `logs` (SDK log records), graded.

    Args:
        spans: e.g. `InMemorySpanExporter().get_finished_spans()`.
        logs: e.g. `InMemoryLogRecordExporter().get_finished_logs()`, where the
            instrumentation puts messages and tool results in log records.
        policy: a policy file (path) or a loaded `Policy`: allowed tools per agent,
            fallbacks, declared dialects.
        allowed_tools, fallbacks: one-off overrides, as `grade --allowed-tools/--fallback`.
        appropriate, check_answer, model: the model checks, as on the command line; asking
            for one with no model available raises `ModelError`.

    Returns one `GradedRun` (`.run`, `.result`) per agent run, trace by trace. A run the
    grader could not read whole is `review` with its reasons, never a plain pass.
    """
    from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    finished = list(spans)
    records = list(logs)
    traces = decode_bytes(
        encode_spans(finished).SerializeToString(), "application/x-protobuf", source="spans"
    )
    found_logs = (
        decode_bytes(
            encode_logs(records).SerializeToString(), "application/x-protobuf", source="logs"
        ).logs
        if records
        else []
    )
    loaded = load_policy(policy) if isinstance(policy, (str, Path)) else policy
    reading = Reading(
        policy=loaded or Policy.empty(), allowed_tools=allowed_tools, fallbacks=fallbacks
    )
    judge = judge_for_tool_use(asked=appropriate or check_answer, model=model)
    graded = grade_traces(traces.spans, found_logs, reading, judge=judge, appropriate=appropriate)
    return [run for trace in graded for run in trace.runs]
