"""A multi-agent app with a slow model, exported as the OTel SDK really exports, into the sidecar.

No agent framework is installed in the project's environment (the framework fixtures are made
in their own venvs under tests/fixtures/gen), so the app is a hand-written agent loop that
makes GenAI-convention spans with the OTel SDK (`invoke_agent`, `chat`, `execute_tool`) and
asks a fake OpenAI Chat Completions server over HTTP that answers after `DELAY_S`. An outer
agent delegates to a billing sub-agent through a tool, then a second tool of its own fails
and its final answer claims success anyway. Spans go out through `BatchSpanProcessor` with
its default schedule (every 5 s) to the sidecar over OTLP/gRPC, with the sidecar's default
grace (1 s) and idle timeout (10 s): the sub-agent's spans go out in one batch, the outer
agent's last model call and agent span in the next, seconds later.
"""

from __future__ import annotations

import collections
import json
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.trace import Status, StatusCode, Tracer

from attest_otel import semconv
from tests.sidecar.downstream import Downstream
from tests.sidecar.helpers import Sidecar
from tests.sidecar.test_runs_in_parts import DEFAULT_TIMERS, _by_file, written

DELAY_S = 3.0
SCRIPTS: dict[str, list[dict[str, Any]]] = {
    "support_agent": [
        {"tool_calls": [("delegate_billing", {"order": 42}), ("send_receipt", {"order": 42})]},
        {"content": "Your order 42 is refunded and the receipt is on its way."},
    ],
    "billing_agent": [
        {"tool_calls": [("lookup_order", {"order": 42})]},
        {"content": "Order 42 refunded."},
    ],
}


class SlowModel:
    """`POST /v1/chat/completions`, answered after `delay_s` from the script of the agent the
    system message names; the turn is the number of tool results already in the messages."""

    def __init__(self, delay_s: float) -> None:
        model = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                time.sleep(delay_s)
                reply = json.dumps(model.answer(body["messages"])).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/chat/completions"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def answer(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        agent = messages[0]["content"]
        turn = sum(1 for m in messages if m["role"] == "assistant" and m.get("tool_calls"))
        step = SCRIPTS[agent][turn]
        message: dict[str, Any] = {"role": "assistant", "content": step.get("content")}
        if "tool_calls" in step:
            message["tool_calls"] = [
                {
                    "id": f"call_{agent}_{turn}_{i}",
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(args)},
                }
                for i, (name, args) in enumerate(step["tool_calls"])
            ]
        return {
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": "tool_calls" if "tool_calls" in step else "stop",
                }
            ]
        }

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _parts(messages: list[dict[str, Any]]) -> str:
    """Chat messages in the GenAI semconv's `gen_ai.*.messages` shape."""
    out = []
    for m in messages:
        parts: list[dict[str, Any]] = []
        if m.get("content"):
            kind = "tool_call_response" if m["role"] == "tool" else "text"
            parts.append(
                {"type": kind, "content": m["content"], "id": m.get("tool_call_id")}
                if kind == "tool_call_response"
                else {"type": "text", "content": m["content"]}
            )
        for call in m.get("tool_calls") or []:
            parts.append(
                {
                    "type": "tool_call",
                    "id": call["id"],
                    "name": call["function"]["name"],
                    "arguments": json.loads(call["function"]["arguments"]),
                }
            )
        out.append({"role": m["role"], "parts": parts})
    return json.dumps(out)


