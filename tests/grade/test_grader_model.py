"""The grader's model path end to end: the real anthropic SDK against the fake Messages API."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import anthropic
import pytest

from attest_otel import check_tool_use, grader, llm
from attest_otel.errors import UsageError
from attest_otel.grade.llm import AnthropicJudge
from attest_otel.grade.llm.cache import AnswerCache
from attest_otel.model import Run, Step, ToolCall, read_runs
from tests.fakes.messages_server import MessagesServer, api_error, verdict

EXAMPLES = Path(__file__).parents[2] / "examples" / "runs"


def client_for(server: MessagesServer) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key="test", base_url=server.url, max_retries=0, timeout=5)


def two_unrecovered_errors() -> Run:
    return Run(
        task="Pay the bill.",
        steps=[
            Step(ToolCall("charge_card", output="Error: declined")),
            Step(ToolCall("lookup", output="fine")),
            Step(ToolCall("email", output="exception: smtp down")),
        ],
        final_answer="All done, paid and emailed!",
    )


def test_check_tool_use_inside_using_makes_one_call_per_unrecovered_error(
    messages_server: MessagesServer,
) -> None:
    messages_server.responder = verdict({"outcome": "claimed_success", "reason": "It says paid."})
    with llm.using(AnthropicJudge(client_for(messages_server), cache=AnswerCache())):
        result = check_tool_use(two_unrecovered_errors())
    assert messages_server.calls == 2
    assert [f.verdict for f in result.findings] == [
        "error_claimed_success",
        "correct",
        "error_claimed_success",
    ]
    assert result.metadata == {"model": "claude-haiku-4-5", "model_calls": 2}


def test_a_run_without_captured_content_asks_the_model_nothing(
    messages_server: MessagesServer,
) -> None:
    messages_server.responder = verdict({"outcome": "acknowledged", "reason": "It says so."})
    judge = AnthropicJudge(client_for(messages_server), cache=AnswerCache())
    blind = Run(
        steps=[
            Step(ToolCall("charge_card", is_error=True, output_captured=False)),
            Step(ToolCall("lookup", output_captured=False)),
        ],
        content_captured=False,
    )
    result = grader.grade(blind, judge=judge, appropriate=True)
    assert messages_server.calls == 0
    first = result.findings[0]
    assert (first.verdict, first.metadata["recovery"]) == ("error_silent", "unchecked")
    assert "no content captured" in first.reason
    assert [f.metadata["appropriate"] for f in result.findings] == [None, None]
    assert result.metadata["model_calls"] == 0
    # The same calls with content captured do reach the model: the skip is the flag's doing.
    seen = Run(
        task="Pay.",
        steps=[
            Step(ToolCall("charge_card", output="Error: declined")),
            Step(ToolCall("lookup", output="fine")),
        ],
        final_answer="It failed.",
    )
    grader.grade(seen, judge=judge, appropriate=True)
    assert messages_server.calls > 0


def test_check_tool_use_outside_using_makes_no_call(messages_server: MessagesServer) -> None:
    result = check_tool_use(two_unrecovered_errors())
    assert messages_server.calls == 0
    assert result.findings[0].metadata["recovery"] == "unchecked"


def test_identical_questions_are_answered_from_the_cache_without_a_call(
    messages_server: MessagesServer,
) -> None:
    messages_server.responder = verdict({"outcome": "acknowledged", "reason": "Says it failed."})
    judge = AnthropicJudge(client_for(messages_server), cache=AnswerCache())
    run = read_runs(EXAMPLES / "unrecovered.json")[0]
    first = grader.grade(run, judge=judge)
    second = grader.grade(run, judge=judge)
    assert messages_server.calls == 1
    assert (first.metadata["model_calls"], second.metadata["model_calls"]) == (1, 0)
    assert first.findings == second.findings


def test_a_500_from_the_model_becomes_unchecked_with_the_failure_in_the_reason(
    messages_server: MessagesServer,
) -> None:
    messages_server.responder = lambda request: api_error(500, "boom")
    judge = AnthropicJudge(client_for(messages_server), cache=AnswerCache())
    finding = grader.grade(read_runs(EXAMPLES / "unrecovered.json")[0], judge=judge).findings[0]
    assert (finding.verdict, finding.metadata["recovery"]) == ("error_silent", "unchecked")
    assert "500" in finding.reason


def test_tool_use_with_check_answer_and_no_key_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(UsageError, match="ANTHROPIC_API_KEY"):
        grader.tool_use(two_unrecovered_errors(), check_answer=True)


def test_tools_check_answer_in_a_subprocess_reads_the_key_and_base_url(
    messages_server: MessagesServer,
) -> None:
    messages_server.responder = verdict({"outcome": "acknowledged", "reason": "It apologises."})
    env = {
        **os.environ,
        "ANTHROPIC_API_KEY": "test",
        "ANTHROPIC_BASE_URL": messages_server.url,
        "ATTEST_OTEL_MODEL": "claude-test",
    }
    script = Path(sys.executable).parent / "attest-otel"
    proc = subprocess.run(
        [str(script), "tools", str(EXAMPLES / "unrecovered.json"), "--check-answer", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)[0]["result"]
    assert result["findings"][0]["metadata"]["recovery"] == "acknowledged"
    assert result["metadata"] == {"model": "claude-test", "model_calls": 1}
    assert messages_server.requests[0]["model"] == "claude-test"


def test_tools_without_check_answer_sends_nothing_even_with_a_key(
    messages_server: MessagesServer,
) -> None:
    env = {**os.environ, "ANTHROPIC_API_KEY": "test", "ANTHROPIC_BASE_URL": messages_server.url}
    script = Path(sys.executable).parent / "attest-otel"
    proc = subprocess.run(
        [str(script), "tools", str(EXAMPLES / "unrecovered.json")],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert proc.returncode == 1
    assert messages_server.calls == 0


def test_run_uses_the_model_whenever_a_key_is_set(messages_server: MessagesServer) -> None:
    messages_server.responder = verdict({"outcome": "silent", "reason": "Not mentioned."})
    env = {**os.environ, "ANTHROPIC_API_KEY": "test", "ANTHROPIC_BASE_URL": messages_server.url}
    script = Path(sys.executable).parent / "attest-otel"
    proc = subprocess.run(
        [str(script), "run", str(EXAMPLES / "unrecovered.json"), "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert proc.returncode == 1
    assert json.loads(proc.stdout)[0]["result"]["findings"][0]["metadata"]["recovery"] == "silent"
    assert messages_server.calls == 1


def test_appropriate_marks_a_poor_choice_incorrect(messages_server: MessagesServer) -> None:
    messages_server.responder = verdict(
        {"appropriate": False, "reason": "A weather tool cannot refund."}
    )
    with llm.using(AnthropicJudge(client_for(messages_server), cache=AnswerCache())):
        result = grader.tool_use(read_runs(EXAMPLES / "clean.json")[0], appropriate=True)
    assert [f.verdict for f in result.findings] == ["incorrect"]
    assert result.findings[0].metadata["appropriate"] is False
