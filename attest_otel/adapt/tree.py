"""Which spans make runs: the trace as a tree of detected spans, and the runs in it.

A run is an agent span that does work of its own (containers that only hold other agents, a
runner turn or an SDK workflow span, are not runs); a trace without one is one run at its
root. Every tool, model and handoff span belongs to the run of its nearest agent ancestor.
Each node reads its content lazily, part by part, so a run reads only what it needs.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from attest_otel.adapt.base import Dialect, Exchange, Role, Want
from attest_otel.model import LogRecord, Run, Span

__all__ = [
    "ANSWER_TOOLS",
    "CALLS",
    "WORK",
    "Logs",
    "Nearest",
    "Node",
    "RunBuild",
    "depths",
    "inside",
    "run_builds",
    "up",
]

log = logging.getLogger("attest_otel.adapt.runs")

WORK = (Role.TOOL, Role.MODEL, Role.HANDOFF)
CALLS = (Role.TOOL, Role.HANDOFF)

ANSWER_TOOLS = frozenset(("final_answer",))
"""Tools a framework gives the model to deliver its answer: asking for one is no tool use,
and an agent span named after one with no work of its own is the agent's answer event
(BeeAI's `final_answer` AGENT span beside the run), not an agent."""


class Node:
    """One span with its detected dialect and role, linked into the trace's tree.

    Content parts are read from the span on first use and kept, each on its own, so a run
    reads only what it needs (`want` per part) from only the spans it needs.
    """

    __slots__ = ("dialect", "parent", "parts", "place", "role", "span")

    def __init__(self, span: Span, found: tuple[Dialect, Role] | None) -> None:
        self.span = span
        self.dialect: Dialect | None = found[0] if found else None
        self.role: Role | None = found[1] if found else None
        self.parent: Node | None = None
        self.parts: dict[str, Any] = {}
        self.place: tuple[int, int, int] = (0, 0, 0)
        """(entry, exit, depth) in a walk of the tree (`guard.number`): `inside` in O(1)."""

    @property
    def key(self) -> tuple[int, int, str]:
        s = self.span
        return (s.start_ns, s.end_ns, s.span_id)

    def part(self, name: str, logs: Logs, also: Want = frozenset()) -> Any:
        """One part of the span's exchange; `also` names parts worth reading in the same pass."""
        parts = self.parts
        if name in parts:
            return parts[name]
        want = frozenset((name, *also)) - parts.keys()
        if self.dialect is None:
            ex = Exchange()
        else:
            records = logs.get((self.span.trace_id, self.span.span_id), ())
            try:
                ex = self.dialect.exchange(self.span, records, want)
            except Exception:  # a malformed span must not cost the rest of the trace
                log.warning("could not read span %s", self.span.span_id, exc_info=True)
                ex = Exchange()
        for part in want:
            parts[part] = getattr(ex, part)
        return parts[name]


Logs = dict[tuple[str, str], list[LogRecord]]


@dataclass(slots=True)
class RunBuild:
    node: Node | None
    """The run's agent span; None for a run at the root of a trace without one."""
    root: Node
    """The span the run is anchored to (its agent span, or the trace root)."""
    members: list[Node] = field(default_factory=list)
    nested: list[RunBuild] = field(default_factory=list)
    parent: RunBuild | None = None
    run: Run | None = None
    last: Node | None = None
    """The agent's last turn, when its turns alternate with another participant's
    (`_conversations`): where its final answer is."""


def run_builds(nodes: dict[str, Node], roots: list[Node]) -> list[RunBuild]:
    """The runs of one linked trace, each with its member spans and nested runs."""
    agents = _beside_its_work(
        nodes, _turns_merged([n for n in nodes.values() if n.role is Role.AGENT])
    )
    if not agents:
        agents = _implicit_agents(nodes)
    if not agents:
        work = [n for n in nodes.values() if n.role in WORK]
        if not work:
            return []
        return [RunBuild(None, min(roots, key=lambda n: n.key), members=work)]
    is_agent = {id(a) for a in agents}
    agent_at = Nearest(is_agent)
    has_work: set[int] = set()
    has_agent_below: set[int] = set()
    has_model: set[int] = set()
    for node in nodes.values():
        if node.role in WORK or node.role is Role.AGENT:
            owner = agent_at(node.parent)
            if owner is not None:
                (has_work if node.role in WORK else has_agent_below).add(id(owner))
                if node.role is Role.MODEL:
                    has_model.add(id(owner))
    later = _conversations(agents, has_model)
    turns = {id(turn): canon for turn, canon in later}
    if turns:
        for turn, canon in later:
            if id(turn) in has_work:
                has_work.add(id(canon))
            if id(turn) in has_agent_below:
                has_agent_below.add(id(canon))
        agents = [a for a in agents if id(a) not in turns]
    # An empty agent span named like an agent that works elsewhere in the trace marks the
    # moment of a handoff (OpenLIT), not a run of its own.
    working = {_name(a) for a in agents if id(a) in has_work} - {None}
    not_runs = working | ANSWER_TOOLS  # empty agent spans that mark a handoff or an answer
    runs = {
        id(a): RunBuild(a, a)
        for a in agents
        if id(a) in has_work or (id(a) not in has_agent_below and _name(a) not in not_runs)
    }
    for turn, canon in later:
        build = runs.get(id(canon))
        if build is not None:
            runs[id(turn)] = build
            if _name(turn) == _name(canon):
                build.last = turn
    run_at = Nearest(set(runs)) if len(runs) != len(agents) or turns else agent_at
    leftover: list[Node] = []
    for node in nodes.values():
        if node.role in WORK:
            owner = run_at(node.parent)
            if owner is not None:
                runs[id(owner)].members.append(node)
            else:
                leftover.append(node)
        elif node.role is Role.AGENT and id(node) in runs and id(node) not in turns:
            owner = run_at(node.parent)
            if owner is not None:
                runs[id(node)].parent = runs[id(owner)]
                runs[id(owner)].nested.append(runs[id(node)])
    builds = list({id(b): b for b in runs.values()}.values())
    if leftover and (not builds or any(n.role in CALLS for n in leftover)):
        root = min(roots, key=lambda n: n.key)
        top = RunBuild(None, root, members=leftover)
        for build in builds:
            if build.parent is None:
                build.parent = top
                top.nested.append(build)
        builds.append(top)
    return builds


# --- one run ---------------------------------------------------------------------------


def _name(node: Node) -> str | None:
    return node.dialect.agent_name(node.span) if node.dialect is not None else None


def _beside_its_work(nodes: dict[str, Node], agents: list[Node]) -> list[Node]:
    """An agent span with nothing below it, beside a span of the same name that holds the
    agent's work (OpenLLMetry's LangGraph instrumentation: an empty `invoke_agent billing_agent`
    next to `execute_task billing_agent`, under the tool that called the agent): that span is
    the agent's, and the empty one only marks it (issue 25, class 6)."""
    parents = {id(n.parent) for n in nodes.values() if n.parent is not None}
    empty = [a for a in agents if id(a) not in parents and a.parent is not None]
    if not empty:
        return agents
    work_below: set[int] = set()
    for node in nodes.values():
        if node.role in WORK:
            up, steps = node.parent, 0
            while up is not None and steps < 64 and id(up) not in work_below:
                work_below.add(id(up))
                up, steps = up.parent, steps + 1
    beside: dict[int, list[Node]] = {id(a.parent): [] for a in empty}
    for node in nodes.values():
        if (
            id(node.parent) in beside
            and node.role in (Role.OTHER, Role.WORKFLOW)
            and id(node) in work_below
        ):
            beside[id(node.parent)].append(node)
    moved: dict[int, Node] = {}
    for agent in empty:
        candidates = beside[id(agent.parent)]
        name = _name(agent) if candidates else None
        if not name:
            continue
        for node in candidates:
            if node.role is not Role.AGENT and _name(node) == name:
                node.role, agent.role = Role.AGENT, Role.WORKFLOW
                moved[id(agent)] = node
                break
    return [moved.get(id(a), a) for a in agents]


def _turns_merged(agents: list[Node]) -> list[Node]:
    """Turns of one agent are one run: a nameless agent span inside a named one (OpenLIT's
    per-turn `invoke_agent` under `invoke_agent billing_agent`) is a step of that agent, not
    an agent of its own; split, an error would be cut off from the retry that recovered it."""
    if len(agents) < 2:
        return agents
    nearest = Nearest({id(a) for a in agents})
    kept = []
    for node in agents:
        owner = nearest(node.parent)
        if (
            owner is not None
            and node.dialect is not None
            and owner.dialect is not None
            and not node.dialect.agent_name(node.span)
            and owner.dialect.agent_name(owner.span)
        ):
            node.role = Role.WORKFLOW
        else:
            kept.append(node)
    return kept


def _conversations(agents: list[Node], has_model: set[int]) -> list[tuple[Node, Node]]:
    """A chat of participants taking turns, each turn an agent span under one parent: the
    assistant's turns (with model calls) and a user proxy's turns (no model calls; it runs
    the tools the assistant asked for) are one run, the assistant's, not two agents that
    each see every call (issue 25, class 1). Returns (later turn, the run's first turn):
    a proxy's turn belongs to the assistant turn before it (else the first one after)."""
    siblings: dict[int, list[Node]] = {}
    for agent in agents:
        siblings.setdefault(id(agent.parent), []).append(agent)
    out: list[tuple[Node, Node]] = []
    for turns in siblings.values():
        if len(turns) < 3:
            continue
        turns.sort(key=lambda n: n.key)
        names = [_name(t) for t in turns]
        talkers = {n for t, n in zip(turns, names, strict=True) if id(t) in has_model}
        if not talkers or len(talkers) == len(set(names)) or len(set(names)) == len(names):
            continue  # no proxy, or nobody speaks twice: separate agents, not a chat
        first: dict[str | None, Node] = {}
        current: Node | None = None
        waiting: list[Node] = []
        for turn, name in zip(turns, names, strict=True):
            if name in talkers:
                current = first.setdefault(name, turn)
                if current is not turn:
                    out.append((turn, current))
                out.extend((w, current) for w in waiting)
                waiting = []
            elif current is not None:
                out.append((turn, current))
            else:
                waiting.append(turn)
    return out


def _implicit_agents(nodes: dict[str, Node]) -> list[Node]:
    """Agents no span is marked as: a workflow run by a tool that calls a model of its own
    (LlamaIndex's `FunctionAgent.run` inside the tool that delegates to it) is a nested run.
    The trace's top run needs no marking: what is outside every agent is its work. Marked
    here as agents, so the rest of the assembly treats them like any other."""
    models_below: set[int] = set()
    for node in nodes.values():
        if node.role is Role.MODEL:
            parent, steps = node.parent, 0
            while parent is not None and steps < 64 and id(parent) not in models_below:
                models_below.add(id(parent))
                parent, steps = parent.parent, steps + 1
    found = []
    for node in nodes.values():
        parent = node.parent
        if (
            parent is not None
            and parent.role is Role.TOOL
            and node.role not in WORK
            and node.dialect is not None
            and id(node) in models_below
        ):
            node.role = Role.AGENT
            found.append(node)
    return found


def up(node: Node | None, pred: Any, limit: int) -> Node | None:
    """The nearest node from `node` upwards (itself included) that satisfies `pred`."""
    steps = 0
    while node is not None and steps <= limit:
        if pred(node):
            return node
        node = node.parent
        steps += 1
    return None


class Nearest:
    """The nearest node at or above a node whose id is in `marked`, memoised along the way:
    each node is walked once however deep the trace, and a parent loop cannot hang it."""

    def __init__(self, marked: set[int]) -> None:
        self.marked = marked
        self.memo: dict[int, Node | None] = {}

    def __call__(self, node: Node | None) -> Node | None:
        if node is None:
            return None
        key = id(node)
        # Most questions are about a node already answered (a run's spans share parents) or
        # a marked one: answered before building the walk's path and loop guard.
        if key in self.memo:
            return self.memo[key]
        if key in self.marked:
            return node
        path: list[Node] = []
        found: Node | None = None
        seen: set[int] = set()
        while node is not None:
            key = id(node)
            if key in self.memo:
                found = self.memo[key]
                break
            if key in self.marked:
                found = node
                break
            if key in seen:
                break  # a parent loop in broken data: nothing above
            seen.add(key)
            path.append(node)
            node = node.parent
        for visited in path:
            self.memo[id(visited)] = found
        return found


def depths(builds: list[RunBuild]) -> dict[int, int]:
    """How deep each run is nested, memoised: linear however deep (a run tree is a tree:
    `guard.link` cut any parent loop)."""
    depths: dict[int, int] = {}
    for build in builds:
        path: list[RunBuild] = []
        node: RunBuild | None = build
        while node is not None and id(node) not in depths and len(path) <= len(builds):
            path.append(node)
            node = node.parent
        depth = depths.get(id(node), -1) if node is not None else -1
        for item in reversed(path):
            depth += 1
            depths[id(item)] = depth
    return depths


def inside(outer: Node | None, inner: Node | None) -> bool:
    """Whether `outer` is an ancestor of `inner`, at most 65 levels up (numbered trees)."""
    if outer is None or inner is None:
        return False
    entry, leave, depth = outer.place
    inner_entry, inner_leave, inner_depth = inner.place
    return entry < inner_entry and inner_leave <= leave and inner_depth - depth <= 65
