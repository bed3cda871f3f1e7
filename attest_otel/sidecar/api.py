"""`attest_otel.v1.Grader` on the gRPC port (proto/attest_otel/v1/grader.proto).

Both calls sit behind the Grader API's own token (`receivers.grader_token_file`, checked by
the receivers' interceptor): `GradeTrace` returns stored content and `GradeRun` may spend
the model budget, neither of which a sender of spans should get with its ingest token.
What `GradeTrace` returns obeys the content policy, as the store does: with `truncate` the
texts of the run and of its grade are cut, with `drop` the answer holds the stored grades
only (no run content, none is kept).

The API shares the gRPC server with OTLP Export but not its threads: the server's pool is
Export's `workers` plus `grader_workers`, and at most `grader_workers` Grader calls run at
once (others are refused at once with RESOURCE_EXHAUSTED). A GradeRun waiting on a slow
model therefore never delays an Export. A GradeTrace whose answer would pass the gRPC send
limit is refused before anything is graded: the runs' encoded size is known once they are
read, and grading adds only the findings.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

import grpc
from google.protobuf import json_format  # type: ignore[import-untyped]

from attest_otel._proto.attest_otel.v1 import grader_pb2, result_pb2
from attest_otel.content import ContentPolicy
from attest_otel.errors import InputError
from attest_otel.grade.rules import EVIDENCE_CHARS
from attest_otel.ingest.decode import decode_bytes
from attest_otel.model import CheckResult, Run, run_from_dict, run_to_dict
from attest_otel.pipeline import Reading, grade_traces, read
from attest_otel.policy import Policy
from attest_otel.store import Store
from attest_otel.store.blob import split as split_stored
from attest_otel.store.scrub import scrub_result

MAX_REPLY_BYTES = 4 * 1024 * 1024
"""The gRPC server's send limit (`receivers.GrpcReceiver`)."""

_T = TypeVar("_T")


class GraderApi:
    """`attest_otel.v1.Grader` on the gRPC port (see proto/attest_otel/v1/grader.proto)."""

    def __init__(
        self,
        *,
        grade_run: Callable[[Run], CheckResult],
        store: Callable[[], Store | None],
        policy: Policy | None,
        content: ContentPolicy,
        model_reasons: int = 0,
        max_concurrent: int = 2,
        max_request_bytes: int = 4 * 1024 * 1024,
    ) -> None:
        """`grade_run`: the sidecar's, within its time budget (`TraceGrader.grade_run_bounded`);
        `store`: the store while it is open (None: turned off, or not open yet);
        `model_reasons`: the model reasons a call's finding may carry (`reply_bound`);
        `max_request_bytes`: the largest run `GradeRun` reads."""
        self.grade_run = grade_run
        self.store = store
        self.policy = policy
        self.content = content
        self.model_reasons = model_reasons
        self.max_request_bytes = max_request_bytes
        self.max_concurrent = max(1, max_concurrent)
        self._slots = threading.BoundedSemaphore(self.max_concurrent)

    def _bounded(self, call: Callable[[], _T], context: Any) -> _T:
        if not self._slots.acquire(blocking=False):
            context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"the Grader API is busy ({self.max_concurrent} calls at once); retry later",
            )
        try:
            return call()
        finally:
            self._slots.release()

    def GradeRun(self, request: Any, context: Any) -> Any:
        return self._bounded(lambda: self._grade_run(request, context), context)

    def GradeTrace(self, request: Any, context: Any) -> Any:
        return self._bounded(lambda: self._grade_trace(request, context), context)

    def _grade_run(self, request: Any, context: Any) -> Any:
        # The gRPC server reads requests up to the receivers' read cap (for Export's sake,
        # `receivers.GrpcReceiver`): a run is held to the receive limit before it is read.
        limit = self.max_request_bytes
        size = request.ByteSize()
        if size > limit:
            context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"the run takes {size} bytes, over the {limit}-byte request limit "
                "(receivers.grpc.max_recv_msg_size_mib); grade it with `attest-otel grade "
                "--file` instead",
            )
        data = json_format.MessageToDict(request, preserving_proto_field_name=True)
        try:
            run = run_from_dict(data)
        except InputError as e:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        bound = reply_bound(run, model_reasons=self.model_reasons)
        if bound > MAX_REPLY_BYTES:
            context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"the grade of a run of {_calls(run)} tool calls may take {bound} bytes, over "
                f"the {MAX_REPLY_BYTES}-byte answer limit; grade it with `attest-otel grade "
                "--file` instead",
            )
        result = self.grade_run(run)
        reply = json_format.ParseDict(
            result.to_dict(), result_pb2.CheckResult(), ignore_unknown_fields=True
        )
        if reply.ByteSize() > MAX_REPLY_BYTES:  # a model reason longer than it may be
            context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"the grade takes {reply.ByteSize()} bytes, over the {MAX_REPLY_BYTES}-byte "
                "answer limit; grade it with `attest-otel grade --file` instead",
            )
        return reply

    def _grade_trace(self, request: Any, context: Any) -> Any:
        trace_id = request.trace_id.strip().lower()
        store = self.store()
        if store is None:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, "the store is turned off")
            raise AssertionError("abort raises")
        stored = store.get_trace(trace_id)
        if stored is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"trace {trace_id} is not in the store")
            raise AssertionError("abort raises")
        content = self.content
        response = grader_pb2.GradeTraceResponse(trace_id=trace_id)
        if not stored.data:  # content: drop keeps grades only
            for grade in stored.grades:
                response.runs.append(
                    grader_pb2.GradedRun(
                        span_id=grade.span_id,
                        agent=grade.agent or "",
                        result=json_format.ParseDict(
                            scrub_result(grade.result, content),
                            result_pb2.CheckResult(),
                            ignore_unknown_fields=True,
                        ),
                    )
                )
            return response
        spans, logs = split_stored(stored.data)
        decoded = decode_bytes(spans, "application/x-protobuf", source=f"store trace {trace_id}")
        if logs:
            decoded.logs += decode_bytes(
                logs, "application/x-protobuf", source=f"store trace {trace_id} logs"
            ).logs
        policy = self.policy
        reading = Reading(policy) if policy is not None else None
        runs_bytes = sum(
            json_format.ParseDict(
                _run_dict(run, content), result_pb2.Run(), ignore_unknown_fields=True
            ).ByteSize()
            for trace in read(decoded.spans, decoded.logs, reading)
            for run in trace.runs
        )
        if runs_bytes > MAX_REPLY_BYTES:
            context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"the runs of trace {trace_id} take {runs_bytes} bytes, over the "
                f"{MAX_REPLY_BYTES}-byte answer limit; grade it with "
                "`attest-otel grade --trace-id` instead",
            )
        graded = grade_traces(
            decoded.spans,
            decoded.logs,
            reading,
            stored={g.span_id: g.result for g in stored.grades},
        )
        for trace in graded:
            for one in trace.runs:
                response.runs.append(
                    grader_pb2.GradedRun(
                        span_id=one.run.span_id or "",
                        agent=one.run.agent or "",
                        run=json_format.ParseDict(
                            _run_dict(one.run, content),
                            result_pb2.Run(),
                            ignore_unknown_fields=True,
                        ),
                        result=json_format.ParseDict(
                            scrub_result(one.result.to_dict(), content),
                            result_pb2.CheckResult(),
                            ignore_unknown_fields=True,
                        ),
                    )
                )
        return response


