"""`attest-otel serve`: receivers -> buffer -> adapt -> grade -> annotate -> forward.

    OTLP gRPC / HTTP ──► RequestPath.accept ──► [durable log, fsync] ──► answer the sender
                              │
                              ├── no GenAI trace in it ──────────────► Forwarder (same bytes)
                              └── spans of GenAI traces ──► TraceBuffer
                                      (agent span + grace | idle | limits)
                                                   │
                                        grading pool (threads, processes)
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
raising every problem at once before a file, thread or port is opened; then every
component is built from its own section of the config (`parts`). This module only wires:
`Service.start()` starts the components in order and `Service.shutdown(timeout_s)` shuts
them down in reverse within the time given (`lifecycle`): stop accepting, grade what is
held, forward and flush.
"""

from __future__ import annotations

import logging
import threading

from attest_otel.grade.questions import Judge
from attest_otel.policy import Policy
from attest_otel.sidecar.config import ServiceConfig, parse_host_port
from attest_otel.sidecar.forward import ForwardItem
from attest_otel.sidecar.lifecycle import Lifecycle
from attest_otel.sidecar.loading import load_grading
from attest_otel.sidecar.log_wire import LOGS, METRICS, TRACES, untag
from attest_otel.sidecar.parts import build_parts
from attest_otel.sidecar.wire import split_request
from attest_otel.store import redact

__all__ = ["Service", "build_service"]

log = logging.getLogger(__name__)


class Service:
    """The running sidecar. Build it with `build_service`."""

    def __init__(
        self, config: ServiceConfig, *, policy: Policy | None = None, judge: Judge | None = None
    ) -> None:
        """`policy` and `judge` as `build_service` loaded and checked them (None: none)."""
        self.config = config
        self.policy = policy
        self.parts = build_parts(config, policy=policy, judge=judge, replay=self._replay)
        parts = self.parts
        self.stats = parts.stats
        self.requests = parts.requests
        self.forwarder = parts.forwarder
        self.gate = parts.gate
        self.store = parts.store
        self.lifecycle = Lifecycle(parts.order)
        self._started = False
        self._stopped = threading.Event()
        self._shutdown_lock = threading.Lock()

    def start(self) -> None:
        """Starts every component in order (`parts`); a failure undoes what started."""
        if self._started:
            return
        self._started = True
        # Undoing a start that failed: its error is the one line the user sees, so the
        # shutdown's own INFO lines stay out of it.
        level = log.level
        log.setLevel(max(level, logging.WARNING))
        try:
            self.lifecycle.start()
        except BaseException:
            self._stopped.set()
            raise
        finally:
            log.setLevel(level)
        rc, parts = self.config.receivers, self.parts
        log.info(
            "attest-otel sidecar started",
            extra={
                "grpc": f"{parse_host_port(rc.grpc_endpoint)[0]}:{parts.grpc.port}",
                "http": f"{parse_host_port(rc.http_endpoint)[0]}:{parts.http.port}",
                "forward": f"{self.config.forward.endpoint} ({self.config.forward.protocol})",
                "store": (
                    redact(self.config.store.url or self.config.store.path)
                    if self.config.store.enabled
                    else "off"
                ),
                "buffer_dir": str(self.config.buffer.dir) if self.config.buffer.dir else "off",
                "model_checks": "on" if self.gate is not None else "off",
                "prometheus": parts.telemetry.prometheus_url or "off",
            },
        )

    def _replay(self) -> None:
        """What the buffer dir kept from an earlier run, routed again as if just received."""
        buffer_dir = self.parts.buffer_dir
        wal = buffer_dir.wal
        replay, buffer_dir.replay = buffer_dir.replay, []
        if wal is None:
            return
        parts = self.parts
        for record, raw in replay:
            signal, data = untag(raw)
            try:
                if signal != TRACES:
                    parts.signals.replay(signal, data, record)
                    continue
                groups = split_request(data)
                spans = sum(len(g.spans) for g in groups)
                parts.requests.route(data, groups, spans, record)
            except Exception:
                log.exception("buffer-dir: could not route a replayed request; forwarding it as is")
                wal.hold(record)
                wal.unpin(record)
                forwarder = {LOGS: parts.log_forwarder, METRICS: parts.metrics_forwarder}.get(
                    signal, parts.forwarder
                )
                forwarder.offer(ForwardItem(data, 0, (record,), mergeable=False))

    def wait(self, timeout_s: float | None = None) -> bool:
        """Blocks until `shutdown` has finished (True) or the timeout passes."""
        return self._stopped.wait(timeout_s)

    def shutdown(self, timeout_s: float) -> bool:
        """Stops accepting, grades what is held, forwards and flushes within `timeout_s`;
        idempotent. True when everything accepted was delivered in time."""
        with self._shutdown_lock:
            if self._stopped.is_set():
                return True
            parts = self.parts
            log.info(
                "shutting down",
                extra={"deadline_s": timeout_s, "held_traces": parts.buffer.held_traces},
            )
            delivered = self.lifecycle.shutdown(timeout_s)
            s, fs = self.stats, parts.forwarder.stats
            log.info(
                "stopped",
                extra={
                    "spans_received": s.spans_received,
                    "spans_forwarded": fs.spans_forwarded,
                    "spans_late": s.spans_late,
                    "late_ungraded": s.late_ungraded,
                    "traces_graded": sum(s.traces_graded.values()),
                    "traces_regraded": s.traces_regraded,
                    "grade_failures": s.grade_failures,
                    "possible_duplicates": fs.possible_duplicates,
                    "delivered_all": delivered,
                },
            )
            self._stopped.set()
            return delivered


def build_service(config: ServiceConfig) -> Service:
    """The factory: every load-time check first, then a service wired from `config`, not
    started. Raises PolicyError listing every problem (exit 2 from `serve`)."""
    policy, judge = load_grading(config)  # raises before anything is opened
    return Service(config, policy=policy, judge=judge)
