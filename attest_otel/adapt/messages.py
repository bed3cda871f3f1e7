"""Chat messages in every shape the dialects carry them, turned into `Message`s.

One lenient parser instead of one per dialect, because the shapes cross dialect lines: the
OTel parts format appears in GenAI, OpenLLMetry 0.5, pydantic-ai and Vercel v7; provider
content blocks (Anthropic, Bedrock, Gemini, OpenAI Responses) appear inside several of them;
LangChain's serialised messages appear in OpenInference and LangSmith alike. Unknown shapes
are skipped, never raised: a message we cannot read must not cost the rest of the run.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from attest_otel.adapt.base import (
    Message,
    ToolReply,
    ToolRequest,
    clean_id,
    loads_lenient,
    loads_structured,
)

_ROLE_ALIASES = {
    "human": "user",
    "ai": "assistant",
    "model": "assistant",
    "developer": "system",
    "function": "tool",
    "humanmessage": "user",
    "aimessage": "assistant",
    "aimessagechunk": "assistant",
    "systemmessage": "system",
    "toolmessage": "tool",
    "functionmessage": "tool",
}


CACHED_TEXT_CHARS = 65_536
"""Texts longer than this are parsed each time: the caches below live as long as the process
and must not pin hostile multi-megabyte strings."""

_BLOCK_ROLES = ("assistant", "tool", "user", "system")
"""Roles whose string content may be a JSON array of content blocks (Strands, OpenLLMetry)."""


def norm_role(role: Any) -> str:
    text = str(role or "").strip().lower()
    return _ROLE_ALIASES.get(text, text)


def message_items(value: Any) -> list[Any] | None:
    """The raw message list in a value: a JSON string or structured list, `{"messages": ...}`,
    LangChain's batches `[[...]]`, or one message on its own. None if it holds none."""
    value = loads_structured(value)
    if isinstance(value, dict):
        inner = value.get("messages")
        if inner is None:
            return [value]
        value = loads_structured(inner)
    if not isinstance(value, list):
        return None
    items: list[Any] = value
    if len(items) == 1 and isinstance(items[0], list):
        items = items[0]  # LangChain batches: [[msg, msg]]
    return items


def parse_messages(value: Any) -> list[Message] | None:
    """A message list from a JSON string or structured value; None if it is not one."""
    items = message_items(value)
    if items is None:
        return None
    out: list[Message] = []
    for item in items:
        msg = parse_message(item)
        if msg is not None:
            out.append(msg)
    return out


def task_in(value: Any, start: int | None = None) -> str | None:
    """The task in a message list without reading all of it: the last user text, or with
    `start` (where this run's messages begin) the first user text from there."""
    return task_in_items(message_items(value), start)


def task_in_items(items: list[Any] | None, start: int | None = None) -> str | None:
    """`task_in` of what `message_items` returned (a caller that reads the same list for
    its system prompt too parses its JSON once)."""
    if not items:
        return None
    order = items[start:] if start is not None else reversed(items)
    for item in order:
        msg = parse_message(item)
        if msg is not None and msg.role == "user" and msg.text:
            return msg.text
    return None


def system_in(value: Any) -> str | None:
    """System messages at the head of a message list (where providers put them)."""
    return system_in_items(message_items(value))


def system_in_items(items: list[Any] | None) -> str | None:
    """`system_in` of what `message_items` returned."""
    texts: list[str] = []
    for item in items or ():
        msg = parse_message(item)
        if msg is None or msg.role != "system":
            break
        if msg.text:
            texts.append(msg.text)
    return "\n".join(texts) if texts else None


def answer_in(value: Any) -> str | None:
    """The last assistant text in a message list, reading from the end."""
    items = message_items(value)
    if not items:
        return None
    for item in reversed(items):
        msg = parse_message(item)
        if msg is not None and msg.role in ("assistant", "") and msg.text:
            return msg.text
    return None


