"""LangSmith's OTel export (`LANGSMITH_OTEL_ENABLED`): one span per LangSmith run.

`langsmith.span.kind` is the run type; the span name is the run name (a tool's name, a model
class, a graph). I/O is the run's whole `inputs` / `outputs` as JSON in the deprecated
`gen_ai.prompt` / `gen_ai.completion` names (a different meaning from GenAI's). There is no
agent run type: a trace is one run at its root, which is how LangSmith itself shows it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from attest_otel.adapt.base import (
    ALL,
    Exchange,
    Message,
    Role,
    ToolInfo,
    Want,
    captured,
    loads_lenient,
    loads_structured,
    policy_attrs,
)
from attest_otel.adapt.messages import (
    assistant_text,
    last_user_text,
    parse_generations,
    parse_message,
    parse_messages,
)
from attest_otel.adapt.spec import DialectSpec
from attest_otel.model import LogRecord, Span

_KIND_ROLES = {
    "llm": Role.MODEL,
    "tool": Role.TOOL,
    "chain": Role.WORKFLOW,
}


class LangSmith:
    name = "langsmith"

    def detect(self, span: Span) -> Role | None:
        attrs = span.attributes
        kind = attrs.get("langsmith.span.kind")
        if kind is None:
            if "langsmith.trace.id" not in attrs:
                return None
            return Role.OTHER
        return _KIND_ROLES.get(str(kind).lower(), Role.OTHER)

    def agent_name(self, span: Span) -> str | None:
        return span.name or None

    def tool(self, span: Span) -> ToolInfo:
        attrs = span.attributes
        info = ToolInfo(name=span.name or None)
        raw_in = attrs.get("gen_ai.prompt")
        if captured(raw_in):
            info.arguments = _unwrap(loads_lenient(raw_in), "input")
            info.arguments_captured = True
        raw_out = attrs.get("gen_ai.completion")
        if captured(raw_out):
            out = _unwrap(loads_lenient(raw_out), "output")
            msg = parse_message(out) if isinstance(out, dict) else None
            if msg is not None and msg.role == "tool" and msg.tool_results:
                out = msg.tool_results[0].content
                info.call_id = msg.tool_results[0].call_id
            info.output = out
            info.output_captured = True
        return info

    def exchange(self, span: Span, logs: Sequence[LogRecord], want: Want = ALL) -> Exchange:
        """Whole inputs/outputs as JSON: small for tools and chains, parsed whole."""
        attrs = span.attributes
        ex = Exchange()
        inputs = loads_structured(attrs.get("gen_ai.prompt"))
        outputs = loads_structured(attrs.get("gen_ai.completion"))
        if inputs is not None:
            ex.input = parse_messages(inputs)
            if isinstance(inputs, dict) and isinstance(inputs.get("input"), str):
                ex.task = inputs["input"]
            elif ex.input is not None:
                ex.task = last_user_text(ex.input)
            if ex.input is not None:
                systems = [m.text for m in ex.input if m.role == "system" and m.text]
                ex.system = "\n".join(systems) if systems else None
        if outputs is not None:
            ex.output = parse_generations(outputs) or parse_messages(outputs)
            if isinstance(outputs, dict) and isinstance(outputs.get("output"), str):
                ex.answer = outputs["output"]
                ex.output = [Message(role="assistant", text=outputs["output"])]
            else:
                ex.answer = assistant_text(ex.output)
        return ex

    def policy_values(self, span: Span) -> tuple[Any, Any]:
        attrs = span.attributes
        allowed, fallbacks = policy_attrs(attrs)
        if allowed is None:
            allowed = attrs.get("langsmith.metadata.attest.allowed_tools")
        if fallbacks is None:
            fallbacks = attrs.get("langsmith.metadata.attest.tool_fallbacks")
        return allowed, fallbacks


def _unwrap(value: Any, key: str) -> Any:
    """LangSmith wraps a single positional input/output as `{"input": x}` / `{"output": x}`."""
    if isinstance(value, dict) and len(value) == 1 and key in value:
        return value[key]
    return value


SPEC = DialectSpec(
    "langsmith",
    LangSmith(),
    scopes=("langsmith",),
    scope_markers=("langsmith",),
    key_prefixes=("langsmith.",),
    capture="LANGSMITH_HIDE_INPUTS / LANGSMITH_HIDE_OUTPUTS unset",
    role_keys=("langsmith.span.kind", "langsmith.trace.id"),
)
