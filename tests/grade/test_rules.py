"""Every row of the source document's tables and every point of rules.md, as sentences."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from attest_otel.grade import rules
from attest_otel.grade.grader import grade
from attest_otel.grade.questions import (
    AnswerQuestion,
    AnswerVerdict,
    ChoiceQuestion,
    ChoiceVerdict,
    ModelFailure,
)
from attest_otel.model import Run, Step, ToolCall, run_from_dict


def call(name: str, output: Any = "ok", is_error: bool | None = None, **kw: Any) -> Step:
    return Step(tool_call=ToolCall(name=name, arguments={}, output=output, is_error=is_error, **kw))


def make_run(
    *steps: Step,
    allowed: list[str] | None = None,
    fallbacks: dict[str, list[str]] | None = None,
    final: str | None = "Done.",
) -> Run:
    return Run(
        task="t",
        steps=list(steps),
        allowed_tools=allowed,
        tool_fallbacks=fallbacks or {},
        final_answer=final,
    )


class FakeJudge:
    """A scripted judge: unit tests of the grader's plumbing (the real one has its own tests)."""

    model = "fake-model"

    def __init__(self, answers: Sequence[Any] = (), choices: Sequence[Any] = ()) -> None:
        self.answers = list(answers)
        self.choices = list(choices)
        self.answer_questions: list[AnswerQuestion] = []
        self.choice_questions: list[ChoiceQuestion] = []

    def answer(self, questions: Sequence[AnswerQuestion]) -> list[Any]:
        self.answer_questions.extend(questions)
        return [self.answers.pop(0) for _ in questions]

    def choose(self, questions: Sequence[ChoiceQuestion]) -> list[Any]:
        self.choice_questions.extend(questions)
        return [self.choices.pop(0) for _ in questions]


# --- Errors: is a call an error? -----------------------------------------------------------

ERROR_CASES = [
    ("", True, "an empty output is an error"),
    ("   \n", True, "an output of only white space is an error"),
    ("Error: card declined", True, "an output starting with error is an error"),
    ("  ERROR 500", True, "the prefix test ignores case and leading white space"),
    ("exception in handler", True, "an output starting with exception is an error"),
    ("Traceback (most recent call last):", True, "an output starting with traceback is an error"),
    ("payment failed, error: 402", True, "an output containing error: is an error"),
    ("got Exception: boom", True, "an output containing exception: is an error"),
    ("status 402", False, "an output that does not look like an error is not one"),
    ("no errors found", False, "the word error alone in the middle is not an error"),
    ("errorless", True, "an output starting with the letters error is an error"),
    (
        {"error": "x"},
        False,
        "a JSON object is tested as its compact text, which starts with a brace",
    ),
    ({"msg": "error: x"}, True, "a JSON object containing error: in its compact text is an error"),
    (None, True, "a missing output counts as empty, so it is an error"),
    (0, False, "a number output is its text and not an error"),
]


@pytest.mark.parametrize(
    ("output", "expected"), [(o, e) for o, e, _ in ERROR_CASES], ids=[i for _, _, i in ERROR_CASES]
)
def test_the_error_test(output: Any, expected: bool) -> None:
    assert rules.is_error(ToolCall("t", output=output)) is expected


@pytest.mark.parametrize(
    ("output", "flag", "expected"),
    [
        ("all good", True, True),
        ("Error: looks bad", False, False),
        ("", False, False),
    ],
    ids=[
        "is_error true makes any output an error",
        "is_error false makes an error-looking output not an error",
        "is_error false makes even an empty output not an error",
    ],
)
def test_is_error_overrides_the_output(output: str, flag: bool, expected: bool) -> None:
    assert rules.is_error(ToolCall("t", output=output, is_error=flag)) is expected


def test_an_uncaptured_output_is_unknown_so_only_the_status_decides() -> None:
    assert rules.is_error(ToolCall("t", output=None, output_captured=False)) is False
    assert rules.is_error(ToolCall("t", output=None, output_captured=False, is_error=True)) is True


@pytest.mark.parametrize(
    ("call_", "shown"),
    [
        (ToolCall("t", output="Error: x", is_error=True, error_text="status text"), "Error: x"),
        (
            ToolCall("t", output=None, output_captured=False, is_error=True, error_text="boom"),
            "boom",
        ),
        (ToolCall("t", output="", is_error=True, error_text="ValueError: bad"), "ValueError: bad"),
    ],
    ids=[
        "the error text shown is the result when there is one",
        "the error text shown is the status description when the result was not captured",
        "the error text shown falls back when the result is empty",
    ],
)
def test_error_output_shown(call_: ToolCall, shown: str) -> None:
    assert rules.error_output(call_) == shown


