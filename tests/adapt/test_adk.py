"""Google ADK, hand-built from its tracing module's attributes (`gcp.vertex.agent.*`)."""

from __future__ import annotations

from typing import Any

from attest_otel.adapt import Role, detect
from tests.adapt.spans import Trace, calls, js, names

SCOPE = "gcp.vertex.agent"
P = "gcp.vertex.agent."

LLM_REQUEST = {
    "model": "gemini-2.0-flash",
    "config": {
        "system_instruction": "You are the billing agent.",
        "tools": [
            {
                "function_declarations": [
                    {
                        "name": "charge",
                        "description": "Charge a card",
                        "parameters": {"type": "OBJECT"},
                    }
                ]
            }
        ],
    },
    "contents": [{"role": "user", "parts": [{"text": "Charge order 42"}]}],
}


def adk_trace(
    *,
    agent_span: str = "invoke_agent billing",
    tool_extra: dict[str, Any] | None = None,
    response: Any = None,
) -> Trace:
    t = Trace(scope=SCOPE)
    turn = t.span("invocation", {P + "invocation_id": "e-1"}, start=0, end=100)
    agent = t.span(
        agent_span,
        {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "billing",
            "gen_ai.conversation.id": "s-1",
        }
        if agent_span.startswith("invoke")
        else {},
        parent=turn,
        start=1,
        end=99,
    )
    t.span(
        "call_llm",
        {
            "gen_ai.system": "gcp.vertex.agent",
            P + "llm_request": js(LLM_REQUEST),
            P + "llm_response": js(
                {
                    "content": {
                        "role": "model",
                        "parts": [
                            {
                                "function_call": {
                                    "id": "adk-1",
                                    "name": "charge",
                                    "args": {"order": 42},
                                }
                            }
                        ],
                    }
                }
            ),
        },
        parent=agent,
        start=2,
        end=10,
    )
    t.span(
        "execute_tool charge",
        {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "charge",
            "gen_ai.tool.type": "FunctionTool",
            "gen_ai.tool.call.id": "adk-1",
            P + "tool_call_args": js({"order": 42}),
            P + "tool_response": js(response if response is not None else {"result": "charged"}),
            P + "llm_request": "{}",
            P + "llm_response": "{}",
            **(tool_extra or {}),
        },
        parent=agent,
        start=11,
        end=12,
    )
    t.span(
        "call_llm",
        {
            "gen_ai.system": "gcp.vertex.agent",
            P + "llm_request": js(LLM_REQUEST),
            P + "llm_response": js({"content": {"role": "model", "parts": [{"text": "Charged."}]}}),
        },
        parent=agent,
        start=20,
        end=30,
    )
    return t


def test_the_runner_turn_is_a_container_and_the_agent_span_is_the_run() -> None:
    t = adk_trace()
    found = detect(t.spans[0])
    assert found is not None and found[1] is Role.WORKFLOW
    run = t.run()
    assert run.agent == "billing"
    assert run.task == "Charge order 42"
    assert run.final_answer == "Charged."
    assert run.system_prompt == "You are the billing agent."
    assert [d["name"] for d in run.tool_definitions] == ["charge"]


def test_a_wrapped_result_is_unwrapped_and_arguments_are_read() -> None:
    (call,) = calls(adk_trace().run())
    assert (call.name, call.call_id, call.arguments, call.output) == (
        "charge",
        "adk-1",
        {"order": 42},
        "charged",
    )


def test_a_placeholder_call_id_is_no_id() -> None:
    (call,) = calls(adk_trace(tool_extra={"gen_ai.tool.call.id": "<not specified>"}).run())
    assert call.call_id is None


def test_blanked_content_is_unknown_not_empty() -> None:
    t = adk_trace(tool_extra={P + "tool_response": "", P + "tool_call_args": ""})
    # No later model call carries the result either: it stays unknown.
    t.spans[4].attributes[P + "llm_request"] = "{}"
    (call,) = calls(t.run())
    assert call.output_captured is False


def test_older_agent_run_span_names_the_agent_in_brackets() -> None:
    run = adk_trace(agent_span="agent_run [billing]").run()
    assert run.agent == "billing"
    assert names(run) == ["charge"]
