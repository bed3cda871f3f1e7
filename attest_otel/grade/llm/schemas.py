"""The verdict tools the model is forced to call, and the check of what it passed to them.

A forced tool call gives the verdict a fixed shape, but the API does not promise the input
fits the schema, so every reply is checked here: a wrong enum value or a missing field is
a `ModelFailure`, never a guessed verdict. Each verdict is one pydantic model (`verdicts`),
so the JSON Schema sent with the request and the check of the reply are one declaration.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, get_args

from attest_otel.grade.questions import AnswerOutcome, AnswerVerdict, ChoiceVerdict, ModelFailure

if TYPE_CHECKING:
    from pydantic import ValidationError

__all__ = [
    "ANSWER_OUTCOMES",
    "answer_tool",
    "choice_tool",
    "parse_answer",
    "parse_choice",
    "verdict_input",
]

ANSWER_OUTCOMES: tuple[AnswerOutcome, ...] = get_args(AnswerOutcome)

_MISFIT = "model verdict did not fit the schema"


def verdict_input(reply: Any, tool_name: str) -> Mapping[str, Any] | ModelFailure:
    """The input of the verdict tool call in a Messages reply, or why there is none.

    Read through attributes only, so replies from any client shaped like the SDK's work.
    """
    stop_reason = getattr(reply, "stop_reason", None)
    if stop_reason == "max_tokens":
        return ModelFailure("model reply was cut off before its verdict was complete")
    if stop_reason == "refusal":
        return ModelFailure("model refused to give a verdict")
    for block in getattr(reply, "content", None) or ():
        if getattr(block, "type", None) == "tool_use" and getattr(block, "name", None) == tool_name:
            tool_input = getattr(block, "input", None)
            if not isinstance(tool_input, Mapping):
                return ModelFailure(f"{_MISFIT}: the {tool_name} input is not an object")
            return tool_input
    return ModelFailure(f"model reply had no verdict (no {tool_name} tool call)")


def _misfit(error: ValidationError) -> ModelFailure:
    """The first thing wrong, in field order; fields the schema forbids are named together."""
    extra: list[str] = []
    for problem in error.errors(include_url=False):
        name = ".".join(map(str, problem["loc"]))
        kind, value = problem["type"], problem["input"]
        if kind == "extra_forbidden":
            extra.append(name)
        elif kind == "missing" or value is None or (name == "reason" and kind == "string_type"):
            return ModelFailure(f"{_MISFIT}: {name} is missing")
        elif kind == "literal_error":
            return ModelFailure(
                f"{_MISFIT}: {name} {value!r} is not one of {', '.join(ANSWER_OUTCOMES)}"
            )
        elif kind == "bool_type":
            return ModelFailure(f"{_MISFIT}: {name} {value!r} is not true or false")
        elif kind in ("reason_empty", "string_too_short"):
            return ModelFailure(f"{_MISFIT}: {name} is empty")
        else:
            return ModelFailure(f"{_MISFIT}: {name}: {problem['msg']}")
    return ModelFailure(f"{_MISFIT}: unexpected field {', '.join(sorted(extra))}")


def answer_tool() -> dict[str, Any]:
    """The answer verdict tool, as the request carries it."""
    from attest_otel.grade.llm.verdicts import ANSWER_TOOL

    return ANSWER_TOOL


def choice_tool() -> dict[str, Any]:
    """The choice verdict tool, as the request carries it."""
    from attest_otel.grade.llm.verdicts import CHOICE_TOOL

    return CHOICE_TOOL


def parse_answer(tool_input: Mapping[str, Any]) -> AnswerVerdict | ModelFailure:
    from pydantic import ValidationError

    from attest_otel.grade.llm.verdicts import AnswerInput

    try:
        got = AnswerInput.model_validate(dict(tool_input))
    except ValidationError as e:
        return _misfit(e)
    return AnswerVerdict(outcome=got.outcome, reason=got.reason)


def parse_choice(tool_input: Mapping[str, Any]) -> ChoiceVerdict | ModelFailure:
    from pydantic import ValidationError

    from attest_otel.grade.llm.verdicts import ChoiceInput

    try:
        got = ChoiceInput.model_validate(dict(tool_input))
    except ValidationError as e:
        return _misfit(e)
    return ChoiceVerdict(appropriate=got.appropriate, reason=got.reason)
