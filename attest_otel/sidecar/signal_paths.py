"""The request path of OTLP logs and metrics: what the receivers call for those signals.

Apps send all three signals to one endpoint, and content often travels in log records
(`gen_ai.client.inference.operation.details` and the older per-message events), so a
sidecar that took traces alone would grade runs without their content. Log records of a
held trace (or GenAI-looking ones of a trace not seen yet) are held with it
(`TraceBuffer.route_logs`), read with its spans and forwarded after them; every other log
record, and every metrics request, goes on at once. Both take the same steps as traces
(`requests.RequestPath`): shutdown and forward-queue checks, the durable log (`log_wire.tag`
marks the signal), and a "retry later" rather than a loss.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)

from attest_otel.sidecar.buffer import HeldTrace, TraceBuffer
from attest_otel.sidecar.forward import Forwarder, ForwardItem
from attest_otel.sidecar.log_wire import (
    LOGS,
    METRICS,
    is_genai_record,
    refused_trace_ids,
    split_logs,
    tag,
)
from attest_otel.sidecar.receivers import OK, Outcome
from attest_otel.sidecar.stats import SidecarStats
from attest_otel.sidecar.wal import DurableLog
from attest_otel.sidecar.wire import WireError, check_message, encode_groups

__all__ = ["SignalPaths"]

log = logging.getLogger(__name__)

LATE_LOG_EVERY_S = 10.0


class SignalPaths:
    """`accept_logs` / `accept_metrics` for the receivers, `replay` for the durable log."""

    def __init__(
        self,
        *,
        buffer: TraceBuffer,
        logs: Forwarder,
        metrics: Forwarder,
        stats: SidecarStats,
        wal: DurableLog | None,
        submit: Callable[[list[HeldTrace]], None],
        retry_after_s: float,
        closing: Callable[[], bool],
    ) -> None:
        self.buffer = buffer
        self.logs = logs
        self.metrics = metrics
        self.stats = stats
        self.wal = wal
        self.submit = submit
        self.retry_after_s = retry_after_s
        self.closing = closing
        self._late_logged = 0.0
        self._late_unlogged = 0

    def _admit(self, signal: str, forwarder: Forwarder, items: int, data: bytes) -> Outcome | int:
        """The checks every request takes before it is acknowledged; the durable-log record
        id (-1 without one), or the refusal."""
        if self.closing():
            self.stats.reject("shutting_down")
            return Outcome("closing", "the sidecar is shutting down; retry", self.retry_after_s)
        if not forwarder.has_room(items, len(data)):
            self.stats.reject("queue_full")
            return Outcome("full", f"{signal} forward queue full; retry later", self.retry_after_s)
        if self.wal is None:
            return -1
        tagged = tag(signal, data)
        if self.wal.replayed_copy(tagged):
            return OK  # routed already, from the buffer dir's replay (wal.py)
        try:
            return self.wal.append(tagged)
        except OSError as e:
            self.stats.reject("buffer_dir_error")
            return Outcome(
                "full",
                f"cannot persist the request under --buffer-dir ({e.strerror or e}); retry later",
                self.retry_after_s,
            )

    def accept_metrics(self, data: bytes) -> Outcome:
        """One metrics request: acknowledged once queued (and persisted), sent on untouched."""
        if not data:
            return OK
        problem = check_message(data, ExportMetricsServiceRequest)
        if problem is not None:  # the next hop would refuse it for good: say so now
            self.stats.reject("malformed")
            return Outcome("malformed", f"not a valid OTLP ExportMetricsServiceRequest: {problem}")
        admitted = self._admit(METRICS, self.metrics, 1, data)
        if isinstance(admitted, Outcome):
            return admitted
        self.pass_metrics(data, admitted)
        return OK

    def pass_metrics(self, data: bytes, record: int) -> None:
        records = (record,) if record >= 0 else ()
        if self.wal is not None and record >= 0:
            self.wal.hold(record, 1)
            self.wal.unpin(record)
        self.metrics.offer(ForwardItem(data, 1, records, mergeable=False))
        self.stats.add(metrics_requests=1)

    def accept_logs(self, data: bytes) -> Outcome:
        """One logs request (protobuf bytes, already inflated). Never raises."""
        if not data:
            return OK
        problem = check_message(data, ExportLogsServiceRequest)
        if problem is not None:  # the next hop would refuse it for good: say so now
            self.stats.reject("malformed")
            return Outcome("malformed", f"not a valid OTLP ExportLogsServiceRequest: {problem}")
        try:
            groups = split_logs(data)
        except WireError as e:
            self.stats.reject("malformed")
            return Outcome("malformed", f"not an OTLP ExportLogsServiceRequest: {e}")
        count = sum(len(group.spans) for group, _ in groups)
        if count == 0:
            return OK
        admitted = self._admit(LOGS, self.logs, count, data)
        if isinstance(admitted, Outcome):
            return admitted
        self.route_logs(data, admitted)
        return OK

    def route_logs(self, data: bytes, record: int) -> None:
        """Holds the log records of held (or GenAI) traces, forwards the rest now."""
        groups = split_logs(data)
        flagged = [
            (group, [is_genai_record(group, event, rec) for _tid, event, rec in group.spans])
            for group, _heads in groups
        ]
        count = sum(len(group.spans) for group, _ in groups)
        rid = record if record >= 0 else None
        routed = self.buffer.route_logs(flagged, rid)
        records = (record,) if record >= 0 else ()
        item: ForwardItem | None = None
        if routed.held_records == 0:
            item = ForwardItem(data, count, records, mergeable=False)
        elif routed.passthrough:
            item = ForwardItem(
                encode_groups(routed.passthrough), routed.passthrough_records, records
            )
        if self.wal is not None and rid is not None:
            self.wal.hold(rid, routed.traces_touched + (item is not None))
            self.wal.unpin(rid)
        if item is not None:
            self.logs.offer(item)
        self.stats.add(
            log_records_received=count,
            log_records_held=routed.held_records,
            log_records_late=routed.late_records,
        )
        if routed.late_records:
            self._late(routed.late_records)
        if routed.released:
            self.submit(routed.released)

    def _late(self, records: int) -> None:
        """Log records of a trace graded already: forwarded, but the grade was made without
        them. Said at WARNING (one line per 10 s at most), with the count."""
        now = time.monotonic()
        self._late_unlogged += records
        if now - self._late_logged < LATE_LOG_EVERY_S:
            return
        self._late_logged = now
        late, self._late_unlogged = self._late_unlogged, 0
        log.warning(
            "%d log record(s) arrived after their trace was graded: forwarded, not in its "
            "grade (raise buffer.grace_s if the logs pipeline lags the traces one)",
            late,
            extra={"log_records_late": late},
        )

    def oversize(self, signal: str, body: bytes, is_json: bool, message: str) -> None:
        """A request refused for its size: the traces it names carry it as a gap, so their
        runs say they were not received whole (and a held trace of them is graded so)."""
        ids = refused_trace_ids(signal, body, is_json)
        if not ids:
            return
        reason = f"a {signal} request of this trace was refused: {message}"
        held = self.buffer.note_refused((bytes.fromhex(t) for t in ids), reason)
        log.warning(
            "refused %s request named %d trace(s) (%d held now): their runs are graded as "
            "not received whole",
            signal,
            len(ids),
            held,
            extra={"trace_ids": ",".join(sorted(ids)[:20])},
        )

    def replay(self, signal: str, data: bytes, record: int) -> None:
        """A request of `signal` from the durable log, routed again as if it had just come."""
        if signal == METRICS:
            self.pass_metrics(data, record)
        else:
            self.route_logs(data, record)
