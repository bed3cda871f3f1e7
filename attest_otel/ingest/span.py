"""The light span every later stage reads: ids as hex, attributes as plain Python values.

Only spans that may matter to grading are built as `Span`s; the decoders recognise the rest
from a few attributes and leave them as they came (see `ingest.decode`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

STATUS_UNSET = 0
STATUS_OK = 1
STATUS_ERROR = 2


@dataclass(slots=True)
class Event:
    name: str
    time_ns: int
    attributes: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Span:
    trace_id: str
    span_id: str
    parent_id: str | None
    name: str
    start_ns: int = 0
    end_ns: int = 0
    kind: int = 0
    status_code: int = STATUS_UNSET
    status_message: str = ""
    attributes: dict[str, Any] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    resource: dict[str, Any] = field(default_factory=dict)
    scope_name: str = ""
    scope_version: str = ""
    source: Any = field(default=None, repr=False, compare=False)
    """Where the span came from (e.g. the protobuf Span), so export can annotate it in place."""

    @property
    def is_error(self) -> bool:
        return self.status_code == STATUS_ERROR


@dataclass(slots=True)
class LogRecord:
    """A log record tied to a span: old GenAI conventions put message content in log events."""

    trace_id: str
    span_id: str
    event_name: str
    time_ns: int
    body: Any = None
    attributes: dict[str, Any] = field(default_factory=dict)
