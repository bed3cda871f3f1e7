"""Calls: tool spans deduplicated, and matched with the model's requests and replies.

A tool span says what ran; the model calls around it say what was asked for (the call id, the
arguments) and what the model was told (the result). Requests come from each model call's
output; a result reaches the model only in a later call's input, which repeats the whole
history, so inputs are read newest first and only until every wanted result is found. Calls
that no span recorded are found in the requests alone.
"""

from __future__ import annotations

import bisect
import json
import re
from dataclasses import dataclass, field, fields
from typing import Any

from attest_otel.adapt import guard
from attest_otel.adapt.base import (
    INPUT,
    OUTPUT,
    Message,
    ToolReply,
    ToolRequest,
    Want,
    captured,
    event_exception_text,
)
from attest_otel.adapt.tree import Logs, Node, RunBuild, inside
from attest_otel.model import STATUS_ERROR, Span, ToolCall, json_safe, output_text


@dataclass(slots=True)
class Call:
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
    node: Node | None = None
    is_error: bool | None = None
    error_text: str | None = None
    handoff_target: str | None = None
    claimed: bool = False

    @property
    def key(self) -> tuple[int, int, str, int]:
        return (self.start, self.end, self.span_id or "", self.seq)


@dataclass(slots=True)
class ModelCall:
    """One model call, possibly seen by several spans (instrumentation + client)."""

    lead: Node
    members: list[Node] = field(default_factory=list)
    start: int = 0
    end: int = 0
    response_ids: set[str | int] = field(default_factory=set)

    def part(self, name: str, logs: Logs, also: Want = frozenset()) -> Any:
        """The part from the first member that has it: a contentless client span yields."""
        for node in self.members:
            value = node.part(name, logs, also)
            if value is not None:
                return value
        return None


