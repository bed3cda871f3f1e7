"""`attest-otel serve`: receivers -> buffer -> adapt -> grade -> annotate -> forward.

    OTLP gRPC / HTTP ──► Pipeline.accept ──► [durable log, fsync] ──► answer the sender
                              │
                              ├── no GenAI trace in it ──────────────► Forwarder (same bytes)
                              └── spans of GenAI traces ──► TraceBuffer
                                      (agent span + grace | idle | limits)
                                                   │
                                        grading pool (threads)
                               decode ► runs_from_spans ► grade ► annotate_spans
                                                   │
                               Forwarder (annotated) + store + log events / metrics

The sender is answered as soon as its spans are held (the Collector's exporter gives up
after 5 s; grading may take longer). Nothing on this path raises into a receiver: a
request that cannot be parsed is refused with the protocol's "bad data" answer, a trace
that cannot be graded is forwarded ungraded (counted and logged), and a full queue answers
"try later" so the sender keeps the data.

`build_service(config)` is the factory (every part is built from the config and nothing
else); `Service.start()` / `Service.shutdown(deadline_s)` the lifecycle. `shutdown` stops
accepting, grades what is held, forwards and flushes within the deadline.
"""

from __future__ import annotations

import collections
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Any

from attest_otel.export.results import ContentPolicy, set_content_policy
from attest_otel.model import CheckResult, Run, Step, ToolCall
from attest_otel.sidecar.buffer import BufferLimits, HeldTrace, TraceBuffer
from attest_otel.sidecar.config import ServiceConfig, read_token
from attest_otel.sidecar.forward import Forwarder, ForwardItem, ForwardSettings
from attest_otel.sidecar.receivers import (
    OK,
    GrpcReceiver,
    HttpReceiver,
    Outcome,
    TlsFiles,
    TokenCheck,
    exposure_warning,
)
from attest_otel.sidecar.wal import DurableLog
from attest_otel.sidecar.wire import (
    GENAI_KEY_BYTES,
    ScopeGroup,
    WireError,
    encode_groups,
    is_genai_name,
    split_request,
)
from attest_otel.store import StoredGrade, StoreWriter, TraceStore

__all__ = [
    "METRICS",
    "ModelGate",
    "Pipeline",
    "Service",
    "SidecarStats",
    "TraceGrader",
    "build_service",
]

log = logging.getLogger(__name__)

# --- self-telemetry --------------------------------------------------------------------------

METRICS: dict[str, tuple[str, str, str]] = {
    # name: (kind, unit, description); kind "counter" (monotonic) or "gauge"
    "attest.sidecar.spans.received": ("counter", "{span}", "Spans accepted by the receivers."),
    "attest.sidecar.spans.forwarded": ("counter", "{span}", "Spans delivered downstream."),
    "attest.sidecar.spans.late": (
        "counter", "{span}", "Spans that arrived after their trace was graded (sent as is)."),
    "attest.sidecar.spans.dropped": (
        "counter", "{span}", "Spans given up on, by reason (refused, shutdown, error)."),
    "attest.sidecar.spans.held": ("gauge", "{span}", "Spans held in the trace buffer now."),
    "attest.sidecar.traces.held": ("gauge", "{trace}", "Traces held in the trace buffer now."),
    "attest.sidecar.traces.graded": (
        "counter", "{trace}", "Traces graded, by why they were released "
        "(complete, idle, limit, shutdown)."),
    "attest.sidecar.grade.failures": (
        "counter", "{trace}", "Traces forwarded ungraded because grading failed."),
    "attest.sidecar.queue.spans": ("gauge", "{span}", "Spans queued for forwarding."),
    "attest.sidecar.queue.size": ("gauge", "By", "Bytes queued for forwarding."),
    "attest.sidecar.forward.retries": ("counter", "{retry}", "Forwarding attempts retried."),
    "attest.sidecar.requests.rejected": (
        "counter", "{request}", "Requests refused, by reason (queue_full, malformed, "
        "too_large, unsupported_media_type, length_required, shutting_down)."),
}
"""The sidecar's own metrics (through the same meter provider / Prometheus endpoint as the
grade metrics). Prometheus names: dots -> underscores, `_total` on counters."""


