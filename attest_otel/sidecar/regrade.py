"""Late spans: the trace graded again with the spans that arrived after it was graded.

A span can reach the sidecar after its run was graded: an export delayed past the grace, a
run that outlived the idle timeout, spans of another process in the same trace. Forwarded
as they came they would be ungraded, and the run's grade would miss them (a tool call that
failed, the final answer). So the buffer holds them as a late trace (`buffer.REASON_LATE`)
and `Regrader` grades the whole trace again: the spans graded before (from the store, where
every graded trace's spans are kept as they arrived; or, with the store off, from a bounded
memory of recent traces) plus the late ones. Then

- the late spans are annotated like any graded span and forwarded;
- each run whose grade changed (or that is new) and whose spans went out before (its agent
  span, or a call it judges) gets an `attest.grade` span in its trace, as `grade --trace-id
  --export` sends for spans that already went out: they cannot be changed any more, a new
  span can join their trace (a run whose spans are all late is annotated in place, like any
  run). It is built by the
  same code (`export.grade_span`) and forwarded with the annotated spans, so it goes where
  they go, through the same queue, retries and durable log;
- the new grades go into the store, replacing the old ones of the same runs.

Late spans change a grade only through the rules, as any span does, but whoever knows a
trace id and an agent span id (both in logs, Jaeger and the report) can send one: a
"successful retry" from any `service.name` turned a stored FAIL into a PASS, silently. So
a regrade that changes a run's verdict says so: the new grade carries
`metadata.regraded` (the verdict and score before, the findings that changed, and who sent
the late spans: their `service.name`, and whether the ingest token vouched for them), the
store keeps it, and a fail that became a pass is a WARNING line and a counter
(`attest.sidecar.runs.passed_by_late_spans`).

The trace is graded again in a grading process when there is one (a multi-agent trace whose
nested run was released first is regraded whole when the outer run's spans come: grading
it here would hold the receivers' interpreter for the whole trace); with model checks on it
is graded here, with the model gate deciding as for any run, so a model check may run again
for it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import (
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)

from attest_otel import semconv
from attest_otel.content import KEEP, ContentPolicy
from attest_otel.export.grade_span import emit_grade_span
from attest_otel.export.otlp_config import default_resource, package_version
from attest_otel.model import CheckResult, Run, shown_score
from attest_otel.sidecar.bounded import InProcessBudget
from attest_otel.sidecar.buffer import HeldTrace, read_shape
from attest_otel.sidecar.forward import Forwarder, ForwardItem
from attest_otel.sidecar.grading import GradingFailed, ProcessPool
from attest_otel.sidecar.grading_worker import encode_logs, grade_again, grade_again_in_worker
from attest_otel.sidecar.shape import service_name
from attest_otel.sidecar.stats import SidecarStats
from attest_otel.sidecar.wire import split_request
from attest_otel.sidecar.workers import Failed
from attest_otel.store import StoredGrade, Writer, part_digest
from attest_otel.store.scrub import scrub_result

__all__ = ["RecentTraces", "Regrader", "grade_span_request"]

log = logging.getLogger(__name__)

RECENT_MAX_BYTES = 64 * 1024 * 1024
"""What the memory of recent traces may hold when the store is off (oldest forgotten)."""

_STORE_WAIT_S = 2.0


@dataclass(slots=True)
class Prior:
    """A graded trace as it was graded: its spans as they arrived, its grades by agent span."""

    data: bytes
    grades: dict[str, dict[str, Any]]
    parts: tuple[str, ...] = ()
    """Digests of the stored parts `data` joins (a shared store's): what a regrade read."""


class RecentTraces:
    """Graded traces kept in memory for regrading when there is no store, up to a byte budget
    (least recently graded forgotten first); a late span of a forgotten trace goes out as it
    came, counted."""

    def __init__(self, max_bytes: int = RECENT_MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self.size = 0
        self._items: OrderedDict[str, Prior] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, trace_id: str, data: bytes, grades: dict[str, dict[str, Any]]) -> None:
        with self._lock:
            old = self._items.pop(trace_id, None)
            if old is not None:
                self.size -= len(old.data)
                data = old.data + data
                grades = {**old.grades, **grades}
            if len(data) > self.max_bytes:
                return
            self._items[trace_id] = Prior(data, grades)
            self.size += len(data)
            while self.size > self.max_bytes:
                _, dropped = self._items.popitem(last=False)
                self.size -= len(dropped.data)

    def get(self, trace_id: str) -> Prior | None:
        with self._lock:
            return self._items.get(trace_id)


class Regrader:
    """Grades a late trace again with what was graded before; never raises."""

    def __init__(
        self,
        *,
        policy: Any,
        grade_run: Callable[..., CheckResult],
        forwarder: Forwarder,
        stats: SidecarStats,
        store: Writer | None,
        content: ContentPolicy = KEEP,
        pool: ProcessPool | None = None,
        send_logs: Callable[[list[bytes]], None] | None = None,
        authenticated: bool = False,
        here: InProcessBudget | None = None,
    ) -> None:
        """`here`: the time budget of grading in this process, when there is no grading
        process (`bounded`); None: unbounded."""
        self.policy = policy
        self.grade_run = grade_run
        self.here = here
        self.forwarder = forwarder
        self.stats = stats
        self.store = store
        self.content = content
        # With `content: drop` the store keeps no spans, so the spans graded before are
        # remembered here (in memory, never on disk), as without a store.
        self.recent: RecentTraces | None = (
            RecentTraces() if store is None or content.mode == "drop" else None
        )
        self._spans = _GradeSpans(content)
        self.authenticated = authenticated
        """Whether senders present the ingest token (else the late spans' sender is only
        the `service.name` they declare)."""
        self.pool = pool
        """The grading processes (`grading_worker.grade_again_in_worker`); None: grade here."""
        self.send_logs = send_logs
        """Sends the evaluation log records of the runs a regrade graded anew; None: log
        events are off. A trace held first from its log records (the logs pipeline is often
        faster) is graded through here when its spans come, so without them its runs would
        never have a `gen_ai.evaluation.result` event."""

    def remember(self, trace_id: str, data: bytes, runs: list[tuple[Run, CheckResult]]) -> None:
        """Called for every graded trace: without a store, its spans are kept for a while."""
        if self.recent is not None:
            self.recent.put(trace_id, data, {r.span_id or "": g.to_dict() for r, g in runs})

    def prior(self, trace_id: str) -> Prior | None:
        if self.store is None or self.recent is not None:
            return self.recent.get(trace_id) if self.recent is not None else None
        pending_for = getattr(self.store, "pending_for", None)
        if pending_for is not None:  # a shared store: what is in it, and what waits for it
            return self._shared_prior(trace_id, pending_for)
        if not self.store.flush(_STORE_WAIT_S):
            log.warning(
                "store: earlier writes still queued; regrading trace %s from what is in", trace_id
            )
        stored = self.store.store.get_trace(trace_id)
        if stored is None:
            return None
        return Prior(stored.data, {g.span_id: g.result for g in stored.grades}, stored.parts)

    def _shared_prior(self, trace_id: str, pending_for: Any) -> Prior | None:
        """The trace as the shared store holds it plus the writes still queued for it (read
        first: a write committed meanwhile is then in both, and its part is joined once).
        While the database is away only the queued writes are known."""
        assert self.store is not None
        pending: list[tuple[bytes, tuple[StoredGrade, ...]]] = pending_for(trace_id)
        stored = None
        if getattr(self.store, "reachable", True):
            try:
                stored = self.store.store.get_trace(trace_id)
            except Exception as e:  # unreachable now: the queued writes are what is known
                log.warning(
                    "store: cannot read trace %s (%s); regrading from the writes still queued",
                    trace_id,
                    " ".join(str(e).split()),
                )
        if stored is None and not pending:
            return None
        data = stored.data if stored is not None else b""
        parts = stored.parts if stored is not None else ()
        grades = {g.span_id: g.result for g in stored.grades} if stored is not None else {}
        for chunk, queued in pending:
            digest = part_digest(chunk) if chunk else None
            if digest is not None and digest not in parts:
                data += chunk
                parts = (*parts, digest)
            grades.update({g.span_id: g.result for g in queued})
        return Prior(data, grades, parts)

    def __call__(self, trace: HeldTrace) -> None:
        late = bytes(trace.data)
        trace_id = trace.trace_id_hex
        try:
            prior = self.prior(trace_id)
            if prior is None:
                log.warning(
                    "late spans of trace %s, whose graded spans are no longer kept "
                    "(store off or pruned): forwarded as they came",
                    trace_id,
                    extra={"trace_id": trace_id, "spans": trace.spans},
                )
                self._forward(late, trace)
                self.stats.add(late_ungraded=trace.spans)
                return
            data, changed, runs = self._regrade(trace_id, prior, late)
            self._flips(trace_id, prior, changed, late)
        except GradingFailed as e:
            log.warning(
                "regrading failed (%s); forwarding the late spans of trace %s ungraded",
                e.failed.detail.strip().splitlines()[-1],
                trace_id,
                extra={"trace_id": trace_id, "spans": trace.spans, "reason": e.failed.reason},
            )
            self._forward(late, trace)
            self.stats.add(late_ungraded=trace.spans, grade_failures=1)
            self.stats.ungraded(e.failed.reason)
            return
        except Exception:
            log.exception(
                "regrading failed; forwarding the late spans of trace %s ungraded",
                trace_id,
                extra={"trace_id": trace_id, "spans": trace.spans},
            )
            self._forward(late, trace)
            self.stats.add(late_ungraded=trace.spans, grade_failures=1)
            return
        now = time.time_ns()
        grades = [
            StoredGrade(trace_id, run.span_id or "", run.agent, now, result.to_dict())
            for run, result in changed
        ]
        if self.store is not None:  # before forwarding, as `grading.TraceGrader` does
            self.store.put(trace_id, late, trace.spans, grades, basis=prior.parts, runs=runs)
        if self.recent is not None:
            self.recent.put(trace_id, late, {g.span_id: g.result for g in grades})
        self._forward(data, trace)
        self._changed(trace_id, changed, late, trace.spans, trace.reason)
        if changed and self.send_logs is not None:
            try:
                self.send_logs(encode_logs(changed, now, self.content))
            except Exception:
                log.exception("sending the evaluation log records of trace %s failed", trace_id)

    def _flips(
        self,
        trace_id: str,
        prior: Prior,
        changed: list[tuple[Run, CheckResult]],
        late: bytes,
    ) -> None:
        """Marks each run whose verdict the late spans changed (`metadata.regraded`), and
        says it when a failing run now passes."""
        senders = sorted(late_senders(late))
        vouched = "ingest token" if self.authenticated else "no token: self-declared"
        for run, result in changed:
            before = prior.grades.get(run.span_id or "")
            if not before or before.get("verdict") == result.verdict:
                continue
            what = findings_changed(before.get("findings") or [], result)
            note = {
                "previous_verdict": before.get("verdict"),
                "previous_score": before.get("score"),
                "findings_changed": what,
                "late_spans_from": senders,
                "sender_authenticated": self.authenticated,
            }
            result.metadata["regraded"] = note
            if before.get("verdict") == "fail" and result.verdict == "pass":
                self.stats.add(runs_passed_by_late=1)
                log.warning(
                    "late spans turned run %s of trace %s from FAIL into PASS (%s); sent as "
                    "service.name %s (%s)",
                    run.span_id,
                    trace_id,
                    "; ".join(what) or "same calls",
                    ", ".join(senders) or "(none)",
                    vouched,
                    extra={"trace_id": trace_id, "span_id": run.span_id, "agent": run.agent},
                )

    def refresh(self, trace_id: str) -> None:
        """Grades a trace again from every part the shared store holds; never raises.

        The shared store's writer asks for it when a write of this sidecar missed a part
        another sidecar stored (the trace's spans reached both): the union is graded, the
        runs whose grade changed get an `attest.grade` span, and the new grades replace
        the partial ones (grades of runs the union no longer has, such as a run seen
        without its agent span, are deleted). Without spans in the store (`content:
        drop`) there is no union to grade.
        """
        if self.store is None or self.recent is not None:
            return
        try:
            prior = self.prior(trace_id)
            if prior is None or not prior.data:
                return
            _, changed, runs = self._regrade(trace_id, prior, b"")
        except Exception:
            log.exception("grading trace %s again from the shared store failed", trace_id)
            return
        now = time.time_ns()
        grades = [
            StoredGrade(trace_id, run.span_id or "", run.agent, now, result.to_dict())
            for run, result in changed
        ]
        self.store.put(trace_id, b"", 0, grades, basis=prior.parts, runs=runs)
        self._changed(trace_id, changed, b"", 0, "union")

    def _changed(
        self,
        trace_id: str,
        changed: list[tuple[Run, CheckResult]],
        late: bytes,
        late_spans: int,
        reason: str | None,
    ) -> None:
        """The `attest.grade` spans of regraded runs whose spans went out before; counts."""
        stale = [(run, result) for run, result in changed if not _within(run, result, late)]
        if stale:
            try:
                request, count = self._spans.encode(stale)
                self.forwarder.offer(ForwardItem(request, count, (), mergeable=True))
            except Exception:
                log.exception("could not build the attest.grade spans of trace %s", trace_id)
        self.stats.add(traces_regraded=1, runs_regraded=len(changed))
        for run, result in changed:
            log.info(
                "graded run again",
                extra={
                    "trace_id": trace_id,
                    "span_id": run.span_id,
                    "agent": run.agent,
                    "verdict": result.verdict,
                    "score": shown_score(result.score, 3),
                    "late_spans": late_spans,
                    "released": reason,
                },
            )

    def _forward(self, data: bytes, trace: HeldTrace) -> None:
        self.forwarder.offer(ForwardItem(data, trace.spans, tuple(trace.records), mergeable=True))

    def _regrade(
        self, trace_id: str, prior: Prior, late: bytes
    ) -> tuple[bytes, list[tuple[Run, CheckResult]], list[str]]:
        """(the late spans annotated, the runs whose grade is new or changed, the agent
        span id of every run found)."""

        data, runs = self._grade_again(prior.data, late, f"trace {trace_id}")
        # The store keeps grades as the content policy lets it: compare like with like.
        changed = [
            (run, result)
            for run, result in runs
            if prior.grades.get(run.span_id or "")
            not in (result.to_dict(), scrub_result(result.to_dict(), self.content))
        ]
        return data, changed, [run.span_id or "" for run, _ in runs]

    def _grade_again(
        self, prior: bytes, late: bytes, label: str
    ) -> tuple[bytes, list[tuple[Run, CheckResult]]]:
        """`grading_worker.grade_again` in a grading process when there is one, else here."""
        pool = self.pool
        if pool is not None and pool.running:
            # Never again here when the process failed: what stalled it would stall us.
            (answer,) = pool.map(grade_again_in_worker, [(prior, late, label)], [label])
            if isinstance(answer, Failed):
                raise GradingFailed(answer)
            data, runs = answer
            return data, runs
        here = self.here
        if here is None:
            return grade_again(prior, late, label, self.policy, self.grade_run, self.content)
        got = here.run(
            lambda gave_up: grade_again(
                prior, late, label, self.policy, lambda r: self.grade_run(r, gave_up), self.content
            )
        )
        if isinstance(got, Failed):
            raise GradingFailed(got)
        return got


def late_senders(late: bytes) -> set[str]:
    """The `service.name` of every resource the late spans came under."""
    if not late:
        return set()
    return {service_name(group.resource_fields) or "(unnamed)" for group in split_request(late)}


def findings_changed(before: list[Any], result: CheckResult) -> list[str]:
    """What the regrade changed, call by call: `step subject: old -> new` (or `new`/`gone`)."""

    def key(f: Any) -> tuple[Any, Any]:
        return f.get("step"), f.get("subject")

    old = {key(f): f.get("verdict") for f in before if isinstance(f, dict)}
    new = {(f.step, f.subject): f.verdict for f in result.findings}
    out = []
    for k in sorted(set(old) | set(new), key=lambda k: k[0] if isinstance(k[0], int) else -1):
        was, now = old.get(k), new.get(k)
        if was != now:
            out.append(f"step {k[0]} {k[1]}: {was or 'new'} -> {now or 'gone'}")
    return out


def _within(run: Run, result: CheckResult, late: bytes) -> bool:
    """Whether every span the grade is written onto (the agent span, the judged calls) is
    among the late spans, so the in-place annotation says it all."""
    ids = {s.span_id.hex() for s in read_shape(late)}
    wanted = {run.span_id} | {f.metadata.get("span_id") for f in result.findings}
    return all(i in ids for i in wanted if i)


class _GradeSpans:
    """`export.grade_span` through an SDK tracer whose spans are collected, not exported:
    the sidecar forwards them itself, encoded as OTLP."""

    def __init__(self, content: ContentPolicy) -> None:
        self.content = content
        self._lock = threading.Lock()
        self._tracer: Any = None
        self._collected: list[Any] = []

    def _setup(self) -> Any:

        collected = self._collected

        class Collect(SpanExporter):
            def export(self, spans: Any) -> SpanExportResult:
                collected.extend(spans)
                return SpanExportResult.SUCCESS

        provider = TracerProvider(
            resource=default_resource(),
            shutdown_on_exit=False,
            span_limits=SpanLimits(max_events=1024, max_links=1024),
        )
        provider.add_span_processor(SimpleSpanProcessor(Collect()))
        return provider.get_tracer(semconv.INSTRUMENTATION_SCOPE, package_version())

    def encode(self, runs: list[tuple[Run, CheckResult]]) -> tuple[bytes, int]:
        """One OTLP request with an `attest.grade` span per run; (bytes, span count)."""

        with self._lock:
            if self._tracer is None:
                self._tracer = self._setup()
            self._collected.clear()
            for run, result in runs:
                emit_grade_span(self._tracer, run, result, content=self.content)
            spans = list(self._collected)
            self._collected.clear()
        data: bytes = encode_spans(spans).SerializeToString()
        return data, len(spans)


def grade_span_request(
    runs: list[tuple[Run, CheckResult]], content: ContentPolicy = KEEP
) -> tuple[bytes, int]:
    """The `attest.grade` spans of `runs` as one OTLP request (bytes, span count)."""
    return _GradeSpans(content).encode(runs)
