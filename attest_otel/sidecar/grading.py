"""Grading released traces: in this process, or offline in worker processes.

One released trace is decoded once, its runs graded (`pipeline`), the grades written into
its spans (`export.annotate`), and the annotated bytes forwarded; the grades go to the
store and the telemetry. Offline grading runs in spawned worker processes so the decode,
adapt and annotate work of GenAI spans does not hold the receivers' interpreter lock; a
run that may use the model is graded here, where the model budget lives.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Any

from attest_otel.content import KEEP, ContentPolicy
from attest_otel.export.annotate import annotate_spans
from attest_otel.model import CheckResult, Run, Step, ToolCall
from attest_otel.pipeline import Reading, grade_traces
from attest_otel.sidecar.buffer import HeldTrace
from attest_otel.sidecar.forward import Forwarder, ForwardItem
from attest_otel.sidecar.gate import ModelGate
from attest_otel.sidecar.stats import SidecarStats
from attest_otel.store import StoredGrade, StoreWriter

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Graded:
    data: bytes
    runs: list[tuple[Run, CheckResult]] = field(default_factory=list)
    failed: bool = False
    in_worker: bool = False


class TraceGrader:
    """Grades one released trace and sends it on; never raises (see the module docstring)."""

    def __init__(
        self,
        *,
        policy: Any,
        gate: ModelGate | None,
        forwarder: Forwarder,
        stats: SidecarStats,
        emit: Callable[[Run, CheckResult], None] | None = None,
        store: StoreWriter | None = None,
        pool: ProcessPoolExecutor | None = None,
        emit_after_worker: Callable[[Run, CheckResult], None] | None = None,
        content: ContentPolicy = KEEP,
    ) -> None:
        self.content = content
        """What of a run's content the grade events written into its spans carry."""
        self.emit_after_worker = emit_after_worker
        """What is left to emit in this process when a worker graded (and logged) a run."""
        self.pool = pool
        """Worker processes for offline grading (model checks grade in this process)."""
        self.policy = policy
        self.gate = gate
        self.forwarder = forwarder
        self.stats = stats
        self.emit = emit
        self.store = store
        self.regrade: Callable[[HeldTrace], None] | None = None
        """Grades a late trace (spans that arrived after their trace was graded) again with
        what was graded before (`regrade.Regrader`)."""
        self.remember: Callable[[str, bytes, list[tuple[Run, CheckResult]]], None] | None = None
        """Told every graded trace (what a later regrade starts from when there is no store)."""

    def grade_run(self, run: Run) -> CheckResult:
        from attest_otel.grade.grader import grade

        gate = self.gate
        if gate is not None and gate.admit(run):
            with gate.semaphore:
                self.stats.add(model_runs=1)
                return grade(run, judge=gate.judge, appropriate=gate.appropriate)
        return grade(run, judge=None)

    def _grade(self, trace: HeldTrace, original: bytes) -> _Graded:
        pool = self.pool
        if pool is not None and self.gate is None:
            try:
                data, runs = pool.submit(grade_in_worker, original,
                                         f"trace {trace.trace_id_hex}").result()
                return _Graded(data, runs, in_worker=True)
            except BrokenProcessPool:
                log.error("the grading process died; grading in this process from now on")
                self.pool = None
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )

        from attest_otel.ingest.decode import decode_request

        if trace.probe is not None:
            request, decoded = trace.probe
        else:
            request = ExportTraceServiceRequest.FromString(original)
            decoded = decode_request(request, source=f"trace {trace.trace_id_hex}")
        data, runs = grade_decoded(request, decoded, self.policy, self.grade_run, self.content)
        return _Graded(data, runs)

    def __call__(self, trace: HeldTrace) -> None:
        if trace.late and self.regrade is not None:
            self.stats.graded(trace.reason or "late", 0, False)
            self.regrade(trace)
            return
        original = bytes(trace.data)
        try:
            graded = self._grade(trace, original)
        except Exception:
            log.exception("grading failed; forwarding trace %s ungraded", trace.trace_id_hex,
                          extra={"trace_id": trace.trace_id_hex, "spans": trace.spans})
            graded = _Graded(original, failed=True)
        trace.probe = None
        self.forwarder.offer(
            ForwardItem(graded.data, trace.spans, tuple(trace.records), mergeable=True)
        )
        self.stats.graded(trace.reason or "complete", len(graded.runs), graded.failed)
        for run, result in graded.runs:
            log.info(
                "graded run",
                extra={
                    "trace_id": trace.trace_id_hex,
                    "span_id": run.span_id,
                    "agent": run.agent,
                    "verdict": result.verdict,
                    "score": round(result.score, 3),
                    "calls": len(result.findings),
                    "released": trace.reason,
                },
            )
            emit = self.emit_after_worker if graded.in_worker else self.emit
            if emit is not None:
                try:
                    emit(run, result)
                except Exception:
                    log.exception("emitting the grade of a run failed")
        if self.remember is not None and not graded.failed:
            self.remember(trace.trace_id_hex, original, graded.runs)
        if self.store is not None:
            now = time.time_ns()
            grades = [
                StoredGrade(trace.trace_id_hex, run.span_id or "", run.agent, now,
                            result.to_dict())
                for run, result in graded.runs
            ]
            self.store.put(trace.trace_id_hex, original, trace.spans, grades)


