"""Grading in the receiving process has a time budget too (issue 26; docs/hostile-input.md,
"Grading budget"): with model checks on, with `grading.processes: 0`, and for the Grader
API's GradeRun, a trace cannot be killed, so it is waited for at most its budget, then
forwarded ungraded and flagged `review` with the reason. Driven from outside against a real
`serve`, its model a fake Messages API that hangs, asked through the real `anthropic` SDK.
"""

from __future__ import annotations

import time

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from attest_otel._proto.attest_otel.v1 import grader_pb2_grpc, result_pb2
from tests.fakes.messages_server import MessagesServer, verdict
from tests.sidecar.downstream import Downstream
from tests.sidecar.helpers import Sidecar, attr
from tests.sidecar.hostile_traces import agent_trace
from tests.sidecar.test_hostile import agent_span, post

pytestmark = pytest.mark.timeout(120)

_HANG_S = 100.0  # longer than any test waits: the model never answers in time


def failing_trace() -> tuple[bytes, str, str]:
    """An agent run whose one tool call failed and whose answer claims success: the model
    is asked whether the answer owns up to the failure."""
    data, trace_id, agent = agent_trace(answer="Done, your invoice is paid.")
    request = ExportTraceServiceRequest.FromString(data)
    tool = request.resource_spans[0].scope_spans[0].spans[1]
    tool.status.code = 2  # STATUS_CODE_ERROR
    tool.attributes[3].value.string_value = "Error: card declined"
    return request.SerializeToString(), trace_id, agent


def _hanging_model(sidecar: Sidecar, messages_server: MessagesServer, **grading: object) -> None:
    messages_server.responder = verdict(
        {"outcome": "claimed_success", "reason": "Says paid."}, delay_s=_HANG_S
    )
    sidecar.env = {"ANTHROPIC_API_KEY": "test", "ANTHROPIC_BASE_URL": messages_server.url}
    sidecar.config = {"grading": {"model": {"enabled": True, **grading}}}


def _wait_span(downstream: Downstream, agent: str, timeout: float) -> object:
    assert downstream.wait_for(lambda d: agent_span(d, agent) is not None, timeout)
    span = agent_span(downstream, agent)
    assert span is not None
    return span


def test_a_hanging_model_costs_a_trace_its_budget_and_nothing_more(
    sidecar: Sidecar, downstream: Downstream, messages_server: MessagesServer
) -> None:
    """Before: the trace waited on the model for the SDK's timeout and its retries (minutes),
    and so did every trace and GradeRun behind it."""
    _hanging_model(sidecar, messages_server, budget_s=1)
    sidecar.start()
    data, trace_id, agent = failing_trace()
    sent = time.monotonic()
    post(sidecar, data)
    span = _wait_span(downstream, agent, 20)
    took = time.monotonic() - sent
    assert messages_server.calls >= 1, "the model was never asked"
    assert attr(span.attributes, "attest.tool_use.verdict") == "review"  # type: ignore[attr-defined]
    why = attr(span.attributes, "attest.tool_use.ungraded")  # type: ignore[attr-defined]
    assert "budget (1s)" in why, why
    print(f"forwarded ungraded {took:.2f}s after it was sent (budget 1 s, grace 0.3 s)")
    assert took < 1 + 0.3 + 3.0, took

    # A run that needs no model is still graded, whatever the hung calls hold.
    plain, _, plain_agent = agent_trace()
    post(sidecar, plain)
    plain_span = _wait_span(downstream, plain_agent, 20)
    assert attr(plain_span.attributes, "attest.tool_use.verdict") == "pass"  # type: ignore[attr-defined]

    # GradeRun waits for the same budget and answers review, saying why.
    run = result_pb2.Run(task="pay invoice 42", final_answer="Paid, all done.")
    step = run.steps.add()
    step.tool_call.name = "pay"
    step.tool_call.output.string_value = "Error: card declined"
    step.tool_call.is_error = True
    channel = grpc.insecure_channel(sidecar.grpc_endpoint)
    try:
        started = time.monotonic()
        answer = grader_pb2_grpc.GraderStub(channel).GradeRun(run, timeout=30)
        grade_run_s = time.monotonic() - started
    finally:
        channel.close()
    assert answer.verdict == "review" and not answer.passed
    assert answer.metadata["ungraded"] == "time", answer
    print(f"GradeRun answered review in {grade_run_s:.2f}s")
    assert grade_run_s < 1 + 3.0, grade_run_s

    assert sidecar.terminate(timeout=30) == 0
    log = sidecar.log()
    assert log.count(f"trace {trace_id} forwarded ungraded") == 1, log
    assert "Traceback" not in log


def test_sigterm_wins_over_a_hanging_model(
    sidecar: Sidecar, downstream: Downstream, messages_server: MessagesServer
) -> None:
    """Before: shutdown waited out its deadline for the model, then ended without the
    trace: it was never forwarded."""
    _hanging_model(sidecar, messages_server, budget_s=60)
    sidecar.config["shutdown"] = {"deadline_s": 3}
    sidecar.start()
    data, trace_id, agent = failing_trace()
    post(sidecar, data)
    deadline = time.monotonic() + 20
    while messages_server.calls == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert messages_server.calls >= 1, sidecar.log()
    started = time.monotonic()
    assert sidecar.terminate(timeout=20) == 0
    stopped_s = time.monotonic() - started
    print(f"stopped {stopped_s:.2f}s after SIGTERM (shutdown.deadline_s 3)")
    assert stopped_s < 3 + 3, stopped_s  # the deadline, and the interpreter's own exit
    span = _wait_span(downstream, agent, 5)
    assert attr(span.attributes, "attest.tool_use.verdict") == "review"  # type: ignore[attr-defined]
    assert "stopping" in attr(span.attributes, "attest.tool_use.ungraded")  # type: ignore[attr-defined]
    assert f"trace {trace_id} forwarded ungraded" in sidecar.log()


def test_processes_0_grades_within_the_budget(sidecar: Sidecar, downstream: Downstream) -> None:
    """`grading.processes: 0`: a trace of 40,000 calls (seconds to grade) went on graded
    after it was done, however long; now at the budget, flagged review."""
    sidecar.config = {"grading": {"processes": 0, "budget_s": 0.5}}
    sidecar.start()
    slow, _, agent = agent_trace(tools=40_000)
    sent = time.monotonic()
    post(sidecar, slow)
    span = _wait_span(downstream, agent, 60)
    took = time.monotonic() - sent
    assert attr(span.attributes, "attest.tool_use.verdict") == "review"  # type: ignore[attr-defined]
    assert "budget (0.5s)" in attr(span.attributes, "attest.tool_use.ungraded")  # type: ignore[attr-defined]
    print(f"a 40,000-call trace forwarded ungraded {took:.2f}s after it was sent")
    assert sidecar.terminate(timeout=30) == 0
