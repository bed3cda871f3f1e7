"""Log-based `gen_ai.evaluation.result` events, recorded by the real SDK into memory."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

import pytest
from opentelemetry._logs import SeverityNumber
from opentelemetry.sdk._logs import LoggerProvider, ReadableLogRecord
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.trace import TracerProvider

from attest_otel import semconv
from attest_otel.export.log_events import emit_log_events

from .sample import AGENT_SPAN_ID, TRACE_ID, graded_run, passing_run, tool_span_id


@pytest.fixture
def provider() -> Iterator[tuple[LoggerProvider, InMemoryLogRecordExporter]]:
    exporter: InMemoryLogRecordExporter = cast(Any, InMemoryLogRecordExporter)()
    logs = LoggerProvider(shutdown_on_exit=False)
    logs.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    yield logs, exporter
    logs.shutdown()


def _records(exporter: InMemoryLogRecordExporter) -> list[ReadableLogRecord]:
    return list(exporter.get_finished_logs())


def test_every_finding_and_the_run_become_one_record_on_the_span_they_are_about(
    provider: tuple[LoggerProvider, InMemoryLogRecordExporter],
) -> None:
    logs, exporter = provider
    run, result = graded_run()
    assert emit_log_events(logs.get_logger("test"), run, result, now_ns=5) == 13
    records = [r.log_record for r in _records(exporter)]
    assert {f"{r.trace_id:032x}" for r in records} == {TRACE_ID}
    assert [f"{r.span_id:016x}" for r in records] == [
        tool_span_id(f.step) for f in result.findings
    ] + [AGENT_SPAN_ID]
    assert {r.event_name for r in records} == {"gen_ai.evaluation.result"}
    assert all(
        (r.attributes or {})[semconv.EVENT_NAME] == "gen_ai.evaluation.result" for r in records
    )
    assert all(r.timestamp == 5 for r in records)


def test_a_failed_call_is_a_warning_and_a_correct_one_is_info(
    provider: tuple[LoggerProvider, InMemoryLogRecordExporter],
) -> None:
    logs, exporter = provider
    run, result = graded_run()
    emit_log_events(logs.get_logger("test"), run, result)
    severity = {
        (r.log_record.attributes or {}).get(semconv.ATTEST_VERDICT): r.log_record.severity_number
        for r in _records(exporter)
    }
    assert severity["correct"] == SeverityNumber.INFO
    assert severity["error_silent"] == SeverityNumber.WARN
    assert severity["review"] == SeverityNumber.WARN


def test_records_of_a_run_without_a_trace_do_not_borrow_the_callers_trace(
    provider: tuple[LoggerProvider, InMemoryLogRecordExporter],
) -> None:
    logs, exporter = provider
    run, result = passing_run(trace_id=None)
    tracer = TracerProvider(shutdown_on_exit=False).get_tracer("caller")
    with tracer.start_as_current_span("caller"):
        emit_log_events(logs.get_logger("test"), run, result)
    assert {r.log_record.trace_id for r in _records(exporter)} == {0}
