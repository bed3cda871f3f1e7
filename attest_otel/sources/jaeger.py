"""Jaeger: a trace by id from the query service (port 16686 by default).

Two APIs, tried in this order:

1. `GET /api/v3/traces/{id}` (Jaeger v2, and v1 since api_v3): OTLP `TracesData` as OTLP
   JSON. Current builds wrap it as `{"result": {...}}`; older ones return it bare, and the
   grpc-gateway builds stream one `{"result": ...}` document per chunk, with errors
   in-band as `{"error": {"httpCode": 404, ...}}` under an HTTP 200. All are accepted.
2. `GET /api/traces/{id}`, the classic JSON the UI reads, when v3 is absent (404 without
   a Jaeger error body, a 405/501, or the UI's HTML page served for an unknown path).
   It is converted back to spans by undoing the OTLP -> Jaeger mapping:
   microseconds -> nanoseconds, tags -> attributes, logs -> events (the `event` field is
   the name), the first CHILD_OF reference (else FOLLOWS_FROM) in the same trace -> parent,
   process -> resource, `span.kind` -> kind, `otel.status_code` / `error` -> status,
   `otel.scope.*` (older `otel.library.*`) -> scope.

What cannot come back from classic JSON: nanoseconds below the microsecond, array
attributes (Jaeger stored them as JSON strings; they stay strings, as the Collector's own
Jaeger receiver leaves them), links, and a span kind of "unspecified" vs "internal" when
the writer left the tag out.
"""

from __future__ import annotations

import base64
import json
import logging
from typing import Any

from attest_otel.errors import InputError, SourceError
from attest_otel.ingest.decode import Decoded, decode_bytes
from attest_otel.model import STATUS_ERROR, STATUS_OK, STATUS_UNSET, Event, Span
from attest_otel.sources.base import (
    TraceNotFoundError,
    decoded_from_spans,
    join_url,
    normalize_trace_id,
    only_trace,
    parse_hex_id,
)
from attest_otel.sources.http import (
    HttpClient,
    HttpOptions,
    Response,
    http_error,
    unexpected_body,
)
from attest_otel.sources.kind import SourceKind

__all__ = ["JaegerSource", "spans_from_classic"]

_log = logging.getLogger(__name__)

_KINDS = {"internal": 1, "server": 2, "client": 3, "producer": 4, "consumer": 5}
_STATUS = {"OK": STATUS_OK, "ERROR": STATUS_ERROR, "UNSET": STATUS_UNSET}
_SYNTHETIC_TAGS = frozenset(
    {
        "span.kind",
        "otel.status_code",
        "otel.status_description",
        "otel.scope.name",
        "otel.scope.version",
        "otel.library.name",
        "otel.library.version",
        "w3c.tracestate",
        "internal.span.format",
    }
)
"""Tags the OTLP -> Jaeger translation adds for span fields; they go back into those fields."""
_V3_ABSENT_STATUSES = frozenset({404, 405, 501})


