"""OTLP trace requests cut and joined at the protobuf wire level, without parsing spans.

The sidecar forwards most spans untouched and holds the rest per trace. Going through
parsed messages for that would cost a serialize per forwarded span and keep every request's
whole upb arena alive while one of its spans is held; slicing the request instead keeps each
held span as the bytes it came in, and a new request is just those slices re-framed
(docs/measurements.md, "Held spans as bytes").

Three facts of the encoding make this safe:

- An `ExportTraceServiceRequest` and a `TracesData` are the same message on the wire (field
  1, repeated `ResourceSpans`), and concatenating two encodings of a message with only
  repeated fields gives the encoding of their concatenation. So a held trace is a growing
  `bytearray` of `ResourceSpans` records, valid as a request at every record boundary.
- Every span is a length-delimited field 2 of its `ScopeSpans`: its bytes can be copied out
  with the tag and length, and re-framed under a copy of its resource and scope.
- Protobuf encoders write fields in field-number order, so a span's `trace_id` (field 1) is
  its first bytes; a span that does not start that way is scanned for the field.

The walks themselves are the wire core, `attest_otel_wire` (rust/attest_wire, issue 30):
they ran for every span of every request in Python, and were most of the receiving
process's CPU (docs/pipeline.md). This module is its Python face; the core is required, there
is no second implementation to drift from it.

Malformed framing raises `WireError`. What is inside a span (strings, nested values) is
checked once, before the sender gets its answer, by `check_message`, which judges the bytes
as protobuf's parser would (UTF-8 in string fields, nesting depth, wire types;
tests/fuzz/test_wire_differential.py holds it to upb's verdict). Slicing then works on bytes
known to be a valid message, so nothing is acknowledged that the next hop would refuse.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import attest_otel_wire as _core

from attest_otel.adapt import registry
from attest_otel.ingest import candidate
from attest_otel.ingest.candidate import is_genai_scope

__all__ = [
    "GENAI_KEY_BYTES",
    "DeclaredMarks",
    "ScopeGroup",
    "Substrings",
    "WireError",
    "append_to_spans",
    "check_message",
    "check_traces",
    "encode_groups",
    "encode_varint",
    "field_bytes",
    "is_genai_name",
    "iter_resource_spans",
    "plain_request",
    "span_links",
    "span_shapes",
    "split_log_records",
    "split_request",
    "split_to_size",
]

WireError = _core.WireError
"""The bytes are not a well-framed OTLP request (a `ValueError`)."""

encode_varint = _core.encode_varint
field_bytes = _core.field_bytes
"""One length-delimited field: tag byte, varint length, payload."""
span_links = _core.span_links
"""(raw span id, raw parent span id or b"") of a span record as `split_request` cuts it (the
field-2 record of its ScopeSpans, tag and length included); (b"", b"") when unreadable. The
buffer needs the trace's shape (which span hangs under which) to know when a run is
complete, without decoding attributes."""
span_trace_id = _core.span_trace_id
"""The raw trace id of the span encoded in data[start:end] (b"" when it has none)."""
encode_spans = _core.encode_spans
"""One ResourceSpans record (tag included) holding `spans` under the given origin."""
split_log_records = _core.split_logs
"""[(resource fields, scope fields, [(trace id, event name, log record, span id)])] of each
ScopeLogs of a logs request: the cut of `split_request`, for `log_wire.split_logs`. Raises
`WireError` when the framing is broken."""
encode_groups = _core.encode_groups
"""A request from ((resource fields, scope fields), span records) pairs."""
Substrings = _core.Substrings
"""Fixed byte strings to find in records (`any_in`), memchr's SIMD search."""


def check_message(data: bytes, message_type: Any) -> str | None:
    """Why `data` is not a valid encoding of `message_type` (a generated OTLP protobuf
    class: an export request or a *Data message), or None when it is one.

    The next hop parses what we forward with a protobuf library, and a request it cannot
    parse is refused for good there, after we acknowledged it: invalid UTF-8 in a string
    field, nesting deeper than the parser's limit (upb: 100 messages), a broken wire type.
    The core walks the bytes against the OTLP field table and builds nothing.
    """
    return _core.check(data, message_type.DESCRIPTOR.full_name)


