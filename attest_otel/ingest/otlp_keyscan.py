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

import attest_otel_wire

from attest_otel.adapt import registry

__all__ = ["ScopeKeyScan"]

_KEY: attest_otel_wire.KeyFinder
"""Tag of field 1 (wire type 2), a varint length of up to 10 bytes, then a GenAI key prefix
(`adapt.registry`'s union, rebuilt on registration; the wire core's byte probe,
rust/attest_wire)."""


def _rebuild() -> None:
    global _KEY
    _KEY = attest_otel_wire.KeyFinder.key_prefixes(
        prefix.encode() for prefix in registry.markers().key_prefixes
    )


registry.watch(_rebuild)


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
            # [(start, end) of each ScopeSpans] per ResourceSpans, read leniently: a framing
            # problem ends the lists early, and the count check then disagrees.
            self._ranges = attest_otel_wire.scope_ranges(self._data)
        ranges = self._ranges
        if resource >= len(ranges) or len(ranges[resource]) != scope_count:
            return True
        start, end = ranges[resource][scope]
        return _KEY.search(self._data, start, end) is not None
