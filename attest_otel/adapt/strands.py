"""Strands Agents' native OTel (scope `strands.telemetry.tracer`).

Strands keeps content in span events, not attributes: per-message GenAI events by default
(`content` a JSON string of Bedrock content blocks), or the
`gen_ai.client.inference.operation.details` event with the latest conventions. On a tool span
the arguments are a `gen_ai.tool.message` event and the result a `gen_ai.choice` event (or
the tool_call / tool_call_response parts of the details event).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from attest_otel.adapt import genai
from attest_otel.adapt.base import (
    ALL,
    SYSTEM,
    TOOLS,
    Exchange,
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
from attest_otel.adapt.messages import parse_messages
from attest_otel.adapt.spec import DialectSpec
from attest_otel.model import LogRecord, Span

SCOPE = "strands.telemetry.tracer"
PROVIDER = "strands-agents"

_NAME_ROLES = {
    "invoke_swarm": Role.WORKFLOW,
    "invoke_graph": Role.WORKFLOW,
    "execute_event_loop_cycle": Role.OTHER,
}


class Strands:
    name = "strands"

    def detect(self, span: Span) -> Role | None:
        attrs = span.attributes
        if not (
            span.scope_name == SCOPE
            or attrs.get("gen_ai.system") == PROVIDER
            or attrs.get("gen_ai.provider.name") == PROVIDER
        ):
            return None
        role = _NAME_ROLES.get(span.name) or _NAME_ROLES.get(span.name.split(" ", 1)[0])
        if role is not None:
            return role
        return genai.op_role(span) or Role.OTHER

    def agent_name(self, span: Span) -> str | None:
        return attr_str(span.attributes, "gen_ai.agent.name") or span_name_suffix(
            span.name, "invoke_agent"
        )

    def tool(self, span: Span) -> ToolInfo:
        info = genai.tool_info(span)
        if info.output_captured:
            info.output = _result_text(info.output)
        if info.arguments_captured and info.output_captured:
            return info
        for ev in span.events:
            attrs = ev.attributes
            if ev.name == "gen_ai.tool.message" and not info.arguments_captured:
                content = attrs.get("content")
                if captured(content):
                    info.arguments = loads_lenient(content)
                    info.arguments_captured = True
                info.call_id = info.call_id or clean_id(attrs.get("id"))
            elif ev.name == "gen_ai.choice" and not info.output_captured:
                message = attrs.get("message")
                if captured(message):
                    info.output = _result_text(message)
                    info.output_captured = True
            elif ev.name == genai.DETAILS_EVENT:
                _details_tool(info, attrs)
        return info

    def exchange(self, span: Span, logs: Sequence[LogRecord], want: Want = ALL) -> Exchange:
        ex = genai.exchange(span, logs, want)
        attrs = span.attributes
        if TOOLS in want and ex.tools is None and "gen_ai.agent.tools" in attrs:
            names = loads_structured(attrs["gen_ai.agent.tools"])
            if isinstance(names, list):
                ex.tools = [
                    {"name": str(n), "description": None, "parameters": None} for n in names
                ]
        if SYSTEM in want and ex.system is None and "system_prompt" in attrs:
            ex.system = attr_str(attrs, "system_prompt")
        return ex

    def policy_values(self, span: Span) -> tuple[Any, Any]:
        return policy_attrs(span.attributes)


def _result_text(value: Any) -> Any:
    """A tool result as Bedrock content blocks (`[{"text": ...}]`) is that text."""
    value = loads_structured(value)
    if isinstance(value, dict) and "content" in value:
        value = value["content"]
    if isinstance(value, list):
        texts = [b["text"] for b in value if isinstance(b, dict) and isinstance(b.get("text"), str)]
        if len(texts) == len(value):
            return "\n".join(texts)
    return value


def _details_tool(info: ToolInfo, attrs: dict[str, Any]) -> None:
    if not info.arguments_captured and "gen_ai.input.messages" in attrs:
        for msg in parse_messages(attrs["gen_ai.input.messages"]) or ():
            for req in msg.tool_calls:
                info.arguments = req.arguments
                info.arguments_captured = True
                info.call_id = info.call_id or req.call_id
    if not info.output_captured and "gen_ai.output.messages" in attrs:
        for msg in parse_messages(attrs["gen_ai.output.messages"]) or ():
            for reply in msg.tool_results:
                info.output = _result_text(reply.content)
                info.output_captured = True
                info.call_id = info.call_id or reply.call_id


SPEC = DialectSpec(
    "strands",
    Strands(),
    scopes=(SCOPE,),
    scope_markers=("strands",),
    key_prefixes=("gen_ai.",),
    name_prefixes=("execute_event_loop_cycle", "invoke_agent", "execute_tool", "chat"),
    capture="OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental keeps content on spans",
)
