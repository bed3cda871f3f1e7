"""Big OTLP files read one request at a time, and handed on one trace at a time.

`decode_file` holds the file's bytes, its text and every decoded span at once: a 200 MB file of
JSON lines took over a gigabyte (docs/measurements.md, "Big files"). The Collector's file
exporter writes one request per line (or, `format: proto`, length-prefixed protobuf), so such
a file can be read a request at a time (`iter_file`, the one place a faster decoder plugs in),
and graded a trace at a time (`ByTrace`).

A trace's spans may be anywhere in the file (a batch flushed in the middle of a trace), so no
trace is known to be whole before the end of the file. `ByTrace` holds the spans of the
traces it has seen up to a bound (`DEFAULT_HOLD` spans and log records); past it, the traces
held longest go to an unnamed temporary file (pickled, since nothing else reads it) and come
back, one trace at a time, in order of first appearance when the file has been read. Every
trace so gets exactly the spans and log records it would get from `decode_file`, in the same
order.

Gzip is inflated as it is read (`Inflate`). Formats that cannot be read a request at a time
(one JSON document, concatenated or pretty-printed documents, a single protobuf message) are
decoded whole, as before; so is any file whose start leaves the format in doubt (see
`_sniff`), and a file that cannot seek (a pipe). Errors are the same
one-line `InputError`s as `decode_file` gives, with the line or message number. A file
broken in two ways may name a different one of its faults first: `decode_file` inflates the
whole file and checks it is UTF-8 before it parses a line; this reads line by line.
"""

from __future__ import annotations

import io
import logging
import pickle
import tempfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import fields
from operator import attrgetter
from os import PathLike
from typing import IO, Any

from attest_otel.errors import InputError
from attest_otel.ingest import decode, otlp_json
from attest_otel.ingest.candidate import is_genai_candidate
from attest_otel.ingest.decode import (
    DEFAULT_MAX_ATTRIBUTE_CHARS,
    DEFAULT_MAX_INFLATED_BYTES,
    Decoded,
)
from attest_otel.ingest.gzip import GZIP_MAGIC, InflatesTooFar
from attest_otel.ingest.otlp_json import JsonReadError
from attest_otel.ingest.sanitize import truncate_decoded
from attest_otel.model import LogRecord, Span

__all__ = ["DEFAULT_HOLD", "ByTrace", "iter_file"]

logger = logging.getLogger(__name__)

DEFAULT_HOLD = 20_000
"""Spans and log records `ByTrace` holds in memory before it writes traces to disk."""

_PEEK = 64 * 1024
_OUT = 1024 * 1024
"""Inflated bytes asked of `Inflate` at a time: more than a slice of input (`_MAX_IN`)
usually inflates to, so zlib seldom keeps an unconsumed tail to copy again."""
_FIRST_IN, _MAX_IN = 1024, 64 * 1024
_BOM = b"\xef\xbb\xbf"


def iter_file(
    path: str | PathLike[str],
    *,
    max_inflated_bytes: int = DEFAULT_MAX_INFLATED_BYTES,
    lazy: bool = True,
    max_attribute_chars: int | None = DEFAULT_MAX_ATTRIBUTE_CHARS,
) -> Iterator[Decoded]:
    """What each request of an OTLP file held, request by request, as `decode_file` decodes
    it; a file that cannot be read so comes as one `Decoded` for the whole file."""
    source = str(path)
    try:
        file = open(path, "rb")  # noqa: SIM115 - closed by the generator's `with`
    except OSError as exc:
        raise InputError(source, f"cannot read: {exc.strerror or exc}") from None
    with file:
        try:
            head = file.read(_PEEK)
        except OSError as exc:
            raise InputError(source, f"cannot read: {exc.strerror or exc}") from None
        if not file.seekable():  # a pipe (`--file <(zcat ...)`): read whole, as before
            try:
                data = head + file.read()
            except OSError as exc:
                raise InputError(source, f"cannot read: {exc.strerror or exc}") from None
            yield decode.decode_bytes(
                data,
                source=source,
                max_inflated_bytes=max_inflated_bytes,
                lazy=lazy,
                max_attribute_chars=max_attribute_chars,
            )
            return
        file.seek(0)
        reader: IO[bytes] = file
        if head[:2] == GZIP_MAGIC:
            reader = io.BufferedReader(Inflate(file, source, max_inflated_bytes), _OUT)
            head = reader.peek(_PEEK)
        kind = _sniff(head)
        cut = _Cut(source, max_attribute_chars)

        def whole() -> Iterator[Decoded]:
            yield decode.decode_file(
                path,
                max_inflated_bytes=max_inflated_bytes,
                lazy=lazy,
                max_attribute_chars=max_attribute_chars,
            )

        if kind == "lines":
            requests = _json_lines(reader, source, lazy, cut, whole)
        elif kind == "prefixed":
            requests = _prefixed(reader, source, lazy, cut)
        else:
            requests = whole()
        try:
            yield from requests
        except OSError as exc:
            raise InputError(source, f"cannot read: {exc.strerror or exc}") from None
        cut.report()


