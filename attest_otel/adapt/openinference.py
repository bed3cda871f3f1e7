"""OpenInference (Arize/Phoenix): `openinference.span.kind` on every span.

Run I/O is generic (`input.value` / `output.value`, text or JSON); LLM messages are flattened
with indexes (`llm.input_messages.N.message.*`). Instrumentor quirks handled here:

- OpenAI Agents: handoffs are TOOL spans named `handoff to {agent}` with no `tool.name`;
  function spans carry no call id; hidden content is the literal `__REDACTED__`.
- LangChain/LangGraph: every graph node that the instrumentor calls "agent" is an AGENT span
  (one per step), and the run is the graph. A node is recognised by the `langgraph_node` in
  the span's `metadata` being the span's own name. Tool outputs are serialised ToolMessages,
  which carry the call id. Users attach run metadata (our policy, too) in `metadata`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from attest_otel.adapt.base import (
    ALL,
    ANSWER,
    INPUT,
    OUTPUT,
    REDACTED,
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
    call_arguments,
    captured,
    clean_id,
    loads_lenient,
    loads_structured,
    policy_attrs,
    strip_method,
)
from attest_otel.adapt.messages import (
    answer_in,
    assistant_text,
    last_user_text,
    norm_role,
    parse_generations,
    parse_message,
    parse_messages,
    task_in,
    tool_definition,
)
from attest_otel.adapt.spec import DialectSpec
from attest_otel.model import LogRecord, Span

KIND = "openinference.span.kind"

_KIND_ROLES = {
    "AGENT": Role.AGENT,
    "TOOL": Role.TOOL,
    "LLM": Role.MODEL,
    "CHAIN": Role.OTHER,
}


class OpenInference:
    name = "openinference"

    def detect(self, span: Span) -> Role | None:
        attrs = span.attributes
        kind = attrs.get(KIND)
        if kind is None:
            return None
        role = _KIND_ROLES.get(str(kind).upper(), Role.OTHER)
        if role is Role.TOOL and "tool.name" not in attrs and span.name.startswith("handoff"):
            return Role.HANDOFF
        if role is Role.AGENT and "metadata" in attrs and _is_graph_node(span):
            return Role.OTHER
        return role

    def agent_name(self, span: Span) -> str | None:
        attrs = span.attributes
        return (
            attr_str(attrs, "agent.name")
            or attr_str(attrs, "graph.node.name")
            # CrewAI: the role; its span is named `<role>._execute_core`
            or attr_str(attrs, "graph.node.id")
            or strip_method(span.name)
        )

    def tool(self, span: Span) -> ToolInfo:
        attrs = span.attributes
        args = attrs.get("input.value")
        result = attrs.get("output.value")
        info = ToolInfo(
            name=attr_str(attrs, "tool.name") or strip_method(span.name),
            call_id=clean_id(attrs.get("tool.id") or attrs.get("tool_call.id")),
            arguments=call_arguments(loads_lenient(args)) if captured(args) else None,
            arguments_captured=captured(args),
        )
        if captured(result):
            info.output_captured = True
            info.output = loads_lenient(result)
            message = _tool_message(info.output)
            if message is not None:
                reply = message.tool_results[0]
                info.output = reply.content
                info.call_id = info.call_id or reply.call_id
        if span.name.startswith("handoff") and "tool.name" not in attrs:
            info.name = None
            target = span.name.removeprefix("handoff to").strip()
            if not target and captured(result) and isinstance(result, str):
                target = result
            info.handoff_target = target or None
        return info

    def exchange(self, span: Span, logs: Sequence[LogRecord], want: Want = ALL) -> Exchange:
        attrs = span.attributes
        if attrs.get(KIND) == "LLM":
            return _llm_exchange(attrs, want)
        ex = Exchange()
        raw_in = attrs.get("input.value")
        if want & {TASK, INPUT} and captured(raw_in):
            ex.task, ex.input = _task(raw_in, INPUT in want)
        raw_out = attrs.get("output.value")
        if ANSWER in want and captured(raw_out):
            ex.answer = _answer(raw_out)
        if TASK in want and not ex.task and captured(raw_out):
            ex.task = _task_in_output(raw_out)
        return ex

    def policy_values(self, span: Span) -> tuple[Any, Any]:
        attrs = span.attributes
        allowed, fallbacks = policy_attrs(attrs)
        if (allowed is None or fallbacks is None) and "metadata" in attrs:
            meta = loads_structured(attrs["metadata"])
            if isinstance(meta, dict):
                if allowed is None:
                    allowed = meta.get("attest.allowed_tools")
                if fallbacks is None:
                    fallbacks = meta.get("attest.tool_fallbacks")
        return allowed, fallbacks


def _is_graph_node(span: Span) -> bool:
    """LangGraph nodes are AGENT spans whose metadata names them as the current node."""
    meta = loads_structured(span.attributes["metadata"])
    return isinstance(meta, dict) and meta.get("langgraph_node") == span.name


def _tool_message(value: Any) -> Message | None:
    """A LangChain ToolMessage as a tool's output: its content is the result, with the id."""
    if isinstance(value, dict) and (
        value.get("type") == "tool" or (value.get("lc") is not None and "kwargs" in value)
    ):
        msg = parse_message(value)
        if msg is not None and msg.role == "tool" and msg.tool_results:
            return msg
    return None


