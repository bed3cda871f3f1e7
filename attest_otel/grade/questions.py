"""What the grader asks a model, and what comes back: the seam between the rules and the judge.

The rules stay pure: the grader first works out which questions a run raises, asks a `Judge`
(the Anthropic one in `grade.llm`, or a fake in unit tests), then grades with the answers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

AnswerOutcome = Literal["acknowledged", "claimed_success", "silent"]


@dataclass(frozen=True, slots=True)
class AnswerQuestion:
    """Does the final answer tell the user this call failed? The model sees only these three."""

    tool: str
    error_output: str
    final_answer: str


@dataclass(frozen=True, slots=True)
class AnswerVerdict:
    outcome: AnswerOutcome
    reason: str
    cached: bool = False


@dataclass(frozen=True, slots=True)
class ChoiceQuestion:
    """Was this tool a reasonable choice? `task` and `tools` are shared by a run's questions."""

    task: str
    tools: str
    tool: str
    arguments: str


@dataclass(frozen=True, slots=True)
class ChoiceVerdict:
    appropriate: bool
    reason: str
    cached: bool = False


@dataclass(frozen=True, slots=True)
class ModelFailure:
    """The model call failed or its reply did not fit the schema; the reason is shown to users."""

    reason: str
    cached: bool = False


class Judge(Protocol):
    """Answers a run's questions, in order, one result per question; never raises."""

    model: str

    def answer(self, questions: Sequence[AnswerQuestion]) -> list[AnswerVerdict | ModelFailure]: ...

    def choose(self, questions: Sequence[ChoiceQuestion]) -> list[ChoiceVerdict | ModelFailure]: ...
