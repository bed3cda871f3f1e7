"""Exporter wrappers that remember what the SDK exporters returned.

The OTLP exporters report failure by returning FAILURE and logging the reason; the batch
processors then discard the result. Each wrapper here counts items sent and failed and
keeps the reason. The reason is only in the exporter's log record, so while a wrapped
export runs, the records the OTLP exporters log on that thread are captured for it (a
thread-local says which export is running; the capture never drops a record, so a
configured logging setup still sees them all).

A tally can also be abandoned: after a flush has failed, shutdown should not wait out the
exporter's timeout again for the final metric collection, so further exports fail at once.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable, Sequence
from typing import Any, cast
from urllib.parse import urlsplit

from opentelemetry.sdk._logs import ReadableLogRecord
from opentelemetry.sdk._logs.export import LogRecordExporter, LogRecordExportResult
from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult, MetricsData
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from attest_otel.export.delivery import SignalReport
from attest_otel.export.prometheus import count_points

__all__ = [
    "CountingLogExporter",
    "CountingMetricExporter",
    "CountingSpanExporter",
    "Tally",
    "describe_failure",
    "endpoint_probe",
    "install_log_capture",
]

_MAX_REASON = 300
_NO_DETAIL = "the exporter reported a failure"
_current = threading.local()
"""`records`: the log records of the export running on this thread, if one is."""


class Tally:
    """Counts for one output; every method is safe to call from the SDK's worker threads."""

    def __init__(
        self,
        signal: str,
        destination: str,
        unit: str,
        probe: Callable[[], str | None] | None = None,
    ) -> None:
        self.signal = signal
        self.probe = probe
        self.destination = destination
        self.unit = unit
        self.emitted = 0
        self.sent = 0
        self.failed = 0
        self.error: str | None = None
        self.last_failed = False
        self.abandoned = False
        self._lock = threading.Lock()

    def add_emitted(self, count: int) -> None:
        with self._lock:
            self.emitted += count

    def note_failure(self, count: int, reason: str) -> None:
        with self._lock:
            self.failed += count
            self.error = reason[:_MAX_REASON]
            self.last_failed = True

    def note_success(self, count: int) -> None:
        with self._lock:
            self.sent += count
            self.last_failed = False

    def attempt(self, count: int, send: Callable[[], bool]) -> bool:
        """Runs one export, records its outcome, and never raises."""
        if self.abandoned:
            self.note_failure(count, self.error or "the exporter was shut down after a failure")
            return False
        captured: list[logging.LogRecord] = []
        previous = getattr(_current, "records", None)
        _current.records = captured
        crash: str | None = None
        try:
            ok = send()
        except Exception as e:  # an exporter bug must be a failed export, not a crash
            ok = False
            crash = f"{type(e).__name__}: {e}"
        finally:
            _current.records = previous
        if ok:
            self.note_success(count)
        else:
            self.note_failure(count, crash or self._reason(captured))
        return ok

    def _reason(self, records: Sequence[logging.LogRecord]) -> str:
        parts = _failure_parts(records)
        if self.probe is not None and not _TRANSPORT_CLUES.intersection(parts):
            clue = self.probe()
            if clue is not None:
                parts.append(clue)
        if parts:
            return ", ".join(parts)
        return describe_failure(records)

    def snapshot(self, *, count_pending: bool = True) -> SignalReport:
        with self._lock:
            pending = max(0, self.emitted - self.sent - self.failed) if count_pending else 0
            return SignalReport(
                signal=self.signal,
                destination=self.destination,
                unit=self.unit,
                sent=self.sent,
                failed=self.failed,
                pending=pending,
                error=self.error,
            )


_KEYWORDS = (
    ("connection refused", "connection refused"),
    ("failed to establish a new connection", "connection refused"),
    ("name or service not known", "host name not found"),
    ("nodename nor servname", "host name not found"),
    ("dns resolution failed", "host name not found"),
    ("certificate verify failed", "TLS certificate not trusted"),
    ("ssl", "TLS handshake failed"),
    ("deadline exceeded", "timed out"),
    ("timed out", "timed out"),
)
_TRANSPORT_CLUES = frozenset(meaning for _, meaning in _KEYWORDS)
_PROBE_TIMEOUT_S = 0.2


def endpoint_probe(url: str) -> Callable[[], str | None]:
    """A quick TCP connect to the endpoint, run only after an export failed without saying
    why at the transport level (the SDK logs the reason once per 20 s, or not at all when
    it gives up before its first retry). None means "reachable": the receiver refused."""
    parsed = urlsplit(url if "://" in url else f"http://{url}")
    host = parsed.hostname or "localhost"
    try:
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
    except ValueError:
        return lambda: None

    def probe() -> str | None:
        try:
            with socket.create_connection((host, port), timeout=_PROBE_TIMEOUT_S):
                return None
        except ConnectionRefusedError:
            return "connection refused"
        except socket.gaierror:
            return "host name not found"
        except TimeoutError:
            return "connect timed out"
        except OSError as e:
            return e.strerror or str(e)

    return probe


