"""Spans to runs: which spans make a run, which calls belong to it, and what it was asked.

    spans ──► per trace: detect each span (dialect, role)
          ──► run spans: agent spans that do work of their own (containers that only hold
              other agents — a runner turn, an SDK workflow span — are not runs); a trace
              without one is one run at its root
          ──► per run, deepest first: tool spans whose nearest run is this one, deduplicated;
              model spans grouped (a client span inside an instrumentation's span is one
              call), read only when a run needs them: to find results and ids a tool span
              lacks, calls that have no tool span at all, the task and the final answer
          ──► policy: overrides, else the policy file, else the agent span's attributes

A nested agent (agent used as a tool, sub-agent, handoff target) is its own run. The tool
span that invoked it stays a call of the parent, and when that span did not capture a result
the nested run's final answer is its result; a sub-agent started without a tool span is a
call of the parent when the parent's model asked for it by name. A handoff passes control
instead of calling, so it is no call at all (the labels of the OpenAI Agents fixtures, and
dialects.md section 7, say the same): its span only claims the model's transfer request, so
that request is not taken for a tool call without a span.
"""

from __future__ import annotations

import bisect
import json
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attest_otel.adapt import guard
from attest_otel.adapt.base import (
    ANSWER,
    INPUT,
    OUTPUT,
    SYSTEM,
    TASK,
    TOOLS,
    Dialect,
    Exchange,
    Message,
    Role,
    ToolInfo,
    ToolReply,
    ToolRequest,
    Want,
    captured,
    event_exception_text,
)
from attest_otel.adapt.detect import detect
from attest_otel.config import AgentPolicy, Policy, parse_fallbacks_value, parse_tools_value
from attest_otel.ingest.span import STATUS_ERROR, LogRecord, Span
from attest_otel.model import Run, Step, ToolCall, json_safe, output_text

__all__ = ["TraceRuns", "runs_from_file", "runs_from_spans"]

log = logging.getLogger(__name__)

_WORK = (Role.TOOL, Role.MODEL, Role.HANDOFF)
_CALLS = (Role.TOOL, Role.HANDOFF)


@dataclass(slots=True)
class TraceRuns:
    """The runs rebuilt from one trace, and every dialect its spans spoke (first seen first)."""

    trace_id: str
    runs: list[Run]
    dialects: list[str]
    anomalies: dict[str, int] = field(default_factory=dict)
    """What was wrong with the trace and how it was handled, by kind (see `guard`): e.g.
    `{"duplicate_span_ids": 2, "parent_cycles": 1}`. Empty for a sound trace."""


def runs_from_spans(
    spans: Sequence[Span],
    logs: Sequence[LogRecord] = (),
    *,
    policy: Policy | None = None,
    allowed_tools: list[str] | None = None,
    fallbacks: dict[str, list[str]] | None = None,
) -> list[TraceRuns]:
    """Runs per trace, traces in order of first appearance, runs in start order.

    `allowed_tools` / `fallbacks` are one-off overrides (CLI flags) that win over the policy
    file and the span attributes; None (or an empty `fallbacks`) leaves those in charge.
    """
    traces: dict[str, list[Span]] = {}
    for span in spans:
        bucket = traces.get(span.trace_id)
        if bucket is None:
            traces[span.trace_id] = bucket = []
        bucket.append(span)
    span_logs: dict[tuple[str, str], list[LogRecord]] = {}
    for record in logs:
        if record.span_id:
            span_logs.setdefault((record.trace_id, record.span_id), []).append(record)
    settings = _Settings(policy or Policy.empty(), allowed_tools, fallbacks or None)
    return [_build(tid, tspans, span_logs, settings) for tid, tspans in traces.items()]


