"""Which run a span is, when its spans say it ambiguously (issue 25, class 6).

Three shapes seen in instrumented agents that the tree alone misreads:

* a sub-agent's spans carrying its parent's name (the name travels down in the context, so
  every agent span below says `billing`): two runs with one name, one policy entry for both,
  and the sub-agent's calls graded under the parent's. Its span's own name (`invoke_agent
  researcher`) is the better witness of who it is;
* one model span around the whole multi-step loop, with the per-step model spans and the
  tool spans inside it: read as one model call, its steps' requests are lost in it. It is a
  container, and its steps are the model calls;
* the sub-agent's span a sibling of the tool span that started it, not its child (the tool
  ran the agent in a task that did not carry the context): the tool call is still the one the
  sub-agent's run answers.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from attest_otel.adapt.base import Role
from attest_otel.adapt.generic import bare_name
from attest_otel.adapt.tree import Node, RunBuild

__all__ = ["own_name", "sibling_call", "step_models"]


def own_name(build: RunBuild, name: str) -> str:
    """The run's agent name, or, when an enclosing run's agent has the same name (inherited,
    not its own), the name its span gives itself, if that differs."""
    node = build.node
    parent = build.parent
    steps = 0
    while node is not None and parent is not None and steps < 64:
        above = parent.node
        if above is not None and above.dialect is not None:
            try:
                same = above.dialect.agent_name(above.span) == name
            except Exception:  # a name of a type no convention uses: no evidence either way
                same = False
            if same:
                own = bare_name(node.span.name)
                return own if own and own != name else name
        parent = parent.parent
        steps += 1
    return name


def step_models(models: list[Node], calls: Sequence[Node]) -> list[Node]:
    """The run's model spans without those that contain both another of its model spans and
    one of its tool calls (in time): such a span wraps the loop, its steps are the calls.
    `models` sorted by start; a span with no step inside it stays the only witness."""
    if len(models) < 2 or not calls:
        return models
    model_starts = [m.span.start_ns for m in models]
    call_starts = sorted(c.span.start_ns for c in calls)
    kept: list[Node] = []
    for i, node in enumerate(models):
        s = node.span
        inner_model = bisect.bisect_left(model_starts, s.end_ns) > i + 1
        first_call = bisect.bisect_right(call_starts, s.start_ns)
        inner_call = first_call < len(call_starts) and call_starts[first_call] < s.end_ns
        if not (inner_model and inner_call):
            kept.append(node)
    return kept if kept else models


def sibling_call(agent: Node, siblings: Sequence[Node], taken: set[int]) -> Node | None:
    """Of the tool spans beside `agent` (same parent), the one that was open when the agent
    started: the call that started it, when no tool span above it did. The latest wins. No
    clock skew is allowed for: a span beside another comes from the same process, and a tool
    that finished before the agent started did not start it."""
    start = agent.span.start_ns
    found: Node | None = None
    for node in siblings:
        span = node.span
        if (
            node.role is Role.TOOL
            and node.parent is agent.parent
            and id(node) not in taken
            and span.start_ns <= start <= span.end_ns
            and (found is None or span.start_ns > found.span.start_ns)
        ):
            found = node
    return found
