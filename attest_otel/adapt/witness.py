"""The model's conversation as a second witness of the calls (issue 25).

A tool span says what ran; the model calls around it say what was asked for (the call id, the
arguments) and what the model was told (the result, and whether it was an error). Requests
come from each model call's output; a result reaches the model only in a later call's input,
which repeats the whole history, so inputs are read newest first and only until every wanted
result is found. The two witnesses are merged so that a call is counted once: a span the
conversation does not know is still a call, a request no span shows is a call once the model
was given its result, and an error either witness shows is an error.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import KeysView
from dataclasses import dataclass, replace
from typing import Any

from attest_otel.adapt import guard
from attest_otel.adapt.base import (
    ANSWER,
    INPUT,
    OUTPUT,
    Message,
    Role,
    ToolReply,
    ToolRequest,
    captured,
    loads_lenient,
    python_literal,
)
from attest_otel.adapt.matching import Call, ModelCall
from attest_otel.adapt.tree import Logs, Node, RunBuild
from attest_otel.model import STATUS_ERROR

__all__ = ["from_models", "looks_like_handoff"]

_ANSWER = frozenset((ANSWER,))


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
    if (
        calls
        and not direct
        and _fill_nearby(logs, calls, groups)
        and _accounted(logs, calls, groups)
    ):
        _flag_errors(logs, calls, groups)
        _disagreements(calls, _requests_of(logs, groups))
        return
    requests: list[_Request] = []
    seen: set[str] = set()
    reused: set[str] = set()
    outputs_captured = True
    replies: dict[str, ToolReply] = {}
    for group in groups:
        out = group.part(OUTPUT, logs)
        if out is None:
            outputs_captured = False
            continue
        for msg in out:
            # One model span around a whole loop records the results it was given in its
            # output too (issue 25, class 6): nothing later repeats them.
            _collect_replies(msg, replies)
            for req in msg.tool_calls:
                if req.call_id is not None:
                    if req.call_id in seen:
                        again = _asked_again(group, logs, req, seen)
                        if again is None:
                            continue  # the same request seen by another span of the call
                        reused.add(req.call_id)
                        req = again
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
    if not requests and build.node is None and groups:
        _history_requests(groups[-1], logs, seen, requests)
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
    heard: set[int] = set()
    asked = {r.req.call_id for r in requests if r.req.call_id is not None}
    """Positions in `calls` of requests no span accounts for, in a run with tool spans."""
    claimable = guard.Claimable(_unclaimed)
    for call in calls:
        claimable.add(call)
    handoffs = [c for c in calls if c.handoff_target is not None]
    for request in requests:
        req = request.req
        target = by_id.get(req.call_id) if req.call_id is not None else None
        if target is None:
            target = _claim_by_name(claimable, handoffs, req, request.time)
        if target is None and had_spans:
            target = _stray(calls, req, asked)
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
        else:
            # A call the spans do not show (none at all, or one never ended): the model asked
            # for it; with spans elsewhere in the run it counts once its result is found.
            if had_spans:
                heard.add(len(calls))
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
        for msg in _numbered(group.part(INPUT, logs), reused):
            _collect_replies(msg, replies)
            for reply in msg.tool_results:  # not `wanted -= replies.keys()`: a copy
                if reply.call_id in replies:
                    wanted.discard(reply.call_id)
    if wanted and build.node is not None:
        for msg in build.node.part(INPUT, logs) or ():
            _collect_replies(msg, replies)
    if groups and _may_flag(groups[-1], logs):
        for msg in _numbered(groups[-1].part(INPUT, logs), reused):
            _collect_replies(msg, replies)
    for call in calls:
        if call.call_id is None:
            continue
        answered = replies.get(call.call_id)
        if answered is None:
            continue
        if not call.output_captured:
            call.output = answered.content
            call.output_captured = True
        if answered.is_error:
            _told_error(call)  # an error either witness shows is an error
    if heard:
        unanswered = {i for i in heard if not calls[i].output_captured}
        calls[:] = [c for i, c in enumerate(calls) if i not in unanswered]
    if outputs_captured:
        _disagreements(calls, [r.req for r in requests])


def _asked_again(
    group: ModelCall, logs: Logs, req: ToolRequest, seen: set[str]
) -> ToolRequest | None:
    """A call id asked for again after the model was given its result is a new call: an
    instrumentation that makes ids up per message (`<tool>_0`, google-genai's) repeats them
    across the conversation (issue 25, class 1). It becomes the id's n-th use, `id~n`, as
    `_numbered` numbers the history. None: the model was not told about that id yet, so this
    is the same request seen by another span of the same model call."""
    told = sum(
        1
        for msg in group.part(INPUT, logs) or ()
        for reply in msg.tool_results
        if reply.call_id == req.call_id
    )
    nth = _nth_id(str(req.call_id), told + 1)
    if told == 0 or nth in seen:
        return None
    return ToolRequest(nth, req.name, req.arguments)


def _nth_id(call_id: str, nth: int) -> str:
    return call_id if nth == 1 else f"{call_id}~{nth}"


def _numbered(history: list[Message] | None, reused: set[str]) -> list[Message]:
    """The history with each reused id's n-th request and n-th result as `id~n`."""
    if not history or not reused:
        return history or []
    asked: dict[str, int] = {}
    told: dict[str, int] = {}
    out = []
    for msg in history:
        if not any(r.call_id in reused for r in msg.tool_calls) and not any(
            r.call_id in reused for r in msg.tool_results
        ):
            out.append(msg)
            continue
        out.append(
            replace(
                msg,
                tool_calls=[
                    replace(r, call_id=_count(r.call_id, asked)) if r.call_id in reused else r
                    for r in msg.tool_calls
                ],
                tool_results=[
                    replace(r, call_id=_count(r.call_id, told)) if r.call_id in reused else r
                    for r in msg.tool_results
                ],
            )
        )
    return out


def _count(call_id: str | None, counts: dict[str, int]) -> str:
    key = str(call_id)
    counts[key] = counts.get(key, 0) + 1
    return _nth_id(key, counts[key])


def _history_requests(
    newest: ModelCall, logs: Logs, seen: set[str], requests: list[_Request]
) -> None:
    """Requests only in the newest model call's history: one model span stands for a whole
    multi-step run (a client that writes each request onto the caller's span, the last one
    winning), so no output names the calls the history shows. Only the history after the
    last user message is this run's: what comes before it belongs to earlier turns of the
    conversation, graded with those turns."""
    history = newest.part(INPUT, logs) or []
    start = max((i + 1 for i, m in enumerate(history) if m.role == "user"), default=0)
    for msg in history[start:]:
        if msg.role != "assistant":
            continue
        for req in msg.tool_calls:
            if req.call_id is None or req.call_id in seen:
                continue  # without an id a request cannot be told from one already read
            seen.add(req.call_id)
            requests.append(_Request(req, newest.start, len(requests), newest.lead))


def _stray(calls: list[Call], req: ToolRequest, asked: set[str]) -> Call | None:
    """A span of the requested tool whose own call id no request knows: the witnesses
    disagree on the id, not on the call, so the span answers the request."""
    for call in calls:
        if (
            not call.claimed
            and call.name == req.name
            and call.call_id is not None
            and call.call_id not in asked
        ):
            return call
    return None


def _accounted(logs: Logs, calls: list[Call], groups: list[ModelCall]) -> bool:
    """Whether every tool call the model asked for has a span: by call id, else by name and
    count among the spans without one. Requests are small: this reads each model call's
    output only."""
    ids = {c.call_id for c in calls if c.call_id is not None}
    names: dict[str, int] = {}
    for call in calls:
        if call.call_id is None and isinstance(call.name, str):
            names[call.name] = names.get(call.name, 0) + 1
    last = groups[-1]
    for group in groups:
        # The last reply is the run's answer too (`runs._describe`): one parse for both.
        for msg in group.part(OUTPUT, logs, _ANSWER if group is last else frozenset()) or ():
            for req in msg.tool_calls:
                if req.call_id is not None and req.call_id in ids:
                    continue
                left = names.get(req.name, 0)
                if left <= 0:
                    return False
                names[req.name] = left - 1
    return True


def _flag_errors(logs: Logs, calls: list[Call], groups: list[ModelCall]) -> None:
    """The results the model was given, flagged as errors (`is_error` on a tool-result
    block), mark their calls: the newest request repeats the whole history."""
    if not any(c.call_id is not None and not c.is_error for c in calls):
        return
    if not _may_flag(groups[-1], logs):
        return
    replies: dict[str, ToolReply] = {}
    for msg in groups[-1].part(INPUT, logs) or ():
        _collect_replies(msg, replies)
    for call in calls:
        if call.call_id is not None:
            reply = replies.get(call.call_id)
            if reply is not None and reply.is_error:
                _told_error(call)


_FLAG_MARKS = ("is_error", '"error', "'error")
"""What an error flag on a tool result looks like in the raw text of any convention read
(`is_error`, Vercel's `"error-text"`, Bedrock's `"status": "error"`)."""


def _may_flag(group: ModelCall, logs: Logs) -> bool:
    """Whether the model call's raw content may flag a result as an error: a substring test
    that spares parsing the whole history for the common trace that flags nothing. Content
    in log records is always read."""
    for node in group.members:
        span = node.span
        if logs.get((span.trace_id, span.span_id)):
            return True
        for value in span.attributes.values():
            if isinstance(value, str) and any(mark in value for mark in _FLAG_MARKS):
                return True
    return False


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


# --- where the witnesses disagree ------------------------------------------------------

TOLD_ERROR = "Its span shows no error, but the result the model was given is flagged as one."
NOT_ASKED = "No request in the model's conversation asks for this call."


def _note(call: Call, text: str) -> None:
    if call.notes is None:
        call.notes = [text]
    elif text not in call.notes:
        call.notes.append(text)


def _told_error(call: Call) -> None:
    """The model was told the call failed: an error, and a disagreement when its span (the
    other witness) shows none."""
    node = call.node
    if (
        node is not None
        and call.is_error is not True
        and node.span.status_code != STATUS_ERROR
        and not node.span.attributes.get("error.type")
    ):
        _note(call, TOLD_ERROR)
    call.is_error = True


def _requests_of(logs: Logs, groups: list[ModelCall]) -> list[ToolRequest]:
    """Every tool request in the model calls' outputs (parsed already, kept on the nodes);
    none when a model call's output was not captured, since what it asked is unknown."""
    out: list[ToolRequest] = []
    for group in groups:
        messages = group.part(OUTPUT, logs)
        if messages is None:
            return []
        for msg in messages:
            out.extend(msg.tool_calls)
    return out


def _disagreements(calls: list[Call], requests: list[ToolRequest]) -> None:
    """Notes on the tool spans the conversation tells differently: other arguments than the
    request with the same call id (or, without ids, the same name), or no request at all.
    A conversation with no request in it says nothing about calls (a code agent calls its
    tools from the code it writes; capture may have been off)."""
    if not requests:
        return
    by_id = {r.call_id: r for r in requests if r.call_id is not None}
    left: dict[str, list[ToolRequest]] = {}
    spans: list[Call] = []
    for call in calls:
        node = call.node
        if node is None or node.role is not Role.TOOL or call.handoff_target is not None:
            continue  # a call the conversation alone shows, a sub-agent's span, a handoff
        req = by_id.pop(call.call_id, None) if call.call_id is not None else None
        if req is not None:
            _compare_arguments(call, req)
        else:
            spans.append(call)
    if not spans:
        return
    for req in by_id.values():
        left.setdefault(req.name, []).append(req)
    for req in requests:
        if req.call_id is None:
            left.setdefault(req.name, []).append(req)
    for call in spans:
        same = left.get(call.name) if isinstance(call.name, str) else None
        if same:
            _compare_arguments(call, same.pop(0))
        else:
            _note(call, NOT_ASKED)


def _arguments_found(value: Any, keys: KeysView[Any]) -> dict[Any, Any] | None:
    """The dict in a span's arguments that holds the request's: the arguments themselves, or
    one level down in a framework's envelope (`{"args": [], "kwargs": {...}}`, `{"input":
    {...}, "options": null}`, a Python repr under `input_str`)."""
    if not isinstance(value, dict):
        return None
    if not keys.isdisjoint(value):
        return value
    for inner in value.values():
        if isinstance(inner, str):
            inner = python_literal(inner)  # JSON, else a Python repr
        if isinstance(inner, dict) and not keys.isdisjoint(inner):
            return inner
    return None


def _compare_arguments(call: Call, req: ToolRequest) -> None:
    """Notes the argument names whose values the span and the request give differently (a
    span may add defaults: keys only it has are no disagreement); names, not values, since
    values are content."""
    if not call.args_captured or call.node is None:
        return
    asked = loads_lenient(req.arguments)
    if not isinstance(asked, dict) or not asked or call.arguments is req.arguments:
        return
    ran = _arguments_found(loads_lenient(call.arguments), asked.keys())
    if ran is None:
        return  # no record of these arguments in a shape we know: nothing to compare
    differ = [
        str(key)
        for key, value in asked.items()
        if key not in ran or (ran[key] != value and str(ran[key]) != str(value))
    ]
    if differ:
        _note(
            call,
            "Its span's arguments differ from the model's request in "
            + ", ".join(differ[:5])
            + ("." if len(differ) <= 5 else f" and {len(differ) - 5} more."),
        )
