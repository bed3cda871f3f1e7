"""The shape of a held trace, read from its bytes: which span hangs under which, and which
look GenAI (`buffer` decides completeness from it). Pure functions over `wire`'s cuts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans

from attest_otel.sidecar.wire import WireError, span_shapes

__all__ = ["SpanFacts", "read_shape", "service_name", "waiting_fragments"]


@dataclass(slots=True)
class SpanFacts:
    """What the buffer reads of one held span on the wire: enough for the trace's shape."""

    span_id: bytes
    parent_id: bytes
    genai: bool
    record: bytes
    """The span as cut from its request (what the probe byte-matches)."""


def service_name(resource_fields: bytes) -> str:
    """`service.name` of a ResourceSpans' resource (fields 1 and 3 as encoded), else ""."""
    if not resource_fields:
        return ""

    try:
        resource = ResourceSpans.FromString(resource_fields).resource
    except Exception:
        return ""
    for kv in resource.attributes:
        if kv.key == "service.name":
            return str(kv.value.string_value)[:256]
    return ""


def read_shape(chunk: bytes) -> list[SpanFacts]:
    """Each span of a request (a held trace's new bytes): its ids and whether it looks GenAI,
    by the same byte tests the request path classifies traces with. No decoding: one walk
    of the wire core (`wire.span_shapes`)."""
    try:
        return [SpanFacts(*facts) for facts in span_shapes(chunk)]
    except WireError:
        return []


def waiting_fragments(trace: Any) -> int:
    """How many fragments of the held spans wait for a span that has not arrived.

    Each span is walked up to its fragment's top (the first span whose parent is not held),
    memoised, so the whole trace costs one pass; a parent loop in broken data ends the walk.
    A fragment waits when its top is not an agent span, names a parent, and holds a span
    that looks GenAI: run work whose agent span (or the tool span that leads to it) is still
    to come.
    """
    parents = trace.parents
    top_of: dict[bytes, bytes] = {}
    genai_tops: set[bytes] = set()
    for span_id in parents:
        path: list[bytes] = []
        seen: set[bytes] = set()
        node = span_id
        while True:
            known = top_of.get(node)
            if known is not None:
                top = known
                break
            path.append(node)
            seen.add(node)
            parent = parents[node]
            if not parent or parent not in parents or parent in seen:
                top = node
                break
            node = parent
        for visited in path:
            top_of[visited] = top
    for span_id in trace.genai:
        found = top_of.get(span_id)
        if found is not None:
            genai_tops.add(found)
    agents = trace.agents
    return sum(
        1
        for top in genai_tops
        if parents[top] and parents[top] not in parents and top not in agents
    )
