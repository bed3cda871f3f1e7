"""The generic reader: spans of a framework no dialect module knows, read from shape and names.

There will always be another framework, and many teams instrument their agents by hand, with
their own attribute names: `acme.kind = "tool"`, `mlflow.spanType = "TOOL"`, a span called
`haystack.agent.step.tool`. What such traces share is vocabulary, not keys: a type attribute or
a span name that says tool / agent / llm, argument and result attributes under the usual
names, an error flag or an exception event. This reader works from that vocabulary alone.

It is last in line: it reads every unclaimed span of a trace in which no dialect module found
an agent, tool or handoff span (`runs`), and in a trace a dialect did read, the unclaimed spans
outside and around nothing a dialect read (`mixed`), so nothing a dialect module reads can
change. Every span it reads carries the dialect name `generic`, which the output and `inspect`
show, so nobody mistakes a guess for a dialect.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from attest_otel.adapt import messages as m
from attest_otel.adapt.base import (
    ALL,
    Exchange,
    Message,
    Role,
    ToolInfo,
    Want,
    call_arguments,
    captured,
    event_exception_text,
    loads_lenient,
    loads_structured,
    policy_attrs,
    python_literal,
    strip_method,
)
from attest_otel.model import LogRecord, Span

__all__ = ["GENERIC", "TRANSPORT_KEY_PREFIXES", "Generic", "bare_name", "protocol_span"]

_TYPE_KEYS = (
    "span.type",
    "span.kind",
    "span_type",
    "spantype",
    "span_kind",
    "observation.type",
    "component.type",
    "run_type",
    "entity.type",
    ".kind",
    ".type",
)
"""Attribute keys (lower-cased, by suffix) whose value may say what a span is."""

_ROLE_WORDS: dict[str, Role] = {
    "tool": Role.TOOL,
    "tools": Role.TOOL,
    "function": Role.TOOL,
    "tool_call": Role.TOOL,
    "toolcall": Role.TOOL,
    "function_call": Role.TOOL,
    "agent": Role.AGENT,
    "llm": Role.MODEL,
    "chat": Role.MODEL,
    "chat_model": Role.MODEL,
    "chatmodel": Role.MODEL,
    "generation": Role.MODEL,
    "completion": Role.MODEL,
    "model": Role.MODEL,
    "generator": Role.MODEL,
}
_CONTAINER_WORDS = frozenset(
    (
        "step",
        "turn",
        "cycle",
        "iteration",
        "loop",
        "stream",
        "chunk",
        "error",
        "errors",
        "retry",
        "parse",
        "parser",
        "span",
        "callback",
    )
)
"""A span name ending in one of these is a framework's wrapper, never a call or a run:
per-step containers, streaming chunks, an `error` child of a tool span."""

TRANSPORT_KEY_PREFIXES = ("http.", "db.", "rpc.", "messaging.", "url.", "faas.", "network.")
"""Keys of protocol spans: a `POST /v1/chat/completions` client span is not a model call.
The JSON reader notes a skeleton with one (`ingest.decode.transport_skeleton`), so that
`runs` need not hydrate it to hear `detect` say None."""
_NOT_GENAI = TRANSPORT_KEY_PREFIXES

_ARG_SUFFIXES = (
    ".input.value",
    ".arguments",
    ".args",
    ".parameters",
    ".input",
    "spaninputs",
    "_input",
    "_args",
    "_arguments",
)
_ARG_KEYS = frozenset(("input", "args", "arguments", "parameters", "tool_input", "inputs"))
_KWARG_SUFFIXES = (".kwargs", "_kwargs")
"""A decorated function's keyword arguments (`function.kwargs`), often a Python repr."""
_POSITIONAL_SUFFIXES = (".args", "_args")
_OUT_SUFFIXES = (
    ".output.value",
    ".result",
    ".response",
    ".output",
    "spanoutputs",
    "_output",
    "_result",
    "_response",
    ".output.messages",
)
_OUT_KEYS = frozenset(("output", "result", "response", "outputs", "tool_output"))
_ERROR_FLAG_SUFFIXES = (".error", ".failed", ".is_error", ".iserror", "_error", ".has_error")
_ERROR_FLAG_KEYS = frozenset(("error", "failed", "is_error"))
_ERROR_TEXT_SUFFIXES = (
    "error.message",
    "error_message",
    ".error.msg",
    "error.msg",
    "exception.message",
)
_TOOL_NAME_SUFFIXES = ("tool.name", "tool_name", "toolname", "function.name", "function_name")
_AGENT_NAME_SUFFIXES = ("agent.name", "agent_name", "agentname", "component.name")
_TOOLS_SUFFIXES = (".tools", "available_tools", "tool_definitions", ".functions")
_TOOLS_KEYS = frozenset(("tools", "functions"))

_NAME_PREFIXES = (
    "execute_tool ",
    "tool: ",
    "tool:",
    "tool ",
    "Tool: ",
    "Tool ",
    "function: ",
    "agent ",
    "Agent ",
    "agent: ",
    "Agent: ",
    "invoke_agent ",
)
_WORD = re.compile(r"[a-z0-9_]+")


