"""A trace that captured no content at all says so on its runs (`Run.content_captured`)."""

from __future__ import annotations

from typing import Any

from attest_otel.model import Span
from tests.adapt.spans import Trace, js

AGENT = {
    "gen_ai.operation.name": "invoke_agent",
    "gen_ai.provider.name": "openai",
    "gen_ai.agent.name": "billing_agent",
}


def tool(
    t: Trace, agent: Span, start: int, extra: dict[str, Any] | None = None, error: str | None = None
) -> Span:
    return t.span(
        "execute_tool charge_card",
        {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.provider.name": "openai",
            "gen_ai.tool.name": "charge_card",
            "gen_ai.tool.call.id": f"c{start}",
            **(extra or {}),
        },
        parent=agent,
        start=start,
        end=start + 1,
        error=error,
    )


def test_names_ids_and_statuses_only_is_a_run_without_content() -> None:
    t = Trace()
    agent = t.span("invoke_agent billing_agent", AGENT, start=0, end=10)
    tool(t, agent, 1, error="gateway timeout")
    tool(t, agent, 3)
    run = t.run()
    assert len(run.tool_calls) == 2
    assert run.content_captured is False


def test_a_captured_task_answer_argument_or_result_is_content() -> None:
    cases: list[tuple[dict[str, Any], dict[str, Any]]] = [
        (
            {
                "gen_ai.input.messages": js(
                    [{"role": "user", "parts": [{"type": "text", "content": "Charge order 42."}]}]
                )
            },
            {},
        ),
        (
            {
                "gen_ai.output.messages": js(
                    [{"role": "assistant", "parts": [{"type": "text", "content": "Done."}]}]
                )
            },
            {},
        ),
        ({}, {"gen_ai.tool.call.arguments": js({"order_id": 42})}),
        ({}, {"gen_ai.tool.call.result": "ok"}),
    ]
    for on_agent, on_tool in cases:
        t = Trace()
        agent = t.span("invoke_agent billing_agent", {**AGENT, **on_agent}, start=0, end=10)
        tool(t, agent, 1, on_tool)
        assert t.run().content_captured is True, (on_agent, on_tool)