def _build(
    trace_id: str,
    spans: list[Span],
    logs: dict[tuple[str, str], list[LogRecord]],
    settings: _Settings,
) -> TraceRuns:
    """One trace's runs; a trace the assembler cannot handle costs only itself."""
    try:
        return _Trace(trace_id, spans, logs, settings).build()
    except RecursionError:
        log.error("trace %s: nested too deeply to rebuild its runs", trace_id)
    except Exception:
        log.error("trace %s: could not rebuild its runs", trace_id, exc_info=True)
    return TraceRuns(trace_id, [], [], {guard.ADAPTER_ERRORS: 1})


def runs_from_file(
    path: str | Path,
    *,
    policy: Policy | None = None,
    allowed_tools: list[str] | None = None,
    fallbacks: dict[str, list[str]] | None = None,
) -> list[TraceRuns]:
    """`runs_from_spans` over an OTLP file (JSON lines or protobuf), with its log records."""
    # Imported here: the decoders pull in protobuf, which callers that already hold spans
    # (the sidecar, tests) do not need to load.
    from attest_otel.ingest.decode import decode_file

    decoded = decode_file(path)
    return runs_from_spans(
        decoded.spans,
        decoded.logs,
        policy=policy,
        allowed_tools=allowed_tools,
        fallbacks=fallbacks,
    )


@dataclass(slots=True)
class _Settings:
    policy: Policy
    allowed_tools: list[str] | None
    fallbacks: dict[str, list[str]] | None


class _Node:
    """One span with its detected dialect and role, linked into the trace's tree.

    Content parts are read from the span on first use and kept, each on its own, so a run
    reads only what it needs (`want` per part) from only the spans it needs.
    """

    __slots__ = ("dialect", "parent", "parts", "place", "role", "span")

    def __init__(self, span: Span, found: tuple[Dialect, Role] | None) -> None:
        self.span = span
        self.dialect: Dialect | None = found[0] if found else None
        self.role: Role | None = found[1] if found else None
        self.parent: _Node | None = None
        self.parts: dict[str, Any] = {}
        self.place: tuple[int, int, int] = (0, 0, 0)
        """(entry, exit, depth) in a walk of the tree (`guard.number`): `_inside` in O(1)."""

    @property
    def key(self) -> tuple[int, int, str]:
        s = self.span
        return (s.start_ns, s.end_ns, s.span_id)

    def part(self, name: str, logs: _Logs, also: Want = frozenset()) -> Any:
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


_Logs = dict[tuple[str, str], list[LogRecord]]


@dataclass(slots=True)
class _Call:
    """A tool call while its run is assembled; becomes a `ToolCall` at the end."""

    name: str | None
    call_id: str | None
    arguments: Any
    args_captured: bool
    output: Any
    output_captured: bool
    start: int
    end: int
    span_id: str | None
    seq: int = 0
    node: _Node | None = None
    is_error: bool | None = None
    error_text: str | None = None
    handoff_target: str | None = None
    claimed: bool = False

    @property
    def key(self) -> tuple[int, int, str, int]:
        return (self.start, self.end, self.span_id or "", self.seq)


@dataclass(slots=True)
class _ModelCall:
    """One model call, possibly seen by several spans (instrumentation + client)."""

    lead: _Node
    members: list[_Node] = field(default_factory=list)
    start: int = 0
    end: int = 0
    response_ids: set[str | int] = field(default_factory=set)

    def part(self, name: str, logs: _Logs, also: Want = frozenset()) -> Any:
        """The part from the first member that has it: a contentless client span yields."""
        for node in self.members:
            value = node.part(name, logs, also)
            if value is not None:
                return value
        return None


@dataclass(slots=True)
class _RunBuild:
    node: _Node | None
    """The run's agent span; None for a run at the root of a trace without one."""
    root: _Node
    """The span the run is anchored to (its agent span, or the trace root)."""
    members: list[_Node] = field(default_factory=list)
    nested: list[_RunBuild] = field(default_factory=list)
    parent: _RunBuild | None = None
    run: Run | None = None


