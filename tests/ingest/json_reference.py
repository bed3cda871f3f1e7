"""The Python OTLP/JSON walker the wire core's reader (`json_walk.rs`) replaced, kept here as
the oracle of the differential tests (`test_otlp_json.py`, `tests/fuzz/test_json_reader.py`):
it walks what `json.loads` parsed, the old way (its caches left out, which changed nothing
but speed). Not used by the package."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from attest_otel.ingest import candidate
from attest_otel.ingest.candidate import is_genai_key, is_genai_name, is_genai_scope
from attest_otel.ingest.otlp_common import (
    SPAN_ID_BYTES,
    SPAN_KIND_NAMES,
    STATUS_CODE_NAMES,
    TRACE_ID_BYTES,
    MalformedOTLP,
    base64_to_bytes,
    text_id_to_hex,
)
from attest_otel.model import Event, LogRecord, Span

JsonObject = dict[str, Any]

_SURROGATE = re.compile("[\ud800-\udfff]")


def mend_surrogates(document: Any) -> tuple[Any, int]:
    """`document` (parsed JSON) with each unpaired surrogate in its strings and keys replaced
    by U+FFFD, changed in place where it can be; and how many strings were mended.
    Iterative: parsed JSON can be as deep as the parser's recursion limit allows."""
    count = 0

    def mend(text: str) -> str:
        nonlocal count
        if _SURROGATE.search(text) is None:
            return text
        count += 1
        return _SURROGATE.sub("\ufffd", text)

    def mended_dict(obj: dict[str, Any]) -> dict[str, Any]:
        if any(_SURROGATE.search(key) for key in obj):
            return {mend(key): value for key, value in obj.items()}
        return obj

    holder: list[Any] = [document]
    stack: list[Any] = [holder]
    while stack:
        node = stack.pop()
        items = node.items() if type(node) is dict else enumerate(node)
        changed: list[tuple[Any, Any]] = []
        for key, value in items:
            kind = type(value)
            if kind is str:
                fixed = mend(value)
                if fixed is not value:
                    changed.append((key, fixed))
            elif kind is dict:
                fixed_dict = mended_dict(value)
                if fixed_dict is not value:
                    changed.append((key, fixed_dict))
                stack.append(fixed_dict)
            elif kind is list:
                stack.append(value)
        for key, value in changed:
            node[key] = value
    return holder[0], count


# -- values -----------------------------------------------------------------------------------

_STRING, _BOOL, _INT, _DOUBLE, _ARRAY, _KVLIST, _BYTES = range(7)
_VALUE_KINDS: dict[str, int] = {
    "stringValue": _STRING,
    "string_value": _STRING,
    "boolValue": _BOOL,
    "bool_value": _BOOL,
    "intValue": _INT,
    "int_value": _INT,
    "doubleValue": _DOUBLE,
    "double_value": _DOUBLE,
    "arrayValue": _ARRAY,
    "array_value": _ARRAY,
    "kvlistValue": _KVLIST,
    "kvlist_value": _KVLIST,
    "bytesValue": _BYTES,
    "bytes_value": _BYTES,
}


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def any_value(value: Any) -> Any:
    """An OTLP JSON AnyValue object -> str, bool, int, float, bytes, list, dict or None."""
    if type(value) is not dict:
        if value is None:
            return None
        raise MalformedOTLP(f"attribute value must be an object, got {_shown(value)}")
    text = value.get("stringValue")
    if type(text) is str:
        return text
    for key, item in value.items():
        kind = _VALUE_KINDS.get(key)
        if kind is None:
            continue  # unknown fields are ignored (OTLP/JSON rule)
        if kind == _STRING:
            if type(item) is str:
                return item
        elif kind == _INT:
            if type(item) is int:
                return item
            if type(item) is str:
                try:
                    return int(item)
                except ValueError:
                    pass
            elif type(item) is float and item.is_integer():
                return int(item)
        elif kind == _DOUBLE:
            if type(item) is float or type(item) is int or type(item) is str:
                try:
                    return float(item)
                except ValueError:
                    pass
        elif kind == _BOOL:
            if type(item) is bool:
                return item
        elif kind == _ARRAY:
            if type(item) is dict:
                return [any_value(v) for v in item.get("values") or ()]
        elif kind == _KVLIST:
            if type(item) is dict:
                return attributes(item.get("values"))
        elif kind == _BYTES and type(item) is str:
            try:
                return base64_to_bytes(item)
            except ValueError:
                pass
        raise MalformedOTLP(f"bad {key}: {_shown(item)}")
    return None  # {} is an empty AnyValue


