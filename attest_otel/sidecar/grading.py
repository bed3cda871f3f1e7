"""Grading released traces: in this process, or offline in worker processes.

One released trace is parsed and decoded once, its runs graded (`pipeline`), the grades
appended to its spans' encodings as bytes (`export.annotate.annotation_bytes`; a trace that
carries an earlier grade is rewritten through messages instead), and the annotated bytes
forwarded; the evaluation log records are encoded as OTLP bytes where the grade is made
(`export.log_records`) and sent by the sidecar's own log forwarder, in batches. The grades
go to the store and the metrics. Offline grading runs in spawned worker processes so the
decode, adapt and annotate work of GenAI spans does not hold the receivers' interpreter
lock; a run that may use the model is graded here, where the model budget lives.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)

import attest_otel.adapt
import attest_otel.export.annotate
import attest_otel.grade.grader
import attest_otel.ingest.decode  # noqa: F401
from attest_otel.content import KEEP, ContentPolicy
from attest_otel.export.annotate import GRADE_MARKS, annotate_spans, annotation_bytes
from attest_otel.export.log_records import log_records
from attest_otel.grade.grader import grade
from attest_otel.ingest.decode import decode_request
from attest_otel.model import CheckResult, Run, Step, ToolCall, shown_score
from attest_otel.pipeline import Reading, grade_traces
from attest_otel.policy import load_policy
from attest_otel.sidecar.buffer import HeldTrace
from attest_otel.sidecar.forward import Forwarder, ForwardItem
from attest_otel.sidecar.gate import ModelGate
from attest_otel.sidecar.stats import SidecarStats
from attest_otel.sidecar.wire import append_to_spans, iter_resource_spans
from attest_otel.store import StoredGrade, Writer

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Graded:
    data: bytes
    runs: list[tuple[Run, CheckResult]] = field(default_factory=list)
    failed: bool = False
    in_worker: bool = False
    logs: list[bytes] = field(default_factory=list)
    """The runs' evaluation log records, encoded (`export.log_records`)."""


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
        store: Writer | None = None,
        pool: ProcessPoolExecutor | None = None,
        emit_after_worker: Callable[[list[tuple[Run, CheckResult]]], None] | None = None,
        content: ContentPolicy = KEEP,
    ) -> None:
        self.content = content
        """What of a run's content the grade events written into its spans carry."""
        self.emit_after_worker = emit_after_worker
        """What is left to emit in this process of the runs a worker graded (and logged): the
        metrics, recorded once per batch (`ToolUseMetrics.record_many`)."""
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
        self.send_logs: Callable[[list[bytes]], None] | None = None
        """Sends a graded trace's evaluation log records; None: log events are off."""

    def grade_run(self, run: Run) -> CheckResult:

        gate = self.gate
        if gate is not None and gate.admit(run):
            with gate.semaphore:
                self.stats.add(model_runs=1)
                return grade(run, judge=gate.judge, appropriate=gate.appropriate)
        return grade(run, judge=None)

    def _grade(self, trace: HeldTrace, original: bytes) -> _Graded:
        """One trace graded in this process."""
        if trace.probe is not None:
            request, decoded = trace.probe
        else:
            request = ExportTraceServiceRequest.FromString(original)
            decoded = decode_request(request, source=f"trace {trace.trace_id_hex}", data=original)
        now_ns = time.time_ns()
        data, runs = grade_decoded(
            request,
            decoded,
            self.policy,
            self.grade_run,
            self.content,
            data=original,
            now_ns=now_ns,
        )
        logs = encode_logs(runs, now_ns, self.content) if self.send_logs is not None else []
        return _Graded(data, runs, logs=logs)

    def __call__(self, trace: HeldTrace) -> None:
        self.grade_batch([trace])

    def grade_batch(self, traces: list[HeldTrace]) -> None:
        """Grades released traces together and sends them on as one forward item.

        Offline, the batch is one task for a grading process (one pickle and one pipe trip
        each way, one wake-up of this process's threads, instead of one per trace), and the
        annotated traces leave as one request, their log records as one more. A trace whose
        grading fails is forwarded as it came, the others graded.
        """
        fresh: list[HeldTrace] = []
        for trace in traces:
            if trace.late and self.regrade is not None:
                self.stats.graded(trace.reason or "late", 0, False)
                self.regrade(trace)
            else:
                fresh.append(trace)
        if not fresh:
            return
        originals = [bytes(trace.data) for trace in fresh]
        results = self._grade_offline(fresh, originals)
        if results is None:
            results = [
                self._grade_safe(trace, original)
                for trace, original in zip(fresh, originals, strict=True)
            ]
        # Stored before it is forwarded: once forwarded, its --buffer-dir record is
        # released, and the store's queue (spooled there too) must already hold the grades.
        if self.store is not None:
            now = time.time_ns()
            for trace, original, graded in zip(fresh, originals, results, strict=True):
                grades = [
                    StoredGrade(
                        trace.trace_id_hex, run.span_id or "", run.agent, now, result.to_dict()
                    )
                    for run, result in graded.runs
                ]
                self.store.put(trace.trace_id_hex, original, trace.spans, grades)
        self.forwarder.offer(
            ForwardItem(
                results[0].data if len(results) == 1 else b"".join(g.data for g in results),
                sum(trace.spans for trace in fresh),
                tuple(record for trace in fresh for record in trace.records),
                mergeable=True,
            )
        )
        logs = [record for graded in results for record in graded.logs]
        if logs and self.send_logs is not None:
            try:
                self.send_logs(logs)
            except Exception:
                log.exception("sending the evaluation log records of a trace failed")
        for trace, original, graded in zip(fresh, originals, results, strict=True):
            trace.probe = None
            self._account(trace, original, graded)
        offline = [one for graded in results if graded.in_worker for one in graded.runs]
        if offline and self.emit_after_worker is not None:
            try:
                self.emit_after_worker(offline)
            except Exception:
                log.exception("recording the metrics of graded runs failed")

    def _grade_offline(
        self, traces: list[HeldTrace], originals: list[bytes]
    ) -> list[_Graded] | None:
        """The batch graded in a grading process; None: grade here (no pool, model checks
        on, or the pool died)."""
        pool = self.pool
        if pool is None or self.gate is not None:
            return None
        try:
            answers = pool.submit(
                grade_batch_in_worker,
                [
                    (original, f"trace {trace.trace_id_hex}")
                    for trace, original in zip(traces, originals, strict=True)
                ],
                self.send_logs is not None,
            ).result()
        except BrokenProcessPool:
            log.error("the grading process died; grading in this process from now on")
            self.pool = None
            return None
        except Exception:
            log.exception("grading failed; forwarding %d trace(s) ungraded", len(traces))
            return [_Graded(original, failed=True) for original in originals]
        results: list[_Graded] = []
        for trace, original, answer in zip(traces, originals, answers, strict=True):
            if isinstance(answer, str):
                log.error(
                    "grading failed; forwarding trace %s ungraded\n%s",
                    trace.trace_id_hex,
                    answer,
                    extra={"trace_id": trace.trace_id_hex, "spans": trace.spans},
                )
                results.append(_Graded(original, failed=True))
            else:
                data, runs, logs = answer
                results.append(_Graded(data, runs, in_worker=True, logs=logs))
        return results

    def _grade_safe(self, trace: HeldTrace, original: bytes) -> _Graded:
        try:
            return self._grade(trace, original)
        except Exception:
            log.exception(
                "grading failed; forwarding trace %s ungraded",
                trace.trace_id_hex,
                extra={"trace_id": trace.trace_id_hex, "spans": trace.spans},
            )
            return _Graded(original, failed=True)

    def _account(self, trace: HeldTrace, original: bytes, graded: _Graded) -> None:
        """Stats, the log line, metrics and what a regrade starts from, for one trace."""
        self.stats.graded(trace.reason or "complete", len(graded.runs), graded.failed)
        for run, result in graded.runs:
            log.info(
                "graded run",
                extra={
                    "trace_id": trace.trace_id_hex,
                    "span_id": run.span_id,
                    "agent": run.agent,
                    "verdict": result.verdict,
                    "score": shown_score(result.score, 3),
                    "calls": len(result.findings),
                    "released": trace.reason,
                },
            )
            if not graded.in_worker and self.emit is not None:
                try:
                    self.emit(run, result)
                except Exception:
                    log.exception("emitting the grade of a run failed")
        if self.remember is not None and not graded.failed:
            self.remember(trace.trace_id_hex, original, graded.runs)