def parse_message(item: Any) -> Message | None:
    """One message: OTel parts, OpenAI chat, provider blocks, LangChain, Gemini contents."""
    item = loads_structured(item)
    if not isinstance(item, dict):
        return None
    if item.get("lc") is not None and isinstance(item.get("kwargs"), dict):
        return _langchain(item)
    if "role" not in item and isinstance(item.get("data"), dict) and "type" in item:
        data = item["data"]  # langchain's messages_to_dict: {"type": ..., "data": {...}}
        return _langchain_plain({**data, "type": data.get("type") or item["type"]})
    if "role" not in item and "type" in item and "content" in item:
        return _langchain_plain(item)
    if item.get("type") in _OPENAI_ITEM_TYPES:
        return _openai_item(item)
    role = norm_role(item.get("role"))
    msg = Message(role=role)
    texts: list[str] = []
    if "parts" in item:
        _blocks(item["parts"], msg, texts)
    content = item.get("content")
    if content is not None:
        if isinstance(content, str):
            parsed = loads_structured(content) if role in _BLOCK_ROLES else None
            if isinstance(parsed, list) and parsed and all(_is_block(b) for b in parsed):
                _blocks(parsed, msg, texts)
            elif content:
                texts.append(content)
        else:
            _blocks(content, msg, texts)
    for call in _as_list(item.get("tool_calls")):
        req = _openai_tool_call(call)
        if req is not None:
            msg.tool_calls.append(req)
    fc = item.get("function_call")
    if isinstance(fc, dict) and fc.get("name"):
        args = loads_lenient(fc.get("arguments"))
        msg.tool_calls.append(ToolRequest(None, str(fc["name"]), args))
    if role == "tool":
        call_id = clean_id(item.get("tool_call_id") or item.get("id"))
        if not msg.tool_results and (call_id is not None or texts):
            msg.tool_results.append(
                ToolReply(call_id, "\n".join(texts), _opt_str(item.get("name")))
            )
            texts = []
    if texts:
        msg.text = "\n".join(texts)
    return msg


def _is_block(block: Any) -> bool:
    return isinstance(block, dict) and (
        "type" in block or "text" in block or "toolUse" in block or "toolResult" in block
    )


def _as_list(value: Any) -> list[Any]:
    value = loads_structured(value)
    if isinstance(value, list):
        return value
    return []


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)


def _openai_tool_call(call: Any) -> ToolRequest | None:
    """`{id, type: function, function: {name, arguments}}` or LangChain `{id, name, args}`."""
    if not isinstance(call, dict):
        return None
    fn = call.get("function")
    if isinstance(fn, dict):
        name = fn.get("name")
        args = fn.get("arguments")
    else:
        name = call.get("name")
        args = call.get("args", call.get("arguments", call.get("input")))
    if not name:
        return None
    return ToolRequest(clean_id(call.get("id")), str(name), loads_lenient(args))


def _blocks(value: Any, msg: Message, texts: list[str]) -> None:
    """Content blocks of any provider into `msg`; text pieces are collected into `texts`.

    A string is text even when it looks like JSON: a tool's JSON result is its text.
    """
    if isinstance(value, str):
        if value:
            texts.append(value)
        return
    if isinstance(value, dict):
        value = [value]
    if not isinstance(value, list):
        return
    for block in value:
        if isinstance(block, str):
            if block:
                texts.append(block)
        elif isinstance(block, dict):
            _block(block, msg, texts)


def _block(block: dict[str, Any], msg: Message, texts: list[str]) -> None:
    btype = block.get("type")
    if btype in ("text", "output_text", "input_text"):
        text = block.get("content", block.get("text"))
        if isinstance(text, str) and text:
            texts.append(text)
        return
    if btype in ("tool_call", "tool_use", "function_call", "tool-call"):
        name = block.get("name") or block.get("toolName")
        if name:
            args = block.get("arguments", block.get("input", block.get("args")))
            call_id = block.get("call_id") or block.get("toolCallId") or block.get("id")
            msg.tool_calls.append(ToolRequest(clean_id(call_id), str(name), loads_lenient(args)))
        return
    if btype in ("tool_call_response", "tool_result", "function_call_output", "tool-result"):
        call_id = (
            block.get("call_id")
            or block.get("tool_use_id")
            or block.get("toolCallId")
            or block.get("id")
        )
        error = bool(block.get("is_error"))
        if btype == "tool_call_response":
            content, error = _function_response(block.get("response", block.get("result")))
        elif btype == "tool_result":
            content = _flatten_content(block.get("content"))
        elif btype == "tool-result":
            content = block.get("output", block.get("result"))
        else:
            content = block.get("output")
        error = error or bool(block.get("is_error"))
        if isinstance(content, dict) and "type" in content and "value" in content:
            # Vercel v5+ tool output: {type: text|json|error-text|error-json, value}
            error = error or str(content["type"]).startswith("error")
            content = content["value"]
        name = block.get("name") or block.get("toolName")
        msg.tool_results.append(ToolReply(clean_id(call_id), content, _opt_str(name), error))
        return
    if "toolUse" in block:
        use = block["toolUse"]
        if isinstance(use, dict) and use.get("name"):
            msg.tool_calls.append(
                ToolRequest(clean_id(use.get("toolUseId")), str(use["name"]), use.get("input"))
            )
        return
    if "toolResult" in block:
        res = block["toolResult"]
        if isinstance(res, dict):
            msg.tool_results.append(
                ToolReply(
                    clean_id(res.get("toolUseId")),
                    _flatten_content(res.get("content")),
                    None,
                    res.get("status") == "error",
                )
            )
        return
    fcall = block.get("function_call") or block.get("functionCall")
    if isinstance(fcall, dict) and fcall.get("name"):
        msg.tool_calls.append(
            ToolRequest(clean_id(fcall.get("id")), str(fcall["name"]), fcall.get("args"))
        )
        return
    fresp = block.get("function_response") or block.get("functionResponse")
    if isinstance(fresp, dict):
        content, error = _function_response(fresp.get("response"))
        msg.tool_results.append(
            ToolReply(clean_id(fresp.get("id")), content, _opt_str(fresp.get("name")), error)
        )
        return
    if btype is None and isinstance(block.get("text"), str) and block["text"]:
        texts.append(block["text"])


