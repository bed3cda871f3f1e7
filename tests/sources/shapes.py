"""Turn a fixture trace into what each backend's API would answer for it.

Each function follows the backend's documented shape (docs/jaeger-tempo-grafana.md says
which endpoints attest-otel reads): Jaeger api_v3's `{"result": ...}` wrapper, classic Jaeger's JSON
(microseconds, tags, logs, references, processes), Tempo's gogo-jsonpb JSON (`batches`,
base64 ids, enum names) and protobuf, Phoenix's REST spans. `expected_*` applies to the
original spans exactly the losses each shape is documented to have, so a test can compare
whole spans.
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from opentelemetry.proto.trace.v1.trace_pb2 import TracesData

from attest_otel.ingest.decode import decode_file, hydrate
from attest_otel.model import Event, Span

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "traces"

_KIND_NAMES = {
    0: "unspecified",
    1: "internal",
    2: "server",
    3: "client",
    4: "producer",
    5: "consumer",
}
_PB_KIND = [
    "SPAN_KIND_UNSPECIFIED",
    "SPAN_KIND_INTERNAL",
    "SPAN_KIND_SERVER",
    "SPAN_KIND_CLIENT",
    "SPAN_KIND_PRODUCER",
    "SPAN_KIND_CONSUMER",
]
_PB_STATUS = ["STATUS_CODE_UNSET", "STATUS_CODE_OK", "STATUS_CODE_ERROR"]


def fixture(name: str) -> Path:
    return FIXTURES / f"{name}.json"


def otlp_document(name: str) -> dict[str, Any]:
    """The fixture's OTLP/JSON requests (one per line) merged into one request."""
    merged: list[Any] = []
    for line in fixture(name).read_text().splitlines():
        if line.strip():
            doc = json.loads(line)
            assert "resourceLogs" not in doc, "these helpers carry spans only"
            merged.extend(doc.get("resourceSpans", []))
    return {"resourceSpans": merged}


def original_spans(name: str) -> list[Span]:
    """The fixture as the file decoder reads it, every span hydrated."""
    return [hydrate(s) for s in decode_file(fixture(name), lazy=False).spans]


def trace_id_of(name: str) -> str:
    return original_spans(name)[0].trace_id


# -- Jaeger ---------------------------------------------------------------------------------


def jaeger_v3(name: str, *, wrapped: bool = True) -> bytes:
    doc = otlp_document(name)
    return json.dumps({"result": doc} if wrapped else doc).encode()


def _jaeger_tag(key: str, value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"key": key, "type": "bool", "value": value}
    if isinstance(value, int):
        return {"key": key, "type": "int64", "value": value}
    if isinstance(value, float):
        return {"key": key, "type": "float64", "value": value}
    if isinstance(value, bytes):
        return {"key": key, "type": "binary", "value": base64.b64encode(value).decode()}
    if isinstance(value, list | dict):
        # The Collector's translator writes arrays and maps as compact JSON strings.
        return {"key": key, "type": "string", "value": json.dumps(value, separators=(",", ":"))}
    return {"key": key, "type": "string", "value": value}


def jaeger_classic(spans: list[Span], *, short_ids: bool = False) -> dict[str, Any]:
    """The classic `/api/traces/{id}` answer for these spans (as the OTLP -> Jaeger
    translator writes them: kind, status and scope as tags, events as logs)."""
    processes: dict[str, Any] = {}
    pids: dict[str, str] = {}
    out_spans = []
    for s in spans:
        key = json.dumps(s.resource, sort_keys=True, default=str)
        if key not in pids:
            pid = pids[key] = f"p{len(pids) + 1}"
            processes[pid] = {
                "serviceName": s.resource.get("service.name", ""),
                "tags": [_jaeger_tag(k, v) for k, v in s.resource.items() if k != "service.name"],
            }
        tags = [_jaeger_tag(k, v) for k, v in s.attributes.items()]
        if s.scope_name:
            tags.append(_jaeger_tag("otel.scope.name", s.scope_name))
        if s.scope_version:
            tags.append(_jaeger_tag("otel.scope.version", s.scope_version))
        if s.kind:
            tags.append(_jaeger_tag("span.kind", _KIND_NAMES[s.kind]))
        if s.status_code == 2:
            tags += [_jaeger_tag("otel.status_code", "ERROR"), _jaeger_tag("error", True)]
        elif s.status_code == 1:
            tags.append(_jaeger_tag("otel.status_code", "OK"))
        if s.status_message:
            tags.append(_jaeger_tag("otel.status_description", s.status_message))
        trace_id = s.trace_id.lstrip("0").rjust(16, "0") if short_ids else s.trace_id
        refs = []
        if s.parent_id:
            refs.append({"refType": "CHILD_OF", "traceID": trace_id, "spanID": s.parent_id})
        logs = [
            {
                "timestamp": e.time_ns // 1000,
                "fields": [_jaeger_tag("event", e.name)]
                + [_jaeger_tag(k, v) for k, v in e.attributes.items()],
            }
            for e in s.events
        ]
        out_spans.append(
            {
                "traceID": trace_id,
                "spanID": s.span_id,
                "flags": 1,
                "operationName": s.name,
                "references": refs,
                "startTime": s.start_ns // 1000,
                "duration": (s.end_ns - s.start_ns) // 1000,
                "tags": tags,
                "logs": logs,
                "processID": pids[key],
                "warnings": None,
            }
        )
    trace_id = spans[0].trace_id
    return {
        "data": [
            {"traceID": trace_id, "spans": out_spans, "processes": processes, "warnings": None}
        ],
        "total": 0,
        "limit": 0,
        "offset": 0,
        "errors": None,
    }