class _Trace:
    def __init__(
        self,
        trace_id: str,
        spans: list[Span],
        logs: dict[tuple[str, str], list[LogRecord]],
        settings: _Settings,
    ) -> None:
        self.trace_id = trace_id
        self.spans = spans
        self.logs = logs
        self.settings = settings

    def build(self) -> TraceRuns:
        nodes: dict[str, _Node] = {}
        dialects: list[str] = []
        duplicates = unreadable = 0
        for span in self.spans:
            if span.span_id in nodes:
                duplicates += 1  # the same span exported twice
                continue
            try:
                found = detect(span)
            except Exception:  # a value of a type no convention uses
                log.debug("could not classify span %s", span.span_id, exc_info=True)
                found = None
                unreadable += 1
            nodes[span.span_id] = _Node(span, found)
            if found is not None and found[0].name not in dialects:
                dialects.append(found[0].name)
        if not dialects:
            return TraceRuns(self.trace_id, [], [])
        anomalies: dict[str, int] = {}
        if duplicates:
            anomalies[guard.DUPLICATE_SPAN_IDS] = duplicates
        if unreadable:
            anomalies[guard.UNREADABLE_SPANS] = unreadable
        roots = guard.link(nodes, anomalies)
        guard.number(nodes.values(), roots)
        skewed = guard.clock_skew(self.spans)
        if skewed:
            anomalies[guard.CLOCK_SKEW] = skewed
        guard.report(self.trace_id, anomalies)
        builds = self._runs(nodes, roots)
        depths = _depths(builds)
        for build in sorted(builds, key=lambda b: depths[id(b)], reverse=True):
            build.run = self._assemble(build)
        builds.sort(key=lambda b: b.root.key)
        runs = [b.run for b in builds if b.run is not None]
        return TraceRuns(self.trace_id, runs, dialects, anomalies)

    # --- which spans make runs ---------------------------------------------------------

    def _runs(self, nodes: dict[str, _Node], roots: list[_Node]) -> list[_RunBuild]:
        agents = [n for n in nodes.values() if n.role is Role.AGENT]
        if not agents:
            work = [n for n in nodes.values() if n.role in _WORK]
            if not work:
                return []
            return [_RunBuild(None, min(roots, key=lambda n: n.key), members=work)]
        is_agent = {id(a) for a in agents}
        agent_at = _Nearest(is_agent)
        has_work: set[int] = set()
        has_agent_below: set[int] = set()
        for node in nodes.values():
            if node.role in _WORK or node.role is Role.AGENT:
                owner = agent_at(node.parent)
                if owner is not None:
                    (has_work if node.role in _WORK else has_agent_below).add(id(owner))
        runs = {
            id(a): _RunBuild(a, a)
            for a in agents
            if id(a) in has_work or id(a) not in has_agent_below
        }
        run_at = _Nearest(set(runs)) if len(runs) != len(agents) else agent_at
        leftover: list[_Node] = []
        for node in nodes.values():
            if node.role in _WORK:
                owner = run_at(node.parent)
                if owner is not None:
                    runs[id(owner)].members.append(node)
                else:
                    leftover.append(node)
            elif node.role is Role.AGENT and id(node) in runs:
                owner = run_at(node.parent)
                if owner is not None:
                    runs[id(node)].parent = runs[id(owner)]
                    runs[id(owner)].nested.append(runs[id(node)])
        builds = list(runs.values())
        if leftover and (not builds or any(n.role in _CALLS for n in leftover)):
            root = min(roots, key=lambda n: n.key)
            top = _RunBuild(None, root, members=leftover)
            for build in builds:
                if build.parent is None:
                    build.parent = top
                    top.nested.append(build)
            builds.append(top)
        return builds

    # --- one run ---------------------------------------------------------------------------

    def _assemble(self, build: _RunBuild) -> Run:
        calls: list[_Call] = []
        models: list[_Node] = []
        for seq, node in enumerate(sorted(build.members, key=lambda n: n.key)):
            if node.role is Role.MODEL:
                models.append(node)
            else:
                calls.append(self._span_call(node, seq))
        calls = _dedupe(calls)
        groups = _model_calls(models)

        invoked = self._invocations(build)
        for call in calls:
            nested = invoked.get(id(call.node)) if call.node is not None else None
            answer = nested.run.final_answer if nested is not None and nested.run else None
            if answer is not None and not call.output_captured:
                call.output = answer
                call.output_captured = True
        invoked_ids = {id(n) for n in invoked.values()}
        direct = [n for n in build.nested if id(n) not in invoked_ids]
        missing = any(not c.output_captured or not c.args_captured for c in calls)
        if groups and (not calls or missing or direct):
            self._from_models(build, calls, groups, direct)
        # A handoff passes control on; it is not a tool call (it only claimed its request).
        calls = [c for c in calls if c.node is None or c.node.role is not Role.HANDOFF]
        for call in calls:
            _error_fields(call)
        calls.sort(key=lambda c: c.key)

        run = Run(trace_id=self.trace_id, span_id=build.root.span.span_id)
        anchor = build.node or (build.root if build.root.dialect is not None else None)
        if anchor is not None and anchor.dialect is not None:
            run.agent = anchor.dialect.agent_name(anchor.span)
        self._describe(run, anchor, groups)
        run.steps = [Step(tool_call=_to_tool_call(c)) for c in calls]
        self._apply_policy(run, anchor)
        return run

    def _span_call(self, node: _Node, seq: int) -> _Call:
        span = node.span
        assert node.dialect is not None
        try:
            info = node.dialect.tool(span)
        except Exception:
            log.warning("could not read tool span %s", span.span_id, exc_info=True)
            info = ToolInfo(name=span.name)
        return _Call(
            name=info.name if node.role is Role.HANDOFF else info.name or span.name,
            call_id=info.call_id,
            arguments=info.arguments,
            args_captured=info.arguments_captured,
            output=info.output,
            output_captured=info.output_captured,
            start=span.start_ns,
            end=span.end_ns,
            span_id=span.span_id,
            seq=seq,
            node=node,
            handoff_target=info.handoff_target if node.role is Role.HANDOFF else None,
        )

    def _invocations(self, build: _RunBuild) -> dict[int, _RunBuild]:
        """Tool span (by id) of this run -> the nested run it invoked."""
        out: dict[int, _RunBuild] = {}
        for nested in build.nested:
            assert nested.node is not None
            tool = _up(
                nested.node.parent,
                lambda n: n.role in _CALLS or n is build.root,
                len(self.spans),
            )
            if tool is not None and tool.role in _CALLS:
                out[id(tool)] = nested
        return out

    def _from_models(
        self,
        build: _RunBuild,
        calls: list[_Call],
        groups: list[_ModelCall],
        direct: list[_RunBuild],
    ) -> None:
        """Fill what tool spans lack, and find calls without spans, from the model messages.

        Requests come from each model call's output (small); a result reaches the model only
        in a later call's input, which repeats the whole history, so inputs are read newest
        first and only until every wanted result is found.
        """
        if calls and not direct and self._fill_nearby(calls, groups):
            return
        logs = self.logs
        requests: list[_Request] = []
        seen: set[str] = set()
        outputs_captured = True
        for group in groups:
            out = group.part(OUTPUT, logs)
            if out is None:
                outputs_captured = False
                continue
            for msg in out:
                for req in msg.tool_calls:
                    if req.call_id is not None:
                        if req.call_id in seen:
                            continue
                        seen.add(req.call_id)
                    requests.append(_Request(req, group.end, len(requests), group.lead))
        if not requests and build.node is not None:
            # No model content (content only in the run span's history or its log events):
            # the history still orders the requests, if not in time.
            when = build.node.span.start_ns
            for msg in build.node.part(INPUT, logs) or ():
                if msg.role != "assistant":
                    continue
                for req in msg.tool_calls:
                    if req.call_id is None or req.call_id not in seen:
                        if req.call_id is not None:
                            seen.add(req.call_id)
                        requests.append(_Request(req, when, len(requests), build.node))
            outputs_captured = outputs_captured or bool(requests)
        replies: dict[str, ToolReply] = {}
        if not outputs_captured:
            # Requests only in the history: read every input, oldest first, for their order.
            prev: _ModelCall | None = None
            for group in groups:
                for msg in group.part(INPUT, logs) or ():
                    _collect_replies(msg, replies)
                    if msg.role == "assistant" and prev is not None:
                        for req in msg.tool_calls:
                            if req.call_id is not None and req.call_id not in seen:
                                seen.add(req.call_id)
                                requests.append(_Request(req, prev.end, len(requests), prev.lead))
                prev = group
            requests.sort(key=lambda r: (r.time, r.seq))

        by_id = {c.call_id: c for c in calls if c.call_id is not None}
        had_spans = bool(calls)
        claimable = guard.Claimable(_unclaimed)
        for call in calls:
            claimable.add(call)
        handoffs = [c for c in calls if c.handoff_target is not None]
        for request in requests:
            req = request.req
            target = by_id.get(req.call_id) if req.call_id is not None else None
            if target is None:
                target = _claim_by_name(claimable, handoffs, req, request.time)
            if target is not None:
                _take_request(target, req)
                continue
            nested = _started(req, direct)
            if nested is not None:
                # A sub-agent the model asked for, with no tool span: its span is the call.
                assert nested.node is not None and nested.run is not None
                direct.remove(nested)
                answer = nested.run.final_answer
                calls.append(
                    _Call(
                        name=req.name,
                        call_id=req.call_id,
                        arguments=req.arguments,
                        args_captured=True,
                        output=answer,
                        output_captured=answer is not None,
                        start=request.time,
                        end=request.time,
                        span_id=nested.node.span.span_id,
                        seq=10_000 + request.seq,
                        node=nested.node,
                    )
                )
                claimable.add(calls[-1])
            elif not had_spans:
                calls.append(
                    _Call(
                        name=req.name,
                        call_id=req.call_id,
                        arguments=req.arguments,
                        args_captured=True,
                        output=None,
                        output_captured=False,
                        start=request.time,
                        end=request.time,
                        span_id=request.model.span.span_id,
                        seq=10_000 + request.seq,
                    )
                )
                claimable.add(calls[-1])

        wanted = {c.call_id for c in calls if not c.output_captured and c.call_id is not None}
        wanted.difference_update(replies)
        for group in reversed(groups):
            if not wanted:
                break
            for msg in group.part(INPUT, logs) or ():
                _collect_replies(msg, replies)
                for reply in msg.tool_results:  # not `wanted -= replies.keys()`: a copy
                    if reply.call_id in replies:
                        wanted.discard(reply.call_id)
        if wanted and build.node is not None:
            for msg in build.node.part(INPUT, logs) or ():
                _collect_replies(msg, replies)
        for call in calls:
            if call.output_captured or call.call_id is None:
                continue
            answered = replies.get(call.call_id)
            if answered is not None:
                call.output = answered.content
                call.output_captured = True
                if answered.is_error and call.node is None:
                    call.is_error = True

    def _fill_nearby(self, calls: list[_Call], groups: list[_ModelCall]) -> bool:
        """The common case, cheaply: a tool span lacking its id, arguments or result finds
        them in the model call just before it (the request) and just after it (the result).

        True when every call that lacked something got it; otherwise the caller falls back
        to reading every model call.
        """
        logs = self.logs
        starts = [g.start for g in groups]
        used: set[str] = set()
        for call in calls:
            if call.output_captured and call.args_captured:
                continue
            before = bisect.bisect_right(starts, call.start) - 1
            if call.call_id is None or not call.args_captured:
                if before < 0:
                    return False
                req = _pick_request(groups[before].part(OUTPUT, logs), call, used)
                if req is None:
                    return False
                _take_request(call, req)
                if req.call_id is not None:
                    used.add(req.call_id)
            if not call.output_captured:
                after = before + 1
                if after >= len(groups) or call.call_id is None:
                    return False
                found = None
                for msg in groups[after].part(INPUT, logs) or ():
                    for reply in msg.tool_results:
                        if reply.call_id == call.call_id and captured(reply.content):
                            found = reply
                if found is None:
                    return False
                call.output, call.output_captured = found.content, True
        return True

    def _describe(self, run: Run, anchor: _Node | None, groups: list[_ModelCall]) -> None:
        """Task, answer, system prompt and offered tools: the run span's, else its models'."""
        logs = self.logs
        task = answer = system = None
        tools: list[dict[str, Any]] = []
        if anchor is not None:
            describe = frozenset((TASK, ANSWER, SYSTEM, TOOLS))
            task = anchor.part(TASK, logs, describe)
            answer = anchor.part(ANSWER, logs, describe)
            system = anchor.part(SYSTEM, logs, describe)
            tools = list(anchor.part(TOOLS, logs, describe) or ())
        if groups:
            first = frozenset(
                part
                for part, value in ((TASK, task), (SYSTEM, system), (TOOLS, tools or None))
                if value is None
            )
            if task is None:
                task = groups[0].part(TASK, logs, first)
            if system is None:
                system = groups[0].part(SYSTEM, logs, first)
            if not tools:
                tools = list(groups[0].part(TOOLS, logs, first) or ())
            if answer is None:
                answer = groups[-1].part(ANSWER, logs)
        run.task = (task or "").rstrip()
        run.final_answer = answer.rstrip() if answer is not None else None
        run.system_prompt = system
        run.tool_definitions = tools

    def _apply_policy(self, run: Run, anchor: _Node | None) -> None:
        settings = self.settings
        entry: AgentPolicy = settings.policy.for_agent(run.agent)
        # Copies: every run gets lists of its own, whatever later code does with them.
        allowed = None if entry.allowed_tools is None else list(entry.allowed_tools)
        fallbacks = {tool: list(alts) for tool, alts in entry.tool_fallbacks.items()}
        if entry.entry is None and anchor is not None:
            raw_allowed, raw_fallbacks = _policy_values(anchor)
            if raw_allowed is not None:
                allowed = parse_tools_value(raw_allowed)
            if raw_fallbacks is not None:
                fallbacks = parse_fallbacks_value(raw_fallbacks) or {}
        if settings.allowed_tools is not None:
            allowed = list(settings.allowed_tools)
        if settings.fallbacks is not None:
            fallbacks = {k: list(v) for k, v in settings.fallbacks.items()}
        run.allowed_tools = allowed
        run.tool_fallbacks = fallbacks