GENAI_KEY_BYTES: _core.KeyFinder
"""Finds, in a span's (or a whole request's) bytes, an attribute (`4a <len> 0a <key len>
<key>`) whose key starts with one of the dialects' key prefixes (`adapt.registry`); `search`
answers True or None. A value that happens to look the same gives a false match, which only
means a trace is held that need not have been."""

NAME_PREFIXES: tuple[bytes, ...] = ()
NAME_SUFFIXES: tuple[bytes, ...] = ()
EVENT_PREFIXES: tuple[bytes, ...] = ()
"""A log record's event name starting with one of these may carry a run's content."""
_MARKS: _core.Marks


def _rebuild() -> None:
    """The byte tests, from the dialects' declarations (`adapt.registry`), rebuilt when a
    dialect registers: read them as `wire.GENAI_KEY_BYTES`, not a copy. `candidate`
    registered its watcher first, so its tables are current here."""
    global GENAI_KEY_BYTES, NAME_PREFIXES, NAME_SUFFIXES, EVENT_PREFIXES, _MARKS
    m = registry.markers()
    GENAI_KEY_BYTES = _core.KeyFinder.span_attribute_prefixes(p.encode() for p in m.key_prefixes)
    NAME_PREFIXES = tuple(p.encode() for p in m.name_prefixes)
    NAME_SUFFIXES = tuple(s.encode() for s in m.name_suffixes)
    EVENT_PREFIXES = tuple(e.encode() for e in m.event_prefixes)
    _MARKS = _core.Marks(
        (p.encode() for p in m.key_prefixes),
        (p.encode() for p in m.name_prefixes),
        (s.encode() for s in m.name_suffixes),
        (marker.encode() for marker in candidate.GENAI_SCOPE_MARKERS),
        (scope.encode() for scope in candidate.GENAI_SCOPES),
    )


registry.watch(_rebuild)


class DeclaredMarks:
    """The byte test for the user's declared dialects (a policy file's `dialects:`): a span
    that shows one of their attribute keys, scope names or span names may be theirs, so its
    trace is held for grading like a GenAI one (`DeclaredDialect.markers`)."""

    def __init__(self, keys: Iterable[str], scopes: Iterable[str], names: Iterable[str]) -> None:
        key_list = sorted(set(keys))
        self.keys = _core.KeyFinder.whole_keys(k.encode() for k in key_list) if key_list else None
        """An attribute key, whole: its length byte(s) before it and the value's tag after."""
        self.scopes = frozenset(scopes)
        self.names = tuple(n.encode() for n in set(names))
        self.any_name = b"" in self.names

    def scope(self, name: str) -> bool:
        return name in self.scopes

    def span(self, name: bytes, record: bytes) -> bool:
        if self.any_name or (self.names and name.startswith(self.names)):
            return True
        return self.keys is not None and self.keys.search(record) is not None


def is_genai_name(name: bytes) -> bool:
    """`candidate.is_genai_name` on the UTF-8 bytes (prefix tests agree byte for byte)."""
    return _MARKS.name(name)


SpanRef = tuple[bytes, bytes, bytes]
"""(raw trace id, span name as UTF-8 bytes, the span as a field-2 record of ScopeSpans)."""


@dataclass(slots=True)
class ScopeGroup:
    """The spans of one ScopeSpans, with the framing needed to send any subset of them.

    `resource_fields` is fields 1 and 3 of the ResourceSpans (resource, schema_url) and
    `scope_fields` fields 1 and 3 of the ScopeSpans (scope, schema_url), as encoded, so
    a subset of `spans` is re-framed by `encode_spans` without parsing either.
    """

    resource_fields: bytes
    scope_fields: bytes
    spans: list[SpanRef] = field(default_factory=list)

    @property
    def context(self) -> tuple[bytes, bytes]:
        return self.resource_fields, self.scope_fields

    def scope_name(self) -> str:
        """The instrumentation scope's name (parsed from the few bytes of the scope)."""
        return _core.scope_name(self.scope_fields)

    def is_genai_scope(self) -> bool:
        return bool(self.spans) and is_genai_scope(self.scope_name())


