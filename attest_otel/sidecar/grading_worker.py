"""The grading processes' side of offline grading: what a grading process runs on a
released trace's bytes (decode, grade, annotate, encode the log records) and what it sends
back. The receiving process's side is `sidecar.grading` (`TraceGrader`); this module holds
nothing of its state, so a spawned process imports only what grading needs.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)

import attest_otel.adapt
import attest_otel.export.annotate
import attest_otel.grade.grader
import attest_otel.ingest.decode  # noqa: F401
from attest_otel.content import KEEP, ContentPolicy
from attest_otel.export.annotate import GRADE_MARKS, annotate_graded, annotation_bytes
from attest_otel.export.log_records import log_records
from attest_otel.export.results import finding_span_id
from attest_otel.grade.grader import grade
from attest_otel.ingest.decode import decode_request
from attest_otel.model import CheckResult, Finding, Run, Step, ToolCall
from attest_otel.pipeline import Reading, grade_traces
from attest_otel.policy import load_policy
from attest_otel.sidecar.wire import append_to_spans, iter_resource_spans
from attest_otel.store.blob import split as split_stored
from attest_otel.store.records import encode_result

log = logging.getLogger(__name__)


def grade_decoded(
    request: Any,
    decoded: Any,
    policy: Any,
    grade_run: Callable[[Run], CheckResult],
    content: ContentPolicy,
    *,
    data: bytes | None = None,
    now_ns: int | None = None,
    gaps: list[str] | None = None,
) -> tuple[bytes, list[tuple[Run, CheckResult]]]:
    """Runs of a decoded trace, graded (`pipeline`) and written into its spans; the
    annotated bytes. The policy's declared dialects read the spans too.

    Given `data`, the trace's bytes, and no earlier grade in them, the grades are appended
    to the spans' encodings (`wire.append_to_spans`): the other spans keep their bytes and
    nothing is parsed or serialised. Otherwise the spans of `request` (the parsed trace,
    parsed from `data` when None) are annotated in place (replacing an earlier grade) and
    the request serialised.
    """
    now = time.time_ns() if now_ns is None else now_ns
    graded: list[tuple[Run, CheckResult]] = []
    reading = Reading(policy) if policy is not None else None
    told = list(gaps or ())

    def grade_one(run: Run) -> CheckResult:
        # What the sidecar knows was refused of the trace, for the rules to see.
        run.gaps.extend(gap for gap in told if gap not in run.gaps)
        return grade_run(run)

    for trace in grade_traces(decoded.spans, decoded.logs, reading, grade_run=grade_one):
        for one in trace.runs:
            graded.append((one.run, one.result))
    if data is not None and not any(mark in data for mark in GRADE_MARKS):
        additions = annotation_bytes(graded, now_ns=now, content=content)
        annotated, _ = append_to_spans(
            data, {bytes.fromhex(span_id): extra for span_id, extra in additions.items()}
        )
        return annotated, graded
    if request is None:
        assert data is not None, "grade_decoded needs the request or its bytes"
        request = ExportTraceServiceRequest.FromString(data)
    by_id = {
        ps.span_id.hex(): ps
        for rs in request.resource_spans
        for ss in rs.scope_spans
        for ps in ss.spans
    }
    annotate_graded(by_id, graded, now_ns=now, content=content)
    serialized: bytes = request.SerializeToString()
    return serialized, graded


def grade_again(
    prior: bytes,
    late: bytes,
    label: str,
    policy: Any,
    grade_run: Callable[[Run], CheckResult],
    content: ContentPolicy,
) -> tuple[bytes, list[tuple[Run, CheckResult]]]:
    """A trace graded again (`regrade`) from the spans graded before and the late ones:
    (the late spans annotated, as one request; every run found).

    The trace is parsed whole, since a late span changes the runs it belongs to, and only
    the late spans go out again: the others went out with their first grade.
    """
    prior, prior_logs = split_stored(prior)  # the log records read with it before
    request = ExportTraceServiceRequest.FromString(prior + late)
    decoded = decode_request(request, source=label, data=prior + late)
    decoded.logs = decoded.logs + decode_logs(prior_logs, label)
    _, runs = grade_decoded(request, decoded, policy, grade_run, content)
    # Both parts are concatenated ResourceSpans records: the late ones come last.
    keep = sum(1 for _ in iter_resource_spans(late))
    out = ExportTraceServiceRequest()
    if keep:
        out.resource_spans.extend(request.resource_spans[-keep:])
    data: bytes = out.SerializeToString()
    return data, runs


def decode_logs(data: bytes, label: str) -> list[Any]:
    """The log records held with a trace, decoded as `grade --file` decodes a logs request
    (validated on receipt, as the trace's spans were)."""
    if not data:
        return []
    return decode_request(data, source=label, logs=True, checked=True).logs


def encode_logs(
    graded: list[tuple[Run, CheckResult]], now_ns: int, content: ContentPolicy
) -> list[bytes]:
    """The evaluation log records of every graded run (`export.log_records`)."""
    out: list[bytes] = []
    for run, result in graded:
        out += log_records(run, result, now_ns=now_ns, content=content)
    return out


_WORKER_POLICY: Any = None
_WORKER_CONTENT: ContentPolicy = KEEP
"""This process's state, set once by `init_worker`: a spawned process shares nothing."""


def init_worker(policy_path: str | None, content: ContentPolicy, nice: int = 0) -> None:
    """Runs once in each grading process (spawned: no inherited threads or sockets;
    `workers` sets its signals and its death with the parent).

    A grading process sends nothing itself: it returns the annotated trace and the encoded
    evaluation log records, which the receiving process forwards (a concatenation, no
    encoding). Metrics stay in the main process, which serves `/metrics`.

    `nice` (`grading.nice`) lowers this process's CPU priority: where grading and the
    receivers want the same cores, the receivers run first, so a plain span is not delayed
    by grading, and grading takes the CPU they leave (admission paces it by what it clears).
    """
    global _WORKER_POLICY, _WORKER_CONTENT

    if nice:
        try:
            os.nice(nice)
        except OSError as e:  # a sandbox that forbids it: grading at the same priority
            log.warning("grading process: cannot lower its CPU priority (%s)", e)
    _WORKER_CONTENT = content
    if policy_path is not None:
        _WORKER_POLICY = load_policy(policy_path)


def _slim(run: Run) -> Run:
    """What the main process still needs of a run (metrics, the log line): ids and names,
    not the content, which can be most of a run and would cost its pickling both ways."""
    steps = [
        Step(
            tool_call=ToolCall(
                name=c.name, is_error=c.is_error, span_id=c.span_id, call_id=c.call_id
            )
        )
        if (c := s.tool_call) is not None
        else Step()
        for s in run.steps
    ]
    return Run(
        steps=steps,
        agent=run.agent,
        trace_id=run.trace_id,
        span_id=run.span_id,
        allowed_tools=run.allowed_tools,
        gaps=list(run.gaps),
    )


Light = tuple[
    str | None,
    str | None,
    str | None,
    list[str],
    str,
    bool,
    str,
    float,
    list[tuple[str, str, str, int, Any, str | None]],
]
"""What the main process reads of a run graded here whose result was encoded for the store:
(trace id, agent span id, agent, gaps, check, passed, verdict, score, and per finding its
severity, verdict, tool, step, recovery and the span it is about). Plain values pickle in
C; the run's steps, the result's reasons and evidence stay here (the text carries them)."""


def _light(run: Run, result: CheckResult) -> Light:
    """See `Light`: what the metrics (`export.metrics`) and the log line read."""
    return (
        run.trace_id,
        run.span_id,
        run.agent,
        list(run.gaps),
        result.check,
        result.passed,
        result.verdict,
        result.score,
        [
            (
                f.severity,
                f.verdict,
                f.subject,
                f.step,
                f.metadata.get("recovery"),
                finding_span_id(run, f),
            )
            for f in result.findings
        ],
    )


def from_light(light: Light) -> tuple[Run, CheckResult]:
    """The run and result a `Light` stands for, with only what it carries: each finding's
    span in its metadata (so `finding_span_id` finds it without the run's steps)."""
    trace_id, span_id, agent, gaps, check, passed, verdict, score, found = light
    findings: list[Finding] = []
    for severity, finding_verdict, subject, step, recovery, span in found:
        metadata: dict[str, Any] = {}
        if recovery is not None:
            metadata["recovery"] = recovery
        if span is not None:
            metadata["span_id"] = span
        findings.append(Finding(severity, finding_verdict, subject, "", None, step, metadata))  # type: ignore[arg-type]
    run = Run(agent=agent, trace_id=trace_id, span_id=span_id, gaps=gaps)
    return run, CheckResult(check, passed, verdict, score, "", findings, {})  # type: ignore[arg-type]


def grade_in_worker(
    data: bytes,
    label: str,
    logs: bool = False,
    held_logs: bytes = b"",
    gaps: list[str] | None = None,
    encode: bool = False,
) -> tuple[bytes, list[tuple[Run, CheckResult]], list[bytes], list[tuple[str, Light]] | None]:
    """Offline grading of one trace's bytes (with the log records held with it), in a
    grading process: the annotated bytes, the runs (slimmed for the trip back), when `logs`
    their evaluation log records. When `encode`, each run instead comes as its result
    encoded as the store keeps it (`store.encode_result`) and its `Light` values: the runs
    and results were most of the pickling both ways, and the result's dict and text were
    the receiving process's work."""

    decoded = decode_request(data, source=label, checked=True)
    decoded.logs = decoded.logs + decode_logs(held_logs, label)
    now_ns = time.time_ns()
    annotated, graded = grade_decoded(
        None,
        decoded,
        _WORKER_POLICY,
        lambda run: grade(run, judge=None),
        _WORKER_CONTENT,
        data=data,
        now_ns=now_ns,
        gaps=gaps,
    )
    records = encode_logs(graded, now_ns, _WORKER_CONTENT) if logs else []
    if not encode:
        return annotated, [(_slim(run), result) for run, result in graded], records, None
    light = [(encode_result(result.to_dict()), _light(run, result)) for run, result in graded]
    return annotated, [], records, light


def grade_again_in_worker(
    prior: bytes,
    late: bytes,
    label: str,
) -> tuple[bytes, list[tuple[Run, CheckResult]]]:
    """`grade_again` in a grading process, the runs slimmed for the trip back."""
    data, runs = grade_again(
        prior, late, label, _WORKER_POLICY, lambda run: grade(run, judge=None), _WORKER_CONTENT
    )
    return data, [(_slim(run), result) for run, result in runs]