# --- helpers ---------------------------------------------------------------------------------


def _up(node: _Node | None, pred: Any, limit: int) -> _Node | None:
    """The nearest node from `node` upwards (itself included) that satisfies `pred`."""
    steps = 0
    while node is not None and steps <= limit:
        if pred(node):
            return node
        node = node.parent
        steps += 1
    return None


class _Nearest:
    """The nearest node at or above a node whose id is in `marked`, memoised along the way:
    each node is walked once however deep the trace, and a parent loop cannot hang it."""

    def __init__(self, marked: set[int]) -> None:
        self.marked = marked
        self.memo: dict[int, _Node | None] = {}

    def __call__(self, node: _Node | None) -> _Node | None:
        path: list[_Node] = []
        found: _Node | None = None
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


def _depths(builds: list[_RunBuild]) -> dict[int, int]:
    """How deep each run is nested, memoised: linear however deep (a run tree is a tree:
    `guard.link` cut any parent loop)."""
    depths: dict[int, int] = {}
    for build in builds:
        path: list[_RunBuild] = []
        node: _RunBuild | None = build
        while node is not None and id(node) not in depths and len(path) <= len(builds):
            path.append(node)
            node = node.parent
        depth = depths.get(id(node), -1) if node is not None else -1
        for item in reversed(path):
            depth += 1
            depths[id(item)] = depth
    return depths


