"""`attest-otel grade --file`: traces in, runs graded, text or JSON out, and `--export`."""

from __future__ import annotations

import gzip
import json
import os
import socket
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from attest_otel.cli import main
from tests.fakes.otlp_server import OtlpGrpcReceiver

TRACES = Path(__file__).parents[1] / "fixtures" / "traces"


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    for name in list(os.environ):
        if name.startswith("OTEL_") or name == "ANTHROPIC_API_KEY":
            monkeypatch.delenv(name)
    return CliRunner()


def test_a_fallback_trace_passes_and_shows_the_recovery(runner: CliRunner) -> None:
    result = runner.invoke(main, ["grade", "--file", str(TRACES / "strands__fallback.json")])
    assert result.exit_code == 0, result.output
    assert "run billing_agent" in result.output
    assert "[fallback at step 2]" in result.output


def test_an_unrecovered_error_fails_with_exit_1_and_stands_out(runner: CliRunner) -> None:
    result = runner.invoke(
        main, ["grade", "--file", str(TRACES / "vercel__unrecovered_claims.json")]
    )
    assert result.exit_code == 1
    failing = [line for line in result.output.splitlines() if "✗" in line]
    assert len(failing) == 1 and "charge_card" in failing[0] and "error_silent" in failing[0]


def test_grade_json_has_traces_runs_and_span_ids(runner: CliRunner) -> None:
    result = runner.invoke(
        main, ["grade", "--file", str(TRACES / "pydantic_ai_v2__retry.json"), "--json"]
    )
    data = json.loads(result.output)
    [trace] = data["traces"]
    assert len(trace["trace_id"]) == 32
    [run] = trace["runs"]
    assert set(run) == {
        "agent",
        "span_id",
        "task",
        "final_answer",
        "content_captured",
        "gaps",
        "stored_grade",
        "regraded",
        "result",
    }
    assert run["content_captured"] is True
    assert len(run["span_id"]) == 16
    for finding in run["result"]["findings"]:
        assert len(finding["metadata"]["span_id"]) == 16
        assert finding["metadata"]["output_captured"] is True


def test_allowed_tools_and_fallback_flags_override_the_trace(runner: CliRunner) -> None:
    path = str(TRACES / "strands__fallback.json")
    result = runner.invoke(
        main, ["grade", "--file", path, "--json", "--allowed-tools", "lookup_order,charge_card"]
    )
    verdicts = [
        f["verdict"]
        for f in json.loads(result.output)["traces"][0]["runs"][0]["result"]["findings"]
    ]
    assert verdicts == ["correct", "correct", "disallowed_tool"]
    assert result.exit_code == 1


def test_a_policy_file_entry_for_the_named_agent_wins_over_the_star(
    runner: CliRunner, tmp_path: Path
) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "agents:\n  billing_agent:\n    allowed_tools: [lookup_order]\n"
        "  '*':\n    allowed_tools: null\n"
    )
    path = str(TRACES / "strands__fallback.json")
    result = runner.invoke(main, ["grade", "--file", path, "--json", "--policy", str(policy)])
    findings = json.loads(result.output)["traces"][0]["runs"][0]["result"]["findings"]
    assert [f["verdict"] for f in findings] == ["correct", "disallowed_tool", "disallowed_tool"]
    assert result.exit_code == 1


def test_a_policy_with_unknown_keys_is_rejected_with_every_problem(
    runner: CliRunner, tmp_path: Path
) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("agents:\n  a:\n    allowed_tool: [x]\n  b:\n    tool_fallbacks: 3\n")
    result = runner.invoke(
        main, ["grade", "--file", str(TRACES / "strands__fallback.json"), "--policy", str(policy)]
    )
    assert result.exit_code == 2
    assert "allowed_tool" in result.output and "tool_fallbacks" in result.output
    assert result.output.count("\n") == 1


def test_a_bad_fallback_flag_is_a_usage_error(runner: CliRunner) -> None:
    result = runner.invoke(
        main, ["grade", "--file", str(TRACES / "strands__fallback.json"), "--fallback", "oops"]
    )
    assert result.exit_code == 2 and "TOOL=ALTERNATIVE" in result.output


