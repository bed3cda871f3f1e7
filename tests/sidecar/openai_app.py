"""A real app for the sidecar tests: the `openai` SDK in a hand-written tool loop, instrumented
by `opentelemetry-instrumentation-openai-v2` with content capture on, exported by the OTel
SDK's own OTLP exporters (batch processors on their defaults) to `--endpoint`.

The instrumentation makes the model spans; the agent and tool spans come from
`opentelemetry-util-genai`'s `TelemetryHandler` (the API it offers code no instrumentation
covers), as in tests/fixtures/gen/openai_v2/gen_openai_v2.py. With these versions content
capture is `event_only` (`true` captures nothing: see that generator's docstring), so the
messages and tool results travel in log records only, which is the case the sidecar must read.

Run: `python tests/sidecar/openai_app.py CONFIG_JSON`; the config names the endpoint, the
protocol (`grpc`, `http`, `json`), `gzip`, how many runs and which fail, `logs_delay_s` /
`spans_delay_s` (that exporter is that much late), `big_tool_mib` (a tool span that large) and
`model_delay_s`. Everything exported is also written to `capture` as OTLP/JSON lines, the
file `grade --file` reads.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import sys
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

os.environ["OTEL_SEMCONV_STABILITY_OPT_IN"] = "gen_ai_latest_experimental"
os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "event_only"

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from google.protobuf import json_format
from openai import OpenAI
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import (
    BatchLogRecordProcessor,
    LogRecordExporter,
    LogRecordExportResult,
    SimpleLogRecordProcessor,
)
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.util.genai.handler import TelemetryHandler
from opentelemetry.util.genai.types import InputMessage, OutputMessage, Text

from tests.fakes.openai_chat import FakeChat

MODEL = "gpt-4o-mini"
TOOLS = ["lookup_order", "charge_card"]


def otlp_json(message: Any) -> dict[str, Any]:
    """A request as OTLP/JSON: protobuf's JSON mapping with the ids in hex."""
    document: dict[str, Any] = json_format.MessageToDict(message)

    def fix(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("traceId", "spanId", "parentSpanId") and isinstance(value, str):
                    node[key] = base64.b64decode(value).hex()
                else:
                    fix(value)
        elif isinstance(node, list):
            for item in node:
                fix(item)

    fix(document)
    return document


class Capture(SpanExporter, LogRecordExporter):  # type: ignore[misc]
    """Everything the app exports, kept for `grade --file`."""

    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []

    def export(self, batch: Sequence[Any]) -> Any:
        if batch and hasattr(batch[0], "log_record"):
            self.lines.append(otlp_json(encode_logs(batch)))
            return LogRecordExportResult.SUCCESS
        self.lines.append(otlp_json(encode_spans(batch)))
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


class JsonExporter(SpanExporter, LogRecordExporter):  # type: ignore[misc]
    """OTLP/HTTP JSON (the Python SDK has protobuf exporters only): the SDK's own encoders,
    written as OTLP/JSON and POSTed, gzip when asked."""

    def __init__(self, url: str, compress: bool) -> None:
        self.url = url
        self.compress = compress

    def export(self, batch: Sequence[Any]) -> Any:
        logs = bool(batch) and hasattr(batch[0], "log_record")
        message = encode_logs(batch) if logs else encode_spans(batch)
        body = json.dumps(otlp_json(message)).encode()
        headers = {"Content-Type": "application/json"}
        if self.compress:
            body = gzip.compress(body)
            headers["Content-Encoding"] = "gzip"
        path = "/v1/logs" if logs else "/v1/traces"
        request = urllib.request.Request(self.url + path, body, headers, method="POST")
        ok = True
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                ok = response.status == 200
        except OSError:
            ok = False
        if logs:
            return LogRecordExportResult.SUCCESS if ok else LogRecordExportResult.FAILURE
        return SpanExportResult.SUCCESS if ok else SpanExportResult.FAILURE

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


class Late(SpanExporter, LogRecordExporter):  # type: ignore[misc]
    """An exporter `delay_s` late on every export (one signal's pipeline slower)."""

    def __init__(self, inner: Any, delay_s: float) -> None:
        self.inner = inner
        self.delay_s = delay_s

    def export(self, batch: Sequence[Any]) -> Any:
        time.sleep(self.delay_s)
        return self.inner.export(batch)

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return bool(self.inner.force_flush(timeout_millis))


def exporters(cfg: dict[str, Any]) -> tuple[Any, Any, Any]:
    endpoint = cfg["endpoint"]
    compression = "gzip" if cfg.get("gzip") else None
    if cfg["protocol"] == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc import _log_exporter as glogs
        from opentelemetry.exporter.otlp.proto.grpc import metric_exporter as gmetrics
        from opentelemetry.exporter.otlp.proto.grpc import trace_exporter as gtraces
        from opentelemetry.exporter.otlp.proto.grpc.exporter import Compression

        kind = Compression.Gzip if compression else Compression.NoCompression
        return (
            gtraces.OTLPSpanExporter(endpoint=endpoint, insecure=True, compression=kind),
            glogs.OTLPLogExporter(endpoint=endpoint, insecure=True, compression=kind),
            gmetrics.OTLPMetricExporter(endpoint=endpoint, insecure=True, compression=kind),
        )
    from opentelemetry.exporter.otlp.proto.http import Compression as HttpCompression
    from opentelemetry.exporter.otlp.proto.http import _log_exporter as hlogs
    from opentelemetry.exporter.otlp.proto.http import metric_exporter as hmetrics
    from opentelemetry.exporter.otlp.proto.http import trace_exporter as htraces

    kind = HttpCompression.Gzip if compression else HttpCompression.NoCompression
    metrics = hmetrics.OTLPMetricExporter(endpoint=f"{endpoint}/v1/metrics", compression=kind)
    if cfg["protocol"] == "json":
        json_out = JsonExporter(endpoint, bool(compression))
        return json_out, json_out, metrics
    return (
        htraces.OTLPSpanExporter(endpoint=f"{endpoint}/v1/traces", compression=kind),
        hlogs.OTLPLogExporter(endpoint=f"{endpoint}/v1/logs", compression=kind),
        metrics,
    )


class _Bare:
    """What a loop with no agent or tool spans of its own records: nothing (`bare`)."""

    input_messages: Any = None
    output_messages: Any = None
    arguments: Any = None
    tool_result: Any = None

    def __enter__(self) -> _Bare:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def run_loop(
    handler: TelemetryHandler, client: OpenAI, fail: bool, big_tool_mib: float, bare: bool = False
) -> tuple[str, str]:
    """One agent run: (trace id, answer). charge_card returns an error when `fail`. `bare`:
    only the instrumentation's model spans, under one plain root span (the issue's app)."""
    tracer = trace.get_tracer("billing-app")
    root = tracer.start_as_current_span("billing request") if bare else _Bare()
    agent_span = (
        _Bare()
        if bare
        else handler.invoke_local_agent(agent_name="billing_agent", request_model=MODEL)
    )
    with root, agent_span as agent:
        trace_id = format(trace.get_current_span().get_span_context().trace_id, "032x")
        task = "Charge the customer for order 42 and tell me the result."
        agent.input_messages = [InputMessage(role="user", parts=[Text(content=task)])]
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": "You are billing_agent."},
            {"role": "user", "content": task},
        ]
        schemas = [
            {
                "type": "function",
                "function": {"name": n, "parameters": {"type": "object", "properties": {}}},
            }
            for n in TOOLS
        ]
        for _ in range(5):
            response = client.chat.completions.create(model=MODEL, messages=messages, tools=schemas)  # type: ignore[arg-type]
            msg = response.choices[0].message
            if not msg.tool_calls:
                answer = msg.content or ""
                agent.output_messages = [
                    OutputMessage(
                        role="assistant", parts=[Text(content=answer)], finish_reason="stop"
                    )
                ]
                return trace_id, answer
            messages.append(msg.model_dump(exclude_none=True))
            for call in msg.tool_calls:
                name = call.function.name  # type: ignore[union-attr]
                tool_span = (
                    _Bare()
                    if bare
                    else handler.tool(name, tool_call_id=call.id, tool_type="function")
                )
                with tool_span as invocation:
                    invocation.arguments = json.loads(call.function.arguments)  # type: ignore[union-attr]
                    if name == "lookup_order":
                        result = "order 42: 19.50 EUR"
                    elif fail:
                        result = "Error: card declined"
                    else:
                        result = "charged 19.50 EUR, receipt r-77"
                    if big_tool_mib and name == "charge_card":
                        # A tool that attaches what it fetched to its own span.
                        trace.get_current_span().set_attribute(
                            "app.tool.payload", "x" * int(big_tool_mib * 1024 * 1024)
                        )
                    invocation.tool_result = result
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
        raise RuntimeError("no final answer")


