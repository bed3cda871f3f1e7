"""The content policy applied to what the store keeps (and so to what it gives back).

The store is on disk and read back by `grade --trace-id`, `report` and the Grader API's
`GradeTrace`: with `content: truncate` or `drop` it must not keep more of a run's content
than the exporters may send. So, before a write:

- `truncate`: every string (and bytes) value in the stored spans is cut to `max_chars`
  (span, event, link and resource attributes at any depth, span names past the limit,
  status messages), and the texts of the grades (summary, each finding's reason and
  evidence) too. A cut JSON message list no longer parses and is graded as text when a late
  span makes the trace be graded again;
- `drop`: no spans are kept at all (only the grades, with their texts removed). A late span
  is then regraded from the sidecar's memory of recent traces, and `GradeTrace` answers with
  the stored grades alone.
"""

from __future__ import annotations

from typing import Any

from attest_otel.content import ContentPolicy

__all__ = ["keeps_spans", "scrub_result", "scrub_traces"]


def keeps_spans(policy: ContentPolicy) -> bool:
    return policy.mode != "drop"


def scrub_result(result: dict[str, Any], policy: ContentPolicy) -> dict[str, Any]:
    """A `CheckResult` dict with its texts as the policy lets them out ("" when dropped)."""
    if policy.mode == "keep":
        return result
    out = dict(result)
    out["summary"] = policy.text(str(result.get("summary") or "")) or ""
    findings = []
    for finding in result.get("findings") or ():
        one = dict(finding)
        one["reason"] = policy.text(str(one.get("reason") or "")) or ""
        evidence = one.get("evidence")
        one["evidence"] = policy.text(str(evidence)) if evidence is not None else None
        findings.append(one)
    out["findings"] = findings
    return out


def scrub_traces(data: bytes, policy: ContentPolicy) -> bytes:
    """OTLP `TracesData` bytes with the policy applied (b"" when content is dropped)."""
    if policy.mode == "keep" or not data:
        return data
    if policy.mode == "drop":
        return b""
    from opentelemetry.proto.trace.v1.trace_pb2 import TracesData

    traces = TracesData.FromString(data)
    limit = policy.max_chars
    for rs in traces.resource_spans:
        _attributes(rs.resource.attributes, policy)
        for ss in rs.scope_spans:
            for span in ss.spans:
                if len(span.name) > limit:
                    span.name = policy.text(span.name) or ""
                _attributes(span.attributes, policy)
                if span.status.message:
                    span.status.message = policy.text(span.status.message) or ""
                for event in span.events:
                    _attributes(event.attributes, policy)
                for link in span.links:
                    _attributes(link.attributes, policy)
    out: bytes = traces.SerializeToString()
    return out


def _attributes(kvs: Any, policy: ContentPolicy) -> None:
    for kv in kvs:
        _value(kv.value, policy)


def _value(value: Any, policy: ContentPolicy) -> None:
    kind = value.WhichOneof("value")
    if kind == "string_value":
        if len(value.string_value) > policy.max_chars:
            value.string_value = policy.text(value.string_value) or ""
    elif kind == "bytes_value":
        if len(value.bytes_value) > policy.max_chars:
            value.bytes_value = value.bytes_value[: policy.max_chars]
    elif kind == "array_value":
        for item in value.array_value.values:
            _value(item, policy)
    elif kind == "kvlist_value":
        _attributes(value.kvlist_value.values, policy)