def attributes(kvs: Any) -> dict[str, Any]:
    """A JSON list of {"key": k, "value": AnyValue} as a dict (a repeated key: the last wins)."""
    if not kvs:
        return {}
    if type(kvs) is not list:
        raise MalformedOTLP(f"attributes must be a list, got {_shown(kvs)}")
    out: dict[str, Any] = {}
    for kv in kvs:
        # Subscripts, not `.get`: a key or value left out (and a kv that is no object) is
        # rare, and `_key_value` then decides as the plain loop always did.
        try:
            key = kv["key"]
            value = kv["value"]
        except (KeyError, TypeError):
            key, value = _key_value(kv)
        if type(key) is not str:
            key, value = _key_value(kv)
        # `any_value`'s own first test, inlined: most values are strings.
        text = value.get("stringValue") if type(value) is dict else None
        out[key] = text if type(text) is str else any_value(value)
    return out


def _key_value(kv: Any) -> tuple[str, Any]:
    key = kv.get("key", "") if type(kv) is dict else None  # omitted: "" (proto3)
    if type(key) is not str:
        raise MalformedOTLP(f'attribute must be {{"key": ..., "value": ...}}, got {_shown(kv)}')
    return key, kv.get("value")


def events(span: JsonObject) -> list[Event]:
    found = span.get("events")
    if not found:
        return []
    if type(found) is not list:
        raise MalformedOTLP(f"events must be a list, got {_shown(found)}")
    out = []
    for ev in found:
        if type(ev) is not dict:
            raise MalformedOTLP(f"event must be an object, got {_shown(ev)}")
        name = ev.get("name") or ""
        if type(name) is not str:
            raise MalformedOTLP(f"event name must be a string, got {_shown(name)}")
        out.append(
            Event(
                name,
                _time(ev.get("timeUnixNano") or ev.get("time_unix_nano") or 0, "event"),
                attributes(ev.get("attributes")),
            )
        )
    return out


def _int(value: Any, what: str) -> int:
    if type(value) is int:
        return value
    if type(value) is str:
        try:
            return int(value)
        except ValueError:
            pass
    elif type(value) is float and value.is_integer():
        return int(value)
    raise MalformedOTLP(f"{what} must be an integer, got {_shown(value)}")


_U64 = 2**64 - 1


def _time(value: Any, what: str) -> int:
    """A fixed64 time: an integer (or its decimal string) in the unsigned 64-bit range, as the
    protobuf wire can carry it; anything else is not OTLP (protobuf's parser refuses it too)."""
    found = _int(value, f"{what} time")
    if not 0 <= found <= _U64:
        raise MalformedOTLP(f"{what} time out of the unsigned 64-bit range: {_shown(value)}")
    return found


def _enum(value: Any, names: dict[str, int], what: str) -> int:
    if type(value) is int:
        return value
    if type(value) is str:
        found = names.get(value)
        if found is not None:
            return found
        if value.isdigit():
            return int(value)
    raise MalformedOTLP(f"unknown {what} {_shown(value)}")


def _list(obj: JsonObject, camel: str, snake: str, where: str) -> list[Any]:
    found = obj.get(camel) or obj.get(snake)
    if not found:
        return []
    if type(found) is not list:
        raise MalformedOTLP(f"{camel} must be a list, got {_shown(found)}", where)
    return found


def _objects(found: Any, name: str, where: str) -> Iterator[tuple[int, JsonObject]]:
    """The entries of the list `found` (`name`, under `where`) with their index; one list
    check and one object check per entry, for the span and the log walkers alike."""
    if type(found) is not list:
        raise MalformedOTLP(f"{name} must be a list, got {_shown(found)}", where)
    for j, entry in enumerate(found):
        if type(entry) is not dict:
            raise MalformedOTLP(f"expected an object, got {_shown(entry)}", f"{where}.{name}[{j}]")
        yield j, entry


def _object(obj: Any, where: str) -> JsonObject:
    if type(obj) is not dict:
        raise MalformedOTLP(f"expected an object, got {_shown(obj)}", where)
    return obj


def _span_id(raw: Any, what: str) -> str:
    """`text_id_to_hex` for a span id, with hex of the right length (the usual case) first."""
    if type(raw) is str and len(raw) == 16:
        try:
            found = bytes.fromhex(raw)
        except ValueError:
            found = b""
        if len(found) == SPAN_ID_BYTES:
            return found.hex()
    return text_id_to_hex(raw, SPAN_ID_BYTES, what)


