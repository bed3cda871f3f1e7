"""Run assembly: boundaries, nesting, order, duplicates, results, errors and policy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from attest_otel.adapt import runs_from_spans
from attest_otel.ingest.decode import decode_file
from attest_otel.model import Span
from attest_otel.pipeline import read_file
from attest_otel.policy import AgentPolicy, Policy
from tests.adapt.spans import Trace, calls, event, js, names

FIXTURES = Path(__file__).parent.parent / "fixtures" / "traces"


def agent(
    t: Trace, name: str, parent: Span | None = None, start: int = 0, end: int = 100, **attrs: Any
) -> Span:
    return t.span(
        f"invoke_agent {name}",
        {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.provider.name": "x",
            "gen_ai.agent.name": name,
            **attrs,
        },
        parent=parent,
        start=start,
        end=end,
    )


def tool(
    t: Trace,
    name: str,
    parent: Span | None,
    start: int,
    end: int | None = None,
    call_id: str | None = None,
    args: Any = None,
    result: Any = None,
    error: str | None = None,
    **attrs: Any,
) -> Span:
    a: dict[str, Any] = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name, **attrs}
    if call_id is not None:
        a["gen_ai.tool.call.id"] = call_id
    if args is not None:
        a["gen_ai.tool.call.arguments"] = js(args)
    if result is not None:
        a["gen_ai.tool.call.result"] = result
    return t.span(f"execute_tool {name}", a, parent=parent, start=start, end=end, error=error)


def chat(
    t: Trace,
    parent: Span | None,
    start: int,
    end: int,
    *,
    inputs: list[dict[str, Any]] | None = None,
    outputs: list[dict[str, Any]] | None = None,
    name: str = "chat m",
) -> Span:
    a: dict[str, Any] = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "x"}
    if inputs is not None:
        a["gen_ai.input.messages"] = js(inputs)
    if outputs is not None:
        a["gen_ai.output.messages"] = js(outputs)
    return t.span(name, a, parent=parent, start=start, end=end)


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "parts": [{"type": "text", "content": text}]}


def said(text: str) -> dict[str, Any]:
    return {"role": "assistant", "parts": [{"type": "text", "content": text}]}


def asks(*requests: tuple[str, str, Any]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "parts": [
            {"type": "tool_call", "id": i, "name": n, "arguments": a} for i, n, a in requests
        ],
    }


def answers(call_id: str, result: Any) -> dict[str, Any]:
    return {
        "role": "tool",
        "parts": [{"type": "tool_call_response", "id": call_id, "response": result}],
    }


# --- run boundaries ---------------------------------------------------------------------


def test_an_agent_used_as_a_tool_is_its_own_run_and_a_call_of_its_caller() -> None:
    t = Trace()
    outer = agent(t, "support")
    delegate = tool(t, "delegate_billing", outer, 10, 60, call_id="c1", args={"q": "charge"})
    inner = agent(
        t, "billing", delegate, 11, 59, **{"gen_ai.output.messages": js([said("Charged 19.50.")])}
    )
    tool(t, "charge", inner, 20, 30, call_id="c2", result="ok")
    runs = t.runs()
    assert [(r.agent, names(r)) for r in runs] == [
        ("support", ["delegate_billing"]),
        ("billing", ["charge"]),
    ]
    # The delegate span captured no result: the nested run's answer stands in for it.
    assert calls(runs[0])[0].output == "Charged 19.50."
    assert runs[1].span_id == inner.span_id


def test_a_sub_agent_the_model_asked_for_by_name_is_a_call_of_its_parent() -> None:
    t = Trace()
    outer = agent(t, "lead")
    chat(t, outer, 1, 5, inputs=[user("Research X")], outputs=[asks(("s1", "search", {}))])
    tool(t, "search", outer, 6, 7, call_id="s1", result="hits")
    chat(t, outer, 8, 9, inputs=[user("Research X")], outputs=[asks(("r1", "researcher", {}))])
    sub = agent(t, "researcher", outer, 10, 40, **{"gen_ai.output.messages": js([said("X is Y.")])})
    chat(
        t,
        outer,
        41,
        50,
        inputs=[user("Research X"), answers("r1", "X is Y.")],
        outputs=[said("X is Y, says research.")],
    )
    runs = t.runs()
    assert [(r.agent, names(r)) for r in runs] == [
        ("lead", ["search", "researcher"]),
        ("researcher", []),
    ]
    started = calls(runs[0])[1]
    assert (started.output, started.span_id, started.call_id) == ("X is Y.", sub.span_id, "r1")


def test_a_trace_without_an_agent_span_is_one_run_at_its_root() -> None:
    t = Trace()
    root = t.span("POST /checkout", {}, start=0, end=100)  # a plain HTTP span
    chat(t, root, 1, 5, inputs=[user("Pay")], outputs=[asks(("c", "pay", {}))])
    tool(t, "pay", root, 6, 7, call_id="c", result="paid")
    traces = t.traces()
    (run,) = traces[0].runs
    assert run.span_id == root.span_id
    assert run.agent is None
    assert run.task == "Pay"
    assert names(run) == ["pay"]
    assert traces[0].dialects == ["genai"]


def test_tool_spans_outside_every_agent_make_a_run_at_the_root() -> None:
    t = Trace()
    root = t.span("job", {}, start=0, end=100)
    a = agent(t, "a", root, 1, 40)
    tool(t, "inside", a, 2, 3)
    tool(t, "outside", root, 50, 51)
    runs = t.runs()
    assert [(r.agent, names(r)) for r in runs] == [(None, ["outside"]), ("a", ["inside"])]


def test_a_trace_of_http_spans_only_has_no_runs_and_no_dialects() -> None:
    t = Trace()
    root = t.span("GET /", {}, start=0, end=10)
    t.span("SELECT", {"db.system": "postgresql"}, parent=root, start=1, end=2)
    (trace,) = t.traces()
    assert (trace.runs, trace.dialects) == ([], [])


def test_traces_come_in_order_of_first_appearance_with_the_dialects_they_spoke() -> None:
    seen_first, seen_second = Trace(trace_id="f" * 32), Trace(trace_id="0" * 32)
    agent(seen_first, "first")
    seen_second.span("chat m", {"gen_ai.system": "openai"}, start=5)
    out = runs_from_spans([*seen_first.spans, *seen_second.spans])
    assert [(t.trace_id, t.dialects) for t in out] == [
        ("f" * 32, ["genai"]),
        ("0" * 32, ["genai-old"]),
    ]
    assert [r.trace_id for t in out for r in t.runs] == ["f" * 32, "0" * 32]


def test_a_span_exported_twice_counts_once() -> None:
    t = Trace()
    a = agent(t, "a")
    tool(t, "x", a, 1, 2)
    t.spans.append(t.spans[-1])
    assert names(t.run()) == ["x"]


# --- order -------------------------------------------------------------------------------


def test_calls_are_in_start_order_with_ties_broken_by_end_then_span_id() -> None:
    t = Trace()
    a = agent(t, "a")
    tool(t, "late", a, 20, 21)
    tool(t, "tie_long", a, 10, 15)
    t.span(
        "execute_tool tie_b",
        {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "tie_b"},
        parent=a,
        start=10,
        end=12,
        span_id="00000000000000bb",
    )
    t.span(
        "execute_tool tie_a",
        {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "tie_a"},
        parent=a,
        start=10,
        end=12,
        span_id="00000000000000aa",
    )
    assert names(t.run()) == ["tie_a", "tie_b", "tie_long", "late"]


def test_runs_are_in_start_order() -> None:
    t = Trace()
    root = t.span("root", {}, start=0, end=100)
    agent(t, "later", root, 50, 60)
    agent(t, "earlier", root, 10, 20)
    assert [r.agent for r in t.runs()] == ["earlier", "later"]


# --- duplicates ---------------------------------------------------------------------------


def test_a_client_span_inside_an_instrumentation_span_is_one_model_call() -> None:
    t = Trace()
    a = agent(t, "a")
    outer = chat(t, a, 1, 10, inputs=[user("Go")], outputs=[asks(("c1", "go", {}))])
    chat(t, outer, 2, 9, inputs=[user("Go")], outputs=[asks(("c1", "go", {}))])
    chat(t, a, 20, 30, inputs=[user("Go"), answers("c1", "went")], outputs=[said("Gone.")])
    run = t.run()
    assert names(run) == ["go"]
    assert calls(run)[0].output == "went"


def test_a_contentless_sdk_span_beside_the_instrumentation_span_adds_nothing() -> None:
    t = Trace()
    a = agent(t, "a")
    chat(t, a, 1, 10, inputs=[user("Go")], outputs=[asks(("c1", "go", {}))])
    chat(t, a, 2, 8, name="anthropic.messages.create")  # no content, same call
    chat(t, a, 20, 30, inputs=[user("Go"), answers("c1", "went")], outputs=[said("Gone.")])
    run = t.run()
    assert names(run) == ["go"]
    assert (run.task, run.final_answer) == ("Go", "Gone.")


def test_two_model_spans_with_one_response_id_are_one_model_call() -> None:
    t = Trace()
    a = agent(t, "a")
    first = chat(t, a, 1, 10, inputs=[user("Go")], outputs=[asks(("c1", "go", {}))])
    second = chat(t, a, 5, 12, inputs=[user("Go")], outputs=[asks(("c1b", "go", {}))])
    first.attributes["gen_ai.response.id"] = second.attributes["gen_ai.response.id"] = "msg_1"
    # Overlapping but not nested, ids differ: only the response id says they are one call.
    assert names(t.run()) == ["go"]


def test_two_spans_of_one_tool_call_id_are_one_call_kept_on_the_outer_span() -> None:
    t = Trace()
    a = agent(t, "a")
    outer = tool(t, "search", a, 10, 20, call_id="c1", args={"q": "x"})
    tool(t, "search", outer, 11, 19, call_id="c1", result="found")  # an MCP client span
    (call,) = calls(t.run())
    assert call.span_id == outer.span_id
    assert call.output == "found"


def test_same_name_and_arguments_at_overlapping_times_are_one_call() -> None:
    t = Trace()
    a = agent(t, "a")
    tool(t, "search", a, 10, 20, args={"q": "x"})
    tool(t, "search", a, 12, 18, args={"q": "x"}, result="found")
    (call,) = calls(t.run())
    assert call.output == "found"


def test_a_retry_with_the_same_arguments_after_the_first_ended_is_a_second_call() -> None:
    t = Trace()
    a = agent(t, "a")
    tool(t, "search", a, 10, 20, args={"q": "x"}, error="timeout")
    tool(t, "search", a, 30, 40, args={"q": "x"}, result="found")
    assert [c.is_error for c in calls(t.run())] == [True, None]


# --- results and errors -------------------------------------------------------------------


def test_a_result_carried_only_in_the_next_model_input_is_matched_by_call_id() -> None:
    t = Trace()
    a = agent(t, "a")
    chat(t, a, 1, 5, inputs=[user("Go")], outputs=[asks(("c1", "one", {}), ("c2", "two", {}))])
    tool(t, "one", a, 6, 7, call_id="c1")
    tool(t, "two", a, 6, 8, call_id="c2")
    chat(
        t,
        a,
        10,
        20,
        inputs=[user("Go"), answers("c2", "second"), answers("c1", "first")],
        outputs=[said("Done")],
    )
    assert [(c.name, c.output) for c in calls(t.run())] == [("one", "first"), ("two", "second")]


def test_an_uncaptured_result_is_unknown_and_not_an_empty_output() -> None:
    t = Trace()
    a = agent(t, "a")
    tool(t, "x", a, 1, 2)
    (call,) = calls(t.run())
    assert (call.output, call.output_captured, call.is_error) == (None, False, None)


@pytest.mark.parametrize(
    ("result", "status", "events", "expected"),
    [
        pytest.param(
            "Error: declined",
            "boom",
            [],
            "Error: declined",
            id="the error text is the result when there is one",
        ),
        pytest.param(
            None, "gateway timeout", [], "gateway timeout", id="else the status description"
        ),
        pytest.param(
            None,
            "",
            [
                event(
                    "exception",
                    **{"exception.type": "ValueError", "exception.message": "bad amount"},
                )
            ],
            "ValueError: bad amount",
            id="else the first exception event",
        ),
    ],
)
def test_error_text(result: str | None, status: str, events: list[Any], expected: str) -> None:
    t = Trace()
    a = agent(t, "a")
    span = tool(t, "charge", a, 1, 2, result=result, error=status)
    span.events.extend(events)
    (call,) = calls(t.run())
    assert call.is_error is True
    assert call.error_text == expected


def test_an_ok_status_leaves_is_error_to_the_output() -> None:
    t = Trace()
    a = agent(t, "a")
    span = tool(t, "charge", a, 1, 2, result="Error: declined")
    span.status_code = 1
    (call,) = calls(t.run())
    assert call.is_error is None


def test_truncated_message_json_does_not_stop_the_run() -> None:
    t = Trace()
    a = agent(t, "a")
    span = chat(t, a, 1, 5)
    span.attributes["gen_ai.input.messages"] = '[{"role": "user", "parts": [{"type": "te'
    tool(t, "x", a, 6, 7, result="ok")
    run = t.run()
    assert names(run) == ["x"]
    assert run.task == ""


# --- policy -------------------------------------------------------------------------------

SPAN_POLICY: dict[str, Any] = {
    "attest.allowed_tools": ["from_span"],
    "attest.tool_fallbacks": js({"from_span": ["alt"]}),
}


def policy_trace() -> Trace:
    t = Trace()
    a = agent(t, "billing", **SPAN_POLICY)
    tool(t, "x", a, 1, 2)
    return t


def test_without_a_policy_the_agent_span_attributes_apply() -> None:
    run = policy_trace().run()
    assert (run.allowed_tools, run.tool_fallbacks) == (["from_span"], {"from_span": ["alt"]})


def test_a_json_string_allowed_tools_attribute_is_accepted() -> None:
    t = policy_trace()
    t.spans[0].attributes["attest.allowed_tools"] = '["a", "b"]'
    assert t.run().allowed_tools == ["a", "b"]


def test_a_policy_entry_for_the_agent_wins_over_the_span_attributes() -> None:
    policy = Policy({"billing": AgentPolicy(["from_file"], {}, "billing")})
    run = policy_trace().run(policy=policy)
    assert (run.allowed_tools, run.tool_fallbacks) == (["from_file"], {})


def test_the_any_agent_entry_applies_when_the_agent_has_none() -> None:
    policy = Policy({"*": AgentPolicy(None, {"s": ["b"]}, "*")})
    run = policy_trace().run(policy=policy)
    assert (run.allowed_tools, run.tool_fallbacks) == (None, {"s": ["b"]})


def test_one_off_overrides_win_over_the_policy_and_the_span() -> None:
    policy = Policy({"billing": AgentPolicy(["from_file"], {}, "billing")})
    run = policy_trace().run(policy=policy, allowed_tools=[], fallbacks={"x": ["y"]})
    assert (run.allowed_tools, run.tool_fallbacks) == ([], {"x": ["y"]})


def test_no_policy_anywhere_allows_every_tool() -> None:
    t = Trace()
    agent(t, "a")
    run = t.run()
    assert (run.allowed_tools, run.tool_fallbacks) == (None, {})


# --- files ----------------------------------------------------------------------------------


def test_read_file_is_decode_then_runs_from_spans() -> None:
    path = FIXTURES / "vercel__retry.json"
    decoded = decode_file(path)
    expected = runs_from_spans(decoded.spans, decoded.logs)
    got = read_file(path)
    assert [(t.trace_id, t.dialects, [names(r) for r in t.runs]) for t in got] == [
        (t.trace_id, t.dialects, [names(r) for r in t.runs]) for t in expected
    ]
