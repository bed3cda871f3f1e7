"""OpenLLMetry / Traceloop: `traceloop.*` decorator spans and the LLM instrumentations.

Decorator spans (`@workflow`, `@agent`, `@tool`) are named `{entity}.{kind}` and keep I/O in
`traceloop.entity.input` (`{"args": [...], "kwargs": {...}}`) and `traceloop.entity.output`;
they carry no tool call id. LLM spans up to 0.4.x flatten messages as `gen_ai.prompt.N.*` /
`gen_ai.completion.N.*` with offered tools in `llm.request.functions.N.*`; from 0.5 they use
the GenAI message attributes, read by `genai`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from attest_otel.adapt import genai
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
    ToolReply,
    ToolRequest,
    Want,
    attr_str,
    captured,
    clean_id,
    loads_lenient,
    policy_attrs,
)
from attest_otel.adapt.messages import indexed, norm_role, parse_message, tool_definition
from attest_otel.adapt.spec import DialectSpec
from attest_otel.model import LogRecord, Span

_KIND_ROLES = {
    "agent": Role.AGENT,
    "tool": Role.TOOL,
    "workflow": Role.WORKFLOW,
    "handoff": Role.HANDOFF,
    "task": Role.OTHER,
    "unknown": Role.OTHER,
}

_MARKERS = (
    "llm.request.type",
    "gen_ai.prompt.0.role",
    "gen_ai.prompt.0.content",
    "gen_ai.completion.0.role",
    "gen_ai.completion.0.content",
    "llm.request.functions.0.name",
)


class OpenLLMetry:
    name = "openllmetry"

    def detect(self, span: Span) -> Role | None:
        attrs = span.attributes
        kind = attrs.get("traceloop.span.kind")
        if kind is not None:
            return _KIND_ROLES.get(str(kind), Role.OTHER)
        if "traceloop.entity.name" in attrs or "traceloop.workflow.name" in attrs:
            return genai.op_role(span) or Role.OTHER
        if not attrs.keys().isdisjoint(_MARKERS):  # one C-level test: asked of every span
            return Role.MODEL
        return None

    def agent_name(self, span: Span) -> str | None:
        attrs = span.attributes
        return (
            attr_str(attrs, "gen_ai.agent.name")
            or attr_str(attrs, "traceloop.entity.name")
            or attr_str(attrs, "traceloop.workflow.name")
            or _strip_kind(span.name)
        )

    def tool(self, span: Span) -> ToolInfo:
        attrs = span.attributes
        info = genai.tool_info(span)
        info.name = (
            attr_str(attrs, "gen_ai.tool.name")
            or attr_str(attrs, "traceloop.entity.name")
            or _strip_kind(span.name)
        )
        if not info.arguments_captured and captured(attrs.get("traceloop.entity.input")):
            info.arguments = unwrap_entity_input(attrs["traceloop.entity.input"])
            info.arguments_captured = True
        if not info.output_captured and captured(attrs.get("traceloop.entity.output")):
            info.output = loads_lenient(attrs["traceloop.entity.output"])
            info.output_captured = True
        if attrs.get("traceloop.span.kind") == "handoff":
            info.handoff_target = _handoff_target(span.name)
        return info

    def exchange(self, span: Span, logs: Sequence[LogRecord], want: Want = ALL) -> Exchange:
        attrs = span.attributes
        kind = attrs.get("traceloop.span.kind")
        if kind is not None and kind != "tool":
            ex = Exchange()
            if TASK in want and captured(attrs.get("traceloop.entity.input")):
                ex.task = _entity_text(unwrap_entity_input(attrs["traceloop.entity.input"]))
            if ANSWER in want and captured(attrs.get("traceloop.entity.output")):
                ex.answer = _entity_text(loads_lenient(attrs["traceloop.entity.output"]))
            rest = want - {p for p in (TASK, ANSWER) if getattr(ex, p) is not None}
            if rest:
                genai.merge_exchange(ex, genai.exchange(span, logs, rest))
            return ex
        ex = genai.exchange(span, logs, want)
        if (
            want & {INPUT, TASK, SYSTEM}
            and ex.input is None
            and (
                (TASK in want and ex.task is None)
                or (SYSTEM in want and ex.system is None)
                or INPUT in want
            )
        ):
            prompts = indexed(attrs, "gen_ai.prompt.")
            if prompts:
                ex.input = [_indexed_message(p) for p in prompts]
        if want & {OUTPUT, ANSWER} and ex.output is None and ex.answer is None:
            completions = indexed(attrs, "gen_ai.completion.")
            if completions:
                ex.output = [_indexed_message(c, "assistant") for c in completions]
        if TOOLS in want and ex.tools is None:
            functions = indexed(attrs, "llm.request.functions.")
            if functions:
                ex.tools = [d for f in functions for d in tool_definition(f)]
        return genai.finish(ex, want)

    def policy_values(self, span: Span) -> tuple[Any, Any]:
        return policy_attrs(span.attributes)


def _strip_kind(name: str) -> str | None:
    base, dot, kind = name.rpartition(".")
    if dot and kind in _KIND_ROLES:
        return base or None
    return name or None


def _handoff_target(name: str) -> str | None:
    """`{from} → {to}.handoff`: the agent control passed to."""
    base = _strip_kind(name) or ""
    for arrow in ("→", "->"):
        if arrow in base:
            return base.split(arrow, 1)[1].strip() or None
    return None


def unwrap_entity_input(value: Any) -> Any:
    """`{"args": [], "kwargs": {...}}` -> the kwargs; `{"args": [x], "kwargs": {}}` -> x."""
    data = loads_lenient(value)
    if isinstance(data, dict) and set(data) <= {"args", "kwargs"}:
        args = data.get("args") or []
        kwargs = data.get("kwargs") or {}
        if not args and isinstance(kwargs, dict):
            return kwargs
        if isinstance(args, list) and len(args) == 1 and not kwargs:
            return args[0]
    return data


def _entity_text(value: Any) -> str | None:
    value = loads_lenient(value)
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and len(value) == 1:
        only = next(iter(value.values()))
        if isinstance(only, str):
            return only
    return None


def _indexed_message(flat: dict[str, Any], default_role: str = "user") -> Message:
    """One `gen_ai.prompt.N.` / `gen_ai.completion.N.` group; content may be provider blocks."""
    role = norm_role(flat.get("role") or default_role)
    content = flat.get("content")
    data: dict[str, Any] = {"role": role}
    if content is not None:
        data["content"] = content
    msg = parse_message(data) or Message(role=role)
    for call in indexed(flat, "tool_calls."):
        if call.get("name"):
            args = loads_lenient(call.get("arguments"))
            msg.tool_calls.append(ToolRequest(clean_id(call.get("id")), str(call["name"]), args))
    if role == "tool" and flat.get("tool_call_id") is not None:
        call_id = clean_id(flat.get("tool_call_id"))
        if msg.tool_results:
            if msg.tool_results[0].call_id is None:
                msg.tool_results[0].call_id = call_id
        else:
            msg.tool_results.append(ToolReply(call_id, msg.text or ""))
            msg.text = None
    return msg


SPEC = DialectSpec(
    "openllmetry",
    OpenLLMetry(),
    scopes=("traceloop.tracer",),
    scope_markers=("traceloop",),
    # traceloop.span.kind / entity.* / workflow.name; llm.request.type, gen_ai.prompt.N.*
    key_prefixes=("traceloop.", "llm.", "gen_ai."),
    name_prefixes=("openai.", "anthropic.", "handoff"),  # `openai.chat`
    # `{name}.tool` and the other decorator kinds; `openai.chat`, `cohere.completion`
    name_suffixes=(".tool", ".agent", ".workflow", ".task", ".chat", ".completion", ".embeddings"),
    capture="TRACELOOP_TRACE_CONTENT=true",
    role_keys=(
        "traceloop.span.kind",
        "traceloop.entity.name",
        "traceloop.workflow.name",
        *_MARKERS,
    ),
)
