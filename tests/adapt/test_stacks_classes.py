"""Classes of misreading found by recording new stacks (issue 25), one synthetic trace each.

The recorded traces that showed them are in tests/fixtures/traces (the stack named on each
test); these keep the class fixed when the stack changes.
"""

from __future__ import annotations

from typing import Any

from attest_otel.adapt.base import captured
from attest_otel.grade import rules
from tests.adapt.spans import Trace, calls, js

SYSTEM = "You are billing_agent."
TASK = "Charge order 42."


def _ask(call_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_call", "id": call_id, "name": name, "arguments": args}


def _text(role: str, content: str) -> dict[str, Any]:
    return {"role": role, "parts": [{"type": "text", "content": content}]}


def _told(call_id: str, response: str) -> dict[str, Any]:
    return {
        "role": "tool",
        "parts": [{"type": "tool_call_response", "id": call_id, "response": response}],
    }


def _covering_span(t: Trace, history: list[dict[str, Any]], answer: str) -> Any:
    """One span for a whole multi-step run: the last request's attributes win (LiteLLM's
    OTel callback writes each request onto the caller's span: `litellm_otel__*`)."""
    return t.span(
        "billing_agent",
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.system": "openai",
            "gen_ai.request.model": "gpt-4o-mini",
            "llm.request.type": "completion",
            "gen_ai.input.messages": js(history),
            "gen_ai.output.messages": js(
                [{"role": "assistant", "parts": [{"type": "text", "content": answer}]}]
            ),
        },
        start=0,
        end=100,
    )


