"""Transport spans (HTTP, database) the JSON reader left as skeletons: the generic reader says
None of them whatever their values, so a trace of nothing else is read without hydrating
them; a trace the generic reader does read gets them hydrated, as before, and a span that
cannot be hydrated counts as unreadable there (`runs._read_generic`)."""

from __future__ import annotations

import json
from typing import Any

from attest_otel.ingest.decode import decode_bytes, is_skeleton
from attest_otel.pipeline import read

TRACE = "0af7651916cd43dd8448eb211c80319c"


def _span(i: int, name: str, attrs: dict[str, Any], parent: int | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "traceId": TRACE,
        "spanId": f"{i + 1:016x}",
        "name": name,
        "startTimeUnixNano": str(10**18 + i * 1000),
        "endTimeUnixNano": str(10**18 + i * 1000 + 500),
        "attributes": [
            {"key": k, "value": v if isinstance(v, dict) else {"stringValue": v}}
            for k, v in attrs.items()
        ],
    }
    if parent is not None:
        out["parentSpanId"] = f"{parent + 1:016x}"
    return out


def _body(spans: list[dict[str, Any]]) -> bytes:
    scope = {"scope": {"name": "shop.app"}, "spans": spans}
    return json.dumps({"resourceSpans": [{"scopeSpans": [scope]}]}).encode()


HTTP = [
    _span(0, "GET /orders", {"http.method": "GET", "url.path": "/orders"}),
    _span(1, "SELECT", {"db.system": "postgresql"}, parent=0),
    _span(2, "bad", {"http.status_code": {"intValue": "abc"}}, parent=0),  # cannot be read
]


def test_a_trace_of_transport_spans_only_is_read_without_hydrating_them() -> None:
    decoded = decode_bytes(_body(HTTP))
    [trace] = read(decoded.spans, decoded.logs)
    assert (trace.runs, trace.dialects, trace.anomalies) == ([], [], {})
    assert all(is_skeleton(s) for s in decoded.spans)


def test_a_trace_the_generic_reader_reads_has_its_transport_spans_hydrated_as_before() -> None:
    tool = _span(3, "tool: lookup_order", {"input": '{"id": 1}', "output": "ok"}, parent=0)
    decoded = decode_bytes(_body([*HTTP, tool]))
    [trace] = read(decoded.spans, decoded.logs)
    assert trace.dialects == ["generic"]
    assert trace.anomalies == {"unreadable_spans": 1}  # the span whose value is no integer
    calls = [s.tool_call.name for r in trace.runs for s in r.steps if s.tool_call]
    assert calls == ["lookup_order"]
    assert [is_skeleton(s) for s in decoded.spans] == [False, False, True, False]
    assert decoded.spans[0].attributes == {"http.method": "GET", "url.path": "/orders"}