class Agent:
    """The app's own agent loop, instrumented by hand with GenAI-convention spans."""

    def __init__(
        self,
        tracer: Tracer,
        model_url: str,
        name: str,
        tools: dict[str, Callable[[dict[str, Any]], str]],
    ) -> None:
        self.tracer, self.url, self.name, self.tools = tracer, model_url, name, tools

    def chat(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        with self.tracer.start_as_current_span(
            "chat slow-model",
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": "openai",
                "gen_ai.request.model": "slow-model",
                "gen_ai.input.messages": _parts(messages),
            },
        ) as span:
            request = urllib.request.Request(
                self.url,
                data=json.dumps({"model": "slow-model", "messages": messages}).encode(),
                headers={"Content-Type": "application/json"},
            )
            with urllib.request.urlopen(request, timeout=30) as response:
                message: dict[str, Any] = json.load(response)["choices"][0]["message"]
            span.set_attribute("gen_ai.output.messages", _parts([message]))
            return message

    def run(self, task: str) -> str:
        with self.tracer.start_as_current_span(
            f"invoke_agent {self.name}",
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": self.name,
                "gen_ai.provider.name": "openai",
                "gen_ai.input.messages": _parts([{"role": "user", "content": task}]),
            },
        ) as agent_span:
            messages: list[dict[str, Any]] = [
                {"role": "system", "content": self.name},
                {"role": "user", "content": task},
            ]
            while True:
                message = self.chat(messages)
                messages.append(message)
                if not message.get("tool_calls"):
                    agent_span.set_attribute("gen_ai.output.messages", _parts([message]))
                    return str(message["content"])
                for call in message["tool_calls"]:
                    messages.append(
                        {"role": "tool", "tool_call_id": call["id"], "content": self.call(call)}
                    )

    def call(self, call: dict[str, Any]) -> str:
        name, arguments = call["function"]["name"], call["function"]["arguments"]
        with self.tracer.start_as_current_span(
            f"execute_tool {name}",
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": name,
                "gen_ai.tool.call.id": call["id"],
                "gen_ai.tool.call.arguments": arguments,
            },
        ) as span:
            try:
                result = self.tools[name](json.loads(arguments))
            except Exception as e:
                span.set_status(Status(StatusCode.ERROR, f"{name} failed: {e}"))
                return f"Error: {e}"
            span.set_attribute("gen_ai.tool.call.result", result)
            return result


class Batches(SpanExporter):
    """The OTLP exporter, noting which spans went out in which export and when."""

    def __init__(self, inner: SpanExporter) -> None:
        self.inner = inner
        self.batches: list[tuple[float, list[str]]] = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.batches.append((time.monotonic(), [s.name for s in spans]))
        return self.inner.export(spans)

    def shutdown(self) -> None:
        self.inner.shutdown()


class Keep(SpanExporter):
    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans.extend(spans)
        return SpanExportResult.SUCCESS


def _receipt(_args: dict[str, Any]) -> str:
    raise RuntimeError("mail server refused the connection")


@pytest.mark.timeout(90)
def test_a_slow_multi_agent_app_is_graded_whole_as_from_a_file(
    tmp_path: Path, downstream: Downstream, sidecar: Sidecar
) -> None:
    sidecar.config = DEFAULT_TIMERS
    sidecar.start()
    model = SlowModel(DELAY_S)
    batches = Batches(OTLPSpanExporter(endpoint=sidecar.grpc_endpoint, insecure=True))
    kept = Keep()
    tp = TracerProvider(resource=Resource.create({"service.name": "refund-app"}))
    tp.add_span_processor(BatchSpanProcessor(batches))  # the default schedule: every 5 s
    tp.add_span_processor(SimpleSpanProcessor(kept))
    tracer = tp.get_tracer("refund-app")
    try:
        billing = Agent(
            tracer,
            model.url,
            "billing_agent",
            {"lookup_order": lambda a: f"order {a['order']}: paid 30 EUR"},
        )
        support = Agent(
            tracer,
            model.url,
            "support_agent",
            {
                "delegate_billing": lambda a: billing.run(f"Refund order {a['order']}"),
                "send_receipt": _receipt,
            },
        )
        support.run("Please refund order 42 and mail me the receipt.")
        sent = {format(s.context.span_id, "016x") for s in kept.spans}
        assert downstream.wait_spans(sent, timeout=30), sidecar.log()
    finally:
        tp.shutdown()
        model.close()

    # The scenario happened: the nested run went out a batch before the outer agent span.
    when = {name: at for at, names in batches.batches for name in names}
    assert when["invoke_agent support_agent"] - when["invoke_agent billing_agent"] > 1.0, (
        batches.batches
    )

    spans_file = tmp_path / "app.pb"
    spans_file.write_bytes(encode_spans(kept.spans).SerializeToString())
    want = _by_file(spans_file)
    assert sorted(v[0] for v in want.values()) == ["fail", "pass"]  # the receipt error counts
    spans = downstream.spans()
    counts = collections.Counter(s.span_id.hex() for s in spans)
    assert {i for i, c in counts.items() if c != 1} == set()
    assert written(spans, want) == want
    assert not [s for s in spans if s.name == semconv.GRADE_SPAN_NAME]
    assert sidecar.terminate() == 0
    assert "spans_late=0" in sidecar.log(), sidecar.log()
