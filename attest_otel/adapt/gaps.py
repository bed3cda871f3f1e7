"""What kept a run from being read whole: the reasons that make its grade `review`, not `pass`.

A grader that turns what it cannot see into a pass tells the user all is well when it does not
know (issue 24). After a run is assembled, this module compares what the trace shows happened
with what the run holds, and names every difference in one sentence (`Run.gaps`); the rules
then grade the run `review` (docs/rules.md, point 13, states each rule with an
example trace). It never changes the run's calls: it only says what is missing.

Three kinds are found here; the sidecar adds a fourth (a request of the trace refused or cut):

* `asked`: the model asked for a tool call (a request in a model call's output) that no call
  of the run accounts for, by call id, else by tool name;
* `unclaimed`: a span inside the run that looks like a tool call (a tool-ish name, a
  `*.tool*` attribute, an `execute_tool`-like operation) that no dialect claimed, outside any
  span that was read (a tool's own inner spans, a model call's HTTP span) and not a container
  of tool spans that were read;
* `content`: content the grade needs was not captured or not received: a call whose result
  is unknown and whose span does not say it failed (a returned error cannot be seen), or a
  model call that ended asking for tools (its finish reason) whose messages are missing and
  after which no call was read.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from attest_otel.adapt.base import OUTPUT, Role
from attest_otel.adapt.matching import Call, ModelCall
from attest_otel.adapt.tree import ANSWER_TOOLS, CALLS, Logs, Node, RunBuild
from attest_otel.adapt.witness import looks_like_handoff
from attest_otel.model import Span

__all__ = ["ANSWER_TOOLS", "UNCHECKED", "Survey", "find", "survey"]

log = logging.getLogger(__name__)


_LISTED = 3
"""Names listed in one reason before "and N more": a reason is one readable sentence."""

_TOOLISH_NAME = re.compile(
    r"(?:^|[^a-z])(?:tools?|tool_?calls?|function_?calls?|execute_?tool)(?:[^a-z]|$)",
    re.IGNORECASE,
)
_TOOLISH_KEY = re.compile(r"(?:^|\.)tool(?:s|_call|_name|call)?(?:\.|$)", re.IGNORECASE)
_KIND_KEY = re.compile(r"(?:kind|type|operation\.name|operation)$", re.IGNORECASE)
_KIND_VALUE = re.compile(r"^(?:tool|tool_call|execute_tool|function_call)$", re.IGNORECASE)
_TOOL_FINISH = frozenset(("tool_calls", "tool_call", "tool_use", "function_call", "tool-calls"))
_FINISH_KEYS = ("gen_ai.response.finish_reasons", "llm.response.finish_reason")


@dataclass(slots=True)
class Survey:
    """What one trace shows beyond its runs' own spans, found once before they are assembled."""

    tool_like: dict[int, list[Span]] = field(default_factory=dict)
    """Spans that look like tool calls and that no dialect claimed, by the run they sit in
    (`id(build.root)`)."""
    agents: set[str] = field(default_factory=set)
    """The names of the trace's agent spans: a request to transfer to one is a handoff."""


def survey(
    nodes: Iterable[Node],
    roots: Sequence[RunBuild],
    hydrate: Callable[[Span], Span] | None = None,
) -> Survey:
    """The trace's `Survey`; once per trace, before the runs are assembled."""
    found = Survey()
    for node in nodes:
        if node.role is Role.AGENT and node.dialect is not None:
            try:
                name = node.dialect.agent_name(node.span)
            except Exception:  # a name of a type no convention uses: not an agent we can name
                name = None
            if name:
                found.agents.add(_slug(name))
    found.tool_like = _tool_like(nodes, roots, hydrate)
    return found


