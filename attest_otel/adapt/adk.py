"""Google ADK (scope `gcp.vertex.agent`, attributes `gcp.vertex.agent.*`).

`invocation` is the runner's turn (a container), `invoke_agent {agent}` (older:
`agent_run [{agent}]`) the run, `call_llm` the model step, `execute_tool {tool}` the tools with
JSON arguments and results in ADK's own attributes. Model content is Gemini-shaped JSON in
`gcp.vertex.agent.llm_request` / `llm_response`; with the latest conventions ADK also sends
`gen_ai.client.inference.operation.details` log records, read as a fallback. With content
capture off ADK writes empty values rather than dropping the attributes.
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
    Want,
    attr_str,
    loads_lenient,
    loads_structured,
    policy_attrs,
    span_name_suffix,
)
from attest_otel.adapt.messages import (
    parse_message,
    parse_system,
    parse_tool_definitions,
    tool_definition,
)
from attest_otel.adapt.spec import DialectSpec
from attest_otel.model import LogRecord, Span

SCOPE = "gcp.vertex.agent"
_P = "gcp.vertex.agent."
_MARKERS = (
    _P + "llm_request",
    _P + "tool_call_args",
    _P + "tool_response",
    _P + "invocation_id",
    _P + "event_id",
)


class ADK:
    name = "adk"

    def detect(self, span: Span) -> Role | None:
        attrs = span.attributes
        if not (
            span.scope_name == SCOPE
            or attrs.get("gen_ai.system") == SCOPE
            or not attrs.keys().isdisjoint(_MARKERS)  # `any(...)`, without a generator
        ):
            return None
        name = span.name
        if name == "invocation":
            return Role.WORKFLOW
        if name == "call_llm":
            return Role.MODEL
        if name.startswith("agent_run"):
            return Role.AGENT
        if name == "execute_tool (merged)" or name == "send_data":
            return Role.OTHER
        return genai.op_role(span) or Role.OTHER

    def agent_name(self, span: Span) -> str | None:
        name = attr_str(span.attributes, "gen_ai.agent.name")
        if name:
            return name
        if span.name.startswith("agent_run"):
            return span.name[len("agent_run") :].strip(" []") or None
        return span_name_suffix(span.name, "invoke_agent")

    def tool(self, span: Span) -> ToolInfo:
        info = genai.tool_info(span)
        attrs = span.attributes
        args = attrs.get(_P + "tool_call_args")
        if not info.arguments_captured and _content(args):
            info.arguments = loads_lenient(args)
            info.arguments_captured = True
        result = attrs.get(_P + "tool_response")
        if not info.output_captured and _content(result):
            info.output = _unwrap(loads_lenient(result))
            info.output_captured = True
        return info

    def exchange(self, span: Span, logs: Sequence[LogRecord], want: Want = ALL) -> Exchange:
        attrs = span.attributes
        ex = Exchange()
        if want & {INPUT, TASK, SYSTEM, TOOLS}:
            request = loads_structured(attrs.get(_P + "llm_request"))
            if isinstance(request, dict) and request:
                contents = request.get("contents")
                if isinstance(contents, list):
                    ex.input = [m for m in map(parse_message, contents) if m is not None]
                config = request.get("config")
                if isinstance(config, dict):
                    ex.system = parse_system(config.get("system_instruction"))
                    tools = config.get("tools")
                    if isinstance(tools, list):
                        ex.tools = [
                            d for t in tools if isinstance(t, dict) for d in tool_definition(t)
                        ]
        if want & {OUTPUT, ANSWER}:
            response = loads_structured(attrs.get(_P + "llm_response"))
            if isinstance(response, dict) and response:
                content = response.get("content")
                msg = None
                if isinstance(content, dict):
                    msg = parse_message({"role": "assistant", **content})
                ex.output = [msg] if msg is not None else [Message(role="assistant")]
        if (want & {INPUT, TASK} and ex.input is None) or (
            want & {OUTPUT, ANSWER} and ex.output is None
        ):
            genai.merge_exchange(ex, genai.exchange(span, logs, want))
        if TOOLS in want and ex.tools is None and "gen_ai.tool.definitions" in attrs:
            ex.tools = parse_tool_definitions(attrs["gen_ai.tool.definitions"])
        return genai.finish(ex, want)

    def policy_values(self, span: Span) -> tuple[Any, Any]:
        return policy_attrs(span.attributes)


def _content(value: Any) -> bool:
    """ADK blanks content (`""`, `{}`) when capture is off: that is unknown, not empty."""
    return value is not None and value not in ("", "{}")


def _unwrap(value: Any) -> Any:
    if isinstance(value, dict) and len(value) == 1 and "result" in value:
        return value["result"]
    return value


SPEC = DialectSpec(
    "adk",
    ADK(),
    scopes=(SCOPE,),
    scope_markers=("vertex",),
    key_prefixes=(_P,),
    name_prefixes=("invocation", "call_llm", "agent"),  # `agent_run [x]` carries no attribute
    capture="ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS=true (ADK 2.x: "
    "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=span_only; `true` means event_only, "
    "content in log records)",
)
