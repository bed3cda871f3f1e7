"""Walk parsed OTLP protobuf messages (upb) into `Span`s and `LogRecord`s.

upb parses a request without creating Python objects; every field read from Python costs.
So the walk reads, per span, only ids, parent, name, times, kind and status, and the attribute
*keys* until one marks the span as a GenAI candidate (`candidate.py`). Only candidates get an
attribute dict and events; the rest become skeletons whose `source` (the protobuf Span) still
holds everything, see `decode.hydrate`. Given the request's bytes, the key reads are skipped
for whole scopes that cannot hold a GenAI key (`otlp_keyscan`): a plain HTTP/DB span then
costs its fixed fields only.
"""

from __future__ import annotations

from typing import Any

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span as PbSpan

from attest_otel.ingest import candidate
from attest_otel.ingest.candidate import is_genai_key, is_genai_name, is_genai_scope
from attest_otel.ingest.otlp_common import (
    SPAN_ID_BYTES,
    TRACE_ID_BYTES,
    MalformedOTLP,
    bytes_id_to_hex,
)
from attest_otel.ingest.otlp_keyscan import ScopeKeyScan
from attest_otel.model import Event, LogRecord, Span

_SCALARS = frozenset({"bool_value", "int_value", "double_value", "bytes_value"})


def any_value(value: AnyValue) -> Any:
    """OTLP AnyValue -> str, bool, int, float, bytes, list, dict or None (empty value)."""
    which = value.WhichOneof("value")
    if which == "string_value":
        return value.string_value
    if which in _SCALARS:
        return getattr(value, which)
    if which == "array_value":
        return [any_value(item) for item in value.array_value.values]
    if which == "kvlist_value":
        return attributes(value.kvlist_value.values)
    return None  # unset, or `string_value_strindex` (profiles only)


def attributes(kvs: Any) -> dict[str, Any]:
    """A repeated KeyValue field as a dict (a repeated key: the last one wins).

    Most values are non-empty strings, and a oneof member reads as its default unless it is
    the one set, so a non-empty `string_value` is the value without a `WhichOneof` call and a
    function call (10-20 % of a GenAI span's attribute cost). Everything else, the empty
    string included, goes through `any_value`.
    """
    return {
        kv.key: text if (text := (value := kv.value).string_value) else any_value(value)
        for kv in kvs
    }


def events(span: PbSpan) -> list[Event]:
    """The span's events; most GenAI spans have none, and testing the container's length
    costs a quarter of iterating it."""
    found = span.events
    if not found:
        return []
    return [Event(ev.name, ev.time_unix_nano, attributes(ev.attributes)) for ev in found]


def walk_traces(
    req: ExportTraceServiceRequest,
    out: list[Span],
    *,
    lazy: bool,
    data: bytes | None = None,
) -> tuple[int, int]:
    """Append one `Span` per span in `req` to `out`; return (spans seen, GenAI spans).

    `data`, the bytes `req` was parsed from, lets a lazy walk skip the attribute-key scan of
    scopes whose bytes hold no GenAI key (`otlp_keyscan`); the result is the same without it.
    """
    seen = genai = 0
    key_heads = candidate.KEY_PREFIXES_BY_FIRST_CHAR  # rebuilt on registration
    keyscan = ScopeKeyScan(data) if lazy and data is not None else None
    name_verdicts: dict[str, bool] = {}  # plain spans repeat a few names ("GET /orders/{id}")
    append = out.append
    # The spans of a trace come together: their trace id is written as hex once and the
    # string shared (a later dict lookup by it then needs no new hash either).
    last_trace, last_trace_hex = b"", ""
    for i, rs in enumerate(req.resource_spans):
        resource = attributes(rs.resource.attributes)  # one dict shared by all its spans
        scope_spans = rs.scope_spans
        for j, ss in enumerate(scope_spans):
            scope = ss.scope
            scope_name = scope.name
            scope_version = scope.version
            whole_scope = not lazy or is_genai_scope(scope_name)
            scan_keys = not whole_scope and (
                keyscan is None or keyscan.may_hold_genai_key(i, j, len(scope_spans))
            )
            for k, ps in enumerate(ss.spans):
                name = ps.name
                full = whole_scope
                if not full:
                    verdict = name_verdicts.get(name)
                    if verdict is None:
                        verdict = name_verdicts[name] = is_genai_name(name)
                    full = verdict
                if not full and scan_keys:
                    for kv in ps.attributes:  # inlined `is_genai_key`: this loop is the hot path
                        key = kv.key
                        heads = key_heads.get(key[:1])
                        if heads is not None and key.startswith(heads):
                            full = True
                            break
                trace_id = ps.trace_id
                span_id = ps.span_id
                parent = ps.parent_span_id
                if (
                    len(trace_id) != TRACE_ID_BYTES
                    or len(span_id) != SPAN_ID_BYTES
                    or (parent and len(parent) != SPAN_ID_BYTES)
                ):
                    _raise_bad_ids(ps, f"resourceSpans[{i}].scopeSpans[{j}].spans[{k}]")
                if trace_id != last_trace:
                    last_trace, last_trace_hex = trace_id, trace_id.hex()
                status = ps.status
                seen += 1
                if full:
                    genai += 1
                    # `attributes` and `events` inlined: this runs for every GenAI span.
                    span_attributes = {
                        kv.key: text
                        if (text := (value := kv.value).string_value)
                        else any_value(value)
                        for kv in ps.attributes
                    }
                    span_events = events(ps) if ps.events else []
                else:
                    span_attributes = {}
                    span_events = []
                # By position, in `Span`'s field order (checked at import by otlp_common):
                # keywords cost about 1.5 us more per span, and this runs for every span.
                append(
                    Span(
                        last_trace_hex,
                        span_id.hex(),
                        parent.hex() if parent else None,
                        name,
                        ps.start_time_unix_nano,
                        ps.end_time_unix_nano,
                        ps.kind,
                        status.code,
                        status.message,
                        span_attributes,
                        span_events,
                        resource,
                        scope_name,
                        scope_version,
                        ps,
                    )
                )
    return seen, genai


