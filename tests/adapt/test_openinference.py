"""OpenInference: span kinds, flattened messages, OpenAI Agents and LangGraph shapes."""

from __future__ import annotations

from typing import Any

from attest_otel.adapt import Role, detect
from tests.adapt.spans import Trace, calls, js, names

KIND = "openinference.span.kind"


def llm(
    t: Trace, parent: Any, start: int, inputs: list[dict[str, Any]], output: dict[str, Any]
) -> None:
    attrs: dict[str, Any] = {KIND: "LLM", "llm.model_name": "gpt-4o"}
    for i, msg in enumerate(inputs):
        for key, value in msg.items():
            attrs[f"llm.input_messages.{i}.message.{key}"] = value
    for key, value in output.items():
        attrs[f"llm.output_messages.0.message.{key}"] = value
    attrs["llm.tools.0.tool.json_schema"] = js(
        {
            "type": "function",
            "function": {"name": "lookup", "description": "Find", "parameters": {}},
        }
    )
    t.span("ChatOpenAI", attrs, parent=parent, start=start, end=start + 5)


def agent_trace(tool_output: str = "found 42") -> Trace:
    t = Trace()
    agent = t.span(
        "billing",
        {
            KIND: "AGENT",
            "agent.name": "billing",
            "input.value": "Find order 42",
            "input.mime_type": "text/plain",
        },
        start=0,
        end=100,
    )
    llm(
        t,
        agent,
        1,
        [
            {"role": "system", "content": "Be helpful."},
            {"role": "user", "content": "Find order 42"},
        ],
        {
            "role": "assistant",
            "tool_calls.0.tool_call.id": "call_1",
            "tool_calls.0.tool_call.function.name": "lookup",
            "tool_calls.0.tool_call.function.arguments": '{"id": 42}',
        },
    )
    t.span(
        "lookup",
        {
            KIND: "TOOL",
            "tool.name": "lookup",
            "input.value": '{"id": 42}',
            "output.value": tool_output,
        },
        parent=agent,
        start=10,
        end=12,
    )
    llm(
        t,
        agent,
        20,
        [
            {"role": "user", "content": "Find order 42"},
            {"role": "tool", "content": tool_output, "tool_call_id": "call_1"},
        ],
        {
            "role": "assistant",
            "contents.0.message_content.type": "text",
            "contents.0.message_content.text": "Order 42 found.",
        },
    )
    return t


def test_an_agent_span_with_llm_and_tool_spans_is_one_run() -> None:
    run = agent_trace().run()
    assert run.agent == "billing"
    assert run.task == "Find order 42"
    assert run.final_answer == "Order 42 found."
    assert run.system_prompt == "Be helpful."
    assert [d["name"] for d in run.tool_definitions] == ["lookup"]
    (call,) = calls(run)
    assert (call.name, call.arguments, call.output) == ("lookup", {"id": 42}, "found 42")


def test_redacted_content_is_unknown_not_empty() -> None:
    (call,) = calls(agent_trace(tool_output="__REDACTED__").run())
    assert call.output_captured is False
    assert call.output is None


def test_a_langchain_tool_message_output_gives_its_content_and_call_id() -> None:
    message = {
        "type": "tool",
        "data": {"content": '{"total": 19.5}', "tool_call_id": "call_9", "type": "tool"},
    }
    (call,) = calls(agent_trace(tool_output=js(message)).run())
    assert call.output == '{"total": 19.5}'
    assert call.call_id == "call_9"