class Generic:
    name = "generic"

    def detect(self, span: Span) -> Role | None:
        attrs = span.attributes
        if not attrs:  # a skeleton, or a span of a name only: the common unclaimed span
            return _role_from_name(span.name)
        if protocol_span(span):
            return None
        by_attr = _role_from_attributes(attrs)
        if by_attr is not None:
            return by_attr
        return _role_from_name(span.name)

    def agent_name(self, span: Span) -> str | None:
        attrs = span.attributes
        found = _first(attrs, _AGENT_NAME_SUFFIXES, ())
        if isinstance(found, str) and found:
            return found
        return bare_name(span.name)

    def tool(self, span: Span) -> ToolInfo:
        attrs = with_events(span)
        name = _first(attrs, _TOOL_NAME_SUFFIXES, ())
        args = _first(attrs, _ARG_SUFFIXES, _ARG_KEYS)
        arguments = loads_lenient(args)
        kwargs = _first(attrs, _KWARG_SUFFIXES, ())
        if kwargs is not None:
            # A decorator's record of the call: `function.args = ()` beside the keywords.
            positional = python_literal(_first(attrs, _POSITIONAL_SUFFIXES, ()))
            args, arguments = (
                kwargs,
                call_arguments(
                    {
                        "args": list(positional)
                        if isinstance(positional, tuple | list)
                        else positional,
                        "kwargs": python_literal(kwargs),
                    }
                ),
            )
        out = _first(attrs, _OUT_SUFFIXES, _OUT_KEYS)
        flagged = _error_flag(attrs)
        error_text = _first(attrs, _ERROR_TEXT_SUFFIXES, ()) or event_exception_text(span)
        return ToolInfo(
            name=name if isinstance(name, str) and name else bare_name(span.name),
            call_id=_call_id(attrs),
            arguments=arguments,
            arguments_captured=captured(args),
            output=_result(loads_lenient(out)),
            output_captured=captured(out),
            is_error=True
            if flagged or (flagged is None and error_text and not captured(out))
            else None,
            error_text=str(error_text) if error_text else None,
        )

    def exchange(self, span: Span, logs: Sequence[LogRecord], want: Want = ALL) -> Exchange:
        attrs = with_events(span)
        # Lenient: a JSON-encoded string (MLflow's `"text"`) is its text.
        raw_in = loads_lenient(_first(attrs, _ARG_SUFFIXES, _ARG_KEYS))
        raw_out = loads_lenient(_first(attrs, _OUT_SUFFIXES, _OUT_KEYS))
        ex = Exchange()
        in_msgs = _messages(raw_in)
        out_msgs = _messages(raw_out, assistant=True)
        ex.input, ex.output = in_msgs, out_msgs
        ex.system = m.system_text(in_msgs)
        ex.task = _task(raw_in) or m.last_user_text(in_msgs)
        ex.answer = (
            raw_out
            if isinstance(raw_out, str) and raw_out
            else _answer(raw_out) or m.assistant_text(out_msgs)
        )
        tools = _first(attrs, _TOOLS_SUFFIXES, _TOOLS_KEYS)
        if tools is not None:
            ex.tools = m.parse_tool_definitions(tools)
        return ex

    def policy_values(self, span: Span) -> tuple[Any, Any]:
        return policy_attrs(span.attributes)


GENERIC = Generic()


_EVENT_VALUE_KEYS = frozenset(("value", "content", "data", "text", "payload"))


def with_events(span: Span) -> dict[str, Any]:
    """The span's attributes, and the content some tracers keep only in span events: an
    `input` event's `value` reads as the attribute `input`, its other keys as `input.<key>`
    (issue 25, class 4). Attributes win; `exception` events stay the error's."""
    attrs = span.attributes
    if not span.events:
        return attrs
    merged: dict[str, Any] = {}
    for ev in span.events:
        if ev.name == "exception":
            continue
        for key, value in ev.attributes.items():
            merged.setdefault(ev.name if key in _EVENT_VALUE_KEYS else f"{ev.name}.{key}", value)
    if not merged:
        return attrs
    merged.update(attrs)
    return merged


def _role_from_attributes(attrs: dict[str, Any]) -> Role | None:
    for key, value in attrs.items():
        if not isinstance(value, str) or len(value) > 40:
            continue
        low = key.lower()
        if low.endswith(_TYPE_KEYS):
            word = value.strip().strip('"').lower().replace("-", "_")  # MLflow: JSON strings
            role = _ROLE_WORDS.get(word)
            if role is not None:
                return role
    return None


_BY_NAME: dict[str, Role | None] = {}
_BY_NAME_LIMIT = 4096
_CACHED_NAME_CHARS = 200
"""Span names whose role is kept; past it the cache starts again (names repeat across a
trace's spans, `SELECT orders`, `GET /orders/{id}`, but they come from the input)."""


