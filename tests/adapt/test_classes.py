"""Issue 25, classes 5 and 6, and the two witnesses disagreeing: one small synthetic trace each.

Class 5 (mixed traces): a dialect reads the agent and model spans while the tool spans speak
another vocabulary. Class 6 (identity): a sub-agent's spans that carry the parent's name; one
model span around a whole multi-step run; a sub-agent's span beside the tool span that started
it rather than under it. Built by hand, as `test_witness` is, so a class stays fixed when a
framework changes.
"""

from __future__ import annotations

from typing import Any

from attest_otel.model import Span
from tests.adapt.spans import Trace, calls, event, js, names
from tests.adapt.test_witness import (
    TASK,
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


def _acme_tool(t: Trace, parent: Span, start: int, name: str, args: Any, out: Any, **kw: Any) -> Span:
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
    assert (call.name, call.arguments, call.output) == ("lookup_order", {"order_id": 42}, "total 19.5")
    assert not run.gaps
