"""Vercel AI SDK: legacy `ai.*` spans (v3 to v7 `LegacyOpenTelemetry`) and v7's GenAI spans.

Legacy: `ai.generateText` / `ai.streamText` is the run, `*.doGenerate` / `*.doStream` the model
steps, `ai.toolCall` the tools; content is JSON in `ai.prompt`, `ai.prompt.messages`,
`ai.response.*`. v7's `OpenTelemetry` integration speaks GenAI (read by `genai`), adds an
`agent_step` span per step and names the run `invoke_agent {modelId}` with the functionId in
`gen_ai.agent.name`. The policy rides in telemetry metadata (v3-v6) or in the runtime context
(v7), so both prefixes are read.
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
    ToolRequest,
    Want,
    attr_str,
    captured,
    clean_id,
    loads_lenient,
    loads_structured,
    policy_attrs,
)
from attest_otel.adapt.messages import (
    last_user_text,
    parse_messages,
    parse_system,
    parse_tool_definitions,
    system_in,
    system_text,
    task_in,
    tool_definition,
)
from attest_otel.adapt.spec import DialectSpec
from attest_otel.model import LogRecord, Span

POLICY_PREFIXES = ("ai.telemetry.metadata.", "ai.settings.context.", "ai.settings.runtimeContext.")

_RUN_OPS = ("ai.generateText", "ai.streamText", "ai.generateObject", "ai.streamObject")
_V7_SCOPES = ("gen_ai", "ai")


def vercel_policy(attrs: dict[str, Any]) -> tuple[Any, Any]:
    allowed, fallbacks = policy_attrs(attrs)
    for prefix in POLICY_PREFIXES:
        if allowed is None:
            allowed = attrs.get(prefix + "attest.allowed_tools")
        if fallbacks is None:
            fallbacks = attrs.get(prefix + "attest.tool_fallbacks")
    return allowed, fallbacks


class VercelLegacy:
    name = "vercel"

    def detect(self, span: Span) -> Role | None:
        op = span.attributes.get("ai.operationId")
        if op is None:
            return None
        if op == "ai.toolCall":
            return Role.TOOL
        if op in _RUN_OPS:
            return Role.AGENT
        if isinstance(op, str) and (op.endswith(".doGenerate") or op.endswith(".doStream")):
            return Role.MODEL
        return Role.OTHER

    def agent_name(self, span: Span) -> str | None:
        attrs = span.attributes
        return attr_str(attrs, "ai.telemetry.functionId") or attr_str(attrs, "resource.name")

    def tool(self, span: Span) -> ToolInfo:
        attrs = span.attributes
        args = attrs.get("ai.toolCall.args", attrs.get("ai.toolCall.input"))
        result = attrs.get("ai.toolCall.result", attrs.get("ai.toolCall.output"))
        return ToolInfo(
            name=attr_str(attrs, "ai.toolCall.name"),
            call_id=clean_id(attrs.get("ai.toolCall.id")),
            arguments=loads_lenient(args) if captured(args) else None,
            arguments_captured=captured(args),
            output=loads_lenient(result) if captured(result) else None,
            output_captured=captured(result),
        )

    def exchange(self, span: Span, logs: Sequence[LogRecord], want: Want = ALL) -> Exchange:
        attrs = span.attributes
        ex = Exchange()
        if "ai.prompt" in attrs and (want & {INPUT, TASK, SYSTEM}):
            _read_prompt(ex, attrs["ai.prompt"])
        raw = attrs.get("ai.prompt.messages")
        if raw is not None:
            if INPUT in want:
                ex.input = parse_messages(raw)
            if TASK in want and ex.task is None:
                ex.task = last_user_text(ex.input) if ex.input is not None else task_in(raw)
            if SYSTEM in want and ex.system is None:
                ex.system = system_text(ex.input) if ex.input is not None else system_in(raw)
        if TOOLS in want and "ai.prompt.tools" in attrs:
            ex.tools = _tools(attrs["ai.prompt.tools"])
        if want & {OUTPUT, ANSWER}:
            if "ai.response.text" in attrs or "ai.response.toolCalls" in attrs:
                msg = Message(role="assistant", text=attr_str(attrs, "ai.response.text") or None)
                if OUTPUT in want:
                    calls = loads_structured(attrs.get("ai.response.toolCalls"))
                    if isinstance(calls, list):
                        msg.tool_calls = [c for c in map(_response_call, calls) if c is not None]
                ex.output = [msg]
                ex.answer = msg.text
            elif "ai.response.object" in attrs:
                ex.answer = attr_str(attrs, "ai.response.object")
        return ex

    def policy_values(self, span: Span) -> tuple[Any, Any]:
        return vercel_policy(span.attributes)


def _response_call(item: Any) -> ToolRequest | None:
    """`ai.response.toolCalls` items: `{toolCallId, toolName, args}` (v4) or `input` (v5+)."""
    if not isinstance(item, dict) or not item.get("toolName"):
        return None
    args = item.get("input", item.get("args"))
    return ToolRequest(clean_id(item.get("toolCallId")), str(item["toolName"]), loads_lenient(args))


def _read_prompt(ex: Exchange, value: Any) -> None:
    """`ai.prompt` = `{system?, prompt?, messages?}`: the run's own task and system prompt."""
    prompt = loads_structured(value)
    if isinstance(prompt, str):
        ex.task = prompt
        return
    if not isinstance(prompt, dict):
        return
    ex.system = parse_system(prompt.get("system"))
    if isinstance(prompt.get("prompt"), str):
        ex.task = prompt["prompt"]
    elif prompt.get("prompt") is not None:
        msgs = parse_messages(prompt["prompt"])
        ex.task = last_user_text(msgs)
    if prompt.get("messages") is not None:
        ex.input = parse_messages(prompt["messages"])
        if ex.task is None:
            ex.task = last_user_text(ex.input)


