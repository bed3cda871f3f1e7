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
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import attest_otel.adapt
import attest_otel.export.annotate
import attest_otel.grade.grader
import attest_otel.ingest.decode  # noqa: F401
from attest_otel import semconv
from attest_otel.content import KEEP, ContentPolicy
from attest_otel.export.annotate import GRADE_MARKS
from attest_otel.export.otlp_bytes import key_values
from attest_otel.ingest.decode import decode_request
from attest_otel.model import CheckResult, Run, shown_score
from attest_otel.sidecar.bounded import InProcessBudget, ungraded_result
from attest_otel.sidecar.bounded import why as _why
from attest_otel.sidecar.buffer import HeldTrace
from attest_otel.sidecar.forward import Forwarder, ForwardItem
from attest_otel.sidecar.gate import ModelGate, run_grader
from attest_otel.sidecar.grading_worker import (
    decode_logs,
    encode_logs,
    from_light,
    grade_decoded,
    grade_in_worker,
)
from attest_otel.sidecar.quarantine import Quarantine
from attest_otel.sidecar.stats import SidecarStats
from attest_otel.sidecar.wire import append_to_spans
from attest_otel.sidecar.workers import Failed
from attest_otel.store import StoredGrade, Writer
from attest_otel.store.blob import with_logs

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Graded:
    data: bytes
    runs: list[tuple[Run, CheckResult]] = field(default_factory=list)
    failed: bool = False
    in_worker: bool = False
    logs: list[bytes] = field(default_factory=list)
    """The runs' evaluation log records, encoded (`export.log_records`)."""
    ungraded: Failed | None = None
    """Why the trace goes on ungraded and flagged (`TraceGrader._flag`)."""
    encoded: list[str] | None = None
    """Each run's result as the store keeps it, encoded by the grading process (its runs and
    results then carry only what the metrics and the log line read, `Light`); None: encode
    here."""


class GradingFailed(Exception):
    """A grading process did not answer for a trace (`workers.Failed`)."""

    def __init__(self, failed: Failed) -> None:
        super().__init__(failed.detail)
        self.failed = failed


