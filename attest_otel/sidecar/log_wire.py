"""OTLP logs and metrics requests at the protobuf wire level, as `wire` does for traces.

An `ExportLogsServiceRequest` is framed exactly like a traces request: field 1 repeated
`ResourceLogs` (resource 1, scope_logs 2, schema_url 3), each `ScopeLogs` (scope 1,
log_records 2, schema_url 3). So a log record is cut out and re-framed under a copy of its
resource and scope like a span (`wire.ScopeGroup`, `wire.encode_groups`), and a held
trace's log records are a growing `LogsData` encoding, valid at every record boundary.
Metrics requests share the framing too (`ResourceMetrics`, `ScopeMetrics`, metrics as
field 2), which is all the forwarder needs to cut an oversized one (`wire.split_to_size`).

What differs is where a record names its trace: `LogRecord.trace_id` is field 9 and
`span_id` field 10 (field 1 is the timestamp), and `event_name` field 12.

Requests of other signals share the durable log with traces: they are written there with a
two-byte prefix (`tag`), which no protobuf encoding starts with (field number 0 is invalid),
so a replayed record says which signal it was.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from attest_otel.sidecar import wire
from attest_otel.sidecar.wire import ScopeGroup, WireError, split_request

__all__ = [
    "LOGS",
    "METRICS",
    "TRACES",
    "is_genai_record",
    "refused_trace_ids",
    "split_logs",
    "tag",
    "untag",
]

TRACES = "traces"
LOGS = "logs"
METRICS = "metrics"

_TAGS = {LOGS: b"\x00L", METRICS: b"\x00M"}
_SIGNALS = {v: k for k, v in _TAGS.items()}

_JSON_TRACE_ID = re.compile(rb'"trace_?[iI]d"\s*:\s*"([0-9a-fA-F]{32})"')


def tag(signal: str, data: bytes) -> bytes:
    """The durable-log record of a request of `signal` (traces are written as they came)."""
    prefix = _TAGS.get(signal)
    return data if prefix is None else prefix + data


def untag(record: bytes) -> tuple[str, bytes]:
    """(signal, request bytes) of a durable-log record written by `tag`."""
    signal = _SIGNALS.get(record[:2])
    return (TRACES, record) if signal is None else (signal, record[2:])


def split_logs(data: bytes) -> list[tuple[ScopeGroup, list[tuple[bytes, bytes]]]]:
    """Every ScopeLogs of a logs request as a `ScopeGroup` whose `spans` are its log
    records ((trace id, event name, record) with the record's tag and length), and beside
    it each record's (span id, event name). Raises `WireError` on broken framing.

    The cut is the wire core's (`wire.split_log_records`), the walk `split_request`
    runs for traces: this ran once per log record in Python."""
    out: list[tuple[ScopeGroup, list[tuple[bytes, bytes]]]] = []
    for resource, scope, records in wire.split_log_records(data):
        group = ScopeGroup(resource, scope, [(t, e, r) for t, e, r, _s in records])
        out.append((group, [(s, e) for _t, e, _r, s in records]))
    return out


def is_genai_record(group: ScopeGroup, event: bytes, record: bytes) -> bool:
    """Whether a log record may carry a run's content: a GenAI scope, an event name a
    dialect declares (`wire.EVENT_PREFIXES`: `gen_ai.*`, ...), or `gen_ai` anywhere in its
    bytes (an `event.name` attribute, a message key). A false match only holds a record
    with its trace for a while."""
    return event.startswith(wire.EVENT_PREFIXES) or group.is_genai_scope() or b"gen_ai" in record


def refused_trace_ids(signal: str, body: bytes, is_json: bool) -> set[str]:
    """The trace ids (hex) a refused request names, read without parsing it whole: what the
    held runs of those traces are told (a gap) when the request is refused for its size.
    Best effort: a body that cannot be read names none."""
    if signal == METRICS:
        return set()
    if is_json:
        return {m.group(1).decode().lower() for m in _JSON_TRACE_ID.finditer(body)}
    try:
        if signal == LOGS:
            ids: Iterable[bytes] = (
                trace_id for group, _ in split_logs(body) for trace_id, _, _ in group.spans
            )
        else:
            ids = (trace_id for group in split_request(body) for trace_id, _, _ in group.spans)
        return {t.hex() for t in ids if len(t) == 16 and any(t)}
    except WireError:
        return set()