def _failure_parts(records: Sequence[logging.LogRecord]) -> list[str]:
    """The gRPC or HTTP status the exporter got and what the transport said, picked out of
    the SDK's multi-clause log messages."""
    parts: list[str] = []
    texts: list[str] = []
    for record in records:
        try:
            texts.append(record.getMessage().lower())
        except Exception:  # a record with bad args still tells us something
            texts.append(str(record.msg).lower())
        args = record.args if isinstance(record.args, tuple) else ()
        for arg in args:
            if type(arg).__name__ == "StatusCode" and hasattr(arg, "name"):
                code = f"gRPC {arg.name}"
                if code not in parts:
                    parts.append(code)
        http_failure = str(record.msg).startswith("Failed to export %s batch code")
        if http_failure and len(args) >= 3 and isinstance(args[1], int):
            parts.append(f"HTTP {args[1]}" + (f" {args[2]}" if args[2] else ""))
    text = " ".join(texts)
    for needle, meaning in _KEYWORDS:
        if needle in text:
            parts.append(meaning)
            break
    return parts


def describe_failure(records: Sequence[logging.LogRecord]) -> str:
    """A short reason for a failed export from the records the exporter logged."""
    parts = _failure_parts(records)
    if parts:
        return ", ".join(parts)
    return records[-1].getMessage() if records else _NO_DETAIL


def _capture(record: logging.LogRecord) -> None:
    records = getattr(_current, "records", None)
    if records is None or record.levelno < logging.WARNING:
        return
    if not records or records[-1] is not record:
        records.append(record)


class _CaptureHandler(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        _capture(record)


class _CaptureFilter(logging.Filter):
    """Sees records before the SDK's DuplicateFilter can drop them (that filter keys on
    the message template, so when traces fail first, the logs' and metrics' identical
    failures within 20 s would never reach a handler). Never drops anything itself."""

    def filter(self, record: logging.LogRecord) -> bool:
        _capture(record)
        return True


_HANDLER = _CaptureHandler(logging.WARNING)
_FILTER = _CaptureFilter()
_capture_lock = threading.Lock()


def install_log_capture() -> None:
    """Hooks the capture onto the OTLP exporters' loggers; call after importing them.

    The handler sits on `opentelemetry.exporter`; loggers of that tree that carry their own
    filters also get the capture filter in front. Idempotent. A side effect worth knowing:
    with a handler present, Python's last-resort handler no longer prints these records to
    stderr when nothing configured logging, so a CLI shows the one line our report makes
    rather than the SDK's messages.
    """
    with _capture_lock:
        parent = logging.getLogger("opentelemetry.exporter")
        if _HANDLER not in parent.handlers:
            parent.addHandler(_HANDLER)
        for name, logger in list(logging.root.manager.loggerDict.items()):
            if (
                name.startswith("opentelemetry.exporter.")
                and isinstance(logger, logging.Logger)
                and logger.filters
                and _FILTER not in logger.filters
            ):
                logger.filters.insert(0, _FILTER)


class CountingSpanExporter(SpanExporter):
    def __init__(self, inner: SpanExporter, tally: Tally) -> None:
        self.inner = inner
        self.tally = tally

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        ok = self.tally.attempt(
            len(spans), lambda: self.inner.export(spans) == SpanExportResult.SUCCESS
        )
        return SpanExportResult.SUCCESS if ok else SpanExportResult.FAILURE

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


class CountingLogExporter(LogRecordExporter):
    def __init__(self, inner: LogRecordExporter, tally: Tally) -> None:
        self.inner = inner
        self.tally = tally

    def export(self, batch: Sequence[ReadableLogRecord]) -> LogRecordExportResult:
        ok = self.tally.attempt(
            len(batch), lambda: self.inner.export(batch) == LogRecordExportResult.SUCCESS
        )
        return LogRecordExportResult.SUCCESS if ok else LogRecordExportResult.FAILURE

    def shutdown(self) -> None:
        cast(Any, self.inner).shutdown()  # untyped in the SDK

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return bool(self.inner.force_flush(timeout_millis))


class CountingMetricExporter(MetricExporter):
    """Keeps the inner exporter's temporality and aggregation preferences, which the
    PeriodicExportingMetricReader reads from whatever exporter it is given."""

    def __init__(self, inner: MetricExporter, tally: Tally) -> None:
        super().__init__(
            preferred_temporality=inner._preferred_temporality,
            preferred_aggregation=inner._preferred_aggregation,
        )
        self.inner = inner
        self.tally = tally

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        def send() -> bool:
            result = self.inner.export(metrics_data, timeout_millis=timeout_millis, **kwargs)
            return bool(result == MetricExportResult.SUCCESS)

        ok = self.tally.attempt(count_points(metrics_data), send)
        return MetricExportResult.SUCCESS if ok else MetricExportResult.FAILURE

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return bool(self.inner.force_flush(timeout_millis=timeout_millis))

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        self.inner.shutdown(timeout_millis=timeout_millis, **kwargs)
