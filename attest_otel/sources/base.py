"""What every trace source shares: the `Source` protocol, trace ids, and "not found".

A source answers one question, "the spans of trace X", so the grader never learns where a
trace was stored. Each backend gives the answer in its own shape; turning that shape into
`Decoded` is the source's job, and everything after it is the same code path as a file.
"""

from __future__ import annotations

import string
from collections.abc import Iterable
from typing import Protocol, runtime_checkable

# TraceNotFoundError lives with the rest of the error tree; imported here for the sources.
from attest_otel.errors import TraceNotFoundError as TraceNotFoundError
from attest_otel.errors import UsageError
from attest_otel.ingest.candidate import is_genai_candidate
from attest_otel.ingest.decode import Decoded
from attest_otel.model import Span

__all__ = [
    "Source",
    "TraceNotFoundError",
    "decoded_from_spans",
    "normalize_span_id",
    "normalize_trace_id",
    "only_trace",
    "parse_hex_id",
]

_HEX = frozenset(string.hexdigits)


@runtime_checkable
class Source(Protocol):
    """A place that can hand back the spans of one finished trace."""

    kind: str
    """`jaeger`, `tempo`, `phoenix`, `file` or `store`: the prefix of `--from`."""
    location: str
    """The URL or path as the user gave it, for messages."""

    def fetch(self, trace_id: str) -> Decoded:
        """Every span of the trace; raises TraceNotFoundError or another SourceError."""
        ...

    def close(self) -> None:
        """Releases connections or files; safe to call twice."""
        ...


def parse_hex_id(text: str, nbytes: int) -> str:
    """`text` as `nbytes * 2` lowercase hex digits, left-padded; ValueError if it is not one.

    Backends show ids shortened (Jaeger prints 64-bit trace ids as 16 digits, some UIs drop
    leading zeros), and every one of them stores the padded form.
    """
    value = text.strip().lower()
    if value.startswith("0x"):
        value = value[2:]
    if not value or len(value) > nbytes * 2 or not _HEX.issuperset(value):
        raise ValueError(f"{text!r} is not an id of 1 to {nbytes * 2} hex digits")
    value = value.rjust(nbytes * 2, "0")
    if not value.strip("0"):
        raise ValueError(f"{text!r} is all zeros, which OpenTelemetry reserves for 'none'")
    return value


def _user_id(text: str, nbytes: int, what: str) -> str:
    try:
        return parse_hex_id(text, nbytes)
    except ValueError as e:
        raise UsageError(f"{what}: {e}") from None


def normalize_trace_id(text: str) -> str:
    """A trace id the user typed, as 32 lowercase hex digits (UsageError if it is none)."""
    return _user_id(text, 16, "trace ID")


def normalize_span_id(text: str) -> str:
    """A span id the user typed, as 16 lowercase hex digits (UsageError if it is none)."""
    return _user_id(text, 8, "span ID")


def decoded_from_spans(spans: list[Span]) -> Decoded:
    """Wraps spans that a backend-specific converter built, counting them as a decode would."""
    genai = sum(1 for s in spans if is_genai_candidate(s.name, s.attributes.keys(), s.scope_name))
    return Decoded(spans=spans, span_count=len(spans), genai_span_count=genai)


def only_trace(decoded: Decoded, trace_id: str) -> Decoded:
    """Keeps the spans (and logs) of one trace: a backend may answer with more than asked
    (a file holds many traces; an old Phoenix ignores the trace filter)."""
    if all(s.trace_id == trace_id for s in decoded.spans) and all(
        r.trace_id == trace_id for r in decoded.logs
    ):
        return decoded
    spans = [s for s in decoded.spans if s.trace_id == trace_id]
    logs = [r for r in decoded.logs if r.trace_id == trace_id]
    kept = Decoded(spans=spans, logs=logs, span_count=len(spans), log_count=len(logs))
    kept.genai_span_count = sum(
        1 for s in spans if is_genai_candidate(s.name, s.attributes.keys(), s.scope_name)
    )
    return kept


def first_line(text: str | bytes, limit: int = 160) -> str:
    """A server's error body, shortened to something that fits in a one-line message."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    line = " ".join(text.strip().split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def join_url(base: str, *parts: str) -> str:
    """`base` (which may carry a path prefix, e.g. Jaeger's --query.base-path) + parts."""
    return "/".join([base.rstrip("/"), *(p.strip("/") for p in parts)])


def unique(values: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(values))
