"""Mixed traces: the generic reader, span by span, in a trace a dialect read (issue 25, class 5).

One trace may speak two vocabularies: a known dialect's agent and model spans (an
instrumented model client, a framework's agent span) around tool spans that an in-house
decorator or a second library made with its own keys. Read per trace, the generic reader
would never see those tool spans, since a dialect found runs in the trace; the calls would be
known only from the conversation (when it was captured), with the span's own error lost, and
the run flagged for a tool-like span nobody read. So the spans no dialect claimed are offered
to the generic reader one by one, with two limits that keep what the dialect read unchanged:

* a span inside a span the dialect read as a tool, handoff or model call is part of that
  call (its HTTP request, its retry), never a call of the run;
* a span around a call or model call the dialect read is its wrapper (a framework's
  `Tool.run` around the instrumented tool, an SDK's `chat` around the client's): as a tool or
  a model call it would count that call twice.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from attest_otel.adapt.base import Role
from attest_otel.adapt.generic import GENERIC
from attest_otel.adapt.tree import CALLS, WORK, Nearest, Node
from attest_otel.model import Span

__all__ = ["claimed_by_dialect", "read_unclaimed"]

log = logging.getLogger("attest_otel.adapt.runs")


def claimed_by_dialect(node: Node) -> bool:
    """Whether a dialect module (or a declared dialect) claimed the span, as anything."""
    return node.dialect is not None and node.dialect is not GENERIC


def read_unclaimed(
    nodes: Iterable[Node], hydrate: Callable[[Span], Span] | None = None
) -> tuple[int, int]:
    """Offers the spans no dialect claimed, outside the calls a dialect read, to the generic
    reader; returns (spans it claimed, spans it could not read). Needs the linked tree."""
    nodes = list(nodes)
    # Before this pass every claimed span is a dialect's: `claimed_by_dialect`, inlined (it
    # runs once per span of every trace a dialect read).
    claimed = {id(n) for n in nodes if n.dialect is not None}
    if not claimed:
        return 0, 0
    nearest = Nearest(claimed)
    detect = GENERIC.detect
    found: list[tuple[Node, Role]] = []
    failed = 0
    for node in nodes:
        if node.dialect is not None:
            continue
        parent = node.parent
        # Most unclaimed spans (HTTP, database) are children of a claimed one: no walk.
        owner = parent if parent is None or parent.dialect is not None else nearest(parent)
        if owner is not None and owner.role in WORK:
            continue  # part of a call or model call the dialect read
        try:
            if hydrate is not None:
                hydrate(node.span)
            role = detect(node.span)
        except Exception:
            log.debug("generic reader: span %s", node.span.span_id, exc_info=True)
            failed += 1
            continue
        if role is not None:
            found.append((node, role))
    if not found:
        return 0, failed
    calls_below, models_below = _wrapped(nodes)
    taken = 0
    for node, role in found:
        key = id(node)
        if role in CALLS and key in calls_below:
            continue
        if role is Role.MODEL and key in models_below:
            continue
        node.dialect, node.role = GENERIC, role
        taken += 1
    return taken, failed


def _wrapped(nodes: list[Node]) -> tuple[set[int], set[int]]:
    """The ids of the spans with a dialect's tool (or handoff) call below them, and of those
    with a dialect's model call below them; each ancestor walked once per kind."""
    calls_below: set[int] = set()
    models_below: set[int] = set()
    for node in nodes:
        if not claimed_by_dialect(node):
            continue
        if node.role in CALLS:
            seen = calls_below
        elif node.role is Role.MODEL:
            seen = models_below
        else:
            continue
        up = node.parent
        steps = 0
        while up is not None and id(up) not in seen and steps < len(nodes):
            seen.add(id(up))
            up = up.parent
            steps += 1
    return calls_below, models_below