class ProcessPool(Protocol):
    """Grading processes (`grading_pool.OfflineGrading`), asked whether they run now:
    when they could not start, grading goes on in this process."""

    @property
    def running(self) -> bool: ...

    def map(
        self, fn: Callable[..., Any], items: Sequence[tuple[Any, ...]], labels: Sequence[str]
    ) -> list[Any]: ...

    def oldest_s(self) -> float: ...


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
        pool: ProcessPool | None = None,
        emit_after_worker: Callable[[list[tuple[Run, CheckResult]]], None] | None = None,
        content: ContentPolicy = KEEP,
        here: InProcessBudget | None = None,
        regrade: Callable[[HeldTrace], None] | None = None,
        remember: Callable[[str, bytes, list[tuple[Run, CheckResult]]], None] | None = None,
        send_logs: Callable[[list[bytes]], None] | None = None,
        log_forwarder: Forwarder | None = None,
        quarantine: Quarantine | None = None,
        saw_agent: Callable[[str | None], None] | None = None,
    ) -> None:
        """`here`: the time budget of grading in this process (`bounded`; None: 10 s)."""
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
        self.regrade = regrade
        """Grades a late trace (spans that arrived after their trace was graded) again with
        what was graded before (`regrade.Regrader`)."""
        self.remember = remember
        """Told every graded trace (what a later regrade starts from when there is no store)."""
        self.send_logs = send_logs
        """Sends a graded trace's evaluation log records; None: log events are off."""
        self.log_forwarder = log_forwarder
        """Where the log records held with a trace go, after its spans."""
        self.quarantine = quarantine
        """Traces that broke grading: forwarded ungraded, never graded again."""
        self.saw_agent = saw_agent
        """Told each graded run's agent (`policy_watch.PolicyWatch.saw`)."""
        self._grade_run = run_grader(gate, stats)
        self.here = here if here is not None else InProcessBudget(10.0)
        """The time budget of grading in this process (`bounded`)."""

    def stalled_s(self) -> float:
        """How long the longest trace in grading has taken so far: in a grading process
        (killed at the budget) or in this one (which cannot be stopped: /readyz says so)."""
        pool = self.pool
        # With model checks, the model's own latency is not a stall.
        own = self.here.oldest_s() if self.gate is None else 0.0
        return max(own, pool.oldest_s() if pool is not None else 0.0)

    def grade_run(self, run: Run, abandoned: threading.Event | None = None) -> CheckResult:
        """One run graded here (`gate.run_grader`)."""
        return self._grade_run(run, abandoned)

    def grade_run_bounded(self, run: Run) -> CheckResult:
        """`grade_run` within the budget of grading here (the Grader API's GradeRun); past
        it, a `review` result saying why (never a blind pass)."""
        answer = self.here.run(lambda gave_up: self.grade_run(run, gave_up))
        if isinstance(answer, Failed):
            self.stats.ungraded(answer.reason)
            log.warning("a GradeRun call answered review, not graded: %s", _why(answer))
            return ungraded_result(answer)
        return answer

    def _grade(
        self, trace: HeldTrace, original: bytes, abandoned: threading.Event | None = None
    ) -> _Graded:
        """One trace graded in this process."""
        if trace.probe is not None:
            decoded = trace.probe
        else:
            decoded = decode_request(original, source=f"trace {trace.trace_id_hex}", checked=True)
        label = f"trace {trace.trace_id_hex}"
        decoded.logs = decoded.logs + decode_logs(bytes(trace.logs), label)
        now_ns = time.time_ns()
        data, runs = grade_decoded(
            None,
            decoded,
            self.policy,
            lambda run: self.grade_run(run, abandoned),
            self.content,
            data=original,
            now_ns=now_ns,
            gaps=trace.gaps,
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
        quarantined: dict[int, Failed] = {}
        for trace in traces:
            why = self.quarantine.reason(trace.trace_id_hex) if self.quarantine else None
            if why is not None:
                quarantined[len(fresh)] = Failed("quarantined", f"quarantined: {why}")
                fresh.append(trace)
            elif trace.late and self.regrade is not None:
                self.stats.graded(trace.reason or "late", 0, False)
                self.regrade(trace)
                self.forward_logs([trace])
            else:
                fresh.append(trace)
        if not fresh:
            return
        originals = [bytes(trace.data) for trace in fresh]
        todo = [i for i in range(len(fresh)) if i not in quarantined]
        done = self._grade_offline([fresh[i] for i in todo], [originals[i] for i in todo])
        if done is None:
            done = [self._grade_safe(fresh[i], originals[i]) for i in todo]
        by_index = dict(zip(todo, done, strict=True))
        results = [
            by_index[i]
            if i in by_index
            else _Graded(originals[i], failed=True, ungraded=quarantined[i])
            for i in range(len(fresh))
        ]
        for trace, original, graded in zip(fresh, originals, results, strict=True):
            if graded.ungraded is not None:
                self._flag(trace, original, graded, graded.ungraded)
        # Stored before it is forwarded: once forwarded, its --buffer-dir record is
        # released, and the store's queue (spooled there too) must already hold the grades.
        if self.store is not None:
            now = time.time_ns()
            for trace, original, graded in zip(fresh, originals, results, strict=True):
                grades = _stored_grades(trace.trace_id_hex, now, graded)
                if graded.ungraded is not None:
                    grades = _ungraded_grades(trace, now, graded.ungraded)
                # The log records go with the spans when content is kept whole; under a
                # content policy only the spans are stored (the scrub reads spans only).
                keep_logs = self.content.mode == "keep"
                stored = with_logs(original, bytes(trace.logs)) if keep_logs else original
                self.store.put(trace.trace_id_hex, stored, trace.spans, grades)
        self.forwarder.offer(
            ForwardItem(
                results[0].data if len(results) == 1 else b"".join(g.data for g in results),
                sum(trace.spans for trace in fresh),
                tuple(record for trace in fresh for record in trace.records),
                mergeable=True,
            )
        )
        self.forward_logs(fresh)
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
        """The batch graded in grading processes, each trace within the budget; None: grade
        here (no processes, or model checks on)."""
        pool = self.pool
        if pool is None or not pool.running or self.gate is not None:
            return None
        if not traces:
            return []
        logs = self.send_logs is not None
        # What a regrade starts from without a store wants each run's whole result, and a
        # content policy scrubs the dict; else the results come encoded for the store, and
        # light (`Light`).
        encode = self.remember is None and self.content.mode == "keep"
        answers = pool.map(
            grade_in_worker,
            [
                (
                    original,
                    f"trace {trace.trace_id_hex}",
                    logs,
                    bytes(trace.logs),
                    list(trace.gaps),
                    encode,
                )
                for trace, original in zip(traces, originals, strict=True)
            ],
            [trace.trace_id_hex for trace in traces],
        )
        results: list[_Graded] = []
        for original, answer in zip(originals, answers, strict=True):
            if isinstance(answer, Failed):
                results.append(_Graded(original, failed=True, in_worker=True, ungraded=answer))
            else:
                data, runs, records, light = answer
                encoded = None
                if light is not None:  # encoded for the store, and light
                    runs = [from_light(one) for _, one in light]
                    encoded = [text for text, _ in light]
                results.append(_Graded(data, runs, in_worker=True, logs=records, encoded=encoded))
        return results

    def _flag(self, trace: HeldTrace, original: bytes, graded: _Graded, failed: Failed) -> None:
        """A trace that goes on ungraded: its agent spans say why (`attest.tool_use.ungraded`,
        verdict review), it is counted by reason and logged once, and a trace that broke a
        grading process is quarantined, so a replay of the buffer dir forwards it ungraded
        instead of grading it into the same stall."""
        why = _why(failed)
        self.stats.ungraded(failed.reason)
        # A grading process the trace broke; not a budget kept here, which a slow model
        # (not the trace) may have run out.
        broke = failed.reason in ("time", "memory", "died") and graded.in_worker
        if broke and self.quarantine is not None:
            self.quarantine.broke(trace.trace_id_hex, why)
        log.warning(
            "trace %s forwarded ungraded, its runs flagged for review: %s",
            trace.trace_id_hex,
            why,
            extra={"trace_id": trace.trace_id_hex, "spans": trace.spans, "reason": failed.reason},
        )
        if failed.reason == "error" and failed.detail.strip():
            log.debug("grading error of trace %s\n%s", trace.trace_id_hex, failed.detail)
        mark = key_values(
            0x4A,
            {
                semconv.ATTEST_TOOL_USE_VERDICT: "review",
                semconv.ATTEST_TOOL_USE_UNGRADED: why,
            },
        )
        if trace.agents and not any(m in original for m in GRADE_MARKS):
            try:
                graded.data, _ = append_to_spans(original, dict.fromkeys(trace.agents, mark))
            except Exception:  # the bytes as they came, rather than none
                log.exception("could not flag the agent spans of trace %s", trace.trace_id_hex)
                graded.data = original
        else:
            graded.data = original

    def forward_logs(self, traces: list[HeldTrace]) -> None:
        """The log records held with these traces, sent on after their spans."""
        forwarder = self.log_forwarder
        held = [trace for trace in traces if trace.log_count]
        if forwarder is None or not held:
            return
        forwarder.offer(
            ForwardItem(
                b"".join(bytes(trace.logs) for trace in held),
                sum(trace.log_count for trace in held),
                tuple(record for trace in held for record in trace.log_wal),
                mergeable=True,
            )
        )

    def forward_ungraded(self, traces: list[HeldTrace]) -> None:
        """Traces sent on as they came (too large to grade, or grading shut down): spans,
        then their log records."""
        for trace in traces:
            self.forwarder.offer(ForwardItem(bytes(trace.data), trace.spans, tuple(trace.records)))
        self.forward_logs(traces)

    def _grade_safe(self, trace: HeldTrace, original: bytes) -> _Graded:
        """Within the budget of grading here (`bounded`); past it, or on an error, the
        trace goes on ungraded (logged once by `_flag`)."""
        answer = self.here.run(lambda gave_up: self._grade(trace, original, gave_up))
        if isinstance(answer, Failed):
            return _Graded(original, failed=True, ungraded=answer)
        return answer

    def _account(self, trace: HeldTrace, original: bytes, graded: _Graded) -> None:
        """Stats, the log line, metrics and what a regrade starts from, for one trace."""
        self.stats.graded(trace.reason or "complete", len(graded.runs), graded.failed)
        for run, result in graded.runs:
            if self.saw_agent is not None:
                self.saw_agent(run.agent)
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
                    "log_records": trace.log_count,
                    "gaps": "; ".join(run.gaps),
                },
            )
            if not graded.in_worker and self.emit is not None:
                try:
                    self.emit(run, result)
                except Exception:
                    log.exception("emitting the grade of a run failed")
        if self.remember is not None and not graded.failed:
            self.remember(trace.trace_id_hex, with_logs(original, bytes(trace.logs)), graded.runs)


def _stored_grades(trace_id: str, now_ns: int, graded: _Graded) -> list[StoredGrade]:
    """What the store keeps of a graded trace's runs: each result, as encoded by the grading
    process when it was (`_Graded.encoded`), else as its dict."""
    if graded.encoded is None:
        return [
            StoredGrade(trace_id, run.span_id or "", run.agent, now_ns, result.to_dict())
            for run, result in graded.runs
        ]
    return [
        StoredGrade(
            trace_id,
            run.span_id or "",
            run.agent,
            now_ns,
            encoded=text,
            verdict=result.verdict,
            score=result.score,
        )
        for (run, result), text in zip(graded.runs, graded.encoded, strict=True)
    ]


def _ungraded_grades(trace: HeldTrace, now_ns: int, failed: Failed) -> list[StoredGrade]:
    """What the store keeps of a trace forwarded ungraded: a `review` grade per agent span
    the probe found (one for the trace when it found none) saying why, so a stored trace
    never reads as graded and clean."""
    result = ungraded_result(failed).to_dict()
    spans = sorted(agent.hex() for agent in trace.agents) or [""]
    return [StoredGrade(trace.trace_id_hex, span, None, now_ns, result) for span in spans]
