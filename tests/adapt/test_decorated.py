"""Manual-tracing decorator spans (OpenLIT's `start_trace` / `@openlit.trace` and their kind):
agents and tools with no role, placed by the model calls around them."""

from __future__ import annotations

from typing import Any

from attest_otel.adapt.base import PY_LITERAL_LIMIT, python_literal
from attest_otel.model import Span
from attest_otel.policy import AgentPolicy, Policy
from tests.adapt.spans import Trace, event, js


def chat(
    t: Trace,
    parent: Span,
    start: int,
    *,
    asks: list[tuple[str, str, dict[str, Any]]] = (),
    answer: str | None = None,
    task: str = "Charge order 42.",
) -> Span:
    """A latest-form GenAI model call under `parent` asking for `asks` (id, tool, args)."""
    parts: list[dict[str, Any]] = [
        {"type": "tool_call", "id": cid, "name": name, "arguments": args}
        for cid, name, args in asks
    ]
    if answer is not None:
        parts.append({"type": "text", "content": answer})
    return t.span(
        "chat gpt-4o-mini",
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "openai",
            "gen_ai.input.messages": js(
                [{"role": "user", "parts": [{"type": "text", "content": task}]}]
            ),
            "gen_ai.output.messages": js([{"role": "assistant", "parts": parts}]),
        },
        parent=parent,
        start=start,
        end=start + 1,
        scope="sdk.instrumentation.openai",
    )


def decorated(t: Trace, name: str, parent: Span, start: int, kwargs: str, result: str) -> Span:
    """A decorator's span of one function call: Python-repr arguments, plain-text result."""
    return t.span(
        name,
        {"function.args": "()", "function.kwargs": kwargs, "gen_ai.output.messages": result},
        parent=parent,
        start=start,
        end=start + 1,
        scope="sdk",
    )


def billing(t: Trace, parent: Span | None = None, start: int = 0) -> Span:
    """billing_agent: looks the order up, the charge raises, the retry works."""
    agent = t.span(
        "billing_agent",
        {"gen_ai.output.messages": "Charged."},
        parent=parent,
        start=start,
        end=start + 20,
        scope="sdk",
    )
    chat(t, agent, start + 1, asks=[("c1", "lookup_order", {"order_id": 42})])
    decorated(t, "lookup_order", agent, start + 3, "{'order_id': 42}", '{"total": 19.5}')
    chat(t, agent, start + 5, asks=[("c2", "charge_card", {"order_id": 42, "amount": 19.5})])
    t.span(
        "charge_card",
        parent=agent,
        start=start + 7,
        end=start + 8,
        scope="sdk",
        error="ToolError: card declined",
        events=[
            event(
                "exception", **{"exception.type": "ToolError", "exception.message": "card declined"}
            )
        ],
    )
    chat(t, agent, start + 9, asks=[("c3", "charge_card", {"order_id": 42, "amount": 19.5})])
    decorated(t, "charge_card", agent, start + 11, "{'order_id': 42, 'amount': 19.5}", "ok r-1")
    chat(t, agent, start + 13, answer="Charged.")
    return agent


def test_a_roleless_span_above_model_calls_is_the_agent_and_named_spans_it_asked_for_are_calls() -> (
    None
):
    t = Trace()
    billing(t)
    run = t.run()
    assert run.agent == "billing_agent"
    assert (run.task, run.final_answer) == ("Charge order 42.", "Charged.")
    calls = [c for _, c in run.tool_calls]
    assert [c.name for c in calls] == ["lookup_order", "charge_card", "charge_card"]
    assert calls[0].arguments == {"order_id": 42}  # parsed from the Python repr
    assert calls[0].output == {"total": 19.5}
    assert calls[1].is_error and calls[1].error_text == "ToolError: card declined"
    assert calls[1].arguments == {"order_id": 42, "amount": 19.5}  # the model's request
    assert calls[2].output == "ok r-1"