# -- walks ------------------------------------------------------------------------------------


def walk_traces(req: JsonObject, out: list[Span], *, lazy: bool) -> tuple[int, int]:
    """Append one `Span` per span in the request object to `out`; return (seen, GenAI)."""
    seen = genai = 0
    key_heads = candidate.KEY_PREFIXES_BY_FIRST_CHAR  # rebuilt on registration
    append = out.append
    # Paths for messages (`resourceSpans[0].scopeSpans[1]`) are only written on the way out.
    for i, rs in enumerate(_list(req, "resourceSpans", "resource_spans", "")):
        if type(rs) is not dict:
            raise MalformedOTLP(f"expected an object, got {_shown(rs)}", f"resourceSpans[{i}]")
        try:
            resource = attributes(_object(rs.get("resource") or {}, "").get("attributes"))
        except MalformedOTLP as exc:
            exc.where = f"resourceSpans[{i}].resource"
            raise
        scope_spans = rs.get("scopeSpans") or rs.get("scope_spans")
        if not scope_spans:
            scope_spans = _list(
                rs,
                "instrumentationLibrarySpans",
                "instrumentation_library_spans",
                f"resourceSpans[{i}]",
            )
        for j, ss in _objects(scope_spans, "scopeSpans", f"resourceSpans[{i}]"):
            scope = (
                ss.get("scope")
                or ss.get("instrumentationLibrary")
                or ss.get("instrumentation_library")
                or {}
            )
            if type(scope) is not dict:
                raise MalformedOTLP(
                    f"expected an object, got {_shown(scope)}",
                    f"resourceSpans[{i}].scopeSpans[{j}].scope",
                )
            scope_name = scope.get("name") or ""
            scope_version = scope.get("version") or ""
            if type(scope_name) is not str or type(scope_version) is not str:
                raise MalformedOTLP(
                    "scope name and version must be strings",
                    f"resourceSpans[{i}].scopeSpans[{j}].scope",
                )
            whole_scope = not lazy or is_genai_scope(scope_name)
            spans = ss.get("spans")
            if not spans:
                continue
            if type(spans) is not list:
                raise MalformedOTLP(
                    f"spans must be a list, got {_shown(spans)}",
                    f"resourceSpans[{i}].scopeSpans[{j}]",
                )
            for k, s in enumerate(spans):
                try:
                    if type(s) is not dict:
                        raise MalformedOTLP(f"expected an object, got {_shown(s)}")
                    name = s.get("name") or ""
                    if type(name) is not str:
                        raise MalformedOTLP(f"name must be a string, got {_shown(name)}")
                    kvs = s.get("attributes") or ()
                    full = whole_scope or is_genai_name(name)
                    if not full:
                        for kv in kvs:  # inlined `is_genai_key`: this loop is the hot path
                            key = kv.get("key")
                            if type(key) is not str:
                                continue
                            heads = key_heads.get(key[:1])
                            if heads is not None and key.startswith(heads):
                                full = True
                                break
                    raw = s.get("traceId") or s.get("trace_id")
                    trace_id = text_id_to_hex(raw, TRACE_ID_BYTES, "trace id")
                    span_id = _span_id(s.get("spanId") or s.get("span_id"), "span id")
                    raw = s.get("parentSpanId") or s.get("parent_span_id")
                    parent_id = _span_id(raw, "parent span id") if raw else None
                    status = s.get("status")
                    if status:
                        if type(status) is not dict:
                            raise MalformedOTLP(f"status must be an object, got {_shown(status)}")
                        status_code = _enum(status.get("code") or 0, STATUS_CODE_NAMES, "status")
                        status_message = status.get("message") or ""
                        if type(status_message) is not str:
                            raise MalformedOTLP(f"bad status message: {_shown(status_message)}")
                    else:
                        status_code, status_message = 0, ""
                    kind = s.get("kind") or 0
                    if type(kind) is not int:
                        kind = _enum(kind, SPAN_KIND_NAMES, "span kind")
                    # Times are decimal strings in OTLP/JSON: `_time`'s work, inlined for them
                    # (up to 20 digits: longer ones take `_time`'s way, with its messages).
                    raw = s.get("startTimeUnixNano") or s.get("start_time_unix_nano") or 0
                    start = (
                        int(raw) if type(raw) is str and len(raw) <= 20 and raw.isdecimal() else raw
                    )
                    if type(start) is not int or not 0 <= start <= _U64:
                        start = _time(raw, "start")
                    raw = s.get("endTimeUnixNano") or s.get("end_time_unix_nano") or 0
                    end = (
                        int(raw) if type(raw) is str and len(raw) <= 20 and raw.isdecimal() else raw
                    )
                    if type(end) is not int or not 0 <= end <= _U64:
                        end = _time(raw, "end")
                    # By position, in `Span`'s field order (checked by otlp_common).
                    span = Span(
                        trace_id,
                        span_id,
                        parent_id,
                        name,
                        start,
                        end,
                        kind,
                        status_code,
                        status_message,
                        attributes(kvs) if full else {},
                        events(s) if full and s.get("events") else [],
                        resource,
                        scope_name,
                        scope_version,
                        s,
                    )
                except MalformedOTLP as exc:
                    exc.where = f"resourceSpans[{i}].scopeSpans[{j}].spans[{k}]"
                    raise
                except (AttributeError, TypeError, ValueError) as exc:
                    raise MalformedOTLP(
                        f"malformed span: {exc}", f"resourceSpans[{i}].scopeSpans[{j}].spans[{k}]"
                    ) from None
                seen += 1
                if full:
                    genai += 1
                append(span)
    return seen, genai


