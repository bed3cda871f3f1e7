"""The grade's log-based events encoded straight as OTLP protobuf, for the sidecar to send.

`log_events` emits the same records through the SDK: a `LogRecord` object, a context and
bounded attributes per record, then the exporter's encoder builds messages from them; about
30 us a record, two records a GenAI span on agent traffic, which made it the largest single
cost of a graded span. The sidecar writes the records' encoding instead (`otlp_bytes`),
where the grade is made (a grading process), and sends batches of them with its own
forwarder, like spans. What a parser reads back equals what the SDK sends (tests/export):
the same times, trace context (sampled flag), severity, event name and attributes.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

from attest_otel import semconv
from attest_otel.content import KEEP, ContentPolicy
from attest_otel.export.otlp_bytes import fixed64, key_value, key_values, length_delimited
from attest_otel.export.results import evaluations
from attest_otel.model import CheckResult, Run

__all__ = ["log_records", "logs_request"]

_SEVERITY: dict[str, bytes] = {  # SeverityNumber, severity text: as `log_events._SEVERITY`
    "pass": b"\x10\x09" + length_delimited(0x1A, b"INFO"),
    "warn": b"\x10\x0d" + length_delimited(0x1A, b"WARN"),
    "fail": b"\x10\x0d" + length_delimited(0x1A, b"WARN"),
}
_EVENT = (
    key_value(0x32, semconv.EVENT_NAME, semconv.GEN_AI_EVALUATION_RESULT),
    length_delimited(0x62, semconv.GEN_AI_EVALUATION_RESULT.encode()),
)
"""The `event.name` attribute (last, as `log_events` adds it) and the `event_name` field."""
_SAMPLED = b"\x45\x01\x00\x00\x00"  # flags (fixed32): the sampled trace flag


def _raw_id(value: str | None, size: int) -> bytes | None:
    """A valid (hex, right length, not all zero) id as bytes; None otherwise."""
    if not value or len(value) != 2 * size:
        return None
    try:
        raw = bytes.fromhex(value)
    except ValueError:
        return None
    return raw if any(raw) else None


def log_records(
    run: Run, result: CheckResult, *, now_ns: int, content: ContentPolicy = KEEP
) -> list[bytes]:
    """One `gen_ai.evaluation.result` record per evaluation (as `emit_log_events`), each
    encoded as a `log_records` field (2) of a ScopeLogs."""
    times = fixed64(0x09, now_ns)
    tail = fixed64(0x59, now_ns) + _EVENT[1]  # observed time, then the event_name field
    trace_id = _raw_id(run.trace_id, 16)
    traced = _SAMPLED + length_delimited(0x4A, trace_id) if trace_id is not None else None
    contexts: dict[str | None, bytes] = {}  # span id -> its trace context: one per span
    out: list[bytes] = []
    for evaluation in evaluations(run, result, content):
        span_hex = evaluation.span_id or run.span_id
        context = contexts.get(span_hex)
        if context is None:
            span_id = _raw_id(span_hex, 8)
            context = contexts[span_hex] = (
                traced + length_delimited(0x52, span_id)
                if traced is not None and span_id is not None
                else b""
            )
        body = b"".join(
            (
                times,
                _SEVERITY.get(evaluation.severity, _SEVERITY["fail"]),
                b"\x2a\x00",  # an empty body, as the SDK's encoder writes one
                key_values(0x32, evaluation.event_attributes),
                _EVENT[0],
                context,
                tail,
            )
        )
        out.append(length_delimited(0x12, body))
    return out


@cache
def _origin() -> tuple[bytes, bytes]:
    """(Resource, InstrumentationScope) of this process's records, encoded once: the same
    resource and scope the SDK path gives them (`otlp_config.default_resource`)."""
    from opentelemetry.proto.common.v1.common_pb2 import InstrumentationScope
    from opentelemetry.proto.resource.v1.resource_pb2 import Resource

    from attest_otel.export.otlp_config import default_resource, package_version

    resource = Resource()
    for key, value in default_resource().attributes.items():
        kv = resource.attributes.add(key=key)
        if isinstance(value, bool):
            kv.value.bool_value = value
        elif isinstance(value, int):
            kv.value.int_value = value
        elif isinstance(value, float):
            kv.value.double_value = value
        elif isinstance(value, str):
            kv.value.string_value = value
        elif isinstance(value, Sequence):  # a list-valued resource attribute
            for item in value:
                kv.value.array_value.values.add(string_value=str(item))
    scope = InstrumentationScope(name=semconv.INSTRUMENTATION_SCOPE, version=package_version())
    return resource.SerializeToString(), scope.SerializeToString()


def logs_request(records: Sequence[bytes]) -> bytes:
    """An `ExportLogsServiceRequest` holding `records` (from `log_records`) under this
    process's resource and scope. Requests concatenate into one request (repeated field 1)."""
    resource, scope = _origin()
    scope_logs = length_delimited(0x12, length_delimited(0x0A, scope) + b"".join(records))
    return length_delimited(0x0A, length_delimited(0x0A, resource) + scope_logs)
