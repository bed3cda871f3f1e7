"""Groups (wire types 3 and 4) as protobuf (upb) reads them, and the wire core the same.

proto3 has no group fields, but its parser still reads groups: a start-group tag of a field
the message does not know, or of a known field of another type, makes an unknown field that
is skipped to its end-group tag and kept. The cases below pin what upb does (so a protobuf
upgrade that changes it fails here first), then hold the core's validation and both cuts to
it: a request the next hop accepts with a group in it is cut, not refused.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from attest_otel.sidecar import wire
from attest_otel.sidecar.log_wire import split_logs
from tests.fuzz.test_wire_differential import ld, padded, tag, upb_accepts

SPAN = ld(1, b"\x01" * 16) + ld(2, b"\x02" * 8) + ld(5, b"x")
RECORD = ld(9, b"\x01" * 16) + ld(10, b"\x02" * 8) + ld(12, b"ev")

Build = Callable[[bytes], bytes]


def group(number: int, inner: bytes = b"") -> bytes:
    return tag(number, 3) + inner + tag(number, 4)


def in_record(extra: bytes) -> Build:
    """`extra` inside a Span of a traces request, a LogRecord of a logs request (both field 2
    of field 2 of field 1)."""
    return lambda record: ld(1, ld(2, ld(2, record + extra)))


# (case, the request around a span or log record, whether upb accepts it)
CASES: list[tuple[str, Build, bool]] = [
    ("unknown group", in_record(group(20, ld(1, b"k"))), True),
    ("known string field as a group", in_record(group(5)), True),
    ("known message field as a group", in_record(group(6, ld(1, b"k"))), True),
    ("known bytes field as a group", in_record(group(9)), True),
    ("resource spans as a group", lambda r: group(1, r) + ld(1, ld(2, ld(2, r))), True),
    ("a scope's group beside its records", lambda r: ld(1, ld(2, group(7) + ld(2, r))), True),
    ("bad UTF-8 inside a group", in_record(group(5, ld(5, b"\xff"))), True),
    ("field number 0 inside a group", in_record(group(20, b"\x00\x01")), True),
    ("groups nested", in_record(group(20, group(21, group(22)))), True),
    ("the largest field number", in_record(group((1 << 29) - 1)), True),
    ("wire type 6 inside a group", in_record(group(20, tag(3, 6))), False),
    ("wire type 7 inside a group", in_record(group(20, tag(3, 7))), False),
    ("end-group tag of another field", in_record(tag(20, 3) + tag(21, 4) + tag(20, 4)), False),
    ("end-group tag alone", in_record(tag(17, 4)), False),
    ("end-group tag alone at the top", lambda r: tag(1, 4), False),
    ("group of field number 0", lambda r: b"\x03\x04", False),
    (
        "group unclosed in its record",
        lambda r: ld(1, ld(2, ld(2, r + tag(20, 3)))) + tag(20, 4),
        False,
    ),
    ("a group's length past its end", in_record(tag(20, 3) + tag(1, 2) + b"\x05ab"), False),
    ("a padded tag inside a group", in_record(group(21, padded(20 << 3, 6) + b"\x01")), False),
]


@pytest.mark.parametrize(("build", "accepted"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_groups_get_upbs_verdict_and_are_cut(build: Build, accepted: bool) -> None:
    traces, logs = build(SPAN), build(RECORD)
    for data, root in ((traces, ExportTraceServiceRequest), (logs, ExportLogsServiceRequest)):
        assert upb_accepts(data, root) == accepted, "upb changed its mind"
        assert (wire.check_message(data, root) is None) == accepted, root.__name__
    if not accepted:
        return
    parsed = ExportTraceServiceRequest.FromString(traces)
    spans = [s for rs in parsed.resource_spans for ss in rs.scope_spans for s in ss.spans]
    cut = [record for g in wire.split_request(traces) for _t, _n, record in g.spans]
    assert len(spans) == 1
    assert [Span.FromString(_value(r)) for r in cut] == spans
    parsed_logs = ExportLogsServiceRequest.FromString(logs)
    records = [
        r for rl in parsed_logs.resource_logs for sl in rl.scope_logs for r in sl.log_records
    ]
    groups = split_logs(logs)
    assert len(records) == 1
    assert [LogRecord.FromString(_value(r)) for g, _ in groups for _t, _e, r in g.spans] == records
    heads = [(t, e, s) for g, hs in groups for (t, _e, _r), (s, e) in zip(g.spans, hs, strict=True)]
    assert heads == [(r.trace_id, r.event_name.encode(), r.span_id) for r in records]


def _value(record: bytes) -> bytes:
    """A record's value: what follows its tag and length."""
    return record[wire.fields(record)[0][3] :]
