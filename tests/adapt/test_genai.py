"""OTel GenAI conventions: the latest form (attributes) and the old form (events, logs)."""

from __future__ import annotations

from typing import Any

from attest_otel.adapt import Role, detect
from attest_otel.adapt.genai import GenAI
from attest_otel.model import Span
from tests.adapt.spans import Trace, calls, event, js, names

SYSTEM = [{"type": "text", "content": "You are a billing agent."}]
TOOLS = [
    {
        "type": "function",
        "name": "charge_card",
        "description": "Charge the card on file.",
        "parameters": {"type": "object", "properties": {"order": {"type": "integer"}}},
    }
]


def latest_trace() -> Trace:
    t = Trace()
    agent = t.span(
        "invoke_agent billing",
        {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.provider.name": "openai",
            "gen_ai.agent.name": "billing",
            "gen_ai.input.messages": js(
                [{"role": "user", "parts": [{"type": "text", "content": "Charge order 42."}]}]
            ),
            "gen_ai.output.messages": js(
                [{"role": "assistant", "parts": [{"type": "text", "content": "Charged.\n"}]}]
            ),
        },
        start=0,
        end=100,
    )
    t.span(
        "chat gpt-4o",
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "openai",
            "gen_ai.system_instructions": js(SYSTEM),
            "gen_ai.tool.definitions": js(TOOLS),
            "gen_ai.input.messages": js(
                [{"role": "user", "parts": [{"type": "text", "content": "Charge order 42."}]}]
            ),
            "gen_ai.output.messages": js(
                [
                    {
                        "role": "assistant",
                        "parts": [
                            {
                                "type": "tool_call",
                                "id": "call_1",
                                "name": "charge_card",
                                "arguments": {"order": 42},
                            }
                        ],
                    }
                ]
            ),
        },
        parent=agent,
        start=1,
        end=10,
    )
    t.span(
        "execute_tool charge_card",
        {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "charge_card",
            "gen_ai.tool.call.id": " call_1 ",
            "gen_ai.tool.call.arguments": js({"order": 42}),
            "gen_ai.tool.call.result": js({"status": "charged"}),
        },
        parent=agent,
        start=11,
        end=20,
    )
    return t


def test_the_latest_form_gives_agent_task_answer_system_prompt_tools_and_calls() -> None:
    run = latest_trace().run()
    assert run.agent == "billing"
    assert run.task == "Charge order 42."
    assert run.final_answer == "Charged."
    assert run.system_prompt == "You are a billing agent."
    assert [d["name"] for d in run.tool_definitions] == ["charge_card"]
    (call,) = calls(run)
    assert call.name == "charge_card"
    assert call.call_id == "call_1"
    assert call.arguments == {"order": 42}
    assert call.output == {"status": "charged"}
    assert call.is_error is None
    assert call.span_id == "0000000000000003"


