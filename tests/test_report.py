"""The report: Wilson intervals against known values, the tables, and the text."""

from __future__ import annotations

import json

import pytest

from attest_otel.report.stats import (
    NO_AGENT,
    GradeRecord,
    build_report,
    pass_rates_by_agent,
    pass_rates_by_tool,
    top_problems,
    wilson_interval,
    worst_runs,
)
from attest_otel.report.text import render_text


@pytest.mark.parametrize(
    ("passed", "total", "low", "high"),
    [
        pytest.param(8, 10, 0.4902, 0.9433, id="8 of 10"),
        pytest.param(10, 10, 0.7225, 1.0, id="10 of 10 reaches exactly 1"),
        pytest.param(0, 10, 0.0, 0.2775, id="0 of 10 starts at exactly 0"),
        pytest.param(1, 2, 0.0945, 0.9055, id="1 of 2 is nearly uninformative"),
        pytest.param(50, 100, 0.4038, 0.5962, id="50 of 100"),
        pytest.param(950, 1000, 0.9347, 0.9619, id="950 of 1000 is narrow"),
    ],
)
def test_wilson_interval_matches_known_values(
    passed: int, total: int, low: float, high: float
) -> None:
    interval = wilson_interval(passed, total)
    assert interval is not None
    assert interval == (pytest.approx(low, abs=5e-5), pytest.approx(high, abs=5e-5))


def test_no_trials_have_no_interval_rather_than_zero_to_one() -> None:
    assert wilson_interval(0, 0) is None


def test_a_wider_confidence_gives_a_wider_interval() -> None:
    i95, i99 = wilson_interval(8, 10), wilson_interval(8, 10, confidence=0.99)
    assert i95 is not None and i99 is not None
    assert i99[0] < i95[0] and i99[1] > i95[1]


@pytest.mark.parametrize(("passed", "total"), [(11, 10), (-1, 10), (1, -1)])
def test_impossible_counts_are_refused(passed: int, total: int) -> None:
    with pytest.raises(ValueError, match="successes"):
        wilson_interval(passed, total)


def _finding(tool: str, verdict: str = "correct", severity: str = "pass") -> dict[str, object]:
    return {
        "subject": tool,
        "verdict": verdict,
        "severity": severity,
        "reason": "",
        "step": 0,
        "evidence": None,
        "metadata": {},
    }


def _record(
    trace: str, agent: str | None, t: int, findings: list[dict[str, object]], summary: str = ""
) -> GradeRecord:
    failed = sum(f["severity"] == "fail" for f in findings)
    warned = sum(f["severity"] == "warn" for f in findings)
    correct = sum(f["verdict"] == "correct" for f in findings)
    verdict = "fail" if failed else ("review" if warned else "pass")
    return GradeRecord(
        trace,
        agent,
        t,
        {
            "check": "tool_use",
            "passed": not failed,
            "verdict": verdict,
            "score": correct / len(findings) if findings else 1.0,
            "summary": summary,
            "findings": findings,
            "metadata": {},
        },
    )


RECORDS = [
    _record("t1", "billing", 1, [_finding("lookup"), _finding("charge")]),
    _record(
        "t2",
        "billing",
        2,
        [
            _finding("lookup"),
            _finding("charge", "error_silent", "fail"),
            _finding("charge", "error_silent", "fail"),
        ],
        "charge failed twice",
    ),
    _record("t3", "billing", 3, [_finding("charge", "error_silent", "fail")], "charge failed"),
    _record("t4", "support", 4, [_finding("search")]),
    _record("t5", None, 5, [_finding("delete", "disallowed_tool", "fail")], "deleted an order"),
    _record("t6", "support", 6, [_finding("search", "review", "warn")]),
]


def test_agents_are_rated_by_runs_passed_worst_first() -> None:
    rates = pass_rates_by_agent(RECORDS)
    assert [(r.name, r.passed, r.total) for r in rates] == [
        (NO_AGENT, 0, 1),
        ("billing", 1, 3),
        ("support", 2, 2),
    ]
    assert (rates[1].low, rates[1].high) == (
        pytest.approx(0.0615, abs=5e-5),
        pytest.approx(0.7923, abs=5e-5),
    )


def test_a_tool_counts_once_per_run_failing_if_any_of_its_calls_failed() -> None:
    by_tool = {r.name: r for r in pass_rates_by_tool(RECORDS)}
    charge = by_tool["charge"]
    assert (charge.passed, charge.total, charge.calls, charge.failed_calls) == (1, 3, 4, 3)
    assert (by_tool["search"].passed, by_tool["search"].total) == (2, 2)  # a warning passes
    assert [r.name for r in pass_rates_by_tool(RECORDS)][:2] == ["delete", "charge"]


def test_problems_are_verdict_and_tool_pairs_most_frequent_first_with_the_latest_trace() -> None:
    problems = top_problems(RECORDS)
    assert [(p.verdict, p.tool, p.count, p.runs, p.example_trace_id) for p in problems] == [
        ("error_silent", "charge", 3, 2, "t3"),
        ("disallowed_tool", "delete", 1, 1, "t5"),
        ("review", "search", 1, 1, "t6"),
    ]


def test_worst_runs_are_lowest_score_first_with_their_trace_ids() -> None:
    worst = worst_runs(RECORDS, limit=3)
    assert [(w.trace_id, w.score, w.failed_calls) for w in worst] == [
        ("t5", 0.0, 1),
        ("t3", 0.0, 1),
        ("t6", 0.0, 0),
    ]


def test_the_report_keeps_only_the_window() -> None:
    report = build_report(RECORDS, since_ns=3, until_ns=5)
    assert (report.overall.passed, report.overall.total) == (1, 3)
    assert {r.name for r in report.agents} == {"billing", "support", NO_AGENT}


def test_the_json_report_has_rates_intervals_and_trace_ids() -> None:
    data = build_report(RECORDS, since_ns=None, until_ns=10).to_dict()
    json.dumps(data)  # serialisable as it is
    assert data["runs"] == {
        "name": "all runs",
        "passed": 3,
        "total": 6,
        "rate": 0.5,
        "interval": [pytest.approx(0.1876, abs=5e-5), pytest.approx(0.8124, abs=5e-5)],
    }
    assert data["tools"][0] == {
        "name": "delete",
        "passed": 0,
        "total": 1,
        "calls": 1,
        "failed_calls": 1,
        "rate": 0.0,
        "interval": [0.0, pytest.approx(0.7935, abs=5e-5)],
    }
    assert data["worst_runs"][0]["trace_id"] == "t5"


def test_the_text_report_is_a_few_short_tables() -> None:
    text = render_text(build_report(RECORDS, since_ns=0, until_ns=10**9), width=100)
    lines = text.splitlines()
    assert lines[0] == (
        "Tool use of graded agent runs, since 1970-01-01T00:00:00Z (until 1970-01-01T00:00:01Z)"
    )
    assert "Runs passed: 3/6 = 50.0% (95% CI 18.8% - 81.2%)" in lines
    assert any(
        line.split() == ["billing", "3", "1", "33.3%", "6.1%", "-", "79.2%"] for line in lines
    )
    assert any(line.split()[:5] == ["3", "2", "error_silent", "charge", "t3"] for line in lines)
    assert max(len(line) for line in lines) <= 100


def test_an_empty_window_says_so() -> None:
    text = render_text(build_report([], since_ns=0, until_ns=1))
    assert text.splitlines()[-1] == "No graded runs in this window."