def from_models(
    logs: Logs,
    build: RunBuild,
    calls: list[Call],
    groups: list[ModelCall],
    direct: list[RunBuild],
) -> None:
    """Fill what tool spans lack, and find calls without spans, from the model messages.

    Requests come from each model call's output (small); a result reaches the model only
    in a later call's input, which repeats the whole history, so inputs are read newest
    first and only until every wanted result is found.
    """
    if calls and not direct and _fill_nearby(logs, calls, groups):
        return
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
        prev: ModelCall | None = None
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
                Call(
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
                Call(
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


def _fill_nearby(logs: Logs, calls: list[Call], groups: list[ModelCall]) -> bool:
    """The common case, cheaply: a tool span lacking its id, arguments or result finds
    them in the model call just before it (the request) and just after it (the result).

    True when every call that lacked something got it; otherwise the caller falls back
    to reading every model call.
    """
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


def dedupe(calls: list[Call]) -> list[Call]:
    """One call seen by two spans (framework + MCP client, two instrumentations) counts once.

    Same call id, or same name and arguments with overlapping times (or one span inside the
    other): the earlier (outer) span stays, and takes what only the other one captured.
    """
    calls.sort(key=lambda c: c.key)
    kept: list[Call] = []
    by_id: dict[str, Call] = {}
    by_name: dict[str, list[Call]] = {}
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
"""How many earlier calls of the same tool `dedupe` compares a call with."""


def _same_call(a: Call, b: Call) -> bool:
    overlap = b.start < a.end or (a.start == b.start and a.end == b.end)
    if not overlap:
        return False
    if a.args_captured and b.args_captured:
        return _canon(a.arguments) == _canon(b.arguments)
    return inside(a.node, b.node)


def _canon(value: Any) -> str:
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    except (TypeError, ValueError):
        return repr(value)


def _merge(keep: Call, other: Call) -> None:
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


def model_calls(models: list[Node]) -> list[ModelCall]:
    """Group model spans that are one call: a span inside another model span's time or tree,
    or with the same response id (two instrumentations of one client call)."""
    groups: list[ModelCall] = []
    for node in models:  # sorted by start
        s = node.span
        response_id = s.attributes.get("gen_ai.response.id")
        if response_id is not None and not isinstance(response_id, str | int):
            response_id = repr(response_id)
        home = None
        for group in reversed(groups[-4:]):
            if (
                (group.start <= s.start_ns and s.end_ns <= group.end)
                or inside(group.lead, node)
                or (response_id is not None and response_id in group.response_ids)
            ):
                home = group
                break
        if home is None:
            home = ModelCall(node, [node], s.start_ns, s.end_ns)
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
    model: Node


def _take_request(call: Call, req: ToolRequest) -> None:
    """A tool span is the execution of this request: it gets the id and what it lacks."""
    call.claimed = True
    if call.call_id is None:
        call.call_id = req.call_id
    if call.handoff_target is not None or call.name is None:
        call.name = req.name
    if not call.args_captured:
        call.arguments = req.arguments
        call.args_captured = True


def _pick_request(outputs: list[Message] | None, call: Call, used: set[str]) -> ToolRequest | None:
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
                and looks_like_handoff(req.name, call.handoff_target)
            ):
                return req
    return None


def _collect_replies(msg: Message, replies: dict[str, ToolReply]) -> None:
    for reply in msg.tool_results:
        if reply.call_id is not None and captured(reply.content):
            replies.setdefault(reply.call_id, reply)


def _unclaimed(call: Call) -> bool:
    return not call.claimed and call.call_id is None


def _claim_by_name(
    claimable: guard.Claimable, handoffs: list[Call], req: ToolRequest, time: int
) -> Call | None:
    """An id-less tool span for a request: same name, unclaimed, started after the model did.

    Handoff spans carry the target agent instead of the tool name the model used, so an
    unclaimed handoff span after the request takes a request that looks like a transfer.
    """
    found: Call | None = claimable.first(req.name, time - _SKEW_NS)
    if found is not None:
        return found
    for call in handoffs:
        if call.claimed or call.handoff_target is None or call.call_id is not None:
            continue
        if call.start >= time - _SKEW_NS and looks_like_handoff(req.name, call.handoff_target):
            return call
    return None


_SKEW_NS = 50_000_000
"""Clock skew tolerated between a model span's end and the tool span it asked for."""


def looks_like_handoff(tool: str, target: str) -> bool:
    tool_key = _slug(tool)
    return tool_key.startswith("transfer_to") or _slug(target) in tool_key


def _slug(text: str) -> str:
    return re.sub(r"\W+", "_", text.strip().lower()).strip("_")


def _started(req: ToolRequest, direct: list[RunBuild]) -> RunBuild | None:
    """The nested run (started without a tool span) that a request names, if any."""
    key = _slug(req.name)
    for nested in direct:
        if nested.run is not None and nested.run.agent and _slug(nested.run.agent) in key:
            return nested
    return None


def _status_text(span: Span) -> str | None:
    return span.status_message or event_exception_text(span)


def error_fields(call: Call) -> None:
    """ERROR status sets is_error; other statuses leave it to the output text (docs/rules.md,
    point 2)."""
    node = call.node
    if node is not None and node.span.status_code == STATUS_ERROR:
        call.is_error = True
    if call.is_error:
        text = output_text(call.output).strip() if call.output_captured else ""
        if text:
            call.error_text = text
        elif node is not None:
            call.error_text = call.error_text or _status_text(node.span)


# `Call` and `ToolCall` are built by position once per tool call (`runs._span_call`,
# `to_tool_call`): keywords cost about as much as the rest of building them. A reordered
# field must fail here, at import, and not shuffle values silently.
_CALL_FIELDS = (
    "name",
    "call_id",
    "arguments",
    "args_captured",
    "output",
    "output_captured",
    "start",
    "end",
    "span_id",
    "seq",
    "node",
    "is_error",
    "error_text",
    "handoff_target",
    "claimed",
)
_TOOL_CALL_FIELDS = (
    "name",
    "arguments",
    "output",
    "is_error",
    "output_captured",
    "error_text",
    "span_id",
    "call_id",
)
if (
    tuple(f.name for f in fields(Call)) != _CALL_FIELDS
    or tuple(f.name for f in fields(ToolCall)) != _TOOL_CALL_FIELDS
):  # pragma: no cover - a guard for whoever reorders them
    raise ImportError("Call/ToolCall fields changed: update the calls that build them by position")


def to_tool_call(call: Call) -> ToolCall:
    node = call.node
    return ToolCall(  # by position: see _TOOL_CALL_FIELDS
        call.name or (node.span.name if node is not None else "unknown"),
        json_safe(call.arguments) if call.args_captured else None,
        json_safe(call.output) if call.output_captured else None,
        call.is_error,
        call.output_captured,
        call.error_text,
        call.span_id,
        call.call_id,
    )


def answer_text(call: Call) -> str | None:
    """The answer an answer tool delivered: its result, else its `answer` argument."""
    if call.output_captured and isinstance(call.output, str) and call.output:
        return call.output
    args = call.arguments
    if isinstance(args, dict):
        value = args.get("answer")
        return value if isinstance(value, str) else None
    return args if isinstance(args, str) else None
