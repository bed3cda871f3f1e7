"""Hypothesis strategies for OTLP requests and attest run files, and the encoders that write
one request in every form the decoders read.

Requests are built with the generated protobuf classes (`ExportTraceServiceRequest`) from
random spans: GenAI-looking names, scopes and attribute keys (so the adapters get real work),
nested kvlist/array values, bytes, int64 extremes, ids shared across spans (parents, orphans,
self-parents, duplicates). The encoders then give the same request as binary protobuf,
length-prefixed protobuf, OTLP/JSON (hex ids, camelCase, int64 as strings or numbers),
protobuf's JSON mapping (base64 ids, enum names, camelCase or snake_case), JSON lines, and
gzip of any of these.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import (
    AnyValue,
    ArrayValue,
    InstrumentationScope,
    KeyValue,
    KeyValueList,
)
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs, ScopeLogs
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status

from attest_otel.model import Span as DecodedSpan
from tests.otlp_encodings import (
    length_prefixed,
    otlp_json_dict,
    to_otlp_json,
    to_protobuf_json,
    to_protobuf_json_snake_case,
)

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
UINT64_MAX = 2**64 - 1

# -- vocabulary: what the adapters look for ---------------------------------------------------

GENAI_KEYS = (
    "gen_ai.operation.name",
    "gen_ai.agent.name",
    "gen_ai.tool.name",
    "gen_ai.tool.call.id",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.system_instructions",
    "gen_ai.tool.definitions",
    "gen_ai.provider.name",
    "gen_ai.system",
    "gen_ai.request.model",
    "gen_ai.response.id",
    "gen_ai.transfer.target.name",
    "gen_ai.prompt.0.content",
    "gen_ai.prompt.0.role",
    "gen_ai.completion.0.content",
    "gen_ai.completion.0.role",
    "openinference.span.kind",
    "input.value",
    "output.value",
    "tool.name",
    "tool.id",
    "tool_call.id",
    "llm.input_messages.0.message.role",
    "llm.input_messages.0.message.content",
    "llm.output_messages.0.message.tool_calls.0.tool_call.function.name",
    "traceloop.span.kind",
    "traceloop.entity.input",
    "traceloop.entity.output",
    "traceloop.entity.name",
    "ai.operationId",
    "ai.toolCall.name",
    "ai.toolCall.id",
    "ai.toolCall.args",
    "ai.toolCall.result",
    "ai.prompt.messages",
    "ai.response.text",
    "ai.response.toolCalls",
    "tool_arguments",
    "tool_response",
    "final_result",
    "agent_name",
    "pydantic_ai.all_messages",
    "all_messages_events",
    "langsmith.span.kind",
    "gcp.vertex.agent.tool_call_args",
    "gcp.vertex.agent.tool_response",
    "attest.allowed_tools",
    "attest.tool_fallbacks",
    "exception.type",
    "exception.message",
    "event.name",
    "http.request.method",
    "db.system.name",
)
ROLE_VALUES = (
    "invoke_agent",
    "execute_tool",
    "chat",
    "handoff",
    "invoke_workflow",
    "AGENT",
    "TOOL",
    "LLM",
    "CHAIN",
    "agent",
    "tool",
    "workflow",
    "task",
    "llm",
    "ai.toolCall",
    "ai.generateText",
)
SPAN_NAMES = (
    "invoke_agent shop",
    "execute_tool lookup",
    "execute_tool",
    "chat gpt-5",
    "agent run",
    "running tool",
    "tools/call lookup",
    "lookup.tool",
    "ai.toolCall",
    "ai.generateText",
    "handoff",
    "GET /inventory",
    "SELECT orders",
    "",
)
SCOPES = (
    "",
    "shop.app",
    "openinference.instrumentation.anthropic",
    "opentelemetry.instrumentation.openai_v2",
    "traceloop.tracer",
    "pydantic-ai",
    "ai",
    "gen_ai",
    "strands.telemetry.tracer",
    "gcp.vertex.agent",
    "langsmith",
    "opentelemetry.instrumentation.requests",
)
TOOL_NAMES = ("lookup", "order", "search", "transfer_to_billing", "", " ")
EVENT_NAMES = (
    "exception",
    "gen_ai.user.message",
    "gen_ai.assistant.message",
    "gen_ai.tool.message",
    "gen_ai.choice",
    "gen_ai.content.prompt",
    "gen_ai.client.inference.operation.details",
    "log",
)

short_text = st.text(max_size=12)


def _pick_or(values: tuple[str, ...], other: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(values), other)


# -- message-like JSON, as the adapters parse it ----------------------------------------------

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    short_text,
    st.sampled_from(("user", "assistant", "tool", "system", "Error: boom", "__REDACTED__")),
)
JSON_KEYS = (
    "role",
    "content",
    "parts",
    "type",
    "text",
    "id",
    "name",
    "arguments",
    "args",
    "input",
    "output",
    "result",
    "response",
    "tool_calls",
    "tool_call_id",
    "toolCallId",
    "toolName",
    "function",
    "messages",
    "is_error",
    "tool_use_id",
    "kwargs",
    "lc",
    "finish_reason",
)
json_values: st.SearchStrategy[Any] = st.recursive(
    json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(_pick_or(JSON_KEYS, short_text), inner, max_size=3),
    ),
    max_leaves=6,
)
"""Any JSON value, its object keys mostly ones the message parsers look for."""


@st.composite
def messages_json(draw: st.DrawFn) -> str:
    """A message list in one of the shapes the dialects carry, as JSON text (sometimes cut)."""
    calls = draw(
        st.lists(
            st.fixed_dictionaries(
                {
                    "id": _pick_or(("call_1", "call_2"), short_text),
                    "name": st.sampled_from(TOOL_NAMES),
                    "arguments": st.one_of(json_values, st.just('{"sku": "A-1"}')),
                }
            ),
            max_size=3,
        )
    )
    role = draw(st.sampled_from(("user", "assistant", "tool", "system", "ai", "human")))
    shape = draw(st.integers(0, 3))
    if shape == 0:  # OTel parts
        parts: list[Any] = [{"type": "text", "content": draw(short_text)}]
        parts += [{"type": "tool_call", **c} for c in calls]
        parts += [
            {"type": "tool_call_response", "id": c["id"], "response": draw(json_values)}
            for c in calls
        ]
        value: Any = [{"role": role, "parts": parts}]
    elif shape == 1:  # OpenAI chat
        value = [
            {
                "role": role,
                "content": draw(st.one_of(short_text, json_values)),
                "tool_calls": [{"id": c["id"], "type": "function", "function": c} for c in calls],
                "tool_call_id": draw(st.sampled_from(("call_1", "call_2"))),
            }
        ]
    elif shape == 2:  # provider content blocks
        value = [
            {
                "role": role,
                "content": [
                    block
                    for c in calls
                    for block in (
                        {"type": "tool_use", "id": c["id"], "name": c["name"], "input": {}},
                        {"type": "tool_result", "tool_use_id": c["id"], "content": "Error: x"},
                    )
                ],
            }
        ]
    else:
        value = draw(json_values)
    text = json.dumps(value)
    if draw(st.booleans()) and len(text) > 2:
        text = text[: draw(st.integers(1, len(text) - 1))]  # an SDK length limit cut it
    return text


# -- AnyValue -----------------------------------------------------------------------------------

scalar_any = st.one_of(
    st.builds(lambda s: AnyValue(string_value=s), st.one_of(st.text(max_size=30), messages_json())),
    st.builds(lambda b: AnyValue(bool_value=b), st.booleans()),
    st.builds(
        lambda i: AnyValue(int_value=i),
        st.one_of(st.integers(INT64_MIN, INT64_MAX), st.sampled_from((INT64_MIN, INT64_MAX, 0))),
    ),
    st.builds(lambda f: AnyValue(double_value=f), st.floats(allow_nan=False, allow_infinity=False)),
    st.builds(lambda b: AnyValue(bytes_value=b), st.binary(max_size=16)),
    st.builds(lambda s: AnyValue(string_value=s), st.sampled_from(ROLE_VALUES + TOOL_NAMES)),
    st.just(AnyValue()),
)


def _kvlist(pairs: list[tuple[str, AnyValue]]) -> AnyValue:
    return AnyValue(kvlist_value=KeyValueList(values=[KeyValue(key=k, value=v) for k, v in pairs]))


any_values: st.SearchStrategy[AnyValue] = st.recursive(
    scalar_any,
    lambda inner: st.one_of(
        st.builds(
            lambda vs: AnyValue(array_value=ArrayValue(values=vs)), st.lists(inner, max_size=3)
        ),
        st.builds(
            _kvlist, st.lists(st.tuples(_pick_or(TOOL_NAMES, short_text), inner), max_size=3)
        ),
    ),
    max_leaves=4,
)


@st.composite
def key_values(draw: st.DrawFn, max_size: int = 4) -> list[KeyValue]:
    pairs = draw(
        st.lists(st.tuples(_pick_or(GENAI_KEYS, short_text), any_values), max_size=max_size)
    )
    return [KeyValue(key=k, value=v) for k, v in pairs]


# -- requests -----------------------------------------------------------------------------------

times = st.one_of(
    st.integers(0, UINT64_MAX),
    st.integers(1_700_000_000_000_000_000, 1_700_000_100_000_000_000),
    st.sampled_from((0, 1, UINT64_MAX)),
)


@st.composite
def trace_requests(draw: st.DrawFn, max_spans: int = 6) -> ExportTraceServiceRequest:
    """A request whose spans share trace ids and point at each other (or at nothing)."""
    trace_ids = draw(st.lists(st.binary(min_size=16, max_size=16), min_size=1, max_size=3))
    n = draw(st.integers(0, max_spans))
    span_ids = draw(st.lists(st.binary(min_size=8, max_size=8), min_size=n, max_size=n))
    req = ExportTraceServiceRequest()
    index = 0
    for _ in range(draw(st.integers(1, 2))):
        rs = ResourceSpans(resource=Resource(attributes=draw(key_values(max_size=3))))
        for _ in range(draw(st.integers(1, 2))):
            ss = ScopeSpans(
                scope=InstrumentationScope(
                    name=draw(_pick_or(SCOPES, short_text)), version=draw(short_text)
                )
            )
            for _ in range(draw(st.integers(0, n - index))):
                ss.spans.append(_span(draw, trace_ids, span_ids, index))
                index += 1
            rs.scope_spans.append(ss)
        req.resource_spans.append(rs)
    return req


def _span(draw: st.DrawFn, trace_ids: list[bytes], span_ids: list[bytes], index: int) -> Span:
    parent_kind = draw(st.integers(0, 4))
    if parent_kind == 0 or not span_ids:
        parent = b""
    elif parent_kind == 1:
        parent = draw(st.binary(min_size=8, max_size=8))  # never arrives
    else:  # another span of the request, itself (self-parent) or a later one (cycles)
        parent = draw(st.sampled_from(span_ids))
    span_id = span_ids[index] if draw(st.integers(0, 9)) else draw(st.sampled_from(span_ids))
    start = draw(times)
    events = [
        Span.Event(
            name=draw(_pick_or(EVENT_NAMES, short_text)),
            time_unix_nano=draw(times),
            attributes=draw(key_values(max_size=2)),
        )
        for _ in range(draw(st.integers(0, 2)))
    ]
    attrs = draw(key_values())
    if draw(st.booleans()):  # make it look like a dialect span
        attrs.insert(
            0,
            KeyValue(
                key=draw(
                    st.sampled_from(
                        (
                            "gen_ai.operation.name",
                            "openinference.span.kind",
                            "traceloop.span.kind",
                            "ai.operationId",
                            "langsmith.span.kind",
                        )
                    )
                ),
                value=AnyValue(string_value=draw(st.sampled_from(ROLE_VALUES))),
            ),
        )
    return Span(
        trace_id=draw(st.sampled_from(trace_ids)),
        span_id=span_id,
        parent_span_id=parent,
        name=draw(_pick_or(SPAN_NAMES, short_text)),
        kind=draw(st.integers(0, 5)),
        start_time_unix_nano=start,
        end_time_unix_nano=draw(st.one_of(times, st.just(start))),
        attributes=attrs,
        events=events,
        status=Status(code=draw(st.integers(0, 2)), message=draw(short_text)),
    )


@st.composite
def log_requests(draw: st.DrawFn) -> ExportLogsServiceRequest:
    records = [
        LogRecord(
            time_unix_nano=draw(times),
            event_name=draw(_pick_or(EVENT_NAMES, short_text)),
            trace_id=draw(st.one_of(st.just(b""), st.binary(min_size=16, max_size=16))),
            span_id=draw(st.one_of(st.just(b""), st.binary(min_size=8, max_size=8))),
            body=draw(any_values),
            attributes=draw(key_values(max_size=3)),
        )
        for _ in range(draw(st.integers(1, 3)))
    ]
    sl = ScopeLogs(scope=InstrumentationScope(name=draw(_pick_or(SCOPES, short_text))))
    sl.log_records.extend(records)
    return ExportLogsServiceRequest(resource_logs=[ResourceLogs(scope_logs=[sl])])


# -- encodings ----------------------------------------------------------------------------------


def json_lines(req: ExportTraceServiceRequest) -> bytes:
    """One request per resource, one per line, as the Collector's file exporter writes."""
    lines = [
        json.dumps(otlp_json_dict(ExportTraceServiceRequest(resource_spans=[rs])))
        for rs in req.resource_spans
    ]
    return ("\n".join(lines) + "\n").encode()


