"""Grafana Tempo: a trace by id from the query frontend (port 3200 by default).

1. `GET /api/traces/{id}` with `Accept: application/protobuf`: Tempo answers with a
   `tempopb.Trace`, whose field 1 is `repeated ResourceSpans` exactly like OTLP's
   `ExportTraceServiceRequest`, so the OTLP protobuf decoder reads it as it is. This is
   the exact form: no JSON dialect to guess.
2. When that route is missing (404 that is not Tempo's "trace not found"), refuses
   protobuf, or answers JSON anyway: `GET /api/v2/traces/{id}` as JSON,
   `{"trace": {...}, "status": "COMPLETE" | "PARTIAL", "message": ...}`.

Tempo's JSON is gogo-jsonpb, "mostly" OTLP/JSON: the top-level key is `batches` rather
than `resourceSpans` in older versions, ids are base64 (protobuf's JSON mapping, which
the decoder reads per value), and enums may be names. Both keys are accepted.

Multi-tenant Tempo wants `X-Scope-OrgID`; Grafana Cloud wants basic auth: both are
`--header`s.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from attest_otel.errors import InputError, SourceError
from attest_otel.ingest.decode import Decoded, decode_bytes
from attest_otel.sources.base import (
    TraceNotFoundError,
    join_url,
    normalize_trace_id,
    only_trace,
)
from attest_otel.sources.http import (
    HttpClient,
    HttpOptions,
    Response,
    http_error,
    unexpected_body,
)
from attest_otel.sources.kind import SourceKind

__all__ = ["TempoSource", "otlp_json_from_tempo"]

_log = logging.getLogger(__name__)

_PROTOBUF = "application/protobuf"
_NOT_PROTOBUF = frozenset({406, 415})


class TempoSource:
    kind = "tempo"

    def __init__(self, url: str, options: HttpOptions | None = None) -> None:
        self.location = url
        self._http = HttpClient("tempo", options)

    def close(self) -> None:
        self._http.close()

    def _not_found(self, tid: str) -> TraceNotFoundError:
        return TraceNotFoundError(tid, f"tempo at {self.location}")

    def fetch(self, trace_id: str) -> Decoded:
        tid = normalize_trace_id(trace_id)
        r = self._http.get(join_url(self.location, "api/traces", tid), accept=_PROTOBUF)
        if r.status == 200 and r.body.strip() and not _is_html(r):
            decoded = self._decode(r, tid)
            if decoded.spans:
                return decoded
        elif r.status not in (200, 404, *_NOT_PROTOBUF):
            raise _http_error(self.location, r)
        # Missing route, an empty answer, or a 404 that may mean either: v2 says which.
        r2 = self._http.get(
            join_url(self.location, "api/v2/traces", tid), accept="application/json"
        )
        if r2.status == 404:
            raise self._not_found(tid)
        if r2.status != 200:
            raise _http_error(self.location, r2)
        decoded = self._decode(r2, tid)
        if not decoded.spans:
            raise self._not_found(tid)
        return decoded

    def _decode(self, r: Response, tid: str) -> Decoded:
        return self._http.parse(r, lambda: self._decode_body(r, tid))

    def _decode_body(self, r: Response, tid: str) -> Decoded:
        try:
            if r.is_json:
                body = json.loads(r.body)
                data = json.dumps(otlp_json_from_tempo(body, self.location)).encode()
                decoded = decode_bytes(data, "application/json", source=r.url)
            else:
                decoded = decode_bytes(r.body, "application/x-protobuf", source=r.url)
        except (ValueError, UnicodeDecodeError) as e:
            raise _unexpected(self.location, r, f"not JSON ({e})") from None
        except InputError as e:
            raise _unexpected(self.location, r, e.problem) from None
        return only_trace(decoded, tid)


def otlp_json_from_tempo(body: Any, location: str = "tempo") -> dict[str, Any]:
    """Tempo's JSON (v1 `{"batches": ...}`, v2 `{"trace": {...}}`) -> an OTLP/JSON request."""
    if not isinstance(body, dict):
        raise ValueError("expected a JSON object")
    trace = body.get("trace", body)
    status = body.get("status")
    if isinstance(status, str) and status.upper() == "PARTIAL":
        _log.warning(
            "tempo at %s returned a partial trace (%s); grading what arrived",
            location,
            body.get("message") or "some blocks were not searched",
        )
    if trace is None:
        return {"resourceSpans": []}
    if not isinstance(trace, dict):
        raise ValueError("`trace` is not an object")
    batches = trace.get("resourceSpans", trace.get("resource_spans", trace.get("batches")))
    if batches is None:
        if trace:
            keys = ", ".join(repr(k) for k in list(trace)[:5])
            raise ValueError(f"expected batches or resourceSpans, got keys {keys}")
        batches = []
    return {"resourceSpans": batches}


def _is_html(r: Response) -> bool:
    """A reverse proxy's or UI's page where the API should be: not an answer, try v2."""
    return r.content_type.lower().startswith("text/html")


_CREDENTIALS = "'Authorization=Basic <base64>' or 'X-Scope-OrgID=<tenant>'"


def _http_error(location: str, r: Response) -> SourceError:
    return http_error("tempo", location, r, _CREDENTIALS)


def _unexpected(location: str, r: Response, problem: str) -> SourceError:
    return unexpected_body("tempo", location, r, problem)


KIND = SourceKind("tempo", "url", "http://localhost:3200", TempoSource)
