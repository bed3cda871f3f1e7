"""The command line's rough edges, each with the exit code the README documents: inputs that
would otherwise pass silently (misspelt keys, a policy entry no run uses, nothing to grade),
flags that exclude each other, a run file that is really OTLP, reasons wrapped to the
terminal, and a reader that closes the pipe early."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from attest_otel.cli import main

ROOT = Path(__file__).parents[2]
EXAMPLES = ROOT / "examples"
TRACE = EXAMPLES / "traces" / "langgraph_unrecovered.json"


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    for name in list(os.environ):
        if name.startswith("OTEL_") or name == "ANTHROPIC_API_KEY":
            monkeypatch.delenv(name)
    return CliRunner()


def _errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("attest-otel: error:")]


def test_misspelt_run_keys_are_warned_with_the_likely_key_and_strict_makes_them_exit_2(
    runner: CliRunner, tmp_path: Path
) -> None:
    run = tmp_path / "run.json"
    run.write_text(
        json.dumps(
            {
                "taks": "Refund order 42",
                "stepz": [],
                "steps": [{"tool_call": {"name": "refund", "outptu": "ok"}}],
            }
        )
    )
    result = runner.invoke(main, ["tools", str(run)])
    assert result.exit_code == 1  # graded as read: the unread `outptu` leaves no output, an error
    warnings = [x for x in result.stderr.splitlines() if x.startswith("attest-otel: warning:")]
    assert warnings == [
        f"attest-otel: warning: {run}: unknown key 'taks' (did you mean 'task'?)",
        f"attest-otel: warning: {run}: unknown key 'stepz' (did you mean 'steps'?)",
        f"attest-otel: warning: {run}: unknown key steps[0].tool_call.'outptu' (did you mean 'output'?)",
    ]
    strict = runner.invoke(main, ["tools", "--strict", str(run)])
    assert strict.exit_code == 2
    assert _errors(strict.stderr) == [
        "attest-otel: error: 3 warning(s) above, and --strict makes them errors"
    ]
    assert "PASS" not in strict.stdout  # nothing graded under --strict once a warning fired


@pytest.mark.parametrize(
    ("name", "text", "says"),
    [
        pytest.param("empty.jsonl", "", "no runs to grade", id="an empty .jsonl"),
        pytest.param("blank.jsonl", "\n\n", "no runs to grade", id="blank lines only"),
        pytest.param("obj.json", "{}", "an empty run object", id="{}"),
        pytest.param("empty.json", "", "not valid JSON", id="an empty .json"),
    ],
)
def test_a_run_file_with_nothing_to_grade_is_exit_2_not_a_green_pass(
    runner: CliRunner, tmp_path: Path, name: str, text: str, says: str
) -> None:
    path = tmp_path / name
    path.write_text(text)
    for command in ("tools", "run"):
        result = runner.invoke(main, [command, str(path)])
        assert result.exit_code == 2, (command, result.output)
        (line,) = _errors(result.stderr)
        assert says in line


@pytest.mark.parametrize("text", ["", "{}", '{"resourceSpans": []}'])
def test_an_otlp_file_with_no_spans_is_exit_2(runner: CliRunner, tmp_path: Path, text: str) -> None:
    path = tmp_path / "traces.json"
    path.write_text(text)
    result = runner.invoke(main, ["grade", "--file", str(path)])
    assert result.exit_code == 2, result.output
    assert _errors(result.stderr) == [f"attest-otel: error: {path}: no spans to grade"]


def test_a_policy_agent_that_matches_no_run_is_warned_with_the_closest_name(
    runner: CliRunner, tmp_path: Path
) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "agents:\n  billing_agnet:\n    allowed_tools: [lookup_invoice]\n"
        "  '*':\n    tool_fallbacks: {search: [search_backup]}\n"
    )
    result = runner.invoke(main, ["grade", "--file", str(TRACE), "--policy", str(policy)])
    assert result.exit_code == 1  # graded (the run fails on its own error)
    assert result.stderr.splitlines()[0] == (
        f"attest-otel: warning: policy {policy}: agent 'billing_agnet' matches no run "
        "(did you mean 'billing_agent'?)"
    )
    strict = runner.invoke(
        main, ["grade", "--strict", "--file", str(TRACE), "--policy", str(policy)]
    )
    assert strict.exit_code == 2


def test_file_and_trace_id_exclude_each_other(runner: CliRunner) -> None:
    result = runner.invoke(main, ["grade", "--file", "a", "--trace-id", "b"])
    assert result.exit_code == 2
    assert _errors(result.stderr) == [
        "attest-otel: error: --file and --trace-id exclude each other: grade a file, or "
        "traces from --from, not both"
    ]


def test_tools_on_an_otlp_file_says_to_use_grade_file(runner: CliRunner, tmp_path: Path) -> None:
    for path in (TRACE, tmp_path / "one.json"):
        if path.parent == tmp_path:
            path.write_text(json.dumps({"resourceSpans": []}))
        result = runner.invoke(main, ["tools", str(path)])
        assert result.exit_code == 2
        (line,) = _errors(result.stderr)
        assert f"grade it with `attest-otel grade --file {path}`" in line


def test_reasons_are_wrapped_to_the_terminal_not_cut(runner: CliRunner) -> None:
    run = str(EXAMPLES / "runs" / "unrecovered.json")
    reason = (
        "The tool returned an error and nothing recovered it; no model was available "
        "to read the final answer."
    )
    wide = runner.invoke(main, ["tools", run], env={"COLUMNS": "200"})
    assert any(line.strip() == reason for line in wide.stdout.splitlines())
    narrow = runner.invoke(main, ["tools", run], env={"COLUMNS": "60"})
    lines = narrow.stdout.splitlines()
    start = next(i for i, x in enumerate(lines) if x.strip().startswith("The tool returned"))
    joined = " ".join(x.strip() for x in lines[start : start + 3])
    assert joined.startswith(reason)  # every word there, none cut off
    assert all(len(x) <= 60 for x in lines[start : start + 2])


def test_a_reader_that_closes_the_pipe_early_gets_exit_141_and_one_line() -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)  # like `| head -0`: nobody will read
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "ANTHROPIC"))}
    done = subprocess.run(
        [sys.executable, "-m", "attest_otel.cli", "grade", "--file", str(TRACE)],
        stdout=write_end,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    os.close(write_end)
    assert done.returncode == 141
    assert done.stderr == "attest-otel: stdout was closed before the output ended\n"