def _sniff(head: bytes) -> str:
    """ "lines" (JSON that starts with `{` or `[`), "prefixed" (length-prefixed protobuf)
    or "whole". Whether JSON is JSON lines is settled by its first line (`_json_lines`)."""
    if not head:
        return "whole"
    body = head[3:] if head.startswith(_BOM) else head
    if body[:1] in (b"{", b"["):
        return "lines"
    if head[0] == 0:
        return "prefixed"
    return "whole"


class _Cut:
    """Strings cut to `max_attribute_chars`, counted per request and said once per file,
    as `decode_file` says it."""

    def __init__(self, source: str, limit: int | None) -> None:
        self.source, self.limit, self.count = source, limit, 0

    def __call__(self, out: Decoded, size: int) -> None:
        if self.limit and size > self.limit:  # see decode.decode_bytes for the test
            cut = truncate_decoded(out.spans, out.logs, self.limit)
            out.truncated_values += cut
            self.count += cut

    def report(self) -> None:
        if self.count:
            logger.warning(
                "%s: %d strings longer than %d chars truncated (max_attribute_chars)",
                self.source,
                self.count,
                self.limit,
            )


def _json_lines(
    file: IO[bytes],
    source: str,
    lazy: bool,
    cut: _Cut,
    whole: Callable[[], Iterator[Decoded]],
) -> Iterator[Decoded]:
    """A request a line, each read by the wire core (`otlp_json.read_line`) straight from its
    bytes. A line's refusal is handed back by the reader and raised here, so a file's faults
    come in the order `decode_file` meets them: the next line's invalid UTF-8 before this
    line's invalid OTLP."""
    lines = _lines(file, source, lazy)
    first = next(lines, None)
    if first is None:
        return
    if first[2][6] is not None and first[2][6][0] == "json":
        yield from whole()  # the first line is not a JSON document of its own
        return
    second = next(lines, None)
    # One document alone in the file: `decode_file` names no line in its errors.
    yield _json_request(first, source, first[0] if second is not None else None, cut)
    while second is not None:
        yield _json_request(second, source, second[0], cut)
        second = next(lines, None)


Line = tuple[int, bytes, Any]
"""(line number, its bytes, what `otlp_json.read_line` read of them)."""


def _lines(file: IO[bytes], source: str, lazy: bool) -> Iterator[Line]:
    """Each line that is not blank, read."""
    offset = 0
    for number, raw in enumerate(file, start=1):
        try:
            found = otlp_json.read_line(raw, lazy, number == 1)
        except JsonReadError as exc:
            raise InputError(source, f"not UTF-8 text (byte {offset + exc.args[3]})") from None
        offset += len(raw)
        if found is not None:
            yield number, raw, found


def _json_request(read: Line, source: str, line: int | None, cut: _Cut) -> Decoded:
    _, raw, (spans, logs, seen, genai, log_count, mended, refused) = read
    if refused is not None:
        kind, message, _, detail = refused
        text = raw[:-1] if raw.endswith(b"\n") else raw  # as the reader read it
        raise decode.json_refusal(JsonReadError(kind, message, line, detail), source, text)
    out = Decoded(spans, logs, seen, genai, log_count)
    if mended:
        decode.note_mended(out, source, line, mended)
    cut(out, len(raw))
    return out


