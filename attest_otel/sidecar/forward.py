"""Forwarding: OTLP out to the next hop, through a bounded queue, retried until delivered.

The queue is bounded in spans and bytes, but `offer` never refuses: the receivers ask
`has_room` *before* they accept a request and answer "try later" (gRPC UNAVAILABLE with
RetryInfo, HTTP 503 with Retry-After) when there is none, so the sender's own queue holds
the data while ours drains. Graded traces and replayed requests are always taken, since
they were accepted earlier; the bound can be overshot by what is already inside.

Items are sent by `workers` threads. A request that came in with no GenAI span is sent
alone, as the bytes it came in; graded traces are small and merged into batches of up to
`max_batch_bytes`. Anything above `max_request_bytes` (gRPC's 4 MiB default, while HTTP
accepts 20 MiB) is cut at span boundaries first.

Which answers are retried is the senders' call (`senders`: the OTLP rules). The delay is
the server's (RetryInfo / Retry-After) when given, else exponential backoff with jitter,
capped at `max_backoff_s`, with no limit on attempts: the bounded queue, not a retry
budget, is what protects memory. A batch the downstream refuses as too large is split in
halves and retried; any other refusal is final (logged and counted) because retrying it
would never succeed.
"""

from __future__ import annotations

import collections
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from attest_otel.sidecar.config import ForwardConfig
from attest_otel.sidecar.senders import (
    EXPORT_METHOD,
    RETRY_INFO_KEY,
    STATUS_DETAILS_KEY,
    Sender,
    SendResult,
    grpc_retry_delay,
    make_log_sender,
    make_metrics_sender,
    make_sender,
)
from attest_otel.sidecar.wire import split_to_size

__all__ = [
    "EXPORT_METHOD",
    "RETRY_INFO_KEY",
    "STATUS_DETAILS_KEY",
    "ForwardItem",
    "ForwardStats",
    "Forwarder",
    "SendResult",
    "Sender",
    "grpc_retry_delay",
    "make_log_sender",
    "make_metrics_sender",
    "make_sender",
]

log = logging.getLogger(__name__)

MAX_SERVER_DELAY_S = 300.0
"""A server's RetryInfo / Retry-After is followed up to this, not beyond."""
RETRY_LOG_EVERY_S = 10.0
"""One WARNING line per this many seconds while the next hop fails, however many workers
retry however often: an outage must be visible in the log, not be the log."""


@dataclass(frozen=True, slots=True)
class ForwardItem:
    data: bytes
    """An `ExportTraceServiceRequest` encoding (items concatenate into one request)."""
    spans: int
    records: tuple[int, ...] = ()
    """Durable-log records released once this item is delivered (or refused for good)."""
    mergeable: bool = True
    """False for a request forwarded as the bytes it came in: it is sent alone."""


@dataclass(slots=True)
class ForwardStats:
    """Counters read by the self-metrics; updated under the forwarder's lock."""

    spans_forwarded: int = 0
    requests_sent: int = 0
    retries: int = 0
    spans_rejected: int = 0
    """partial_success.rejected_spans from the downstream."""
    dropped: dict[str, int] = field(default_factory=dict)
    """Spans given up on, by reason (refused by the downstream, shutdown deadline)."""
    possible_duplicates: int = 0
    """Spans delivered by a retry after an attempt that timed out: the next hop may have
    them twice (OTLP's accepted trade-off; counted so it can be seen, not hidden)."""


# --- the queue and its workers ---------------------------------------------------------------


