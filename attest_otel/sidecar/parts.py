"""The sidecar's components, each built from its own config section (the factory).

    buffer dir ─ store ─ telemetry ─ evaluation logs ─ forwarders (metrics, logs, spans)
      ─ grading processes ─ grading pool ─ trace buffer ─ replay ─ receivers (gRPC with the
      Grader API, HTTP with /readyz) ─ intake

That is the start order; shutdown runs it backwards (`lifecycle`): the intake closes first
(new requests are answered "retry later"), then the receivers, then the buffer hands every
held trace to grading, grading finishes or forwards them ungraded, the forwarders deliver,
the telemetry flushes, the store writes its queue, and the buffer dir closes last, once
nothing can release a record in it.

`build_parts` builds every component before any starts, each handed what it consumes: a
component never reaches into another's insides nor is wired by assignment later. The one
edge that points back up, the shared store telling grading that another sidecar stored
spans of a trace (`StorePart.on_stale`), is a function over the grading pool built below.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from attest_otel._proto.attest_otel.v1 import grader_pb2_grpc
from attest_otel.grade.questions import Judge
from attest_otel.policy import Policy
from attest_otel.sidecar.api import GraderApi
from attest_otel.sidecar.bounded import InProcessBudget
from attest_otel.sidecar.buffer import HeldTrace, SpanFacts, TraceBuffer
from attest_otel.sidecar.config import ServiceConfig, read_token
from attest_otel.sidecar.durable import BufferDir
from attest_otel.sidecar.evaluation_logs import EvaluationLogs
from attest_otel.sidecar.forward import Forwarder, make_log_sender, make_metrics_sender
from attest_otel.sidecar.gate import ModelGate, run_grader
from attest_otel.sidecar.grading import TraceGrader
from attest_otel.sidecar.grading_pool import GradingPool, OfflineGrading
from attest_otel.sidecar.http_receiver import HttpReceiver
from attest_otel.sidecar.lifecycle import Hook, Part
from attest_otel.sidecar.loading import declared_marks
from attest_otel.sidecar.policy_watch import PolicyWatch
from attest_otel.sidecar.probe import agent_probe
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
from attest_otel.sidecar.store_part import StorePart
from attest_otel.sidecar.targets import telemetry_target
from attest_otel.sidecar.telemetry_part import TelemetryPart

__all__ = ["Parts", "build_parts"]

log = logging.getLogger(__name__)

ALSO_FLUSHED_S = 1.0
"""The log and metric forwarders and the evaluation logs get at least this at shutdown,
even once the spans' forwarder has used the deadline up."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Parts:
    """Every component of one sidecar, and the order of its lifecycle (`order`)."""

    stats: SidecarStats
    buffer_dir: BufferDir
    store: StorePart | None
    telemetry: TelemetryPart
    evaluation_logs: EvaluationLogs | None
    forwarder: Forwarder
    log_forwarder: Forwarder
    metrics_forwarder: Forwarder
    gate: ModelGate | None
    offline: OfflineGrading
    grader: TraceGrader
    regrader: Regrader
    pool: GradingPool
    buffer: TraceBuffer
    requests: RequestPath
    signals: SignalPaths
    grpc: GrpcReceiver
    http: HttpReceiver
    order: tuple[Part, ...]