class JaegerSource:
    kind = "jaeger"

    def __init__(self, url: str, options: HttpOptions | None = None) -> None:
        self.location = url
        self._http = HttpClient("jaeger", options)

    def close(self) -> None:
        self._http.close()

    def fetch(self, trace_id: str) -> Decoded:
        tid = normalize_trace_id(trace_id)
        found = self._v3(tid)
        if found is not None and found.spans:
            return found
        return self._classic(tid)

    def _not_found(self, tid: str) -> TraceNotFoundError:
        return TraceNotFoundError(tid, f"jaeger at {self.location}")

    # -- api_v3 ---------------------------------------------------------------------------

    def _v3(self, tid: str) -> Decoded | None:
        """The trace from api_v3, or None when this Jaeger has no api_v3 (or no such trace:
        the classic API then gets the last word, and the error message)."""
        r = self._http.get(join_url(self.location, "api/v3/traces", tid), accept="application/json")
        if r.status in _V3_ABSENT_STATUSES or (r.status == 200 and not _json_body(r)):
            if r.status == 404 and _v3_error(r) is not None:
                raise self._not_found(tid)
            _log.debug("jaeger api_v3 not available at %s (HTTP %d)", self.location, r.status)
            return None
        if r.status != 200:
            raise _http_error(self.location, r)
        return self._http.parse(r, lambda: self._v3_body(r, tid))

    def _v3_body(self, r: Response, tid: str) -> Decoded | None:
        try:
            documents = _json_documents(r.body)
        except ValueError as e:
            raise _unexpected(self.location, r, str(e)) from None
        requests: list[Any] = []
        for document in documents:
            if not isinstance(document, dict):
                raise _unexpected(self.location, r, "expected a JSON object")
            error = document.get("error")
            if isinstance(error, dict):
                if error.get("httpCode") == 404 or error.get("grpcCode") == 5:
                    raise self._not_found(tid)
                raise SourceError(
                    f"jaeger at {self.location} failed: {error.get('message') or error}"
                )
            result = document.get("result", document)
            if not isinstance(result, dict):
                raise _unexpected(self.location, r, "`result` is not an object")
            if "resourceSpans" not in result and "resource_spans" not in result:
                if result:
                    return None  # some other JSON: not an api_v3 answer
                continue
            requests.append(result)
        if not requests:
            return None
        data = json.dumps(requests).encode()
        try:
            decoded = decode_bytes(data, "application/json", source=r.url)
        except InputError as e:
            raise _unexpected(self.location, r, e.problem) from None
        return only_trace(decoded, tid)

    # -- classic ----------------------------------------------------------------------------

    def _classic(self, tid: str) -> Decoded:
        r = self._http.get(join_url(self.location, "api/traces", tid), accept="application/json")
        if r.status == 404:
            raise self._not_found(tid)
        if r.status != 200:
            raise _http_error(self.location, r)
        return self._http.parse(r, lambda: self._classic_body(r, tid))

    def _classic_body(self, r: Response, tid: str) -> Decoded:
        try:
            body = json.loads(r.body)
        except (ValueError, UnicodeDecodeError) as e:
            raise _unexpected(self.location, r, f"not JSON ({e})") from None
        if not isinstance(body, dict) or not isinstance(body.get("data"), list | None):
            raise _unexpected(self.location, r, 'expected {"data": [trace, ...]}')
        errors = body.get("errors") or []
        traces = body.get("data") or []
        if not traces:
            if any(isinstance(e, dict) and e.get("code") == 404 for e in errors) or not errors:
                raise self._not_found(tid)
            raise SourceError(f"jaeger at {self.location} failed: {_error_text(errors)}")
        try:
            spans = spans_from_classic(body)
        except (KeyError, TypeError, ValueError) as e:
            raise _unexpected(self.location, r, f"malformed span: {e}") from None
        decoded = only_trace(decoded_from_spans(spans), tid)
        if not decoded.spans:
            raise self._not_found(tid)
        return decoded


def spans_from_classic(body: dict[str, Any]) -> list[Span]:
    """Spans of every trace in a classic `/api/traces` answer (`{"data": [...]}`)."""
    out: list[Span] = []
    for trace in body.get("data") or []:
        resources: dict[str, dict[str, Any]] = {}
        for pid, process in (trace.get("processes") or {}).items():
            resource = _tags(process.get("tags"))
            service = process.get("serviceName")
            if service:
                resource["service.name"] = service
            resources[pid] = resource
        for raw in trace.get("spans") or []:
            out.append(_span(raw, resources))
    return out


def _span(raw: dict[str, Any], resources: dict[str, dict[str, Any]]) -> Span:
    trace_id = parse_hex_id(raw["traceID"], 16)
    attributes = _tags(raw.get("tags"))
    kind = _KINDS.get(str(attributes.get("span.kind", "")).lower(), 0)
    status_name = str(attributes.get("otel.status_code", "")).upper()
    status = _STATUS.get(status_name, STATUS_UNSET)
    error_tag = attributes.get("error")
    if isinstance(error_tag, str):
        error_tag = error_tag.lower() == "true"
    if status == STATUS_UNSET and error_tag is True:
        status = STATUS_ERROR
    if isinstance(error_tag, bool):
        del attributes["error"]
    message = str(attributes.get("otel.status_description", ""))
    scope_name = attributes.get("otel.scope.name", attributes.get("otel.library.name", ""))
    scope_version = attributes.get("otel.scope.version", attributes.get("otel.library.version", ""))
    for key in _SYNTHETIC_TAGS.intersection(attributes):
        del attributes[key]
    start_us = int(raw.get("startTime") or 0)
    duration_us = int(raw.get("duration") or 0)
    return Span(
        trace_id=trace_id,
        span_id=parse_hex_id(raw["spanID"], 8),
        parent_id=_parent(raw, trace_id),
        name=str(raw.get("operationName") or ""),
        start_ns=start_us * 1000,
        end_ns=(start_us + duration_us) * 1000,
        kind=kind,
        status_code=status,
        status_message=message,
        attributes=attributes,
        events=[_event(log) for log in raw.get("logs") or []],
        resource=resources.get(str(raw.get("processID")), {}),
        scope_name=str(scope_name),
        scope_version=str(scope_version),
    )