# --- Allowed tools -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("allowed", "expected"),
    [
        (None, "correct"),
        ([], "disallowed_tool"),
        (["search"], "correct"),
        (["Search"], "disallowed_tool"),
        (["other"], "disallowed_tool"),
    ],
    ids=[
        "null allowed_tools allows every tool",
        "an empty list allows none",
        "a listed tool is allowed",
        "names are compared case-sensitively",
        "a tool missing from the list is disallowed",
    ],
)
def test_allowed_tools(allowed: list[str] | None, expected: str) -> None:
    result = grade(make_run(call("search"), allowed=allowed), judge=None)
    assert result.findings[0].verdict == expected
    assert result.findings[0].metadata["allowed"] is (expected == "correct")


def test_a_disallowed_tool_fails_even_when_it_errored_unrecovered() -> None:
    result = grade(make_run(call("x", "error: no"), allowed=[]), judge=None)
    assert result.findings[0].verdict == "disallowed_tool"
    assert result.findings[0].severity == "fail"
    assert result.findings[0].metadata["recovery"] == "unchecked"


# --- Recovery ------------------------------------------------------------------------------


def test_a_later_ok_call_to_the_same_tool_is_retried_with_its_step() -> None:
    result = grade(make_run(call("a", "error: x"), call("b"), call("a", "fine")), judge=None)
    f = result.findings[0]
    assert (f.verdict, f.metadata["recovery"], f.metadata["recovered_at"]) == (
        "correct",
        "retried",
        2,
    )
    assert f.reason == "The tool returned an error; a retry at step 2 worked."


def test_a_later_ok_call_to_a_declared_fallback_is_fallback() -> None:
    run = make_run(
        call("charge_card", "error: 402"),
        call("charge_card_backup"),
        fallbacks={"charge_card": ["charge_card_backup"]},
    )
    f = grade(run, judge=None).findings[0]
    assert (f.metadata["recovery"], f.metadata["recovered_at"]) == ("fallback", 1)


def test_a_call_to_some_other_tool_never_recovers_an_error() -> None:
    f = grade(
        make_run(call("charge_card", "error: 402"), call("charge_card_backup")), judge=None
    ).findings[0]
    assert (f.verdict, f.metadata["recovery"], f.metadata["recovered_at"]) == (
        "error_silent",
        "unchecked",
        None,
    )


def test_a_later_call_that_also_errors_does_not_recover() -> None:
    f = grade(make_run(call("a", "error: 1"), call("a", "error: 2")), judge=None).findings
    assert [x.metadata["recovery"] for x in f] == ["unchecked", "unchecked"]


def test_the_first_recovering_call_wins() -> None:
    run = make_run(call("a", "error"), call("a_alt"), call("a"), fallbacks={"a": ["a_alt"]})
    f = grade(run, judge=None).findings[0]
    assert (f.metadata["recovery"], f.metadata["recovered_at"]) == ("fallback", 1)


def test_an_earlier_call_never_recovers_a_later_error() -> None:
    f = grade(make_run(call("a"), call("a", "error")), judge=None).findings[1]
    assert f.metadata["recovery"] == "unchecked"


def test_thought_only_steps_keep_their_index_in_step_and_recovered_at() -> None:
    run = make_run(Step(thought="hm"), call("a", "error: x"), Step(thought="again"), call("a"))
    f = grade(run, judge=None).findings
    assert [x.step for x in f] == [1, 3]
    assert f[0].metadata["recovered_at"] == 3


def test_recovery_is_null_when_the_tool_did_not_error() -> None:
    f = grade(make_run(call("a")), judge=None).findings[0]
    assert f.metadata == {
        "allowed": True,
        "recovery": None,
        "recovered_at": None,
        "appropriate": None,
    }


# --- Unrecovered outcomes and the answer check ---------------------------------------------


@pytest.mark.parametrize(
    ("answer", "recovery", "verdict", "severity"),
    [
        (AnswerVerdict("acknowledged", "It says so."), "acknowledged", "correct", "pass"),
        (
            AnswerVerdict("claimed_success", "It claims done."),
            "claimed_success",
            "error_claimed_success",
            "fail",
        ),
        (AnswerVerdict("silent", "Not mentioned."), "silent", "error_silent", "fail"),
        (ModelFailure("model call failed: 500"), "unchecked", "error_silent", "fail"),
    ],
    ids=[
        "an acknowledged error is correct",
        "an error the answer claims succeeded is error_claimed_success",
        "an error the answer does not mention is error_silent",
        "a failed model call leaves the error unchecked, which fails",
    ],
)
def test_unrecovered_outcomes(answer: Any, recovery: str, verdict: str, severity: str) -> None:
    judge = FakeJudge(answers=[answer])
    result = grade(make_run(call("book", "Exception: down")), judge=judge)
    f = result.findings[0]
    assert (f.metadata["recovery"], f.verdict, f.severity) == (recovery, verdict, severity)
    assert judge.answer_questions == [AnswerQuestion("book", "Exception: down", "Done.")]


