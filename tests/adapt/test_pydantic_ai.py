"""pydantic-ai's instrumentation, data formats 1-2 (`agent run`) and 3+ (`invoke_agent`)."""

from __future__ import annotations

from attest_otel.adapt import Role, detect
from tests.adapt.spans import Trace, calls, js, names

SCOPE = "pydantic-ai"


def v2_trace() -> Trace:
    t = Trace(scope=SCOPE)
    agent = t.span(
        "agent run",
        {
            "agent_name": "billing",
            "gen_ai.agent.name": "billing",
            "final_result": "Charged.",
            "gen_ai.system_instructions": js([{"type": "text", "content": "Bill."}]),
            "pydantic_ai.all_messages": js(
                [
                    {"role": "user", "parts": [{"type": "text", "content": "Earlier question"}]},
                    {"role": "assistant", "parts": [{"type": "text", "content": "Earlier answer"}]},
                    {"role": "user", "parts": [{"type": "text", "content": "Charge order 42"}]},
                ]
            ),
            "pydantic_ai.new_message_index": 2,
        },
        start=0,
        end=100,
    )
    t.span(
        "chat m",
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.system": "openai",
            "model_request_parameters": js(
                {
                    "function_tools": [
                        {
                            "name": "charge",
                            "description": "Charge",
                            "parameters_json_schema": {"type": "object"},
                        }
                    ]
                }
            ),
        },
        parent=agent,
        start=1,
        end=5,
    )
    t.span("running tools", {"tools": ["charge"]}, parent=agent, start=6, end=20)
    t.span(
        "running tool",
        {
            "gen_ai.tool.name": "charge",
            "gen_ai.tool.call.id": "call_1",
            "tool_arguments": js({"order": 42}),
            "tool_response": "charged",
        },
        parent=t.spans[2],
        start=7,
        end=19,
    )
    return t


def test_format_two_reads_tool_arguments_and_tool_response() -> None:
    run = v2_trace().run()
    (call,) = calls(run)
    assert (call.name, call.call_id, call.arguments, call.output) == (
        "charge",
        "call_1",
        {"order": 42},
        "charged",
    )


def test_the_task_starts_at_the_new_message_index_not_in_the_history() -> None:
    run = v2_trace().run()
    assert run.task == "Charge order 42"
    assert run.final_answer == "Charged."
    assert run.system_prompt == "Bill."


def test_offered_tools_come_from_model_request_parameters_when_no_definitions() -> None:
    run = v2_trace().run()
    assert run.tool_definitions == [
        {"name": "charge", "description": "Charge", "parameters": {"type": "object"}}
    ]


def test_the_running_tools_group_span_is_not_a_call() -> None:
    found = detect(v2_trace().spans[2])
    assert found is not None and found[1] is Role.OTHER


def test_format_one_reads_messages_from_the_events_attribute() -> None:
    t = Trace(scope=SCOPE)
    agent = t.span("agent run", {"agent_name": "a", "final_result": "ok"}, start=0, end=10)
    t.span(
        "chat m",
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.system": "openai",
            "events": js(
                [
                    {"event.name": "gen_ai.system.message", "content": "Sys", "role": "system"},
                    {"event.name": "gen_ai.user.message", "content": "Do it", "role": "user"},
                    {
                        "event.name": "gen_ai.choice",
                        "index": 0,
                        "message": {"role": "assistant", "content": "ok"},
                    },
                ]
            ),
        },
        parent=agent,
        start=1,
        end=2,
    )
    run = t.run()
    assert (run.task, run.final_answer, run.system_prompt) == ("Do it", "ok", "Sys")


def test_format_three_and_later_use_genai_names_and_tool_attributes() -> None:
    t = Trace(scope=SCOPE)
    agent = t.span(
        "invoke_agent billing",
        {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "billing"},
        start=0,
        end=10,
    )
    t.span(
        "execute_tool charge",
        {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "charge",
            "gen_ai.tool.call.arguments": "{}",
            "gen_ai.tool.call.result": "ok",
            "logfire.msg": "running tool: charge",
        },
        parent=agent,
        start=1,
        end=2,
    )
    t.span(
        "execute_tool final_result",
        {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "final_result",
            "logfire.msg": "running output function: final_result",
        },
        parent=agent,
        start=3,
        end=4,
    )
    run = t.run()
    assert run.agent == "billing"
    assert names(run) == ["charge"]  # the output function is the answer, not tool use
