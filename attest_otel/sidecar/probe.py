"""Which of these spans are agent spans? The buffer asks to know when a run is complete."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from attest_otel.adapt import Role, detect, registry
from attest_otel.ingest.decode import decode_request
from attest_otel.sidecar.buffer import HeldTrace, SpanFacts
from attest_otel.sidecar.wire import Substrings, field_bytes

log = logging.getLogger(__name__)


AGENT_MARKS: tuple[bytes, ...] = ()
"""An agent span of the conventions that declare one (`DialectSpec.agent_attributes`, e.g.
GenAI's `gen_ai.operation.name: invoke_agent`; `agent_span_names`, e.g. pydantic-ai's
`agent run`), as it is encoded: the exact key and string value, or the exact span name, so
a match is an agent span unless another dialect decides the span (`DECIDED_MARKS`). Other
conventions are found by decoding (`agent_probe`); the two answers agree on the fixtures
(tests/sidecar). Plain substrings for the core's search (`_agent_in`): an alternation has no
common first byte and `re` tried it at every position (9 us a 1.6 KB span, the receiving
process's largest cost per GenAI span)."""
DECIDED_MARKS: tuple[bytes, ...] = ()
"""Attribute keys (`DialectSpec.role_keys`) that let another dialect decide a span, as
encoded (key field, then the value's tag): a span showing one is not an agent span by
`AGENT_MARKS`, and a chunk of only such spans is decoded."""


def _tag(message: type, field: str) -> int:
    """The tag byte of a length-delimited field, its number read from the OTLP protos."""
    number: int = message.DESCRIPTOR.fields_by_name[field].number  # type: ignore[attr-defined]
    return number << 3 | 2


_KEY, _VALUE = _tag(KeyValue, "key"), _tag(KeyValue, "value")
_STRING, _NAME = _tag(AnyValue, "string_value"), _tag(Span, "name")


def agent_marks(attributes: Iterable[tuple[str, str]], span_names: Iterable[str]) -> list[bytes]:
    """The encodings `AGENT_MARKS` holds: a `KeyValue` (key field 1, then an `AnyValue`
    whose string field 1 is the value) and a span name (`Span.name`, field 5)."""
    out = [
        field_bytes(_KEY, key.encode()) + field_bytes(_VALUE, field_bytes(_STRING, value.encode()))
        for key, value in attributes
    ]
    out.extend(field_bytes(_NAME, name.encode()) for name in span_names)
    return out


_agent_in = Substrings(()).any_in
_decided_in = Substrings(()).any_in
"""Whether a record holds one of `AGENT_MARKS` / `DECIDED_MARKS` (the wire core's SIMD
substring search: `bytes.__contains__` cost about 2 us a 1.6 KB GenAI span,
docs/measurements.md)."""


def _rebuild() -> None:
    global AGENT_MARKS, DECIDED_MARKS, _agent_in, _decided_in
    m = registry.markers()
    AGENT_MARKS = tuple(agent_marks(m.agent_attributes, m.agent_span_names))
    DECIDED_MARKS = tuple(field_bytes(_KEY, key.encode()) + bytes((_VALUE,)) for key in m.role_keys)
    _agent_in = Substrings(AGENT_MARKS).any_in
    _decided_in = Substrings(DECIDED_MARKS).any_in


registry.watch(_rebuild)


def _is_agent_record(record: bytes) -> bool:
    return _agent_in(record) and not _decided_in(record)  # the second: agent spans only


def agent_probe(
    trace: HeldTrace, chunk: bytes, whole: bool, spans: list[SpanFacts], *, keep: bool = True
) -> set[bytes]:
    """The raw span ids of the agent spans among `spans` (the spans of `chunk`, new spans of
    `trace`), by the adapters' own test.

    The byte test answers first, span by span, and needs no decoding: when it finds an agent
    span in the chunk, the chunk's spans follow one of its two conventions and the others are
    taken as not agents (a miss only makes the buffer wait longer for a run, see `buffer`).
    The byte test knows the conventions whose dialects declare their agent spans' bytes.
    Otherwise the chunk is decoded and each span asked `adapt.detect`; when `chunk` is the
    whole trace and `keep`, the decode is kept on the trace for the grader (in-process
    grading only).
    """
    found = {s.span_id for s in spans if _is_agent_record(s.record)}
    if found:
        return found

    decoded = decode_request(chunk, source=f"trace {trace.trace_id_hex}", checked=True)
    for span in decoded.spans:
        if span.attributes:
            hit = detect(span)
            if hit is not None and hit[1] is Role.AGENT:
                try:
                    found.add(bytes.fromhex(span.span_id))
                except ValueError:
                    continue
    if whole and keep:
        trace.probe = decoded
    return found
