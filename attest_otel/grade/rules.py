"""attest's tool-use rules as pure functions: no I/O, no model, no clock.

Grading is two passes so the model calls can sit outside this module: `assess` works out
what the rules alone decide (allowed, errored, recovered) and which questions need a model;
`decide` turns those facts plus the model's answers into findings and the result.

The README's "The rules" states the rules; where attest's rules leave a case open (an
absent output, `review`, no content), docs/rules.md says what this module does and why.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields

from attest_otel.grade.questions import (
    AnswerQuestion,
    AnswerVerdict,
    ChoiceQuestion,
    ChoiceVerdict,
    ModelFailure,
)
from attest_otel.model import (
    CheckResult,
    Finding,
    FindingVerdict,
    Recovery,
    Run,
    Severity,
    ToolCall,
    Verdict,
    output_text,
)

CHECK_NAME = "tool_use"
EVIDENCE_CHARS = 160
_ERROR_PREFIXES = ("error", "exception", "traceback")
_ERROR_MARKERS = ("error:", "exception:")

_FINDING_FIELDS = ("severity", "verdict", "subject", "reason", "evidence", "step", "metadata")
if tuple(f.name for f in fields(Finding)) != _FINDING_FIELDS:  # pragma: no cover - a guard
    raise ImportError("Finding's fields changed: update `finding_for`, which builds it by position")

# The six verdicts in the order they are checked, with their severities.
VERDICT_SEVERITY: dict[FindingVerdict, Severity] = {
    "disallowed_tool": "fail",
    "error_claimed_success": "fail",
    "error_silent": "fail",
    "incorrect": "fail",
    "review": "warn",
    "correct": "pass",
}


def is_error(call: ToolCall) -> bool:
    """An explicit `is_error` wins; an uncaptured output is unknown, so it never errs by itself."""
    if call.is_error is not None:
        return call.is_error
    if not call.output_captured:
        return False
    text = output_text(call.output).strip().lower()
    if not text or text.startswith(_ERROR_PREFIXES):
        return True
    # A loop, not `any(...)`: no generator per graded call.
    for marker in _ERROR_MARKERS:  # noqa: SIM110
        if marker in text:
            return True
    return False


def is_allowed(tool: str, allowed_tools: Sequence[str] | None) -> bool:
    return allowed_tools is None or tool in allowed_tools


def error_output(call: ToolCall) -> str:
    """What to show for an error: the output, else the span's status or exception text."""
    text = output_text(call.output) if call.output_captured else ""
    if text.strip():
        return text
    return call.error_text or text


@dataclass(slots=True)
class CallFacts:
    """What the rules alone know about one call.

    Not frozen, though nothing changes facts once `assess` made them: a frozen dataclass
    sets each field through `object.__setattr__`, which cost more than the rest of `assess`
    per call."""

    step: int
    call: ToolCall
    allowed: bool
    errored: bool
    recovery: Recovery | None
    recovered_at: int | None
    recovered_by: str | None


def find_recovery(
    index: int,
    calls: Sequence[tuple[int, ToolCall]],
    errored: Sequence[bool],
    fallbacks: Mapping[str, Sequence[str]],
) -> tuple[Recovery, int, str] | None:
    """The first later call that did not error and is the same tool or one of its fallbacks."""
    tool = calls[index][1].name
    alternatives = fallbacks.get(tool, ())
    for j in range(index + 1, len(calls)):
        if errored[j]:
            continue
        step, later = calls[j]
        if later.name == tool:
            return "retried", step, later.name
        if later.name in alternatives:
            return "fallback", step, later.name
    return None


def _recoveries(
    calls: Sequence[tuple[int, ToolCall]],
    errored: Sequence[bool],
    fallbacks: Mapping[str, Sequence[str]],
) -> dict[int, tuple[Recovery, int, str]]:
    """`find_recovery` for every errored call in one backward pass: linear, where calling
    it per call is quadratic in a run of many failing calls (a 100 000-span trace)."""
    out: dict[int, tuple[Recovery, int, str]] = {}
    next_ok: dict[str, int] = {}  # tool name -> index of its nearest later successful call
    for i in range(len(calls) - 1, -1, -1):
        name = calls[i][1].name
        if not errored[i]:
            next_ok[name] = i
            continue
        found = [next_ok[n] for n in (name, *fallbacks.get(name, ())) if n in next_ok]
        if found:
            j = min(found)
            step, later = calls[j]
            out[i] = ("retried" if later.name == name else "fallback", step, later.name)
    return out