class SidecarStats:
    """The counters behind the self-metrics, also read by tests and the shutdown log."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.spans_received = 0
        self.spans_held = 0
        self.spans_passed = 0
        self.spans_late = 0
        self.requests = 0
        self.traces_graded: collections.Counter[str] = collections.Counter()
        self.runs_graded = 0
        self.grade_failures = 0
        self.rejections: collections.Counter[str] = collections.Counter()
        self.model_runs = 0
        self.model_over_budget = 0
        self.grading_spans = 0
        """Spans of traces handed to the grading pool and not yet done."""

    def add(self, **counts: int) -> None:
        with self._lock:
            for key, value in counts.items():
                setattr(self, key, getattr(self, key) + value)

    def reject(self, reason: str) -> None:
        with self._lock:
            self.rejections[reason] += 1

    def graded(self, reason: str, runs: int, failed: bool) -> None:
        with self._lock:
            self.traces_graded[reason] += 1
            self.runs_graded += runs
            self.grade_failures += failed


def register_metrics(meter: Any, service: Service) -> None:
    """Observable instruments over the counters: nothing on the hot path calls the SDK."""
    from opentelemetry.metrics import CallbackOptions, Observation

    stats = service.stats
    forwarder = service.forwarder
    buffer = service.buffer

    def one(value: Callable[[], float]) -> Callable[[CallbackOptions], Iterable[Observation]]:
        return lambda _options: [Observation(value())]

    def by(
        items: Callable[[], Iterable[tuple[str, int]]], key: str
    ) -> Callable[[CallbackOptions], Iterable[Observation]]:
        return lambda _options: [Observation(v, {key: k}) for k, v in items()]

    callbacks: dict[str, Callable[[CallbackOptions], Iterable[Observation]]] = {
        "attest.sidecar.spans.received": one(lambda: stats.spans_received),
        "attest.sidecar.spans.forwarded": one(lambda: forwarder.stats.spans_forwarded),
        "attest.sidecar.spans.late": one(lambda: stats.spans_late),
        "attest.sidecar.spans.dropped": by(lambda: dict(forwarder.stats.dropped).items(),
                                           "reason"),
        "attest.sidecar.spans.held": one(lambda: buffer.held_spans),
        "attest.sidecar.traces.held": one(lambda: buffer.held_traces),
        "attest.sidecar.traces.graded": by(lambda: dict(stats.traces_graded).items(), "reason"),
        "attest.sidecar.grade.failures": one(lambda: stats.grade_failures),
        "attest.sidecar.queue.spans": one(lambda: forwarder.queued_spans),
        "attest.sidecar.queue.size": one(lambda: forwarder.queued_bytes),
        "attest.sidecar.forward.retries": one(lambda: forwarder.stats.retries),
        "attest.sidecar.requests.rejected": by(lambda: dict(stats.rejections).items(),
                                               "reason"),
    }
    for name, (kind, unit, description) in METRICS.items():
        callback = callbacks[name]
        if kind == "counter":
            meter.create_observable_counter(name, [callback], unit=unit, description=description)
        else:
            meter.create_observable_gauge(name, [callback], unit=unit, description=description)


# --- model checks ------------------------------------------------------------------------------


class ModelGate:
    """Whether a run may use the model: sampled by trace id, within the per-minute budget.

    The sample is taken on the trace id as OpenTelemetry's TraceIdRatioBased sampler does
    (its low 64 bits against rate x 2^64), so every run of a trace is treated alike and a
    trace sampled by the SDK at rate r is sampled here at any rate >= r. The budget counts
    model calls: a run is admitted only if the calls it would make (its unrecovered errors,
    plus one per call when `appropriate` is on) fit in what is left of the last minute;
    a run that does not fit is graded offline (counted).
    """

    def __init__(
        self,
        judge: Any,
        *,
        sample_rate: float,
        calls_per_minute: int,
        max_concurrency: int,
        appropriate: bool,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.judge = judge
        self.sample_rate = sample_rate
        self.calls_per_minute = calls_per_minute
        self.appropriate = appropriate
        self.semaphore = threading.BoundedSemaphore(max_concurrency)
        self._clock = clock
        self._lock = threading.Lock()
        self._window: collections.deque[tuple[float, int]] = collections.deque()
        self._used = 0
        self.over_budget = 0
        self.admitted = 0

    def sampled(self, trace_id: str | None) -> bool:
        if self.sample_rate >= 1.0 or not trace_id:
            return self.sample_rate > 0.0
        try:
            low = int(trace_id[-16:], 16)
        except ValueError:
            return False
        return low < int(self.sample_rate * (1 << 64))

    def estimate(self, run: Run) -> int:
        from attest_otel.grade import rules

        facts = rules.assess(run)
        calls = 0
        if (run.final_answer or "").strip():
            calls += sum(1 for f in facts if rules.needs_answer_check(f))
        if self.appropriate:
            calls += len(facts)
        return calls

    def admit(self, run: Run) -> bool:
        if not self.sampled(run.trace_id):
            return False
        calls = self.estimate(run)
        if calls == 0:
            return False
        with self._lock:
            now = self._clock()
            while self._window and now - self._window[0][0] >= 60.0:
                self._used -= self._window.popleft()[1]
            if self._used + calls > self.calls_per_minute:
                self.over_budget += 1
                return False
            self._window.append((now, calls))
            self._used += calls
            self.admitted += 1
        return True


# --- grading -----------------------------------------------------------------------------------


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
    ) -> None:
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
        data, runs = grade_decoded(request, decoded, self.policy, self.grade_run)
        return _Graded(data, runs)

    def __call__(self, trace: HeldTrace) -> None:
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
        if self.store is not None:
            now = time.time_ns()
            grades = [
                StoredGrade(trace.trace_id_hex, run.span_id or "", run.agent, now,
                            result.to_dict())
                for run, result in graded.runs
            ]
            self.store.put(trace.trace_id_hex, original, trace.spans, grades)


def grade_decoded(
    request: Any, decoded: Any, policy: Any, grade_run: Callable[[Run], CheckResult]
) -> tuple[bytes, list[tuple[Run, CheckResult]]]:
    """Runs of a decoded trace, graded and written into its spans; the annotated bytes."""
    from attest_otel.adapt import runs_from_spans
    from attest_otel.export.annotate import annotate_spans

    by_id = {span.span_id: span.source for span in decoded.spans}
    now_ns = time.time_ns()
    graded: list[tuple[Run, CheckResult]] = []
    for trace_runs in runs_from_spans(decoded.spans, decoded.logs, policy=policy):
        for run in trace_runs.runs:
            result = grade_run(run)
            annotate_spans(by_id, run, result, now_ns=now_ns)
            graded.append((run, result))
    data: bytes = request.SerializeToString()
    return data, graded


_WORKER_POLICY: Any = None
_WORKER_TELEMETRY: Any = None


def _content_policy(config: ServiceConfig) -> ContentPolicy:
    mode = config.content.mode
    return ContentPolicy(
        "drop" if mode == "drop" else "truncate" if mode == "truncate" else "keep",
        config.content.max_chars,
    )


def _init_worker(policy_path: str | None, log_events: dict[str, Any] | None,
                 content: ContentPolicy | None = None) -> None:
    """Runs once in each grading process (spawned: no inherited threads or sockets).

    `log_events` holds `build_telemetry` arguments when the grade log events are on: each
    process sends its own, so the receiving process does not encode them (about 100 us a
    span through the SDK). Metrics stay in the main process, which serves `/metrics`.
    """
    global _WORKER_POLICY, _WORKER_TELEMETRY
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _exit_with_parent()
    if content is not None:
        set_content_policy(content)
    if policy_path is not None:
        from attest_otel.config import load_policy

        _WORKER_POLICY = load_policy(policy_path)
    if log_events is not None:
        from multiprocessing import util

        from attest_otel.export.telemetry import build_telemetry

        _WORKER_TELEMETRY = build_telemetry(spans=False, logs=True, metrics=False,
                                            prometheus=None, **log_events)
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
                                      lambda run: grade(run, judge=None))
    if _WORKER_TELEMETRY is not None:
        for run, result in graded:
            _WORKER_TELEMETRY.emit_grade(run, result, grade_span=False)
    return annotated, [(_slim(run), result) for run, result in graded]


def _warm_worker() -> bool:
    """Imports what grading needs, so the first trace does not pay for it."""
    import attest_otel.adapt
    import attest_otel.export.annotate
    import attest_otel.grade.grader
    import attest_otel.ingest.decode  # noqa: F401

    return True


AGENT_BYTES = re.compile(
    rb"\x0a\x15gen_ai\.operation\.name\x12\x0e\x0a\x0cinvoke_agent"  # GenAI semconv
    rb"|\x2a\x09agent run"  # pydantic-ai's run span name
)
"""An agent span of the two most common conventions, as it is encoded: the exact key and
value (or exact span name), so a match is an agent span. Other conventions are found by
decoding (`agent_probe`); the two answers agree on the fixtures (tests/sidecar)."""


def agent_probe(trace: HeldTrace, chunk: bytes, whole: bool, *, keep: bool = True) -> bool:
    """Whether `chunk` (spans of `trace`) holds an agent span, by the adapters' own test.

    The byte test answers first and needs no decoding. Otherwise the chunk is decoded and
    each span asked `adapt.detect`; when `chunk` is the whole trace and `keep`, the parse is
    kept on the trace for the grader (in-process grading only).
    """
    if AGENT_BYTES.search(chunk) is not None:
        return True
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    from attest_otel.adapt import Role, detect
    from attest_otel.ingest.decode import decode_request

    request = ExportTraceServiceRequest.FromString(chunk)
    decoded = decode_request(request, source=f"trace {trace.trace_id_hex}")
    found = False
    for span in decoded.spans:
        if span.attributes:
            hit = detect(span)
            if hit is not None and hit[1] is Role.AGENT:
                found = True
                break
    if whole and keep:
        trace.probe = (request, decoded)
    return found


# --- the request path --------------------------------------------------------------------------


class Pipeline:
    """What the receivers call: classify, hold or pass, and keep the durable log right."""

    def __init__(
        self,
        *,
        buffer: TraceBuffer,
        forwarder: Forwarder,
        stats: SidecarStats,
        wal: DurableLog | None,
        submit: Callable[[list[HeldTrace]], None],
        retry_after_s: float,
        max_backlog_spans: int,
        unready_after_s: float = 30.0,
    ) -> None:
        self.buffer = buffer
        self.forwarder = forwarder
        self.stats = stats
        self.wal = wal
        self.submit = submit
        self.retry_after_s = retry_after_s
        self.max_backlog_spans = max_backlog_spans
        self.unready_after_s = unready_after_s
        self.closing = False
        self.disk_error: str | None = None
        self._disk_refused = 0
        self._disk_logged = 0.0
        self._disk_failed_at = 0.0

    def ready(self) -> tuple[bool, str]:
        if self.closing:
            return False, "shutting down"
        if self.disk_error is not None and time.monotonic() - self._disk_failed_at < 5.0:
            return False, f"buffer-dir: {self.disk_error}"
        if not self.has_room(1, 0):
            return False, "forward queue or grading backlog full"
        failing = self.forwarder.failing()
        if failing is not None and failing[0] >= self.unready_after_s:
            seconds, error = failing
            return False, (f"forwarding to {self.forwarder.settings.endpoint} has failed for "
                           f"{seconds:.0f}s: {error}")
        return True, ""

    def has_room(self, spans: int, size: int) -> bool:
        return (
            self.forwarder.has_room(spans, size)
            and self.stats.grading_spans <= self.max_backlog_spans
        )

    def accept(self, data: bytes) -> Outcome:
        """One export request (protobuf bytes, already inflated). Never raises."""
        if self.closing:
            self.stats.reject("shutting_down")
            return Outcome("closing", "the sidecar is shutting down; retry",
                           self.retry_after_s)
        if not data:
            return OK
        try:
            groups = split_request(data)
        except WireError as e:
            self.stats.reject("malformed")
            return Outcome("malformed", f"not an OTLP ExportTraceServiceRequest: {e}")
        spans = sum(len(g.spans) for g in groups)
        if spans == 0:
            return OK
        if not self.has_room(spans, len(data)):
            self.stats.reject("queue_full")
            return Outcome("full", "forward queue full; retry later", self.retry_after_s)
        record: int | None = None
        if self.wal is not None:
            try:
                record = self.wal.append(data)
            except OSError as e:
                self.stats.reject("buffer_dir_error")
                self._disk_error(e)
                return Outcome("full", f"cannot persist the request under --buffer-dir "
                                       f"({e.strerror or e}); retry later", self.retry_after_s)
            if self.disk_error is not None:
                log.warning("buffer-dir: writing again after %d refused request(s)",
                            self._disk_refused)
                self.disk_error = None
                self._disk_refused = 0
        self.route(data, groups, spans, record)
        return OK

    def _disk_error(self, error: OSError) -> None:
        """One clear line when the buffer dir starts failing, then one per 10 s at most."""
        now = time.monotonic()
        self._disk_failed_at = now
        self._disk_refused += 1
        if self.disk_error is None or now - self._disk_logged >= 10.0:
            log.error(
                "buffer-dir: cannot persist a request (%s); answering 'retry later' until "
                "it can (%d refused so far)", error.strerror or error, self._disk_refused,
                extra={"dir": str(self.wal.dir) if self.wal is not None else ""},
            )
            self._disk_logged = now
        self.disk_error = error.strerror or str(error)

    def classify(self, data: bytes, groups: Sequence[ScopeGroup]) -> set[bytes]:
        """Raw ids of the traces that have a GenAI candidate span in this request.

        The same test as `candidate.is_genai_candidate` (scope, name, attribute keys), done
        on the bytes: the key test is one regex over the whole request, repeated per span
        only when it matched somewhere.
        """
        genai: set[bytes] = set()
        key_search = GENAI_KEY_BYTES.search
        keys_somewhere = key_search(data) is not None
        known = self.buffer.is_known
        for group in groups:
            whole = group.is_genai_scope()
            for trace_id, name, record in group.spans:
                if trace_id in genai or known(trace_id):
                    continue
                if whole or is_genai_name(name) or (keys_somewhere and key_search(record)):
                    genai.add(trace_id)
        return genai

    def route(self, data: bytes, groups: list[ScopeGroup], spans: int,
              record: int | None) -> None:
        genai = self.classify(data, groups)
        routed = self.buffer.route(groups, genai, record)
        item: ForwardItem | None = None
        records = (record,) if record is not None else ()
        if routed.held_spans == 0:
            item = ForwardItem(data, spans, records, mergeable=False)
        elif routed.passthrough:
            item = ForwardItem(encode_groups(routed.passthrough), routed.passthrough_spans,
                               records, mergeable=True)
        if self.wal is not None and record is not None:
            self.wal.hold(record, routed.traces_touched + (item is not None))
            self.wal.unpin(record)
        if item is not None:
            self.forwarder.offer(item)
        self.stats.add(
            requests=1,
            spans_received=spans,
            spans_held=routed.held_spans,
            spans_passed=routed.passthrough_spans,
            spans_late=routed.late_spans,
        )
        if routed.released:
            self.submit(routed.released)


# --- the service -------------------------------------------------------------------------------


class Service:
    """The running sidecar. Build it with `build_service`."""

    def __init__(self, config: ServiceConfig) -> None:
        self.config = config
        self.stats = SidecarStats()
        self.wal: DurableLog | None = (
            DurableLog(config.buffer.dir, segment_bytes=config.buffer.segment_bytes)
            if config.buffer.dir is not None
            else None
        )
        fwd = config.forward
        self.forwarder = Forwarder(
            ForwardSettings(
                endpoint=fwd.endpoint,
                protocol=fwd.protocol,
                headers=fwd.headers,
                compression=fwd.compression,
                timeout_s=fwd.timeout_s,
                workers=fwd.workers,
                max_queue_spans=fwd.max_queue_spans,
                max_queue_bytes=fwd.max_queue_bytes,
                max_batch_bytes=fwd.max_batch_bytes,
                max_request_bytes=fwd.max_request_bytes,
                initial_backoff_s=fwd.initial_backoff_s,
                max_backoff_s=fwd.max_backoff_s,
                tls_ca_file=fwd.tls_ca_file,
                tls_cert_file=fwd.tls_cert_file,
                tls_key_file=fwd.tls_key_file,
            ),
            on_done=self.wal.release if self.wal is not None else None,
        )
        buf = config.buffer
        self.buffer = TraceBuffer(
            BufferLimits(
                grace_s=buf.grace_s,
                idle_timeout_s=buf.idle_timeout_s,
                max_traces=buf.max_traces,
                max_spans=buf.max_spans,
                max_bytes=buf.max_bytes,
                late_cache_traces=buf.late_cache_traces,
                tick_s=buf.tick_s,
            ),
            probe=self._probe,
            release=self._submit,
        )
        self.pipeline = Pipeline(
            buffer=self.buffer,
            forwarder=self.forwarder,
            stats=self.stats,
            wal=self.wal,
            submit=self._submit,
            retry_after_s=fwd.retry_after_s,
            max_backlog_spans=config.grading.max_backlog_spans,
            unready_after_s=fwd.unready_after_s,
        )
        self.policy: Any = None
        self.gate: ModelGate | None = None
        self.telemetry: Any = None
        self.store: TraceStore | None = None
        self.store_writer: StoreWriter | None = None
        self.grader: TraceGrader | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._processes: ProcessPoolExecutor | None = None
        self._pending: dict[Future[None], HeldTrace] = {}
        self._pending_lock = threading.Lock()
        self.grpc: GrpcReceiver | None = None
        self.http: HttpReceiver | None = None
        self._started = False
        self._stopped = threading.Event()
        self._shutdown_lock = threading.Lock()

    # --- wiring ----------------------------------------------------------------------------

    def _build_parts(self) -> None:
        from attest_otel.config import load_policy
        from attest_otel.export.telemetry import build_telemetry

        config = self.config
        set_content_policy(_content_policy(config))
        if config.grading.policy is not None:
            self.policy = load_policy(config.grading.policy)
        model = config.grading.model
        if model.enabled:
            from attest_otel.errors import UsageError
            from attest_otel.grade.llm import AnthropicJudge, judge_from_env

            env_judge = judge_from_env(model.model)
            if env_judge is None:
                raise UsageError("grading.model.enabled is true but no model is available: "
                                 "set ANTHROPIC_API_KEY")
            judge = env_judge
            client = getattr(env_judge, "_client", None)
            if client is not None:
                judge = AnthropicJudge(client, model.model,
                                       max_concurrency=model.max_concurrency,
                                       content=config.content.mode,
                                       max_chars=config.content.max_chars)
            elif config.content.mode != "keep":
                raise UsageError("content.mode drop/truncate needs the Anthropic judge")
            self.gate = ModelGate(
                judge,
                sample_rate=model.sample_rate,
                calls_per_minute=model.calls_per_minute,
                max_concurrency=model.max_concurrency,
                appropriate=model.appropriate,
            )
        tel = config.telemetry
        if tel.logs or tel.metrics or tel.prometheus:
            self.telemetry = build_telemetry(
                endpoint=tel.endpoint or config.forward.endpoint,
                protocol=tel.protocol or config.forward.protocol,
                spans=False,
                logs=tel.logs,
                metrics=tel.metrics,
                prometheus=tel.prometheus,
                label_cap=tel.label_cap,
                timeout_s=tel.timeout_s,
                headers=config.forward.headers or None,
            )
            if self.telemetry.meter_provider is not None:
                from attest_otel import semconv
                from attest_otel.export.telemetry import package_version

                meter = self.telemetry.meter_provider.get_meter(  # the grade metrics' scope
                    semconv.INSTRUMENTATION_SCOPE, package_version()
                )
                register_metrics(meter, self)
        if config.store.enabled:
            self.store = TraceStore(
                config.store.path,
                max_age_s=config.store.max_age_s,
                max_bytes=config.store.max_bytes,
            )
            self.store_writer = StoreWriter(self.store)
        emit = None
        if self.telemetry is not None:
            telemetry = self.telemetry

            def emit(run: Run, result: CheckResult) -> None:
                telemetry.emit_grade(run, result, grade_span=False)

        self.grader = TraceGrader(
            policy=self.policy,
            gate=self.gate,
            forwarder=self.forwarder,
            stats=self.stats,
            emit=emit,
            store=self.store_writer,
        )

    def _probe(self, trace: HeldTrace, chunk: bytes, whole: bool) -> bool:
        return agent_probe(trace, chunk, whole, keep=self._processes is None)

    def _start_processes(self) -> None:
        """Offline grading in worker processes keeps the receivers' interpreter free: the
        decode, adapt and annotate work of GenAI spans holds the GIL for milliseconds."""
        count = self.config.grading.processes
        if count == 0 or self.gate is not None or self.grader is None:
            return
        import multiprocessing

        policy = self.config.grading.policy
        tel = self.config.telemetry
        log_events = None
        if tel.logs:
            log_events = {
                "endpoint": tel.endpoint or self.config.forward.endpoint,
                "protocol": tel.protocol or self.config.forward.protocol,
                "timeout_s": tel.timeout_s,
                "headers": dict(self.config.forward.headers) or None,
            }
        pool = ProcessPoolExecutor(
            max_workers=count,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_init_worker,
            initargs=(str(policy) if policy is not None else None, log_events,
                      _content_policy(self.config)),
        )
        try:
            for warmed in [pool.submit(_warm_worker) for _ in range(count)]:
                warmed.result(timeout=120)
        except Exception:  # grading in-process is slower, not wrong
            log.exception("grading processes did not start; grading in this process")
            pool.shutdown(wait=False, cancel_futures=True)
            return
        self._processes = pool
        self.grader.pool = pool
        metrics = getattr(self.telemetry, "metrics", None)
        if metrics is not None:
            self.grader.emit_after_worker = metrics.record

    def _add_grader_api(self, server: Any) -> None:
        from attest_otel._proto.attest_otel.v1 import grader_pb2_grpc

        grader_pb2_grpc.add_GraderServicer_to_server(  # type: ignore[no-untyped-call]
            GraderApi(self), server
        )

    def _submit(self, traces: list[HeldTrace]) -> None:
        pool = self._pool
        grader = self.grader
        if pool is None or grader is None:
            return
        for trace in traces:
            self.stats.add(grading_spans=trace.spans)
            try:
                future = pool.submit(grader, trace)
            except RuntimeError:  # pool shut down: forward as it came rather than lose it
                self.stats.add(grading_spans=-trace.spans)
                self.forwarder.offer(ForwardItem(bytes(trace.data), trace.spans,
                                                 tuple(trace.records)))
                continue
            with self._pending_lock:
                self._pending[future] = trace
            future.add_done_callback(self._graded)

    def _graded(self, future: Future[None]) -> None:
        with self._pending_lock:
            trace = self._pending.pop(future, None)
        if trace is not None:
            self.stats.add(grading_spans=-trace.spans)

    # --- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Builds the outputs, replays the durable buffer, then opens the receivers."""
        if self._started:
            return
        self._started = True
        try:
            self._build_parts()
            if self.store_writer is not None:
                self.store_writer.start()
            self._start_processes()
            self._pool = ThreadPoolExecutor(
                max_workers=max(self.config.grading.workers, 2 * self.config.grading.processes),
                thread_name_prefix="attest-otel-grade",
            )
            self.forwarder.start()
            self.buffer.start()
            if self.wal is not None:
                replay = self.wal.open()
                for record, data in replay:
                    self._replay(record, data)
            rc = self.config.receivers
            tls = (
                TlsFiles(rc.tls_cert_file, rc.tls_key_file, rc.tls_client_ca_file)
                if rc.tls_cert_file is not None and rc.tls_key_file is not None
                else None
            )
            token = (
                TokenCheck(read_token(rc.auth_token_file))
                if rc.auth_token_file is not None
                else None
            )
            warning = exposure_warning((rc.grpc_endpoint, rc.http_endpoint),
                                       tls=tls is not None, token=token is not None)
            if warning:
                log.warning(warning)
            self.grpc = GrpcReceiver(
                rc.grpc_endpoint,
                self.pipeline.accept,
                max_recv_bytes=rc.grpc_max_recv_bytes,
                workers=rc.grpc_workers,
                add_services=[self._add_grader_api],
                tls=tls,
                token=token,
                on_rejection=self.stats.reject,
            )
            self.grpc.start()
            self.http = HttpReceiver(
                rc.http_endpoint,
                self.pipeline.accept,
                max_body_bytes=rc.http_max_body_bytes,
                ready=self.pipeline.ready,
                on_rejection=self.stats.reject,
                tls=tls,
                token=token,
            )
            self.http.start()
        except BaseException:
            self.shutdown(2.0)
            raise
        log.info(
            "attest-otel sidecar started",
            extra={
                "grpc": f"{_host(self.config.receivers.grpc_endpoint)}:{self.grpc.port}",
                "http": f"{_host(self.config.receivers.http_endpoint)}:{self.http.port}",
                "forward": f"{self.config.forward.endpoint} ({self.config.forward.protocol})",
                "store": str(self.config.store.path) if self.config.store.enabled else "off",
                "buffer_dir": str(self.config.buffer.dir) if self.config.buffer.dir else "off",
                "model_checks": "on" if self.gate is not None else "off",
                "prometheus": getattr(self.telemetry, "prometheus_url", None) or "off",
            },
        )

    def _replay(self, record: int, data: bytes) -> None:
        assert self.wal is not None
        try:
            groups = split_request(data)
            spans = sum(len(g.spans) for g in groups)
            self.pipeline.route(data, groups, spans, record)
        except Exception:
            log.exception("buffer-dir: could not route a replayed request; forwarding it as is")
            self.wal.hold(record)
            self.wal.unpin(record)
            self.forwarder.offer(ForwardItem(data, 0, (record,), mergeable=False))

    def wait(self, timeout_s: float | None = None) -> bool:
        """Blocks until `shutdown` has finished (True) or the timeout passes."""
        return self._stopped.wait(timeout_s)

    def shutdown(self, deadline_s: float | None = None) -> bool:
        """Stops accepting, grades what is held, forwards and flushes; idempotent.

        Returns True when everything accepted was delivered within the deadline.
        """
        with self._shutdown_lock:
            if self._stopped.is_set():
                return True
            budget = self.config.shutdown_deadline_s if deadline_s is None else deadline_s
            deadline = time.monotonic() + budget
            log.info("shutting down", extra={"deadline_s": budget,
                                             "held_traces": self.buffer.held_traces})
            self.pipeline.closing = True
            if self.http is not None:
                self.http.stop()
            if self.grpc is not None:
                self.grpc.stop(grace_s=min(1.0, max(0.0, deadline - time.monotonic())))
            self.buffer.stop()
            self._submit(self.buffer.release_all())
            self._drain_grading(deadline)
            delivered = self.forwarder.shutdown(deadline)
            if self.telemetry is not None:
                remaining = max(1.0, deadline - time.monotonic())
                try:
                    self.telemetry.shutdown(timeout_s=remaining)
                except Exception:
                    log.exception("telemetry shutdown failed")
            if self.store_writer is not None:
                self.store_writer.close(timeout_s=max(0.5, deadline - time.monotonic()))
            elif self.store is not None:
                self.store.close()
            if self.wal is not None:
                self.wal.close()
            s = self.stats
            log.info(
                "stopped",
                extra={
                    "spans_received": s.spans_received,
                    "spans_forwarded": self.forwarder.stats.spans_forwarded,
                    "spans_late": s.spans_late,
                    "traces_graded": sum(s.traces_graded.values()),
                    "grade_failures": s.grade_failures,
                    "delivered_all": delivered,
                },
            )
            self._stopped.set()
            return delivered

    def _drain_grading(self, deadline: float) -> None:
        pool = self._pool
        if pool is None:
            return
        while time.monotonic() < deadline:
            with self._pending_lock:
                if not self._pending:
                    break
            time.sleep(0.02)
        with self._pending_lock:
            left = [t for f, t in self._pending.items() if f.cancel()]
        for trace in left:  # never started: forward ungraded rather than lose them
            self.forwarder.offer(ForwardItem(bytes(trace.data), trace.spans,
                                             tuple(trace.records)))
        pool.shutdown(wait=False, cancel_futures=True)
        self._pool = None
        if self._processes is not None:
            if self.grader is not None:
                self.grader.pool = None
            self._processes.shutdown(wait=True, cancel_futures=True)
            self._processes = None