def test_the_agent_gets_the_policy_the_user_gave_for_its_name() -> None:
    t = Trace()
    billing(t)
    policy = Policy({"billing_agent": AgentPolicy(["lookup_order"], {}, "billing_agent")})
    assert t.run(policy=policy).allowed_tools == ["lookup_order"]


def test_a_decorated_helper_no_model_asked_for_is_not_a_call() -> None:
    t = Trace()
    agent = billing(t)
    decorated(t, "format_receipt", agent, 12, "{'receipt': 'r-1'}", "Receipt r-1")
    assert [c.name for _, c in t.run().tool_calls] == ["lookup_order", "charge_card", "charge_card"]


def test_a_span_between_the_agent_and_its_model_calls_is_part_of_the_agent_run() -> None:
    t = Trace()
    outer = t.span("billing_agent", parent=None, start=0, end=30, scope="sdk")
    step = t.span("step", parent=outer, start=1, end=10, scope="sdk")
    chat(t, step, 2, asks=[("c1", "lookup_order", {"order_id": 42})])
    decorated(t, "lookup_order", step, 4, "{'order_id': 42}", "{}")
    step2 = t.span("step", parent=outer, start=11, end=20, scope="sdk")
    chat(t, step2, 12, answer="Done.")
    run = t.run()
    assert run.agent == "billing_agent"
    assert [c.name for _, c in run.tool_calls] == ["lookup_order"]


def test_an_agent_run_by_a_decorated_tool_is_a_run_of_its_own_and_answers_the_call() -> None:
    t = Trace()
    support = t.span("support_agent", parent=None, start=0, end=100, scope="sdk")
    chat(t, support, 1, asks=[("s1", "delegate_billing", {"request": "Charge order 42."})])
    delegate = t.span(
        "delegate_billing",
        {"function.kwargs": "{'request': 'Charge order 42.'}"},
        parent=support,
        start=3,
        end=40,
        scope="sdk",
    )
    billing(t, parent=delegate, start=4)
    chat(t, support, 50, answer="Settled.")
    runs = t.runs()
    assert [r.agent for r in runs] == ["support_agent", "billing_agent"]
    [(_, call)] = runs[0].tool_calls
    assert (call.name, call.arguments, call.output) == (
        "delegate_billing",
        {"request": "Charge order 42."},
        "Charged.",
    )
    assert len(runs[1].tool_calls) == 3


def test_an_http_server_span_around_the_agent_is_not_the_agent() -> None:
    t = Trace()
    server = t.span(
        "POST /support",
        {"http.request.method": "POST", "url.path": "/support"},
        start=0,
        end=50,
        scope="web",
    )
    billing(t, parent=server, start=1)
    assert t.run().agent == "billing_agent"


def test_a_trace_with_a_marked_agent_is_not_read_for_decorator_spans() -> None:
    t = Trace()
    agent = t.span(
        "invoke_agent billing_agent",
        {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.provider.name": "openai",
            "gen_ai.agent.name": "billing_agent",
        },
        start=0,
        end=20,
    )
    chat(t, agent, 1, asks=[("c1", "lookup_order", {"order_id": 42})])
    decorated(t, "lookup_order", agent, 3, "{'order_id': 7}", "{}")
    [trace] = t.traces(explain=True)
    assert trace.dialects == ["genai"]
    reading = next(r for r in trace.spans or [] if r.name == "lookup_order")
    assert reading.dialect is None


def test_python_reprs_parse_as_literals_and_nothing_else_runs() -> None:
    assert python_literal("{'order_id': 42, 'tags': ('a',)}") == {"order_id": 42, "tags": ("a",)}
    assert python_literal("()") == ()
    assert python_literal('{"json": true}') == {"json": True}
    call = "__import__('os').system('echo no')"
    assert python_literal(call) == call
    long = "[" + "'a', " * PY_LITERAL_LIMIT + "]"  # a repr, not JSON: past the limit, text
    assert python_literal(long) == long
    assert python_literal("[" + "'a', " * 10 + "]") == ["a"] * 10
    deep = "[" * 10_000 + "]" * 10_000
    assert python_literal(deep) == deep
    assert python_literal("not a literal") == "not a literal"
