"""Two witnesses of every call: the tool spans and the model's conversation (issue 25).

One small synthetic trace per class of misreading, in GenAI current conventions unless the
class is about another vocabulary, so a class stays fixed when a framework changes. The
recorded stacks that show the same classes are the `witness_*` fixtures
(tests/fixtures/gen/witness/gen_witness.py).
"""

from __future__ import annotations

from typing import Any

from attest_otel.adapt import Role, detect
from attest_otel.grade import rules
from attest_otel.model import STATUS_OK, Span
from tests.adapt.spans import Trace, calls, event, js, names

TASK = "Charge order 42."


def _parts_call(call_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_call", "id": call_id, "name": name, "arguments": args}


def _chat(
    t: Trace,
    parent: Span,
    start: int,
    history: list[dict[str, Any]],
    reply: list[dict[str, Any]],
) -> Span:
    """A GenAI current `chat` span: the request's messages in, the reply's parts out."""
    return t.span(
        "chat gpt-4o-mini",
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "openai",
            "gen_ai.request.model": "gpt-4o-mini",
            "gen_ai.input.messages": js(history),
            "gen_ai.output.messages": js([{"role": "assistant", "parts": reply}]),
        },
        parent=parent,
        start=start,
        end=start + 5,
    )


def _agent(t: Trace) -> Span:
    return t.span(
        "invoke_agent billing",
        {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "billing",
            "gen_ai.input.messages": js([{"role": "user", "parts": [_text(TASK)]}]),
        },
        start=0,
        end=100,
    )


def _text(content: str) -> dict[str, Any]:
    return {"type": "text", "content": content}


USER = {"role": "user", "parts": [_text(TASK)]}


def _asked(*parts: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "parts": list(parts)}


def _told(call_id: str, response: Any) -> dict[str, Any]:
    return {
        "role": "tool",
        "parts": [{"type": "tool_call_response", "id": call_id, "response": response}],
    }


def _tool(t: Trace, parent: Span, start: int, name: str, attrs: dict[str, Any], **kw: Any) -> Span:
    return t.span(
        f"execute_tool {name}",
        {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name, **attrs},
        parent=parent,
        start=start,
        end=start + 2,
        **kw,
    )


# --------------------------------------------------------------------------- class 1


def test_a_request_span_inside_the_model_span_and_its_execution_are_one_call() -> None:
    """The request (name, id, arguments) is a child of the chat span; the execution span
    has no call id. Counted once, with the request's id."""
    t = Trace()
    agent = _agent(t)
    ask = _parts_call("call_1", "lookup_order", {"order_id": 42})
    chat = _chat(t, agent, 1, [USER], [ask])
    t.span(
        "tool_call lookup_order",
        {"gen_ai.tool.name": "lookup_order", "gen_ai.tool.call.id": "call_1"},
        parent=chat,
        start=5,
        end=6,
    )
    _tool(
        t,
        agent,
        10,
        "lookup_order",
        {
            "gen_ai.tool.call.arguments": js({"order_id": 42}),
            "gen_ai.tool.call.result": "total 19.5",
        },
    )
    _chat(t, agent, 20, [USER, _asked(ask), _told("call_1", "total 19.5")], [_text("It is 19.5.")])
    (call,) = calls(t.run())
    assert (call.name, call.call_id, call.output) == ("lookup_order", "call_1", "total 19.5")


def test_a_request_span_no_execution_answers_stays_a_call() -> None:
    t = Trace()
    agent = _agent(t)
    chat = _chat(t, agent, 1, [USER], [_parts_call("call_1", "lookup_order", {})])
    t.span(
        "tool_call lookup_order",
        {"gen_ai.tool.name": "lookup_order", "gen_ai.tool.call.id": "call_1"},
        parent=chat,
        start=5,
        end=6,
    )
    assert names(t.run()) == ["lookup_order"]


# --------------------------------------------------------------------------- class 2