def main() -> None:
    cfg = json.loads(sys.argv[1])
    resource = Resource.create({"service.name": "billing-app"})
    span_out, log_out, metric_out = exporters(cfg)
    if cfg.get("logs_delay_s"):
        log_out = Late(log_out, float(cfg["logs_delay_s"]))
    if cfg.get("spans_delay_s"):
        span_out = Late(span_out, float(cfg["spans_delay_s"]))
    capture = Capture()
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(BatchSpanProcessor(span_out))
    tracer_provider.add_span_processor(SimpleSpanProcessor(capture))
    trace.set_tracer_provider(tracer_provider)
    logger_provider = LoggerProvider(resource=resource)
    logger_provider.add_log_record_processor(BatchLogRecordProcessor(log_out))
    logger_provider.add_log_record_processor(SimpleLogRecordProcessor(capture))
    meter_provider = MeterProvider(
        resource=resource, metric_readers=[PeriodicExportingMetricReader(metric_out)]
    )
    OpenAIInstrumentor().instrument(
        tracer_provider=tracer_provider,
        logger_provider=logger_provider,
        meter_provider=meter_provider,
    )
    handler = TelemetryHandler(
        tracer_provider=tracer_provider,
        logger_provider=logger_provider,
        meter_provider=meter_provider,
    )
    fake = FakeChat().start()
    fake.delay_s = float(cfg.get("model_delay_s", 0.0))
    client = OpenAI(base_url=fake.base_url, api_key="sk-test-not-a-key", max_retries=0)
    runs = []
    for i in range(int(cfg.get("runs", 1))):
        fail = i in cfg.get("fail", [])
        trace_id, answer = run_loop(
            handler, client, fail, float(cfg.get("big_tool_mib", 0)), bool(cfg.get("bare"))
        )
        runs.append({"trace_id": trace_id, "fail": fail, "answer": answer})
    tracer_provider.shutdown()
    logger_provider.shutdown()
    meter_provider.shutdown()
    fake.close()
    with open(cfg["capture"], "w") as out:
        for line in capture.lines:
            out.write(json.dumps(line) + "\n")
    print(json.dumps({"runs": runs, "model_calls": fake.calls}))


if __name__ == "__main__":
    main()
