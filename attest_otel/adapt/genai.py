"""OpenTelemetry GenAI semantic conventions, latest (>= 1.37) and old (<= 1.36).

Both forms live side by side in the wild, sometimes from one library depending on
`OTEL_SEMCONV_STABILITY_OPT_IN`, so one module reads both: the latest form keeps content in
`gen_ai.input.messages` / `gen_ai.output.messages` attributes (or the
`gen_ai.client.inference.operation.details` event), the old form in per-message events
(`gen_ai.user.message` ... `gen_ai.choice`) on the span or on the logs signal, and before
1.28 in `gen_ai.content.prompt` / `gen_ai.content.completion` span events.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import fields
from typing import Any

from attest_otel.adapt.base import (
    ALL,
    ANSWER,
    INPUT,
    OUTPUT,
    SYSTEM,
    TASK,
    TOOLS,
    Exchange,
    Message,
    Role,
    ToolInfo,
    Want,
    attr_str,
    captured,
    clean_id,
    loads_lenient,
    loads_structured,
    policy_attrs,
    span_name_suffix,
)
from attest_otel.adapt.messages import (
    answer_in,
    assistant_text,
    last_user_text,
    message_items,
    parse_message,
    parse_messages,
    parse_system,
    parse_tool_definitions,
    system_in,
    system_in_items,
    system_text,
    task_in_items,
)
from attest_otel.adapt.spec import DialectSpec
from attest_otel.model import LogRecord, Span

OP = "gen_ai.operation.name"

OP_ROLES: dict[str, Role] = {
    "invoke_agent": Role.AGENT,
    "execute_tool": Role.TOOL,
    "invoke_workflow": Role.WORKFLOW,
    "chat": Role.MODEL,
    "generate_content": Role.MODEL,
    "text_completion": Role.MODEL,
    # Semantic Kernel's non-standard values, old-form in every other respect.
    "chat.completions": Role.MODEL,
    "chat.streaming_completions": Role.MODEL,
    "text.completions": Role.MODEL,
}

_LATEST_MARKERS = (
    "gen_ai.provider.name",
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
    "gen_ai.system_instructions",
)

DETAILS_EVENT = "gen_ai.client.inference.operation.details"
_MESSAGE_EVENTS = {
    "gen_ai.system.message": "system",
    "gen_ai.user.message": "user",
    "gen_ai.assistant.message": "assistant",
    "gen_ai.tool.message": "tool",
}


_OP_WORDS: dict[str, Role] = {
    "tool": Role.TOOL,
    "function": Role.TOOL,
    "agent": Role.AGENT,
    "workflow": Role.WORKFLOW,
    "chat": Role.MODEL,
    "llm": Role.MODEL,
    "completion": Role.MODEL,
    "completions": Role.MODEL,
    "generate": Role.MODEL,
}
"""Words of a framework's own operation names in the GenAI namespace (`tool.execute`,
`agent.run`): the first role word of the name decides (issue 25, class 4)."""

_OP_SPLIT = re.compile(r"[^a-z]+")


def _op_words(op: Any) -> Role:
    if isinstance(op, str):
        for word in _OP_SPLIT.split(op.lower()):
            role = _OP_WORDS.get(word)
            if role is not None:
                return role
    return Role.OTHER


def op_role(span: Span) -> Role | None:
    """The role by `gen_ai.operation.name` (a framework's own name by its words), or by the
    old shapes that lack it; a span with only `gen_ai.tool.name` is a tool span."""
    attrs = span.attributes
    op = attrs.get(OP)
    if op is not None:
        role = OP_ROLES.get(op)
        return role if role is not None else _op_words(op)
    if "gen_ai.tool.name" in attrs:
        return Role.TOOL  # <= 1.36 tool spans carried no operation name; some only the name
    if "gen_ai.system" in attrs or "gen_ai.request.model" in attrs:
        return Role.MODEL
    return None


class GenAI:
    """The latest form: `gen_ai.operation.name` with the provider or a content attribute."""

    name = "genai"

    def detect(self, span: Span) -> Role | None:
        attrs = span.attributes
        if OP not in attrs:
            return None
        if attrs.keys().isdisjoint(_LATEST_MARKERS):  # one C-level test: asked of every span
            return None
        return op_role(span)

    def agent_name(self, span: Span) -> str | None:
        return agent_name(span)

    def tool(self, span: Span) -> ToolInfo:
        return tool_info(span)

    def exchange(self, span: Span, logs: Sequence[LogRecord], want: Want = ALL) -> Exchange:
        return exchange(span, logs, want)

    def policy_values(self, span: Span) -> tuple[Any, Any]:
        return policy_attrs(span.attributes)


class GenAIOld(GenAI):
    """The old form (<= 1.36): `gen_ai.system` instead of the provider, content in events."""

    name = "genai-old"

    def detect(self, span: Span) -> Role | None:
        return op_role(span)


def agent_name(span: Span) -> str | None:
    name = attr_str(span.attributes, "gen_ai.agent.name")
    if name:
        return name
    return span_name_suffix(span.name, "invoke_agent") or span_name_suffix(
        span.name, "create_agent"
    )


_TOOL_INFO_FIELDS = (
    "name",
    "call_id",
    "arguments",
    "arguments_captured",
    "output",
    "output_captured",
    "handoff_target",
)
if tuple(f.name for f in fields(ToolInfo))[:7] != _TOOL_INFO_FIELDS:  # pragma: no cover
    raise ImportError("ToolInfo's fields changed: update `tool_info`, which builds it by position")


def tool_info(span: Span) -> ToolInfo:
    attrs = span.attributes
    get = attrs.get
    name = attr_str(attrs, "gen_ai.tool.name") or span_name_suffix(span.name, "execute_tool")
    args = get("gen_ai.tool.call.arguments")
    result = get("gen_ai.tool.call.result")
    args_captured = captured(args)
    result_captured = captured(result)
    return ToolInfo(  # by position (ToolInfo's field order): once per tool span
        name,
        clean_id(get("gen_ai.tool.call.id")),
        loads_lenient(args) if args_captured else None,
        args_captured,
        loads_lenient(result) if result_captured else None,
        result_captured,
        attr_str(attrs, "gen_ai.transfer.target.name"),
    )


def exchange(span: Span, logs: Sequence[LogRecord] = (), want: Want = ALL) -> Exchange:
    """Content from the span's attributes, else its events, else its log records."""
    attrs = span.attributes
    ex = Exchange()
    missing = False
    # The input's raw messages when the task was read from them: the system prompt is then
    # read from the same list, not from a second parse of the JSON.
    items: list[Any] | None = None
    if INPUT in want or TASK in want:
        raw = attrs.get("gen_ai.input.messages")
        if raw is None:
            missing = True
        elif INPUT in want:
            ex.input = parse_messages(raw)
        else:
            items = message_items(raw)
            ex.task = task_in_items(items)
    if OUTPUT in want or ANSWER in want:
        raw = attrs.get("gen_ai.output.messages")
        if raw is None:
            missing = True
        elif OUTPUT in want:
            ex.output = parse_messages(raw)
        else:
            ex.answer = answer_in(raw)
    if SYSTEM in want:
        ex.system = parse_system(attrs.get("gen_ai.system_instructions"))
        if ex.system is None and ex.input is None and "gen_ai.input.messages" in attrs:
            ex.system = (
                system_in(attrs["gen_ai.input.messages"])
                if items is None
                else system_in_items(items)
            )
        missing = missing or ex.system is None
    if TOOLS in want:
        raw = attrs.get("gen_ai.tool.definitions")
        if raw is None:
            missing = True
        else:
            ex.tools = parse_tool_definitions(raw)
    if missing and (span.events or logs):
        found = Exchange()
        if span.events:
            fill_from_events(found, ((e.name, e.attributes) for e in span.events), want)
        if logs and (found.input is None or found.output is None):
            fill_from_events(found, ((r.event_name, _log_body(r)) for r in logs), want)
        merge_exchange(ex, found)
    return finish(ex, want)


def merge_exchange(ex: Exchange, other: Exchange) -> None:
    """Fill the parts `ex` lacks from `other`."""
    if ex.input is None:
        ex.input = other.input
    if ex.output is None:
        ex.output = other.output
    if ex.system is None:
        ex.system = other.system
    if ex.tools is None:
        ex.tools = other.tools
    if ex.task is None:
        ex.task = other.task
    if ex.answer is None:
        ex.answer = other.answer


def finish(ex: Exchange, want: Want) -> Exchange:
    """Derive the task, answer and system prompt from the messages when asked and not given."""
    if TASK in want and ex.task is None and ex.input is not None:
        ex.task = last_user_text(ex.input)
    if ANSWER in want and ex.answer is None and ex.output is not None:
        ex.answer = assistant_text(ex.output)
    if SYSTEM in want and ex.system is None and ex.input is not None:
        ex.system = system_text(ex.input)
    return ex


def _log_body(record: LogRecord) -> dict[str, Any]:
    body = loads_structured(record.body)
    if isinstance(body, dict):
        if record.attributes:
            return {**record.attributes, **body}
        return body
    out = dict(record.attributes)
    if body is not None:
        out.setdefault("content", body)
    return out


def fill_from_events(
    ex: Exchange, events: Iterable[tuple[str, dict[str, Any]]], want: Want = ALL
) -> None:
    """Fill what `ex` lacks from GenAI events (span events or log records, name + body).

    Reads the operation-details event of the latest form and the per-message events of the
    old form; the first place that has a part wins, so attributes stay authoritative. Message
    events are only parsed when messages are wanted (a run span's log events can hold every
    model call's history).
    """
    want_in = bool(want & {INPUT, TASK})
    want_out = bool(want & {OUTPUT, ANSWER})
    inputs: list[Message] = []
    outputs: list[Message] = []
    system: str | None = None
    tools: list[dict[str, Any]] | None = None
    seen_input = seen_output = False
    for name, body in events:
        if name == DETAILS_EVENT:
            if want_in and "gen_ai.input.messages" in body:
                inputs.extend(parse_messages(body["gen_ai.input.messages"]) or [])
                seen_input = True
            if want_out and "gen_ai.output.messages" in body:
                outputs.extend(parse_messages(body["gen_ai.output.messages"]) or [])
                seen_output = True
            system = system or parse_system(body.get("gen_ai.system_instructions"))
            if "gen_ai.tool.definitions" in body and tools is None:
                tools = parse_tool_definitions(body["gen_ai.tool.definitions"])
            continue
        role = _MESSAGE_EVENTS.get(name)
        if role is not None:
            content = body.get("content")
            if isinstance(content, dict) and isinstance(content.get("tools"), list):
                # OpenLLMetry sends the offered tools as a user-message event of their own.
                if tools is None:
                    tools = parse_tool_definitions(content["tools"])
                continue
            if not want_in and (role != "system" or system is not None):
                continue
            msg = _event_message(role, body)
            if msg is not None:
                inputs.append(msg)
                seen_input = True
                if role == "system" and msg.text:
                    system = system or msg.text
            continue
        if not want_out and name in ("gen_ai.choice", "gen_ai.content.completion"):
            continue
        if not want_in and name == "gen_ai.content.prompt":
            continue
        if name == "gen_ai.choice":
            msg = _choice_message(body)
            if msg is not None:
                outputs.append(msg)
                seen_output = True
            continue
        if name == "gen_ai.content.prompt":
            msgs = parse_messages(body.get("gen_ai.prompt"))
            if msgs is not None:
                inputs.extend(msgs)
                seen_input = True
            continue
        if name == "gen_ai.content.completion":
            raw = body.get("gen_ai.completion")
            msgs = parse_messages(raw)
            if msgs is None and isinstance(raw, str):
                msgs = [Message(role="assistant", text=raw)]
            if msgs is not None:
                outputs.extend(msgs)
                seen_output = True
    if ex.input is None and seen_input:
        ex.input = inputs
    if ex.output is None and seen_output:
        ex.output = outputs
    if ex.system is None:
        ex.system = system
    if ex.tools is None:
        ex.tools = tools


def _event_message(role: str, body: dict[str, Any]) -> Message | None:
    data: dict[str, Any] = {"role": body.get("role") or role}
    content = body.get("content")
    if content is not None:
        data["content"] = content
    if body.get("tool_calls") is not None:
        data["tool_calls"] = body["tool_calls"]
    if role == "tool":
        data["tool_call_id"] = body.get("id") or body.get("tool_call_id")
    return parse_message(data)


def _choice_message(body: dict[str, Any]) -> Message | None:
    message = loads_structured(body.get("message"))
    if isinstance(message, dict):
        data = dict(message)
        if not data.get("role"):
            data["role"] = "assistant"
        if data.get("tool_calls") is None and body.get("tool_calls") is not None:
            data["tool_calls"] = body["tool_calls"]  # OpenLLMetry puts them beside the message
        return parse_message(data)
    if message is None:
        content = body.get("content")
        if content is None:
            return None
        return parse_message({"role": "assistant", "content": content})
    return parse_message({"role": "assistant", "content": message})


SPEC = DialectSpec(
    "genai",
    GenAI(),
    key_prefixes=("gen_ai.",),
    name_prefixes=(
        "invoke_agent",
        "create_agent",
        "execute_tool",
        "chat",  # `chat {model}`
        "text_completion",
        "generate_content",
        "embeddings",
    ),
    # The provider instrumentations write GenAI spans under their own scope names.
    scope_markers=(
        "gen_ai",
        "genai",
        "openai",
        "anthropic",
        "bedrock",
        "vertex",
        "mistral",
        "cohere",
        "ollama",
        "groq",
        "litellm",
    ),
    event_prefixes=("gen_ai.",),
    capture="OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=span_only (or span_and_event; "
    "event_only puts content in log records only, so export logs too; with "
    "opentelemetry-util-genai 1.x `true` is not a mode and captures nothing), or the "
    "framework's own content switch",
    agent_attributes=((OP, "invoke_agent"),),
    routing_keys=(OP, "gen_ai.system", "gen_ai.provider.name"),
)

SPEC_OLD = DialectSpec(
    "genai-old",
    GenAIOld(),
    key_prefixes=("gen_ai.",),
    event_prefixes=("gen_ai.",),  # content in log events
    routing_keys=("gen_ai.system",),
    capture="OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true for instrumentations "
    "before opentelemetry-util-genai 1.x (event_only / span_and_event with it), and export "
    "logs: content travels in log events",
)
