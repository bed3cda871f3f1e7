"""No blind passes: each rule of docs/rules.md, point 13, on its example trace.

Every example in tests/fixtures/gaps is a real fixture trace with one thing taken away
(`derive.py` there says how); the same trace whole must read with no gap, so each test fails
if its rule is gone or if it fires on what was read right.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from attest_otel.grade import grader
from attest_otel.model import Run, Span, Step, ToolCall
from attest_otel.pipeline import grade_traces, read_file
from tests.fixtures.labels import rebuild

HERE = Path(__file__).resolve().parent.parent / "fixtures"
GAPS = HERE / "gaps"
TRACES = HERE / "traces"


def _only_run(path: Path) -> Run:
    (trace,) = read_file(path)
    (run,) = trace.runs
    return run


def _review(run: Run, needle: str) -> None:
    """The run is `review` (never a plain pass), counts as passed, and names the gap."""
    result = grader.tool_use(run)
    assert result.verdict == "review", result.summary
    assert result.passed
    assert [g for g in run.gaps if needle in g], run.gaps
    assert result.metadata["gaps"] == run.gaps
    assert needle in result.summary


def test_a_call_the_model_asked_for_that_no_span_accounts_for_is_review() -> None:
    assert _only_run(TRACES / "langgraph_openinference__all_ok.json").gaps == []
    run = _only_run(GAPS / "asked_no_span.json")
    assert [c.name for _, c in run.tool_calls] == ["lookup_order"]
    _review(run, "The model asked for charge_card but no tool span or call accounts for it.")


def test_a_tool_like_span_no_dialect_read_is_review() -> None:
    run = _only_run(GAPS / "unclaimed_tool_span.json")
    _review(run, "'charge_card' looks like a tool call but no dialect read it.")


def test_results_that_were_not_received_are_review() -> None:
    assert _only_run(TRACES / "openai_v2_events__fallback.json").gaps == []
    run = _only_run(GAPS / "results_not_received.json")
    assert [c.name for _, c in run.tool_calls] == [
        "lookup_order",
        "charge_card",
        "charge_card_backup",
    ]
    _review(
        run,
        "The result of lookup_order, charge_card and charge_card_backup was not captured",
    )


def test_model_calls_that_asked_for_tools_with_nothing_read_after_them_are_review() -> None:
    """The issue's new user: only the client instrumented, its log records never received;
    before, this graded PASS 1.00 with 0 calls."""
    run = _only_run(GAPS / "requests_not_received.json")
    assert run.tool_calls == []
    _review(run, "The model asked for tools 2 times but its messages were not captured")


def test_a_call_that_failed_by_its_span_status_still_fails_with_its_result_unknown() -> None:
    run = _only_run(TRACES / "openai_v2_nocontent__unrecovered_admits.json")
    assert run.gaps  # lookup_order's result is unknown
    assert grader.tool_use(run).verdict == "fail"


def test_gaps_the_sidecar_put_on_a_run_make_it_review_and_a_failure_still_fails() -> None:
    refused = "A request of this trace was refused (8 MiB over the 4 MiB limit): spans are missing."
    clean = Run(steps=[Step(ToolCall("lookup_order", output="ok"))], gaps=[refused])
    result = grader.tool_use(clean)
    assert (result.verdict, result.passed, result.metadata["gaps"]) == ("review", True, [refused])
    assert refused in result.summary
    failing = Run(steps=[Step(ToolCall("charge_card", output="Error: declined"))], gaps=[refused])
    assert grader.tool_use(failing).verdict == "fail"


def test_a_plain_chat_turn_is_still_a_pass() -> None:
    """An agent that answered without asking for a tool: nothing is missing, nothing to flag."""
    tid = "0" * 31 + "1"
    agent = Span(
        tid,
        "a" * 16,
        None,
        "invoke_agent helper",
        1,
        10,
        attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "helper"},
    )
    chat = Span(
        tid,
        "b" * 16,
        "a" * 16,
        "chat gpt-4o-mini",
        2,
        9,
        attributes={
            "gen_ai.operation.name": "chat",
            "gen_ai.response.finish_reasons": ["stop"],
        },
    )
    (graded,) = grade_traces([agent, chat])
    (one,) = graded.runs
    assert one.run.gaps == []
    assert one.result.verdict == "pass"


def test_a_run_file_keeps_its_gaps_and_grades_review_when_read_back(tmp_path: Path) -> None:
    from attest_otel.model import read_runs, run_to_dict

    run = _only_run(GAPS / "asked_no_span.json")
    path = tmp_path / "run.json"
    path.write_text(json.dumps(run_to_dict(run)), encoding="utf-8")
    (back,) = read_runs(path)
    assert back.gaps == run.gaps
    assert grader.tool_use(back).verdict == "review"
    whole = run_to_dict(_only_run(TRACES / "langgraph_openinference__all_ok.json"))
    assert "gaps" not in whole  # attest's own run files stay as they were


LABELS = sorted(TRACES.glob("*.labels.json"))


def test_no_run_labelled_failing_passes_and_runs_read_right_get_no_review() -> None:
    """Over every labelled fixture: a failing run is never a plain pass; a fixture whose trace
    holds its content (its label does not say `content: none`) is read right, so none of its
    runs may be `review`."""
    fail_as_pass: list[str] = []
    reviews: Counter[str] = Counter()
    for path in LABELS:
        label = json.loads(path.read_text(encoding="utf-8"))
        name = path.name.removesuffix(".labels.json")
        for run, want in zip(rebuild(path, label), label["runs"], strict=False):
            verdict = grader.tool_use(run).verdict
            if want["verdict_offline"] == "fail" and verdict == "pass":
                fail_as_pass.append(f"{name}: {run.agent}")
            if verdict == "review" and label.get("content") != "none":
                reviews[name.split("__")[0]] += 1
    assert len(LABELS) >= 270
    assert fail_as_pass == []
    assert reviews == Counter()


@pytest.mark.parametrize("name", ["adk__unrecovered_claims", "autogen__unrecovered_claims"])
def test_a_returned_error_nobody_captured_is_review_not_pass(name: str) -> None:
    """Before: these failing runs graded pass (the error was in a result never captured)."""
    label = json.loads((TRACES / f"{name}.labels.json").read_text(encoding="utf-8"))
    assert label["runs"][0]["verdict_offline"] == "fail"
    (run,) = rebuild(TRACES / f"{name}.labels.json", label)
    _review(run, "was not captured, so an error")


def test_a_run_the_gap_check_fails_on_is_review_not_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    from attest_otel.adapt import gaps

    def broken(*_: object) -> list[str]:
        raise RuntimeError("a bug")

    monkeypatch.setattr(gaps, "_find", broken)
    run = _only_run(TRACES / "langgraph_openinference__all_ok.json")
    assert run.gaps == [gaps.UNCHECKED]
    assert grader.tool_use(run).verdict == "review"