def _run_history(earlier: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    return [
        _text("system", SYSTEM),
        *(earlier or []),
        _text("user", TASK),
        {"role": "assistant", "parts": [_ask("call_1", "lookup_order", {"order_id": 42})]},
        _told("call_1", '{"total": 19.5}'),
        {"role": "assistant", "parts": [_ask("call_2", "charge_card", {"order_id": 42})]},
        _told("call_2", "Error: card declined"),
    ]


def test_calls_only_in_the_history_of_one_model_span_covering_the_run() -> None:
    """No model output names a call (the span holds the last request only): the calls are
    the assistant requests in its history, with their results from the tool messages."""
    t = Trace()
    _covering_span(t, _run_history(), "I could not charge the card.")
    run = t.run()
    got = [(c.name, c.call_id, c.output, rules.is_error(c)) for c in calls(run)]
    assert got == [
        ("lookup_order", "call_1", '{"total": 19.5}', False),
        ("charge_card", "call_2", "Error: card declined", True),
    ]


def test_calls_of_earlier_turns_in_that_history_are_not_this_runs() -> None:
    """What precedes the last user message belongs to an earlier turn of the chat."""
    earlier = [
        _text("user", "What is order 41?"),
        {"role": "assistant", "parts": [_ask("call_0", "lookup_order", {"order_id": 41})]},
        _told("call_0", '{"total": 3}'),
        _text("assistant", "Order 41 is 3 EUR."),
    ]
    t = Trace()
    _covering_span(t, _run_history(earlier), "I could not charge the card.")
    assert [c.call_id for c in calls(t.run())] == ["call_1", "call_2"]


def test_raw_request_spans_under_a_model_span_that_is_the_run_root_are_no_gap() -> None:
    """The client's raw-request copies (`raw_gen_ai_request`, `llm.openai.tools`) sit under
    the model span that is also the run's root: the model call's own, not unread calls."""
    t = Trace()
    root = _covering_span(t, _run_history(), "I could not charge the card.")
    for i in range(2):
        t.span(
            "raw_gen_ai_request",
            {"llm.openai.tools": js([{"type": "function", "function": {"name": "charge_card"}}])},
            parent=root,
            start=10 * i + 1,
            end=10 * i + 5,
        )
    run = t.run()
    assert captured(run.final_answer)
    assert run.gaps == []


def test_an_empty_agent_span_beside_the_span_holding_its_work_is_that_runs_agent() -> None:
    """The nested agent is an empty `invoke_agent` span; its work sits in a sibling of the
    same name (OpenLLMetry's LangGraph `execute_task billing_agent`: `langchain_openllmetry__
    multi_agent`). Its calls are the nested agent's, not the calling agent's."""
    t = Trace()
    outer = t.span(
        "invoke_agent support_agent",
        {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support_agent"},
        start=0,
        end=100,
    )
    delegate = t.span(
        "execute_tool delegate_billing",
        {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "delegate_billing"},
        parent=outer,
        start=10,
        end=90,
    )
    t.span(
        "invoke_agent billing_agent",
        {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "billing_agent"},
        parent=delegate,
        start=11,
        end=12,
    )
    work = t.span(
        "execute_task billing_agent",
        {
            "traceloop.span.kind": "task",
            "traceloop.entity.name": "billing_agent",
            "gen_ai.operation.name": "execute_task",
        },
        parent=delegate,
        start=12,
        end=80,
    )
    for i, name in enumerate(("lookup_order", "charge_card")):
        t.span(
            f"execute_tool {name}",
            {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name},
            parent=work,
            start=20 + 10 * i,
            end=25 + 10 * i,
        )
    runs = {r.agent: [c.name for c in calls(r)] for r in t.runs()}
    assert runs == {
        "support_agent": ["delegate_billing"],
        "billing_agent": ["lookup_order", "charge_card"],
    }


# --------------------------------------------------------------------------- google-genai


def _gemini(
    t: Trace, parent: Any, start: int, system: str, history: list[Any], reply: list[Any]
) -> Any:
    """A GenAI `generate_content` span as opentelemetry-instrumentation-google-genai writes it
    for each request of automatic function calling (`google_genai__*`)."""
    return t.span(
        "generate_content gemini-2.5-flash",
        {
            "gen_ai.operation.name": "generate_content",
            "gen_ai.provider.name": "gemini",
            "gen_ai.request.model": "gemini-2.5-flash",
            "gen_ai.system_instructions": js([{"type": "text", "content": system}]),
            "gen_ai.input.messages": js(history),
            "gen_ai.output.messages": js([{"role": "assistant", "parts": reply}]),
        },
        parent=parent,
        start=start,
        end=start + 5,
    )


def _response(call_id: str, response: dict[str, Any]) -> dict[str, Any]:
    return {
        "role": "user",
        "parts": [{"type": "tool_call_response", "id": call_id, "response": response}],
    }


def test_an_error_key_alone_in_a_function_response_is_an_error() -> None:
    """Gemini's function responses are `{"result"|"output": ...}` or `{"error": ...}`; the
    SDK's automatic function calling sends `{"error": "<exception>"}` for a tool that raised."""
    t = Trace()
    root = t.span("billing_agent", start=0, end=100)
    ask = _ask("lookup_order_0", "lookup_order", {"order_id": 42})
    user = _text("user", TASK)
    _gemini(t, root, 1, SYSTEM, [user], [ask])
    told = _response("lookup_order_0", {"error": "gateway timed out"})
    _gemini(t, root, 10, SYSTEM, [user, {"role": "assistant", "parts": [ask]}, told], [])
    (call,) = calls(t.run())
    assert (call.output, rules.is_error(call)) == ("gateway timed out", True)


def test_an_empty_error_key_in_a_function_response_is_no_error() -> None:
    t = Trace()
    root = t.span("billing_agent", start=0, end=100)
    ask = _ask("lookup_order_0", "lookup_order", {"order_id": 42})
    user = _text("user", TASK)
    _gemini(t, root, 1, SYSTEM, [user], [ask])
    told = _response("lookup_order_0", {"error": None})
    _gemini(t, root, 10, SYSTEM, [user, {"role": "assistant", "parts": [ask]}, told], [])
    (call,) = calls(t.run())
    assert rules.is_error(call) is False


def test_an_id_asked_for_again_after_its_result_is_a_new_call() -> None:
    """Ids made up per message (`charge_card_0`) repeat across the conversation: the retry is
    a second call with its own result, not the first one again."""
    t = Trace()
    root = t.span("billing_agent", start=0, end=100)
    ask = _ask("charge_card_0", "charge_card", {"order_id": 42})
    user = _text("user", TASK)
    asked = {"role": "assistant", "parts": [ask]}
    failed = _response("charge_card_0", {"error": "gateway timed out"})
    charged = _response("charge_card_0", {"result": "charged"})
    _gemini(t, root, 1, SYSTEM, [user], [ask])
    _gemini(t, root, 10, SYSTEM, [user, asked, failed], [ask])
    _gemini(t, root, 20, SYSTEM, [user, asked, failed, asked, charged], [])
    got = [(c.name, c.output, rules.is_error(c)) for c in calls(t.run())]
    assert got == [
        ("charge_card", "gateway timed out", True),
        ("charge_card", "charged", False),
    ]


def test_the_same_request_in_two_spans_of_one_model_call_stays_one_call() -> None:
    """Two spans of one model call (instrumentation and client) both show the request; the
    model was not told its result yet, so it is one call."""
    t = Trace()
    root = t.span("billing_agent", start=0, end=100)
    ask = _ask("charge_card_0", "charge_card", {"order_id": 42})
    user = _text("user", TASK)
    _gemini(t, root, 1, SYSTEM, [user], [ask])
    _gemini(t, root, 2, SYSTEM, [user], [ask])
    charged = _response("charge_card_0", {"result": "charged"})
    _gemini(t, root, 20, SYSTEM, [user, {"role": "assistant", "parts": [ask]}, charged], [])
    assert [(c.name, c.output) for c in calls(t.run())] == [("charge_card", "charged")]


def test_a_span_whose_model_calls_have_another_system_prompt_is_a_nested_agent() -> None:
    """Plain spans named after each agent, no tool spans: the billing agent's span sits in the
    support agent's, and its model calls speak another conversation (another system prompt):
    a run of its own, not steps of the support agent."""
    t = Trace()
    outer = t.span("support_agent", start=0, end=100)
    delegate = _ask("delegate_billing_0", "delegate_billing", {"request": TASK})
    user = _text("user", TASK)
    _gemini(t, outer, 1, "You are support_agent.", [user], [delegate])
    inner = t.span("billing_agent", parent=outer, start=10, end=60)
    lookup = _ask("lookup_order_0", "lookup_order", {"order_id": 42})
    _gemini(t, inner, 11, SYSTEM, [user], [lookup])
    looked = _response("lookup_order_0", {"result": "19.5"})
    _gemini(t, inner, 20, SYSTEM, [user, {"role": "assistant", "parts": [lookup]}, looked], [])
    settled = _response("delegate_billing_0", {"result": "charged"})
    history = [user, {"role": "assistant", "parts": [delegate]}, settled]
    _gemini(t, outer, 70, "You are support_agent.", history, [])
    runs = {r.agent: [c.name for c in calls(r)] for r in t.runs()}
    assert runs == {"support_agent": ["delegate_billing"], "billing_agent": ["lookup_order"]}


# --------------------------------------------------------------------------- BeeAI


def _oi(t: Trace, name: str, kind: str, parent: Any, start: int, end: int, **attrs: Any) -> Any:
    return t.span(
        name,
        {"openinference.span.kind": kind, **attrs},
        parent=parent,
        start=start,
        end=end,
        error=attrs.pop("_error", None),
    )


def test_an_error_event_span_inside_a_tool_span_is_that_calls_error_not_a_call() -> None:
    """BeeAI's emitter records a tool's `error` event as a TOOL span inside the tool's span
    (`beeai_openinference__retry`): one call, an error, not a second call named `error`."""
    t = Trace()
    agent = _oi(t, "billing_agent", "AGENT", None, 0, 100, **{"input.value": TASK})
    tool = t.span(
        "charge_card",
        {"openinference.span.kind": "TOOL", "tool.name": "charge_card"},
        parent=agent,
        start=10,
        end=20,
        error="Tool Error",
    )
    t.span(
        "error",
        {"openinference.span.kind": "TOOL", "output.value": "ToolError: gateway timed out"},
        parent=tool,
        start=15,
        end=16,
        error="Tool Error",
    )
    (call,) = calls(t.run())
    assert (call.name, rules.is_error(call)) == ("charge_card", True)


def test_an_agent_span_named_after_the_answer_tool_is_no_run() -> None:
    """BeeAI's `final_answer` event is an AGENT-kind span beside the run, with no work."""
    t = Trace()
    agent = _oi(t, "billing_agent", "AGENT", None, 0, 100, **{"input.value": TASK})
    t.span(
        "lookup_order",
        {"openinference.span.kind": "TOOL", "tool.name": "lookup_order"},
        parent=agent,
        start=10,
        end=20,
    )
    _oi(t, "final_answer", "AGENT", agent, 90, 91, **{"input.value": js({"output": "done"})})
    assert [(r.agent, [c.name for c in calls(r)]) for r in t.runs()] == [
        ("billing_agent", ["lookup_order"])
    ]


# --------------------------------------------------------------------------- DSPy


def _react_run(*steps: tuple[str, dict[str, Any]]) -> Any:
    """A DSPy-like run: a CHAIN span of the program, TOOL spans `<tool>.__call__`."""
    t = Trace()
    root = t.span(
        "billing_agent.forward",
        {"openinference.span.kind": "CHAIN", "input.value": js({"question": TASK})},
        start=0,
        end=100,
    )
    for i, (name, args) in enumerate(steps):
        t.span(
            f"{name}.__call__",
            {"openinference.span.kind": "TOOL", "input.value": js(args)},
            parent=root,
            start=10 + 10 * i,
            end=15 + 10 * i,
        )
    return t.run()


def test_a_react_loops_finish_step_is_no_call() -> None:
    """DSPy's ReAct records its `finish` step (no arguments, last) as a tool span."""
    run = _react_run(("lookup_order", {"order_id": 42}), ("finish", {}))
    assert [c.name for c in calls(run)] == ["lookup_order"]


def test_a_tool_named_finish_with_arguments_or_not_last_is_a_call() -> None:
    run = _react_run(("finish", {"order_id": 42}))
    assert [c.name for c in calls(run)] == ["finish"]
    run = _react_run(("finish", {}), ("lookup_order", {"order_id": 42}))
    assert [c.name for c in calls(run)] == ["finish", "lookup_order"]