def test_a_file_that_is_not_otlp_is_one_line_and_exit_2(runner: CliRunner, tmp_path: Path) -> None:
    path = tmp_path / "not-otlp.json"
    path.write_text('{"hello": "world"}\n')
    result = runner.invoke(main, ["grade", "--file", str(path)])
    assert result.exit_code == 2
    assert result.output.count("\n") == 1 and str(path) in result.output


def test_a_trace_with_no_tool_call_says_which_dialects_were_seen(
    runner: CliRunner, tmp_path: Path
) -> None:
    span = {
        "traceId": "0af7651916cd43dd8448eb211c80319c",
        "spanId": "b7ad6b7169203331",
        "name": "chat gpt-4o",
        "kind": 3,
        "startTimeUnixNano": "1",
        "endTimeUnixNano": "2",
        "attributes": [{"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}}],
    }
    path = tmp_path / "chat.json.gz"
    path.write_bytes(
        gzip.compress(json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}).encode())
    )
    result = runner.invoke(main, ["grade", "--file", str(path)])
    assert result.exit_code == 0, result.output
    assert "no tool call recognised" in result.output and "genai" in result.output


def test_a_trace_without_content_says_so_and_which_setting_captures_it(runner: CliRunner) -> None:
    trace = str(TRACES / "openai_v2_nocontent__retry.json")
    text = runner.invoke(main, ["grade", "--file", trace])
    assert text.exit_code == 0, text.output
    note = next(line for line in text.output.splitlines() if "no content captured" in line)
    assert "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=span_only" in note
    data = json.loads(runner.invoke(main, ["grade", "--json", "--file", trace]).output)
    assert [r["content_captured"] for r in data["traces"][0]["runs"]] == [False]
    full = runner.invoke(main, ["grade", "--file", str(TRACES / "openai_v2_latest__retry.json")])
    assert "no content captured" not in full.output


def test_export_sends_grade_spans_log_events_and_metrics(runner: CliRunner) -> None:
    with OtlpGrpcReceiver() as receiver:
        result = runner.invoke(
            main,
            [
                "grade",
                "--file",
                str(TRACES / "vercel__fallback.json"),
                "--export",
                "--otlp-endpoint",
                receiver.endpoint,
            ],
        )
        assert result.exit_code == 0, result.output
        assert "sent" in result.output
        [grade_span] = [s for s in receiver.spans() if s.name == "attest.grade"]
        source = json.loads((TRACES / "vercel__fallback.json").read_text().splitlines()[0])
        assert (
            grade_span.trace_id.hex()
            == source["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["traceId"]
        )
        assert len(grade_span.links) == 2  # charge_card, then its fallback
        assert receiver.log_records()
        assert receiver.wait_for(
            lambda r: any(m.name == "attest.tool_use.calls" for m in r.metrics()), timeout=10
        )


def test_export_to_a_dead_endpoint_fails_in_one_line_quickly(runner: CliRunner) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start = time.monotonic()
    result = runner.invoke(
        main,
        [
            "grade",
            "--file",
            str(TRACES / "vercel__fallback.json"),
            "--export",
            "--otlp-endpoint",
            f"http://127.0.0.1:{port}",
        ],
    )
    assert time.monotonic() - start < 20
    assert result.exit_code == 4  # the pipeline failed, not the agent (that is 1)
    assert [line for line in result.output.splitlines() if line.startswith("attest-otel: error:")]


@pytest.mark.parametrize(
    ("headers", "problem"),
    [
        pytest.param("api-key=caf%C3%A9", "only printable ASCII", id="a value gRPC cannot send"),
        pytest.param("api-key", "is not NAME=VALUE", id="an entry the exporter would skip"),
    ],
)
def test_export_with_headers_the_exporter_would_drop_is_one_line_and_exit_2(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch, headers: str, problem: str
) -> None:
    """Issue 26, item 9: gRPC dropped the header and the export reported success."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", headers)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
    result = runner.invoke(
        main, ["grade", "--file", str(TRACES / "strands__fallback.json"), "--export"]
    )
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("attest-otel: error: OTEL_EXPORTER_OTLP_HEADERS:") and problem in line