def build_parts(
    config: ServiceConfig,
    *,
    policy: Policy | None,
    judge: Judge | None,
    replay: Callable[[], None],
) -> Parts:
    """Every component, built from its section of `config`; nothing opened or started.
    `replay`: routes what the buffer dir kept from an earlier run (started once the
    request paths can take it, before the receivers)."""
    stats = SidecarStats()
    fwd, grading, rc = config.forward, config.grading, config.receivers
    buffer_dir = BufferDir(config.buffer)
    wal = buffer_dir.wal
    done = wal.release if wal is not None else None
    forwarder = Forwarder(fwd, on_done=done)
    log_forwarder = Forwarder(fwd, on_done=done, sender_factory=make_log_sender)
    """The app's log records (and the held ones after their trace), to the next hop."""
    metrics_forwarder = Forwarder(fwd, on_done=done, sender_factory=make_metrics_sender)
    gate = _gate(config, judge)

    def stale(trace_id: str) -> None:  # the one edge back up (module docstring)
        pool.stale(trace_id)

    store = (
        StorePart(
            config.store,
            content=config.content,
            spool_dir=config.buffer.dir / "store-queue" if config.buffer.dir else None,
            on_stale=stale,
        )
        if config.store.enabled
        else None
    )
    evaluation_logs = (
        EvaluationLogs(fwd, telemetry_target(config)) if config.telemetry.logs else None
    )
    send_logs = evaluation_logs.send if evaluation_logs is not None else None
    quarantine = buffer_dir.quarantine  # without a buffer dir: kept in memory only
    offline = OfflineGrading(
        grading,
        config.content,
        enabled=gate is None,
        quarantine=quarantine if config.buffer.dir is not None else None,
    )
    token = TokenCheck(read_token(rc.auth_token_file)) if rc.auth_token_file else None
    # Grading in this process (model checks on, or no grading processes) has its own time
    # budget, shared by first grades and regrades (`bounded`).
    here = InProcessBudget(grading.model.budget_s if gate is not None else grading.budget_s)
    regrader = Regrader(  # late spans: the trace graded again
        policy=policy,
        grade_run=run_grader(gate, stats),
        forwarder=forwarder,
        stats=stats,
        store=store,
        content=config.content,
        pool=offline,
        send_logs=send_logs,
        authenticated=token is not None,  # an authenticated sender, not a self-declared name
        here=here,
    )
    watch = PolicyWatch(policy) if policy is not None else None

    def self_metrics(meter: Any) -> None:  # registered at start, when the buffer exists
        register_metrics(meter, stats=stats, forwarder=forwarder, buffer=buffer, store_writer=store)

    telemetry = TelemetryPart(
        config.telemetry,
        content=config.content,
        target=telemetry_target(config),
        self_metrics=self_metrics,
    )
    grader = TraceGrader(
        policy=policy,
        gate=gate,
        forwarder=forwarder,
        stats=stats,
        emit=telemetry.emit,
        store=store,
        pool=offline,
        emit_after_worker=telemetry.record_many,
        content=config.content,
        regrade=regrader,
        # Only without the store's spans does a regrade start from what it remembered.
        remember=regrader.remember if regrader.recent is not None else None,
        send_logs=send_logs,
        log_forwarder=log_forwarder,
        quarantine=quarantine,
        saw_agent=watch.saw if watch is not None else None,
        here=here,
    )
    # A quarter of a second of queued grading keeps the grading processes busy while a
    # graded span waits little past the grace (bench_sidecar.py's delay rows).
    capacity = GradingCapacity(0.25, arriving_s=config.buffer.grace_s)
    pool = GradingPool(
        grading,
        grader=grader,
        offline=offline,
        stats=stats,
        capacity=capacity,
        refresh=regrader.refresh,
    )

    def probe(trace: HeldTrace, chunk: bytes, whole: bool, spans: list[SpanFacts]) -> set[bytes]:
        return agent_probe(trace, chunk, whole, spans, keep=not offline.running)

    buffer = TraceBuffer(
        config.buffer,
        probe=probe,
        release=pool.submit,
        fair_key="ingest-token" if token is not None else None,
    )
    requests = RequestPath(
        buffer=buffer,
        forwarder=forwarder,
        stats=stats,
        wal=wal,
        submit=pool.submit,
        retry_after_s=fwd.retry_after_s,
        max_backlog_spans=grading.max_backlog_spans,
        unready_after_s=fwd.unready_after_s,
        declared=declared_marks(policy),
        capacity=capacity,
    )
    signals = SignalPaths(
        buffer=buffer,
        logs=log_forwarder,
        metrics=metrics_forwarder,
        stats=stats,
        wal=wal,
        submit=pool.submit,
        retry_after_s=fwd.retry_after_s,
        closing=lambda: requests.closing,
    )
    tls = (
        TlsFiles(rc.tls_cert_file, rc.tls_key_file, rc.tls_client_ca_file)
        if rc.tls_cert_file is not None and rc.tls_key_file is not None
        else None
    )
    api = GraderApi(
        grade_run=grader.grade_run_bounded,
        store=lambda: store.opened if store is not None else None,
        policy=policy,
        content=config.content,
        model_reasons=0 if gate is None else 2 if gate.appropriate else 1,
        max_concurrent=rc.grader_workers,
        max_request_bytes=rc.grpc_max_recv_bytes,
    )

    def add_grader_api(server: Any) -> None:
        grader_pb2_grpc.add_GraderServicer_to_server(api, server)  # type: ignore[no-untyped-call]

    grpc = GrpcReceiver(
        rc.grpc_endpoint,
        requests.accept,
        accept_logs=signals.accept_logs,
        accept_metrics=signals.accept_metrics,
        on_oversize=signals.oversize,
        max_recv_bytes=rc.grpc_max_recv_bytes,
        read_cap_bytes=rc.grpc_read_cap_bytes,
        workers=rc.grpc_workers + rc.grader_workers,
        add_services=[add_grader_api],
        tls=tls,
        token=token,
        grader_token=TokenCheck(read_token(rc.grader_token_file))
        if rc.grader_token_file is not None
        else None,
        on_rejection=stats.reject,
    )
    http = HttpReceiver(
        rc.http_endpoint,
        requests.accept,
        accept_logs=signals.accept_logs,
        accept_metrics=signals.accept_metrics,
        on_oversize=signals.oversize,
        max_body_bytes=rc.http_max_body_bytes,
        max_json_bytes=rc.http_max_json_bytes,
        workers=rc.http_workers,
        max_connections=rc.http_max_connections,
        max_per_peer=rc.http_max_per_peer,
        header_timeout_s=rc.http_header_timeout_s,
        body_timeout_s=rc.http_body_timeout_s,
        max_concurrent_decodes=rc.max_concurrent_decodes,
        ready=_readiness(config, requests, grader, store, watch),
        on_rejection=stats.reject,
        tls=tls,
        token=token,
    )

    def warn_exposure() -> None:
        for warning in (
            exposure_warning(
                (rc.grpc_endpoint, rc.http_endpoint), tls=tls is not None, token=token is not None
            ),
            metrics_exposure_warning(config.telemetry.prometheus),
        ):
            if warning:
                log.warning(warning)

    order = [Part("buffer dir", buffer_dir)]
    if store is not None:
        order.append(Part("store", store))
    order.append(Part("telemetry", telemetry))
    if evaluation_logs is not None:
        order.append(Part("evaluation logs", evaluation_logs, ALSO_FLUSHED_S))
    order += [
        Part("metrics forwarder", metrics_forwarder, ALSO_FLUSHED_S),
        Part("logs forwarder", log_forwarder, ALSO_FLUSHED_S),
        Part("forwarder", forwarder),
        Part("grading processes", offline),
        Part("grading pool", pool),
        Part("trace buffer", buffer),
        Part("replay", Hook(start=replay)),
        Part("exposure warnings", Hook(start=warn_exposure)),
        Part("gRPC receiver", grpc),
        Part("HTTP receiver", http),
        Part("intake", requests),
    ]
    return Parts(
        stats=stats,
        buffer_dir=buffer_dir,
        store=store,
        telemetry=telemetry,
        evaluation_logs=evaluation_logs,
        forwarder=forwarder,
        log_forwarder=log_forwarder,
        metrics_forwarder=metrics_forwarder,
        gate=gate,
        offline=offline,
        grader=grader,
        regrader=regrader,
        pool=pool,
        buffer=buffer,
        requests=requests,
        signals=signals,
        grpc=grpc,
        http=http,
        order=tuple(order),
    )


