"""`grade --budget`: each run's grading, model calls included, has a time bound in the CLI
too (issue 26; docs/hostile-input.md, "Grading budget"). The model is the fake Messages API
answering never, asked through the real `anthropic` SDK from a real `attest-otel` process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fakes.messages_server import MessagesServer, verdict

pytestmark = pytest.mark.timeout(120)

REPO = Path(__file__).resolve().parents[2]
TRACE = REPO / "tests" / "fixtures" / "traces" / "vercel__unrecovered_ignores.json"


def _grade(*args: str, env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], float]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "ANTHROPIC"))}
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "attest_otel.cli", "grade", *args],
        cwd=REPO,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=90,
    )
    return result, time.monotonic() - started


def test_a_model_that_never_answers_costs_a_run_its_budget(
    messages_server: MessagesServer,
) -> None:
    """Before: the run waited for the SDK's 60 s timeout and its two retries."""
    messages_server.responder = verdict({"outcome": "acknowledged", "reason": "x"}, delay_s=100)
    env = {"ANTHROPIC_API_KEY": "test", "ANTHROPIC_BASE_URL": messages_server.url}
    # The same command with the model answering at once: what starting the CLI costs here.
    quick = MessagesServer().start()
    try:
        _, usual_s = _grade(
            "--file",
            str(TRACE),
            "--check-answer",
            env={"ANTHROPIC_API_KEY": "test", "ANTHROPIC_BASE_URL": quick.url},
        )
    finally:
        quick.stop()
    result, took = _grade(
        "--file", str(TRACE), "--check-answer", "--budget", "2", "--json", env=env
    )
    print(f"graded in {took:.2f}s with a hung model and --budget 2 ({usual_s:.2f}s answered)")
    assert messages_server.calls >= 1, "the model was never asked"
    assert result.returncode == 1, result.stderr  # review is not a pass
    assert "Traceback" not in result.stderr
    (trace,) = json.loads(result.stdout)["traces"]
    (run,) = trace["runs"]
    assert run["result"]["verdict"] == "review"
    assert run["result"]["metadata"]["ungraded"] == "time"
    assert "budget (2s)" in run["result"]["summary"]
    assert took < usual_s + 2 + 3.0, (took, usual_s)


def test_tools_holds_each_run_to_the_budget_too(messages_server: MessagesServer) -> None:
    messages_server.responder = verdict({"outcome": "acknowledged", "reason": "x"}, delay_s=100)
    env = {"ANTHROPIC_API_KEY": "test", "ANTHROPIC_BASE_URL": messages_server.url}
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "ANTHROPIC"))}
    args = ["tools", str(REPO / "examples" / "runs" / "unrecovered.json"), "--check-answer"]
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "attest_otel.cli", *args, "--budget", "2", "--json"],
        cwd=REPO,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=90,
    )
    took = time.monotonic() - started
    assert messages_server.calls >= 1
    assert result.returncode == 1, result.stderr
    assert "budget (2s)" in result.stdout
    # Well under the SDK's own 60 s timeout (three times, with its retries).
    assert took < 45, took
