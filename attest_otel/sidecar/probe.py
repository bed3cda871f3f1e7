"""Which of these spans are agent spans? The buffer asks to know when a run is complete."""

from __future__ import annotations

import logging
import re

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)

from attest_otel.adapt import Role, detect
from attest_otel.ingest.decode import decode_request
from attest_otel.sidecar.buffer import HeldTrace, SpanFacts
from attest_otel.sidecar.wire import Substrings

log = logging.getLogger(__name__)


AGENT_BYTES = re.compile(
    rb"\x0a\x15gen_ai\.operation\.name\x12\x0e\x0a\x0cinvoke_agent"  # GenAI semconv
    rb"|\x2a\x09agent run"  # pydantic-ai's run span name
)
"""An agent span of the two most common conventions, as it is encoded: the exact key and
value (or exact span name), so a match is an agent span. Other conventions are found by
decoding (`agent_probe`); the two answers agree on the fixtures (tests/sidecar)."""
_AGENT_MARKS = (
    b"\x0a\x15gen_ai.operation.name\x12\x0e\x0a\x0cinvoke_agent",
    b"\x2a\x09agent run",
)
"""`AGENT_BYTES` as two plain substrings, found by a substring search, while the alternation
has no common first byte and `re` tries it at every position (9 us a 1.6 KB span)."""


_is_agent_record = Substrings(_AGENT_MARKS).any_in
"""Whether a span record holds one of `_AGENT_MARKS` (the wire core's SIMD substring search:
`bytes.__contains__` cost about 2 us a 1.6 KB GenAI span, docs/measurements.md)."""


def agent_probe(
    trace: HeldTrace, chunk: bytes, whole: bool, spans: list[SpanFacts], *, keep: bool = True
) -> set[bytes]:
    """The raw span ids of the agent spans among `spans` (the spans of `chunk`, new spans of
    `trace`), by the adapters' own test.

    The byte test answers first, span by span, and needs no decoding: when it finds an agent
    span in the chunk, the chunk's spans follow one of its two conventions and the others are
    taken as not agents (a miss only makes the buffer wait longer for a run, see `buffer`).
    Otherwise the chunk is decoded and each span asked `adapt.detect`; when `chunk` is the
    whole trace and `keep`, the parse is kept on the trace for the grader (in-process
    grading only).
    """
    found = {s.span_id for s in spans if _is_agent_record(s.record)}
    if found:
        return found

    request = ExportTraceServiceRequest.FromString(chunk)
    decoded = decode_request(request, source=f"trace {trace.trace_id_hex}")
    for span in decoded.spans:
        if span.attributes:
            hit = detect(span)
            if hit is not None and hit[1] is Role.AGENT:
                try:
                    found.add(bytes.fromhex(span.span_id))
                except ValueError:
                    continue
    if whole and keep:
        trace.probe = (request, decoded)
    return found
