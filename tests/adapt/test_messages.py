"""Chat messages in the shapes the dialects carry them."""

from __future__ import annotations

from typing import Any

import pytest

from attest_otel.adapt.base import Message, ToolReply, ToolRequest
from attest_otel.adapt.messages import (
    answer_in,
    parse_message,
    parse_messages,
    parse_system,
    parse_tool_definitions,
    task_in,
)
from tests.adapt.spans import js


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param(
            {
                "role": "assistant",
                "parts": [
                    {"type": "text", "content": "Let me look."},
                    {"type": "tool_call", "id": "c1", "name": "f", "arguments": {"a": 1}},
                ],
            },
            Message("assistant", "Let me look.", [ToolRequest("c1", "f", {"a": 1})]),
            id="otel parts with text and a tool call",
        ),
        pytest.param(
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t1",
                        "content": [{"type": "text", "text": "failed"}],
                        "is_error": True,
                    }
                ],
            },
            Message("user", None, [], [ToolReply("t1", "failed", None, True)]),
            id="anthropic tool_result blocks keep their error flag",
        ),
        pytest.param(
            {
                "role": "assistant",
                "content": js([{"toolUse": {"toolUseId": "b1", "name": "f", "input": {"x": 2}}}]),
            },
            Message("assistant", None, [ToolRequest("b1", "f", {"x": 2})]),
            id="bedrock content blocks as a json string",
        ),
        pytest.param(
            {"role": "model", "parts": [{"function_call": {"name": "f", "args": {}}}]},
            Message("assistant", None, [ToolRequest(None, "f", {})]),
            id="gemini function calls from the model role",
        ),
        pytest.param(
            {"type": "function_call_output", "call_id": "c9", "output": "ok"},
            Message("tool", None, [], [ToolReply("c9", "ok")]),
            id="openai responses function call output items",
        ),
        pytest.param(
            {
                "lc": 1,
                "type": "constructor",
                "id": ["langchain", "AIMessage"],
                "kwargs": {"content": "", "tool_calls": [{"name": "f", "args": {}, "id": "l1"}]},
            },
            Message("assistant", None, [ToolRequest("l1", "f", {})]),
            id="langchain serialised messages",
        ),
        pytest.param(
            {"role": "tool", "content": '{"total": 1}', "tool_call_id": " c2 "},
            Message("tool", None, [], [ToolReply("c2", '{"total": 1}')]),
            id="a tool message's json text stays text and its id is trimmed",
        ),
    ],
)
def test_message_shapes(raw: dict[str, Any], expected: Message) -> None:
    assert parse_message(raw) == expected


def test_truncated_json_is_not_a_message_list() -> None:
    assert parse_messages('[{"role": "user", "content": "hi') is None


def test_task_and_answer_are_found_without_reading_every_message() -> None:
    history = js(
        [
            {"role": "user", "content": "old question"},
            {"role": "assistant", "content": "old answer"},
            {"role": "user", "content": "new question"},
            {"role": "assistant", "content": "new answer"},
        ]
    )
    assert task_in(history) == "new question"
    assert task_in(history, start=0) == "old question"
    assert answer_in(history) == "new answer"


def test_system_instructions_and_tool_definitions_in_their_common_schemas() -> None:
    assert (
        parse_system(js([{"type": "text", "content": "A"}, {"type": "text", "content": "B"}]))
        == "A\nB"
    )
    defs = parse_tool_definitions(
        [
            {"type": "function", "function": {"name": "a", "description": "A", "parameters": {}}},
            {"name": "b", "input_schema": {"type": "object"}},
            {"function_declarations": [{"name": "c"}]},
            {"toolSpec": {"name": "d", "inputSchema": {"json": {"type": "object"}}}},
        ]
    )
    assert defs == [
        {"name": "a", "description": "A", "parameters": {}},
        {"name": "b", "description": None, "parameters": {"type": "object"}},
        {"name": "c", "description": None, "parameters": None},
        {"name": "d", "description": None, "parameters": {"type": "object"}},
    ]
