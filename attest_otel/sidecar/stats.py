"""The sidecar's own metrics: counters the hot path bumps, read by observable instruments.

Nothing on the request path calls the metrics SDK: the callbacks read these counters when
the metric reader asks (every export interval or Prometheus scrape).
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

from opentelemetry.metrics import CallbackOptions, Observation

from attest_otel.sidecar.buffer import TraceBuffer
from attest_otel.sidecar.forward import Forwarder

log = logging.getLogger(__name__)


METRICS: dict[str, tuple[str, str, str]] = {
    # name: (kind, unit, description); kind "counter" (monotonic) or "gauge"
    "attest.sidecar.spans.received": ("counter", "{span}", "Spans accepted by the receivers."),
    "attest.sidecar.spans.forwarded": ("counter", "{span}", "Spans delivered downstream."),
    "attest.sidecar.spans.late": (
        "counter",
        "{span}",
        "Spans that arrived after their trace was graded (graded again with it).",
    ),
    "attest.sidecar.spans.late_ungraded": (
        "counter",
        "{span}",
        "Late spans sent as they came: their trace's graded spans were "
        "no longer kept (store off and memory full, or pruned), or regrading failed.",
    ),
    "attest.sidecar.spans.dropped": (
        "counter",
        "{span}",
        "Spans given up on, by reason (refused, shutdown, error).",
    ),
    "attest.sidecar.spans.held": ("gauge", "{span}", "Spans held in the trace buffer now."),
    "attest.sidecar.traces.held": ("gauge", "{trace}", "Traces held in the trace buffer now."),
    "attest.sidecar.traces.graded": (
        "counter",
        "{trace}",
        "Traces graded, by why they were released "
        "(complete, idle, limit, shutdown, late: late spans, graded again with the trace).",
    ),
    "attest.sidecar.traces.regraded": (
        "counter",
        "{trace}",
        "Traces graded again because spans arrived after they were graded.",
    ),
    "attest.sidecar.runs.regraded": (
        "counter",
        "{run}",
        "Runs whose grade changed when graded again with late spans (each "
        "sent as an attest.grade span and stored in place of the old grade).",
    ),
    "attest.sidecar.runs.passed_by_late_spans": (
        "counter",
        "{run}",
        "Runs that failed when graded and pass once late spans were added: each is a WARNING "
        "naming who sent the late spans (metadata.regraded on the stored grade).",
    ),
    "attest.sidecar.grade.failures": (
        "counter",
        "{trace}",
        "Traces forwarded ungraded because grading failed.",
    ),
    "attest.sidecar.traces.ungraded": (
        "counter",
        "{trace}",
        "Traces forwarded ungraded and flagged, by reason (time, memory, died: over the "
        "grading budget or the grading process lost; quarantined: broke grading before; "
        "error).",
    ),
    "attest.sidecar.queue.spans": ("gauge", "{span}", "Spans queued for forwarding."),
    "attest.sidecar.queue.size": ("gauge", "By", "Bytes queued for forwarding."),
    "attest.sidecar.forward.retries": ("counter", "{retry}", "Forwarding attempts retried."),
    "attest.sidecar.store.writes": (
        "counter",
        "{trace}",
        "Trace writes the store took (spans and grades).",
    ),
    "attest.sidecar.store.dropped": (
        "counter",
        "{trace}",
        "Trace writes refused because the store's queue was full (the "
        "database away too long); the spans were still forwarded.",
    ),
    "attest.sidecar.spans.possible_duplicates": (
        "counter",
        "{span}",
        "Spans sent again after a forward timed out: the next hop may have received them twice.",
    ),
    "attest.sidecar.log_records.received": (
        "counter",
        "{record}",
        "Log records accepted by the receivers (held with their trace or passed on).",
    ),
    "attest.sidecar.log_records.late": (
        "counter",
        "{record}",
        "Log records that arrived after their trace was graded: forwarded, not in its grade.",
    ),
    "attest.sidecar.requests.rejected": (
        "counter",
        "{request}",
        "Requests refused, by reason (queue_full, grading_busy, malformed, "
        "too_large, unsupported_media_type, length_required, shutting_down, "
        "unauthenticated, decode_busy, timeout).",
    ),
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
        self.traces_regraded = 0
        self.runs_regraded = 0
        self.runs_passed_by_late = 0
        self.late_ungraded = 0
        self.traces_ungraded: collections.Counter[str] = collections.Counter()
        self.log_records_received = 0
        self.log_records_held = 0
        self.log_records_late = 0
        self.metrics_requests = 0

    def add(self, **counts: int) -> None:
        with self._lock:
            for key, value in counts.items():
                setattr(self, key, getattr(self, key) + value)

    def reject(self, reason: str) -> None:
        with self._lock:
            self.rejections[reason] += 1

    def ungraded(self, reason: str) -> None:
        with self._lock:
            self.traces_ungraded[reason] += 1

    def graded(self, reason: str, runs: int, failed: bool) -> None:
        with self._lock:
            self.traces_graded[reason] += 1
            self.runs_graded += runs
            self.grade_failures += failed


def register_metrics(
    meter: Any,
    *,
    stats: SidecarStats,
    forwarder: Forwarder,
    buffer: TraceBuffer,
    store_writer: object | None,
) -> None:
    """Observable instruments over the counters: nothing on the hot path calls the SDK.
    `store_writer`: its `written` and `dropped` counts, when it keeps them."""

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
        "attest.sidecar.spans.late_ungraded": one(lambda: stats.late_ungraded),
        "attest.sidecar.traces.regraded": one(lambda: stats.traces_regraded),
        "attest.sidecar.runs.regraded": one(lambda: stats.runs_regraded),
        "attest.sidecar.runs.passed_by_late_spans": one(lambda: stats.runs_passed_by_late),
        "attest.sidecar.spans.dropped": by(lambda: dict(forwarder.stats.dropped).items(), "reason"),
        "attest.sidecar.spans.held": one(lambda: buffer.held_spans),
        "attest.sidecar.traces.held": one(lambda: buffer.held_traces),
        "attest.sidecar.traces.graded": by(lambda: dict(stats.traces_graded).items(), "reason"),
        "attest.sidecar.grade.failures": one(lambda: stats.grade_failures),
        "attest.sidecar.traces.ungraded": by(lambda: dict(stats.traces_ungraded).items(), "reason"),
        "attest.sidecar.queue.spans": one(lambda: forwarder.queued_spans),
        "attest.sidecar.queue.size": one(lambda: forwarder.queued_bytes),
        "attest.sidecar.forward.retries": one(lambda: forwarder.stats.retries),
        "attest.sidecar.store.writes": one(lambda: getattr(store_writer, "written", 0)),
        "attest.sidecar.store.dropped": one(lambda: getattr(store_writer, "dropped", 0)),
        "attest.sidecar.spans.possible_duplicates": one(
            lambda: forwarder.stats.possible_duplicates
        ),
        "attest.sidecar.log_records.received": one(lambda: stats.log_records_received),
        "attest.sidecar.log_records.late": one(lambda: stats.log_records_late),
        "attest.sidecar.requests.rejected": by(lambda: dict(stats.rejections).items(), "reason"),
    }
    for name, (kind, unit, description) in METRICS.items():
        callback = callbacks[name]
        if kind == "counter":
            meter.create_observable_counter(name, [callback], unit=unit, description=description)
        else:
            meter.create_observable_gauge(name, [callback], unit=unit, description=description)
