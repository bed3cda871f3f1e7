"""The seam between the run assembler and the span dialects.

A dialect answers two kinds of question about one span: what is it (`detect`, cheap, asked of
every span), and what does it say (`agent_name`, `tool`, `exchange`, asked only of the spans
that end up in a run). Keeping the second kind lazy is what keeps adaptation off the hot path:
most spans in a trace are HTTP/DB spans that only need to be recognised as "not ours".

Content is normalised into `Message`s with tool requests and replies, so the assembler can
match a tool call to its result by call id without knowing which dialect spoke.
"""

from __future__ import annotations

import ast
import enum
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from attest_otel.model import LogRecord, Span

REDACTED = "__REDACTED__"
"""OpenInference's stand-in for hidden content: unknown, not empty."""


INPUT = "input"
OUTPUT = "output"
SYSTEM = "system"
TOOLS = "tools"
TASK = "task"
ANSWER = "answer"
Want = frozenset[str]
ALL: Want = frozenset((INPUT, OUTPUT, SYSTEM, TOOLS, TASK, ANSWER))
"""The parts of an `Exchange`; a dialect parses only the parts it is asked for."""


class Role(enum.Enum):
    AGENT = "agent"
    """A run: an agent invocation whose tool spans below it are its calls."""
    TOOL = "tool"
    MODEL = "model"
    """One model (inference) call; never a tool call, however it is nested."""
    HANDOFF = "handoff"
    """Control passed to another agent; a call of the run it sits in, not a tool span."""
    WORKFLOW = "workflow"
    """A container (workflow, swarm, runner turn): not a run of its own."""
    OTHER = "other"
    """Recognised as this dialect but nothing a run needs (embeddings, cycles, chains)."""


@dataclass(slots=True)
class ToolRequest:
    """A tool call as the model asked for it."""

    call_id: str | None
    name: str
    arguments: Any = None


@dataclass(slots=True)
class ToolReply:
    """A tool result as the model was given it. `is_error` is only ever the trace's own flag."""

    call_id: str | None
    content: Any
    name: str | None = None
    is_error: bool = False


@dataclass(slots=True)
class Message:
    role: str
    text: str | None = None
    tool_calls: list[ToolRequest] = field(default_factory=list)
    tool_results: list[ToolReply] = field(default_factory=list)


@dataclass(slots=True)
class Exchange:
    """What an agent or model span says about the conversation.

    None means "the span does not say" (not captured, or not this span's business); the
    assembler then looks elsewhere rather than taking absence for an empty value.
    """

    input: list[Message] | None = None
    output: list[Message] | None = None
    system: str | None = None
    tools: list[dict[str, Any]] | None = None
    task: str | None = None
    """The task the span shows: its own input, else the last user text of its messages."""
    answer: str | None = None
    """The answer the span shows: its own output, else the last assistant text."""


@dataclass(slots=True)
class ToolInfo:
    """What a tool span says about its call. `output_captured` False: the result is unknown."""

    name: str | None
    call_id: str | None = None
    arguments: Any = None
    arguments_captured: bool = False
    output: Any = None
    output_captured: bool = False
    handoff_target: str | None = None
    is_error: bool | None = None
    """The span's own error flag where a framework keeps one instead of the span status
    (`haystack.tool.error`, `acme.error`); None: the status and the result decide."""
    error_text: str | None = None


class PolicyBook(Protocol):
    """What the run assembler asks of a policy (`config.Policy` is one): a run's allowed
    tools and fallbacks, from its agent name, the raw `attest.*` values on its agent span
    and the one-off overrides. The order of who wins is the policy's business."""

    def resolve(
        self,
        agent: str | None,
        on_span: tuple[Any, Any],
        allowed_override: list[str] | None,
        fallbacks_override: dict[str, list[str]] | None,
    ) -> tuple[list[str] | None, dict[str, list[str]]]: ...


@runtime_checkable
class Dialect(Protocol):
    """One span dialect. `detect` must be cheap: a few dict lookups, no scans, no parsing."""

    name: str

    def detect(self, span: Span) -> Role | None:
        """The span's role if the span is in this dialect, else None."""
        ...

    def agent_name(self, span: Span) -> str | None: ...

    def tool(self, span: Span) -> ToolInfo: ...

    def exchange(self, span: Span, logs: Sequence[LogRecord], want: Want = ALL) -> Exchange:
        """Content of an agent or model span; `logs` are the log records tied to the span.

        Parts not in `want` may be left None: parsing message JSON is most of the cost of
        adapting, and a run needs only a few parts of a few spans.
        """
        ...

    def policy_values(self, span: Span) -> tuple[Any, Any]:
        """The raw (allowed_tools, tool_fallbacks) attribute values an agent span carries."""
        ...


