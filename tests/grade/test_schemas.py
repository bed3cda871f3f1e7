"""The verdict models: the schema the Messages API gets, and what a reply must hold."""

from __future__ import annotations

from typing import Any

import pytest

from attest_otel.grade.llm.schemas import answer_tool, choice_tool, parse_answer, parse_choice
from attest_otel.grade.questions import AnswerVerdict, ChoiceVerdict, ModelFailure

MISFIT = "model verdict did not fit the schema"


def test_the_answer_schema_is_the_one_the_api_gets_word_for_word() -> None:
    assert answer_tool()["input_schema"] == {
        "type": "object",
        "properties": {
            "outcome": {
                "type": "string",
                "enum": ["acknowledged", "claimed_success", "silent"],
                "description": "acknowledged, claimed_success or silent.",
            },
            "reason": {
                "type": "string",
                "minLength": 1,
                "description": "One short sentence explaining the verdict.",
            },
        },
        "required": ["outcome", "reason"],
        "additionalProperties": False,
    }
    assert choice_tool()["input_schema"]["required"] == ["appropriate", "reason"]
    assert choice_tool()["input_schema"]["additionalProperties"] is False


def test_a_reason_is_one_line_and_a_rambling_one_is_cut() -> None:
    assert parse_answer({"outcome": "silent", "reason": " Said\n nothing. "}) == AnswerVerdict(
        "silent", "Said nothing."
    )
    long = parse_choice({"appropriate": True, "reason": "word " * 200})
    assert isinstance(long, ChoiceVerdict)
    assert len(long.reason) == 400
    assert long.reason.endswith("...")


@pytest.mark.parametrize(
    ("tool_input", "reason"),
    [
        pytest.param({"outcome": "silent", "reason": "  "}, "reason is empty", id="blank reason"),
        pytest.param({"outcome": "silent", "reason": 3}, "reason is missing", id="number reason"),
        pytest.param({"outcome": None, "reason": "x"}, "outcome is missing", id="null outcome"),
        pytest.param(
            {"outcome": "silent", "reason": "x", "b": 1, "a": 2},
            "unexpected field a, b",
            id="every forbidden field is named",
        ),
        pytest.param(
            {"outcome": 7, "reason": ""},
            "outcome 7 is not one of acknowledged, claimed_success, silent",
            id="the first field's problem comes first",
        ),
    ],
)
def test_an_answer_that_does_not_fit_says_what(tool_input: dict[str, Any], reason: str) -> None:
    assert parse_answer(tool_input) == ModelFailure(f"{MISFIT}: {reason}")


def test_a_choice_takes_only_a_real_boolean() -> None:
    assert parse_choice({"appropriate": 1, "reason": "x"}) == ModelFailure(
        f"{MISFIT}: appropriate 1 is not true or false"
    )
    assert parse_choice({"appropriate": "true", "reason": "x"}) == ModelFailure(
        f"{MISFIT}: appropriate 'true' is not true or false"
    )