def _tools(value: Any) -> list[dict[str, Any]] | None:
    """`ai.prompt.tools`: a string array, each item one JSON tool definition."""
    value = loads_structured(value)
    if not isinstance(value, list):
        return parse_tool_definitions(value)
    out: list[dict[str, Any]] = []
    for item in value:
        item = loads_structured(item)
        if isinstance(item, dict):
            out.extend(tool_definition(item))
    return out


class VercelGenAI(genai.GenAI):
    """v7's GenAI spans: scope `gen_ai` (or `ai`), `agent_step` steps, runtime-context policy."""

    name = "vercel-genai"

    def detect(self, span: Span) -> Role | None:
        attrs = span.attributes
        op = attrs.get(genai.OP)
        if op is None:
            return None
        if op == "agent_step":
            return Role.OTHER
        if span.scope_name in _V7_SCOPES:
            return genai.op_role(span)
        return None

    def policy_values(self, span: Span) -> tuple[Any, Any]:
        return vercel_policy(span.attributes)


_CAPTURE = "experimental_telemetry: {recordInputs: true, recordOutputs: true}"

SPEC_LEGACY = DialectSpec(
    "vercel",
    VercelLegacy(),
    scopes=("ai",),
    key_prefixes=("ai.",),  # ai.operationId, ai.toolCall.*, ai.prompt...
    name_prefixes=("ai.",),  # `ai.generateText`, `ai.streamText`, `ai.toolCall`
    name_suffixes=(".doGenerate", ".doStream"),
    event_prefixes=("ai.",),
    routing_keys=("ai.operationId",),
    capture=_CAPTURE,
)

SPEC_V7 = DialectSpec(
    "vercel-genai",
    VercelGenAI(),
    scopes=_V7_SCOPES,
    key_prefixes=("gen_ai.",),
    name_prefixes=("step ",),  # `step N`
    capture=_CAPTURE,
)
