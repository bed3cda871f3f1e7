"""OpenLLMetry / Traceloop: decorator spans, indexed prompts (<= 0.4), LLM-only traces."""

from __future__ import annotations

from attest_otel.adapt import Role, detect
from tests.adapt.spans import Trace, calls, js, names


def decorated_trace() -> Trace:
    t = Trace(scope="traceloop.tracer")
    agent = t.span(
        "billing.agent",
        {
            "traceloop.span.kind": "agent",
            "traceloop.entity.name": "billing",
            "traceloop.entity.input": js({"args": ["Charge order 42"], "kwargs": {}}),
            "traceloop.entity.output": js("Charged 19.50."),
            "attest.allowed_tools": ["charge"],
        },
        start=0,
        end=100,
    )
    t.span(
        "anthropic.chat",
        {
            "llm.request.type": "chat",
            "gen_ai.system": "Anthropic",
            "gen_ai.prompt.0.role": "system",
            "gen_ai.prompt.0.content": "Bill customers.",
            "gen_ai.prompt.1.role": "user",
            "gen_ai.prompt.1.content": "Charge order 42",
            "gen_ai.completion.0.role": "assistant",
            "gen_ai.completion.0.tool_calls.0.id": "toolu_1",
            "gen_ai.completion.0.tool_calls.0.name": "charge",
            "gen_ai.completion.0.tool_calls.0.arguments": '{"order": 42}',
            "llm.request.functions.0.name": "charge",
            "llm.request.functions.0.description": "Charge a card",
            "llm.request.functions.0.parameters": '{"type": "object"}',
        },
        parent=agent,
        start=1,
        end=10,
        scope="opentelemetry.instrumentation.anthropic",
    )
    t.span(
        "charge.tool",
        {
            "traceloop.span.kind": "tool",
            "traceloop.entity.name": "charge",
            "traceloop.entity.input": js({"args": [], "kwargs": {"order": 42}}),
        },
        parent=agent,
        start=11,
        end=12,
        error="card declined",
    )
    t.span(
        "anthropic.chat",
        {
            "llm.request.type": "chat",
            "gen_ai.prompt.0.role": "user",
            "gen_ai.prompt.0.content": "Charge order 42",
            "gen_ai.prompt.1.role": "tool",
            "gen_ai.prompt.1.tool_call_id": "toolu_1",
            "gen_ai.prompt.1.content": "card declined",
            "gen_ai.completion.0.role": "assistant",
            "gen_ai.completion.0.content": "Charged 19.50.",
        },
        parent=agent,
        start=20,
        end=30,
        scope="opentelemetry.instrumentation.anthropic",
    )
    return t


def test_decorator_spans_name_the_agent_task_answer_and_tool() -> None:
    run = decorated_trace().run()
    assert run.agent == "billing"
    assert run.task == "Charge order 42"
    assert run.final_answer == "Charged 19.50."
    assert run.system_prompt == "Bill customers."
    assert run.allowed_tools == ["charge"]
    assert [d["name"] for d in run.tool_definitions] == ["charge"]
    (call,) = calls(run)
    assert call.name == "charge"
    assert call.arguments == {"order": 42}


def test_an_id_less_decorator_tool_span_takes_its_id_and_result_from_the_model_calls() -> None:
    (call,) = calls(decorated_trace().run())
    assert call.call_id == "toolu_1"
    assert call.output == "card declined"
    assert call.is_error is True
    assert call.error_text == "card declined"


def test_indexed_prompt_keys_mark_an_llm_span_even_without_request_type() -> None:
    t = Trace()
    span = t.span("openai.chat", {"gen_ai.prompt.0.role": "user", "gen_ai.prompt.0.content": "x"})
    found = detect(span)
    assert found is not None and (found[0].name, found[1]) == ("openllmetry", Role.MODEL)


def test_a_trace_of_llm_spans_only_gets_its_calls_from_the_messages() -> None:
    t = decorated_trace()
    del t.spans[2:3]  # no tool span at all: a provider instrumentation alone
    run = t.run()
    (call,) = calls(run)
    assert call.name == "charge"
    assert call.call_id == "toolu_1"
    assert call.arguments == {"order": 42}
    assert call.output == "card declined"
    assert call.span_id == t.spans[1].span_id  # the model span that asked for it


def test_anthropic_content_blocks_in_indexed_prompts_are_read() -> None:
    t = decorated_trace()
    del t.spans[2:3]
    second = t.spans[2].attributes
    second["gen_ai.prompt.1.role"] = "user"
    second["gen_ai.prompt.1.content"] = js(
        [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "declined", "is_error": True}]
    )
    del second["gen_ai.prompt.1.tool_call_id"]
    (call,) = calls(t.run())
    assert call.output == "declined"
    assert call.is_error is True  # the provider's own error flag on the result


def test_workflow_spans_are_containers_not_runs() -> None:
    t = Trace(scope="traceloop.tracer")
    wf = t.span("flow.workflow", {"traceloop.span.kind": "workflow"}, start=0, end=100)
    agent = t.span("a.agent", {"traceloop.span.kind": "agent"}, parent=wf, start=1, end=50)
    t.span("x.tool", {"traceloop.span.kind": "tool"}, parent=agent, start=2, end=3)
    assert [r.agent for r in t.runs()] == ["a"]
    assert names(t.run()) == ["x"]