def _task(raw: Any, want_input: bool) -> tuple[str | None, list[Message] | None]:
    value = loads_structured(raw)
    if isinstance(value, str):
        return value, None
    if isinstance(value, dict):
        for key in ("input", "task", "question", "query", "prompt"):
            found = value.get(key)
            if isinstance(found, str):
                return found, None
    if want_input:
        msgs = parse_messages(value)
        return last_user_text(msgs), msgs
    return task_in(value), None


def _task_in_output(raw: Any) -> str | None:
    """A task object handed back with the result (CrewAI's TaskOutput: `description`), else
    the first user text of the conversation the output carries."""
    value = loads_structured(raw)
    if isinstance(value, dict):
        found = value.get("description")
        if isinstance(found, str) and found:
            return found
        return task_in(value, 0)
    return None


def _answer(raw: Any) -> str | None:
    value = loads_structured(raw)
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        for key in ("output", "answer", "final_output", "result", "raw"):
            found = value.get(key)
            if isinstance(found, str):
                return found
    return answer_in(value)


_GAP = 3
"""Missing indexes tolerated before a flattened list is taken to end."""


def _llm_exchange(attrs: dict[str, Any], want: Want) -> Exchange:
    """An LLM span: the flattened messages, else the raw I/O JSON.

    Flattened lists are read by probing their keys index by index, not by scanning the span:
    an LLM span late in a run carries the whole history, and only the part asked for is read.
    """
    ex = Exchange()
    if want & {INPUT, TASK, SYSTEM}:
        ex.input = _probe_messages(attrs, "llm.input_messages.")
        if ex.input is None and captured(attrs.get("input.value")):
            ex.input = _request_messages(attrs["input.value"])
        if ex.input is not None:
            systems = [m.text for m in ex.input if m.role == "system" and m.text]
            ex.system = "\n".join(systems) if systems else None
            ex.task = last_user_text(ex.input)
    if want & {OUTPUT, ANSWER}:
        ex.output = _probe_messages(attrs, "llm.output_messages.")
        if ex.output is None and captured(attrs.get("output.value")):
            ex.output = _response_messages(attrs["output.value"])
        if ex.output is not None:
            ex.answer = assistant_text(ex.output)
    if TOOLS in want:
        tools: list[dict[str, Any]] = []
        for schema in _probe(attrs, "llm.tools.", ".tool.json_schema"):
            schema = loads_structured(schema)
            if isinstance(schema, dict):
                tools.extend(tool_definition(schema))
        ex.tools = tools or None
    return ex


def _probe(attrs: dict[str, Any], prefix: str, suffix: str) -> list[Any]:
    """Values of `{prefix}{i}{suffix}` for i = 0, 1, ... tolerating short gaps."""
    out: list[Any] = []
    i = misses = 0
    while misses < _GAP:
        value = attrs.get(f"{prefix}{i}{suffix}")
        if value is None:
            misses += 1
        else:
            misses = 0
            out.append(value)
        i += 1
    return out


