"""Exporter results made visible: counting wrappers and the report they feed."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import grpc
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from attest_otel.export.delivery import ExportReport, SignalReport
from attest_otel.export.tally import (
    CountingSpanExporter,
    Tally,
    describe_failure,
    install_log_capture,
)


class _Scripted(SpanExporter):
    """Returns or raises what it is told, and counts its calls."""

    def __init__(self, outcome: SpanExportResult | Exception) -> None:
        self.outcome = outcome
        self.calls = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.calls += 1
        if isinstance(self.outcome, Exception):
            raise self.outcome
        logging.getLogger("opentelemetry.exporter.test").error(
            "Failed to export %s to %s, error code: %s", "traces", "x", "boom"
        )
        return self.outcome


def _spans(n: int) -> list[ReadableSpan]:
    return [ReadableSpan(name=f"s{i}") for i in range(n)]


def test_a_failure_the_exporter_only_logged_is_counted_with_the_logged_reason() -> None:
    install_log_capture()
    tally = Tally("traces", "somewhere", "span")
    exporter = CountingSpanExporter(_Scripted(SpanExportResult.FAILURE), tally)
    assert exporter.export(_spans(3)) == SpanExportResult.FAILURE
    report = tally.snapshot()
    assert (report.sent, report.failed) == (0, 3)
    assert report.error == "Failed to export traces to x, error code: boom"


def test_an_exporter_that_raises_is_a_failed_export_not_a_crash() -> None:
    tally = Tally("traces", "somewhere", "span")
    exporter = CountingSpanExporter(_Scripted(RuntimeError("encoder bug")), tally)
    assert exporter.export(_spans(1)) == SpanExportResult.FAILURE
    assert tally.snapshot().error == "RuntimeError: encoder bug"


def test_an_abandoned_output_fails_at_once_without_calling_the_exporter() -> None:
    tally = Tally("traces", "somewhere", "span")
    inner = _Scripted(SpanExportResult.SUCCESS)
    exporter = CountingSpanExporter(inner, tally)
    tally.abandoned = True
    assert exporter.export(_spans(2)) == SpanExportResult.FAILURE
    assert inner.calls == 0
    assert tally.snapshot().failed == 2


def test_items_handed_over_but_never_exported_count_as_pending_and_not_ok() -> None:
    tally = Tally("logs", "somewhere", "log record")
    tally.add_emitted(5)
    tally.note_success(3)
    report = tally.snapshot()
    assert report.pending == 2 and not report.ok
    assert report.describe() == (
        "could not export 2 log records to somewhere: not sent before the flush timed out"
    )


def test_the_summary_lists_what_was_sent_when_everything_arrived() -> None:
    report = ExportReport(
        (
            SignalReport("traces", "http://c:4317 (grpc)", "span", sent=1),
            SignalReport("logs", "http://c:4317 (grpc)", "log record", sent=13),
        )
    )
    assert report.ok
    assert report.summary() == (
        "sent 1 span to http://c:4317 (grpc), 13 log records to http://c:4317 (grpc)"
    )
    report.raise_for_failure()


def test_a_grpc_status_in_the_logged_arguments_becomes_a_short_reason() -> None:
    record = logging.LogRecord(
        "x",
        logging.ERROR,
        __file__,
        1,
        "Failed to export %s to %s, error code: %s, error details: %s",
        ("traces", "h:1", grpc.StatusCode.UNAUTHENTICATED, "bad token"),
        None,
    )
    assert describe_failure([record]) == "gRPC UNAUTHENTICATED"
    assert describe_failure([]) == "the exporter reported a failure"