def _parent(raw: dict[str, Any], trace_id: str) -> str | None:
    """Jaeger's own rule (model.Span.ParentSpanID): the first CHILD_OF reference in the same
    trace, else the first FOLLOWS_FROM one; the deprecated `parentSpanID` field last."""
    follows: str | None = None
    for ref in raw.get("references") or []:
        if parse_hex_id(ref.get("traceID") or trace_id, 16) != trace_id:
            continue
        span_id = parse_hex_id(ref["spanID"], 8)
        kind = str(ref.get("refType", "")).upper()
        if kind == "CHILD_OF":
            return span_id
        if kind == "FOLLOWS_FROM" and follows is None:
            follows = span_id
    if follows is not None:
        return follows
    legacy = raw.get("parentSpanID")
    if legacy and legacy.strip("0"):
        return parse_hex_id(legacy, 8)
    return None


def _event(log: dict[str, Any]) -> Event:
    fields = _tags(log.get("fields"))
    name = fields.pop("event", "")
    return Event(name=str(name), time_ns=int(log.get("timestamp") or 0) * 1000, attributes=fields)


def _tags(tags: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for tag in tags or []:
        out[str(tag["key"])] = _tag_value(tag)
    return out


def _tag_value(tag: dict[str, Any]) -> Any:
    value: Any = tag.get("value")
    kind = str(tag.get("type", "string")).lower()
    if kind == "bool":
        return value if isinstance(value, bool) else str(value).lower() == "true"
    if kind == "int64":
        return int(value)
    if kind == "float64":
        return float(value)
    if kind == "binary":
        return base64.b64decode(value) if isinstance(value, str) else bytes(value or b"")
    return value if isinstance(value, str) else ("" if value is None else str(value))


# -- helpers shared by the two APIs ---------------------------------------------------------


def _json_documents(body: bytes) -> list[Any]:
    """One JSON document, or several in a row (the grpc-gateway's streamed chunks)."""
    text = body.decode("utf-8")
    decoder = json.JSONDecoder()
    out: list[Any] = []
    pos = 0
    while True:
        while pos < len(text) and text[pos] in " \t\r\n":
            pos += 1
        if pos >= len(text):
            return out
        document, pos = decoder.raw_decode(text, pos)
        out.append(document)


def _json_body(r: Response) -> bool:
    """Jaeger v2's api_v3 labels its JSON `text/plain` (v1.75.0 / v2.12.0, answers and
    errors alike): a body that opens as a JSON object counts as JSON whatever its label;
    the UI's HTML page, answering a Jaeger without api_v3, does not."""
    return r.is_json or r.body.lstrip()[:1] == b"{"


def _v3_error(r: Response) -> dict[str, Any] | None:
    if not _json_body(r):
        return None
    try:
        body = json.loads(r.body)
    except (ValueError, UnicodeDecodeError):
        return None
    error = body.get("error") if isinstance(body, dict) else None
    return error if isinstance(error, dict) else None


def _error_text(errors: list[Any]) -> str:
    parts = [str(e.get("msg") or e) if isinstance(e, dict) else str(e) for e in errors]
    return "; ".join(parts) or "unknown error"


_CREDENTIALS = "'Authorization=Bearer <token>'"


def _http_error(location: str, r: Response) -> SourceError:
    return http_error("jaeger", location, r, _CREDENTIALS)


def _unexpected(location: str, r: Response, problem: str) -> SourceError:
    return unexpected_body("jaeger", location, r, problem)


KIND = SourceKind("jaeger", "url", "http://localhost:16686", JaegerSource)