def _host(endpoint: str) -> str:
    from attest_otel.sidecar.config import parse_host_port

    return parse_host_port(endpoint)[0]


class GraderApi:
    """`attest_otel.v1.Grader` on the gRPC port (see proto/attest_otel/v1/grader.proto)."""

    def __init__(self, service: Service) -> None:
        self.service = service

    def GradeRun(self, request: Any, context: Any) -> Any:
        import grpc
        from google.protobuf import json_format  # type: ignore[import-untyped]

        from attest_otel._proto.attest_otel.v1 import result_pb2
        from attest_otel.errors import InputError
        from attest_otel.model import run_from_dict

        data = json_format.MessageToDict(request, preserving_proto_field_name=True)
        try:
            run = run_from_dict(data)
        except InputError as e:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        grader = self.service.grader
        if grader is None:
            context.abort(grpc.StatusCode.UNAVAILABLE, "the sidecar is starting")
            raise AssertionError("abort raises")
        result = grader.grade_run(run)
        return json_format.ParseDict(result.to_dict(), result_pb2.CheckResult(),
                                     ignore_unknown_fields=True)

    def GradeTrace(self, request: Any, context: Any) -> Any:
        import grpc
        from google.protobuf import json_format

        from attest_otel._proto.attest_otel.v1 import grader_pb2, result_pb2
        from attest_otel.model import run_to_dict
        from attest_otel.store import graded_runs

        trace_id = request.trace_id.strip().lower()
        store = self.service.store
        if store is None:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, "the store is turned off")
            raise AssertionError("abort raises")
        stored = store.get_trace(trace_id)
        if stored is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"trace {trace_id} is not in the store")
            raise AssertionError("abort raises")
        response = grader_pb2.GradeTraceResponse(trace_id=trace_id)
        for run, result, _from_store in graded_runs(stored, policy=self.service.policy):
            response.runs.append(
                grader_pb2.GradedRun(
                    span_id=run.span_id or "",
                    agent=run.agent or "",
                    run=json_format.ParseDict(run_to_dict(run), result_pb2.Run(),
                                              ignore_unknown_fields=True),
                    result=json_format.ParseDict(result.to_dict(), result_pb2.CheckResult(),
                                                 ignore_unknown_fields=True),
                )
            )
        return response


def build_service(config: ServiceConfig) -> Service:
    """The factory: a service wired from `config` alone, not started."""
    return Service(config)