def _stringify(attrs: dict[str, Any]) -> dict[str, Any]:
    return {
        k: json.dumps(v, separators=(",", ":")) if isinstance(v, list | dict) else v
        for k, v in attrs.items()
    }


def expected_from_jaeger_classic(spans: list[Span]) -> list[Span]:
    """What classic JSON keeps: microseconds, arrays as JSON strings, no source."""
    out = []
    for s in spans:
        start_us = s.start_ns // 1000
        out.append(
            dataclasses.replace(
                s,
                start_ns=start_us * 1000,
                end_ns=(start_us + (s.end_ns - s.start_ns) // 1000) * 1000,
                attributes=_stringify(s.attributes),
                resource=_stringify(s.resource),
                events=[
                    Event(e.name, e.time_ns // 1000 * 1000, _stringify(e.attributes))
                    for e in s.events
                ],
                source=None,
            )
        )
    return out


# -- Tempo ----------------------------------------------------------------------------------


def _b64(hex_id: str) -> str:
    return base64.b64encode(bytes.fromhex(hex_id)).decode()


def _jsonpb(doc: dict[str, Any], *, enum_names: bool) -> dict[str, Any]:
    """OTLP/JSON -> protobuf's JSON mapping as gogo-jsonpb writes it (base64 ids)."""
    doc = copy.deepcopy(doc)
    for rs in doc["resourceSpans"]:
        for ss in rs.get("scopeSpans", []):
            for span in ss["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if span.get(key):
                        span[key] = _b64(span[key])
                for link in span.get("links", []):
                    link["traceId"], link["spanId"] = _b64(link["traceId"]), _b64(link["spanId"])
                if enum_names:
                    span["kind"] = _PB_KIND[int(span.get("kind", 0))]
                    status = span.setdefault("status", {})
                    status["code"] = _PB_STATUS[int(status.get("code", 0))]
    return doc


def tempo_v1_json(name: str, *, old_scope_key: bool = False) -> bytes:
    """`/api/traces/{id}` JSON: `batches`, base64 ids, enum names."""
    doc = _jsonpb(otlp_document(name), enum_names=True)
    batches = doc["resourceSpans"]
    if old_scope_key:
        for rs in batches:
            rs["instrumentationLibrarySpans"] = [
                {"instrumentationLibrary": ss.get("scope", {}), "spans": ss["spans"]}
                for ss in rs.pop("scopeSpans")
            ]
    return json.dumps({"batches": batches}).encode()


def tempo_v2_json(name: str, *, status: str = "COMPLETE") -> bytes:
    doc = _jsonpb(otlp_document(name), enum_names=False)
    return json.dumps({"trace": {"resourceSpans": doc["resourceSpans"]}, "status": status}).encode()


def tempo_protobuf(name: str) -> bytes:
    """`tempopb.Trace` bytes: field 1 = repeated ResourceSpans, as OTLP's TracesData."""
    doc = _jsonpb(otlp_document(name), enum_names=False)
    message = json_format.ParseDict(doc, TracesData(), ignore_unknown_fields=True)
    return bytes(message.SerializeToString())


# -- Phoenix --------------------------------------------------------------------------------


def _iso(ns: int) -> str:
    moment = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=ns // 1000)
    return moment.isoformat()


def phoenix_spans(spans: list[Span]) -> dict[str, Any]:
    """Phoenix's `/v1/projects/{p}/spans` answer: its own span shape, ISO times."""
    data = []
    for i, s in enumerate(spans):
        attrs = dict(s.attributes)
        kind = attrs.pop("openinference.span.kind", "UNKNOWN")
        data.append(
            {
                "id": f"U3BhbjE{i}",
                "name": s.name,
                "context": {"trace_id": s.trace_id, "span_id": s.span_id},
                "span_kind": kind,
                "parent_id": s.parent_id,
                "start_time": _iso(s.start_ns),
                "end_time": _iso(s.end_ns),
                "status_code": ["UNSET", "OK", "ERROR"][s.status_code],
                "status_message": s.status_message,
                "attributes": attrs,
                "events": [
                    {"name": e.name, "timestamp": _iso(e.time_ns), "attributes": e.attributes}
                    for e in s.events
                ],
            }
        )
    return {"data": data, "next_cursor": None}


def expected_from_phoenix(spans: list[Span], project: str) -> list[Span]:
    """What Phoenix keeps: microseconds, no kind, no resource or scope (project instead)."""
    return [
        dataclasses.replace(
            s,
            start_ns=s.start_ns // 1000 * 1000,
            end_ns=s.end_ns // 1000 * 1000,
            kind=0,
            resource={"openinference.project.name": project},
            scope_name="",
            scope_version="",
            events=[Event(e.name, e.time_ns // 1000 * 1000, dict(e.attributes)) for e in s.events],
            source=None,
        )
        for s in spans
    ]