def _probe_messages(attrs: dict[str, Any], prefix: str) -> list[Message] | None:
    out: list[Message] = []
    i = misses = 0
    while misses < _GAP:
        base = f"{prefix}{i}.message."
        i += 1
        if base + "role" not in attrs and base + "content" not in attrs:
            misses += 1
            continue
        misses = 0
        out.append(_probe_message(attrs, base))
    return out or None


def _probe_message(attrs: dict[str, Any], base: str) -> Message:
    """One flattened message: `role`, `content`, `tool_calls.M.tool_call.*`, `contents.K.*`."""
    role = norm_role(attrs.get(base + "role"))
    msg = Message(role=role)
    content = attrs.get(base + "content")
    texts: list[str] = []
    if isinstance(content, str) and content != REDACTED:
        texts.append(content)
    j = 0
    while True:
        call = f"{base}tool_calls.{j}.tool_call."
        name = attrs.get(call + "function.name")
        if name is None:
            break
        args = attrs.get(call + "function.arguments")
        msg.tool_calls.append(
            ToolRequest(clean_id(attrs.get(call + "id")), str(name), loads_lenient(args))
        )
        j += 1
    if not texts:
        k = 0
        while True:
            part = f"{base}contents.{k}.message_content."
            kind = attrs.get(part + "type")
            if kind is None:
                break
            text = attrs.get(part + "text")
            if kind == "text" and isinstance(text, str):
                texts.append(text)
            k += 1
    fn = attrs.get(base + "function_call_name")
    if fn and not msg.tool_calls:
        args = attrs.get(base + "function_call_arguments_json")
        msg.tool_calls.append(ToolRequest(None, str(fn), loads_lenient(args)))
    if role == "tool":
        msg.tool_results.append(
            ToolReply(
                clean_id(attrs.get(base + "tool_call_id")),
                REDACTED if content == REDACTED else "\n".join(texts),
                attr_str(attrs, base + "name"),
            )
        )
        texts = []
    msg.text = "\n".join(texts) if texts else None
    return msg


def _request_messages(raw: Any) -> list[Message] | None:
    """`input.value` of an LLM span: a provider request or LangChain's `{"messages": [[...]]}`."""
    value = loads_structured(raw)
    msgs = parse_messages(value)
    if isinstance(value, dict) and msgs is not None and isinstance(value.get("system"), str):
        msgs.insert(0, Message(role="system", text=value["system"]))
    return msgs


def _response_messages(raw: Any) -> list[Message] | None:
    value = loads_structured(raw)
    if isinstance(value, str):
        return [Message(role="assistant", text=value)]
    gens = parse_generations(value)
    if gens is not None:
        return gens
    if isinstance(value, dict):
        if isinstance(value.get("choices"), list):  # OpenAI chat completion
            out = []
            for choice in value["choices"]:
                if isinstance(choice, dict) and isinstance(choice.get("message"), dict):
                    msg = parse_message({"role": "assistant", **choice["message"]})
                    if msg is not None:
                        out.append(msg)
            return out
        if isinstance(value.get("output"), list):  # OpenAI Responses
            msgs = parse_messages(value["output"]) or []
            merged = Message(role="assistant")
            for m in msgs:
                merged.tool_calls.extend(m.tool_calls)
                if m.text:
                    merged.text = m.text if merged.text is None else merged.text + "\n" + m.text
            return [merged]
        if "content" in value:  # Anthropic message
            msg = parse_message({**value, "role": value.get("role") or "assistant"})
            return [msg] if msg is not None else None
    return parse_messages(value)


SPEC = DialectSpec(
    "openinference",
    OpenInference(),
    key_prefixes=("openinference.", "llm.", "tool."),  # span kind, llm.*, tool.name
    scope_markers=("openinference",),
    event_prefixes=("llm.",),
    capture="unset OPENINFERENCE_HIDE_INPUTS / OPENINFERENCE_HIDE_OUTPUTS (and the "
    "TraceConfig hide_* options)",
    role_keys=(KIND,),
    before_scopes=True,
)
