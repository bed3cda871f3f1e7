"""GradeRun refuses what it cannot answer before it grades (issue 26; docs/hostile-input-network.md,
"The Grader API"): a run over the request limit, and a run whose grade may pass the 4 MiB
send limit, are RESOURCE_EXHAUSTED before any rule runs or any model call is paid for.

`reply_bound` is what makes the second check honest: it must never be below the real
answer, whatever names, allowed lists, outputs and model reasons a run brings.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import grpc
import pytest
from google.protobuf import json_format

from attest_otel._proto.attest_otel.v1 import grader_pb2_grpc, result_pb2
from attest_otel.grade.grader import grade
from attest_otel.grade.questions import (
    AnswerQuestion,
    AnswerVerdict,
    ChoiceQuestion,
    ChoiceVerdict,
    ModelFailure,
)
from attest_otel.model import Run, Step, ToolCall
from attest_otel.sidecar.api import MAX_REPLY_BYTES, reply_bound
from tests.fakes.messages_server import MessagesServer
from tests.sidecar.helpers import Sidecar

pytestmark = pytest.mark.timeout(180)

_LONG_REASON = "é" * 2000  # 4000 bytes: what 512 tokens of a verbose model may come to


class _Verbose:
    """A judge whose every reason is as long as a model's capped reply may be."""

    model = "verbose"

    def answer(self, questions: Sequence[AnswerQuestion]) -> list[AnswerVerdict | ModelFailure]:
        return [AnswerVerdict(outcome="claimed_success", reason=_LONG_REASON) for _ in questions]

    def choose(self, questions: Sequence[ChoiceQuestion]) -> list[ChoiceVerdict | ModelFailure]:
        return [ChoiceVerdict(appropriate=False, reason=_LONG_REASON) for _ in questions]


def _hostile_runs() -> list[Run]:
    wide = "\U0001f600" * 300  # 1200 bytes of name
    allowed = [f"tool_{'ñ' * 40}_{i}" for i in range(50)]
    runs = []
    for name in ("a", wide, "x" * 5000):
        steps = [
            Step(
                tool_call=ToolCall(
                    name=f"{name}{i % 3}",
                    arguments={"q": i},
                    output="Error: " + "😀" * 500 if i % 2 else "ok " + "ß" * 900,
                    is_error=bool(i % 2),
                )
            )
            for i in range(40)
        ]
        for allowed_tools in (None, [], allowed, [f"{name}0"]):
            runs.append(
                Run(
                    steps=list(steps),
                    allowed_tools=allowed_tools,
                    final_answer="All done, it worked.",
                    tool_fallbacks={f"{name}1": [f"{name}2"]},
                )
            )
    return runs


def _reply_bytes(run: Run, judge: object | None, *, appropriate: bool = True) -> int:
    result = grade(run, judge=judge, appropriate=appropriate and judge is not None)
    reply = json_format.ParseDict(
        result.to_dict(), result_pb2.CheckResult(), ignore_unknown_fields=True
    )
    return int(reply.ByteSize())


def test_the_reply_bound_is_never_below_the_real_reply() -> None:
    for run in _hostile_runs():
        assert _reply_bytes(run, None) <= reply_bound(run, model_reasons=0)
        assert _reply_bytes(run, _Verbose()) <= reply_bound(run, model_reasons=2)
        asked = _reply_bytes(run, _Verbose(), appropriate=False)
        assert asked <= reply_bound(run, model_reasons=1)


def _run_of(calls: int, output: str) -> result_pb2.Run:
    run = result_pb2.Run(task="pay invoice 42", final_answer="Paid, all done.")
    for i in range(calls):
        step = run.steps.add()
        step.tool_call.name = f"pay_{i}"
        step.tool_call.output.string_value = output
        step.tool_call.is_error = True
    return run


def test_grade_run_refuses_a_large_run_and_a_large_answer_before_grading(
    sidecar: Sidecar, messages_server: MessagesServer
) -> None:
    """Before: a 6 MiB run was read (the port reads 64 MiB for Export) and graded; a run of
    4000 failing calls was graded, model calls and all, and only then found too large to
    send."""
    sidecar.env = {"ANTHROPIC_API_KEY": "test", "ANTHROPIC_BASE_URL": messages_server.url}
    sidecar.config = {"grading": {"model": {"enabled": True, "calls_per_minute": 100000}}}
    sidecar.start()
    channel = grpc.insecure_channel(
        sidecar.grpc_endpoint, options=[("grpc.max_send_message_length", 64 << 20)]
    )
    stub = grader_pb2_grpc.GraderStub(channel)
    try:
        big = _run_of(1, "Error: " + "x" * (6 << 20))
        started = time.monotonic()
        with pytest.raises(grpc.RpcError) as refused:
            stub.GradeRun(big, timeout=20)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "request limit" in (refused.value.details() or "")
        many = _run_of(4000, "Error: declined")
        assert many.ByteSize() < 4 << 20
        with pytest.raises(grpc.RpcError) as refused:
            stub.GradeRun(many, timeout=20)
        elapsed = time.monotonic() - started
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        details = refused.value.details() or ""
        assert "4000 tool calls" in details and "answer limit" in details, details
        assert messages_server.calls == 0, "the model was asked before the refusal"
        print(f"two refusals in {elapsed:.2f}s")
        # What fits is still graded.
        few = _run_of(3, "Error: declined")
        answer = stub.GradeRun(few, timeout=30)
        assert answer.verdict and len(answer.findings) == 3
        assert answer.ByteSize() <= MAX_REPLY_BYTES
    finally:
        channel.close()
    assert "Traceback" not in sidecar.log()