class Forwarder:
    """Bounded queue + worker threads + retry. See the module docstring."""

    def __init__(
        self,
        settings: ForwardConfig,
        *,
        on_done: Callable[[tuple[int, ...]], None] | None = None,
        sender_factory: Callable[[ForwardConfig], Sender] = make_sender,
    ) -> None:
        self.settings = settings
        self.stats = ForwardStats()
        self._on_done = on_done
        self._sender_factory = sender_factory
        self._queue: collections.deque[ForwardItem] = collections.deque()
        self._cond = threading.Condition()
        self._queued_spans = 0
        self._queued_bytes = 0
        self._inflight = 0
        self._closing = False
        self._abort = threading.Event()
        self._threads: list[threading.Thread] = []
        self._senders: list[Sender] = []
        self._failing_since: float | None = None
        self._last_error = ""
        self._retry_logged_at = 0.0
        self._retries_unlogged = 0
        self._undelivered = {"kept": 0, "lost": 0}
        """Spans given up on at shutdown: kept in the durable buffer, or lost."""

    # --- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        if self._threads:
            return
        for i in range(self.settings.workers):
            sender = self._sender_factory(self.settings)
            self._senders.append(sender)
            thread = threading.Thread(
                target=self._work, args=(sender,), name=f"attest-otel-forward-{i}", daemon=True
            )
            thread.start()
            self._threads.append(thread)

    def flush(self, timeout_s: float) -> bool:
        """Waits up to `timeout_s` until everything queued was sent."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._queue or self._inflight:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(min(remaining, 0.1))
        return True

    def failing(self) -> tuple[float, str] | None:
        """(seconds since the next hop last took a request and has failed since, the last
        error), or None while it takes them: what `/readyz` reports."""
        since = self._failing_since
        if since is None:
            return None
        return time.monotonic() - since, self._last_error

    def shutdown(self, timeout_s: float) -> bool:
        """Sends what is queued for up to `timeout_s`, then stops; True if all was delivered.

        What is not delivered by then is counted as dropped (`shutdown`) and said in one
        WARNING with its count: with a durable buffer it is not released and comes back on
        the next start, else it is lost. While the next hop is failing and everything queued
        is in the durable buffer, waiting out the deadline would only delay the stop, so
        the wait is one second.
        """
        deadline = time.monotonic() + timeout_s
        with self._cond:
            durable = all(i.records for i in self._queue)
        if self._failing_since is not None and durable:
            deadline = min(deadline, time.monotonic() + 1.0)
        delivered = self.flush(deadline - time.monotonic())
        with self._cond:
            self._closing = True
            for item in self._queue:
                self._undelivered["kept" if item.records else "lost"] += item.spans
            left = sum(i.spans for i in self._queue)
            if left:
                self.stats.dropped["shutdown"] = self.stats.dropped.get("shutdown", 0) + left
            self._queue.clear()
            self._cond.notify_all()
        self._abort.set()
        for thread in self._threads:
            thread.join(max(0.1, deadline - time.monotonic()))
        kept, lost = self._undelivered["kept"], self._undelivered["lost"]
        if kept or lost:
            where = f"{self.settings.endpoint} ({self._last_error or 'no answer in time'})"
            if lost:
                log.warning(
                    "forward: %d span(s) LOST: not delivered to %s by the shutdown "
                    "deadline; --buffer-dir keeps them for the next start",
                    lost,
                    where,
                    extra={"spans_lost": lost},
                )
            if kept:
                log.warning(
                    "forward: %d span(s) not delivered to %s by the shutdown deadline; "
                    "kept in the buffer dir for the next start",
                    kept,
                    where,
                    extra={"spans_kept": kept},
                )
        for sender in self._senders:
            try:
                sender.close()
            except Exception:
                log.debug("closing a sender failed", exc_info=True)
        self._threads.clear()
        return delivered

    # --- the data path ---------------------------------------------------------------------

    def has_room(self, spans: int = 0, size: int = 0) -> bool:
        """Whether a request of `spans` / `size` may be accepted now."""
        return (
            self._queued_spans + spans <= self.settings.max_queue_spans
            and self._queued_bytes + size <= self.settings.max_queue_bytes
        ) or (self._queued_spans == 0)

    def offer(self, item: ForwardItem) -> None:
        with self._cond:
            if self._closing:
                self.stats.dropped["shutdown"] = self.stats.dropped.get("shutdown", 0) + item.spans
                log.warning("forward: %d span(s) offered after shutdown", item.spans)
                return
            self._queue.append(item)
            self._queued_spans += item.spans
            self._queued_bytes += len(item.data)
            self._cond.notify()

    @property
    def queued_spans(self) -> int:
        return self._queued_spans

    @property
    def queued_bytes(self) -> int:
        return self._queued_bytes

    def _take(self) -> list[ForwardItem] | None:
        with self._cond:
            while not self._queue:
                if self._closing:
                    return None
                self._cond.wait()
            first = self._queue.popleft()
            batch = [first]
            if first.mergeable:
                size = len(first.data)
                limit = self.settings.max_batch_bytes
                while self._queue and self._queue[0].mergeable:
                    nxt = self._queue[0]
                    if size + len(nxt.data) > limit:
                        break
                    batch.append(self._queue.popleft())
                    size += len(nxt.data)
            self._inflight += 1
            return batch

    def _work(self, sender: Sender) -> None:
        while True:
            batch = self._take()
            if batch is None:
                return
            spans = sum(i.spans for i in batch)
            size = sum(len(i.data) for i in batch)
            data = batch[0].data if len(batch) == 1 else b"".join(i.data for i in batch)
            try:
                delivered = self._deliver(sender, data, spans)
            except Exception:
                if self._abort.is_set():
                    # Shutdown closed the channel under the send: not delivered, so its
                    # durable records stay for the next start (counted below as kept).
                    delivered = False
                else:
                    log.exception("forward: unexpected error; %d span(s) dropped", spans)
                    delivered = True
                    self._drop(spans, "error")
            if not delivered:
                self._drop(spans, "shutdown")
                with self._cond:
                    durable = all(i.records for i in batch)
                    self._undelivered["kept" if durable else "lost"] += spans
            records = tuple(r for i in batch for r in i.records)
            if delivered and records and self._on_done is not None:
                try:
                    self._on_done(records)
                except Exception:
                    log.exception("forward: releasing durable records failed")
            with self._cond:
                self._queued_spans -= spans
                self._queued_bytes -= size
                self._inflight -= 1
                self._cond.notify_all()

    def _drop(self, spans: int, reason: str) -> None:
        with self._cond:
            self.stats.dropped[reason] = self.stats.dropped.get(reason, 0) + spans

    def _deliver(self, sender: Sender, data: bytes, spans: int) -> bool:
        """Sends `data` until it is delivered or refused for good (True), or until shutdown
        gives up on it (False: its durable records stay for the next start)."""
        limit = self.settings.max_request_bytes
        pending = split_to_size(data, limit) if len(data) > limit else [data]
        total = len(data) or 1
        attempt = 0
        uncertain = False
        while pending:
            piece = pending.pop()
            piece_spans = max(1, round(spans * len(piece) / total)) if spans else 0
            result = sender.send(piece, self.settings.timeout_s)
            uncertain = uncertain or result.maybe_delivered
            if result.ok:
                attempt = 0
                self._recovered()
                with self._cond:
                    if uncertain:
                        self.stats.possible_duplicates += piece_spans
                    self.stats.requests_sent += 1
                    self.stats.spans_forwarded += piece_spans - result.rejected_spans
                    self.stats.spans_rejected += result.rejected_spans
                if result.rejected_spans:
                    log.warning(
                        "forward: downstream rejected %d span(s): %s",
                        result.rejected_spans,
                        result.error,
                    )
                continue
            if result.too_large and len(piece) > 1024:
                halves = split_to_size(piece, len(piece) // 2 + 1)
                if len(halves) > 1:
                    log.info(
                        "forward: %s; splitting %d bytes in %d",
                        result.error,
                        len(piece),
                        len(halves),
                    )
                    pending.extend(halves)
                    continue
            if not result.retryable:
                log.error(
                    "forward: downstream refused %d span(s) for good (%s)",
                    piece_spans,
                    result.error,
                )
                self._drop(piece_spans, "refused")
                continue
            if self._abort.is_set():
                pending.append(piece)
                return False
            delay = result.retry_after_s
            if delay is None:
                base = min(
                    self.settings.max_backoff_s, self.settings.initial_backoff_s * (2**attempt)
                )
                delay = base * random.uniform(0.8, 1.2)
            else:  # the server knows best, within reason
                delay = min(delay, MAX_SERVER_DELAY_S)
            attempt += 1
            self._retrying(result.error, attempt, delay)
            pending.append(piece)
            if self._abort.wait(delay):
                return False
        return True

    def _retrying(self, error: str, attempt: int, delay: float) -> None:
        now = time.monotonic()
        with self._cond:
            self.stats.retries += 1
            self._last_error = error
            if self._failing_since is None:
                self._failing_since = now
            if now - self._retry_logged_at < RETRY_LOG_EVERY_S:
                self._retries_unlogged += 1
                return
            self._retry_logged_at = now
            unlogged, self._retries_unlogged = self._retries_unlogged, 0
            failing_s = now - self._failing_since
        more = f" ({unlogged} more retries since the last line)" if unlogged else ""
        log.warning(
            "forward: %s; retry %d in %.2fs, failing for %.0fs%s",
            error,
            attempt,
            delay,
            failing_s,
            more,
        )

    def _recovered(self) -> None:
        if self._failing_since is None:
            return
        with self._cond:
            since, self._failing_since = self._failing_since, None
            self._retry_logged_at = 0.0
            self._retries_unlogged = 0
        if since is not None:
            log.info(
                "forward: %s takes requests again after %.1fs",
                self.settings.endpoint,
                time.monotonic() - since,
            )
