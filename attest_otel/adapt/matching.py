"""Calls: tool spans deduplicated, model spans grouped into model calls, error fields.

One call seen by several spans (two instrumentations, a request span beside its execution)
counts once; the conversation's witness of the same calls is merged in by `witness`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from typing import Any

from attest_otel.adapt.base import (
    Role,
    Want,
    event_exception_text,
)
from attest_otel.adapt.tree import Logs, Node, inside
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
    notes: list[str] | None = None
    """Where the span and the conversation disagree about this call (`witness`)."""

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


def dedupe(calls: list[Call]) -> list[Call]:
    """One call seen by two spans (framework + MCP client, two instrumentations) counts once.

    Same call id, or same name and arguments with overlapping times (or one span inside the
    other): the earlier (outer) span stays, and takes what only the other one captured.
    """
    calls.sort(key=lambda c: c.key)
    kept: list[Call] = []
    by_id: dict[str, Call] = {}
    by_name: dict[str, list[Call]] = {}
    last_end: dict[str, int] = {}
    """Per name, the latest end of a kept call: a call starting after it has no twin there."""
    for call in calls:
        twin = by_id.get(call.call_id) if call.call_id is not None else None
        name = call.name if isinstance(call.name, str) else repr(call.name)
        if twin is None and last_end.get(name, call.start) >= call.start:
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
            latest = last_end.get(name)
            if latest is None or call.end > latest:
                last_end[name] = call.end
            if call.call_id is not None:
                by_id[call.call_id] = call
            continue
        _merge(twin, call)
    return kept


def fold_requests(calls: list[Call]) -> list[Call]:
    """A tool span inside a model span is the model's request for the call, recorded as a
    span of its own; the execution span of the same call (same id, else the next one of the
    same name that is not itself a request) is the call, and takes the request's id and
    arguments. A request no execution span answers stays a call: the model asked for it
    (issue 25, class 1). `calls` are in start order (`dedupe`)."""
    requests = [c for c in calls if c.node is not None and _in_model(c.node)]
    if not requests:
        return calls
    asked = {id(c) for c in requests}
    executions = [c for c in calls if id(c) not in asked]
    taken: set[int] = set()
    folded: set[int] = set()
    for req in requests:
        twin = None
        if req.call_id is not None:
            twin = next((c for c in executions if c.call_id == req.call_id), None)
        if twin is None:
            twin = next(
                (
                    c
                    for c in executions
                    if id(c) not in taken
                    and c.call_id is None
                    and c.name == req.name
                    and c.start >= req.start
                ),
                None,
            )
        if twin is None:
            continue
        taken.add(id(twin))
        folded.add(id(req))
        if twin.call_id is None:
            twin.call_id = req.call_id
        if not twin.args_captured and req.args_captured:
            twin.arguments, twin.args_captured = req.arguments, True
    return [c for c in calls if id(c) not in folded]


_OPEN, _RESULT, _FAILED, _CLOSE = "open", "result", "failed", "close"
_PHASES = {
    "start": _OPEN,
    "started": _OPEN,
    "begin": _OPEN,
    "success": _RESULT,
    "succeeded": _RESULT,
    "end": _RESULT,
    "ended": _RESULT,
    "result": _RESULT,
    "complete": _RESULT,
    "completed": _RESULT,
    "error": _FAILED,
    "failed": _FAILED,
    "failure": _FAILED,
    "exception": _FAILED,
    "finish": _CLOSE,
    "finished": _CLOSE,
    "close": _CLOSE,
}
_PHASE_SUFFIXES = (".event", "_event", ".phase", ".stage", ".lifecycle", "event.name")


_phase_keys: dict[str, bool] = {}
"""Attribute key -> whether it may name a lifecycle event: the same few keys come again on
every tool span, so each is lower-cased and compared once (bounded: keys come from senders)."""


def _phase_key(key: str) -> bool:
    found = _phase_keys.get(key)
    if found is None:
        found = key.lower().endswith(_PHASE_SUFFIXES)
        if len(_phase_keys) < 4096 and len(key) <= 256:
            _phase_keys[key] = found
    return found


def _phase(call: Call) -> str | None:
    """The lifecycle event a tool span records (`tool.event = start`), if it is one."""
    if call.node is None:
        return None
    for key, value in call.node.span.attributes.items():
        if isinstance(value, str) and len(value) < 16 and _phase_key(key):
            phase = _PHASES.get(value.strip().lower())
            if phase is not None:
                return phase
    return None


def _event_of(call: Call, by_node: dict[int, Call]) -> tuple[Call, str] | None:
    """The call whose tool span holds this one, when this one is named after a lifecycle
    event (BeeAI's emitter: an `error` TOOL span inside the `charge_card` TOOL span), with
    the event's phase; None for a call of its own."""
    node = call.node
    if node is None or node.parent is None or not isinstance(call.name, str):
        return None
    phase = _PHASES.get(call.name.strip().lower())
    owner = by_node.get(id(node.parent))
    if phase is None or owner is None:
        return None
    return owner, phase


def fold_lifecycle(calls: list[Call]) -> list[Call]:
    """A call recorded as one span per lifecycle event (start, success or error, finish) is
    one call: the events after a start, up to its finish, fold into it, and an error event
    makes it an error (issue 25, class 1). `calls` are in start order (`dedupe`)."""
    opened: dict[Any, Call] = {}
    kept: list[Call] = []
    by_node: dict[int, Call] = {}
    for call in calls:
        event = _event_of(call, by_node)
        if event is not None:
            _merge(event[0], call)
            if event[1] == _FAILED or call.is_error:
                event[0].is_error = True
                event[0].error_text = event[0].error_text or call.error_text
            continue
        if call.node is not None:
            by_node[id(call.node)] = call
        phase = _phase(call)
        current = opened.get(call.name) if phase is not None else None
        if phase is None or phase == _OPEN or current is None:
            kept.append(call)
            if phase is not None and phase != _CLOSE:
                opened[call.name] = call
            continue
        _merge(current, call)
        current.end = max(current.end, call.end)
        if phase == _FAILED or call.is_error:
            current.is_error = True
            current.error_text = current.error_text or call.error_text
        if phase == _CLOSE:
            del opened[call.name]
    return kept


def _in_model(node: Node) -> bool:
    """Whether a span sits inside a model span of its run (no agent or tool span between)."""
    parent = node.parent
    for _ in range(4):
        if parent is None or parent.role in (Role.AGENT, Role.TOOL, Role.HANDOFF):
            return False
        if parent.role is Role.MODEL:
            return True
        parent = parent.parent
    return False


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


def _status_text(span: Span) -> str | None:
    return span.status_message or event_exception_text(span)


def error_fields(call: Call) -> None:
    """ERROR status sets is_error, and so does `error.type` on a span whose status does not
    show it (an instrumentation that set OK first: the SDK keeps the first final status);
    other statuses leave it to the output text (docs/rules.md, point 2)."""
    node = call.node
    if node is not None and (
        node.span.status_code == STATUS_ERROR or node.span.attributes.get("error.type")
    ):
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
    "notes",
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
    "disagreement",
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
        " ".join(call.notes) if call.notes else None,
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
