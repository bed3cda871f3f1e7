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

`build_service(config)` is the factory: it first loads and checks everything the config
names (the policy file with its dialects, the model, the content mode against the judge),
raising every problem at once before a file, thread or port is opened; then each part is
built from its own section of the config and nothing else. `Service.start()` /
`Service.shutdown(deadline_s)` are the lifecycle. `shutdown` stops accepting, grades what
is held, forwards and flushes within the deadline.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from attest_otel import semconv
from attest_otel._proto.attest_otel.v1 import grader_pb2_grpc
from attest_otel.errors import UsageError
from attest_otel.export.otlp_config import package_version
from attest_otel.export.telemetry import build_telemetry
from attest_otel.grade.questions import Judge
from attest_otel.model import CheckResult, Run
from attest_otel.policy import Policy
from attest_otel.sidecar.api import GraderApi
from attest_otel.sidecar.buffer import HeldTrace, SpanFacts, TraceBuffer
from attest_otel.sidecar.buffer_dir import claim, release
from attest_otel.sidecar.config import ServiceConfig, parse_host_port, read_token
from attest_otel.sidecar.evaluation_logs import EvaluationLogs
from attest_otel.sidecar.forward import (
    Forwarder,
    ForwardItem,
    make_log_sender,
    make_metrics_sender,
)
from attest_otel.sidecar.gate import ModelGate
from attest_otel.sidecar.grading import TraceGrader, init_worker
from attest_otel.sidecar.http_receiver import HttpReceiver
from attest_otel.sidecar.loading import declared_marks, load_grading
from attest_otel.sidecar.log_wire import LOGS, METRICS, TRACES, untag
from attest_otel.sidecar.policy_watch import PolicyWatch
from attest_otel.sidecar.probe import agent_probe
from attest_otel.sidecar.quarantine import Quarantine
from attest_otel.sidecar.receivers import (
    GrpcReceiver,
    TlsFiles,
    TokenCheck,
    exposure_warning,
    metrics_exposure_warning,
)
from attest_otel.sidecar.regrade import Regrader
from attest_otel.sidecar.requests import GradingCapacity, RequestPath
from attest_otel.sidecar.signal_paths import SignalPaths
from attest_otel.sidecar.stats import SidecarStats, register_metrics
from attest_otel.sidecar.targets import telemetry_target
from attest_otel.sidecar.wal import DurableLog
from attest_otel.sidecar.wire import (
    split_request,
)
from attest_otel.sidecar.workers import GradingProcesses
from attest_otel.store import Store, Writer, open_store, open_writer, redact
from attest_otel.store.shared_writer import SharedStoreWriter

log = logging.getLogger(__name__)

BATCH_TRACES = 32
BATCH_BYTES = 1 << 20
"""Released traces graded offline together, at most (`Service._submit`): each task for the
grading process costs a pickle, a pipe trip each way and thread wake-ups in this process,
and each forwarded request a gRPC call at both ends; a batch pays them once."""