def _prefixed(file: IO[bytes], source: str, lazy: bool, cut: _Cut) -> Iterator[Decoded]:
    """Length-prefixed protobuf requests (the Collector's file exporter, `format: proto`)."""
    pos, index = 0, 0
    while True:
        prefix = file.read(4)
        if not prefix:
            return
        index += 1
        where = f"message {index} at byte {pos}: "
        if len(prefix) < 4:
            raise InputError(source, where + "truncated length prefix")
        length = int.from_bytes(prefix, "big")
        data = file.read(length)
        if len(data) < length:
            raise InputError(
                source,
                where + f"truncated protobuf (needs {length} bytes, {len(data)} left)",
            )
        out = Decoded()
        decode._protobuf_message(data, source, where, out, lazy, True)
        cut(out, len(data))
        yield out
        pos += 4 + length


class Inflate(io.RawIOBase):
    """The inflated bytes of a gzip file, read as they are asked for, with `gzip.gunzip`'s
    bound (`max_inflated_bytes`) and its errors, word for word.

    Several members are read one after the other, trailing zero bytes allowed. Each member
    is fed in slices growing from 1 KiB to 64 KiB, as `gunzip` feeds it, so that many tiny
    members cost linear time (zlib copies what follows a member's end)."""

    def __init__(self, file: IO[bytes], source: str, limit: int) -> None:
        super().__init__()
        self._file, self._source, self._limit = file, source, limit
        self._buf, self._pos, self._total = b"", 0, 0
        self._inflater: Any = None
        self._slice = _FIRST_IN
        self._done = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        out = self._inflate(len(buffer))
        buffer[: len(out)] = out
        return len(out)

    def _fill(self, need: int) -> bool:
        """At least `need` unread input bytes in the buffer, if the file has them."""
        while len(self._buf) - self._pos < need:
            more = self._file.read(_MAX_IN)
            if not more:
                return False
            self._buf, self._pos = self._buf[self._pos :] + more, 0
        return True

    def _inflate(self, size: int) -> bytes:
        while not self._done:
            if self._inflater is None and not self._next_member():
                break
            if not self._fill(1):
                raise InputError(self._source, "truncated gzip data")
            piece = memoryview(self._buf)[self._pos : self._pos + self._slice]
            inflater = self._inflater
            try:
                out: bytes = inflater.decompress(piece, min(size, self._limit - self._total + 1))
            except zlib.error as exc:
                raise InputError(self._source, f"invalid gzip data: {exc}") from None
            self._total += len(out)
            if self._total > self._limit:
                raise InflatesTooFar(
                    self._source,
                    f"gzip data inflates to more than {self._limit} bytes (max_inflated_bytes)",
                )
            self._pos += len(piece) - len(inflater.unconsumed_tail) - len(inflater.unused_data)
            self._slice = min(self._slice * 2, _MAX_IN)
            if inflater.eof:
                self._inflater = None
            if out:
                return out
        return b""

    def _next_member(self) -> bool:
        self._fill(2)
        if self._buf[self._pos : self._pos + 2] != GZIP_MAGIC:
            rest = self._buf[self._pos :]
            while True:  # zero bytes may pad the end, nothing else
                if rest.strip(b"\x00"):
                    raise InputError(self._source, "unexpected bytes after the gzip data")
                rest = self._file.read(_MAX_IN)
                if not rest:
                    break
            self._done = True
            return False
        self._inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        self._slice = _FIRST_IN
        return True


_span_row = attrgetter(*(f.name for f in fields(Span)))
_log_row = attrgetter(*(f.name for f in fields(LogRecord)))
"""A span or log record as the tuple of its fields, in their order, which `Span(*row)` takes
back: pickled so, a slotted dataclass costs a Python call per object less each way
(docs/measurements.md, "Big files")."""