def _role_from_name(name: str) -> Role | None:
    """The last role word of the name decides: `haystack.agent.step.tool` is a tool, and a
    name that ends in a container word (`haystack.agent.step`) is nothing of ours.

    Asked of every span no dialect claimed, in every trace (`mixed`): kept per name."""
    if name in _BY_NAME:
        return _BY_NAME[name]
    found: Role | None = None
    for word in reversed(_WORD.findall(name.lower())):
        if word in _CONTAINER_WORDS:
            break
        found = _ROLE_WORDS.get(word)
        if found is not None:
            break
    if len(name) <= _CACHED_NAME_CHARS:  # a hostile name of megabytes is not kept
        if len(_BY_NAME) >= _BY_NAME_LIMIT:
            _BY_NAME.clear()
        _BY_NAME[name] = found
    return found


def _first(
    attrs: dict[str, Any], suffixes: tuple[str, ...], keys: frozenset[str] | tuple[()]
) -> Any:
    for key, value in attrs.items():
        low = key.lower()
        if (low in keys or (suffixes and low.endswith(suffixes))) and not low.endswith(
            ("_types", "_spec", ".types", ".spec")
        ):
            return value
    return None


def _error_flag(attrs: dict[str, Any]) -> bool | None:
    for key, value in attrs.items():
        low = key.lower()
        if low in _ERROR_FLAG_KEYS or low.endswith(_ERROR_FLAG_SUFFIXES):
            if isinstance(value, bool):
                return value
            if isinstance(value, str) and value.strip().lower() in ("true", "false"):
                return value.strip().lower() == "true"
    return None


def _call_id(attrs: dict[str, Any]) -> str | None:
    for key, value in attrs.items():
        low = key.lower()
        if low.endswith(("call.id", "call_id", "callid")) and isinstance(value, str | int):
            return str(value)
    return None


def protocol_span(span: Span) -> bool:
    """An HTTP, database or messaging span: a transport, never an agent, tool or model call."""
    return any(k.startswith(_NOT_GENAI) for k in span.attributes)


def bare_name(name: str) -> str | None:
    """`lookup_order.run` or `lookup_order.tool` -> `lookup_order`, `tool: x` -> `x`; a
    dotted instrumentation name (`haystack.agent.step.tool`) names no tool and gives None."""
    text = name.strip()
    for prefix in _NAME_PREFIXES:
        if text.startswith(prefix):
            text = text[len(prefix) :].strip()
            break
    head, dot, role = text.rpartition(".")
    if dot and "." not in head and role.lower() in _ROLE_WORDS:
        text = head  # `lookup_order.tool`, `billing.agent`: the role after the name
    text = strip_method(text)
    if not text or "." in text or " " in text or "/" in text:
        return None
    return None if text.lower() in _ROLE_WORDS or text.lower() in _CONTAINER_WORDS else text


def _result(value: Any) -> Any:
    """A tool result wrapped as `{"result": ...}` / `{"output": ...}` is its inner value."""
    if isinstance(value, dict) and len(value) == 1:
        ((key, inner),) = value.items()
        if key in ("result", "output", "content", "return_value"):
            return inner
    return value


def _messages(value: Any, assistant: bool = False) -> list[Message] | None:
    """Messages wherever a framework keeps them: a list, `{"messages"}`, `{"replies"}`,
    `{"choices": [{"message"}]}`, or one text (the model's reply)."""
    if value is None:
        return None
    if isinstance(value, str):
        return [Message("assistant" if assistant else "user", value)] if value else None
    if isinstance(value, dict):
        for key in ("messages", "replies", "prompt", "input", "output", "completion"):
            inner = value.get(key)
            if isinstance(inner, list | str) and inner:
                return _messages(loads_structured(inner), assistant)
        choices = value.get("choices")
        if isinstance(choices, list):
            items = [c.get("message") for c in choices if isinstance(c, dict)]
            return m.parse_messages([i for i in items if isinstance(i, dict)])
        if "role" not in value:
            return None
    return m.parse_messages(value)


_TASK_KEYS = ("task", "input", "query", "question", "request", "prompt", "message", "user_input")


def _task(value: Any) -> str | None:
    """An agent's task: its input text, kept alone or under a key of its own."""
    if isinstance(value, str):
        return value or None
    if isinstance(value, dict):
        for key in _TASK_KEYS:
            inner = value.get(key)
            if isinstance(inner, str) and inner:
                return inner
        texts = [v for v in value.values() if isinstance(v, str) and v]
        if len(texts) == 1 and len(value) == 1:
            return texts[0]
    return None


def _answer(value: Any) -> str | None:
    """An agent's answer kept under a key of its own (`{"answer": ...}`, `{"last_message"}`)."""
    if not isinstance(value, dict):
        return None
    for key in ("answer", "final_answer", "output", "result", "response", "text"):
        inner = value.get(key)
        if isinstance(inner, str) and inner:
            return inner
    last = value.get("last_message")
    if last is not None:
        msg = m.parse_message(last)
        if msg is not None and msg.text:
            return msg.text
    return None
