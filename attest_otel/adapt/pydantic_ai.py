"""pydantic-ai's own instrumentation (scope `pydantic-ai`), data formats 1 to 6.

Formats 1-2 name spans `agent run` / `running tool` and keep tool I/O in `tool_arguments` /
`tool_response`; 3+ use `invoke_agent {agent}` / `execute_tool {tool}` and the GenAI tool
attributes. Format 1 keeps messages as a JSON list of old-style GenAI events (`events` on
model spans, `all_messages_events` on the agent span); 2+ use the OTel parts format, with
the whole history on the agent span as `pydantic_ai.all_messages` and
`pydantic_ai.new_message_index` marking where this run began.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from attest_otel.adapt import genai
from attest_otel.adapt.base import (
    ALL,
    ANSWER,
    INPUT,
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
    parse_messages,
    parse_system,
    system_in,
    task_in,
    tool_definition,
)
from attest_otel.adapt.spec import DialectSpec
from attest_otel.model import LogRecord, Span

SCOPE = "pydantic-ai"

_NAME_ROLES = {
    "agent run": Role.AGENT,
    "running tool": Role.TOOL,
    "running tools": Role.OTHER,
}


class PydanticAI:
    name = "pydantic-ai"

    def detect(self, span: Span) -> Role | None:
        attrs = span.attributes
        if span.scope_name != SCOPE and not (
            "pydantic_ai.all_messages" in attrs
            or "all_messages_events" in attrs
            or "tool_arguments" in attrs
            or "model_request_parameters" in attrs
            or span.name in _NAME_ROLES
        ):
            return None
        role = _NAME_ROLES.get(span.name)
        if role is None:
            role = genai.op_role(span) or Role.OTHER
        if role is Role.TOOL and _is_output_function(span):
            return Role.OTHER
        return role

    def agent_name(self, span: Span) -> str | None:
        attrs = span.attributes
        return (
            attr_str(attrs, "gen_ai.agent.name")
            or attr_str(attrs, "agent_name")
            or span_name_suffix(span.name, "invoke_agent")
        )

    def tool(self, span: Span) -> ToolInfo:
        attrs = span.attributes
        args = attrs.get("gen_ai.tool.call.arguments", attrs.get("tool_arguments"))
        result = attrs.get("gen_ai.tool.call.result", attrs.get("tool_response"))
        return ToolInfo(
            name=attr_str(attrs, "gen_ai.tool.name") or span_name_suffix(span.name, "execute_tool"),
            call_id=clean_id(attrs.get("gen_ai.tool.call.id")),
            arguments=loads_lenient(args) if captured(args) else None,
            arguments_captured=captured(args),
            output=loads_lenient(result) if captured(result) else None,
            output_captured=captured(result),
        )

    def exchange(self, span: Span, logs: Sequence[LogRecord], want: Want = ALL) -> Exchange:
        attrs = span.attributes
        if span.name == "agent run" or attrs.get(genai.OP) == "invoke_agent":
            return _agent_exchange(span, want)
        ex = genai.exchange(span, logs, want)
        if ex.input is None and ex.output is None and "events" in attrs:
            events = loads_structured(attrs["events"])
            if isinstance(events, list):
                found = Exchange()
                genai.fill_from_events(found, _v1_events(events))
                genai.merge_exchange(ex, genai.finish(found, want))
        if TOOLS in want and ex.tools is None and "model_request_parameters" in attrs:
            ex.tools = _request_tools(attrs["model_request_parameters"])
        return ex

    def policy_values(self, span: Span) -> tuple[Any, Any]:
        return policy_attrs(span.attributes)


def _is_output_function(span: Span) -> bool:
    """Output functions/tools run as tool spans but are the structured answer, not tool use."""
    msg = span.attributes.get("logfire.msg")
    return isinstance(msg, str) and msg.startswith("running output function")


def _agent_exchange(span: Span, want: Want) -> Exchange:
    """The run span: `final_result` is the answer, the history from `new_message_index` on
    holds the task (earlier messages are `message_history` passed in)."""
    attrs = span.attributes
    ex = Exchange()
    history = attrs.get("pydantic_ai.all_messages")
    index = attrs.get("pydantic_ai.new_message_index")
    start = index if isinstance(index, int) else 0
    if history is None and "all_messages_events" in attrs:
        events = loads_structured(attrs["all_messages_events"])
        if isinstance(events, list):
            found = Exchange()
            genai.fill_from_events(found, _v1_events(events))
            history = (found.input or []) + (found.output or [])
            ex.system = found.system
    if SYSTEM in want and ex.system is None:
        ex.system = parse_system(attrs.get("gen_ai.system_instructions"))
        if ex.system is None and isinstance(history, str):
            ex.system = system_in(history)
    if history is not None:
        if isinstance(history, list) and all(isinstance(m, Message) for m in history):
            msgs: list[Message] | None = history
        else:
            msgs = parse_messages(history) if INPUT in want else None
        if INPUT in want:
            ex.input = msgs
        if TASK in want:
            if msgs is not None:
                ex.task = next((m.text for m in msgs[start:] if m.role == "user" and m.text), None)
            else:
                ex.task = task_in(history, start)
        if ANSWER in want and "final_result" not in attrs:
            ex.answer = assistant_text(msgs) if msgs is not None else answer_in(history)
    if "final_result" in attrs:
        final = attrs["final_result"]
        ex.answer = final if isinstance(final, str) else genai_json(final)
    return ex


def genai_json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _v1_events(events: list[Any]) -> list[tuple[str, dict[str, Any]]]:
    """Format 1's JSON list of event dicts, each naming itself in `event.name`."""
    out: list[tuple[str, dict[str, Any]]] = []
    for ev in events:
        if isinstance(ev, dict):
            name = ev.get("event.name")
            if isinstance(name, str):
                out.append((name, ev))
    return out


def _request_tools(value: Any) -> list[dict[str, Any]] | None:
    params = loads_structured(value)
    if not isinstance(params, dict):
        return None
    tools = params.get("function_tools")
    if not isinstance(tools, list):
        return None
    return [d for t in tools if isinstance(t, dict) for d in tool_definition(t)]


SPEC = DialectSpec(
    "pydantic-ai",
    PydanticAI(),
    scopes=(SCOPE,),
    scope_markers=("pydantic-ai", "pydantic_ai"),
    key_prefixes=(
        "gen_ai.",  # data format 3+
        "tool_",  # format 1-2: tool_arguments, tool_response
        "agent",  # agent_name
        "final_result",
        "pydantic_ai.",  # pydantic_ai.all_messages, pydantic_ai.new_message_index
        "all_messages",  # format 1: all_messages_events
        "model_request_parameters",
        "logfire.",  # through Logfire
    ),
    name_prefixes=("agent", "running tool", "final_result", "invoke_agent", "execute_tool"),
    capture="InstrumentationSettings(include_content=True)",
    agent_span_names=("agent run",),
)