def _gate(config: ServiceConfig, judge: Judge | None) -> ModelGate | None:
    """The model budget (`grading.model`), when a judge was loaded."""
    if judge is None:
        return None
    model = config.grading.model
    return ModelGate(
        judge,
        sample_rate=model.sample_rate,
        calls_per_minute=model.calls_per_minute,
        max_concurrency=model.max_concurrency,
        appropriate=model.appropriate,
    )


def _readiness(
    config: ServiceConfig,
    requests: RequestPath,
    grader: TraceGrader,
    store: StorePart | None,
    watch: PolicyWatch | None,
) -> Callable[[], tuple[bool, str]]:
    """/readyz: the request path's reasons, a full queue of writes to the store, and
    grading that makes no progress (a trace past its budget that could not be stopped:
    one graded in this process, with `grading.processes: 0` or model checks on)."""

    def ready() -> tuple[bool, str]:
        ready, why = requests.ready()
        if ready:
            stalled = grader.stalled_s()
            if stalled > config.grading.budget_s + 1.0:
                return False, f"grading has made no progress for {stalled:.0f}s"
        backlog = getattr(store, "backlog", None)
        if ready and backlog is not None:
            full = backlog()
            if full is not None:
                return False, full
        if ready and watch is not None and watch.detail:
            return True, f"ready; {watch.detail}"
        return ready, why

    return ready
