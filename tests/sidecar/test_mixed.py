"""A mixed trace through a real sidecar (issue 25, class 5): GenAI agent and model spans, and
tool spans in an in-house vocabulary that the byte probe does not know.

The probe holds a trace, not a span: the trace is held for its GenAI spans, and every span of
it that arrives while it is held is held too, whatever its keys. The tool spans are decoded
lazily (no GenAI key), read by the generic reader span by span, and annotated.
"""

from __future__ import annotations

import json

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.trace import Status, StatusCode

from tests.sidecar.downstream import Downstream
from tests.sidecar.helpers import Sidecar, attr, provider

pytestmark = pytest.mark.timeout(60)

USER = {"role": "user", "parts": [{"type": "text", "content": "Charge order 42."}]}


def _chat(history: list[dict[str, object]], reply: list[dict[str, object]]) -> dict[str, str]:
    return {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-4o-mini",
        "gen_ai.input.messages": json.dumps(history),
        "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": reply}]),
    }


def test_tool_spans_of_another_vocabulary_are_graded_and_annotated(
    sidecar: Sidecar, downstream: Downstream
) -> None:
    sidecar.start()
    tp = provider(OTLPSpanExporter(endpoint=sidecar.grpc_endpoint, insecure=True))
    tracer = tp.get_tracer("acme.agent")
    ask = {"type": "tool_call", "id": "call_1", "name": "charge_card", "arguments": {"o": 42}}
    told = {
        "role": "tool",
        "parts": [{"type": "tool_call_response", "id": "call_1", "response": "ok"}],
    }
    with tracer.start_as_current_span(
        "invoke_agent billing",
        attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "billing"},
    ) as agent:
        with tracer.start_as_current_span("chat gpt-4o-mini", attributes=_chat([USER], [ask])):
            pass
        # The in-house tool decorator: its own keys, status ERROR; the loop told the model "ok".
        with tracer.start_as_current_span(
            "charge_card",
            attributes={"acme.kind": "tool", "acme.input": json.dumps({"o": 42})},
        ) as tool:
            tool.set_status(Status(StatusCode.ERROR, "card declined"))
        answer = [{"type": "text", "content": "Your card was charged."}]
        history = [USER, {"role": "assistant", "parts": [ask]}, told]
        with tracer.start_as_current_span("chat gpt-4o-mini", attributes=_chat(history, answer)):
            pass
    tool_id = format(tool.get_span_context().span_id, "016x")
    agent_id = format(agent.get_span_context().span_id, "016x")
    tp.force_flush()
    assert downstream.wait_spans({tool_id, agent_id}), sidecar.log()
    by_id = {s.span_id.hex(): s for s in downstream.spans()}
    graded = by_id[tool_id]
    assert attr(graded.attributes, "attest.verdict") == "error_silent", sidecar.log()
    assert [e.name for e in graded.events] == ["gen_ai.evaluation.result"]
    assert attr(by_id[agent_id].attributes, "attest.tool_use.verdict") == "fail"
    tp.shutdown()
    assert sidecar.terminate() == 0