def grade_decoded(
    request: Any,
    decoded: Any,
    policy: Any,
    grade_run: Callable[[Run], CheckResult],
    content: ContentPolicy,
    *,
    data: bytes | None = None,
    now_ns: int | None = None,
) -> tuple[bytes, list[tuple[Run, CheckResult]]]:
    """Runs of a decoded trace, graded (`pipeline`) and written into its spans; the
    annotated bytes. The policy's declared dialects read the spans too.

    Given `data`, the bytes `request` was parsed from, and no earlier grade in them, the
    grades are appended to the spans' encodings (`wire.append_to_spans`): the other spans
    keep their bytes and nothing is serialised. Otherwise the parsed spans are annotated in
    place (replacing an earlier grade) and the request serialised.
    """
    now = time.time_ns() if now_ns is None else now_ns
    graded: list[tuple[Run, CheckResult]] = []
    reading = Reading(policy) if policy is not None else None
    for trace in grade_traces(decoded.spans, decoded.logs, reading, grade_run=grade_run):
        for one in trace.runs:
            graded.append((one.run, one.result))
    if data is not None and not any(mark in data for mark in GRADE_MARKS):
        additions = annotation_bytes(graded, now_ns=now, content=content)
        annotated, _ = append_to_spans(
            data, {bytes.fromhex(span_id): extra for span_id, extra in additions.items()}
        )
        return annotated, graded
    by_id = {span.span_id: span.source for span in decoded.spans}
    for run, result in graded:
        annotate_spans(by_id, run, result, now_ns=now, content=content)
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
    request = ExportTraceServiceRequest.FromString(prior + late)
    decoded = decode_request(request, source=label)
    _, runs = grade_decoded(request, decoded, policy, grade_run, content)
    # Both parts are concatenated ResourceSpans records: the late ones come last.
    keep = sum(1 for _ in iter_resource_spans(late))
    out = ExportTraceServiceRequest()
    if keep:
        out.resource_spans.extend(request.resource_spans[-keep:])
    data: bytes = out.SerializeToString()
    return data, runs


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
    """Runs once in each grading process (spawned: no inherited threads or sockets).

    A grading process sends nothing itself: it returns the annotated trace and the encoded
    evaluation log records, which the receiving process forwards (a concatenation, no
    encoding). Metrics stay in the main process, which serves `/metrics`.

    `nice` (`grading.nice`) lowers this process's CPU priority: where grading and the
    receivers want the same cores, the receivers run first, so a plain span is not delayed
    by grading, and grading takes the CPU they leave (admission paces it by what it clears).
    """
    global _WORKER_POLICY, _WORKER_CONTENT

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _exit_with_parent()
    if nice:
        try:
            os.nice(nice)
        except OSError as e:  # a sandbox that forbids it: grading at the same priority
            log.warning("grading process: cannot lower its CPU priority (%s)", e)
    _WORKER_CONTENT = content
    if policy_path is not None:
        _WORKER_POLICY = load_policy(policy_path)