_RESULT_BYTES = 1024
"""A CheckResult without findings: its fixed fields, summary text and metadata keys."""
_FINDING_BYTES = 512
"""A finding's fixed part: field tags, severity and verdict words, the reasons' own text,
step, and the metadata keys and their small values."""
_MODEL_REASON_BYTES = 4 * 1024
"""One model reason (`grade.llm` asks for at most 512 tokens: 8 bytes a token); a call may
carry two (the answer check, and the tool-choice check when `appropriate` is on). A longer
one is caught after grading, by the answer's own size."""


def _calls(run: Run) -> int:
    return sum(1 for step in run.steps if step.tool_call is not None)


def reply_bound(run: Run, *, model_reasons: int) -> int:
    """The most bytes `GradeRun`'s answer for `run` can take, known before grading.

    A finding per call; its subject is the tool's name, its reasons name the tool, a
    fallback, a retry step and the allowed tools (`grade.rules`), its evidence is at most
    `EVIDENCE_CHARS` characters of the output (4 bytes each in UTF-8), and with model checks
    a call may carry `model_reasons` reasons from the model. The summary names every call.
    Each text is counted at its most (UTF-8 bytes, a protobuf length prefix).
    """
    names = [len(step.tool_call.name.encode()) for step in run.steps if step.tool_call]
    longest = max(names, default=0)
    allowed = sum(len(name.encode()) + 2 for name in run.allowed_tools or ())
    per_call = _FINDING_BYTES + longest + allowed + 4 * EVIDENCE_CHARS
    per_call += model_reasons * _MODEL_REASON_BYTES
    return _RESULT_BYTES + sum(per_call + 4 * name for name in names)


def _run_dict(run: Any, content: ContentPolicy) -> dict[str, Any]:
    """A run as `GradeTrace` may return it: every text cut (or left out) by the policy."""
    data: dict[str, Any] = run_to_dict(run)
    return data if content.mode == "keep" else _texts(data, content)


def _texts(node: Any, content: ContentPolicy) -> Any:
    if isinstance(node, str):
        return content.text(node)
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            kept = value if key in _IDS else _texts(value, content)
            if kept is not None:
                out[key] = kept
        return out
    if isinstance(node, list):
        return [x for x in (_texts(v, content) for v in node) if x is not None]
    return node


_IDS = frozenset({"name", "is_error", "allowed_tools", "tool_fallbacks", "content_captured"})
"""Fields that name or identify, not content: kept whatever the policy."""
