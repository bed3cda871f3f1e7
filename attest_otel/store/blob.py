"""A stored trace's bytes: its spans, and the log records the sidecar read with them.

A trace is stored as a `TracesData` encoding (concatenated `ResourceSpans`, field 1) so that
a later write appends to it. The log records held with a trace (content the instrumentation
put in log records) are stored in the same bytes as field `LOGS_FIELD`, each a `LogsData`
encoding: a traces parser skips the field, so every reader of spans reads the blob as it
did, and appending stays a concatenation. `split` gives both back, so `grade --trace-id` and
a regrade read the run with its content, as the sidecar did.
"""

from __future__ import annotations

from attest_otel_wire import WireError, encode_varint, read_varint

__all__ = ["LOGS_FIELD", "split", "with_logs"]

LOGS_FIELD = 1000


_TAG = encode_varint((LOGS_FIELD << 3) | 2)


def with_logs(spans: bytes, logs: bytes) -> bytes:
    """The bytes to store for a trace: its spans, then its log records (if any)."""
    if not logs:
        return spans
    return spans + _TAG + encode_varint(len(logs)) + logs


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
            tag, pos = read_varint(data, pos)
            if tag & 7 != 2:
                return data, b""
            length, pos = read_varint(data, pos)
            if pos + length > end:
                return data, b""
            if tag >> 3 == LOGS_FIELD:
                logs.append(data[pos : pos + length])
            else:
                spans.append(data[start : pos + length])
            pos += length
    except WireError:
        return data, b""
    return b"".join(spans), b"".join(logs)