def _tool_like(
    nodes: Iterable[Node],
    roots: Sequence[RunBuild],
    hydrate: Callable[[Span], Span] | None,
) -> dict[int, list[Span]]:
    run_of = {id(b.root): b for b in roots}
    read_below: set[int] = set()  # containers: a claimed call sits somewhere below them
    for node in nodes:
        if node.role in CALLS:
            up = node.parent
            while up is not None and id(up) not in read_below:
                read_below.add(id(up))
                up = up.parent
    out: dict[int, list[Span]] = {}
    for node in nodes:
        if node.dialect is not None:
            continue  # a dialect read it, as whatever it is
        if id(node) in read_below or id(node) in run_of:
            continue
        owner = _owner(node, run_of)
        if owner is None:
            continue
        span = node.span
        if not _toolish_name(span.name):
            if hydrate is not None:
                try:
                    hydrate(span)
                except Exception:  # an unreadable span is not a tool call we can name
                    continue
            if not _toolish_attributes(span.attributes):
                continue
        out.setdefault(id(owner.root), []).append(span)
    return out


def _owner(node: Node, run_of: dict[int, RunBuild]) -> RunBuild | None:
    """The run a span sits in; None inside a span that was read (a tool's or a model call's
    own inner spans are not calls of the run) or outside every run. A model call's span is
    its own even where it is the run's root too (a run no agent span marks, whose one model
    span covers it): the client's raw-request spans under it are the model call's."""
    up = node.parent
    while up is not None:
        if up.role is Role.MODEL:
            return None
        if id(up) in run_of:
            return run_of[id(up)]
        if up.role in (Role.TOOL, Role.HANDOFF):
            return None
        up = up.parent
    return None


def _toolish_name(name: str) -> bool:
    return bool(_TOOLISH_NAME.search(name))


def _toolish_attributes(attributes: dict[str, Any]) -> bool:
    for key, value in attributes.items():
        if _TOOLISH_KEY.search(key):
            return True
        if isinstance(value, str) and _KIND_KEY.search(key) and _KIND_VALUE.match(value):
            return True
    return False


def find(
    build: RunBuild,
    calls: Sequence[Call],
    groups: Sequence[ModelCall],
    logs: Logs,
    seen: Survey,
) -> list[str]:
    """Every reason the run is not read whole, in one sentence each; [] for a run read whole.

    `calls` are the run's calls as matched, before handoffs and answer tools are set aside
    (they account for the requests they claimed); `seen` is the trace's `survey`. A failure
    here is itself a gap: a run this module could not check is not known to be whole.
    """
    try:
        return _find(build, calls, groups, logs, seen)
    except Exception:
        log.warning("run %s: could not check what was read", build.root.span.span_id, exc_info=True)
        return [UNCHECKED]


UNCHECKED = "attest-otel could not check whether the run was read whole (an internal error)."


def _find(
    build: RunBuild,
    calls: Sequence[Call],
    groups: Sequence[ModelCall],
    logs: Logs,
    seen: Survey,
) -> list[str]:
    out: list[str] = []
    agents = seen.agents
    unclaimed = seen.tool_like.get(id(build.root), ())
    asked = _unaccounted_requests(calls, groups, logs)
    if asked:
        out.append(
            f"The model asked for {_names(asked)} but no tool span or call accounts for "
            f"{'it' if len(asked) == 1 else 'them'}."
        )
    blind = _silent_requests(calls, groups, logs)
    if blind:
        out.append(
            f"The model asked for tools {blind} time{'s' if blind > 1 else ''} but its messages "
            "were not captured or not received, and no tool call was read after it."
        )
    if unclaimed:
        out.append(
            f"{_names([s.name for s in unclaimed], quote=True)} look"
            f"{'s' if len(unclaimed) == 1 else ''} like a tool call but no dialect read "
            f"{'it' if len(unclaimed) == 1 else 'them'}."
        )
    unknown = [
        c.name or "unknown"
        for c in calls
        if not c.output_captured
        and not c.is_error
        and not _errored(c)
        and not _handoff(c, agents)
        and c.name not in ANSWER_TOOLS
    ]
    if unknown:
        out.append(
            f"The result of {_names(unknown)} was not captured, so an error "
            f"{'it' if len(unknown) == 1 else 'they'} returned cannot be seen."
        )
    return out