ENCODINGS: dict[str, Callable[[ExportTraceServiceRequest], bytes]] = {
    "protobuf": lambda req: req.SerializeToString(),
    "protobuf, length-prefixed": length_prefixed,
    "OTLP/JSON": to_otlp_json,
    "OTLP/JSON, int64 as numbers, upper-case hex": lambda req: to_otlp_json(
        req, int64_as_numbers=True, upper_hex=True
    ),
    "protobuf JSON mapping": to_protobuf_json,
    "protobuf JSON mapping, snake_case": to_protobuf_json_snake_case,
    "JSON lines": json_lines,
    "gzip protobuf": lambda req: gzip.compress(req.SerializeToString()),
    "gzip OTLP/JSON": lambda req: gzip.compress(to_otlp_json(req)),
}


def comparable(span: DecodedSpan) -> str:
    """Everything but `source`, as text (so NaN equals NaN and -0.0 differs from 0.0)."""
    return repr(
        (
            span.trace_id,
            span.span_id,
            span.parent_id,
            span.name,
            span.kind,
            span.start_ns,
            span.end_ns,
            span.status_code,
            span.status_message,
            span.attributes,
            [(e.name, e.time_ns, e.attributes) for e in span.events],
            span.resource,
            span.scope_name,
            span.scope_version,
        )
    )


