"""A small agent for deploy/compose.yaml: one GenAI agent run every few seconds, in the
current OpenTelemetry GenAI conventions, so the stack has something to grade.

Runs rotate through three cases: a clean run, a tool error recovered by a fallback, and a
tool error the answer ignores (graded `error_silent`, the one the dashboard should show).
`--once` sends one of each and exits (the test does that).
"""

from __future__ import annotations

import json
import sys
import time

from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Status, StatusCode, Tracer

CASES = [
    ("Is invoice 42 paid?", [("lookup_invoice", "invoice 42: paid")], "Invoice 42 is paid."),
    ("Charge order 7.", [("charge_card", None), ("pay_with_paypal", "paid")], "Paid via PayPal."),
    ("Refund order 9.", [("refund", None)], "Your refund is on its way."),
]


def run(tracer: Tracer, task: str, tools: list[tuple[str, str | None]], answer: str) -> None:
    messages = [{"role": "user", "parts": [{"type": "text", "content": task}]}]
    output = [{"role": "assistant", "parts": [{"type": "text", "content": answer}]}]
    with tracer.start_as_current_span(
        "invoke_agent billing_agent",
        attributes={
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "billing_agent",
            "gen_ai.input.messages": json.dumps(messages),
            "gen_ai.output.messages": json.dumps(output),
            "attest.tool_fallbacks": json.dumps({"charge_card": ["pay_with_paypal"]}),
        },
    ):
        for name, result in tools:
            with tracer.start_as_current_span(
                f"execute_tool {name}",
                attributes={
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": name,
                },
            ) as span:
                if result is None:
                    span.set_status(Status(StatusCode.ERROR, f"{name}: service unavailable"))
                else:
                    span.set_attribute("gen_ai.tool.call.result", result)


def main(argv: list[str]) -> None:
    provider = TracerProvider(resource=Resource.create())
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    tracer = provider.get_tracer("billing-agent")
    i = 0
    while True:
        run(tracer, *CASES[i % len(CASES)])
        i += 1
        if "--once" in argv and i == len(CASES):
            break
        time.sleep(3)
    provider.shutdown()


if __name__ == "__main__":
    main(sys.argv[1:])
