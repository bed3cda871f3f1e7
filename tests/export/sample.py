"""One graded run, built by hand, that has every verdict and every recovery.

Built by hand rather than by the grader so these tests pin the export mapping alone: a
change in the rules must not show up as a diff in the export goldens.
"""

from __future__ import annotations

from typing import Any

from attest_otel.model import CheckResult, Finding, Run, Step, ToolCall

TRACE_ID = "5b8efff798038103d269b633813fc60c"
AGENT_SPAN_ID = "eee19b7ec3c1b174"


def tool_span_id(step: int) -> str:
    return f"{0xA0 + step:016x}"


# (step, tool, verdict, severity, metadata without span_id, reason, evidence)
_ROWS: list[tuple[int, str, str, str, dict[str, Any], str, str | None]] = [
    (
        0,
        "lookup_order",
        "correct",
        "pass",
        {"allowed": True, "recovery": None, "recovered_at": None, "appropriate": True},
        "The tool was allowed and returned no error.",
        None,
    ),
    # step 1 is a thought without a tool call: steps keep their index
    (
        2,
        "charge_card",
        "correct",
        "pass",
        {"allowed": True, "recovery": "retried", "recovered_at": 3, "appropriate": None},
        "The tool returned an error; a retry at step 3 worked.",
        None,
    ),
    (
        3,
        "charge_card",
        "correct",
        "pass",
        {"allowed": True, "recovery": None, "recovered_at": None, "appropriate": None},
        "The tool was allowed and returned no error.",
        None,
    ),
    (
        4,
        "refund_card",
        "correct",
        "pass",
        {"allowed": True, "recovery": "fallback", "recovered_at": 5, "appropriate": None},
        "The tool returned an error; the fallback refund_card_backup at step 5 worked.",
        None,
    ),
    (
        5,
        "refund_card_backup",
        "correct",
        "pass",
        {"allowed": True, "recovery": None, "recovered_at": None, "appropriate": None},
        "The tool was allowed and returned no error.",
        None,
    ),
    (
        6,
        "delete_account",
        "disallowed_tool",
        "fail",
        {"allowed": False, "recovery": None, "recovered_at": None, "appropriate": None},
        "delete_account is not an allowed tool (allowed: lookup_order, charge_card).",
        None,
    ),
    (
        7,
        "send_email",
        "error_claimed_success",
        "fail",
        {"allowed": True, "recovery": "claimed_success", "recovered_at": None, "appropriate": None},
        "The tool returned an error and nothing recovered it, yet the final answer says it "
        "succeeded.",
        "error: SMTP 550 mailbox unavailable",
    ),
    (
        8,
        "search_kb",
        "error_silent",
        "fail",
        {"allowed": True, "recovery": "unchecked", "recovered_at": None, "appropriate": None},
        "The tool returned an error and nothing recovered it; no model was available to read "
        "the final answer.",
        "Traceback (most recent call last): ...",
    ),
    (
        9,
        "get_weather",
        "incorrect",
        "fail",
        {"allowed": True, "recovery": None, "recovered_at": None, "appropriate": False},
        "The tool-choice check found it a poor choice: the task is about a refund.",
        None,
    ),
    (
        10,
        "translate",
        "review",
        "warn",
        {"allowed": True, "recovery": None, "recovered_at": None, "appropriate": None},
        "The tool-choice check failed, so the choice wasn't checked (HTTP 529).",
        None,
    ),
    (
        11,
        "notify",
        "correct",
        "pass",
        {"allowed": True, "recovery": "acknowledged", "recovered_at": None, "appropriate": None},
        "The tool returned an error and nothing recovered it, but the final answer tells the "
        "user it failed.",
        None,
    ),
    (
        12,
        "audit_log",
        "error_silent",
        "fail",
        {"allowed": True, "recovery": "silent", "recovered_at": None, "appropriate": None},
        "The tool returned an error and nothing recovered it, and the final answer doesn't "
        "mention it.",
        "status 500",
    ),
]

NO_METADATA_SPAN_STEP = 12
"""This finding has no `span_id` in its metadata: its span comes from the run's step."""


def graded_run() -> tuple[Run, CheckResult]:
    steps: list[Step] = []
    findings: list[Finding] = []
    for step, tool, verdict, severity, meta, reason, evidence in _ROWS:
        while len(steps) < step:
            steps.append(Step(thought="Think before acting."))
        steps.append(Step(tool_call=ToolCall(name=tool, span_id=tool_span_id(step))))
        metadata = dict(meta)
        if step != NO_METADATA_SPAN_STEP:
            metadata["span_id"] = tool_span_id(step)
            metadata["output_captured"] = True
        findings.append(Finding(severity, verdict, tool, reason, evidence, step, metadata))
    correct = sum(f.verdict == "correct" for f in findings)
    run = Run(
        task="Refund order 42 to the customer's card.",
        steps=steps,
        final_answer="Refunded 19.50.",
        allowed_tools=["lookup_order", "charge_card"],
        agent="refund-agent",
        trace_id=TRACE_ID,
        span_id=AGENT_SPAN_ID,
    )
    result = CheckResult(
        check="tool_use",
        passed=False,
        verdict="fail",
        score=correct / len(findings),
        summary=(
            f"{correct}/{len(findings)} tool calls correct. Sequence: "
            + " -> ".join(f.subject for f in findings)
            + ". Problems: "
            + "; ".join(
                f"step {f.step} {f.subject}: {f.verdict}" for f in findings if f.severity != "pass"
            )
            + "."
        ),
        findings=findings,
        metadata={"model": None, "model_calls": 0},
    )
    return run, result


def passing_run(
    *,
    tool: str = "lookup_order",
    agent: str | None = "refund-agent",
    trace_id: str | None = TRACE_ID,
) -> tuple[Run, CheckResult]:
    """A one-call run that passes, for tests that only need some grade to send."""
    span_id = tool_span_id(0)
    run = Run(
        task="Look up order 42.",
        steps=[Step(tool_call=ToolCall(name=tool, span_id=span_id))],
        agent=agent,
        trace_id=trace_id,
        span_id=AGENT_SPAN_ID if trace_id else None,
    )
    finding = Finding(
        "pass",
        "correct",
        tool,
        "The tool was allowed and returned no error.",
        None,
        0,
        {
            "allowed": True,
            "recovery": None,
            "recovered_at": None,
            "appropriate": None,
            "span_id": span_id,
        },
    )
    result = CheckResult(
        "tool_use",
        True,
        "pass",
        1.0,
        f"1/1 tool calls correct. Sequence: {tool}. No problems.",
        [finding],
        {"model": None, "model_calls": 0},
    )
    return run, result
