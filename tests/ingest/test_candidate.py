"""The cheap GenAI-candidate test: liberal for every dialect, strict enough for HTTP/DB spans."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from attest_otel.ingest.candidate import GENAI_NAME_SUFFIXES, is_genai_candidate, is_genai_log
from attest_otel.ingest.decode import decode_bytes
from attest_otel.model import Span

CASES: list[tuple[str, str, list[str], str, bool]] = [
    # (id, span name, attribute keys, scope name, candidate?)
    ("a GenAI invoke_agent span is a candidate by name", "invoke_agent shop", [], "", True),
    ("a GenAI execute_tool span is a candidate by name", "execute_tool lookup", [], "", True),
    ("a GenAI chat span is a candidate by name", "chat gpt-5", [], "", True),
    ("any gen_ai.* key makes a candidate", "step", ["http.x", "gen_ai.system"], "", True),
    ("an OpenInference span is a candidate", "lookup", ["openinference.span.kind"], "", True),
    ("an OpenLLMetry span is a candidate", "x", ["traceloop.span.kind"], "", True),
    ("an OpenLLMetry indexed prompt is a candidate", "x", ["gen_ai.prompt.0.role"], "", True),
    ("an OpenLLMetry llm.request.type is a candidate", "x", ["llm.request.type"], "", True),
    ("a Traceloop workflow is a candidate by name", "weather.workflow", [], "", True),
    ("a Traceloop tool is a candidate by name", "get_weather.tool", [], "", True),
    ("a Vercel legacy span is a candidate by name", "ai.generateText", [], "", True),
    ("a Vercel legacy key makes a candidate", "custom", ["ai.operationId"], "", True),
    ("a Vercel v7 step in scope ai is a candidate", "step 1", [], "ai", True),
    ("a pydantic-ai v1 tool span is a candidate", "running tool", ["tool_arguments"], "", True),
    ("a pydantic-ai span is a candidate by scope", "model request", [], "pydantic-ai", True),
    ("a pydantic-ai final_result key makes a candidate", "x", ["final_result"], "", True),
    ("a Logfire openai-agents run is a candidate", "Agent run: 'x'", [], "", True),
    ("a Logfire key makes a candidate", "x", ["logfire.msg_template"], "", True),
    ("a Google ADK invocation is a candidate", "invocation", [], "", True),
    ("a Google ADK key makes a candidate", "x", ["gcp.vertex.agent.event_id"], "", True),
    ("a LangSmith key makes a candidate", "RunnableSequence", ["langsmith.span.kind"], "", True),
    ("a Strands cycle is a candidate", "execute_event_loop_cycle", [], "", True),
    ("a Semantic Kernel loop is a candidate", "AutoFunctionInvocationLoop", [], "", True),
    ("an MCP tools/call span is a candidate", "tools/call get_weather", [], "", True),
    ("an attest policy key makes a candidate", "root", ["attest.allowed_tools"], "", True),
    ("an agent key makes a candidate", "root", ["agent_name"], "", True),
    ("a Langfuse SDK key makes a candidate", "lookup", ["langfuse.observation.type"], "", True),
    ("a Langfuse SDK span is a candidate by scope", "lookup_order", [], "langfuse-sdk", True),
    ("an app's own agent tracer marks its spans", "billing_agent", [], "billing.agent", True),
    (
        "an HTTP server span is not a candidate",
        "GET /api/orders",
        ["http.request.method", "url.path", "http.response.status_code", "user_agent.original"],
        "opentelemetry.instrumentation.flask",
        False,
    ),
    (
        "the HTTP call under a chat span is not a candidate",
        "POST",
        ["http.request.method", "url.full", "server.address"],
        "opentelemetry.instrumentation.httpx",
        False,
    ),
    (
        "a database span is not a candidate",
        "SELECT orders",
        ["db.system.name", "db.query.text", "db.collection.name"],
        "opentelemetry.instrumentation.psycopg",
        False,
    ),
    ("a messaging span is not a candidate", "orders publish", ["messaging.system"], "", False),
]


@pytest.mark.parametrize(
    ("name", "keys", "scope", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_genai_candidates(name: str, keys: list[str], scope: str, expected: bool) -> None:
    assert is_genai_candidate(name, keys, scope) is expected


@pytest.mark.parametrize(
    ("name", "keys", "scope", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_the_decoder_decides_as_the_predicate_does(
    name: str, keys: list[str], scope: str, expected: bool
) -> None:
    span = {
        "traceId": "5b8efff798038103d269b633813fc60c",
        "spanId": "eee19b7ec3c1b174",
        "name": name,
        "attributes": [{"key": k, "value": {"stringValue": "v"}} for k in keys],
    }
    request = {"resourceSpans": [{"scopeSpans": [{"scope": {"name": scope}, "spans": [span]}]}]}
    decoded = decode_bytes(json.dumps(request).encode())
    assert decoded.genai_span_count == int(expected)
    assert bool(decoded.spans[0].attributes) is (expected and bool(keys))


@pytest.mark.parametrize(
    ("event_name", "keys", "scope", "expected"),
    [
        ("gen_ai.user.message", [], "", True),
        ("", ["gen_ai.system"], "", True),
        ("", [], "opentelemetry.instrumentation.openai_v2", True),
        ("", ["http.request.method"], "shop.app", False),
        ("app.started", [], "", False),
    ],
    ids=[
        "a GenAI event name keeps a log record",
        "a gen_ai key keeps a log record",
        "a GenAI instrumentation scope keeps a log record",
        "an HTTP access log is dropped",
        "an application event is dropped",
    ],
)
def test_genai_logs(event_name: str, keys: list[str], scope: str, expected: bool) -> None:
    assert is_genai_log(event_name, keys, scope) is expected


# -- the contract with the dialect detectors --------------------------------------------------

_KEYS = [
    "gen_ai.operation.name",
    "gen_ai.provider.name",
    "gen_ai.system",
    "gen_ai.request.model",
    "gen_ai.tool.name",
    "gen_ai.input.messages",
    "gen_ai.prompt.0.role",
    "openinference.span.kind",
    "traceloop.span.kind",
    "traceloop.entity.name",
    "llm.request.type",
    "ai.operationId",
    "langsmith.span.kind",
    "langsmith.trace.id",
    "gcp.vertex.agent.event_id",
    "pydantic_ai.all_messages",
    "all_messages_events",
    "tool_arguments",
    "model_request_parameters",
    "http.request.method",
    "db.system.name",
    "url.full",
    "metadata",
    "tool.name",
]
_VALUES = [
    "TOOL",
    "AGENT",
    "LLM",
    "tool",
    "agent",
    "chat",
    "execute_tool",
    "invoke_agent",
    "ai.toolCall",
    "ai.generateText",
    "strands-agents",
    "gcp.vertex.agent",
    "GET",
]
_NAMES = [
    "invoke_agent shop",
    "execute_tool lookup",
    "chat gpt-5",
    "agent run",
    "running tool",
    "running tools",
    "invocation",
    "call_llm",
    "invoke_swarm",
    "invoke_graph",
    "handoff to x",
    "GET /items",
    "SELECT orders",
    "weather.workflow",
    "",
]
_SCOPES = [
    "",
    "pydantic-ai",
    "strands.telemetry.tracer",
    "gcp.vertex.agent",
    "ai",
    "gen_ai",
    "opentelemetry.instrumentation.flask",
    "shop.app",
]


@given(
    name=st.sampled_from(_NAMES),
    attributes=st.dictionaries(st.sampled_from(_KEYS), st.sampled_from(_VALUES), max_size=4),
    scope=st.sampled_from(_SCOPES),
)
def test_every_span_a_dialect_detector_claims_is_a_candidate(
    name: str, attributes: dict[str, str], scope: str
) -> None:
    from attest_otel.adapt.detect import detect

    span = Span(
        trace_id="5b8efff798038103d269b633813fc60c",
        span_id="eee19b7ec3c1b174",
        parent_id=None,
        name=name,
        attributes=dict(attributes),
        scope_name=scope,
    )
    if detect(span) is not None:
        assert is_genai_candidate(name, attributes, scope)


def test_every_name_suffix_is_one_dotted_word() -> None:
    """`is_genai_name` compares the text after the last dot with the suffix set."""
    assert all(s.startswith(".") and s.count(".") == 1 for s in GENAI_NAME_SUFFIXES)
