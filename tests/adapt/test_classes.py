"""Issue 25, classes 5 and 6, and the two witnesses disagreeing: one small synthetic trace each.

Class 5 (mixed traces): a dialect reads the agent and model spans while the tool spans speak
another vocabulary. Class 6 (identity): a sub-agent's spans that carry the parent's name; one
model span around a whole multi-step run; a sub-agent's span beside the tool span that started
it rather than under it. Built by hand, as `test_witness` is, so a class stays fixed when a
framework changes.
"""

from __future__ import annotations

from typing import Any

from attest_otel.adapt import witness
from attest_otel.grade.grader import grade
from attest_otel.model import STATUS_OK, Span
from tests.adapt.spans import Trace, calls, js, names
from tests.adapt.test_witness import (
    USER,
    _agent,
    _asked,
    _chat,
    _parts_call,
    _text,
    _told,
    _tool,
)

# --------------------------------------------------------------------------- class 5


def _acme_tool(
    t: Trace, parent: Span, start: int, name: str, args: Any, out: Any, **kw: Any
) -> Span:
    return t.span(
        f"{name}.tool",
        {"acme.kind": "tool", "acme.input": js(args), "acme.output": js(out)},
        parent=parent,
        start=start,
        end=start + 2,
        **kw,
    )


def test_tool_spans_of_another_vocabulary_beside_a_dialects_agent_and_model_spans() -> None:
    t = Trace()
    agent = _agent(t)
    look = _parts_call("call_1", "lookup_order", {"order_id": 42})
    _chat(t, agent, 1, [USER], [look])
    _acme_tool(t, agent, 7, "lookup_order", {"order_id": 42}, "total 19.5")
    _chat(t, agent, 20, [USER, _asked(look), _told("call_1", "total 19.5")], [_text("19.5.")])
    run = t.run()
    assert run.agent == "billing"
    (call,) = calls(run)
    assert (call.name, call.arguments, call.output) == (
        "lookup_order",
        {"order_id": 42},
        "total 19.5",
    )
    assert not run.gaps


def test_the_generic_reader_leaves_a_dialects_calls_and_their_insides_alone() -> None:
    """A framework's `Tool.run` span around the instrumented `execute_tool` span is its
    wrapper, and the decorator's span inside it is part of it: one call, not three."""
    t = Trace()
    agent = _agent(t)
    look = _parts_call("call_1", "lookup_order", {"order_id": 42})
    _chat(t, agent, 1, [USER], [look])
    wrapper = t.span("lookup_order", {"acme.kind": "tool"}, parent=agent, start=6, end=14)
    inner = _tool(
        t,
        wrapper,
        7,
        "lookup_order",
        {"gen_ai.tool.call.id": "call_1", "gen_ai.tool.call.result": "total 19.5"},
    )
    _acme_tool(t, inner, 8, "lookup_order", {"order_id": 42}, "total 19.5")
    _chat(t, agent, 20, [USER, _asked(look), _told("call_1", "total 19.5")], [_text("19.5.")])
    traced = t.traces()[0]
    (run,) = traced.runs
    assert [(c.name, c.span_id) for c in calls(run)] == [("lookup_order", inner.span_id)]
    assert "generic" not in traced.dialects


def test_a_tool_error_only_the_span_of_another_vocabulary_shows_is_an_error() -> None:
    t = Trace()
    agent = _agent(t)
    charge = _parts_call("call_1", "charge_card", {"order_id": 42})
    _chat(t, agent, 1, [USER], [charge])
    _acme_tool(t, agent, 7, "charge_card", {"order_id": 42}, "ok", error="card declined")
    _chat(t, agent, 20, [USER, _asked(charge), _told("call_1", "ok")], [_text("Charged.")])
    traced = t.traces()[0]
    (call,) = calls(traced.runs[0])
    assert (call.name, call.is_error) == ("charge_card", True)
    assert traced.dialects == ["genai", "generic"]


# --------------------------------------------------------------------------- class 6