def _raise_bad_ids(ps: PbSpan, where: str) -> None:
    try:
        bytes_id_to_hex(ps.trace_id, TRACE_ID_BYTES, "trace id")
        bytes_id_to_hex(ps.span_id, SPAN_ID_BYTES, "span id")
        bytes_id_to_hex(ps.parent_span_id, SPAN_ID_BYTES, "parent span id")
    except MalformedOTLP as exc:
        exc.where = where
        raise
    raise MalformedOTLP("bad span ids", where)  # pragma: no cover - one check above fails


def walk_logs(
    req: ExportLogsServiceRequest, out: list[LogRecord], *, lazy: bool
) -> tuple[int, int]:
    """Append the GenAI log records of `req` to `out` (all of them if not `lazy`);
    return (records seen, records kept). The event name comes from the `event_name` field,
    else from the `event.name` attribute."""
    seen = kept = 0
    event_prefixes = candidate.GENAI_EVENT_PREFIXES
    for i, rl in enumerate(req.resource_logs):
        for j, sl in enumerate(rl.scope_logs):
            whole_scope = not lazy or is_genai_scope(sl.scope.name)
            for k, lr in enumerate(sl.log_records):
                seen += 1
                event_name = lr.event_name
                kvs = lr.attributes
                keep = whole_scope or event_name.startswith(event_prefixes)
                if not keep:
                    for kv in kvs:
                        key = kv.key
                        if is_genai_key(key) or (
                            key == "event.name" and kv.value.string_value.startswith(event_prefixes)
                        ):
                            keep = True
                            break
                if not keep:
                    continue
                kept += 1
                where = f"resourceLogs[{i}].scopeLogs[{j}].logRecords[{k}]"
                try:
                    trace_id = (
                        bytes_id_to_hex(lr.trace_id, TRACE_ID_BYTES, "trace id")
                        if lr.trace_id
                        else ""
                    )
                    span_id = (
                        bytes_id_to_hex(lr.span_id, SPAN_ID_BYTES, "span id") if lr.span_id else ""
                    )
                except MalformedOTLP as exc:
                    exc.where = where
                    raise
                record_attributes = attributes(kvs)
                if not event_name:
                    named = record_attributes.get("event.name")
                    event_name = named if isinstance(named, str) else ""
                out.append(
                    LogRecord(
                        trace_id=trace_id,
                        span_id=span_id,
                        event_name=event_name,
                        time_ns=lr.time_unix_nano or lr.observed_time_unix_nano,
                        body=any_value(lr.body) if lr.HasField("body") else None,
                        attributes=record_attributes,
                    )
                )
    return seen, kept


def first_span(req: ExportTraceServiceRequest) -> PbSpan | None:
    """The first span of a request, or None (used to tell a logs request read as traces)."""
    for rs in req.resource_spans:
        for ss in rs.scope_spans:
            for ps in ss.spans:
                found: PbSpan = ps
                return found
    return None