class Service:
    """The running sidecar. Build it with `build_service`."""

    def __init__(
        self, config: ServiceConfig, *, policy: Policy | None = None, judge: Judge | None = None
    ) -> None:
        """`policy` and `judge` as `build_service` loaded and checked them (None: none)."""
        self.config = config
        self.policy = policy
        self.judge = judge
        self.stats = SidecarStats()
        self.wal: DurableLog | None = (
            DurableLog(
                config.buffer.dir,
                segment_bytes=config.buffer.segment_bytes,
                max_bytes=config.buffer.max_dir_bytes,
            )
            if config.buffer.dir is not None
            else None
        )
        fwd = config.forward
        done = self.wal.release if self.wal is not None else None
        self.forwarder = Forwarder(fwd, on_done=done)
        self.log_forwarder = Forwarder(fwd, on_done=done, sender_factory=make_log_sender)
        """The app's log records (and the held ones after their trace), to the next hop."""
        self.metrics_forwarder = Forwarder(fwd, on_done=done, sender_factory=make_metrics_sender)
        self.buffer = TraceBuffer(config.buffer, probe=self._probe, release=self._submit)
        self.requests = RequestPath(
            buffer=self.buffer,
            forwarder=self.forwarder,
            stats=self.stats,
            wal=self.wal,
            submit=self._submit,
            retry_after_s=fwd.retry_after_s,
            max_backlog_spans=config.grading.max_backlog_spans,
            unready_after_s=fwd.unready_after_s,
            declared=declared_marks(policy),
            # A quarter of a second of queued grading keeps the grading processes busy while
            # a graded span waits little past the grace (bench_sidecar.py's delay rows).
            capacity=GradingCapacity(0.25, arriving_s=config.buffer.grace_s),
        )
        self.signals = SignalPaths(
            buffer=self.buffer,
            logs=self.log_forwarder,
            metrics=self.metrics_forwarder,
            stats=self.stats,
            wal=self.wal,
            submit=self._submit,
            retry_after_s=fwd.retry_after_s,
            closing=lambda: self.requests.closing,
        )
        self.gate: ModelGate | None = None
        self.telemetry: Any = None
        self.evaluation_logs: EvaluationLogs | None = None
        """The grade log events: encoded where graded, sent by the sidecar (not the SDK)."""
        self.store: Store | None = None
        self.store_writer: Writer | None = None
        self.grader: TraceGrader | None = None
        self.regrader: Regrader | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._processes: GradingProcesses | None = None
        self.quarantine = Quarantine(config.buffer.dir)
        self._dir_lock: int | None = None
        """The buffer dir's lock (`buffer_dir.claim`), held until the process ends."""
        self._pending: dict[Future[None], list[HeldTrace]] = {}
        self._pending_lock = threading.Lock()
        self.grpc: GrpcReceiver | None = None
        self.http: HttpReceiver | None = None
        self._started = False
        self._stopped = threading.Event()
        self._shutdown_lock = threading.Lock()

    # --- wiring ----------------------------------------------------------------------------

    def _build_parts(self) -> None:

        config = self.config
        model = config.grading.model
        if self.judge is not None:
            self.gate = ModelGate(
                self.judge,
                sample_rate=model.sample_rate,
                calls_per_minute=model.calls_per_minute,
                max_concurrency=model.max_concurrency,
                appropriate=model.appropriate,
            )
        tel = config.telemetry
        if tel.logs or tel.metrics or tel.prometheus:
            target = telemetry_target(config)
            self.telemetry = build_telemetry(
                spans=False,
                logs=False,  # sent as OTLP bytes by `evaluation_logs`, not the SDK
                metrics=tel.metrics,
                prometheus=tel.prometheus,
                label_cap=tel.label_cap,
                label_max_chars=tel.label_max_chars,
                label_ttl_s=tel.label_ttl_s,
                content=config.content,
                **target,
            )
            if self.telemetry.meter_provider is not None:
                meter = self.telemetry.meter_provider.get_meter(  # the grade metrics' scope
                    semconv.INSTRUMENTATION_SCOPE, package_version()
                )
                register_metrics(meter, self)
        if config.store.enabled:
            opened = open_store(  # a URL: the fleet's shared store, migrated now
                config.store.url or config.store.path,
                max_age_s=config.store.max_age_s,
                max_bytes=config.store.max_bytes,
                wait_for_database=True,
            )
            self.store = opened
            spool = config.buffer.dir / "store-queue" if config.buffer.dir else None
            self.store_writer = open_writer(
                opened,
                spool_dir=spool,
                content=config.content,
                max_queue_bytes=config.store.max_queue_bytes,
            )
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
            content=config.content,
            budget_s=model.budget_s if self.gate is not None else config.grading.budget_s,
        )
        self.grader.quarantine = self.quarantine
        self.policy_watch = PolicyWatch(self.policy) if self.policy is not None else None
        if self.policy_watch is not None:
            self.grader.saw_agent = self.policy_watch.saw
        regrader = Regrader(  # late spans: the trace graded again
            policy=self.policy,
            grade_run=self.grader.grade_run,
            here=self.grader.here,
            forwarder=self.forwarder,
            stats=self.stats,
            store=self.store_writer,
            content=config.content,
        )
        self.grader.regrade = regrader
        self.grader.log_forwarder = self.log_forwarder
        self.regrader = regrader
        self.grader.remember = regrader.remember
        if (
            config.store.enabled
            and config.store.url is not None
            and isinstance(self.store_writer, SharedStoreWriter)
        ):  # another sidecar's spans
            self.store_writer.on_stale = self._stale(regrader)
        if tel.logs:
            self.evaluation_logs = EvaluationLogs(config.forward, telemetry_target(config))
            self.grader.send_logs = self.evaluation_logs.send
            regrader.send_logs = self.evaluation_logs.send

    def _stale(self, regrader: Regrader) -> Callable[[str], None]:
        """What the shared store's writer calls for a trace another sidecar also stored
        spans of: graded again from the whole trace, on the grading pool."""

        def refresh(trace_id: str) -> None:
            pool = self._pool
            if pool is None:
                return
            try:
                pool.submit(regrader.refresh, trace_id)
            except RuntimeError:  # shutting down: the next writer of the trace will
                log.warning("store: trace %s not graded again from its whole (shutdown)", trace_id)

        return refresh

    def _ready(self) -> tuple[bool, str]:
        """/readyz: the request path's reasons, a full queue of writes to the store, and
        grading that makes no progress (a trace past its budget that could not be stopped:
        one graded in this process, with `grading.processes: 0` or model checks on)."""
        ready, why = self.requests.ready()
        grader = self.grader
        if ready and grader is not None:
            stalled = grader.stalled_s()
            if stalled > self.config.grading.budget_s + 1.0:
                return False, f"grading has made no progress for {stalled:.0f}s"
        backlog = getattr(self.store_writer, "backlog", None)
        if ready and backlog is not None:
            full = backlog()
            if full is not None:
                return False, full
        watch = getattr(self, "policy_watch", None)
        if ready and watch is not None and watch.detail:
            return True, f"ready; {watch.detail}"
        return ready, why

    def _probe(
        self, trace: HeldTrace, chunk: bytes, whole: bool, spans: list[SpanFacts]
    ) -> set[bytes]:
        return agent_probe(trace, chunk, whole, spans, keep=self._processes is None)

    def _start_processes(self) -> None:
        """Offline grading in worker processes keeps the receivers' interpreter free: the
        decode, adapt and annotate work of GenAI spans holds the GIL for milliseconds."""
        count = self.config.grading.processes
        if count == 0 or self.gate is not None or self.grader is None:
            return

        grading = self.config.grading
        policy = grading.policy
        pool = GradingProcesses(
            count,
            budget_s=grading.budget_s,
            max_memory_bytes=grading.max_memory_bytes,
            initializer=init_worker,
            initargs=(
                str(policy) if policy is not None else None,
                self.config.content,
                grading.nice,
            ),
            on_slow=self.quarantine.slow if self.config.buffer.dir is not None else None,
        )
        try:
            pool.start()
        except Exception:  # grading in-process is slower, not wrong
            log.exception("grading processes did not start; grading in this process")
            pool.shutdown()
            return
        self._processes = pool
        self.grader.pool = pool
        if self.regrader is not None:
            self.regrader.pool = pool
        metrics = self.telemetry.metrics if self.telemetry is not None else None
        if metrics is not None:
            self.grader.emit_after_worker = metrics.record_many

    def _add_grader_api(self, server: Any) -> None:

        grader_pb2_grpc.add_GraderServicer_to_server(  # type: ignore[no-untyped-call]
            GraderApi(
                self,
                self.config.receivers.grader_workers,
                self.config.receivers.grpc_max_recv_bytes,
            ),
            server,
        )

    def _submit(self, traces: list[HeldTrace]) -> None:
        pool = self._pool
        grader = self.grader
        if pool is None or grader is None:
            return
        limit = self.config.grading.max_trace_bytes
        # Offline grading takes traces in batches (`TraceGrader.grade_batch`): one task for
        # the grading process and one forward item per batch. Model checks grade one trace
        # per thread, so that the model calls of several runs overlap.
        batched = grader.pool is not None and grader.gate is None
        batch: list[HeldTrace] = []
        size = 0
        for trace in traces:
            if len(trace.data) > limit and not trace.late:
                # Grading costs many times a trace's bytes: past the cap it goes on ungraded.
                log.warning(
                    "trace %s holds %d bytes, over grading.max_trace_size_mib: forwarded ungraded",
                    trace.trace_id_hex,
                    len(trace.data),
                    extra={"trace_id": trace.trace_id_hex, "spans": trace.spans},
                )
                self.stats.graded("too_large", 0, False)
                grader.forward_ungraded([trace])
                continue
            if not batched:
                self._submit_batch(pool, [trace])
                continue
            batch.append(trace)
            size += len(trace.data)
            if len(batch) >= BATCH_TRACES or size >= BATCH_BYTES:
                self._submit_batch(pool, batch)
                batch, size = [], 0
        if batch:
            self._submit_batch(pool, batch)

    def _submit_batch(self, pool: ThreadPoolExecutor, batch: list[HeldTrace]) -> None:
        grader = self.grader
        assert grader is not None
        spans = sum(trace.spans for trace in batch)
        self.stats.add(grading_spans=spans)
        if self.requests.capacity is not None:
            self.requests.capacity.submitted()
        try:
            future = pool.submit(grader.grade_batch, batch)
        except RuntimeError:  # pool shut down: forward as it came rather than lose it
            self.stats.add(grading_spans=-spans)
            grader.forward_ungraded(batch)
            return
        with self._pending_lock:
            self._pending[future] = batch
        future.add_done_callback(self._graded)

    def _graded(self, future: Future[None]) -> None:
        with self._pending_lock:
            batch = self._pending.pop(future, None)
        if batch is not None:
            spans = sum(trace.spans for trace in batch)
            self.stats.add(grading_spans=-spans)
            if self.requests.capacity is not None:
                self.requests.capacity.graded(spans, self.stats.grading_spans)

    # --- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Builds the outputs, replays the durable buffer, then opens the receivers."""
        if self._started:
            return
        self._started = True
        try:
            if self.config.buffer.dir is not None:
                self._dir_lock = claim(self.config.buffer.dir)
            self._build_parts()
            if self.store_writer is not None:
                self.store_writer.start()
            self._start_processes()
            self._pool = ThreadPoolExecutor(
                max_workers=max(self.config.grading.workers, 8 * self.config.grading.processes),
                thread_name_prefix="attest-otel-grade",
            )
            self.forwarder.start()
            self.log_forwarder.start()
            self.metrics_forwarder.start()
            if self.evaluation_logs is not None:
                self.evaluation_logs.start()
            self.buffer.start()
            if self.wal is not None:
                try:
                    self.quarantine.open()
                    replay = self.wal.open()
                except OSError as e:  # a symlink where a file of ours goes, another's file
                    what = "is a symlink" if e.errno == errno.ELOOP else (e.strerror or str(e))
                    name = os.path.basename(str(e.filename)) if e.filename else "a file"
                    raise UsageError(
                        f"buffer-dir {self.config.buffer.dir}: {name} {what}; refused"
                    ) from None
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
            if token is not None:  # an authenticated sender, not a self-declared name
                self.buffer.fair_key = "ingest-token"
                if self.regrader is not None:
                    self.regrader.authenticated = True
            grader_token = (
                TokenCheck(read_token(rc.grader_token_file))
                if rc.grader_token_file is not None
                else None
            )
            for warning in (
                exposure_warning(
                    (rc.grpc_endpoint, rc.http_endpoint),
                    tls=tls is not None,
                    token=token is not None,
                ),
                metrics_exposure_warning(self.config.telemetry.prometheus),
            ):
                if warning:
                    log.warning(warning)
            self.grpc = GrpcReceiver(
                rc.grpc_endpoint,
                self.requests.accept,
                accept_logs=self.signals.accept_logs,
                accept_metrics=self.signals.accept_metrics,
                on_oversize=self.signals.oversize,
                max_recv_bytes=rc.grpc_max_recv_bytes,
                read_cap_bytes=rc.grpc_read_cap_bytes,
                workers=rc.grpc_workers + rc.grader_workers,
                add_services=[self._add_grader_api],
                tls=tls,
                token=token,
                grader_token=grader_token,
                on_rejection=self.stats.reject,
            )
            self.grpc.start()
            self.http = HttpReceiver(
                rc.http_endpoint,
                self.requests.accept,
                accept_logs=self.signals.accept_logs,
                accept_metrics=self.signals.accept_metrics,
                on_oversize=self.signals.oversize,
                max_body_bytes=rc.http_max_body_bytes,
                max_json_bytes=rc.http_max_json_bytes,
                workers=rc.http_workers,
                max_connections=rc.http_max_connections,
                max_per_peer=rc.http_max_per_peer,
                header_timeout_s=rc.http_header_timeout_s,
                body_timeout_s=rc.http_body_timeout_s,
                max_concurrent_decodes=rc.max_concurrent_decodes,
                ready=self._ready,
                on_rejection=self.stats.reject,
                tls=tls,
                token=token,
            )
            self.http.start()
        except BaseException:
            # Undoing a start that failed: its error is the one line the user sees, so the
            # shutdown's own INFO lines stay out of it.
            level = log.level
            log.setLevel(max(level, logging.WARNING))
            try:
                self.shutdown(2.0)
            finally:
                log.setLevel(level)
            raise
        rc = self.config.receivers
        log.info(
            "attest-otel sidecar started",
            extra={
                "grpc": f"{parse_host_port(rc.grpc_endpoint)[0]}:{self.grpc.port}",
                "http": f"{parse_host_port(rc.http_endpoint)[0]}:{self.http.port}",
                "forward": f"{self.config.forward.endpoint} ({self.config.forward.protocol})",
                "store": (
                    redact(self.config.store.url or self.config.store.path)
                    if self.config.store.enabled
                    else "off"
                ),
                "buffer_dir": str(self.config.buffer.dir) if self.config.buffer.dir else "off",
                "model_checks": "on" if self.gate is not None else "off",
                "prometheus": getattr(self.telemetry, "prometheus_url", None) or "off",
            },
        )

    def _replay(self, record: int, raw: bytes) -> None:
        assert self.wal is not None
        signal, data = untag(raw)
        try:
            if signal != TRACES:
                self.signals.replay(signal, data, record)
                return
            groups = split_request(data)
            spans = sum(len(g.spans) for g in groups)
            self.requests.route(data, groups, spans, record)
        except Exception:
            log.exception("buffer-dir: could not route a replayed request; forwarding it as is")
            self.wal.hold(record)
            self.wal.unpin(record)
            forwarder = {LOGS: self.log_forwarder, METRICS: self.metrics_forwarder}.get(
                signal, self.forwarder
            )
            forwarder.offer(ForwardItem(data, 0, (record,), mergeable=False))

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
            log.info(
                "shutting down",
                extra={"deadline_s": budget, "held_traces": self.buffer.held_traces},
            )
            self.requests.closing = True
            if self.http is not None:
                self.http.stop()
            if self.grpc is not None:
                self.grpc.stop(grace_s=min(1.0, max(0.0, deadline - time.monotonic())))
            self.buffer.stop()
            self._submit(self.buffer.release_all())
            # Grading stops early enough to forward what it leaves ungraded.
            self._drain_grading(deadline - min(5.0, budget / 3), deadline)
            delivered = self.forwarder.shutdown(deadline)
            delivered &= self.log_forwarder.shutdown(max(deadline, time.monotonic() + 1.0))
            delivered &= self.metrics_forwarder.shutdown(max(deadline, time.monotonic() + 1.0))
            if self.evaluation_logs is not None:
                self.evaluation_logs.shutdown(max(deadline, time.monotonic() + 1.0))
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
            self.quarantine.close()
            if self._dir_lock is not None:
                release(self._dir_lock)
                self._dir_lock = None
            s = self.stats
            log.info(
                "stopped",
                extra={
                    "spans_received": s.spans_received,
                    "spans_forwarded": self.forwarder.stats.spans_forwarded,
                    "spans_late": s.spans_late,
                    "late_ungraded": s.late_ungraded,
                    "traces_graded": sum(s.traces_graded.values()),
                    "traces_regraded": s.traces_regraded,
                    "grade_failures": s.grade_failures,
                    "possible_duplicates": self.forwarder.stats.possible_duplicates,
                    "delivered_all": delivered,
                },
            )
            self._stopped.set()
            return delivered

    def _drain_grading(self, kill_at: float, deadline: float) -> None:
        """Grading finishes what it holds until `kill_at`; then what is still grading is
        killed, and its traces are forwarded ungraded before `deadline`."""
        pool = self._pool
        if pool is None:
            return
        while time.monotonic() < kill_at:
            with self._pending_lock:
                if not self._pending:
                    break
            time.sleep(0.02)
        if self.grader is not None:  # grading here stops waiting: forwarded ungraded
            self.grader.here.stop()
        with self._pending_lock:
            left = [t for f, batch in self._pending.items() if f.cancel() for t in batch]
        if left and self.grader is not None:  # never started: forward rather than lose them
            self.grader.forward_ungraded(left)
        if self._processes is not None:
            # Grading still under way past the deadline is killed: its callers forward
            # their traces ungraded (`workers.Failed("shutdown")`) and return.
            self._processes.shutdown()
        pool.shutdown(wait=False, cancel_futures=True)
        while time.monotonic() < deadline:  # their callers flag and offer them
            with self._pending_lock:
                if not self._pending:
                    break
            time.sleep(0.02)
        self._pool = None


def build_service(config: ServiceConfig) -> Service:
    """The factory: every load-time check first, then a service wired from `config`, not
    started. Raises PolicyError listing every problem (exit 2 from `serve`)."""
    policy, judge = load_grading(config)  # raises before anything is opened
    return Service(config, policy=policy, judge=judge)