def _exit_with_parent() -> None:
    """End this grading process as soon as the sidecar is gone, however it died.

    A `kill -9` (the OOM killer, many supervisors) gives the parent no chance to stop its
    pool, and an idle worker would wait on its task queue for ever, keeping multiprocessing's
    resource tracker alive with it. A spawned child holds a sentinel, the read end of a pipe
    whose write end only the parent holds: it turns readable exactly when the parent exits.
    Once every worker is gone the tracker sees EOF on its own pipe and ends too.
    """

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
    )


def grade_in_worker(
    data: bytes, label: str, logs: bool = False
) -> tuple[bytes, list[tuple[Run, CheckResult]], list[bytes]]:
    """Offline grading of one trace's bytes, in a grading process: the annotated bytes,
    the runs (slimmed for the trip back) and, when `logs`, their evaluation log records."""

    request = ExportTraceServiceRequest.FromString(data)
    decoded = decode_request(request, source=label, data=data)
    now_ns = time.time_ns()
    annotated, graded = grade_decoded(
        request,
        decoded,
        _WORKER_POLICY,
        lambda run: grade(run, judge=None),
        _WORKER_CONTENT,
        data=data,
        now_ns=now_ns,
    )
    records = encode_logs(graded, now_ns, _WORKER_CONTENT) if logs else []
    return annotated, [(_slim(run), result) for run, result in graded], records


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


def grade_batch_in_worker(
    items: list[tuple[bytes, str]],
    logs: bool = False,
) -> list[tuple[bytes, list[tuple[Run, CheckResult]], list[bytes]] | str]:
    """`grade_in_worker` for each (bytes, label) of a batch; a trace whose grading raised
    is its formatted exception instead (the others are still graded)."""
    out: list[tuple[bytes, list[tuple[Run, CheckResult]], list[bytes]] | str] = []
    for data, label in items:
        try:
            out.append(grade_in_worker(data, label, logs))
        except Exception:
            out.append(traceback.format_exc())
    return out


def warm_worker() -> bool:
    """Returns once a grading process is up: it has imported this module, and with it all
    that grading needs, so the first trace does not pay for the imports."""
    return True