def test_a_call_whose_span_was_never_exported_is_read_from_the_conversation() -> None:
    """Two calls asked for and answered; only the first has a span (the second raised and
    its span never ended). Both are calls, the second an error by its result."""
    t = Trace()
    agent = _agent(t)
    look = _parts_call("call_1", "lookup_order", {"order_id": 42})
    charge = _parts_call("call_2", "charge_card", {"order_id": 42})
    _chat(t, agent, 1, [USER], [look])
    _tool(t, agent, 7, "lookup_order", {"gen_ai.tool.call.id": "call_1"})
    h2 = [USER, _asked(look), _told("call_1", "total 19.5")]
    _chat(t, agent, 10, h2, [charge])
    h3 = [*h2, _asked(charge), _told("call_2", "Error: gateway timed out")]
    _chat(t, agent, 20, h3, [_text("The charge failed.")])
    run = t.run()
    assert names(run) == ["lookup_order", "charge_card"]
    first, second = calls(run)
    assert first.output == "total 19.5"
    assert second.call_id == "call_2" and rules.is_error(second)


def test_a_request_never_answered_is_not_a_call_beside_tool_spans() -> None:
    """Asked for but never given a result, in a run whose other calls have spans: the
    conversation alone does not show that it ran (that is a gap, not a call)."""
    t = Trace()
    agent = _agent(t)
    look = _parts_call("call_1", "lookup_order", {"order_id": 42})
    _chat(t, agent, 1, [USER], [look, _parts_call("call_2", "send_receipt", {})])
    _tool(t, agent, 7, "lookup_order", {"gen_ai.tool.call.id": "call_1"})
    _chat(t, agent, 20, [USER, _asked(look), _told("call_1", "ok")], [_text("Done.")])
    assert names(t.run()) == ["lookup_order"]


# --------------------------------------------------------------------------- class 3


def _one_call_run(tool_attrs: dict[str, Any], told: dict[str, Any], **kw: Any) -> Any:
    t = Trace()
    agent = _agent(t)
    ask = _parts_call("call_1", "charge_card", {"order_id": 42})
    _chat(t, agent, 1, [USER], [ask])
    _tool(t, agent, 7, "charge_card", {"gen_ai.tool.call.id": "call_1", **tool_attrs}, **kw)
    _chat(t, agent, 20, [USER, _asked(ask), told], [_text("Done.")])
    (call,) = calls(t.run())
    return call


def test_is_error_on_the_tool_result_block_marks_an_error_the_span_does_not_show() -> None:
    told = {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "call_1",
                "content": "gateway timed out",
                "is_error": True,
            }
        ],
    }
    call = _one_call_run({"gen_ai.tool.call.result": "gateway timed out"}, told, status=STATUS_OK)
    assert call.is_error is True


def test_error_type_alone_marks_the_call_an_error() -> None:
    """Status OK (set before the tool raised; the SDK keeps the first) and `error.type`."""
    call = _one_call_run(
        {"error.type": "ToolError"}, _told("call_1", "gateway timed out"), status=STATUS_OK
    )
    assert call.is_error is True


def test_a_json_quoted_error_string_is_an_error() -> None:
    quoted = js("Error: card declined")
    call = _one_call_run({"gen_ai.tool.call.result": quoted}, _told("call_1", quoted))
    assert rules.is_error(call)


# --------------------------------------------------------------------------- class 4


def test_genai_attributes_with_a_frameworks_own_operation_names() -> None:
    attrs = {"gen_ai.tool.call.arguments": "{}", "gen_ai.tool.name": "lookup_order"}
    tool = Span(
        "t",
        "1",
        None,
        "tool.execute",
        0,
        1,
        attributes={**attrs, "gen_ai.operation.name": "tool.execute"},
    )
    agent = Span(
        "t",
        "2",
        None,
        "agent.run",
        0,
        1,
        attributes={"gen_ai.operation.name": "agent.run", "gen_ai.input.messages": "[]"},
    )
    only_name = Span("t", "3", None, "lookup_order", 0, 1, attributes={"gen_ai.tool.name": "x"})
    assert [(f[1] if (f := detect(s)) else None) for s in (tool, agent, only_name)] == [
        Role.TOOL,
        Role.AGENT,
        Role.TOOL,
    ]


