"""OTLP traces (and GenAI log events) from files, bytes and gRPC requests -> `Span`s.

Inputs understood, detected from the bytes (never from a file name):

- gzip (magic `1f 8b`, several members allowed), inflated with a bound (`max_inflated_bytes`);
- binary protobuf: one `ExportTraceServiceRequest`, or a sequence of 4-byte big-endian
  length-prefixed requests as the Collector's file exporter writes with `format: proto`.
  A binary logs request (`ExportLogsServiceRequest`) is recognised too;
- JSON: OTLP/JSON as the spec writes it *and* protobuf's JSON mapping, per value (see
  `otlp_json`); one document, several concatenated documents (pretty-printed or not), or JSON
  lines with one request per line as the Collector's file exporter writes (traces and logs
  lines mixed; metrics and profiles lines skipped). A top-level array holds requests.

Laziness. Every span seen becomes a `Span` in `Decoded.spans` (the run assembler needs the
whole trace's parent links, through non-GenAI spans too), but only GenAI candidates
(`candidate.is_genai_candidate`: name, attribute-key prefixes, scope) get attributes and events.
The rest are *skeletons*: ids, parent, name, times, kind, status, resource, scope and `source`,
with an empty attribute dict and event list. `is_skeleton(span)` tells them apart and
`hydrate(span)` fills them in from `source` when someone does need them. Pass `lazy=False` to
decode everything. Log records are kept only when they look GenAI (`candidate.is_genai_log`).

Resource attributes are decoded once per resource; its spans share the same dict object (do not
mutate it). `Span.source` is a `SpanSource` over the request's bytes for protobuf input
(`otlp_proto`: the wire core decodes protobuf) and, for JSON, a `JsonSpan` (the span's
text, `otlp_json`).

Errors are `InputError`s with one line: source, line (JSON) and what is wrong. Nothing else
escapes for any input: deep nesting, numbers too long for `int`, invalid UTF-8 all become
`InputError`s. Hostile but readable input is decided, counted on `Decoded` and logged rather
than refused (see `sanitize`): strings longer than `max_attribute_chars` are cut with a marker,
unpaired surrogates in JSON strings become U+FFFD.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path

from attest_otel_wire import WireError, read_varint
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from attest_otel.errors import InputError
from attest_otel.ingest import otlp_json, otlp_proto
from attest_otel.ingest.candidate import is_genai_candidate
from attest_otel.ingest.gzip import GZIP_MAGIC, gunzip
from attest_otel.ingest.otlp_common import MalformedOTLP
from attest_otel.ingest.otlp_json import JsonReadError, JsonSpan
from attest_otel.ingest.sanitize import (
    DEFAULT_MAX_ATTRIBUTE_CHARS,
    json_problem,
    truncate_decoded,
    truncate_span,
)
from attest_otel.model import LogRecord, Span

logger = logging.getLogger(__name__)

DEFAULT_MAX_INFLATED_BYTES = 256 * 1024 * 1024
"""Gzip input that inflates beyond this is refused (a gzip bomb must not take the memory)."""

CONTENT_TYPE_PROTOBUF = "application/x-protobuf"
CONTENT_TYPE_JSON = "application/json"

_WHITESPACE_BYTES = frozenset(b" \t\r\n")
_BOM = b"\xef\xbb\xbf"
_decoder = json.JSONDecoder()
_WALKER_ERRORS = (
    AttributeError,
    IndexError,
    KeyError,
    OverflowError,
    TypeError,
    UnicodeError,
    ValueError,
)
"""What a walker raises if a malformed value slipped past its checks: still bad input, so an
`InputError`, but logged as an error with the traceback since the walker should have said."""

__all__ = [
    "CONTENT_TYPE_JSON",
    "CONTENT_TYPE_PROTOBUF",
    "DEFAULT_MAX_ATTRIBUTE_CHARS",
    "DEFAULT_MAX_INFLATED_BYTES",
    "Decoded",
    "decode_bytes",
    "decode_file",
    "decode_request",
    "hydrate",
    "is_genai_candidate",
    "is_skeleton",
    "transport_skeleton",
]


@dataclass(slots=True)
class Decoded:
    """What one file, body or request held."""

    spans: list[Span] = field(default_factory=list)
    """Every span, in input order; non-GenAI ones as skeletons (see the module docstring)."""
    logs: list[LogRecord] = field(default_factory=list)
    """GenAI log records (event name or attribute keys look GenAI), in input order."""
    span_count: int = 0
    """All spans seen (equals `len(spans)`)."""
    genai_span_count: int = 0
    """Spans decoded in full because they may be GenAI."""
    log_count: int = 0
    """All log records seen, kept or not."""
    truncated_values: int = 0
    """Strings cut to `max_attribute_chars`, a marker appended (see `sanitize`)."""
    invalid_unicode: int = 0
    """JSON strings that held unpaired UTF-16 surrogates, each replaced by U+FFFD."""

    def by_trace(self) -> dict[str, list[Span]]:
        """Trace id (hex) -> its spans in input order; traces in order of first appearance."""
        out: dict[str, list[Span]] = {}
        for span in self.spans:
            found = out.get(span.trace_id)
            if found is None:
                out[span.trace_id] = [span]
            else:
                found.append(span)
        return out


# -- public entry points ---------------------------------------------------------------------


def decode_file(
    path: str | PathLike[str],
    *,
    max_inflated_bytes: int = DEFAULT_MAX_INFLATED_BYTES,
    lazy: bool = True,
    max_attribute_chars: int | None = DEFAULT_MAX_ATTRIBUTE_CHARS,
) -> Decoded:
    """Decode an OTLP file (protobuf or JSON, JSON lines, gzip or not: sniffed from the bytes)."""
    source = str(path)
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise InputError(source, f"cannot read: {exc.strerror or exc}") from None
    return decode_bytes(
        data,
        source=source,
        max_inflated_bytes=max_inflated_bytes,
        lazy=lazy,
        max_attribute_chars=max_attribute_chars,
    )


def decode_bytes(
    data: bytes,
    content_type: str | None = None,
    *,
    source: str = "<bytes>",
    max_inflated_bytes: int = DEFAULT_MAX_INFLATED_BYTES,
    lazy: bool = True,
    max_attribute_chars: int | None = DEFAULT_MAX_ATTRIBUTE_CHARS,
) -> Decoded:
    """Decode an OTLP body. `content_type` ("application/x-protobuf" or "application/json",
    parameters allowed) settles the encoding when known; otherwise, and for any other value,
    it is sniffed: `{` or `[` first (after whitespace) -> JSON, else protobuf. Gzip is always
    recognised by its magic bytes and inflated up to `max_inflated_bytes`. `source` names the
    input in error messages. Strings longer than `max_attribute_chars` are cut with a marker
    (None or 0: no limit)."""
    data = bytes(data)  # memoryview / bytearray from a receiver
    if data[:2] == GZIP_MAGIC:
        data = gunzip(data, source, max_inflated_bytes)
    out = Decoded()
    encoding = _encoding(content_type)
    if encoding is None:
        sniffed = _sniff_json(data)
        if sniffed is None:
            _decode_protobuf(data, source, out, lazy, sniffed=True)
        elif sniffed == "either":
            out = _json_or_protobuf(data, source, lazy)
        else:
            _decode_json(data, source, out, lazy)
    elif encoding == "json":
        _decode_json(data, source, out, lazy)
    else:
        _decode_protobuf(data, source, out, lazy, sniffed=False)
    # A string of n characters takes at least n bytes of input (UTF-8, JSON escapes and
    # base64 only add), so a body no longer than the limit has nothing to cut: skip the walk
    # over every value, a quarter of the cost of decoding GenAI-heavy protobuf.
    if max_attribute_chars and len(data) > max_attribute_chars:
        _limit_strings(out, source, max_attribute_chars)
    return out


def decode_request(
    req: ExportTraceServiceRequest | ExportLogsServiceRequest | bytes,
    *,
    source: str = "<request>",
    lazy: bool = True,
    data: bytes | None = None,
    max_attribute_chars: int | None = DEFAULT_MAX_ATTRIBUTE_CHARS,
    logs: bool = False,
    checked: bool = False,
) -> Decoded:
    """Decode one export request: its bytes (a traces request, or a logs request with
    `logs`), or a parsed request message (traces or logs).

    The bytes are what is decoded (`otlp_proto`, the wire core): for a message, `data`, the
    exact bytes it was parsed from, saves serialising it again. Bytes that are not a valid
    encoding are an `InputError` as in `decode_bytes`; `checked` says they were judged valid
    already (the sidecar validates every request before it acknowledges it, and a held trace
    is made of such requests' spans), which saves a third of a plain span's decode
    (docs/measurements.md, "Decoding in the wire core"): the decoder then still refuses what
    it cannot read, without naming upb's reason. Strings longer than `max_attribute_chars`
    are cut (none can be when the bytes are no longer than that).
    """
    if isinstance(req, bytes | bytearray | memoryview):
        data = bytes(req)
    else:
        logs = isinstance(req, ExportLogsServiceRequest)
        if data is None:
            data = req.SerializeToString()
    out = Decoded()
    problem = None
    if not checked:
        problem = otlp_proto.check_logs(data) if logs else otlp_proto.check_traces(data)
    if problem is not None:
        raise InputError(source, _protobuf_problem(data, False, problem))
    try:
        if logs:
            out.log_count, _ = otlp_proto.decode_logs(data, out.logs, lazy=lazy)
        else:
            out.span_count, out.genai_span_count = otlp_proto.decode_traces(
                data, out.spans, lazy=lazy
            )
    except MalformedOTLP as exc:
        raise InputError(source, str(exc)) from None
    except RecursionError:
        raise InputError(source, "attribute values nested too deeply") from None
    except _WALKER_ERRORS as exc:
        raise _walker_failed(source, None, "", exc) from None
    if max_attribute_chars and len(data) > max_attribute_chars:
        _limit_strings(out, source, max_attribute_chars)  # see decode_bytes for the test
    return out


def is_skeleton(span: Span) -> bool:
    """Whether `span` was decoded lazily and has attributes or events left in its `source`."""
    if span.attributes or span.events:
        return False
    src = span.source
    if isinstance(src, JsonSpan):
        return src.has_content
    if isinstance(src, otlp_proto.SpanSource):
        return src.pending
    return False


def transport_skeleton(span: Span) -> bool:
    """Whether `span` is a skeleton whose attribute keys, as the reader scanned them, include
    a transport key (`adapt.generic.TRANSPORT_KEY_PREFIXES`): the generic reader says None of
    such a span whatever its values, so it need not be hydrated to be read. Only the JSON
    reader notes it; any other skeleton answers False."""
    src = span.source
    return (
        type(src) is JsonSpan and src.has_transport_key and not span.attributes and not span.events
    )


def hydrate(span: Span, *, max_attribute_chars: int | None = DEFAULT_MAX_ATTRIBUTE_CHARS) -> Span:
    """Fill a skeleton's attributes and events from its `source` (in place; returns it),
    cutting strings longer than `max_attribute_chars` as the decoders do."""
    if not is_skeleton(span):
        return span
    src = span.source
    try:
        if isinstance(src, JsonSpan):
            span.attributes, span.events = otlp_json.hydrate(src)
        else:
            span.attributes, span.events = otlp_proto.content(src)
    except (MalformedOTLP, JsonReadError) as exc:
        problem = exc.args[1] if isinstance(exc, JsonReadError) else str(exc)
        raise InputError(f"span {span.span_id}", problem) from None
    except RecursionError:
        raise InputError(f"span {span.span_id}", "attribute values nested too deeply") from None
    except _WALKER_ERRORS as exc:
        raise _walker_failed(f"span {span.span_id}", None, "", exc) from None
    if isinstance(src, JsonSpan) and (
        not max_attribute_chars or len(src.text) <= max_attribute_chars
    ):
        return span  # a string takes at least its length of the span's text: none to cut
    cut = truncate_span(span, max_attribute_chars)
    if cut:
        logger.warning(
            "span %s: %d strings longer than %d chars truncated (max_attribute_chars)",
            span.span_id,
            cut,
            max_attribute_chars,
        )
    return span


def _limit_strings(out: Decoded, source: str, limit: int | None) -> None:
    cut = truncate_decoded(out.spans, out.logs, limit)
    if cut:
        out.truncated_values += cut
        logger.warning(
            "%s: %d strings longer than %d chars truncated (max_attribute_chars)",
            source,
            cut,
            limit,
        )


def _walker_failed(source: str, line: int | None, where: str, exc: Exception) -> InputError:
    logger.error(
        "%s: malformed input the OTLP walker did not check (%s)",
        source,
        type(exc).__name__,
        exc_info=exc,
    )
    return InputError(source, f"{where}malformed OTLP ({type(exc).__name__}: {exc})", line=line)


# -- JSON -------------------------------------------------------------------------------------


def _encoding(content_type: str | None) -> str | None:
    """The encoding a Content-Type header value names ("json" or "protobuf"), or None: sniff."""
    if not content_type:
        return None
    media = content_type.split(";", 1)[0].strip().lower()
    if media in ("application/x-protobuf", "application/protobuf"):
        return "protobuf"
    if media == "application/json" or media.endswith("+json"):
        return "json"
    return None


def _sniff_json(data: bytes) -> str | None:
    """ "json" when `data` is JSON, None for protobuf, "either" when only parsing can tell.

    JSON starts with `{` or `[`, maybe after whitespace or a byte order mark. Every OTLP
    protobuf request starts with 0x0A, a newline, so a leading newline alone proves nothing:
    protobuf bytes (random ids) are practically never valid UTF-8, JSON always is.
    """
    pos, size = 0, len(data)
    if data[:3] == _BOM:
        pos = 3
    while pos < size and data[pos] in _WHITESPACE_BYTES:
        pos += 1
    if pos < size and data[pos] not in b"{[":
        return None
    if data[:1] == b"\n":
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            return None
        return "either"
    return "json"


def _json_or_protobuf(data: bytes, source: str, lazy: bool) -> Decoded:
    """A UTF-8 body that starts with a newline and then `{` or `[`: JSON after a blank line,
    or protobuf whose first field (tag 0x0A) is 91 or 123 bytes long and holds no random ids
    (a request with resource attributes but no spans is all text). JSON first; if that fails
    and the bytes parse as protobuf, protobuf; else the JSON error."""
    out = Decoded()
    try:
        _decode_json(data, source, out, lazy)
    except InputError as json_error:
        out = Decoded()
        try:
            _decode_protobuf(data, source, out, lazy, sniffed=True)
        except InputError:
            raise json_error from None
    return out


def _utf8(data: bytes, source: str) -> str:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(source, f"not UTF-8 text (byte {exc.start})") from None
    return text[1:] if text.startswith("\ufeff") else text


def _decode_json(data: bytes, source: str, out: Decoded, lazy: bool) -> None:
    """The requests of an OTLP/JSON text (one document, JSON lines or concatenated documents,
    told apart by `otlp_json.read_text`) into `out`."""
    try:
        spans, logs, seen, genai, log_count, mended = otlp_json.read_text(data, lazy)
    except JsonReadError as exc:
        raise json_refusal(exc, source, data) from None
    out.spans += spans
    out.logs += logs
    out.span_count += seen
    out.genai_span_count += genai
    out.log_count += log_count
    for line, count in mended:
        note_mended(out, source, line, count)


def note_mended(out: Decoded, source: str, line: int | None, count: int) -> None:
    """Strings of one document that held unpaired UTF-16 surrogates, now U+FFFD: counted and
    said (see `sanitize`)."""
    out.invalid_unicode += count
    logger.warning(
        "%s%s: %d strings held unpaired UTF-16 surrogates, replaced by U+FFFD",
        source,
        "" if line is None else f":{line}",
        count,
    )


def json_refusal(exc: JsonReadError, source: str, data: bytes) -> InputError:
    """The one-line `InputError` for what the reader refused in `data` (a whole text, or one
    line): for JSON it refused, `json`'s own message, asked of `json` now (error path only)."""
    kind, message, line, detail = exc.args
    if kind == "utf8":
        return InputError(source, f"not UTF-8 text (byte {detail})")
    if kind in ("otlp", "input"):
        return InputError(source, message, line=line)
    if kind == "walker":
        if isinstance(detail, RecursionError):
            return InputError(source, "attribute values nested too deeply", line=line)
        return _walker_failed(source, line, "", detail)
    raw = data[3:] if data[:3] == _BOM else data
    how, start, end, too_deep = detail if len(detail) == 4 else (*detail[:2], None, detail[2])
    fallback = "nested too deeply (arrays or objects inside each other)" if too_deep else "syntax"
    try:
        if how == "doc":
            text = raw.decode("utf-8")
            _decoder.raw_decode(text, len(raw[:start].decode("utf-8")))
        else:
            json.loads(raw[start:end].decode("utf-8") if end is not None else raw.decode("utf-8"))
    except json.JSONDecodeError as err:
        if how == "doc":
            return InputError(
                source, f"invalid JSON at column {err.colno}: {err.msg}", line=err.lineno
            )
        return InputError(source, json_problem(err), line=line)
    except (ValueError, RecursionError) as err:
        return InputError(source, json_problem(err), line=line)
    return InputError(source, f"invalid JSON: {fallback}", line=line)


# -- protobuf ---------------------------------------------------------------------------------


def _decode_protobuf(data: bytes, source: str, out: Decoded, lazy: bool, *, sniffed: bool) -> None:
    if not data:
        return  # an empty request is a valid one
    if data[0] != 0:  # a message starts with a field tag, never 0
        _protobuf_message(data, source, "", out, lazy, sniffed)
        return
    # Length-prefixed messages (Collector file exporter, `format: proto`).
    pos, index, size = 0, 0, len(data)
    while pos < size:
        index += 1
        where = f"message {index} at byte {pos}: "
        if size - pos < 4:
            raise InputError(source, where + "truncated length prefix")
        length = int.from_bytes(data[pos : pos + 4], "big")
        pos += 4
        if length > size - pos:
            raise InputError(
                source,
                where + f"truncated protobuf (needs {length} bytes, {size - pos} left)",
            )
        _protobuf_message(data[pos : pos + length], source, where, out, lazy, sniffed)
        pos += length


def _protobuf_message(
    data: bytes, source: str, where: str, out: Decoded, lazy: bool, sniffed: bool
) -> None:
    problem = otlp_proto.check_traces(data)
    if problem is not None:
        if not _is_logs(data):  # not a logs request read by luck
            raise InputError(source, where + _protobuf_problem(data, sniffed, problem))
        _walk_proto_logs(data, source, where, out, lazy)
        return
    resources, first_trace_id = otlp_proto.outline(data)
    if not resources:  # a logs request has none either: the same field number
        raise InputError(
            source,
            where
            + f"not OTLP: no resourceSpans in {len(data)} bytes of protobuf"
            + _text_hint(data),
        )
    if first_trace_id not in (-1, 16) and _is_logs(data):
        # Same field numbers as a logs request: a LogRecord read as a Span has no trace id
        # (its body, field 5, reads as the span's name). Not a valid span either way.
        _walk_proto_logs(data, source, where, out, lazy)
        return
    try:
        seen, genai = otlp_proto.decode_traces(data, out.spans, lazy=lazy)
    except MalformedOTLP as exc:
        raise InputError(source, where + str(exc)) from None
    except RecursionError:
        raise InputError(source, where + "attribute values nested too deeply") from None
    except _WALKER_ERRORS as exc:
        raise _walker_failed(source, None, where, exc) from None
    out.span_count += seen
    out.genai_span_count += genai


def _is_logs(data: bytes) -> bool:
    """Whether `data` is a valid logs request whose first record looks like one."""
    return otlp_proto.check_logs(data) is None and otlp_proto.looks_like_logs(data)


def _walk_proto_logs(data: bytes, source: str, where: str, out: Decoded, lazy: bool) -> None:
    try:
        seen, _ = otlp_proto.decode_logs(data, out.logs, lazy=lazy)
    except MalformedOTLP as exc:
        raise InputError(source, where + str(exc)) from None
    except RecursionError:
        raise InputError(source, where + "attribute values nested too deeply") from None
    except _WALKER_ERRORS as exc:
        raise _walker_failed(source, None, where, exc) from None
    out.log_count += seen


def _protobuf_problem(data: bytes, sniffed: bool, error: str | None = None) -> str:
    """Why `data` is not a protobuf message, from the validator's verdict (`error`) and the
    top-level wire format (error path only)."""
    if error is not None and "UTF-8" in error:
        return "invalid protobuf: a string field holds invalid UTF-8"
    if error is not None and "nested too deeply" in error:
        return "invalid protobuf: messages nested too deeply (attribute values, most likely)"
    pos, size = 0, len(data)
    while pos < size:
        start = pos
        tag, pos = _varint(data, pos)
        if tag < 0:
            return "truncated protobuf (field tag cut off)"
        field_number, wire_type = tag >> 3, tag & 7
        if field_number == 0 or wire_type in (3, 4, 6, 7):
            hint = _text_hint(data) or f" (bad field tag at byte {start})"
            what = "neither JSON nor protobuf" if sniffed else "not protobuf"
            return f"not OTLP: {what}{hint}"
        if wire_type == 0:
            _, pos = _varint(data, pos)
            if pos < 0:
                return "truncated protobuf (varint cut off)"
        elif wire_type == 1:
            pos += 8
        elif wire_type == 5:
            pos += 4
        else:
            length, pos = _varint(data, pos)
            if length < 0:
                return "truncated protobuf (length cut off)"
            if pos + length > size:
                return (
                    f"truncated protobuf (field {field_number} at byte {start} needs "
                    f"{length} bytes, {size - pos} left)"
                )
            pos += length
        if pos > size:
            return "truncated protobuf (fixed-size field cut off)"
    return "invalid protobuf: not an ExportTraceServiceRequest"


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """(value, next position), or (-1, -1) if the varint runs off the end (the wire core's
    reader)."""
    try:
        return read_varint(data, pos)
    except WireError:
        return -1, -1


def _text_hint(data: bytes) -> str:
    head = data[:40]
    if head and all(32 <= b < 127 or b in (9, 10, 13) for b in head):
        return f" (starts with {head.decode('ascii')!r})"
    return ""