# --- helpers shared by the dialects ----------------------------------------------------------


def attr_str(attrs: dict[str, Any], key: str) -> str | None:
    value = attrs.get(key)
    if value is None:
        return None
    if isinstance(value, str):
        return value
    return str(value)


def clean_id(value: Any) -> str | None:
    """Call ids arrive with stray white space and placeholders; None when there is no real id."""
    if value is None:
        return None
    text = str(value).strip()
    if not text or text == "<not specified>":
        return None
    return text


def loads_lenient(value: Any) -> Any:
    """A JSON string's value; anything else (non-JSON text, truncated JSON) comes back as it is.

    Truncated attributes (SDK length limits) must not crash the adapter, and keeping the raw
    string keeps whatever the user can still read.
    """
    if not isinstance(value, str):
        return value
    text = value.strip()
    if not text:
        return value
    if text[0] in '[{"-0123456789' or text in ("true", "false", "null"):
        try:
            return json.loads(text)
        except (ValueError, RecursionError):  # not JSON, cut JSON, or nested too deeply
            return value
    return value


PY_LITERAL_LIMIT = 64_000
"""Longest Python repr `python_literal` parses: an attribute is user data, and parsing it must
cost no more than reading it (SDK attribute limits usually cut well below this)."""


def python_literal(value: Any) -> Any:
    """A value recorded as JSON or as a Python repr (`{'order_id': 42}`, `()`): tracing
    decorators record a function's arguments with `repr`. Parsed with `ast.literal_eval`, which
    builds literals and never runs code, and only up to `PY_LITERAL_LIMIT` characters; anything
    else (too long, not a literal, nested too deeply) comes back as it is."""
    loaded = loads_lenient(value)
    if loaded is not value or not isinstance(value, str):
        return loaded
    text = value.strip()
    if not text or len(text) > PY_LITERAL_LIMIT or text[0] not in "{[('\"-0123456789TFN":
        return value
    try:
        return ast.literal_eval(text)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return value


def loads_structured(value: Any) -> Any:
    """Like `loads_lenient` but only for JSON arrays and objects; other strings stay text."""
    if isinstance(value, str):
        text = value.lstrip()
        if text[:1] in ("[", "{"):
            try:
                return json.loads(text)
            except (ValueError, RecursionError):
                return value
    return value


def captured(value: Any) -> bool:
    """Whether an attribute value is real content: absent and redacted values are not."""
    return value is not None and value != REDACTED


def span_name_suffix(name: str, prefix: str) -> str | None:
    """`execute_tool get_weather` -> `get_weather` for prefix `execute_tool`."""
    if name.startswith(prefix):
        rest = name[len(prefix) :].strip()
        return rest or None
    return None


def policy_attrs(attrs: dict[str, Any], prefix: str = "") -> tuple[Any, Any]:
    return attrs.get(prefix + "attest.allowed_tools"), attrs.get(prefix + "attest.tool_fallbacks")


def event_exception_text(span: Span) -> str | None:
    """`exception.type: exception.message` of the span's first `exception` event."""
    for ev in span.events:
        if ev.name == "exception":
            etype = attr_str(ev.attributes, "exception.type")
            msg = attr_str(ev.attributes, "exception.message")
            if etype and msg:
                return f"{etype}: {msg}"
            return etype or msg
    return None


_METHODS = (
    ".__call__",
    ".run",
    ".arun",
    ".invoke",
    ".ainvoke",
    ".call",
    ".acall",
    ".execute",
    ".aexecute",
    ".forward",
    "._run",
    "._arun",
)


def strip_method(name: str) -> str:
    """`lookup_order.run` -> `lookup_order`: frameworks name spans after the method that ran
    (`<tool>.run`, `FunctionTool.acall`, `billing_agent.run`); the part before it is the name."""
    for method in _METHODS:
        if name.endswith(method) and len(name) > len(method):
            return name[: -len(method)]
    return name


def call_arguments(value: Any) -> Any:
    """Arguments recorded as a Python call, `{"args": [], "kwargs": {...}}` (smolagents, some
    OpenInference wrappers), are the keyword arguments; any other value is left as it is."""
    if isinstance(value, dict) and isinstance(value.get("kwargs"), dict):
        positional = value.get("args")
        if not positional:
            return value["kwargs"]
        if isinstance(positional, list) and not value["kwargs"] and len(positional) == 1:
            return positional[0]
    return value
