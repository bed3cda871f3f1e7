"""Span content cannot command the terminal (issue 26, item 7; docs/hostile-input-network.md).

A tool name and a tool result carry an OSC title, an OSC 8 link, clear-screen, a cursor
move, a carriage return and an 8-bit CSI. `grade`, `inspect` and the text report print them
as visible escapes; the only escape sequences left in the output are our own colours.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from click.testing import CliRunner

from attest_otel.cli import main
from attest_otel.report.stats import GradeRecord, build_report
from attest_otel.report.text import render_text

TRACES = Path(__file__).parents[1] / "fixtures" / "traces"

HOSTILE = (
    "\x1b]0;ALL PASS\x07"  # window title
    "\x1b]8;;https://evil.example/\x1b\\click\x1b]8;;\x1b\\"  # OSC 8 link
    "\x1b[2J\x1b[H"  # clear the screen, cursor home
    "\x1b[3A"  # cursor up three lines
    "\rPASS \x9b2K"  # carriage return, 8-bit CSI erase line
)
_OUR_COLOURS = re.compile(r"\x1b\[[0-9;]*m")


def _hostile_file(tmp_path: Path) -> Path:
    """The ADK trace of a card charge, its tool named with `HOSTILE`."""
    text = (TRACES / "adk__unrecovered_claims.json").read_text()
    path = tmp_path / "hostile.json"
    path.write_text(text.replace("charge_card", json.dumps(HOSTILE)[1:-1]))
    return path


def _assert_inert(out: str) -> None:
    left = _OUR_COLOURS.sub("", out)
    assert "\x1b" not in left and "\x07" not in left and "\x9b" not in left, repr(left[:400])
    assert "\r" not in left
    assert "\\x1b]0;ALL PASS\\x07" in left  # shown, so a reader sees what was sent


def test_grade_prints_control_characters_of_span_content_as_escapes(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["grade", "--file", str(_hostile_file(tmp_path))], color=True)
    assert result.exit_code in (0, 1), result.output
    assert "score" in result.stdout
    _assert_inert(result.stdout)


def test_inspect_prints_control_characters_of_span_content_as_escapes(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main, ["inspect", "--file", str(_hostile_file(tmp_path))], color=True
    )
    assert result.exit_code == 0, result.output
    _assert_inert(result.stdout)


def test_the_text_report_prints_control_characters_as_escapes() -> None:
    finding = {
        "subject": HOSTILE,
        "verdict": "error_silent",
        "severity": "fail",
        "reason": "",
        "step": 0,
        "evidence": None,
        "metadata": {},
    }
    record = GradeRecord(
        "t1",
        HOSTILE,
        1,
        {
            "check": "tool_use",
            "passed": False,
            "verdict": "fail",
            "score": 0.0,
            "summary": HOSTILE,
            "findings": [finding],
            "metadata": {},
        },
    )
    text = render_text(build_report([record], since_ns=0, until_ns=10), width=400)
    _assert_inert(text)


def test_a_cut_call_sequence_counts_calls_whatever_the_tool_names_hold() -> None:
    """A tool name is the sender's: "a xb" or "t x9" must not be read back as a repeat
    count (it raised ValueError, or miscounted)."""
    from attest_otel.cli.render import call_sequence

    names = ["a xb", *(f"t{i} x9" for i in range(60))]
    line = call_sequence(names, width=40)
    *shown, rest = line.split(" -> ")
    assert shown[0] == "a xb"
    assert rest == f"... ({len(names) - len(shown)} more calls, {len(names)} in all)", line
