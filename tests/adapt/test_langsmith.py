"""LangSmith's OTel export, hand-built from its exporter's attributes."""

from __future__ import annotations

from tests.adapt.spans import Trace, calls, js, names


def langsmith_trace() -> Trace:
    t = Trace(scope="langsmith")
    root = t.span(
        "LangGraph",
        {
            "langsmith.span.kind": "chain",
            "langsmith.trace.id": "t",
            "gen_ai.operation.name": "chain",
            "gen_ai.prompt": js({"messages": [{"role": "user", "content": "Charge order 42"}]}),
            "gen_ai.completion": js(
                {
                    "messages": [
                        {
                            "lc": 1,
                            "type": "constructor",
                            "id": ["langchain", "schema", "messages", "AIMessage"],
                            "kwargs": {"content": "Charged."},
                        }
                    ]
                }
            ),
            "langsmith.metadata.attest.allowed_tools": ["charge"],
        },
        start=0,
        end=100,
    )
    t.span(
        "ChatOpenAI",
        {
            "langsmith.span.kind": "llm",
            "gen_ai.operation.name": "chat",
            "gen_ai.prompt": js(
                {
                    "messages": [
                        [
                            {
                                "lc": 1,
                                "type": "constructor",
                                "id": ["langchain", "schema", "messages", "SystemMessage"],
                                "kwargs": {"content": "Bill."},
                            },
                            {
                                "lc": 1,
                                "type": "constructor",
                                "id": ["langchain", "schema", "messages", "HumanMessage"],
                                "kwargs": {"content": "Charge order 42"},
                            },
                        ]
                    ]
                }
            ),
            "gen_ai.completion": js(
                {
                    "generations": [
                        [
                            {
                                "text": "",
                                "message": {
                                    "lc": 1,
                                    "type": "constructor",
                                    "id": ["langchain", "schema", "messages", "AIMessage"],
                                    "kwargs": {
                                        "content": "",
                                        "tool_calls": [
                                            {
                                                "name": "charge",
                                                "args": {"order": 42},
                                                "id": "call_1",
                                            }
                                        ],
                                    },
                                },
                            }
                        ]
                    ]
                }
            ),
        },
        parent=root,
        start=1,
        end=10,
    )
    t.span(
        "charge",
        {
            "langsmith.span.kind": "tool",
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.prompt": js({"input": {"order": 42}}),
            "gen_ai.completion": js(
                {
                    "output": {
                        "lc": 1,
                        "type": "constructor",
                        "id": ["langchain", "schema", "messages", "ToolMessage"],
                        "kwargs": {"content": "charged", "tool_call_id": "call_1"},
                    }
                }
            ),
        },
        parent=root,
        start=11,
        end=12,
    )
    return t


def test_a_langsmith_trace_is_one_run_at_its_root() -> None:
    traces = langsmith_trace().traces()
    assert traces[0].dialects == ["langsmith"]
    (run,) = traces[0].runs
    assert run.agent == "LangGraph"
    assert run.task == "Charge order 42"
    assert run.final_answer == "Charged."
    assert run.allowed_tools == ["charge"]


def test_a_langsmith_tool_run_unwraps_its_input_and_tool_message_output() -> None:
    (call,) = calls(langsmith_trace().run())
    assert (call.name, call.arguments, call.output, call.call_id) == (
        "charge",
        {"order": 42},
        "charged",
        "call_1",
    )


def test_without_a_tool_run_the_call_comes_from_the_llm_generations() -> None:
    t = langsmith_trace()
    del t.spans[2]
    run = t.run()
    assert names(run) == ["charge"]
    assert calls(run)[0].output_captured is False
