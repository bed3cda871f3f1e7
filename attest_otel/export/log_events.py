"""The grade as log-based events: one OTLP log record per evaluation.

OpenTelemetry is moving events from span events to log records (event name + trace
context), and log backends (Loki, Elastic, ClickHouse...) index those where they would
never look inside a span. Each record carries the trace id and the id of the span it is
about, so a backend that correlates logs with traces shows it on that span.
"""

from __future__ import annotations

import inspect
import time
from functools import cache
from typing import Any

from opentelemetry import trace
from opentelemetry._logs import Logger, SeverityNumber
from opentelemetry.context import Context
from opentelemetry.trace import INVALID_SPAN, NonRecordingSpan

from attest_otel import semconv
from attest_otel.content import KEEP, ContentPolicy
from attest_otel.export.grade_span import remote_span_context
from attest_otel.export.results import evaluations
from attest_otel.model import CheckResult, Run

__all__ = ["emit_log_events"]

# A judged call is someone else's problem (the agent's), not attest-otel failing, so even a
# `fail` stays below ERROR: ERROR in this service's logs should mean the grader broke.
_SEVERITY: dict[str, tuple[SeverityNumber, str]] = {
    "pass": (SeverityNumber.INFO, "INFO"),
    "warn": (SeverityNumber.WARN, "WARN"),
    "fail": (SeverityNumber.WARN, "WARN"),
}


@cache
def _takes_event_name(emit: Any) -> bool:
    """Whether this SDK's `Logger.emit` takes `event_name` (older SDKs lack it)."""
    try:
        return "event_name" in inspect.signature(emit).parameters
    except (TypeError, ValueError):
        return False


def _context(trace_id: str | None, span_id: str | None) -> Context:
    """The evaluated span as the record's trace context; an explicit invalid span otherwise,
    because an empty Context would make the SDK fall back to the caller's current span."""
    target = remote_span_context(trace_id, span_id)
    return trace.set_span_in_context(NonRecordingSpan(target) if target else INVALID_SPAN)


def emit_log_events(
    logger: Logger,
    run: Run,
    result: CheckResult,
    *,
    now_ns: int | None = None,
    content: ContentPolicy = KEEP,
) -> int:
    """Emits one `gen_ai.evaluation.result` record per finding and one for the run.

    A finding without a span of its own is attached to the run's agent span, so it stays
    in the right trace. Returns the number of records emitted.
    """
    now = time.time_ns() if now_ns is None else now_ns
    with_event_name = _takes_event_name(type(logger).emit)
    count = 0
    for evaluation in evaluations(run, result, content):
        severity_number, severity_text = _SEVERITY.get(evaluation.severity, _SEVERITY["fail"])
        attributes = dict(evaluation.event_attributes)
        attributes[semconv.EVENT_NAME] = semconv.GEN_AI_EVALUATION_RESULT
        kwargs: dict[str, Any] = {
            "timestamp": now,
            "observed_timestamp": now,
            "context": _context(run.trace_id, evaluation.span_id or run.span_id),
            "severity_number": severity_number,
            "severity_text": severity_text,
            "attributes": attributes,
        }
        if with_event_name:
            kwargs["event_name"] = semconv.GEN_AI_EVALUATION_RESULT
        logger.emit(**kwargs)
        count += 1
    return count
