"""Forwarding: retry rules, server-given delays, splitting, the bounded queue."""

from __future__ import annotations

import threading
import time

from attest_otel.sidecar.config import ForwardConfig
from attest_otel.sidecar.forward import Forwarder, ForwardItem
from attest_otel.sidecar.senders import SendResult, parse_retry_after
from tests.sidecar.test_wire import _request


class ScriptedSender:
    """Answers from a script (then OK), recording what it was sent and when."""

    def __init__(self, script: list[SendResult]) -> None:
        self.script = list(script)
        self.sent: list[tuple[float, bytes]] = []
        self.lock = threading.Lock()

    def send(self, data: bytes, timeout_s: float) -> SendResult:
        with self.lock:
            self.sent.append((time.monotonic(), data))
            return self.script.pop(0) if self.script else SendResult(True)

    def close(self) -> None:
        pass


def _forwarder(sender: ScriptedSender, done: list[tuple[int, ...]], **kw: object) -> Forwarder:
    settings = ForwardConfig(
        endpoint="unused:1", workers=1, initial_backoff_s=0.05, max_backoff_s=0.2, **kw
    )  # type: ignore[arg-type]
    fwd = Forwarder(settings, on_done=done.append, sender_factory=lambda s: sender)
    fwd.start()
    return fwd


def test_retryable_failures_are_retried_with_the_servers_delay() -> None:
    sender = ScriptedSender(
        [SendResult(False, retryable=True, retry_after_s=0.3), SendResult(False, retryable=True)]
    )
    done: list[tuple[int, ...]] = []
    fwd = _forwarder(sender, done)
    fwd.offer(ForwardItem(b"\x0a\x00", 1, (7,)))
    assert fwd.shutdown(5)
    times = [t for t, _ in sender.sent]
    assert len(times) == 3 and times[1] - times[0] >= 0.29
    assert done == [(7,)] and fwd.stats.retries == 2 and fwd.stats.spans_forwarded == 1


def test_a_final_refusal_is_dropped_counted_and_released() -> None:
    sender = ScriptedSender([SendResult(False, retryable=False, error="HTTP 400")])
    done: list[tuple[int, ...]] = []
    fwd = _forwarder(sender, done)
    fwd.offer(ForwardItem(b"\x0a\x00", 3, (1,)))
    fwd.shutdown(5)
    assert fwd.stats.dropped == {"refused": 3} and done == [(1,)]


def test_too_large_batches_are_split_in_halves() -> None:
    data = _request(n_resources=1, n_spans=40)
    sender = ScriptedSender([SendResult(False, too_large=True)])
    fwd = _forwarder(sender, [])
    fwd.offer(ForwardItem(data, 40))
    fwd.shutdown(5)
    assert len(sender.sent) >= 3 and all(len(d) < len(data) for _, d in sender.sent[1:])


def test_graded_items_are_batched_and_pass_through_requests_go_alone() -> None:
    sender = ScriptedSender([SendResult(False, retryable=True)])  # hold the worker a moment
    fwd = _forwarder(sender, [], max_batch_bytes=100)
    fwd.offer(ForwardItem(b"\x0a\x00", 1))
    for _ in range(5):
        fwd.offer(ForwardItem(b"\x0a\x10" + b"\x00" * 16, 1))
    fwd.offer(ForwardItem(b"\x0a\x00", 1, mergeable=False))
    fwd.shutdown(5)
    sizes = [len(d) for _, d in sender.sent]
    assert sizes[0] == sizes[1] == 2 + 5 * 18  # the first batch merged what had queued
    assert sizes[-1] == 2


def test_the_queue_bound_is_in_spans_and_bytes_and_an_empty_queue_takes_anything() -> None:
    sender = ScriptedSender([SendResult(False, retryable=True, retry_after_s=5)])
    fwd = _forwarder(sender, [], max_queue_spans=10, max_queue_bytes=1000)
    assert fwd.has_room(50, 10**6)  # empty: a big request is not refused forever
    fwd.offer(ForwardItem(b"\x0a\x00", 8))
    assert fwd.has_room(2, 10) and not fwd.has_room(3, 10) and not fwd.has_room(1, 999)
    fwd.shutdown(0.3)
    assert fwd.stats.dropped == {"shutdown": 8}


def test_retry_after_reads_seconds_and_http_dates() -> None:
    assert parse_retry_after("3") == 3.0
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0
    assert parse_retry_after("soon") is None