def _invoke(t: Trace, name: str, parent: Span | None, start: int, end: int, **attrs: Any) -> Span:
    return t.span(
        f"invoke_agent {name}",
        {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": name, **attrs},
        parent=parent,
        start=start,
        end=end,
    )


def test_a_sub_agent_whose_spans_carry_the_parents_name_is_its_own_run() -> None:
    """The sub-agent's `invoke_agent researcher` span carries `gen_ai.agent.name = billing`
    (the parent's, copied down through context); its own name is in the span name."""
    t = Trace()
    parent = _invoke(t, "billing", None, 0, 100, **{"gen_ai.input.messages": js([USER])})
    ask = _parts_call("call_1", "research", {"q": "order 42"})
    _chat(t, parent, 1, [USER], [ask])
    tool = _tool(t, parent, 10, "research", {"gen_ai.tool.call.id": "call_1"})
    tool.end_ns = 60 * 1_000_000
    child = t.span(
        "invoke_agent researcher",
        {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "billing"},
        parent=tool,
        start=11,
        end=59,
    )
    q = {"role": "user", "parts": [_text("order 42")]}
    look = _parts_call("call_2", "lookup_order", {"order_id": 42})
    _chat(t, child, 12, [q], [look])
    _tool(
        t,
        child,
        20,
        "lookup_order",
        {"gen_ai.tool.call.id": "call_2", "gen_ai.tool.call.result": "19.5"},
    )
    _chat(t, child, 30, [q, _asked(look), _told("call_2", "19.5")], [_text("It costs 19.5.")])
    _chat(t, parent, 70, [USER, _asked(ask), _told("call_1", "It costs 19.5.")], [_text("19.5.")])
    runs = {r.agent: r for r in t.runs()}
    assert sorted(runs) == ["billing", "researcher"]
    assert names(runs["billing"]) == ["research"]
    assert names(runs["researcher"]) == ["lookup_order"]


def test_a_sub_agent_whose_traceloop_entity_name_is_the_parents_is_its_own_run() -> None:
    """OpenLLMetry: `researcher.agent` inside `billing.agent`'s tool, both carrying
    `traceloop.entity.name = billing`."""
    t = Trace()

    def agent(name: str, parent: Span | None, start: int, end: int) -> Span:
        return t.span(
            f"{name}.agent",
            {"traceloop.span.kind": "agent", "traceloop.entity.name": "billing"},
            parent=parent,
            start=start,
            end=end,
        )

    def tool(name: str, parent: Span, start: int, end: int) -> Span:
        return t.span(
            f"{name}.tool",
            {
                "traceloop.span.kind": "tool",
                "traceloop.entity.name": name,
                "traceloop.entity.output": js("done"),
            },
            parent=parent,
            start=start,
            end=end,
        )

    parent = agent("billing", None, 0, 100)
    research = tool("research", parent, 10, 60)
    child = agent("researcher", research, 11, 59)
    tool("lookup_order", child, 20, 22)
    runs = {r.agent: names(r) for r in t.runs()}
    assert runs == {"billing": ["research"], "researcher": ["lookup_order"]}


def test_one_model_span_around_a_multi_step_run_is_not_one_model_call() -> None:
    """A `chat` span that covers the whole loop, with the per-step `chat` spans and the tool
    spans inside it: the steps are the model calls, and the calls are read once."""
    t = Trace()
    agent = _agent(t)
    look = _parts_call("call_1", "lookup_order", {"order_id": 42})
    charge = _parts_call("call_2", "charge_card", {"order_id": 42})
    h2 = [USER, _asked(look), _told("call_1", "total 19.5")]
    h3 = [*h2, _asked(charge), _told("call_2", "Error: declined")]
    outer = _chat(t, agent, 1, [USER], [_text("The charge was declined.")])
    outer.end_ns = 90 * 1_000_000
    _chat(t, outer, 2, [USER], [look])
    _tool(t, outer, 8, "lookup_order", {})
    _chat(t, outer, 12, h2, [charge])
    _tool(t, outer, 18, "charge_card", {})
    _chat(t, outer, 30, h3, [_text("The charge was declined.")])
    run = t.run()
    look_call, charge_call = calls(run)
    assert (look_call.call_id, look_call.output) == ("call_1", "total 19.5")
    assert (charge_call.call_id, charge_call.output) == ("call_2", "Error: declined")
    assert run.final_answer == "The charge was declined."
    assert not run.gaps


def test_one_model_span_alone_around_a_multi_step_run_reads_its_whole_conversation() -> None:
    """No per-step model spans: the one model span's output is the whole exchange after the
    task (the requests, the results, the answer); the tool spans inside it have no ids."""
    t = Trace()
    agent = _agent(t)
    look = _parts_call("call_1", "lookup_order", {"order_id": 42})
    charge = _parts_call("call_2", "charge_card", {"order_id": 42})
    t.span(
        "chat gpt-4o-mini",
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "openai",
            "gen_ai.input.messages": js([USER]),
            "gen_ai.output.messages": js(
                [
                    _asked(look),
                    _told("call_1", "total 19.5"),
                    _asked(charge),
                    _told("call_2", "Error: declined"),
                    {"role": "assistant", "parts": [_text("The charge was declined.")]},
                ]
            ),
        },
        parent=agent,
        start=1,
        end=90,
    )
    _tool(t, agent, 8, "lookup_order", {})
    run = t.run()
    assert [(c.name, c.call_id, c.output) for c in calls(run)] == [
        ("lookup_order", "call_1", "total 19.5"),
        ("charge_card", "call_2", "Error: declined"),
    ]
    assert run.final_answer == "The charge was declined."


