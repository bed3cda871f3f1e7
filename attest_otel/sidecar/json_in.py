"""OTLP/JSON export requests of any signal turned into protobuf, once, at the receiver.

Everything after the receivers works on protobuf bytes (`wire`, `log_wire`), so a JSON
body is converted here and follows the same path. OTLP/JSON writes trace and span ids as
hex, where protobuf's JSON mapping (what `ParseDict` reads) wants base64: the ids are
rewritten first, wherever the signal puts them (spans and their links, log records,
metric exemplars).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterator, Sequence
from typing import Any

from google.protobuf import json_format  # type: ignore[import-untyped]
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

__all__ = ["otlp_json_to_protobuf"]

_MESSAGES: dict[str, Any] = {
    "traces": ExportTraceServiceRequest,
    "logs": ExportLogsServiceRequest,
    "metrics": ExportMetricsServiceRequest,
}
_IDS = (
    ("traceId", 16),
    ("trace_id", 16),
    ("spanId", 8),
    ("span_id", 8),
    ("parentSpanId", 8),
    ("parent_span_id", 8),
)
_POINT_KINDS = ("gauge", "sum", "histogram", "exponentialHistogram", "summary")


def _fix_id(value: Any, nbytes: int) -> Any:
    if isinstance(value, str) and len(value) == 2 * nbytes:
        try:
            return base64.b64encode(bytes.fromhex(value)).decode("ascii")
        except ValueError:
            return value
    return value


def _fix_ids(obj: dict[str, Any], keys: Sequence[tuple[str, int]] = _IDS) -> None:
    for key, nbytes in keys:
        if key in obj:
            obj[key] = _fix_id(obj[key], nbytes)


def _dicts(value: Any) -> list[dict[str, Any]]:
    """The objects of a JSON array; anything else is left for ParseDict to refuse."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _each(obj: dict[str, Any], *keys: str) -> list[dict[str, Any]]:
    return [item for key in keys for item in _dicts(obj.get(key))]


def _with_ids(document: dict[str, Any], signal: str) -> Iterator[dict[str, Any]]:
    """Every object of the request that carries trace or span ids."""
    if signal == "traces":
        for rs in _each(document, "resourceSpans", "resource_spans"):
            for ss in _each(rs, "scopeSpans", "scope_spans"):
                for span in _dicts(ss.get("spans")):
                    yield span
                    yield from _dicts(span.get("links"))
    elif signal == "logs":
        for rl in _each(document, "resourceLogs", "resource_logs"):
            for sl in _each(rl, "scopeLogs", "scope_logs"):
                yield from _each(sl, "logRecords", "log_records")
    else:
        for rm in _each(document, "resourceMetrics", "resource_metrics"):
            for sm in _each(rm, "scopeMetrics", "scope_metrics"):
                for metric in _dicts(sm.get("metrics")):
                    for kind in _POINT_KINDS:
                        data = metric.get(kind)
                        if isinstance(data, dict):
                            for point in _each(data, "dataPoints", "data_points"):
                                yield from _dicts(point.get("exemplars"))


def otlp_json_to_protobuf(body: bytes, signal: str = "traces") -> bytes:
    """An OTLP/JSON export request of `signal` as protobuf bytes; ValueError if it is not one."""
    try:
        document = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"invalid JSON: {e}") from None
    except RecursionError:
        raise ValueError("invalid JSON: nested too deeply") from None
    if not isinstance(document, dict):
        raise ValueError("invalid OTLP/JSON: the body must be a JSON object")
    for obj in _with_ids(document, signal):
        _fix_ids(obj)
    try:
        request = json_format.ParseDict(document, _MESSAGES[signal](), ignore_unknown_fields=True)
    except (json_format.ParseError, ValueError, TypeError, AttributeError, binascii.Error) as e:
        raise ValueError(f"invalid OTLP/JSON: {e}") from None
    except RecursionError:
        raise ValueError("invalid OTLP/JSON: nested too deeply") from None
    data: bytes = request.SerializeToString()
    return data