def _flatten_content(content: Any) -> Any:
    """Tool result blocks (`[{"text": ...}]`, `[{"type": "text", "text": ...}]`) to plain text.

    The rules read a tool's output as text; a list of one text block is that text.
    """
    content = loads_structured(content)
    if isinstance(content, list):
        texts: list[str] = []
        for block in content:
            if isinstance(block, str):
                texts.append(block)
            elif isinstance(block, dict):
                if isinstance(block.get("text"), str):
                    texts.append(block["text"])
                elif "json" in block:
                    texts.append(json.dumps(block["json"], separators=(",", ":")))
                else:
                    return content
            else:
                return content
        return "\n".join(texts)
    return content


def _function_response(value: Any) -> tuple[Any, bool]:
    """A Gemini function response and whether it is an error. The Gemini API's convention is
    `{"output": ...}` (`{"result": ...}` from ADK and the google-genai SDK) for what the
    function returned and `{"error": ...}` for what it raised (google-genai's automatic
    function calling sends `{"error": "<exception>"}`): the value is what the tool said,
    and the error key alone is the protocol's own error flag (issue 25, class 3)."""
    if isinstance(value, dict) and len(value) == 1:
        ((key, inner),) = value.items()
        if key in ("result", "output"):
            return inner, False
        if key == "error" and inner not in (None, "", [], {}):
            return inner, True
    return value, False


_OPENAI_ITEM_TYPES = ("function_call", "function_call_output", "message", "reasoning")


def _openai_item(item: dict[str, Any]) -> Message | None:
    """OpenAI Responses API input/output items (OpenAI Agents' LLM spans)."""
    itype = item.get("type")
    if itype == "function_call":
        msg = Message(role="assistant")
        _block(item, msg, [])
        return msg
    if itype == "function_call_output":
        msg = Message(role="tool")
        _block(item, msg, [])
        return msg
    if itype == "message":
        msg = Message(role=norm_role(item.get("role")))
        texts: list[str] = []
        _blocks(item.get("content"), msg, texts)
        msg.text = "\n".join(texts) if texts else None
        return msg
    return None


def _langchain(item: dict[str, Any]) -> Message | None:
    """`{"lc": 1, "type": "constructor", "id": [..., "AIMessage"], "kwargs": {...}}`."""
    ident = item.get("id")
    cls = ident[-1] if isinstance(ident, list) and ident else ""
    kwargs = item["kwargs"]
    body = dict(kwargs)
    body.setdefault("type", str(cls))
    return _langchain_plain(body)


def _langchain_plain(item: dict[str, Any]) -> Message | None:
    """LangChain message dicts (`{"type": "human"|"ai"|"tool"|..., "content": ...}`)."""
    role = norm_role(item.get("type"))
    if role not in ("user", "assistant", "system", "tool"):
        return None
    msg = Message(role=role)
    texts: list[str] = []
    _blocks(item.get("content"), msg, texts)
    for call in _as_list(item.get("tool_calls")):
        req = _openai_tool_call(call)
        if req is not None:
            msg.tool_calls.append(req)
    if not msg.tool_calls:
        extra = item.get("additional_kwargs")
        if isinstance(extra, dict):
            for call in _as_list(extra.get("tool_calls")):
                req = _openai_tool_call(call)
                if req is not None:
                    msg.tool_calls.append(req)
    if role == "tool" and not msg.tool_results:
        msg.tool_results.append(
            ToolReply(
                clean_id(item.get("tool_call_id")),
                "\n".join(texts),
                _opt_str(item.get("name")),
                item.get("status") == "error",
            )
        )
        texts = []
    msg.text = "\n".join(texts) if texts else None
    return msg


def parse_system(value: Any) -> str | None:
    """System instructions: a string, a list of parts, or a list of strings."""
    if isinstance(value, str) and len(value) <= CACHED_TEXT_CHARS:
        return _system_from_text(value)
    return _parse_system(value)


@functools.lru_cache(maxsize=256)
def _system_from_text(value: str) -> str | None:
    """Cached: every model span of a run, and every run of an agent, repeats the same text."""
    return _parse_system(value)


