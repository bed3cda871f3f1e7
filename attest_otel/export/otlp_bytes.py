"""OTLP protobuf written as bytes: attributes, span events and log records, no messages.

Building protobuf messages from Python costs a call per field and an object per value
(through upb, about 1.5 us an attribute, and the SDK's log path about 30 us a record); the
sidecar writes the same few dozen grade attributes on every GenAI span, so it writes their
encoding instead. Two facts of the wire format make bytes enough:

- a message's fields may come in any order and repeated fields accumulate, so the
  attributes and events of a grade can be appended to a span's encoding as they are
  (`field 9`, `field 11`) and a parser sees one span with them at the end;
- a value's encoding depends on nothing around it, so the encoded attribute of a (key, value)
  pair that repeats (a verdict, a severity, a score of 1.0) is cached.

What a parser reads back equals what `export.annotate` and the SDK build (tests/export).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping

from attest_otel_wire import encode_varint

from attest_otel.export.results import AttrValue

__all__ = ["fixed64", "key_value", "key_values", "length_delimited", "varint"]

_U64 = (1 << 64) - 1
_CACHE_LIMIT = 8192
_cache: dict[tuple[int, str, type, AttrValue], bytes] = {}


def varint(value: int) -> bytes:
    """Base-128 varint (the wire core's); a negative int64 as its two's complement (10
    bytes)."""
    return encode_varint(value & _U64)


def length_delimited(tag: int, payload: bytes) -> bytes:
    """One length-delimited field (`tag` is the whole tag byte, wire type 2)."""
    size = len(payload)
    return bytes((tag, size)) + payload if size < 0x80 else bytes((tag,)) + varint(size) + payload


def _any_value(value: AttrValue) -> bytes:
    """An `AnyValue`; bool before int, as `annotate.any_value` (a bool is an int)."""
    if isinstance(value, bool):
        return b"\x10\x01" if value else b"\x10\x00"
    if isinstance(value, int):
        return b"\x18" + varint(value)
    if isinstance(value, float):
        return b"\x21" + struct.pack("<d", value)
    return length_delimited(0x0A, str(value).encode("utf-8", "replace"))


def key_value(tag: int, key: str, value: AttrValue) -> bytes:
    """One `KeyValue` as field `tag` of its message (0x4A: a span's attributes, 0x1A: an
    event's, 0x32: a log record's)."""
    cache_key = (tag, key, value.__class__, value)
    found = _cache.get(cache_key)
    if found is not None:
        return found
    encoded = length_delimited(
        tag, length_delimited(0x0A, key.encode()) + length_delimited(0x12, _any_value(value))
    )
    if len(encoded) <= 256:  # repeated values are short; long text is rarely seen twice
        if len(_cache) >= _CACHE_LIMIT:
            _cache.clear()
        _cache[cache_key] = encoded
    return encoded


def key_values(tag: int, attributes: Mapping[str, AttrValue]) -> bytes:
    """`key_value` of every attribute, in order. The cache is read here, not through a call
    per attribute: a grade's attributes are nearly all hits, and the call was most of a
    hit's cost."""
    cache = _cache
    parts: list[bytes] = []
    append = parts.append
    for key, value in attributes.items():
        found = cache.get((tag, key, value.__class__, value))
        append(key_value(tag, key, value) if found is None else found)
    return b"".join(parts)


def fixed64(tag: int, value: int) -> bytes:
    return bytes((tag,)) + struct.pack("<Q", value & _U64)