def _genai_count(spans: list[Span]) -> int:
    """`is_genai_candidate` over `spans`, asked once per (name, scope) for the spans without
    attributes (most of a big file's: skeletons), whose answer depends on nothing else."""
    count = 0
    bare: dict[tuple[str, str], bool] = {}
    for s in spans:
        if s.attributes:
            count += is_genai_candidate(s.name, s.attributes, s.scope_name)
            continue
        key = (s.name, s.scope_name)
        found = bare.get(key)
        if found is None:
            bare[key] = found = is_genai_candidate(s.name, (), s.scope_name)
        count += found
    return count


class ByTrace:
    """The traces of a stream of requests, each with its spans and log records, in order of
    first appearance, holding at most about `hold` spans and log records in memory.

    Reads every request when made (so every decoding error comes before any trace is
    graded); `close` (or `with`) drops the temporary file.
    """

    def __init__(self, requests: Iterable[Decoded], *, hold: int = DEFAULT_HOLD) -> None:
        self.span_count = 0
        self.spilled = 0
        """Spans and log records written to the temporary file."""
        self._order: dict[str, None] = {}
        self._held: dict[str, tuple[list[Span], list[LogRecord]]] = {}
        self._held_count = 0
        self._on_disk: dict[str, list[tuple[int, int]]] = {}
        self._file: IO[bytes] | None = None
        try:
            for n, request in enumerate(requests):
                if n and self._held_count > hold:  # a file read whole is in memory already
                    self._spill(hold // 2)
                self._add(request)
        except BaseException:
            self.close()
            raise

    @classmethod
    def of_file(cls, path: str | PathLike[str], *, hold: int = DEFAULT_HOLD) -> ByTrace:
        return cls(iter_file(path), hold=hold)

    def __enter__(self) -> ByTrace:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        self._held.clear()
        self._on_disk.clear()

    def trace_ids(self) -> list[str]:
        """Every trace id with spans, in order of first appearance."""
        return list(self._order)

    def __iter__(self) -> Iterator[Decoded]:
        for trace_id in self._order:
            yield self.trace(trace_id)

    def trace(self, trace_id: str) -> Decoded:
        """One trace's spans and log records, in file order (none for an unknown id)."""
        spans: list[Span] = []
        logs: list[LogRecord] = []
        if trace_id not in self._order:
            return Decoded()
        file = self._file
        for offset, size in self._on_disk.get(trace_id, ()):
            assert file is not None
            file.seek(offset)
            span_rows, log_rows = pickle.loads(file.read(size))
            spans += [Span(*row) for row in span_rows]
            logs += [LogRecord(*row) for row in log_rows]
        held = self._held.get(trace_id)
        if held is not None:
            spans += held[0]
            logs += held[1]
        return Decoded(
            spans=spans,
            logs=logs,
            span_count=len(spans),
            genai_span_count=_genai_count(spans),
            log_count=len(logs),
        )

    def _add(self, request: Decoded) -> None:
        held = self._held
        for span in request.spans:
            tid = span.trace_id
            bucket = held.get(tid)
            if bucket is None:
                held[tid] = bucket = ([], [])
            bucket[0].append(span)
            if tid not in self._order:
                self._order[tid] = None
        for record in request.logs:
            bucket = held.get(record.trace_id)
            if bucket is None:
                held[record.trace_id] = bucket = ([], [])
            bucket[1].append(record)
        self.span_count += len(request.spans)
        self._held_count += len(request.spans) + len(request.logs)

    def _spill(self, keep: int) -> None:
        """Writes the traces held longest to the temporary file until `keep` are left."""
        if self._file is None:
            self._file = tempfile.TemporaryFile(prefix="attest-otel-")  # noqa: SIM115 - close()
        file = self._file
        file.seek(0, 2)
        for tid in list(self._held):
            if self._held_count <= keep:
                break
            spans, logs = self._held.pop(tid)
            rows = ([_span_row(s) for s in spans], [_log_row(r) for r in logs])
            data = pickle.dumps(rows, protocol=pickle.HIGHEST_PROTOCOL)
            self._on_disk.setdefault(tid, []).append((file.tell(), len(data)))
            file.write(data)
            self._held_count -= len(spans) + len(logs)
            self.spilled += len(spans) + len(logs)