def test_without_a_model_an_unrecovered_error_is_unchecked_and_error_silent() -> None:
    f = grade(make_run(call("book", "Exception: down")), judge=None).findings[0]
    assert (f.metadata["recovery"], f.verdict) == ("unchecked", "error_silent")
    assert "no model was available" in f.reason


def test_a_failed_model_call_puts_the_failure_in_the_reason() -> None:
    judge = FakeJudge(answers=[ModelFailure("model call timed out")])
    f = grade(make_run(call("book", "error")), judge=judge).findings[0]
    assert "model call timed out" in f.reason


def test_one_model_call_per_unrecovered_error_and_none_for_recovered_ones() -> None:
    judge = FakeJudge(answers=[AnswerVerdict("silent", ""), AnswerVerdict("acknowledged", "")])
    run = make_run(call("a", "error: 1"), call("a"), call("b", "error: 2"), call("c", "error: 3"))
    result = grade(run, judge=judge)
    assert [q.tool for q in judge.answer_questions] == ["b", "c"]
    assert result.metadata == {"model": "fake-model", "model_calls": 2}


def test_cached_answers_do_not_count_as_model_calls() -> None:
    judge = FakeJudge(answers=[AnswerVerdict("silent", "", cached=True)])
    assert grade(make_run(call("a", "error")), judge=judge).metadata["model_calls"] == 0


def test_an_empty_final_answer_is_silent_without_asking_the_model() -> None:
    judge = FakeJudge()
    f = grade(make_run(call("a", "error"), final=None), judge=judge).findings[0]
    assert (f.metadata["recovery"], f.verdict) == ("silent", "error_silent")
    assert judge.answer_questions == []


# --- Tool choice ---------------------------------------------------------------------------


def test_tool_choice_incorrect_fails_with_the_model_reason() -> None:
    judge = FakeJudge(
        choices=[ChoiceVerdict(True, "fine"), ChoiceVerdict(False, "weather tool for a refund")]
    )
    result = grade(make_run(call("a"), call("b")), judge=judge, appropriate=True)
    assert [f.verdict for f in result.findings] == ["correct", "incorrect"]
    assert [f.metadata["appropriate"] for f in result.findings] == [True, False]
    assert "weather tool for a refund" in result.findings[1].reason


def test_a_failed_tool_choice_call_is_review_with_severity_warn() -> None:
    judge = FakeJudge(choices=[ModelFailure("model call failed: 529")])
    result = grade(make_run(call("a")), judge=judge, appropriate=True)
    f = result.findings[0]
    assert (f.verdict, f.severity, f.metadata["appropriate"]) == ("review", "warn", None)
    assert (result.passed, result.verdict) == (True, "review")


def test_tool_choice_questions_carry_the_task_tools_and_call() -> None:
    judge = FakeJudge(choices=[ChoiceVerdict(True, "")])
    run = make_run(call("a"))
    run.system_prompt = "Tools: a(x)"
    grade(run, judge=judge, appropriate=True)
    assert judge.choice_questions == [ChoiceQuestion("t", "Tools: a(x)", "a", "{}")]


def test_appropriate_stays_null_without_the_tool_choice_check() -> None:
    judge = FakeJudge()
    f = grade(make_run(call("a")), judge=judge).findings[0]
    assert f.metadata["appropriate"] is None and judge.choice_questions == []


# --- The verdict order ---------------------------------------------------------------------

ORDER = [
    (
        "disallowed",
        AnswerVerdict("claimed_success", ""),
        ChoiceVerdict(False, ""),
        "disallowed_tool",
    ),
    (
        "allowed",
        AnswerVerdict("claimed_success", ""),
        ChoiceVerdict(False, ""),
        "error_claimed_success",
    ),
    ("allowed", AnswerVerdict("silent", ""), ChoiceVerdict(False, ""), "error_silent"),
    ("allowed", AnswerVerdict("acknowledged", ""), ChoiceVerdict(False, ""), "incorrect"),
    ("allowed", AnswerVerdict("acknowledged", ""), ModelFailure("x"), "review"),
    ("allowed", AnswerVerdict("acknowledged", ""), ChoiceVerdict(True, ""), "correct"),
]


