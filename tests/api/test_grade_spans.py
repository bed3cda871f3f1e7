"""`attest_otel.grade_spans`: a test's in-memory SDK spans and log records, graded as
`grade --file` grades the same telemetry written to a file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from opentelemetry._logs import LogRecord as ApiLogRecord
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode

import attest_otel
from attest_otel.cli import main
from attest_otel.grade.rules import is_error

CALL = "call_1"


def _messages(*parts: tuple[str, dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"role": role, "parts": [part]} for role, part in parts]


def _record_agent(
    tracer_provider: TracerProvider, logger_provider: LoggerProvider, *, tool_error: bool
) -> None:
    """An OpenAI-style loop as `opentelemetry-instrumentation-openai-v2` records it with
    content in log records: the spans hold no content, each chat span has one log record."""
    tracer = tracer_provider.get_tracer("opentelemetry.util.genai.handler")
    logger = logger_provider.get_logger("opentelemetry.util.genai.handler")
    result = "Error: card declined" if tool_error else '{"charged": 19.5}'

    def details(input_: list[dict[str, Any]], output: list[dict[str, Any]]) -> None:
        logger.emit(
            ApiLogRecord(
                event_name="gen_ai.client.inference.operation.details",
                attributes={
                    "gen_ai.operation.name": "chat",
                    "gen_ai.input.messages": input_,  # type: ignore[dict-item]
                    "gen_ai.output.messages": output,  # type: ignore[dict-item]
                },
            )
        )

    task = ("user", {"type": "text", "content": "Charge order 42."})
    ask = ("assistant", {"type": "tool_call", "id": CALL, "name": "charge_card", "arguments": {}})
    with tracer.start_as_current_span(
        "invoke_agent billing_agent",
        attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "billing_agent"},
    ):
        with tracer.start_as_current_span(
            "chat gpt-4o-mini", attributes={"gen_ai.operation.name": "chat"}
        ):
            details(_messages(task), _messages(ask))
        with tracer.start_as_current_span(
            "execute_tool charge_card",
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "charge_card",
                "gen_ai.tool.call.id": CALL,
            },
        ) as tool:
            tool.set_status(Status(StatusCode.OK))
        reply = ("tool", {"type": "tool_call_response", "id": CALL, "response": result})
        answer = ("assistant", {"type": "text", "content": "Done: the card was charged."})
        with tracer.start_as_current_span(
            "chat gpt-4o-mini", attributes={"gen_ai.operation.name": "chat"}
        ):
            details(_messages(task, ask, reply), _messages(answer))


@pytest.fixture
def recorded() -> tuple[InMemorySpanExporter, InMemoryLogRecordExporter, Any]:
    spans, logs = InMemorySpanExporter(), InMemoryLogRecordExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(spans))
    lp = LoggerProvider()
    lp.add_log_record_processor(SimpleLogRecordProcessor(logs))

    def record(*, tool_error: bool) -> None:
        _record_agent(tp, lp, tool_error=tool_error)

    return spans, logs, record


def _write_otlp_json(path: Path, spans: Any, logs: Any) -> None:
    from google.protobuf.json_format import MessageToDict

    lines = [MessageToDict(encode_spans(spans)), MessageToDict(encode_logs(logs))]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")


def test_content_in_log_records_is_read_and_the_unreported_error_fails(
    recorded: Any, tmp_path: Path
) -> None:
    spans, logs, record = recorded
    record(tool_error=True)
    graded = attest_otel.grade_spans(spans.get_finished_spans(), logs.get_finished_logs())
    assert len(graded) == 1
    run, result = graded[0].run, graded[0].result
    assert run.agent == "billing_agent"
    assert [c.name for _, c in run.tool_calls] == ["charge_card"]
    call = run.tool_calls[0][1]
    assert call.output == "Error: card declined"  # only in the next request's tool message
    assert is_error(call)
    assert result.verdict == "fail"

    # The same telemetry in a file grades the same through the CLI.
    path = tmp_path / "trace.json"
    _write_otlp_json(path, spans.get_finished_spans(), logs.get_finished_logs())
    out = CliRunner().invoke(main, ["grade", "--file", str(path), "--json"])
    assert out.exit_code == 1, out.output
    cli = json.loads(out.output)
    verdicts = [r["result"]["verdict"] for t in cli["traces"] for r in t["runs"]]
    assert verdicts == [result.verdict]


def test_a_run_that_went_well_passes(recorded: Any) -> None:
    spans, logs, record = recorded
    record(tool_error=False)
    graded = attest_otel.grade_spans(spans.get_finished_spans(), logs.get_finished_logs())
    assert [g.result.verdict for g in graded] == ["pass"]
    assert not is_error(graded[0].run.tool_calls[0][1])


def test_importing_the_package_does_not_load_the_pipeline() -> None:
    import subprocess
    import sys

    code = (
        "import sys, attest_otel; "
        "print('attest_otel.pipeline' in sys.modules, 'google.protobuf' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
