"""OTLP protobuf requests decoded into `Span`s and `LogRecord`s by the wire core.

The walk is compiled (`attest_otel_wire.Decoder`, rust/attest_wire/src/decode/, issue
30): upb's parse and a Python walk over it cost the grading process several microseconds
per span, most of it in Python objects made for fields that were read once
(docs/measurements.md, "Decoding in the wire core"). The core reads the bytes once and makes
only the objects the stages after ingest read.

What it decodes: every span becomes a `Span`, but only GenAI candidates (the dialects'
declared markers, `ingest.candidate`) get attributes and events; the others are skeletons
whose `source`, a `SpanSource` over the request's bytes, decodes them on demand
(`content`, through `decode.hydrate`). Log records are kept only when they look GenAI.

The bytes must be a valid encoding first (`check_traces`, `check_logs`: upb's verdict, the
wire core's validator), so the decoder meets neither invalid UTF-8 nor nesting beyond
upb's limit; what is valid protobuf but not valid OTLP (an id of the wrong length) is a
`MalformedOTLP` naming where it is.
"""

from __future__ import annotations

import attest_otel_wire as _core

from attest_otel.adapt import registry
from attest_otel.ingest import candidate
from attest_otel.ingest.otlp_common import MalformedOTLP
from attest_otel.model import Event, LogRecord, Span

__all__ = [
    "SpanSource",
    "check_logs",
    "check_traces",
    "content",
    "decode_logs",
    "decode_traces",
    "looks_like_logs",
    "outline",
]

TRACES_REQUEST = "opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest"
LOGS_REQUEST = "opentelemetry.proto.collector.logs.v1.ExportLogsServiceRequest"

SpanSource = _core.SpanSource
"""A span's origin in the request's bytes: `pending` (attributes or events not decoded yet),
`record()` (the span's encoding). Equal when the encodings are; picklable."""

outline = _core.Decoder.traces_outline
"""(ResourceSpans in a traces request, the first span's trace id length or -1)."""
looks_like_logs = _core.Decoder.looks_like_logs
"""Whether the first log record of a logs request holds anything a log record has."""

_DECODER: _core.Decoder


def _rebuild() -> None:
    """The decoder with the dialects' markers (`candidate`'s tables, rebuilt before this:
    it registered its watcher first)."""
    global _DECODER
    m = registry.markers()
    _DECODER = _core.Decoder(
        Span,
        Event,
        LogRecord,
        [p.encode() for p in m.key_prefixes],
        [p.encode() for p in m.name_prefixes],
        [s.encode() for s in m.name_suffixes],
        [marker.encode() for marker in candidate.GENAI_SCOPE_MARKERS],
        [scope.encode() for scope in candidate.GENAI_SCOPES],
        [e.encode() for e in m.event_prefixes],
    )


registry.watch(_rebuild)


def check_traces(data: bytes) -> str | None:
    """Why `data` is not a valid ExportTraceServiceRequest as upb would judge it, or None."""
    return _core.check(data, TRACES_REQUEST)


def check_logs(data: bytes) -> str | None:
    """Why `data` is not a valid ExportLogsServiceRequest as upb would judge it, or None."""
    return _core.check(data, LOGS_REQUEST)


def decode_traces(data: bytes, out: list[Span], *, lazy: bool) -> tuple[int, int]:
    """Append one `Span` per span of the (valid) traces request `data` to `out`; return
    (spans seen, spans decoded in full)."""
    try:
        spans, seen, genai = _DECODER.traces(data, lazy)
    except _core.OtlpError as exc:
        problem, where, _ = exc.args
        raise MalformedOTLP(problem, where) from None
    out += spans
    return seen, genai


def decode_logs(data: bytes, out: list[LogRecord], *, lazy: bool) -> tuple[int, int]:
    """Append the GenAI log records of the (valid) logs request `data` to `out` (all of them
    if not `lazy`); return (records seen, records kept). The event name comes from the
    `event_name` field, else from the `event.name` attribute."""
    try:
        records, seen, kept = _DECODER.logs(data, lazy)
    except _core.OtlpError as exc:
        problem, where, _ = exc.args
        raise MalformedOTLP(problem, where) from None
    out += records
    return seen, kept


def content(source: _core.SpanSource) -> tuple[dict[str, object], list[Event]]:
    """A span's attributes and events, decoded from its source."""
    attributes, events = _DECODER.content(source)
    return attributes, events
