"""Strands Agents: content in span events, per message (default) or operation details."""

from __future__ import annotations

from attest_otel.adapt import Role, detect
from tests.adapt.spans import Trace, calls, event, js, names

SCOPE = "strands.telemetry.tracer"


def old_mode_trace() -> Trace:
    t = Trace(scope=SCOPE)
    agent = t.span(
        "invoke_agent billing",
        {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.system": "strands-agents",
            "gen_ai.agent.name": "billing",
            "gen_ai.agent.tools": js(["charge", "lookup"]),
        },
        events=[
            event("gen_ai.system.message", content=js([{"text": "Bill customers."}])),
            event("gen_ai.user.message", content=js([{"text": "Charge order 42"}])),
            event("gen_ai.choice", message="Charged 19.50.", finish_reason="end_turn"),
        ],
        start=0,
        end=100,
    )
    cycle = t.span(
        "execute_event_loop_cycle",
        {"gen_ai.system": "strands-agents", "event_loop.cycle_id": "c1"},
        parent=agent,
        start=1,
        end=90,
    )
    t.span(
        "execute_tool charge",
        {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.system": "strands-agents",
            "gen_ai.tool.name": "charge",
            "gen_ai.tool.call.id": "tooluse_1",
            "gen_ai.tool.status": "success",
        },
        events=[
            event("gen_ai.tool.message", role="tool", content=js({"order": 42}), id="tooluse_1"),
            event("gen_ai.choice", message=js([{"text": "charged 19.50"}]), id="tooluse_1"),
        ],
        parent=cycle,
        start=10,
        end=20,
    )
    return t


def test_old_mode_tool_arguments_and_result_come_from_the_tool_span_events() -> None:
    (call,) = calls(old_mode_trace().run())
    assert call.call_id == "tooluse_1"
    assert call.arguments == {"order": 42}
    assert call.output == "charged 19.50"


def test_old_mode_agent_events_give_task_answer_and_system_prompt() -> None:
    run = old_mode_trace().run()
    assert run.agent == "billing"
    assert run.task == "Charge order 42"
    assert run.final_answer == "Charged 19.50."
    assert run.system_prompt == "Bill customers."
    assert [d["name"] for d in run.tool_definitions] == ["charge", "lookup"]


def test_event_loop_cycles_are_not_runs_or_calls() -> None:
    found = detect(old_mode_trace().spans[1])
    assert found is not None and found[1] is Role.OTHER


def test_latest_mode_reads_the_operation_details_events() -> None:
    t = Trace(scope=SCOPE)
    agent = t.span(
        "invoke_agent billing",
        {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.provider.name": "strands-agents",
            "gen_ai.agent.name": "billing",
        },
        events=[
            event(
                "gen_ai.client.inference.operation.details",
                **{
                    "gen_ai.input.messages": js(
                        [{"role": "user", "parts": [{"type": "text", "content": "Charge 42"}]}]
                    ),
                    "gen_ai.output.messages": js(
                        [{"role": "assistant", "parts": [{"type": "text", "content": "Done"}]}]
                    ),
                },
            )
        ],
        start=0,
        end=100,
    )
    t.span(
        "execute_tool charge",
        {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.provider.name": "strands-agents",
            "gen_ai.tool.name": "charge",
            "gen_ai.tool.call.id": "tooluse_1",
        },
        events=[
            event(
                "gen_ai.client.inference.operation.details",
                **{
                    "gen_ai.input.messages": js(
                        [
                            {
                                "role": "tool",
                                "parts": [
                                    {
                                        "type": "tool_call",
                                        "id": "tooluse_1",
                                        "name": "charge",
                                        "arguments": {"o": 42},
                                    }
                                ],
                            }
                        ]
                    ),
                    "gen_ai.output.messages": js(
                        [
                            {
                                "role": "tool",
                                "parts": [
                                    {
                                        "type": "tool_call_response",
                                        "id": "tooluse_1",
                                        "response": [{"text": "Error: declined"}],
                                    }
                                ],
                            }
                        ]
                    ),
                },
            )
        ],
        parent=agent,
        start=10,
        end=20,
        error="declined",
    )
    run = t.run()
    assert (run.task, run.final_answer) == ("Charge 42", "Done")
    (call,) = calls(run)
    assert call.arguments == {"o": 42}
    assert call.output == "Error: declined"
    assert call.is_error is True


def test_swarm_spans_hold_agents_without_being_runs() -> None:
    t = Trace(scope=SCOPE)
    swarm = t.span(
        "invoke_swarm",
        {"gen_ai.operation.name": "invoke_agent", "gen_ai.system": "strands-agents"},
        start=0,
        end=100,
    )
    for i, name in enumerate(("researcher", "writer")):
        agent = t.span(
            f"invoke_agent {name}",
            {"gen_ai.operation.name": "invoke_agent", "gen_ai.system": "strands-agents"},
            parent=swarm,
            start=10 + 40 * i,
            end=40 + 40 * i,
        )
        t.span(
            f"execute_tool t{i}",
            {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.system": "strands-agents",
                "gen_ai.tool.name": f"t{i}",
            },
            parent=agent,
            start=11 + 40 * i,
            end=12 + 40 * i,
        )
    runs = t.runs()
    assert [(r.agent, names(r)) for r in runs] == [("researcher", ["t0"]), ("writer", ["t1"])]
