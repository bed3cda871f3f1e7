"""The verdicts the model gives, as pydantic models: one declaration is both the JSON Schema
sent with the request and the check of the reply (`schemas` reads its errors). Kept apart
from `schemas` so that importing the grader does not build them (`import attest_otel` stays
cheap); they are built on the first model check.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictBool
from pydantic.json_schema import GenerateJsonSchema
from pydantic_core import PydanticCustomError, core_schema

from attest_otel.grade.questions import AnswerOutcome

__all__ = ["ANSWER_TOOL", "CHOICE_TOOL", "AnswerInput", "ChoiceInput"]

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


ANSWER_TOOL: dict[str, Any] = _tool(
    "record_answer_verdict",
    "Record how the final answer treats the failed tool call.",
    AnswerInput,
)
CHOICE_TOOL: dict[str, Any] = _tool(
    "record_choice_verdict",
    "Record whether the tool was a reasonable choice for the task.",
    ChoiceInput,
)