def _parse_system(value: Any) -> str | None:
    value = loads_structured(value)
    if value is None:
        return None
    if isinstance(value, str):
        return value
    texts: list[str] = []
    _blocks(value, Message(role="system"), texts)
    return "\n".join(texts) if texts else None


def parse_tool_definitions(value: Any) -> list[dict[str, Any]] | None:
    """Offered tools as `{name, description, parameters}`, from any of the common schemas.

    A JSON string's result is cached and shared (the definitions repeat on every model span):
    callers copy the list before changing it and never change the definitions.
    """
    if isinstance(value, str) and len(value) <= CACHED_TEXT_CHARS:
        return _tool_definitions_from_text(value)
    return _parse_tool_definitions(value)


@functools.lru_cache(maxsize=256)
def _tool_definitions_from_text(value: str) -> list[dict[str, Any]] | None:
    return _parse_tool_definitions(value)


def _parse_tool_definitions(value: Any) -> list[dict[str, Any]] | None:
    value = loads_structured(value)
    if isinstance(value, dict):
        value = [value]
    if not isinstance(value, list):
        return None
    out: list[dict[str, Any]] = []
    for item in value:
        item = loads_structured(item)
        if isinstance(item, dict):
            out.extend(tool_definition(item))
    return out


def tool_definition(item: dict[str, Any]) -> list[dict[str, Any]]:
    """One definition; Gemini's `{function_declarations: [...]}` holds several."""
    decls = item.get("function_declarations") or item.get("functionDeclarations")
    if isinstance(decls, list):
        return [d for decl in decls if isinstance(decl, dict) for d in tool_definition(decl)]
    spec = item.get("toolSpec")
    if isinstance(spec, dict):
        schema = spec.get("inputSchema")
        if isinstance(schema, dict) and "json" in schema:
            schema = schema["json"]
        return [_definition(spec.get("name"), spec.get("description"), schema)]
    fn = item.get("function")
    if isinstance(fn, dict):
        item = fn
    params = item.get("parameters")
    for key in ("parameters_json_schema", "input_schema", "inputSchema", "json_schema"):
        if params is None:
            params = item.get(key)
    return [_definition(item.get("name"), item.get("description"), loads_lenient(params))]


def _definition(name: Any, description: Any, parameters: Any) -> dict[str, Any]:
    return {
        "name": "" if name is None else str(name),
        "description": None if description is None else str(description),
        "parameters": parameters,
    }


def last_user_text(messages: list[Message] | None, start: int = 0) -> str | None:
    """The task: the last user message with text (tool results sent as `user` don't count)."""
    if not messages:
        return None
    for msg in reversed(messages[start:]):
        if msg.role == "user" and msg.text:
            return msg.text
    return None


def assistant_text(messages: list[Message] | None) -> str | None:
    """The answer a model gave: the text of its last assistant message that has any."""
    if not messages:
        return None
    for msg in reversed(messages):
        if msg.role in ("assistant", "") and msg.text:
            return msg.text
    return None


def system_text(messages: list[Message] | None) -> str | None:
    if not messages:
        return None
    texts = [m.text for m in messages if m.role == "system" and m.text]
    return "\n".join(texts) if texts else None


def parse_generations(value: Any) -> list[Message] | None:
    """LangChain LLM outputs `{"generations": [[{"text", "message"}]]}` as assistant messages."""
    value = loads_structured(value)
    if not isinstance(value, dict):
        return None
    gens = value.get("generations")
    if not isinstance(gens, list):
        return None
    out: list[Message] = []
    for batch in gens:
        for gen in batch if isinstance(batch, list) else [batch]:
            if not isinstance(gen, dict):
                continue
            msg = parse_message(gen["message"]) if isinstance(gen.get("message"), dict) else None
            if msg is None and isinstance(gen.get("text"), str):
                msg = Message(role="assistant", text=gen["text"] or None)
            if msg is not None:
                if not msg.role:
                    msg.role = "assistant"
                out.append(msg)
    return out


def indexed(attrs: dict[str, Any], prefix: str) -> list[dict[str, Any]]:
    """Flattened lists (`prefix.0.role`, `prefix.0.tool_calls.1.name`) as dicts, by index.

    Indices sort numerically and gaps are skipped. This scans the span's keys, so it is only
    called for spans whose content a run needs.
    """
    groups: dict[int, dict[str, Any]] = {}
    plen = len(prefix)
    for key, value in attrs.items():
        if not key.startswith(prefix):
            continue
        index, _, rest = key[plen:].partition(".")
        if not index.isdigit() or not rest:
            continue
        groups.setdefault(int(index), {})[rest] = value
    return [groups[i] for i in sorted(groups)]
