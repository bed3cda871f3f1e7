"""Spans to runs: the entry point of the assembler, and what each run was asked and answered.

    spans ──► per trace: detect each span (dialect, role), link the tree   (this module)
          ──► which spans make runs, and which spans belong to each         (`tree`)
          ──► per run, deepest first: tool spans deduplicated and matched
              with the model's requests and replies                         (`matching`)
          ──► task, answer, system prompt, offered tools; policy            (this module,
                                                                             `config`)

A nested agent (agent used as a tool, sub-agent, handoff target) is its own run. The tool
span that invoked it stays a call of the parent, and when that span did not capture a result
the nested run's final answer is its result; a sub-agent started without a tool span is a
call of the parent when the parent's model asked for it by name. A handoff passes control
instead of calling, so it is no call at all (the labels of the OpenAI Agents fixtures say the
same): its span only claims the model's transfer request, so that request is not taken for a
tool call without a span.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from attest_otel.adapt import gaps, guard
from attest_otel.adapt.base import (
    ANSWER,
    SYSTEM,
    TASK,
    TOOLS,
    Dialect,
    PolicyBook,
    Role,
    ToolInfo,
)
from attest_otel.adapt.decorated import read_decorated
from attest_otel.adapt.detect import detect
from attest_otel.adapt.explain import SpanReading, readings
from attest_otel.adapt.generic import GENERIC
from attest_otel.adapt.identity import own_name, sibling_call, step_models
from attest_otel.adapt.matching import (
    Call,
    ModelCall,
    answer_text,
    dedupe,
    error_fields,
    fold_lifecycle,
    fold_requests,
    model_calls,
    to_tool_call,
)
from attest_otel.adapt.mixed import read_unclaimed
from attest_otel.adapt.span_policy import from_span
from attest_otel.adapt.tree import CALLS, Node, RunBuild, depths, run_builds, up
from attest_otel.adapt.witness import from_models
from attest_otel.model import LogRecord, Run, Span, Step

__all__ = ["TraceRuns", "runs_from_spans"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class TraceRuns:
    """The runs rebuilt from one trace, and every dialect its spans spoke (first seen first)."""

    trace_id: str
    runs: list[Run]
    dialects: list[str]
    anomalies: dict[str, int] = field(default_factory=dict)
    """What was wrong with the trace and how it was handled, by kind (see `guard`): e.g.
    `{"duplicate_span_ids": 2, "parent_cycles": 1}`. Empty for a sound trace."""
    spans: list[SpanReading] | None = None
    """With `explain=True`: what each span was read as and became (`explain`)."""


def runs_from_spans(
    spans: Sequence[Span],
    logs: Sequence[LogRecord] = (),
    *,
    policy: PolicyBook | None = None,
    allowed_tools: list[str] | None = None,
    fallbacks: dict[str, list[str]] | None = None,
    dialects: Sequence[Dialect] = (),
    hydrate: Callable[[Span], Span] | None = None,
    transport: Callable[[Span], bool] | None = None,
    explain: bool = False,
) -> list[TraceRuns]:
    """Runs per trace, traces in order of first appearance, runs in start order.

    `allowed_tools` / `fallbacks` are one-off overrides (CLI flags) that win over the policy
    file and the span attributes; None (or an empty `fallbacks`) leaves those in charge.
    `transport` tells a skeleton known to be a transport span without hydrating it
    (`ingest.decode.transport_skeleton`).
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
    settings = _Settings(
        policy,
        allowed_tools,
        fallbacks or None,
        tuple(dialects),
        hydrate,
        transport,
        explain,
    )
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


