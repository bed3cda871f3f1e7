"""Hand-built traces for the adapter tests: spans with readable ids and explicit times."""

from __future__ import annotations

import json
from typing import Any

from attest_otel.adapt import TraceRuns, runs_from_spans
from attest_otel.model import STATUS_ERROR, STATUS_UNSET, Event, LogRecord, Run, Span, ToolCall

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"

MS = 1_000_000


def js(value: Any) -> str:
    """Attribute values that dialects send as JSON strings."""
    return json.dumps(value)


class Trace:
    """Builds the spans of one trace; span ids are `s1`, `s2`, ... padded to 16 hex digits."""

    def __init__(self, trace_id: str = TRACE_ID, scope: str = "") -> None:
        self.trace_id = trace_id
        self.scope = scope
        self.spans: list[Span] = []
        self.logs: list[LogRecord] = []

    def span(
        self,
        name: str,
        attrs: dict[str, Any] | None = None,
        *,
        parent: Span | None = None,
        start: int = 0,
        end: int | None = None,
        error: str | None = None,
        status: int = STATUS_UNSET,
        events: list[Event] | None = None,
        scope: str | None = None,
        span_id: str | None = None,
    ) -> Span:
        """A span from `start` to `end` milliseconds; `error` sets status ERROR with that text."""
        sid = span_id or f"{len(self.spans) + 1:016x}"
        span = Span(
            trace_id=self.trace_id,
            span_id=sid,
            parent_id=parent.span_id if parent is not None else None,
            name=name,
            start_ns=start * MS,
            end_ns=(end if end is not None else start + 1) * MS,
            status_code=STATUS_ERROR if error is not None else status,
            status_message=error or "",
            attributes=dict(attrs or {}),
            events=list(events or []),
            scope_name=self.scope if scope is None else scope,
        )
        self.spans.append(span)
        return span

    def log(self, span: Span, event_name: str, body: Any, **attrs: Any) -> LogRecord:
        record = LogRecord(self.trace_id, span.span_id, event_name, span.start_ns, body, attrs)
        self.logs.append(record)
        return record

    def runs(self, **kwargs: Any) -> list[Run]:
        return [r for t in self.traces(**kwargs) for r in t.runs]

    def run(self, **kwargs: Any) -> Run:
        runs = self.runs(**kwargs)
        assert len(runs) == 1, [r.agent for r in runs]
        return runs[0]

    def traces(self, **kwargs: Any) -> list[TraceRuns]:
        return runs_from_spans(self.spans, self.logs, **kwargs)


def event(name: str, **attrs: Any) -> Event:
    return Event(name=name, time_ns=0, attributes=attrs)


def calls(run: Run) -> list[ToolCall]:
    return [c for _, c in run.tool_calls]


def names(run: Run) -> list[str]:
    return [c.name for c in calls(run)]