def _handoff(call: Call, agents: Collection[str]) -> bool:
    """A handoff passes control and returns nothing: there is no result to miss. Without a
    handoff span, a request named for an agent of the trace (`transfer_to_billing_agent`) is
    one."""
    if call.handoff_target is not None or (
        call.node is not None and call.node.role is Role.HANDOFF
    ):
        return True
    return (
        call.node is None and call.name is not None and any(a in _slug(call.name) for a in agents)
    )


def _slug(text: str) -> str:
    return re.sub(r"\W+", "_", text.strip().lower()).strip("_")


def _errored(call: Call) -> bool:
    return call.node is not None and call.node.span.is_error


def _unaccounted_requests(
    calls: Sequence[Call], groups: Sequence[ModelCall], logs: Logs
) -> list[str]:
    """Names of the requests in the model calls' outputs that no call carries."""
    ids = {c.call_id for c in calls if c.call_id is not None}
    free: dict[str, int] = {}
    for c in calls:
        if c.name is not None:
            free[c.name] = free.get(c.name, 0) + 1
    targets = [c.handoff_target for c in calls if c.handoff_target is not None]
    left: list[str] = []
    by_id_matched: list[str] = []
    seen: set[str] = set()
    for group in groups:
        for msg in group.part(OUTPUT, logs) or ():
            for req in msg.tool_calls:
                if req.name in ANSWER_TOOLS or any(
                    looks_like_handoff(req.name, t) for t in targets
                ):
                    continue  # the answer, or control passed to the handoff's agent
                if req.call_id is not None:
                    if req.call_id in seen:
                        continue  # the same request seen by two spans of one model call
                    seen.add(req.call_id)
                    if req.call_id in ids:
                        by_id_matched.append(req.name)
                        continue
                left.append(req.name)
    for name in by_id_matched:
        if free.get(name, 0) > 0:
            free[name] -= 1
    out = []
    for name in left:
        if free.get(name, 0) > 0:
            free[name] -= 1
        else:
            out.append(name)
    return out


def _silent_requests(calls: Sequence[Call], groups: Sequence[ModelCall], logs: Logs) -> int:
    """Model calls that ended asking for tools with no output to read, and no call after them
    (before the next model call): the requests went unseen, not unmade."""
    starts = sorted(c.start for c in calls)
    count = 0
    for i, group in enumerate(groups):
        if not any(_asks_for_tools(n.span) for n in group.members):
            continue
        if group.part(OUTPUT, logs) is not None:
            continue  # its requests are read by `_unaccounted_requests`
        until = groups[i + 1].start if i + 1 < len(groups) else None
        if not any(s >= group.start and (until is None or s < until) for s in starts):
            count += 1
    return count


def _asks_for_tools(span: Span) -> bool:
    for key in _FINISH_KEYS:
        value = span.attributes.get(key)
        values = value if isinstance(value, list | tuple) else [value]
        for v in values:
            if isinstance(v, str) and v.lower() in _TOOL_FINISH:
                return True
    return False


def _names(names: Sequence[str], *, quote: bool = False) -> str:
    shown = [f"'{n}'" if quote else n for n in dict.fromkeys(names)]
    counted = {n: names.count(n) for n in dict.fromkeys(names)}
    parts = [
        f"{s} ({counted[n]}x)" if counted[n] > 1 else s
        for s, n in zip(shown, dict.fromkeys(names), strict=True)
    ]
    if len(parts) > _LISTED:
        return ", ".join(parts[:_LISTED]) + f" and {len(parts) - _LISTED} more"
    return ", ".join(parts[:-1]) + (" and " if len(parts) > 1 else "") + parts[-1]