def _policy_values(node: _Node) -> tuple[Any, Any]:
    if node.dialect is not None:
        return node.dialect.policy_values(node.span)
    attrs = node.span.attributes
    return attrs.get("attest.allowed_tools"), attrs.get("attest.tool_fallbacks")


def _dedupe(calls: list[_Call]) -> list[_Call]:
    """One call seen by two spans (framework + MCP client, two instrumentations) counts once.

    Same call id, or same name and arguments with overlapping times (or one span inside the
    other): the earlier (outer) span stays, and takes what only the other one captured.
    """
    calls.sort(key=lambda c: c.key)
    kept: list[_Call] = []
    by_id: dict[str, _Call] = {}
    by_name: dict[str, list[_Call]] = {}
    for call in calls:
        twin = by_id.get(call.call_id) if call.call_id is not None else None
        name = call.name if isinstance(call.name, str) else repr(call.name)
        if twin is None:
            # Twins start close together: the latest few calls of the same name will do, and
            # keep this linear in a trace with 100 000 calls of one tool.
            for other in reversed(by_name.get(name, ())[-_TWIN_WINDOW:]):
                if other.end < call.start:
                    continue
                if other.name == call.name and _same_call(other, call):
                    twin = other
                    break
        if twin is None:
            kept.append(call)
            by_name.setdefault(name, []).append(call)
            if call.call_id is not None:
                by_id[call.call_id] = call
            continue
        _merge(twin, call)
    return kept


