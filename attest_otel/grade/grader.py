"""The tool-use check: the rules, plus the model calls when a model is available.

Which entry point decides whether a model may be used, as attest does:
`tool_use` when asked (`appropriate` / `check_answer`) or inside `llm.using`; `evaluate`
whenever an API key is set; `check_tool_use` only inside `llm.using`. The sidecar passes its
own judge (or none) so it never starts spending because a key is in the environment.
"""

from __future__ import annotations

from attest_otel.errors import ModelError
from attest_otel.grade import llm, rules
from attest_otel.grade.questions import AnswerVerdict, Judge, ModelFailure
from attest_otel.model import CheckResult, Run

NO_MODEL = (
    "a model check was asked for but no model is available: "
    "set ANTHROPIC_API_KEY (or run inside attest_otel.llm.using(client))"
)


NO_CONTENT = "no content captured"
"""Why a run's model checks were not made: the trace recorded no task, answer, arguments or
results (`Run.content_captured`), so a model would be asked about text nobody has."""


def grade(run: Run, *, judge: Judge | None, appropriate: bool = False) -> CheckResult:
    """Grade one run with the given judge (None: offline). Never raises for a model failure."""
    facts = rules.assess(run)
    answers: dict[int, rules.AnswerResult] = {}
    choices: dict[int, rules.ChoiceResult] = {}
    calls = 0
    if judge is not None and not run.content_captured:
        # Nothing to show a model: the errors stay unchecked, saying why, and the tool choice
        # is not judged (a guess from tool names alone would pass for a check).
        for fact in facts:
            if rules.needs_answer_check(fact):
                answers[fact.step] = ModelFailure(NO_CONTENT)
    elif judge is not None:
        unrecovered = [f for f in facts if rules.needs_answer_check(f)]
        if not (run.final_answer or "").strip():
            # Nothing to read: an empty answer cannot mention the error, so no call is needed.
            for fact in unrecovered:
                answers[fact.step] = AnswerVerdict("silent", "The run has no final answer.")
            unrecovered = []
        if unrecovered:
            replies = judge.answer([rules.answer_question(run, f) for f in unrecovered])
            for fact, answer in zip(unrecovered, replies, strict=True):
                answers[fact.step] = answer
                calls += not answer.cached
        if appropriate and facts:
            tools = rules.tools_description(run)
            picks = judge.choose([rules.choice_question(run, f, tools) for f in facts])
            for fact, choice in zip(facts, picks, strict=True):
                choices[fact.step] = choice
                calls += not choice.cached
    return rules.decide(
        run,
        facts,
        answers,
        choices,
        model=judge.model if judge is not None else None,
        model_calls=calls,
    )


def judge_for_tool_use(*, asked: bool, model: str | None = None) -> Judge | None:
    """The `using` client, else the API key's when a check was asked (`tool_use`, `tools`).

    Asked for and none available is a `ModelError`, before any run is graded: grading on
    without the model would print `unchecked` for every error the user asked to check.
    """
    judge = llm.current_judge(model)
    if asked and judge is None:
        judge = llm.judge_from_env(model)
        if judge is None:
            raise ModelError(NO_MODEL)
    return judge


def tool_use(
    run: Run,
    *,
    appropriate: bool = False,
    check_answer: bool = False,
    model: str | None = None,
) -> CheckResult:
    """attest's `grader.tool_use`: offline unless asked for a model or inside `llm.using`."""
    judge = judge_for_tool_use(asked=appropriate or check_answer, model=model)
    return grade(run, judge=judge, appropriate=appropriate)


def evaluate(run: Run, *, model: str | None = None) -> CheckResult:
    """attest's `grader.evaluate`: reads the final answer with a model whenever a key is set."""
    return grade(run, judge=llm.judge_from_env(model))


def check_tool_use(run: Run) -> CheckResult:
    """attest's `check_tool_use`: a model only inside `llm.using(client)`."""
    return grade(run, judge=llm.current_judge())
