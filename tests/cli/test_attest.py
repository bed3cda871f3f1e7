"""The `tools` and `run` commands: output, JSON shape, exit codes, and errors as one line."""

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
EXAMPLES = ROOT / "examples" / "runs"


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    return CliRunner()


def test_tools_exits_0_when_every_run_passed(runner: CliRunner) -> None:
    result = runner.invoke(main, ["tools", str(EXAMPLES / "fallback.json")])
    assert result.exit_code == 0, result.output
    assert "PASS" in result.output and "score 1.00" in result.output
    assert "lookup_order -> charge_card -> charge_card_backup" in result.output


def test_tools_exits_1_and_shows_the_problem_with_its_step_when_a_run_failed(
    runner: CliRunner,
) -> None:
    result = runner.invoke(main, ["tools", str(EXAMPLES / "disallowed.json")])
    assert result.exit_code == 1
    assert "FAIL" in result.output
    line = next(x for x in result.output.splitlines() if "delete_ticket" in x and "step" in x)
    assert "step 1" in line and "disallowed_tool" in line


def test_tools_json_is_one_entry_per_run_in_file_order(runner: CliRunner) -> None:
    result = runner.invoke(main, ["tools", str(ROOT / "examples" / "runs.jsonl"), "--json"])
    assert result.exit_code == 1
    data = json.loads(result.output)
    assert [d["result"]["verdict"] for d in data] == ["pass", "pass", "pass", "fail", "fail"]
    assert data[2]["task"] == "Refund order 42 to the customer's card."
    assert set(data[0]["result"]) == {
        "check",
        "passed",
        "verdict",
        "score",
        "summary",
        "findings",
        "metadata",
    }


def test_unrecovered_errors_are_unchecked_offline(runner: CliRunner) -> None:
    result = runner.invoke(main, ["tools", str(EXAMPLES / "unrecovered.json"), "--json"])
    finding = json.loads(result.output)[0]["result"]["findings"][0]
    assert (finding["verdict"], finding["metadata"]["recovery"]) == ("error_silent", "unchecked")
    assert finding["evidence"] == "Exception: reservation service unavailable"


@pytest.mark.parametrize("flag", ["--appropriate", "--check-answer"])
def test_a_model_check_without_a_key_is_a_usage_error_naming_the_variable(
    runner: CliRunner, flag: str
) -> None:
    result = runner.invoke(main, ["tools", str(EXAMPLES / "clean.json"), flag])
    assert result.exit_code == 2
    assert "ANTHROPIC_API_KEY" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_run_without_a_key_grades_offline(runner: CliRunner) -> None:
    result = runner.invoke(main, ["run", str(EXAMPLES / "retried.json"), "--json"])
    assert result.exit_code == 0
    assert json.loads(result.output)[0]["result"]["metadata"] == {"model": None, "model_calls": 0}


@pytest.mark.parametrize(
    ("content", "name", "where"),
    [
        ("{oops", "bad.json", "bad.json:1:"),
        ('{"task": "a"}\n[1]\n', "bad.jsonl", "bad.jsonl:2:"),
    ],
    ids=["a file that is not JSON", "a jsonl with a bad line"],
)
def test_bad_input_is_one_line_and_exit_2(
    runner: CliRunner, tmp_path: Path, content: str, name: str, where: str
) -> None:
    path = tmp_path / name
    path.write_text(content)
    result = runner.invoke(main, ["tools", str(path)])
    assert result.exit_code == 2
    assert result.output.count("\n") == 1 and where in result.output
    assert "Traceback" not in result.output


def test_the_installed_script_runs_as_a_real_subprocess() -> None:
    script = Path(sys.executable).parent / "attest-otel"
    env = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"}
    proc = subprocess.run(
        [str(script), "tools", str(EXAMPLES / "unrecovered.json")],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert proc.returncode == 1
    assert "error_silent" in proc.stdout


def test_tools_does_not_import_anthropic_or_grpc() -> None:
    code = (
        "import sys; from click.testing import CliRunner; from attest_otel.cli import main;"
        f"CliRunner().invoke(main, ['tools', {str(EXAMPLES / 'clean.json')!r}]);"
        "print(sorted(m for m in ('anthropic', 'grpc') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "[]", out.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["report", "--since", "5x"], "Invalid value for '--since'"),
        (["grade", "--bogus"], "No such option '--bogus'"),
        (["nope"], "No such command 'nope'"),
    ],
)
def test_a_usage_error_is_one_line_with_where_to_read_more(args: list[str], message: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "attest_otel.cli", *args], capture_output=True, text=True
    )
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("attest-otel: error: ") and message in lines[0]
    assert "--help')" in lines[0]


def test_inspect_help_does_not_promise_to_grade() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "attest_otel.cli", "inspect", "--help"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0
    assert "Grade every trace" not in done.stdout