_TWIN_WINDOW = 64
"""How many earlier calls of the same tool `_dedupe` compares a call with."""


def _same_call(a: _Call, b: _Call) -> bool:
    overlap = b.start < a.end or (a.start == b.start and a.end == b.end)
    if not overlap:
        return False
    if a.args_captured and b.args_captured:
        return _canon(a.arguments) == _canon(b.arguments)
    return _inside(a.node, b.node)


def _inside(outer: _Node | None, inner: _Node | None) -> bool:
    """Whether `outer` is an ancestor of `inner`, at most 65 levels up (numbered trees)."""
    if outer is None or inner is None:
        return False
    entry, leave, depth = outer.place
    inner_entry, inner_leave, inner_depth = inner.place
    return entry < inner_entry and inner_leave <= leave and inner_depth - depth <= 65


def _canon(value: Any) -> str:
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    except (TypeError, ValueError):
        return repr(value)


def _merge(keep: _Call, other: _Call) -> None:
    if keep.call_id is None:
        keep.call_id = other.call_id
    if not keep.args_captured and other.args_captured:
        keep.arguments, keep.args_captured = other.arguments, True
    if not keep.output_captured and other.output_captured:
        keep.output, keep.output_captured = other.output, True
    if other.node is not None and other.node.span.status_code == STATUS_ERROR:
        keep.is_error = True
        if keep.error_text is None:
            keep.error_text = _status_text(other.node.span)