def test_latest_and_old_spans_are_told_apart_by_provider_name_and_content() -> None:
    t = Trace()
    latest = t.span("chat x", {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai"})
    old = t.span("chat x", {"gen_ai.operation.name": "chat", "gen_ai.system": "openai"})
    plain = t.span("openai call", {"gen_ai.system": "openai", "gen_ai.request.model": "gpt"})
    assert [dialect_and_role(s) for s in (latest, old, plain)] == [
        ("genai", Role.MODEL),
        ("genai-old", Role.MODEL),
        ("genai-old", Role.MODEL),
    ]


def dialect_and_role(span: Span) -> tuple[str, Role] | None:
    found = detect(span)
    return None if found is None else (found[0].name, found[1])


def test_an_old_tool_span_without_operation_name_is_still_a_tool() -> None:
    t = Trace()
    span = t.span("execute_tool lookup", {"gen_ai.tool.name": "lookup", "gen_ai.tool.call.id": "c"})
    assert dialect_and_role(span) == ("genai-old", Role.TOOL)


def old_trace(*, in_logs: bool) -> Trace:
    """<= 1.36: no content attributes, messages as events on the span or on the logs signal."""
    t = Trace()
    agent = t.span(
        "invoke_agent helper",
        {"gen_ai.operation.name": "invoke_agent", "gen_ai.system": "openai"},
        start=0,
        end=100,
    )
    first = t.span(
        "chat gpt-4", {"gen_ai.operation.name": "chat", "gen_ai.system": "openai"}, parent=agent
    )
    tool = t.span(
        "execute_tool get_weather",
        {"gen_ai.tool.name": "get_weather", "gen_ai.tool.call.id": "call_w"},
        parent=agent,
        start=5,
        end=6,
    )
    second = t.span(
        "chat gpt-4",
        {"gen_ai.operation.name": "chat", "gen_ai.system": "openai"},
        parent=agent,
        start=10,
        end=20,
    )
    assistant_call = {
        "tool_calls": [
            {
                "id": "call_w",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            }
        ]
    }
    first_events: list[tuple[str, dict[str, Any]]] = [
        ("gen_ai.system.message", {"content": "Be brief."}),
        ("gen_ai.user.message", {"content": "Weather in Paris?"}),
        ("gen_ai.choice", {"index": 0, "finish_reason": "tool_calls", "message": assistant_call}),
    ]
    second_events: list[tuple[str, dict[str, Any]]] = [
        ("gen_ai.user.message", {"content": "Weather in Paris?"}),
        ("gen_ai.assistant.message", assistant_call),
        ("gen_ai.tool.message", {"content": "rain, 12C", "id": "call_w"}),
        ("gen_ai.choice", {"index": 0, "message": {"content": "Rainy, 12C."}}),
    ]
    for span, evs in ((first, first_events), (second, second_events)):
        for name, body in evs:
            if in_logs:
                t.log(span, name, body, **{"gen_ai.system": "openai"})
            else:
                span.events.append(event(name, **body))
    assert tool.attributes["gen_ai.tool.name"] == "get_weather"
    return t


def test_old_form_content_in_span_events_gives_task_answer_and_the_tool_result() -> None:
    run = old_trace(in_logs=False).run()
    assert run.task == "Weather in Paris?"
    assert run.final_answer == "Rainy, 12C."
    assert run.system_prompt == "Be brief."
    (call,) = calls(run)
    assert call.arguments == {"city": "Paris"}
    assert call.output == "rain, 12C"
    assert call.output_captured


def test_old_form_content_on_the_logs_signal_is_read_by_trace_and_span_id() -> None:
    run = old_trace(in_logs=True).run()
    assert run.task == "Weather in Paris?"
    assert run.final_answer == "Rainy, 12C."
    assert calls(run)[0].output == "rain, 12C"


def test_pre_1_28_prompt_and_completion_events_are_read() -> None:
    t = Trace()
    t.span(
        "chat gpt-4",
        {"gen_ai.system": "openai", "gen_ai.request.model": "gpt-4"},
        events=[
            event(
                "gen_ai.content.prompt",
                **{"gen_ai.prompt": js([{"role": "user", "content": "Hi"}])},
            ),
            event("gen_ai.content.completion", **{"gen_ai.completion": "Hello!"}),
        ],
    )
    run = t.run()
    assert (run.task, run.final_answer) == ("Hi", "Hello!")


def test_the_operation_details_event_carries_latest_content_outside_attributes() -> None:
    t = Trace()
    t.span(
        "chat m",
        {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "x"},
        events=[
            event(
                "gen_ai.client.inference.operation.details",
                **{
                    "gen_ai.input.messages": js(
                        [{"role": "user", "parts": [{"type": "text", "content": "Task"}]}]
                    ),
                    "gen_ai.output.messages": js(
                        [{"role": "assistant", "parts": [{"type": "text", "content": "Done"}]}]
                    ),
                    "gen_ai.system_instructions": js(SYSTEM),
                },
            )
        ],
    )
    run = t.run()
    assert (run.task, run.final_answer, run.system_prompt) == (
        "Task",
        "Done",
        "You are a billing agent.",
    )


def test_a_tool_result_that_was_not_captured_is_unknown_not_empty() -> None:
    t = latest_trace()
    del t.spans[2].attributes["gen_ai.tool.call.result"]
    (call,) = calls(t.run())
    assert call.output is None
    assert call.output_captured is False


def test_the_spec_example_result_key_and_a_spaced_id_are_accepted() -> None:
    """The agent-spans doc names the result field `result` with a leading space in the id."""
    t = latest_trace()
    del t.spans[2].attributes["gen_ai.tool.call.result"]
    t.span(
        "chat gpt-4o",
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "openai",
            "gen_ai.input.messages": js(
                [
                    {
                        "role": "tool",
                        "parts": [{"type": "tool_call_response", "id": " call_1", "result": "ok"}],
                    }
                ]
            ),
        },
        parent=t.spans[0],
        start=30,
        end=40,
    )
    assert calls(t.run())[0].output == "ok"


def test_genai_reads_only_the_parts_it_is_asked_for() -> None:
    span = latest_trace().spans[1]
    ex = GenAI().exchange(span, (), frozenset({"answer"}))
    assert ex.input is None and ex.tools is None and ex.system is None
    assert names(latest_trace().run()) == ["charge_card"]