def test_attribute_less_spans_named_by_role_with_content_in_span_events() -> None:
    t = Trace()
    agent = t.span(
        "billing.agent",
        events=[
            event("input", value=js({"task": TASK})),
            event("output", value=js({"answer": "Done."})),
        ],
        start=0,
        end=100,
    )
    t.span(
        "lookup_order.tool",
        parent=agent,
        events=[
            event("input", value=js({"order_id": 42})),
            event("output", value=js("total 19.5")),
        ],
        start=10,
        end=12,
    )
    t.span(
        "charge_card.tool",
        parent=agent,
        events=[
            event("input", value=js({"order_id": 42})),
            event("exception", **{"exception.type": "ToolError", "exception.message": "declined"}),
        ],
        start=20,
        end=22,
    )
    run = t.run()
    assert (run.agent, run.task, run.final_answer) == ("billing", TASK, "Done.")
    look, charge = calls(run)
    assert (look.name, look.arguments, look.output) == (
        "lookup_order",
        {"order_id": 42},
        "total 19.5",
    )
    assert charge.name == "charge_card" and charge.is_error is True


def test_a_two_participant_chat_is_one_run_of_the_assistant() -> None:
    """The assistant's turns (with the model calls) alternate with a user proxy's turns
    (which run the tools) as sibling agent spans: one run, each call once, the answer from
    the assistant's last turn."""
    t = Trace()
    chat = t.span("chat_session", start=0, end=100)

    def turn(who: str, start: int, **attrs: Any) -> Span:
        return t.span(
            f"invoke_agent {who}",
            {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": who, **attrs},
            parent=chat,
            start=start,
            end=start + 9,
        )

    ask = _parts_call("call_1", "lookup_order", {"order_id": 42})
    first = turn("billing", 0, **{"gen_ai.input.messages": js([USER])})
    _chat(t, first, 1, [USER], [ask])
    proxy = turn("user_proxy", 10)
    _tool(t, proxy, 11, "lookup_order", {"gen_ai.tool.call.id": "call_1"})
    answer = {"role": "assistant", "parts": [_text("Order 42 is 19.50 EUR.")]}
    last = turn("billing", 20, **{"gen_ai.output.messages": js([answer])})
    _chat(t, last, 21, [USER, _asked(ask), _told("call_1", "total 19.5")], answer["parts"])
    run = t.run()
    assert (run.agent, run.task, run.final_answer) == ("billing", TASK, "Order 42 is 19.50 EUR.")
    (call,) = calls(run)
    assert (call.name, call.output) == ("lookup_order", "total 19.5")


def test_a_call_recorded_as_one_span_per_lifecycle_event_is_one_call() -> None:
    """start (name, arguments), error (message), finish: three spans, one call, an error."""
    t = Trace()
    agent = _agent(t)

    def phase(event: str, start: int, **attrs: Any) -> None:
        t.span(
            "tool_call",
            {"acme.span.type": "tool_call", "acme.tool.event": event, **attrs},
            parent=agent,
            start=start,
            end=start,
        )

    ok = {"gen_ai.tool.name": "lookup_order"}
    phase("start", 10, **ok, **{"gen_ai.tool.call.arguments": js({"order_id": 42})})
    phase("success", 11, **ok, **{"gen_ai.tool.call.result": "total 19.5"})
    phase("finish", 12, **ok)
    bad = {"gen_ai.tool.name": "charge_card"}
    phase("start", 20, **bad, **{"gen_ai.tool.call.arguments": js({"order_id": 42})})
    phase("error", 21, **bad, **{"error.type": "ToolError"})
    phase("finish", 22, **bad)
    look, charge = calls(t.run())
    assert (look.name, look.arguments, look.output) == (
        "lookup_order",
        {"order_id": 42},
        "total 19.5",
    )
    assert (charge.name, charge.is_error) == ("charge_card", True)
