"""The same OTLP request in every encoding the decoders read, for the tests that compare them.

One module, so the decode tests and the fuzz strategies build the encodings the same way.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from google.protobuf import json_format  # type: ignore[import-untyped]

_ID_KEYS = frozenset({"traceId", "spanId", "parentSpanId"})
_INT64_KEYS = frozenset(
    {"startTimeUnixNano", "endTimeUnixNano", "timeUnixNano", "observedTimeUnixNano", "intValue"}
)


def otlp_json_dict(req: Any, *, int64_as_numbers: bool = False, upper_hex: bool = False) -> Any:
    """OTLP/JSON as the spec writes it: hex ids, integer enums, lowerCamelCase keys."""

    def fix(node: Any) -> Any:
        if isinstance(node, dict):
            out = {}
            for key, value in node.items():
                if key in _ID_KEYS:
                    value = base64.b64decode(value).hex()
                    value = value.upper() if upper_hex else value
                elif key in _INT64_KEYS and int64_as_numbers:
                    value = int(value)
                else:
                    value = fix(value)
                out[key] = value
            return out
        if isinstance(node, list):
            return [fix(item) for item in node]
        return node

    return fix(json_format.MessageToDict(req, use_integers_for_enums=True))


def to_otlp_json(req: Any, **options: bool) -> bytes:
    return json.dumps(otlp_json_dict(req, **options)).encode()


def to_protobuf_json(req: Any) -> bytes:
    text: str = json_format.MessageToJson(req)
    return text.encode()


def to_protobuf_json_snake_case(req: Any) -> bytes:
    text: str = json_format.MessageToJson(req, preserving_proto_field_name=True, indent=None)
    return text.encode()


def length_prefixed(*messages: Any) -> bytes:
    """What the Collector's file exporter writes with `format: proto`."""
    out = b""
    for message in messages:
        body = message.SerializeToString()
        out += len(body).to_bytes(4, "big") + body
    return out
