"""The grade log events, sent by the sidecar itself: OTLP log records through a forwarder.

The grading process encodes each run's `gen_ai.evaluation.result` records as OTLP bytes
(`export.log_records`); this sends them to the telemetry endpoint the way spans go to the
next hop (`forward.Forwarder`: batches merged up to `max_batch_size_kib`, retries by the
OTLP rules), instead of the SDK's per-record path (a `LogRecord` object, a context and an
encode per record: about 30 us each, 60 a GenAI span). The records of one trace are one
`ResourceLogs`; consecutive ones concatenate into one request.

Log events are telemetry, not data the sidecar was trusted with: when their queue is full
(the endpoint slow or down) new records are dropped and counted, as the SDK's batch
processor does, and never push back on the senders of spans.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from attest_otel.export.log_records import logs_request
from attest_otel.export.otlp_config import resolve_endpoint, resolve_protocol
from attest_otel.sidecar.config import ForwardConfig
from attest_otel.sidecar.forward import Forwarder, ForwardItem, make_log_sender

__all__ = ["EvaluationLogs"]

log = logging.getLogger(__name__)

MAX_QUEUED_RECORDS = 20_000
"""Records waiting to be sent before new ones are dropped (the SDK's batch processor
holds 2048; a graded agent trace has a dozen)."""


class EvaluationLogs:
    """`send(records)` for the grader; `start` / `shutdown(timeout_s)` for the service."""

    def __init__(self, forward: ForwardConfig, target: Mapping[str, Any]) -> None:
        """`target`: where the telemetry goes (`targets.telemetry_target`: endpoint,
        protocol, timeout_s, headers, tls)."""

        protocol = resolve_protocol("logs", target.get("protocol"))
        tls = target.get("tls")

        def path(name: str) -> Path | None:
            value = getattr(tls, name, None)
            return Path(value) if value else None

        settings = replace(
            forward,
            endpoint=resolve_endpoint("logs", protocol, target.get("endpoint")),
            protocol=protocol,
            headers=dict(target.get("headers") or {}),
            timeout_s=float(target.get("timeout_s") or forward.timeout_s),
            workers=1,
            max_queue_spans=MAX_QUEUED_RECORDS,
            tls_ca_file=path("ca_file"),
            tls_cert_file=path("cert_file"),
            tls_key_file=path("key_file"),
        )
        self.forwarder = Forwarder(settings, sender_factory=make_log_sender)
        self.dropped = 0

    def send(self, records: list[bytes]) -> None:
        data = logs_request(records)
        if not self.forwarder.has_room(len(records), len(data)):
            self.dropped += len(records)
            if self.dropped == len(records) or self.dropped % 10_000 < len(records):
                log.warning(
                    "evaluation log records dropped: the telemetry endpoint does not "
                    "keep up (%d so far)",
                    self.dropped,
                )
            return
        self.forwarder.offer(ForwardItem(data, len(records), (), mergeable=True))

    @property
    def sent(self) -> int:
        return self.forwarder.stats.spans_forwarded

    def start(self) -> None:
        self.forwarder.start()

    def shutdown(self, timeout_s: float) -> bool:
        """Sends what is queued within `timeout_s`. True either way: log events are
        telemetry, and what was not sent is counted by the forwarder, not undelivered data."""
        self.forwarder.shutdown(timeout_s)
        return True
