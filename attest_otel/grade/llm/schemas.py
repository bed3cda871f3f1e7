"""The verdict tools the model is forced to call, and the check of what it passed to them.

A forced tool call gives the verdict a fixed shape, but the API does not promise the input
fits the schema, so every reply is checked here: a wrong enum value or a missing field is
a `ModelFailure`, never a guessed verdict.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, get_args

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

_REASON_SCHEMA = {
    "type": "string",
    "minLength": 1,
    "description": "One short sentence explaining the verdict.",
}

ANSWER_TOOL: dict[str, Any] = {
    "name": "record_answer_verdict",
    "description": "Record how the final answer treats the failed tool call.",
    "input_schema": {
        "type": "object",
        "properties": {
            "outcome": {
                "type": "string",
                "enum": list(ANSWER_OUTCOMES),
                "description": "acknowledged, claimed_success or silent.",
            },
            "reason": _REASON_SCHEMA,
        },
        "required": ["outcome", "reason"],
        "additionalProperties": False,
    },
}

CHOICE_TOOL: dict[str, Any] = {
    "name": "record_choice_verdict",
    "description": "Record whether the tool was a reasonable choice for the task.",
    "input_schema": {
        "type": "object",
        "properties": {
            "appropriate": {
                "type": "boolean",
                "description": "true when the tool was a reasonable choice, false otherwise.",
            },
            "reason": _REASON_SCHEMA,
        },
        "required": ["appropriate", "reason"],
        "additionalProperties": False,
    },
}

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


def _reason(tool_input: Mapping[str, Any]) -> str | ModelFailure:
    reason = tool_input.get("reason")
    if not isinstance(reason, str):
        return ModelFailure(f"{_MISFIT}: reason is missing")
    reason = " ".join(reason.split())
    if not reason:
        return ModelFailure(f"{_MISFIT}: reason is empty")
    if len(reason) > _MAX_REASON_CHARS:
        reason = reason[: _MAX_REASON_CHARS - 3].rstrip() + "..."
    return reason


def _extra_keys(tool_input: Mapping[str, Any], tool: Mapping[str, Any]) -> ModelFailure | None:
    extra = sorted(set(tool_input) - set(tool["input_schema"]["properties"]))
    if extra:
        return ModelFailure(f"{_MISFIT}: unexpected field {', '.join(map(str, extra))}")
    return None


def parse_answer(tool_input: Mapping[str, Any]) -> AnswerVerdict | ModelFailure:
    outcome = tool_input.get("outcome")
    if outcome is None:
        return ModelFailure(f"{_MISFIT}: outcome is missing")
    if outcome not in ANSWER_OUTCOMES:
        return ModelFailure(
            f"{_MISFIT}: outcome {outcome!r} is not one of {', '.join(ANSWER_OUTCOMES)}"
        )
    reason = _reason(tool_input)
    if isinstance(reason, ModelFailure):
        return reason
    extra = _extra_keys(tool_input, ANSWER_TOOL)
    if extra is not None:
        return extra
    return AnswerVerdict(outcome=outcome, reason=reason)


def parse_choice(tool_input: Mapping[str, Any]) -> ChoiceVerdict | ModelFailure:
    appropriate = tool_input.get("appropriate")
    if appropriate is None:
        return ModelFailure(f"{_MISFIT}: appropriate is missing")
    if not isinstance(appropriate, bool):
        return ModelFailure(f"{_MISFIT}: appropriate {appropriate!r} is not true or false")
    reason = _reason(tool_input)
    if isinstance(reason, ModelFailure):
        return reason
    extra = _extra_keys(tool_input, CHOICE_TOOL)
    if extra is not None:
        return extra
    return ChoiceVerdict(appropriate=appropriate, reason=reason)
