"""Text output stays readable however long the run: sequences folded, correct calls counted."""

from __future__ import annotations

import pytest

from attest_otel.cli.render import MAX_PASSING_LINES, call_sequence, run_block
from attest_otel.model import CheckResult, Finding, Run, Step, ToolCall


def test_repeats_are_folded_and_a_long_sequence_is_cut_with_a_count() -> None:
    assert call_sequence([]) == "none"
    assert call_sequence(["a", "a", "a", "b", "a"]) == "a x3 -> b -> a"
    long = call_sequence([f"tool_{i % 7}" for i in range(30_000)])
    assert len(long) < 200
    assert long.endswith("more calls, 30000 in all)")
    shown = long.split(" -> ... (")[0].count("->") + 1
    assert f"({30_000 - shown} more calls" in long


def test_a_run_of_thousands_of_calls_lists_its_problems_and_counts_the_rest() -> None:
    n = 5_000
    findings = [Finding("pass", "correct", "lookup", "", None, i, {}) for i in range(n - 1)]
    findings.append(Finding("fail", "disallowed_tool", "delete", "not allowed", None, n - 1, {}))
    steps = [Step(tool_call=ToolCall(name=f.subject)) for f in findings]
    result = CheckResult("tool_use", False, "fail", (n - 1) / n, "", findings, {})
    text = run_block("run 0", Run(task="t", steps=steps), result)
    lines = text.splitlines()
    assert len(lines) < 10
    assert any("delete" in line and "disallowed_tool" in line for line in lines)
    assert f"... and {n - 1} correct calls" in text
    assert "lookup x4999 -> delete" in text


def test_a_short_run_lists_every_call() -> None:
    findings = [
        Finding("pass", "correct", f"t{i}", "", None, i, {}) for i in range(MAX_PASSING_LINES)
    ]
    result = CheckResult("tool_use", True, "pass", 1.0, "", findings, {})
    text = run_block("run 0", Run(task="t", steps=[]), result)
    assert all(f"t{i}" in text for i in range(MAX_PASSING_LINES))
    assert "correct calls (--json" not in text


def test_a_long_step_says_what_it_does_on_a_terminal_only(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from attest_otel.cli.common import status

    with status("reading big.json", enabled=True):
        pass
    err = capsys.readouterr().err
    assert err.startswith("reading big.json...") and err.rstrip().endswith("s")
    with status("reading big.json"):  # stderr is not a terminal under pytest
        pass
    assert capsys.readouterr().err == ""