def test_a_sub_agent_beside_the_tool_span_that_called_it_is_that_calls_run() -> None:
    """`invoke_agent researcher` is a sibling of `execute_tool research` (both children of
    the parent agent), not its child: still the call's nested run, the call answered by it."""
    t = Trace()
    parent = _invoke(t, "billing", None, 0, 100, **{"gen_ai.input.messages": js([USER])})
    ask = _parts_call("call_1", "research", {"q": "order 42"})
    _chat(t, parent, 1, [USER], [ask])
    _tool(t, parent, 10, "research", {"gen_ai.tool.call.id": "call_1"})
    child = _invoke(t, "researcher", parent, 11, 59)
    q = {"role": "user", "parts": [_text("order 42")]}
    look = _parts_call("call_2", "lookup_order", {"order_id": 42})
    _chat(t, child, 12, [q], [look])
    _tool(
        t,
        child,
        20,
        "lookup_order",
        {"gen_ai.tool.call.id": "call_2", "gen_ai.tool.call.result": "19.5"},
    )
    _chat(t, child, 30, [q, _asked(look), _told("call_2", "19.5")], [_text("It costs 19.5.")])
    _chat(t, parent, 70, [USER, _asked(ask)], [_text("19.5.")])
    runs = {r.agent: r for r in t.runs()}
    assert sorted(runs) == ["billing", "researcher"]
    (research,) = calls(runs["billing"])
    assert (research.name, research.output) == ("research", "It costs 19.5.")
    assert names(runs["researcher"]) == ["lookup_order"]
    assert not runs["billing"].gaps


# --------------------------------------------------------------------------- disagreements


def _reason(run: Any, step: int = 0) -> str:
    result = grade(run, judge=None)
    return next(f.reason for f in result.findings if f.step == step)


def test_a_span_that_shows_no_error_for_a_result_the_model_was_told_failed() -> None:
    t = Trace()
    agent = _agent(t)
    ask = _parts_call("call_1", "charge_card", {"order_id": 42})
    _chat(t, agent, 1, [USER], [ask])
    _tool(t, agent, 7, "charge_card", {"gen_ai.tool.call.id": "call_1"}, status=STATUS_OK)
    told = {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "call_1",
                "content": "declined",
                "is_error": True,
            }
        ],
    }
    _chat(t, agent, 20, [USER, _asked(ask), told], [_text("It was declined.")])
    run = t.run()
    (call,) = calls(run)
    assert call.is_error is True and call.disagreement == witness.TOLD_ERROR
    assert witness.TOLD_ERROR in _reason(run)