def _model_calls(models: list[_Node]) -> list[_ModelCall]:
    """Group model spans that are one call: a span inside another model span's time or tree,
    or with the same response id (two instrumentations of one client call)."""
    groups: list[_ModelCall] = []
    for node in models:  # sorted by start
        s = node.span
        response_id = s.attributes.get("gen_ai.response.id")
        if response_id is not None and not isinstance(response_id, str | int):
            response_id = repr(response_id)
        home = None
        for group in reversed(groups[-4:]):
            if (
                (group.start <= s.start_ns and s.end_ns <= group.end)
                or _inside(group.lead, node)
                or (response_id is not None and response_id in group.response_ids)
            ):
                home = group
                break
        if home is None:
            home = _ModelCall(node, [node], s.start_ns, s.end_ns)
            groups.append(home)
        else:
            home.members.append(node)
        if response_id is not None:
            home.response_ids.add(response_id)
    return groups


@dataclass(slots=True)
class _Request:
    """A tool call a model asked for: when (its model call's end), and which model call."""

    req: ToolRequest
    time: int
    seq: int
    model: _Node


def _take_request(call: _Call, req: ToolRequest) -> None:
    """A tool span is the execution of this request: it gets the id and what it lacks."""
    call.claimed = True
    if call.call_id is None:
        call.call_id = req.call_id
    if call.handoff_target is not None or call.name is None:
        call.name = req.name
    if not call.args_captured:
        call.arguments = req.arguments
        call.args_captured = True