@pytest.mark.parametrize(
    ("allowed", "answer", "choice", "verdict"),
    ORDER,
    ids=[
        "disallowed_tool comes before everything",
        "error_claimed_success comes before error_silent and incorrect",
        "error_silent comes before incorrect",
        "incorrect comes before review",
        "review comes before correct",
        "correct is anything else",
    ],
)
def test_verdicts_are_checked_in_order(
    allowed: str, answer: Any, choice: Any, verdict: str
) -> None:
    run = make_run(call("a", "error"), allowed=["a"] if allowed == "allowed" else ["b"])
    f = grade(run, judge=FakeJudge([answer], [choice]), appropriate=True).findings[0]
    assert f.verdict == verdict
    assert f.severity == rules.VERDICT_SEVERITY[verdict]


# --- Evidence, score, passed, verdict, summary ---------------------------------------------


def test_evidence_is_the_first_160_characters_of_the_error_for_error_verdicts_only() -> None:
    long = "error: " + "x" * 300
    result = grade(
        make_run(call("a", long), call("b"), call("c", "error", is_error=True), call("c", "ok")),
        judge=None,
    )
    assert result.findings[0].evidence == long[:160]
    assert [f.evidence for f in result.findings[1:]] == [None, None, None]


def test_score_is_the_share_of_correct_calls_and_any_fail_fails_the_check() -> None:
    result = grade(make_run(call("a"), call("b", "error"), call("c"), call("d")), judge=None)
    assert result.score == 0.75
    assert (result.passed, result.verdict) == (False, "fail")


def test_a_run_with_no_tool_calls_scores_one_and_passes() -> None:
    result = grade(make_run(Step(thought="just answer")), judge=None)
    assert (result.score, result.passed, result.verdict, result.findings) == (1.0, True, "pass", [])


def test_the_summary_lists_the_sequence_and_every_problem_with_its_step() -> None:
    result = grade(
        make_run(call("a"), call("b", "error: x"), call("z"), allowed=["a", "b"]), judge=None
    )
    assert result.summary == (
        "1/3 tool calls correct. Sequence: a -> b -> z. "
        "Problems: step 1 b: error_silent; step 2 z: disallowed_tool."
    )


def test_the_source_documents_finding_example_is_reproduced_field_by_field() -> None:
    run = run_from_dict(
        {
            "task": "Refund",
            "allowed_tools": None,
            "steps": [
                {
                    "tool_call": {
                        "name": "charge_card",
                        "arguments": {"order": 42},
                        "output": "status 402",
                        "is_error": True,
                    }
                },
                {"tool_call": {"name": "lookup_order", "arguments": {}, "output": "{}"}},
                {"tool_call": {"name": "charge_card", "arguments": {"order": 42}, "output": "ok"}},
            ],
            "final_answer": "Done.",
        }
    )
    assert grade(run, judge=None).findings[0].to_dict() == {
        "severity": "pass",
        "verdict": "correct",
        "subject": "charge_card",
        "reason": "The tool returned an error; a retry at step 2 worked.",
        "evidence": None,
        "step": 0,
        "metadata": {
            "allowed": True,
            "recovery": "retried",
            "recovered_at": 2,
            "appropriate": None,
        },
    }


def test_the_rules_md_example_run_passes_with_its_summary() -> None:
    run = run_from_dict(
        {
            "task": "Refund order 42 to the customer's card.",
            "allowed_tools": ["lookup_order", "charge_card", "charge_card_backup"],
            "tool_fallbacks": {"charge_card": ["charge_card_backup"]},
            "steps": [
                {
                    "thought": "Find the order first.",
                    "tool_call": {
                        "name": "lookup_order",
                        "arguments": {"id": 42},
                        "output": '{"total": 19.5}',
                    },
                },
                {
                    "tool_call": {
                        "name": "charge_card",
                        "arguments": {"order": 42},
                        "output": "status 402",
                        "is_error": True,
                    }
                },
                {
                    "tool_call": {
                        "name": "charge_card_backup",
                        "arguments": {"order": 42},
                        "output": "ok",
                    }
                },
            ],
            "final_answer": "Refunded 19.50 to the customer's card.",
        }
    )
    result = grade(run, judge=None).to_dict()
    assert {k: v for k, v in result.items() if k != "findings"} == {
        "check": "tool_use",
        "passed": True,
        "verdict": "pass",
        "score": 1.0,
        "summary": "3/3 tool calls correct. Sequence: lookup_order -> charge_card -> charge_card_backup. No problems.",
        "metadata": {"model": None, "model_calls": 0},
    }


def test_span_runs_add_span_id_and_output_captured_to_metadata() -> None:
    run = make_run(
        Step(tool_call=ToolCall("a", output=None, output_captured=False, span_id="ab" * 8))
    )
    assert grade(run, judge=None).findings[0].metadata == {
        "allowed": True,
        "recovery": None,
        "recovered_at": None,
        "appropriate": None,
        "span_id": "abababababababab",
        "output_captured": False,
    }