def iter_resource_spans(data: bytes) -> Iterator[tuple[int, int]]:
    """(start, end) of each ResourceSpans record (tag and length included) in a request."""
    return iter(_core.resource_spans(data))


def split_request(data: bytes) -> list[ScopeGroup]:
    """Every ScopeSpans of the request with its spans cut out (see `ScopeGroup`); the groups
    of one ResourceSpans share its fields' bytes object.

    Raises `WireError` when the framing is broken (truncated, bad tags, lengths past the
    end); the spans' insides are not checked.
    """
    return [ScopeGroup(res, scope, spans) for res, scope, spans in _core.split(data)]


def check_traces(data: bytes) -> tuple[str | None, tuple[int, set[bytes]] | None]:
    """`check_message` of an ExportTraceServiceRequest, and in the same walk the request
    path's plain test: (problem or None, (spans, raw trace ids) when valid and no span is
    marked GenAI, else None).

    Marked is `candidate.is_genai_candidate` as the parser sees the spans: a GenAI scope or
    span name, or a `Span.attributes` key with a GenAI prefix. The byte probes that answered
    this before (`GENAI_KEY_BYTES`, then `plain_request`) were two more passes over every
    byte, most of a plain span's cost (docs/measurements.md, "The wire core").
    """
    return _MARKS.check_plain(data)


def span_shapes(data: bytes) -> list[tuple[bytes, bytes, bool, bytes]]:
    """(raw span id, raw parent span id or b"", looks GenAI, span record) of every span of a
    request, in one walk: what the buffer reads of a held trace's new bytes. Looks GenAI by
    the request path's byte tests: a GenAI scope or span name, or a GenAI key in the span
    (`GENAI_KEY_BYTES`). Raises `WireError` on broken framing."""
    return _MARKS.shape(data, GENAI_KEY_BYTES)


def plain_request(data: bytes) -> tuple[int, set[bytes]] | None:
    """(spans, raw trace ids) of a request in which no scope is a GenAI scope and no span
    has a GenAI name; None when one is. The caller has checked that no GenAI attribute key
    occurs in the bytes (`GENAI_KEY_BYTES`).

    The same walk as `split_request` but nothing is cut out: a request the sidecar will
    forward as it came only needs its spans counted and its traces looked up.
    """
    return _MARKS.plain(data)


def append_to_spans(data: bytes, additions: Mapping[bytes, bytes]) -> tuple[bytes, int]:
    """`data` (a traces request) with `additions[span id]` appended to the encoding of each
    span it names (by raw span id), and how many spans changed.

    Appending fields is how the grade is written (`export.annotate.annotation_bytes`): a
    parser merges them into the span. Every other span keeps its bytes; only the lengths of
    the changed spans and of their ScopeSpans and ResourceSpans are framed anew.
    """
    if not additions:
        return data, 0
    return _core.append_to_spans(data, dict(additions))


def split_to_size(data: bytes, max_bytes: int) -> list[bytes]:
    """`data` cut into requests of at most `max_bytes` each, at span boundaries.

    Used when a downstream limit (gRPC's 4 MiB) is smaller than what was accepted (HTTP's
    20 MiB). A single span larger than `max_bytes` goes alone: the downstream decides.
    """
    if len(data) <= max_bytes:
        return [data]
    return _core.split_to_size(data, max_bytes)


def fields(
    data: bytes, start: int = 0, end: int | None = None
) -> list[tuple[int, int, int, int, int]]:
    """(field number, wire type, tag start, value start, value end) of each field of
    data[start:end]. Raises `WireError` on broken framing."""
    return _core.fields(data, start, end)
