"""A stored trace's bytes: its spans, and the log records the sidecar read with them.

A trace is stored as a `TracesData` encoding (concatenated `ResourceSpans`, field 1) so that
a later write appends to it. The log records held with a trace (content the instrumentation
put in log records) are stored in the same bytes as field `LOGS_FIELD`, each a `LogsData`
encoding: a traces parser skips the field, so every reader of spans reads the blob as it
did, and appending stays a concatenation. `split` gives both back, so `grade --trace-id` and
a regrade read the run with its content, as the sidecar did.
"""

from __future__ import annotations

__all__ = ["LOGS_FIELD", "split", "with_logs"]

LOGS_FIELD = 1000


def varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_TAG = varint((LOGS_FIELD << 3) | 2)


def with_logs(spans: bytes, logs: bytes) -> bytes:
    """The bytes to store for a trace: its spans, then its log records (if any)."""
    if not logs:
        return spans
    return spans + _TAG + varint(len(logs)) + logs


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7


def split(data: bytes) -> tuple[bytes, bytes]:
    """(spans as a `TracesData` encoding, log records as a `LogsData` encoding) of stored
    bytes. Bytes that do not frame are returned whole as spans, for the traces parser to
    judge."""
    if _TAG not in data:
        return data, b""
    spans: list[bytes] = []
    logs: list[bytes] = []
    pos, end = 0, len(data)
    try:
        while pos < end:
            start = pos
            tag, pos = _varint(data, pos)
            if tag & 7 != 2:
                return data, b""
            length, pos = _varint(data, pos)
            if pos + length > end:
                return data, b""
            if tag >> 3 == LOGS_FIELD:
                logs.append(data[pos : pos + length])
            else:
                spans.append(data[start : pos + length])
            pos += length
    except IndexError:
        return data, b""
    return b"".join(spans), b"".join(logs)
