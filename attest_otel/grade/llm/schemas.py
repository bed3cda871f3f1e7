"""The verdict tools the model is forced to call, and the check of what it passed to them.

A forced tool call gives the verdict a fixed shape, but the API does not promise the input
fits the schema, so every reply is checked here: a wrong enum value or a missing field is
a `ModelFailure`, never a guessed verdict. Each verdict is one pydantic model, so the JSON
Schema sent with the request and the check of the reply are the same declaration.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, get_args

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictBool, ValidationError
from pydantic.json_schema import GenerateJsonSchema
from pydantic_core import PydanticCustomError, core_schema

from attest_otel.grade.questions import AnswerOutcome, AnswerVerdict, ChoiceVerdict, ModelFailure

__all__ = [
    "ANSWER_OUTCOMES",
    "ANSWER_TOOL",
    "CHOICE_TOOL",
    "parse_answer",
    "parse_choice",
    "verdict_input",
]

ANSWER_OUTCOMES: tuple[AnswerOutcome, ...] = get_args(AnswerOutcome)

# Reasons end up in findings and span attributes; a model that rambles is cut here.
_MAX_REASON_CHARS = 400


def _tidy_reason(reason: str) -> str:
    reason = " ".join(reason.split())
    if not reason:
        raise PydanticCustomError("reason_empty", "reason is empty")
    if len(reason) > _MAX_REASON_CHARS:
        reason = reason[: _MAX_REASON_CHARS - 3].rstrip() + "..."
    return reason


Reason = Annotated[
    str,
    Field(min_length=1, description="One short sentence explaining the verdict.", strict=True),
    AfterValidator(_tidy_reason),
]


class _Verdict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AnswerInput(_Verdict):
    outcome: AnswerOutcome = Field(description="acknowledged, claimed_success or silent.")
    reason: Reason


class ChoiceInput(_Verdict):
    appropriate: StrictBool = Field(
        description="true when the tool was a reasonable choice, false otherwise."
    )
    reason: Reason


class _Untitled(GenerateJsonSchema):
    """The schema as the Messages API reads it: no `title` on the object or its fields."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False

    def model_schema(self, schema: core_schema.ModelSchema) -> dict[str, Any]:
        out = super().model_schema(schema)
        out.pop("title", None)
        return out


def _tool(name: str, description: str, model: type[_Verdict]) -> dict[str, Any]:
    return {
        "name": name,
        "description": description,
        "input_schema": model.model_json_schema(schema_generator=_Untitled),
    }


ANSWER_TOOL = _tool(
    "record_answer_verdict",
    "Record how the final answer treats the failed tool call.",
    AnswerInput,
)
CHOICE_TOOL = _tool(
    "record_choice_verdict",
    "Record whether the tool was a reasonable choice for the task.",
    ChoiceInput,
)

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


def parse_answer(tool_input: Mapping[str, Any]) -> AnswerVerdict | ModelFailure:
    try:
        got = AnswerInput.model_validate(dict(tool_input))
    except ValidationError as e:
        return _misfit(e)
    return AnswerVerdict(outcome=got.outcome, reason=got.reason)


def parse_choice(tool_input: Mapping[str, Any]) -> ChoiceVerdict | ModelFailure:
    try:
        got = ChoiceInput.model_validate(dict(tool_input))
    except ValidationError as e:
        return _misfit(e)
    return ChoiceVerdict(appropriate=got.appropriate, reason=got.reason)
