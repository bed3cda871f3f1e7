"""Which dialect a span speaks: checked per span, most specific marker first."""

from __future__ import annotations

from typing import Any

import pytest

from attest_otel.adapt import DIALECTS, Dialect, Role, detect
from tests.adapt.spans import Trace


def test_every_registered_dialect_conforms_to_the_interface() -> None:
    assert all(isinstance(d, Dialect) for d in DIALECTS)
    assert len({d.name for d in DIALECTS}) == len(DIALECTS)


@pytest.mark.parametrize(
    ("name", "attrs", "scope", "expected"),
    [
        pytest.param(
            "chat m",
            {"openinference.span.kind": "LLM", "gen_ai.operation.name": "chat"},
            "pydantic-ai",
            ("openinference", Role.MODEL),
            id="openinference keys copied onto another framework's span win",
        ),
        pytest.param(
            "ai.generateText.doGenerate",
            {"ai.operationId": "ai.generateText.doGenerate", "gen_ai.system": "openai"},
            "ai",
            ("vercel", Role.MODEL),
            id="vercel legacy spans that also carry gen_ai keys are vercel",
        ),
        pytest.param(
            "running tool",
            {"gen_ai.tool.name": "x", "tool_arguments": "{}"},
            "",
            ("pydantic-ai", Role.TOOL),
            id="pydantic-ai is recognised by its attributes without its scope",
        ),
        pytest.param(
            "chat",
            {"gen_ai.operation.name": "chat", "gen_ai.system": "strands-agents"},
            "",
            ("strands", Role.MODEL),
            id="strands is recognised by its system name",
        ),
        pytest.param(
            "call_llm",
            {"gcp.vertex.agent.llm_request": "{}"},
            "",
            ("adk", Role.MODEL),
            id="adk is recognised by its attribute prefix",
        ),
        pytest.param(
            "x.tool",
            {"traceloop.span.kind": "tool"},
            "",
            ("openllmetry", Role.TOOL),
            id="traceloop decorator spans are openllmetry",
        ),
        pytest.param(
            "agent",
            {"langsmith.span.kind": "chain", "langsmith.trace.id": "t"},
            "",
            ("langsmith", Role.WORKFLOW),
            id="langsmith chains are containers",
        ),
        pytest.param(
            "embeddings m",
            {"gen_ai.operation.name": "embeddings", "gen_ai.provider.name": "openai"},
            "",
            ("genai", Role.OTHER),
            id="genai operations that are neither model calls nor tools are other",
        ),
        pytest.param(
            "GET /orders",
            {"http.request.method": "GET"},
            "",
            None,
            id="an http span is no dialect's",
        ),
        pytest.param("GET /orders", {}, "", None, id="a skeleton span is no dialect's"),
    ],
)
def test_detection(name: str, attrs: dict[str, Any], scope: str, expected: Any) -> None:
    span = Trace(scope=scope).span(name, attrs)
    found = detect(span)
    assert (None if found is None else (found[0].name, found[1])) == expected