@dataclass(slots=True)
class _Settings:
    policy: PolicyBook | None
    allowed_tools: list[str] | None
    fallbacks: dict[str, list[str]] | None
    dialects: tuple[Dialect, ...] = ()
    """Dialects the user declared (`declared`), asked before the built-in ones."""
    hydrate: Callable[[Span], Span] | None = None
    """Fills in a lazily decoded span's attributes (`ingest.decode.hydrate`): the generic
    reader and declared dialects need keys the decoders' GenAI test does not keep."""
    transport: Callable[[Span], bool] | None = None
    """Whether a skeleton's keys, as its decoder saw them, mark a transport span, which the
    generic reader never claims: such a span is hydrated only when its trace is read."""
    explain: bool = False


_RUN_MAKERS = (Role.AGENT, Role.TOOL, Role.HANDOFF)

if tuple(f.name for f in fields(Step))[:1] != ("tool_call",):  # pragma: no cover - a guard
    raise ImportError("Step's first field is no longer tool_call: `_assemble` builds it so")

ANSWER_TOOLS = gaps.ANSWER_TOOLS
"""Tools a framework gives the model to deliver its answer (smolagents' `final_answer`): the
call is the answer, not a use of a tool, and no policy may call it disallowed."""


def _answer_tool(calls: list[Call]) -> Call | None:
    """Drops answer-tool calls from `calls` (in place); returns the last one."""
    found = [c for c in calls if c.name in ANSWER_TOOLS]
    for call in found:
        calls.remove(call)
    return found[-1] if found else None


_FINISH_STEPS = frozenset(("finish",))
"""The last step of a ReAct loop, recorded as a tool (DSPy's `finish`, called with no
arguments): the loop ending, not a use of a tool, so no policy may call it disallowed."""


def _drop_finish(calls: list[Call]) -> None:
    """Drops the run's last call when it is the loop's finish step (issue 25, class 4); a
    `finish` with arguments, or before other calls, is some tool of that name."""
    if calls and calls[-1].name in _FINISH_STEPS and not calls[-1].arguments:
        calls.pop()


_REPR = re.compile(r"^[A-Z][A-Za-z0-9_]*\((?:[a-z_]+=|\))")
_STATE_AGENT = re.compile(r"""\b(?:current_)?agent_name=['"]([\w.-]{1,128})['"]""")


_ANSWER_MARKS = ("answer:", "final answer:")


def strip_react(text: str) -> str:
    """A ReAct model's last output is `Thought: ...\nAnswer: <answer>`: the answer is what
    follows the last line that starts (after blanks) with `Answer:` or `Final Answer:`, any
    case; any other text is kept whole.

    Read line by line, each character once: the regular expression this replaces
    (`(?:^|\n)\\s*(?:Final )?Answer:\\s*`) backtracked over every run of blank lines and took
    minutes on one hostile answer (docs/hostile-input.md, "Grading budget")."""
    if not text.lstrip().startswith("Thought:"):
        return text
    lines = text.split("\n")
    offset = len(text) + 1
    for line in reversed(lines[1:]):  # the first line is the `Thought:` one
        offset -= len(line) + 1
        body = line.lstrip()
        head = body[:13].lower()
        for mark in _ANSWER_MARKS:
            if head.startswith(mark):
                start = offset + (len(line) - len(body)) + len(mark)
                return text[start:].lstrip()
    return text


def looks_like_repr(text: str) -> bool:
    """A Python repr of framework objects (`StopEvent(result=AgentOutput(...`), which some
    instrumentations record as a span's output: not text anybody was given."""
    return bool(_REPR.match(text.lstrip()))


def _any_content(run: Run) -> bool:
    """Whether the trace recorded any of the run's content: a task, an answer, or a call's
    arguments or result. None of them means capture was off (the default of most
    instrumentations), not a run that said nothing: the grade must say so."""
    if run.task or run.final_answer is not None:
        return True
    return any(call.output_captured or call.arguments is not None for _, call in run.tool_calls)


def _implicit(node: Node) -> bool:
    """An agent the assembler inferred (`tree`), not one its dialect marks."""
    return node.dialect is not None and node.dialect.detect(node.span) is not Role.AGENT


