"""Admission follows grading (issue 12): a burst of agent spans is refused ("retry later")
once grading cannot clear it within the grace period, and plain spans are never refused
because of it. In process, on a clock the test moves: the real request path, buffer and
forward queue, nothing started."""

from __future__ import annotations

import random

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from attest_otel.sidecar.buffer import TraceBuffer
from attest_otel.sidecar.config import BufferConfig, ForwardConfig
from attest_otel.sidecar.forward import Forwarder
from attest_otel.sidecar.requests import GradingCapacity, RequestPath
from attest_otel.sidecar.stats import SidecarStats
from tests.sidecar.test_buffer import Clock

GRACE = 0.2


def _request(spans: int, *, genai: bool, seed: int) -> bytes:
    """`spans` spans in traces of 10; GenAI ones carry `gen_ai.operation.name`."""
    rng = random.Random(seed)
    req = ExportTraceServiceRequest()
    scope = req.resource_spans.add().scope_spans.add()
    trace_id = b""
    for i in range(spans):
        if i % 10 == 0:
            trace_id = rng.randbytes(16)
        span = scope.spans.add(
            trace_id=trace_id,
            span_id=rng.randbytes(8),
            name="execute_tool lookup" if genai else "GET /orders",
        )
        key = "gen_ai.operation.name" if genai else "http.request.method"
        span.attributes.add(key=key).value.string_value = "execute_tool" if genai else "GET"
    data: bytes = req.SerializeToString()
    return data


def _path(clock: Clock, floor: int) -> tuple[RequestPath, SidecarStats, Forwarder]:
    stats = SidecarStats()
    forwarder = Forwarder(ForwardConfig(endpoint="unused:1"))
    buffer = TraceBuffer(
        BufferConfig(grace_s=GRACE, idle_timeout_s=60.0),
        probe=lambda *args: set(),
        release=lambda traces: None,
        clock=clock,
    )
    path = RequestPath(
        buffer=buffer,
        forwarder=forwarder,
        stats=stats,
        wal=None,
        submit=lambda traces: None,
        retry_after_s=0.05,
        max_backlog_spans=10**6,
        capacity=GradingCapacity(
            GRACE, arriving_s=GRACE, floor_spans=floor, cold_spans=floor, clock=clock
        ),
    )
    return path, stats, forwarder


def test_the_capacity_counts_what_arrived_within_the_grace_and_what_grading_clears() -> None:
    clock = Clock()
    capacity = GradingCapacity(0.5, arriving_s=0.5, floor_spans=100, cold_spans=1000, clock=clock)
    capacity.held(600)
    assert capacity.has_room(0) and capacity.arriving() == 600
    capacity.held(600)
    assert not capacity.has_room(0)
    clock.now += 0.6  # both arrivals are due for grading now, no longer arriving
    assert capacity.arriving() == 0
    assert capacity.has_room(1000) and not capacity.has_room(1001)
    # Busy for 0.5 s (5,000 spans), idle for 10 s, busy for 0.5 s more (5,000 spans): the
    # rate is per busy second, 10,000 spans/s, and grace + horizon (one second) of it may
    # wait; the idle gap does not lower it.
    capacity.submitted()
    clock.now += 0.5
    capacity.graded(5000, backlog=0)
    clock.now += 10
    capacity.submitted()
    clock.now += 0.5
    capacity.graded(5000, backlog=0)
    assert capacity.rate == 10_000
    assert capacity.allowed() == 10_000
    capacity.held(4000)
    assert capacity.has_room(6000) and not capacity.has_room(6001)


def test_a_burst_of_agent_spans_is_refused_once_it_exceeds_what_grading_clears() -> None:
    clock = Clock()
    path, stats, forwarder = _path(clock, floor=1000)
    answers = [path.accept(_request(300, genai=True, seed=i)).kind for i in range(6)]
    # 0, 300, 600, 900 spans waiting admit a request each; 1200 do not.
    assert answers == ["ok", "ok", "ok", "ok", "full", "full"]
    assert stats.rejections["grading_busy"] == 2
    assert path.buffer.held_spans == 1200
    # A plain request still passes, forwarded as it came, while agents are refused.
    assert path.accept(_request(300, genai=False, seed=99)).kind == "ok"
    assert stats.spans_passed == 300 and forwarder.queued_spans == 300
    # Not unready: refusing a burst is flow control, not a fault.
    assert path.ready() == (True, "")
    clock.now += GRACE + 0.01  # what arrived is grading's now, and grading took it
    assert path.accept(_request(300, genai=True, seed=7)).kind == "ok"


def test_without_a_measured_capacity_the_backlog_bound_alone_refuses() -> None:
    clock = Clock()
    path, stats, _ = _path(clock, floor=10**6)
    path.max_backlog_spans = 500
    stats.add(grading_spans=501)
    assert path.accept(_request(10, genai=True, seed=1)).kind == "full"
    assert path.accept(_request(10, genai=False, seed=2)).kind == "ok"
    assert path.ready()[0] is False


def test_a_slow_grader_is_still_given_two_large_requests() -> None:
    clock = Clock()
    capacity = GradingCapacity(0.25, arriving_s=0.2, floor_spans=1024, clock=clock)
    assert capacity.allowed() == capacity.cold_spans  # nothing measured yet
    capacity.submitted()
    clock.now += 1.0
    capacity.graded(50, backlog=10)  # 50 spans/s: 22 spans would be its 0.45 s
    assert capacity.rate == 50
    assert capacity.allowed() == 1024
