"""Vercel AI SDK: legacy `ai.*` spans (v4 and v5+ shapes) and v7's GenAI spans."""

from __future__ import annotations

from attest_otel.adapt import Role, detect
from tests.adapt.spans import Trace, calls, event, js

SYSTEM = "You are a billing agent."
POLICY = {
    "ai.telemetry.metadata.attest.allowed_tools": ["lookup", "charge"],
    "ai.telemetry.metadata.attest.tool_fallbacks": js({"charge": ["charge_backup"]}),
}


def legacy_trace() -> Trace:
    t = Trace(scope="ai")
    common = {"ai.telemetry.functionId": "billing-agent", "resource.name": "billing-agent"}
    root = t.span(
        "ai.generateText",
        {
            **common,
            **POLICY,
            "ai.operationId": "ai.generateText",
            "ai.prompt": js({"system": SYSTEM, "prompt": "Charge order 42."}),
            "ai.response.text": "Could not charge order 42.  ",
        },
        start=0,
        end=100,
    )
    t.span(
        "ai.generateText.doGenerate",
        {
            **common,
            "ai.operationId": "ai.generateText.doGenerate",
            "ai.prompt.messages": js(
                [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Charge"}]
            ),
            "ai.prompt.tools": [
                js(
                    {
                        "type": "function",
                        "name": "charge",
                        "description": "Charge",
                        "parameters": {},
                    }
                )
            ],
            "ai.response.toolCalls": js(
                [
                    {
                        "toolCallType": "function",
                        "toolCallId": "c1",
                        "toolName": "charge",
                        "args": "{}",
                    }
                ]
            ),
        },
        parent=root,
        start=1,
        end=10,
    )
    t.span(
        "ai.toolCall",
        {
            **common,
            "ai.operationId": "ai.toolCall",
            "ai.toolCall.name": "charge",
            "ai.toolCall.id": "c1",
            "ai.toolCall.args": js({"order": 42}),
        },
        parent=root,
        start=10,
        end=12,
        error="Card declined",
        events=[
            event("exception", **{"exception.type": "Error", "exception.message": "Card declined"})
        ],
    )
    return t


def test_legacy_spans_give_the_run_from_the_generate_text_span() -> None:
    run = legacy_trace().run()
    assert run.agent == "billing-agent"
    assert run.task == "Charge order 42."
    assert run.final_answer == "Could not charge order 42."
    assert run.system_prompt == SYSTEM
    assert [d["name"] for d in run.tool_definitions] == ["charge"]
    assert run.allowed_tools == ["lookup", "charge"]
    assert run.tool_fallbacks == {"charge": ["charge_backup"]}


def test_a_failed_legacy_tool_call_has_no_result_and_shows_the_status_text() -> None:
    (call,) = calls(legacy_trace().run())
    assert call.is_error is True
    assert call.arguments == {"order": 42}
    assert call.error_text == "Card declined"


def test_the_v5_tool_result_shape_in_the_next_prompt_fills_a_missing_result() -> None:
    t = legacy_trace()
    t.span(
        "ai.generateText.doGenerate",
        {
            "ai.operationId": "ai.generateText.doGenerate",
            "ai.prompt.messages": js(
                [
                    {
                        "role": "tool",
                        "content": [
                            {
                                "type": "tool-result",
                                "toolCallId": "c1",
                                "toolName": "charge",
                                "output": {"type": "error-text", "value": "Card declined"},
                            }
                        ],
                    }
                ]
            ),
            "ai.response.text": "Could not charge order 42.",
        },
        parent=t.spans[0],
        start=20,
        end=30,
    )
    (call,) = calls(t.run())
    assert call.output == "Card declined"


def test_the_runtime_context_carries_the_policy_in_ai_seven() -> None:
    t = legacy_trace()
    attrs = t.spans[0].attributes
    for key in list(POLICY):
        del attrs[key]
    attrs["ai.settings.context.attest.allowed_tools"] = ["charge"]
    assert t.run().allowed_tools == ["charge"]


def v7_trace() -> Trace:
    t = Trace(scope="gen_ai")
    root = t.span(
        "invoke_agent mock-model",
        {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.provider.name": "mock",
            "gen_ai.agent.name": "billing-agent",
            "gen_ai.input.messages": js(
                [{"role": "user", "parts": [{"type": "text", "content": "Charge order 42."}]}]
            ),
            "gen_ai.output.messages": js(
                [
                    {
                        "role": "assistant",
                        "parts": [
                            {"type": "text", "content": "Done."},
                            {"type": "tool_call", "id": "c1", "name": "charge", "arguments": {}},
                        ],
                    }
                ]
            ),
            "ai.settings.context.attest.allowed_tools": ["charge"],
        },
        start=0,
        end=100,
    )
    step = t.span("step 1", {"gen_ai.operation.name": "agent_step"}, parent=root, start=1, end=50)
    t.span(
        "execute_tool charge",
        {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "charge",
            "gen_ai.tool.call.id": "c1",
            "gen_ai.tool.call.arguments": "{}",
            "gen_ai.tool.call.result": js("Error: card declined"),
        },
        parent=step,
        start=10,
        end=20,
    )
    return t


def test_v7_genai_spans_are_their_own_dialect_and_steps_are_not_runs() -> None:
    t = v7_trace()
    found = [detect(s) for s in t.spans]
    assert [(f[0].name, f[1]) for f in found if f is not None] == [
        ("vercel-genai", Role.AGENT),
        ("vercel-genai", Role.OTHER),
        ("vercel-genai", Role.TOOL),
    ]
    run = t.run()
    assert (run.agent, run.task, run.final_answer) == ("billing-agent", "Charge order 42.", "Done.")
    assert run.allowed_tools == ["charge"]
    (call,) = calls(run)
    assert call.output == "Error: card declined"  # a JSON string result, decoded