def _wrapper_name(node: Node) -> str | None:
    """A nameless agent span takes the name of the agent span wrapping it (a framework's
    component span around its agent loop, a named agent around per-turn agent spans)."""
    parent = node.parent
    for _ in range(8):
        if parent is None:
            return None
        if parent.role is Role.AGENT and parent.dialect is not None:
            name = parent.dialect.agent_name(parent.span)
            if name:
                return name
        parent = parent.parent
    return None


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
        nodes: dict[str, Node] = {}
        dialects: list[str] = []
        duplicates = unreadable = 0
        declared = self.settings.dialects
        hydrate = self.settings.hydrate if declared else None
        makes_runs = False
        for span in self.spans:
            if span.span_id in nodes:
                duplicates += 1  # the same span exported twice
                continue
            try:
                if hydrate is not None:
                    hydrate(span)
                found = detect(span, declared)
            except Exception:  # a value of a type no convention uses
                log.debug("could not classify span %s", span.span_id, exc_info=True)
                found = None
                unreadable += 1
            nodes[span.span_id] = Node(span, found)
            if found is not None:
                # What the passes over the nodes below asked, read as each node is made.
                makes_runs = makes_runs or found[1] in _RUN_MAKERS
                if found[0].name not in dialects:
                    dialects.append(found[0].name)
        generic = not makes_runs
        if generic:
            later: list[Node] = []
            unreadable += self._read_generic(nodes, later)
            dialects = []  # in span order again: the generic reader claimed spans in between
            for node in nodes.values():
                if node.dialect is not None and node.dialect.name not in dialects:
                    dialects.append(node.dialect.name)
            if dialects and later:  # the trace is read: its spans as they always were
                unreadable += self._hydrate(later)
        if not dialects:
            empty = TraceRuns(self.trace_id, [], [])
            if self.settings.explain:
                empty.spans = readings(nodes, [])
            return empty
        anomalies: dict[str, int] = {}
        if duplicates:
            anomalies[guard.DUPLICATE_SPAN_IDS] = duplicates
        if unreadable:
            anomalies[guard.UNREADABLE_SPANS] = unreadable
        roots = guard.link(nodes, anomalies)
        if not generic:
            taken, failed = read_unclaimed(nodes.values(), self.settings.hydrate)
            if failed:
                anomalies[guard.UNREADABLE_SPANS] = unreadable + failed
            if taken and GENERIC.name not in dialects:
                dialects.append(GENERIC.name)
        guard.number(nodes.values(), roots)
        if (
            generic
            and not any(n.role is Role.AGENT for n in nodes.values())
            and read_decorated(nodes.values(), self.logs)
            and GENERIC.name not in dialects
        ):
            dialects.append(GENERIC.name)
        skewed = guard.clock_skew(self.spans)
        if skewed:
            anomalies[guard.CLOCK_SKEW] = skewed
        guard.report(self.trace_id, anomalies)
        self.nodes = nodes
        builds = run_builds(nodes, roots)
        self.survey = gaps.survey(nodes.values(), builds, self.settings.hydrate)
        depth = depths(builds)
        for build in sorted(builds, key=lambda b: depth[id(b)], reverse=True):
            build.run = self._assemble(build)
        builds.sort(key=lambda b: b.root.key)
        runs = [b.run for b in builds if b.run is not None]
        traced = TraceRuns(self.trace_id, runs, dialects, anomalies)
        if self.settings.explain:
            traced.spans = readings(nodes, builds)
        return traced

    def _state_name(self, root: Node) -> str | None:
        """The agent of a run no span marks as one, where the framework's recorded state
        names it (LlamaIndex: `current_agent_name='billing_agent'` in its steps' inputs)."""
        for node in self.nodes.values():
            if node.parent is not root:
                continue
            value = node.span.attributes.get("input.value")
            if isinstance(value, str):
                found = _STATE_AGENT.search(value)
                if found:
                    return found.group(1)
        return None

    def _read_generic(self, nodes: dict[str, Node], later: list[Node]) -> int:
        """The generic reader's pass over spans no dialect claimed, in a trace where no
        dialect found an agent, tool or handoff span; returns how many it could not read.

        A skeleton its decoder saw a transport key in is not hydrated but put in `later`:
        `detect` says None of it whatever its values, and most such traces (plain HTTP and
        database traces) have nothing to read, so their spans are never hydrated at all."""
        hydrate = self.settings.hydrate
        transport = self.settings.transport if hydrate is not None else None
        failed = 0
        for node in nodes.values():
            if node.dialect is not None:
                continue
            if transport is not None and transport(node.span):
                later.append(node)
                continue
            try:
                if hydrate is not None:
                    hydrate(node.span)
                role = GENERIC.detect(node.span)
            except Exception:
                log.debug("generic reader: span %s", node.span.span_id, exc_info=True)
                failed += 1
                continue
            if role is not None:
                node.dialect, node.role = GENERIC, role
        return failed

    def _hydrate(self, nodes: list[Node]) -> int:
        """`nodes`' spans hydrated, as `_read_generic` would have; how many failed."""
        hydrate = self.settings.hydrate
        assert hydrate is not None
        failed = 0
        for node in nodes:
            try:
                hydrate(node.span)
            except Exception:
                log.debug("generic reader: span %s", node.span.span_id, exc_info=True)
                failed += 1
        return failed

    def _assemble(self, build: RunBuild) -> Run:
        calls: list[Call] = []
        models: list[Node] = []
        for seq, node in enumerate(sorted(build.members, key=lambda n: n.key)):
            if node.role is Role.MODEL:
                models.append(node)
            else:
                calls.append(self._span_call(node, seq))
        calls = fold_lifecycle(fold_requests(dedupe(calls)))
        groups = model_calls(step_models(models, [c.node for c in calls if c.node is not None]))

        invoked = self._invocations(build)
        for call in calls:
            nested = invoked.get(id(call.node)) if call.node is not None else None
            answer = nested.run.final_answer if nested is not None and nested.run else None
            if answer is not None and not call.output_captured:
                call.output = answer
                call.output_captured = True
        invoked_ids = {id(n) for n in invoked.values()}
        direct = [n for n in build.nested if id(n) not in invoked_ids]
        if groups:
            from_models(self.logs, build, calls, groups, direct)
        read = list(calls)  # handoffs and answer tools too: they account for their requests
        # A handoff passes control on; it is not a tool call (it only claimed its request).
        calls = [c for c in calls if c.node is None or c.node.role is not Role.HANDOFF]
        answer_call = _answer_tool(calls)
        for call in calls:
            error_fields(call)
        calls.sort(key=lambda c: c.key)
        _drop_finish(calls)

        run = Run(trace_id=self.trace_id, span_id=build.root.span.span_id)
        anchor = build.node or (build.root if build.root.dialect is not None else None)
        if anchor is not None and anchor.dialect is not None:
            run.agent = anchor.dialect.agent_name(anchor.span) or _wrapper_name(anchor)
            if run.agent:
                run.agent = own_name(build, run.agent)
        if build.node is None or _implicit(build.node):
            run.agent = self._state_name(build.root) or run.agent
        self._describe(run, anchor, groups, build.last)
        if answer_call is not None and run.final_answer is None:
            run.final_answer = answer_text(answer_call)
        run.steps = [Step(to_tool_call(c)) for c in calls]  # by position: see the guard above
        run.content_captured = _any_content(run)
        self._apply_policy(run, anchor)
        run.gaps = gaps.find(build, read, groups, self.logs, self.survey)
        return run

    def _span_call(self, node: Node, seq: int) -> Call:
        span = node.span
        assert node.dialect is not None
        try:
            info = node.dialect.tool(span)
        except Exception:
            log.warning("could not read tool span %s", span.span_id, exc_info=True)
            info = ToolInfo(name=span.name)
        handoff = node.role is Role.HANDOFF
        # By position, in `Call`'s field order (checked at import by `matching`): keywords
        # cost more than the rest of this function, once per tool span.
        return Call(
            info.name if handoff or node.dialect is GENERIC else info.name or span.name,
            info.call_id,
            info.arguments,
            info.arguments_captured,
            info.output,
            info.output_captured,
            span.start_ns,
            span.end_ns,
            span.span_id,
            seq,
            node,
            info.is_error,
            info.error_text,
            info.handoff_target if handoff else None,
        )

    def _invocations(self, build: RunBuild) -> dict[int, RunBuild]:
        """Tool span (by id) of this run -> the nested run it invoked: the tool span above
        the nested agent's, else the one beside it that was open when it started."""
        out: dict[int, RunBuild] = {}
        beside: list[RunBuild] = []
        for nested in build.nested:
            assert nested.node is not None
            tool = up(
                nested.node.parent,
                lambda n: n.role in CALLS or n is build.root,
                len(self.spans),
            )
            if tool is not None and tool.role in CALLS:
                out[id(tool)] = nested
            else:
                beside.append(nested)
        if beside:
            tools: dict[int, list[Node]] = {}
            for member in build.members:
                if member.role is Role.TOOL and member.parent is not None:
                    tools.setdefault(id(member.parent), []).append(member)
            for nested in beside:
                assert nested.node is not None
                near = tools.get(id(nested.node.parent))
                found = sibling_call(nested.node, near, set(out)) if near else None
                if found is not None:
                    out[id(found)] = nested
        return out

    def _describe(
        self, run: Run, anchor: Node | None, groups: list[ModelCall], last: Node | None = None
    ) -> None:
        """Task, answer, system prompt and offered tools: the run span's, else its models'.
        A run of turns (`tree._conversations`) answers in its last turn."""
        logs = self.logs
        task = answer = system = None
        tools: list[dict[str, Any]] = []
        if anchor is not None:
            describe = frozenset((TASK, ANSWER, SYSTEM, TOOLS))
            task = anchor.part(TASK, logs, describe)
            answer = (last or anchor).part(ANSWER, logs, describe)
            system = anchor.part(SYSTEM, logs, describe)
            tools = list(anchor.part(TOOLS, logs, describe) or ())
        if groups:
            first = frozenset(
                part
                for part, value in ((TASK, task or None), (SYSTEM, system), (TOOLS, tools or None))
                if value is None
            )
            if not task or looks_like_repr(task):
                # A preparation step recorded as a model span may hold no readable text.
                for group in groups[:3]:
                    found = group.part(TASK, logs, first)
                    if found and not looks_like_repr(found):
                        task = found
                        break
            if system is None:
                system = groups[0].part(SYSTEM, logs, first)
            if not tools:
                tools = list(groups[0].part(TOOLS, logs, first) or ())
            if answer is None or looks_like_repr(answer):
                answer = groups[-1].part(ANSWER, logs) or answer
        run.task = (task or "").rstrip()
        run.final_answer = strip_react(answer).rstrip() if answer is not None else None
        run.system_prompt = system
        run.tool_definitions = tools

    def _apply_policy(self, run: Run, anchor: Node | None) -> None:
        s = self.settings
        raw: tuple[Any, Any] = (None, None)
        if anchor is not None and anchor.dialect is not None:
            raw = anchor.dialect.policy_values(anchor.span)
        elif anchor is not None:
            attrs = anchor.span.attributes
            raw = attrs.get("attest.allowed_tools"), attrs.get("attest.tool_fallbacks")
        if s.policy is None:
            run.allowed_tools, run.tool_fallbacks = from_span(raw, s.allowed_tools, s.fallbacks)
        else:
            run.allowed_tools, run.tool_fallbacks = s.policy.resolve(
                run.agent, raw, s.allowed_tools, s.fallbacks
            )