def openai_agents_handoff() -> Trace:
    """The OpenAI Agents processor: SDK trace root (AGENT, no I/O), sibling agents, a handoff."""
    t = Trace()
    root = t.span("Agent workflow", {KIND: "AGENT"}, start=0, end=100)
    triage = t.span("triage", {KIND: "AGENT", "agent.name": "triage"}, parent=root, start=1, end=30)
    t.span(
        "response",
        {
            KIND: "LLM",
            "llm.input_messages.0.message.role": "system",
            "llm.input_messages.0.message.content": "Route requests.",
            "llm.input_messages.1.message.role": "user",
            "llm.input_messages.1.message.content": "Charge order 42",
            "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.tool_calls.0.tool_call.id": "call_t",
            "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": (
                "transfer_to_billing"
            ),
        },
        parent=triage,
        start=2,
        end=10,
    )
    t.span(
        "handoff to billing",
        {KIND: "TOOL", "input.value": "triage", "output.value": "billing"},
        parent=triage,
        start=11,
        end=12,
    )
    billing = t.span(
        "billing",
        {KIND: "AGENT", "agent.name": "billing", "graph.node.parent_id": "triage"},
        parent=root,
        start=31,
        end=90,
    )
    t.span(
        "charge",
        {KIND: "TOOL", "tool.name": "charge", "input.value": "{}", "output.value": "ok"},
        parent=billing,
        start=40,
        end=41,
    )
    return t


def test_a_handoff_span_is_a_tool_span_without_a_tool_name() -> None:
    span = openai_agents_handoff().spans[3]
    found = detect(span)
    assert found is not None and found[1] is Role.HANDOFF


def test_a_handoff_is_not_a_tool_call_and_its_target_is_a_run_of_its_own() -> None:
    runs = openai_agents_handoff().runs()
    assert [r.agent for r in runs] == ["triage", "billing"]
    assert names(runs[0]) == []
    assert runs[0].task == "Charge order 42"
    assert runs[0].final_answer is None
    assert names(runs[1]) == ["charge"]


def test_the_sdk_trace_root_that_only_holds_agents_is_not_a_run() -> None:
    runs = openai_agents_handoff().runs()
    assert "Agent workflow" not in [r.agent for r in runs]


def test_langgraph_node_spans_of_kind_agent_belong_to_the_graph_run() -> None:
    t = Trace()
    meta_root = {"attest.allowed_tools": ["lookup"], "attest.tool_fallbacks": "{}"}
    graph = t.span(
        "billing_agent",
        {
            KIND: "AGENT",
            "input.value": js({"messages": [{"role": "user", "content": "Find 42"}]}),
            "output.value": js(
                {"messages": [{"type": "ai", "data": {"content": "Found.", "type": "ai"}}]}
            ),
            "metadata": js(meta_root),
        },
        start=0,
        end=100,
    )
    meta_node = {**meta_root, "langgraph_node": "agent", "langgraph_step": 1}
    for step, start in enumerate((1, 30)):
        node = t.span(
            "agent",
            {KIND: "AGENT", "metadata": js(meta_node)},
            parent=graph,
            start=start,
            end=start + 10,
        )
        t.span(
            "FakeChatModel",
            {
                KIND: "LLM",
                "llm.input_messages.0.message.role": "user",
                "llm.input_messages.0.message.content": "Find 42",
                "llm.output_messages.0.message.role": "assistant",
                "llm.output_messages.0.message.content": "" if step == 0 else "Found.",
            },
            parent=node,
            start=start + 1,
            end=start + 5,
        )
    tools = t.span("tools", {KIND: "CHAIN"}, parent=graph, start=15, end=25)
    t.span(
        "lookup",
        {KIND: "TOOL", "tool.name": "lookup", "input.value": "{}", "output.value": "ok"},
        parent=tools,
        start=16,
        end=20,
    )
    run = t.run()
    assert run.agent == "billing_agent"
    assert run.task == "Find 42"
    assert run.final_answer == "Found."
    assert names(run) == ["lookup"]
    assert run.allowed_tools == ["lookup"]
    assert run.tool_fallbacks == {}


def test_a_raised_error_without_output_takes_its_result_from_the_next_model_input() -> None:
    t = agent_trace()
    tool = t.spans[2]
    del tool.attributes["output.value"]
    tool.status_code = 2
    tool.status_message = "ToolError: boom"
    (call,) = calls(t.run())
    assert call.is_error is True
    assert call.call_id == "call_1"
    assert call.output == "found 42"  # what the model was sent, found by the requested id