def _pick_request(outputs: list[Message] | None, call: _Call, used: set[str]) -> ToolRequest | None:
    """The request in one model call's output that a tool span executed."""
    for msg in outputs or ():
        for req in msg.tool_calls:
            if req.call_id is not None and req.call_id in used:
                continue
            if call.call_id is not None:
                if req.call_id == call.call_id:
                    return req
            elif req.name == call.name or (
                call.handoff_target is not None
                and _looks_like_handoff(req.name, call.handoff_target)
            ):
                return req
    return None


def _collect_replies(msg: Message, replies: dict[str, ToolReply]) -> None:
    for reply in msg.tool_results:
        if reply.call_id is not None and captured(reply.content):
            replies.setdefault(reply.call_id, reply)


def _unclaimed(call: _Call) -> bool:
    return not call.claimed and call.call_id is None


def _claim_by_name(
    claimable: guard.Claimable, handoffs: list[_Call], req: ToolRequest, time: int
) -> _Call | None:
    """An id-less tool span for a request: same name, unclaimed, started after the model did.

    Handoff spans carry the target agent instead of the tool name the model used, so an
    unclaimed handoff span after the request takes a request that looks like a transfer.
    """
    found: _Call | None = claimable.first(req.name, time - _SKEW_NS)
    if found is not None:
        return found
    for call in handoffs:
        if call.claimed or call.handoff_target is None or call.call_id is not None:
            continue
        if call.start >= time - _SKEW_NS and _looks_like_handoff(req.name, call.handoff_target):
            return call
    return None


_SKEW_NS = 50_000_000
"""Clock skew tolerated between a model span's end and the tool span it asked for."""


def _looks_like_handoff(tool: str, target: str) -> bool:
    tool_key = _slug(tool)
    return tool_key.startswith("transfer_to") or _slug(target) in tool_key


def _slug(text: str) -> str:
    return re.sub(r"\W+", "_", text.strip().lower()).strip("_")


def _started(req: ToolRequest, direct: list[_RunBuild]) -> _RunBuild | None:
    """The nested run (started without a tool span) that a request names, if any."""
    key = _slug(req.name)
    for nested in direct:
        if nested.run is not None and nested.run.agent and _slug(nested.run.agent) in key:
            return nested
    return None


def _status_text(span: Span) -> str | None:
    return span.status_message or event_exception_text(span)


def _error_fields(call: _Call) -> None:
    """ERROR status sets is_error; other statuses leave it to the output (rules.md)."""
    node = call.node
    if node is not None and node.span.status_code == STATUS_ERROR:
        call.is_error = True
    if call.is_error:
        text = output_text(call.output).strip() if call.output_captured else ""
        if text:
            call.error_text = text
        elif node is not None:
            call.error_text = call.error_text or _status_text(node.span)


def _to_tool_call(call: _Call) -> ToolCall:
    return ToolCall(
        name=call.name or "unknown",
        arguments=json_safe(call.arguments) if call.args_captured else None,
        output=json_safe(call.output) if call.output_captured else None,
        is_error=call.is_error,
        output_captured=call.output_captured,
        error_text=call.error_text,
        span_id=call.span_id,
        call_id=call.call_id,
    )
