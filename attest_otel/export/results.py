"""A graded run as plain attribute dicts: the one mapping every output is built from.

Span events on held spans, the `attest.grade` span and log-based events all take their
names and values from here, so the three cannot drift; `tests/fixtures/golden` pins the
result. Attributes whose value is null are left out rather than written as "", because
OpenTelemetry attributes have no null and an empty string would match a `!= ""` search.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from attest_otel import semconv
from attest_otel.content import KEEP, ContentPolicy
from attest_otel.model import CheckResult, Finding, Run

AttrValue = str | bool | int | float
Attributes = dict[str, AttrValue]


@dataclass(slots=True)
class Evaluation:
    """One `gen_ai.evaluation.result`: about one tool call, or about the whole run.

    `span_id` is the hex id of the span it is about (the tool span, or the run's agent
    span); None when the run did not come from spans. `severity` is attest's pass, warn or
    fail, which log records turn into a severity number.

    Not frozen, though nothing changes one after `evaluations` made it: a frozen dataclass
    sets each field through `object.__setattr__`, four times the cost of building it, for
    every graded call, twice (the annotation and the log record).
    """

    about: Literal["call", "run"]
    span_id: str | None
    severity: str
    span_attributes: Attributes
    event_attributes: Attributes


def score_value(verdict: str) -> float:
    """1.0 only for `correct`: a call with any other verdict counted against the score."""
    return 1.0 if verdict == "correct" else 0.0


def run_severity(result: CheckResult) -> str:
    """The run's verdict (pass/review/fail) on the same scale as a call's severity."""
    return {"pass": "pass", "review": "warn"}.get(result.verdict, "fail")


def failed_calls(result: CheckResult) -> int:
    return sum(f.severity == "fail" for f in result.findings)


def _hex_id(value: Any) -> str | None:
    if isinstance(value, str) and value:
        return value.lower()
    return None


def finding_span_id(run: Run, finding: Finding) -> str | None:
    """The tool span a finding is about: its metadata first, then the run's step.

    The metadata wins because adapters write it from the span itself; the step lookup
    covers findings built without it (older graders, hand-made results).
    """
    from_metadata = _hex_id(finding.metadata.get("span_id"))
    if from_metadata is not None:
        return from_metadata
    if 0 <= finding.step < len(run.steps):
        call = run.steps[finding.step].tool_call
        if call is not None:
            return _hex_id(call.span_id)
    return None


_SCALARS = (bool, int, float, str)
"""What an attribute may hold (`AttrValue`); a tuple, not the union: `isinstance` on a tuple
is the cheaper test, and it runs for every optional attribute of every graded call."""

_CALL_METADATA = (
    (semconv.ATTEST_RECOVERY, "recovery"),
    (semconv.ATTEST_RECOVERED_AT, "recovered_at"),
    (semconv.ATTEST_ALLOWED, "allowed"),
    (semconv.ATTEST_APPROPRIATE, "appropriate"),
)
"""The optional call attributes, in the order they are written, and their metadata keys."""


def _put(out: Attributes, key: str, value: Any) -> None:
    if isinstance(value, _SCALARS):
        out[key] = value


def call_attributes(finding: Finding) -> Attributes:
    """The `attest.*` attributes of one call, for the tool span and for its event."""
    meta: Mapping[str, Any] = finding.metadata
    out: Attributes = {
        semconv.ATTEST_VERDICT: finding.verdict,
        semconv.ATTEST_SEVERITY: finding.severity,
        semconv.ATTEST_STEP: finding.step,
    }
    get = meta.get
    for key, name in _CALL_METADATA:
        value = get(name)
        if isinstance(value, _SCALARS):
            out[key] = value
    return out


def call_event_attributes(
    finding: Finding, content: ContentPolicy = KEEP, call: Attributes | None = None
) -> Attributes:
    """The `gen_ai.evaluation.result` attributes of one call (plus the tool's name, so an
    event read away from its span, on the grade span or in a log backend, still says
    which tool it judged). `call` is `call_attributes(finding)` when the caller has it
    already (`evaluations` writes the same dict on the span)."""
    out: Attributes = {
        semconv.GEN_AI_EVALUATION_NAME: semconv.EVALUATION_NAME_TOOL_USE,
        semconv.GEN_AI_EVALUATION_SCORE_VALUE: score_value(finding.verdict),
        semconv.GEN_AI_EVALUATION_SCORE_LABEL: finding.verdict,
    }
    _put(out, semconv.GEN_AI_EVALUATION_EXPLANATION, content.text(finding.reason))
    out[semconv.GEN_AI_TOOL_NAME] = finding.subject
    out.update(call_attributes(finding) if call is None else call)
    return out


def run_attributes(result: CheckResult) -> Attributes:
    """The `attest.tool_use.*` attributes of a run, for the agent span and its event; a run
    not read whole says why (`attest.tool_use.gaps`), so its `review` is told apart from a
    check that could not be made."""
    out: Attributes = {
        semconv.ATTEST_TOOL_USE_SCORE: float(result.score),
        semconv.ATTEST_TOOL_USE_VERDICT: result.verdict,
        semconv.ATTEST_TOOL_USE_CALLS: len(result.findings),
        semconv.ATTEST_TOOL_USE_FAILED_CALLS: failed_calls(result),
    }
    gaps = result.metadata.get("gaps")
    if isinstance(gaps, list) and gaps:
        out[semconv.ATTEST_TOOL_USE_GAPS] = " ".join(str(g) for g in gaps)
    return out


def run_event_attributes(
    run: Run, result: CheckResult, content: ContentPolicy = KEEP
) -> Attributes:
    out: Attributes = {
        semconv.GEN_AI_EVALUATION_NAME: semconv.EVALUATION_NAME_TOOL_USE,
        semconv.GEN_AI_EVALUATION_SCORE_VALUE: float(result.score),
        semconv.GEN_AI_EVALUATION_SCORE_LABEL: result.verdict,
    }
    _put(out, semconv.GEN_AI_EVALUATION_EXPLANATION, content.text(result.summary))
    if run.agent:
        out[semconv.GEN_AI_AGENT_NAME] = run.agent
    out.update(run_attributes(result))
    return out


def evaluations(run: Run, result: CheckResult, content: ContentPolicy = KEEP) -> list[Evaluation]:
    """Every evaluation of a graded run: one per finding in step order, then the run's.

    `content` decides what of the run's content (explanations quote tool outputs and
    answers) the event attributes carry; every output passes its own, never a global.
    """
    out: list[Evaluation] = []
    for f in result.findings:
        # Built once and shared: the span's attributes and the event's are never changed
        # after this (their readers copy them), and building them was half of this loop.
        call = call_attributes(f)
        out.append(
            Evaluation(
                "call",
                finding_span_id(run, f),
                f.severity,
                call,
                call_event_attributes(f, content, call),
            )
        )
    out.append(
        Evaluation(
            about="run",
            span_id=_hex_id(run.span_id),
            severity=run_severity(result),
            span_attributes=run_attributes(result),
            event_attributes=run_event_attributes(run, result, content),
        )
    )
    return out
