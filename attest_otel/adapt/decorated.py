"""Spans of manual-tracing decorators: agents and tools known only by a span's name and place.

Tracing SDKs give a hand-written agent loop two tools: a context manager that opens a span
named after the agent (OpenLIT's `start_trace("billing_agent")`) and a decorator that opens a
span per call of a function, named after it (`@openlit.trace`, and the `@observe` / `@trace`
of other SDKs). Such spans carry no role: no operation name, no kind attribute, and a function
that raised may leave no attribute at all. Names alone would be guesses; what makes them
certain is the model calls around them:

* a span named like a tool the model asked for, near the model call that asked (inside the
  nearest span above it that holds model calls), is that tool's call;
* the outermost role-less span above model calls is the agent of its run, named by the span;
  a tool call starts a new region, so an agent run by a tool (a sub-agent) is a run of its own.

It runs in the generic reader's pass only (see `runs`): after the tree is linked, in a trace in
which no dialect nor the generic reader's vocabulary found an agent. A trace any reader marks
keeps its reading, so nothing read right before can change.
"""

from __future__ import annotations

from collections.abc import Iterable

from attest_otel.adapt.base import OUTPUT, SYSTEM, Role
from attest_otel.adapt.generic import GENERIC, bare_name, protocol_span
from attest_otel.adapt.tree import Logs, Node, inside

__all__ = ["read_decorated"]

_MAX_UP = 64
"""How far up the tree a span looks for its region: deeper nesting is broken data."""


def read_decorated(nodes: Iterable[Node], logs: Logs) -> int:
    """Marks decorator spans as tool calls and agents (read by the generic reader); returns
    how many spans it marked. The nodes must be linked and numbered (`guard`)."""
    every = list(nodes)
    models = [n for n in every if n.role is Role.MODEL]
    free = [n for n in every if n.dialect is None and not protocol_span(n.span)]
    if not models or not free:
        return 0
    asked = _requests(models, logs)
    above = _above(models)
    marked = 0
    for node in free:
        name = bare_name(node.span.name)
        askers = asked.get(name) if name else None
        if askers and not _in_model(node) and _asked_here(node, askers, above):
            node.dialect, node.role = GENERIC, Role.TOOL
            marked += 1
    candidates = {id(n) for n in free if n.role is None and id(n) in above and not _in_model(n)}
    prompts = _prompts(models, candidates, logs)
    for node in free:
        if id(node) in candidates and _outermost(node, candidates, prompts):
            node.dialect, node.role = GENERIC, Role.AGENT
            marked += 1
    return marked


def _requests(models: list[Node], logs: Logs) -> dict[str, list[Node]]:
    """Tool name -> the model calls whose output asked for it."""
    out: dict[str, list[Node]] = {}
    for model in models:
        for msg in model.part(OUTPUT, logs) or ():
            for req in msg.tool_calls:
                out.setdefault(req.name, []).append(model)
    return out


def _above(models: list[Node]) -> set[int]:
    """Ids of the spans with a model call below them."""
    found: set[int] = set()
    for model in models:
        parent, steps = model.parent, 0
        while parent is not None and steps < _MAX_UP and id(parent) not in found:
            found.add(id(parent))
            parent, steps = parent.parent, steps + 1
    return found


def _in_model(node: Node) -> bool:
    """Inside a model call (the client's HTTP span, a provider SDK's own spans)."""
    parent, steps = node.parent, 0
    while parent is not None and steps < _MAX_UP:
        if parent.role is Role.MODEL:
            return True
        parent, steps = parent.parent, steps + 1
    return False


def _asked_here(node: Node, askers: list[Node], above: set[int]) -> bool:
    """Whether a model call in the span's region asked for it: the region is the nearest span
    above it that holds model calls (the whole trace when none does). A call the span itself
    made does not count: a function that calls a model is not its own request."""
    region, steps = node.parent, 0
    while region is not None and id(region) not in above and steps < _MAX_UP:
        region, steps = region.parent, steps + 1
    return any(
        not inside(node, asker) and (region is None or inside(region, asker)) for asker in askers
    )


def _prompts(models: list[Node], candidates: set[int], logs: Logs) -> dict[int, str]:
    """The system prompt of the first model call of each candidate span's own (the nearest
    candidate above the call), by the candidate's id; candidates without one are left out."""
    out: dict[int, str] = {}
    for model in sorted(models, key=lambda n: n.key):
        parent, steps = model.parent, 0
        while parent is not None and steps < _MAX_UP and id(parent) not in candidates:
            parent, steps = parent.parent, steps + 1
        if parent is not None and id(parent) not in out:
            system = model.part(SYSTEM, logs)
            if isinstance(system, str) and system:
                out[id(parent)] = system
    return out


def _outermost(node: Node, candidates: set[int], prompts: dict[int, str]) -> bool:
    """No other candidate above it short of a tool call: spans between an agent's span and
    its model calls (a per-turn `step`) are part of that agent's run, not runs of their own.
    A candidate whose model calls have another system prompt than those of the candidate
    above it is another agent, run by the outer one without a tool span between them (a
    hand-written loop whose tools have no spans; issue 25, class 6)."""
    parent, steps = node.parent, 0
    while parent is not None and steps < _MAX_UP:
        if parent.role is Role.TOOL:
            return True
        if id(parent) in candidates:
            own, outer = prompts.get(id(node)), prompts.get(id(parent))
            return own is not None and outer is not None and own != outer
        parent, steps = parent.parent, steps + 1
    return True