def grade_decoded(
    request: Any, decoded: Any, policy: Any, grade_run: Callable[[Run], CheckResult],
    content: ContentPolicy,
) -> tuple[bytes, list[tuple[Run, CheckResult]]]:
    """Runs of a decoded trace, graded (`pipeline`) and written into its spans; the
    annotated bytes. The policy's declared dialects read the spans too."""
    by_id = {span.span_id: span.source for span in decoded.spans}
    now_ns = time.time_ns()
    graded: list[tuple[Run, CheckResult]] = []
    reading = Reading(policy) if policy is not None else None
    for trace in grade_traces(decoded.spans, decoded.logs, reading, grade_run=grade_run):
        for one in trace.runs:
            annotate_spans(by_id, one.run, one.result, now_ns=now_ns, content=content)
            graded.append((one.run, one.result))
    data: bytes = request.SerializeToString()
    return data, graded


_WORKER_POLICY: Any = None
_WORKER_TELEMETRY: Any = None
_WORKER_CONTENT: ContentPolicy = KEEP
"""This process's state, set once by `init_worker`: a spawned process shares nothing."""


def init_worker(policy_path: str | None, log_events: dict[str, Any] | None,
                 content: ContentPolicy) -> None:
    """Runs once in each grading process (spawned: no inherited threads or sockets).

    `log_events` holds `build_telemetry` arguments when the grade log events are on: each
    process sends its own, so the receiving process does not encode them (about 100 us a
    span through the SDK). Metrics stay in the main process, which serves `/metrics`.
    """
    global _WORKER_POLICY, _WORKER_TELEMETRY, _WORKER_CONTENT
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _exit_with_parent()
    _WORKER_CONTENT = content
    if policy_path is not None:
        from attest_otel.config import load_policy

        _WORKER_POLICY = load_policy(policy_path)
    if log_events is not None:
        from multiprocessing import util

        from attest_otel.export.telemetry import build_telemetry

        _WORKER_TELEMETRY = build_telemetry(spans=False, logs=True, metrics=False,
                                            prometheus=None, content=content, **log_events)
        util.Finalize(None, _WORKER_TELEMETRY.shutdown, exitpriority=10)


def _exit_with_parent() -> None:
    """End this grading process as soon as the sidecar is gone, however it died.

    A `kill -9` (the OOM killer, many supervisors) gives the parent no chance to stop its
    pool, and an idle worker would wait on its task queue for ever, keeping multiprocessing's
    resource tracker alive with it. A spawned child holds a sentinel, the read end of a pipe
    whose write end only the parent holds: it turns readable exactly when the parent exits.
    Once every worker is gone the tracker sees EOF on its own pipe and ends too.
    """
    import multiprocessing

    parent = multiprocessing.parent_process()
    if parent is None:
        return

    def watch() -> None:
        parent.join()
        os._exit(1)

    threading.Thread(target=watch, name="attest-parent-watch", daemon=True).start()


def _slim(run: Run) -> Run:
    """What the main process still needs of a run (metrics, the log line): ids and names,
    not the content, which can be most of a run and would cost its pickling both ways."""
    steps = [
        Step(tool_call=ToolCall(name=c.name, is_error=c.is_error, span_id=c.span_id,
                                call_id=c.call_id)) if (c := s.tool_call) is not None else Step()
        for s in run.steps
    ]
    return Run(steps=steps, agent=run.agent, trace_id=run.trace_id, span_id=run.span_id,
               allowed_tools=run.allowed_tools)


def grade_in_worker(data: bytes, label: str) -> tuple[bytes, list[tuple[Run, CheckResult]]]:
    """Offline grading of one trace's bytes, in a grading process."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    from attest_otel.grade.grader import grade
    from attest_otel.ingest.decode import decode_request

    request = ExportTraceServiceRequest.FromString(data)
    decoded = decode_request(request, source=label)
    annotated, graded = grade_decoded(request, decoded, _WORKER_POLICY,
                                      lambda run: grade(run, judge=None), _WORKER_CONTENT)
    if _WORKER_TELEMETRY is not None:
        for run, result in graded:
            _WORKER_TELEMETRY.emit_grade(run, result, grade_span=False)
    return annotated, [(_slim(run), result) for run, result in graded]


def warm_worker() -> bool:
    """Imports what grading needs, so the first trace does not pay for it."""
    import attest_otel.adapt
    import attest_otel.export.annotate
    import attest_otel.grade.grader
    import attest_otel.ingest.decode  # noqa: F401

    return True