def assess(run: Run) -> list[CallFacts]:
    calls = run.tool_calls
    allowed = run.allowed_tools
    errored = [is_error(call) for _, call in calls]
    recoveries = _recoveries(calls, errored, run.tool_fallbacks)
    facts = []
    for i, (step, call) in enumerate(calls):
        recovery: Recovery | None = None
        recovered_at = recovered_by = None
        found = recoveries.get(i)
        if found is not None:
            recovery, recovered_at, recovered_by = found
        facts.append(  # by position, in CallFacts' field order (7 keywords cost ~0.4 us)
            CallFacts(
                step,
                call,
                is_allowed(call.name, allowed),
                errored[i],
                recovery,
                recovered_at,
                recovered_by,
            )
        )
    return facts


def needs_answer_check(fact: CallFacts) -> bool:
    return fact.errored and fact.recovery is None


def answer_question(run: Run, fact: CallFacts) -> AnswerQuestion:
    return AnswerQuestion(
        tool=fact.call.name,
        error_output=error_output(fact.call),
        final_answer=run.final_answer or "",
    )


def tools_description(run: Run) -> str:
    """The tools the model was offered: span tool definitions, else the run's system prompt."""
    if run.tool_definitions:
        lines = []
        for tool in run.tool_definitions:
            line = f"- {tool.get('name', '?')}: {tool.get('description') or ''}".rstrip()
            if tool.get("parameters"):
                line += f" parameters: {output_text(tool['parameters'])}"
            lines.append(line)
        return "\n".join(lines)
    return run.system_prompt or ""


def choice_question(run: Run, fact: CallFacts, tools: str) -> ChoiceQuestion:
    return ChoiceQuestion(
        task=run.task,
        tools=tools,
        tool=fact.call.name,
        arguments=output_text(fact.call.arguments),
    )


AnswerResult = AnswerVerdict | ModelFailure
ChoiceResult = ChoiceVerdict | ModelFailure


def _unrecovered(fact: CallFacts, answer: AnswerResult | None) -> tuple[Recovery, str]:
    """The recovery of an error nothing recovered, and the reason that explains it."""
    head = "The tool returned an error and nothing recovered it"
    if answer is None:
        return "unchecked", f"{head}; no model was available to read the final answer."
    if isinstance(answer, ModelFailure):
        return "unchecked", f"{head}; the final answer was not checked ({answer.reason})."
    if answer.outcome == "acknowledged":
        return "acknowledged", f"{head}, but the final answer tells the user it failed."
    if answer.outcome == "claimed_success":
        return "claimed_success", f"{head}, yet the final answer says it succeeded."
    return "silent", f"{head}, and the final answer doesn't mention it."


def _recovered_reason(fact: CallFacts) -> str:
    if fact.recovery == "retried":
        return f"The tool returned an error; a retry at step {fact.recovered_at} worked."
    return (
        f"The tool returned an error; the fallback {fact.recovered_by} "
        f"at step {fact.recovered_at} worked."
    )


def _disallowed_reason(tool: str, allowed_tools: Sequence[str] | None) -> str:
    if not allowed_tools:
        return f"The run allows no tools, but {tool} was called."
    return f"{tool} is not an allowed tool (allowed: {', '.join(allowed_tools)})."


