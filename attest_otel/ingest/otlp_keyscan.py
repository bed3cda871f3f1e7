"""Which scopes of a protobuf trace request may hold a GenAI attribute key, from the raw bytes.

The lazy protobuf walk looks at every attribute key of a span that neither its name nor its
scope marks as GenAI. Through upb that costs a Python object per key (about 0.6 us, 6 us for a
typical HTTP or DB span with 10 attributes), which made the key scan the largest single cost
of decoding a mixed request. The request's bytes answer the same question for a whole scope at
once, in C: a key is the length-delimited field 1 of a `KeyValue`, so a key starting with a
GenAI prefix appears in the bytes as `0x0a <varint length> <prefix>`. A scope whose bytes
contain no such run cannot have such a key, and its spans need no key scan.

The test is one-sided by construction: every real key shows up (whatever the field order or
varint width), while other field-1 strings that happen to start like a key (an `AnyValue`
string, a nested key) only send the scope back to the exact per-key scan. When the framing
cannot be followed, `ScopeKeyScan` answers "maybe" for everything.
"""

from __future__ import annotations

import re

from attest_otel.adapt import registry

__all__ = ["ScopeKeyScan"]

_KEY = re.compile(b"(?!)")
"""Tag of field 1 (wire type 2), a varint length of up to 10 bytes, then a GenAI key prefix
(`adapt.registry`'s union, rebuilt on registration). A literal first byte lets `re` skip
ahead quickly (about 1 us per plain span's bytes)."""


def _rebuild() -> None:
    global _KEY
    _KEY = re.compile(
        rb"\x0a[\x80-\xff]{0,9}[\x00-\x7f](?:"
        + b"|".join(re.escape(prefix.encode()) for prefix in registry.markers().key_prefixes)
        + rb")"
    )


registry.watch(_rebuild)

_RESOURCE_SPANS = 1  # ExportTraceServiceRequest.resource_spans
_SCOPE_SPANS = 2  # ResourceSpans.scope_spans


class ScopeKeyScan:
    """`may_hold_genai_key(i, j)` for scope `j` of resource `i` of one traces request.

    The scope byte ranges are found on the first question (the walk never asks about scopes
    whose name already marks them GenAI, so a GenAI-only request costs nothing), and each
    scope is searched only when asked about.
    """

    __slots__ = ("_data", "_ranges")

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._ranges: list[list[tuple[int, int]]] | None = None

    def may_hold_genai_key(self, resource: int, scope: int, scope_count: int) -> bool:
        """False only when scope `scope` of resource `resource` certainly has no attribute key
        with a GenAI prefix. `scope_count` is the number of scopes the parser saw there: the
        answer is "maybe" unless the bytes agree."""
        if self._ranges is None:
            self._ranges = _scope_ranges(self._data) or []
        ranges = self._ranges
        if resource >= len(ranges) or len(ranges[resource]) != scope_count:
            return True
        start, end = ranges[resource][scope]
        return _KEY.search(self._data, start, end) is not None


def _scope_ranges(data: bytes) -> list[list[tuple[int, int]]] | None:
    """[(start, end) of each ScopeSpans] per ResourceSpans, in order; None if the framing is
    not what a parsed request implies (then nothing is skipped)."""
    out: list[list[tuple[int, int]]] = []
    for number, start, end in _length_fields(data, 0, len(data)):
        if number == _RESOURCE_SPANS:
            scopes = []
            for inner, scope_start, scope_end in _length_fields(data, start, end):
                if inner == _SCOPE_SPANS:
                    scopes.append((scope_start, scope_end))
            out.append(scopes)
    return out


def _length_fields(data: bytes, pos: int, end: int) -> list[tuple[int, int, int]]:
    """(field number, value start, value end) of the length-delimited fields in `data[pos:end]`;
    other fields are skipped. Raises nothing: a framing problem ends the list early, and the
    caller's count check then disagrees with the parser's."""
    out = []
    while pos < end:
        tag, pos = _varint(data, pos, end)
        wire_type = tag & 7
        if wire_type == 2:
            length, pos = _varint(data, pos, end)
            if pos + length > end:
                break
            out.append((tag >> 3, pos, pos + length))
            pos += length
        elif wire_type == 0:
            _, pos = _varint(data, pos, end)
        elif wire_type == 1:
            pos += 8
        elif wire_type == 5:
            pos += 4
        else:
            break  # groups (3, 4) are not OTLP; 6 and 7 are not protobuf
    return out


def _varint(data: bytes, pos: int, end: int) -> tuple[int, int]:
    """(value, next position); runs off `end` as a position past it, which ends the caller."""
    result = shift = 0
    while pos < end:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
    return 0, end + 1