# -- mutations ----------------------------------------------------------------------------------


@st.composite
def byte_mutations(draw: st.DrawFn, data: bytes) -> bytes:
    """Truncate, flip, insert or delete bytes of an encoding."""
    out = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.integers(0, 3))
        pos = draw(st.integers(0, len(out))) if out else 0
        if op == 0:
            del out[pos:]
        elif op == 1 and pos < len(out):
            out[pos] ^= 1 << draw(st.integers(0, 7))
        elif op == 2:
            out[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        elif pos < len(out):
            del out[pos : pos + draw(st.integers(1, 8))]
    return bytes(out)


WRONG_VALUES = st.one_of(
    json_values,
    st.sampled_from(
        (
            None,
            True,
            -1,
            2**64,
            -(2**64),
            1e300,
            1.5,
            "",
            "x",
            "NaN",
            "0" * 40,
            [],
            {},
            [None],
            {"stringValue": 5},
            {"arrayValue": {"values": 5}},
            {"kvlistValue": {"values": [5]}},
            {"intValue": "1e3"},
            {"bytesValue": "***"},
            "\ud800",
        )
    ),
)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            out += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out += _paths(value, (*prefix, i))
    return out


@st.composite
def json_mutations(draw: st.DrawFn, document: Any) -> Any:
    """Wrong types at random paths, dropped keys, extra keys, duplicated list items."""
    document = json.loads(json.dumps(document))
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(document)
        path = draw(st.sampled_from(paths))
        if not path:
            document = _fresh(draw(WRONG_VALUES)) if draw(st.integers(0, 9)) == 0 else document
            continue
        parent = document
        for step in path[:-1]:
            parent = parent[step]
        last = path[-1]
        op = draw(st.integers(0, 3))
        if op == 0:
            parent[last] = _fresh(draw(WRONG_VALUES))
        elif op == 1:
            del parent[last]
        elif op == 2 and isinstance(parent, list):
            parent.insert(last, json.loads(json.dumps(parent[last])))
        elif isinstance(parent, dict):
            parent[draw(_pick_or(tuple(parent), short_text))] = _fresh(draw(WRONG_VALUES))
    return document


def _fresh(value: Any) -> Any:
    """A copy: a drawn example may be shared between test cases, and later mutations of this
    document must not change it (hypothesis then sees generation depend on outside state)."""
    return json.loads(json.dumps(value))


# -- attest run files ---------------------------------------------------------------------------

RUN_KEYS = ("task", "steps", "final_answer", "system_prompt", "allowed_tools", "tool_fallbacks")


@st.composite
def run_dicts(draw: st.DrawFn) -> Any:
    """Run objects with a random JSON value (or a plausible one) in every field."""
    any_or = lambda good: st.one_of(good, json_values)  # noqa: E731

    def call() -> Any:
        return draw(
            any_or(
                st.fixed_dictionaries(
                    {
                        "name": any_or(st.sampled_from(TOOL_NAMES)),
                        "arguments": json_values,
                        "output": st.one_of(json_values, st.sampled_from(("Error: x", ""))),
                    },
                    optional={"is_error": any_or(st.booleans())},
                )
            )
        )

    steps = draw(
        any_or(
            st.lists(
                any_or(
                    st.fixed_dictionaries(
                        {}, optional={"tool_call": st.builds(call), "thought": any_or(short_text)}
                    )
                ),
                max_size=5,
            )
        )
    )
    run = {
        "task": draw(any_or(short_text)),
        "steps": steps,
        "final_answer": draw(any_or(st.one_of(st.none(), short_text))),
        "system_prompt": draw(any_or(st.none())),
        "allowed_tools": draw(any_or(st.lists(st.sampled_from(TOOL_NAMES), max_size=3))),
        "tool_fallbacks": draw(
            any_or(
                st.dictionaries(
                    st.sampled_from(TOOL_NAMES), st.lists(st.sampled_from(TOOL_NAMES), max_size=2)
                )
            )
        ),
    }
    for key in RUN_KEYS:
        if draw(st.integers(0, 5)) == 0:
            del run[key]
    return run