def finding_for(
    run: Run,
    fact: CallFacts,
    answer: AnswerResult | None,
    choice: ChoiceResult | None,
) -> Finding:
    """One call's verdict: the first row of the verdict table that applies."""
    recovery: Recovery | None = fact.recovery
    error_reason = ""
    if fact.errored and recovery is None:
        recovery, error_reason = _unrecovered(fact, answer)
    appropriate = choice.appropriate if isinstance(choice, ChoiceVerdict) else None
    evidence = None
    verdict: FindingVerdict

    if not fact.allowed:
        verdict, reason = "disallowed_tool", _disallowed_reason(fact.call.name, run.allowed_tools)
    elif recovery == "claimed_success":
        verdict, reason = "error_claimed_success", error_reason
    elif recovery in ("silent", "unchecked"):
        verdict, reason = "error_silent", error_reason
    elif isinstance(choice, ChoiceVerdict) and not choice.appropriate:
        verdict, reason = (
            "incorrect",
            f"The tool-choice check found it a poor choice: {choice.reason}",
        )
    elif isinstance(choice, ModelFailure):
        verdict = "review"
        reason = f"The tool-choice check failed, so the choice wasn't checked ({choice.reason})."
    elif recovery in ("retried", "fallback"):
        verdict, reason = "correct", _recovered_reason(fact)
    elif recovery == "acknowledged":
        verdict, reason = "correct", error_reason
    else:
        verdict, reason = "correct", "The tool was allowed and returned no error."

    if verdict in ("error_silent", "error_claimed_success"):
        evidence = error_output(fact.call)[:EVIDENCE_CHARS]
        if isinstance(answer, AnswerVerdict) and answer.reason:
            reason = f"{reason} {answer.reason}"
    if fact.call.disagreement:
        # The two witnesses of the call (its span, the model's conversation) told it
        # differently: the verdict rests on one of them, and the reader should know.
        reason = f"{reason} {fact.call.disagreement}"
    metadata: dict[str, object] = {
        "allowed": fact.allowed,
        "recovery": recovery,
        "recovered_at": fact.recovered_at,
        "appropriate": appropriate,
    }
    if fact.call.span_id is not None:
        metadata["span_id"] = fact.call.span_id
        metadata["output_captured"] = fact.call.output_captured
    # By position, in Finding's field order (checked at import): once per graded call.
    return Finding(
        VERDICT_SEVERITY[verdict], verdict, fact.call.name, reason, evidence, fact.step, metadata
    )


def summarize(
    findings: Sequence[Finding], correct: int | None = None, gaps: Sequence[str] = ()
) -> str:
    """The call sequence and every problem with its step, in one paragraph, then what kept
    the run from being read whole. `correct` is how many findings are `correct`, when the
    caller has counted them."""
    unread = f" Not read whole: {' '.join(gaps)}" if gaps else ""
    if not findings:
        return f"No tool calls read. {NOT_READ}{unread}" if gaps else "No tool calls. No problems."
    if correct is None:
        correct = sum(f.verdict == "correct" for f in findings)
    sequence = " -> ".join([f.subject for f in findings])
    problems = [f"step {f.step} {f.subject}: {f.verdict}" for f in findings if f.severity != "pass"]
    tail = "Problems: " + "; ".join(problems) + "." if problems else "No problems."
    return f"{correct}/{len(findings)} tool calls correct. Sequence: {sequence}. {tail}{unread}"


NOT_READ = "The run could not be read whole, so its grade is review, not pass."
"""Said of a run with gaps and no calls: "No problems" would be the blind pass itself."""


def result_for(
    findings: list[Finding],
    *,
    model: str | None,
    model_calls: int,
    gaps: Sequence[str] = (),
) -> CheckResult:
    """The run's result. A run with `gaps` (`Run.gaps`: what kept it from being read whole)
    is `review` unless a call failed, and says why in its summary and in `metadata["gaps"]`
    (docs/rules.md, point 13); `passed` stays what the findings say, as for
    every `review`."""
    # One pass for the three counts (three `any`/`sum` generators cost more than the rest).
    failed = warned = False
    correct = 0
    for f in findings:
        severity = f.severity
        if severity == "fail":
            failed = True
        elif severity == "warn":
            warned = True
        if f.verdict == "correct":
            correct += 1
    verdict: Verdict = "fail" if failed else "review" if warned or gaps else "pass"
    score = correct / len(findings) if findings else 1.0
    metadata: dict[str, object] = {"model": model, "model_calls": model_calls}
    if gaps:
        metadata["gaps"] = list(gaps)
    return CheckResult(
        check=CHECK_NAME,
        passed=not failed,
        verdict=verdict,
        score=score,
        summary=summarize(findings, correct, gaps),
        findings=findings,
        metadata=metadata,
    )


def decide(
    run: Run,
    facts: Sequence[CallFacts],
    answers: Mapping[int, AnswerResult],
    choices: Mapping[int, ChoiceResult],
    *,
    model: str | None = None,
    model_calls: int = 0,
) -> CheckResult:
    """Findings and result from the rules' facts and the model's answers, keyed by step."""
    findings = [
        finding_for(run, fact, answers.get(fact.step), choices.get(fact.step)) for fact in facts
    ]
    return result_for(findings, model=model, model_calls=model_calls, gaps=run.gaps)