def walk_logs(req: JsonObject, out: list[LogRecord], *, lazy: bool) -> tuple[int, int]:
    """Append the GenAI log records of the request object to `out` (all if not `lazy`);
    return (records seen, records kept)."""
    seen = kept = 0
    event_prefixes = candidate.GENAI_EVENT_PREFIXES
    append = out.append
    # Paths for messages are only written on the way out, as in `walk_traces`.
    for i, rl in enumerate(_list(req, "resourceLogs", "resource_logs", "")):
        if type(rl) is not dict:
            raise MalformedOTLP(f"expected an object, got {_shown(rl)}", f"resourceLogs[{i}]")
        scope_logs = rl.get("scopeLogs") or rl.get("scope_logs")
        if not scope_logs:
            continue
        for j, sl in _objects(scope_logs, "scopeLogs", f"resourceLogs[{i}]"):
            scope = sl.get("scope") or {}
            if type(scope) is not dict:
                raise MalformedOTLP(
                    f"expected an object, got {_shown(scope)}",
                    f"resourceLogs[{i}].scopeLogs[{j}].scope",
                )
            scope_name = scope.get("name") or ""
            if type(scope_name) is not str:
                raise MalformedOTLP(
                    "scope name must be a string", f"resourceLogs[{i}].scopeLogs[{j}].scope"
                )
            whole_scope = not lazy or is_genai_scope(scope_name)
            records = sl.get("logRecords") or sl.get("log_records")
            if not records:
                continue
            if type(records) is not list:
                raise MalformedOTLP(
                    f"logRecords must be a list, got {_shown(records)}",
                    f"resourceLogs[{i}].scopeLogs[{j}]",
                )
            for k, lr in enumerate(records):
                seen += 1
                try:
                    if type(lr) is not dict:
                        raise MalformedOTLP(f"expected an object, got {_shown(lr)}")
                    event_name = lr.get("eventName") or lr.get("event_name") or ""
                    if type(event_name) is not str:
                        raise MalformedOTLP(f"event name must be a string: {_shown(event_name)}")
                    kvs = lr.get("attributes") or ()
                    keep = whole_scope or event_name.startswith(event_prefixes)
                    if not keep:
                        for kv in kvs:
                            key = kv.get("key")
                            if type(key) is not str:
                                continue
                            if is_genai_key(key):
                                keep = True
                                break
                            if key == "event.name":
                                named = any_value(kv.get("value"))
                                if isinstance(named, str) and named.startswith(event_prefixes):
                                    keep = True
                                    break
                    if not keep:
                        continue
                    raw = lr.get("traceId") or lr.get("trace_id")
                    trace_id = text_id_to_hex(raw, TRACE_ID_BYTES, "trace id") if raw else ""
                    raw = lr.get("spanId") or lr.get("span_id")
                    span_id = _span_id(raw, "span id") if raw else ""
                    record_attributes = attributes(kvs)
                    if not event_name:
                        named = record_attributes.get("event.name")
                        event_name = named if isinstance(named, str) else ""
                    raw = (
                        lr.get("timeUnixNano")
                        or lr.get("time_unix_nano")
                        or lr.get("observedTimeUnixNano")
                        or lr.get("observed_time_unix_nano")
                        or 0
                    )
                    time = (
                        int(raw) if type(raw) is str and len(raw) <= 20 and raw.isdecimal() else raw
                    )
                    if type(time) is not int or not 0 <= time <= _U64:
                        time = _time(raw, "log")
                    # By position, in `LogRecord`'s field order (checked at import, above).
                    record = LogRecord(
                        trace_id,
                        span_id,
                        event_name,
                        time,
                        any_value(lr.get("body")),
                        record_attributes,
                    )
                except MalformedOTLP as exc:
                    exc.where = f"resourceLogs[{i}].scopeLogs[{j}].logRecords[{k}]"
                    raise
                except (AttributeError, TypeError, ValueError) as exc:
                    raise MalformedOTLP(
                        f"malformed log record: {exc}",
                        f"resourceLogs[{i}].scopeLogs[{j}].logRecords[{k}]",
                    ) from None
                kept += 1
                append(record)
    return seen, kept


