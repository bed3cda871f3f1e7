"""Read OTLP JSON: the wire core's reader (`attest_otel_wire.JsonReader`, `json.rs`) parses the
text and walks it into `Span`s and `LogRecord`s in one pass, without a Python dict tree
(docs/measurements.md, "OTLP/JSON read by the wire core").

Both JSON dialects are read, per value, without a mode switch:

- OTLP/JSON as the OTLP spec writes it: hex ids, integer enums, lowerCamelCase keys, int64 as
  decimal strings (numbers accepted too);
- protobuf's own JSON mapping (`json_format.MessageToJson`): base64 ids, enum names
  (`SPAN_KIND_SERVER`, `STATUS_CODE_ERROR`), and snake_case keys (`resource_spans`, `trace_id`),
  which protobuf's parser accepts as well.

Ids are told apart by length (hex and base64 never share one). A key is looked up as
lowerCamelCase first, then as snake_case; an absent key and a proto3 default (0, "", [])
mean the same thing, so `a or b` is a safe fallback for everything but `boolValue`.

Parsing follows Python's `json` exactly: what it reads is read (NaN, Infinity, integers of any
size), what it refuses is refused, and its own message is asked for then (`refusal`). Unpaired
surrogate escapes become U+FFFD, counted. Nesting stops past 1024 levels.

Non-GenAI spans become skeletons exactly as in `otlp_proto`; their `source` is a
`JsonSpan`, the span's own text, which `hydrate` reads again. The helpers below read the rare
spellings whose meaning is a Python builtin's (`int()` of a string, `float()`, base64, an id
that is not plain hex, an enum by name): the reader hands them over, so they have one
definition.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from attest_otel_wire import JsonMarks, JsonReader, JsonReadError, JsonSpan

from attest_otel.adapt.generic import TRANSPORT_KEY_PREFIXES
from attest_otel.ingest import candidate
from attest_otel.ingest.candidate import is_genai_scope
from attest_otel.ingest.otlp_common import (
    SPAN_KIND_NAMES,
    STATUS_CODE_NAMES,
    MalformedOTLP,
    base64_to_bytes,
    text_id_to_hex,
)
from attest_otel.model import Event, LogRecord, Span

if tuple(f.name for f in dataclasses.fields(LogRecord)) != (
    "trace_id",
    "span_id",
    "event_name",
    "time_ns",
    "body",
    "attributes",
):  # pragma: no cover - a guard for whoever edits model.py
    raise ImportError("model.LogRecord fields changed: update json_walk.rs' LogRecord(...)")

__all__ = ["JsonReadError", "JsonSpan", "hydrate", "read_line", "read_text"]

# -- the rare spellings, read by Python's builtins ---------------------------------------------


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _int(value: Any, what: str) -> int:
    if type(value) is int:
        return value
    if type(value) is str:
        try:
            return int(value)
        except ValueError:
            pass
    elif type(value) is float and value.is_integer():
        return int(value)
    raise MalformedOTLP(f"{what} must be an integer, got {_shown(value)}")


_U64 = 2**64 - 1


def _time(value: Any, what: str) -> int:
    """A fixed64 time: an integer (or its decimal string) in the unsigned 64-bit range, as the
    protobuf wire can carry it; anything else is not OTLP (protobuf's parser refuses it too)."""
    found = _int(value, f"{what} time")
    if not 0 <= found <= _U64:
        raise MalformedOTLP(f"{what} time out of the unsigned 64-bit range: {_shown(value)}")
    return found


def _enum(value: Any, names: dict[str, int], what: str) -> int:
    if type(value) is int:
        return value
    if type(value) is str:
        found = names.get(value)
        if found is not None:
            return found
        if value.isdigit():
            return int(value)
    raise MalformedOTLP(f"unknown {what} {_shown(value)}")


def _int_of(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def _float_of(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _bytes_of(text: str) -> bytes | None:
    try:
        return base64_to_bytes(text)
    except ValueError:
        return None


READER = JsonReader(
    Span,
    Event,
    LogRecord,
    MalformedOTLP,
    _shown,
    text_id_to_hex,
    _time,
    _enum,
    _int_of,
    _float_of,
    _bytes_of,
    is_genai_scope,
    SPAN_KIND_NAMES,
    STATUS_CODE_NAMES,
)

_marks: tuple[tuple[tuple[str, ...], ...], JsonMarks] | None = None


def marks() -> JsonMarks:
    """`ingest.candidate`'s marks for the reader, made again when a dialect registers, and
    the generic reader's transport keys, which a skeleton notes (`JsonSpan.has_transport_key`)."""
    global _marks
    now = (
        candidate.GENAI_KEY_PREFIXES,
        candidate.GENAI_NAME_PREFIXES,
        candidate.GENAI_NAME_SUFFIXES,
        candidate.GENAI_EVENT_PREFIXES,
    )
    if _marks is None or _marks[0] != now:
        keys, names, suffixes, events = (list(group) for group in now)
        transports = list(TRANSPORT_KEY_PREFIXES)
        _marks = (now, JsonMarks(keys, names, suffixes, events, transports))
    return _marks[1]


# -- reading ----------------------------------------------------------------------------------

Read = tuple[list[Span], list[LogRecord], int, int, int, list[tuple[int | None, int]]]
"""(spans, log records, spans seen, GenAI spans, log records seen, [(line, strings mended)])."""


def read_text(data: bytes, lazy: bool) -> Read:
    """Every request of a whole OTLP/JSON text: one document, JSON lines (when its first line
    is a document of its own) or concatenated documents. Raises `JsonReadError`."""
    found: Read = READER.read_text(data, lazy, marks())
    return found


def read_line(data: bytes, lazy: bool, first: bool) -> Any:
    """One line of a JSON-lines file (`JsonReader.read_line`): None when blank."""
    return READER.read_line(data, lazy, marks(), first)


def hydrate(source: JsonSpan) -> tuple[dict[str, Any], list[Event]]:
    """A skeleton's attributes and events, from its `JsonSpan`. Raises `JsonReadError`."""
    found: tuple[dict[str, Any], list[Event]] = READER.hydrate(source, marks())
    return found


def loads(data: bytes) -> Any:
    """The value `json.loads` gives for `data`, read by the reader's parser (or its
    `JsonReadError`): for the tests that hold the parser to `json`."""
    return READER.loads(data)