def test_a_span_whose_arguments_differ_from_the_request_says_which() -> None:
    t = Trace()
    agent = _agent(t)
    ask = _parts_call("call_1", "charge_card", {"order_id": 42, "amount": 19.5})
    _chat(t, agent, 1, [USER], [ask])
    _tool(
        t,
        agent,
        7,
        "charge_card",
        {
            "gen_ai.tool.call.id": "call_1",
            "gen_ai.tool.call.arguments": js({"order_id": 43, "amount": 19.5, "currency": "EUR"}),
            "gen_ai.tool.call.result": "charged",
        },
    )
    _chat(t, agent, 20, [USER, _asked(ask), _told("call_1", "charged")], [_text("Charged.")])
    run = t.run()
    (call,) = calls(run)
    assert call.disagreement == "Its span's arguments differ from the model's request in order_id."
    assert "order_id" in _reason(run)


def test_a_tool_span_no_request_asked_for_is_a_call_that_says_so() -> None:
    t = Trace()
    agent = _agent(t)
    look = _parts_call("call_1", "lookup_order", {"order_id": 42})
    _chat(t, agent, 1, [USER], [look])
    _tool(t, agent, 7, "lookup_order", {"gen_ai.tool.call.id": "call_1"})
    _tool(t, agent, 9, "refund", {"gen_ai.tool.call.result": "refunded"})
    _chat(t, agent, 20, [USER, _asked(look), _told("call_1", "19.5")], [_text("19.5.")])
    run = t.run()
    look_call, refund = calls(run)
    assert (look_call.disagreement, refund.disagreement) == (None, witness.NOT_ASKED)
    assert witness.NOT_ASKED in _reason(run, 1)


def test_witnesses_that_agree_leave_no_note() -> None:
    t = Trace()
    agent = _agent(t)
    look = _parts_call("call_1", "lookup_order", {"order_id": 42})
    _chat(t, agent, 1, [USER], [look])
    _tool(
        t,
        agent,
        7,
        "lookup_order",
        {
            "gen_ai.tool.call.id": "call_1",
            "gen_ai.tool.call.arguments": js({"order_id": 42}),
            "gen_ai.tool.call.result": "19.5",
        },
    )
    _chat(t, agent, 20, [USER, _asked(look), _told("call_1", "19.5")], [_text("19.5.")])
    run = t.run()
    assert [c.disagreement for c in calls(run)] == [None]
    assert _reason(run) == "The tool was allowed and returned no error."


def test_arguments_in_a_frameworks_envelope_are_compared_inside_it() -> None:
    """`{"args": [], "kwargs": {...}}` (a decorator), `{"input": {...}}`, a Python repr under
    `input_str`: the request's arguments are looked for one level down."""

    def note(recorded: Any) -> str | None:
        t = Trace()
        agent = _agent(t)
        ask = _parts_call("call_1", "charge_card", {"order_id": 42})
        _chat(t, agent, 1, [USER], [ask])
        attrs = {
            "gen_ai.tool.call.id": "call_1",
            "gen_ai.tool.call.arguments": js(recorded),
            "gen_ai.tool.call.result": "charged",
        }
        _tool(t, agent, 7, "charge_card", attrs)
        _chat(t, agent, 20, [USER, _asked(ask), _told("call_1", "charged")], [_text("Done.")])
        (call,) = calls(t.run())
        return call.disagreement

    assert note({"args": [], "kwargs": {"order_id": 42}}) is None
    assert note({"input": {"order_id": 42}, "options": None}) is None
    assert note({"input_str": "{'order_id': 42}", "tags": []}) is None
    assert note({"unrelated": 1}) is None  # nothing to compare
    differs = "Its span's arguments differ from the model's request in order_id."
    assert note({"args": [], "kwargs": {"order_id": 43}}) == differs
    assert note({"input_str": "{'order_id': 7}"}) == differs