Outcome = tuple[Any, ...]


def read(text: str, lazy: bool = True) -> Outcome:
    """What the old path made of `text` (one JSON document): ("ok", spans with skeletons
    hydrated, log records, spans seen, GenAI spans, log records seen) or ("error", problem),
    problems worded as `decode` words them."""
    try:
        document = json.loads(text)
    except (ValueError, RecursionError):
        return ("error", "json")
    document, _ = mend_surrogates(document)
    spans: list[Span] = []
    logs: list[LogRecord] = []
    seen = genai = kept = 0
    try:
        for item in document if type(document) is list else [document]:
            if type(item) is not dict:
                name = type(item).__name__
                return ("error", f"not OTLP: expected a JSON object with resourceSpans, got {name}")
            if "resourceSpans" in item or "resource_spans" in item:
                n, g = walk_traces(item, spans, lazy=lazy)
                seen, genai = seen + n, genai + g
            elif "resourceLogs" in item or "resource_logs" in item:
                kept += walk_logs(item, logs, lazy=lazy)[0]
            elif item and not any(
                k in item
                for k in (
                    "resourceMetrics",
                    "resource_metrics",
                    "resourceProfiles",
                    "resource_profiles",
                )
            ):
                keys = ", ".join(repr(k) for k in list(item)[:5])
                return ("error", f"not OTLP: expected resourceSpans, got keys {keys}")
        for one in spans:
            if not one.attributes and not one.events:
                one.attributes = attributes(one.source.get("attributes"))
                one.events = events(one.source)
    except MalformedOTLP as exc:
        return ("error", str(exc))
    except (AttributeError, IndexError, KeyError, OverflowError, TypeError, ValueError) as exc:
        return ("error", f"malformed OTLP ({type(exc).__name__}: {exc})")
    return ("ok", *shown(spans, logs), seen, genai, kept)


def decoded(body: bytes, lazy: bool = True) -> Outcome:
    """What `decode_bytes` (the wire core's reader) makes of `body`, skeletons hydrated, worded
    as `read` words it (no string limit, which `read` does not apply)."""
    from attest_otel.errors import InputError
    from attest_otel.ingest.decode import decode_bytes, hydrate

    try:
        found = decode_bytes(body, "application/json", lazy=lazy, max_attribute_chars=None)
        spans = [hydrate(s, max_attribute_chars=None) for s in found.spans]
    except InputError as exc:
        return ("error", "json" if exc.problem.startswith("invalid JSON") else exc.problem)
    return (
        "ok",
        *shown(spans, found.logs),
        found.span_count,
        found.genai_span_count,
        found.log_count,
    )


def shown(spans: list[Span], logs: list[LogRecord]) -> tuple[list[str], list[str]]:
    """Spans (all but `source`) and log records as text: NaN equals NaN, -0.0 differs from 0.0."""
    return (
        [
            repr(
                (
                    s.trace_id,
                    s.span_id,
                    s.parent_id,
                    s.name,
                    s.start_ns,
                    s.end_ns,
                    s.kind,
                    s.status_code,
                    s.status_message,
                    s.attributes,
                    [(e.name, e.time_ns, e.attributes) for e in s.events],
                    s.resource,
                    s.scope_name,
                    s.scope_version,
                )
            )
            for s in spans
        ],
        [
            repr((r.trace_id, r.span_id, r.event_name, r.time_ns, r.body, r.attributes))
            for r in logs
        ],
    )
