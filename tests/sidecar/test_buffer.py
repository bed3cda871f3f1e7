"""When held traces are released: runs complete (agent span + grace, nothing waiting for an
agent span still to come), idle timeout, limits; late spans held to be graded again."""

from __future__ import annotations

from attest_otel.sidecar import wire
from attest_otel.sidecar.buffer import HeldTrace, SpanFacts, TraceBuffer, waiting_fragments
from attest_otel.sidecar.config import BufferConfig


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _span(tid: bytes, name: bytes, sid: bytes = b"", parent: bytes = b"") -> bytes:
    """A span record as `wire.split_request` cuts it: ids, parent and name only."""
    body = wire.field_bytes(0x0A, tid)
    if sid:
        body += wire.field_bytes(0x12, sid.ljust(8, b"."))
    if parent:
        body += wire.field_bytes(0x22, parent.ljust(8, b"."))
    return wire.field_bytes(0x12, body + wire.field_bytes(0x2A, name))


def _group(*spans: tuple[bytes, bytes] | tuple[bytes, bytes, bytes, bytes]) -> wire.ScopeGroup:
    """Spans as (trace id, name[, span id, parent id]); a name with AGENT in it is what the
    fake probe calls an agent span, a name starting `execute_tool`/`chat` looks GenAI."""
    refs = [(s[0], s[1], _span(*s)) for s in spans]
    return wire.ScopeGroup(b"", b"", refs)


def _buffer(clock: Clock, **limits: float) -> tuple[TraceBuffer, list[HeldTrace], list[int]]:
    released: list[HeldTrace] = []
    probes: list[int] = []

    def probe(trace: HeldTrace, chunk: bytes, whole: bool, spans: list[SpanFacts]) -> set[bytes]:
        probes.append(len(chunk))
        return {s.span_id for s in spans if b"AGENT" in s.record}

    settings = {"grace_s": 1.0, "idle_timeout_s": 10.0, **limits}
    buf = TraceBuffer(
        BufferConfig(**settings),
        probe=probe,  # type: ignore[arg-type]
        release=released.extend,
        clock=clock,
    )
    return buf, released, probes


A = b"A" * 16
B = b"B" * 16


def _quiet(buf: TraceBuffer, clock: Clock, seconds: float) -> None:
    """Lets time pass in small steps, ticking as the ticker thread would."""
    end = clock.now + seconds
    while clock.now < end:
        clock.now = min(end, clock.now + 0.05)
        buf.tick()


def test_a_trace_with_an_agent_span_is_released_a_grace_after_its_last_span() -> None:
    clock = Clock()
    buf, released, _ = _buffer(clock)
    buf.route([_group((A, b"execute_tool t", b"t1", b"agent"))], {A}, record=None)
    clock.now += 0.5
    # held trace: no GenAI test needed
    buf.route([_group((A, b"invoke_agent AGENT", b"agent"))], set(), record=None)
    clock.now += 0.9
    buf.tick()
    assert released == []
    clock.now += 0.2
    buf.tick()
    buf.tick()
    assert [t.reason for t in released] == ["complete"]
    assert released[0].spans == 2 and buf.held_spans == 0 and buf.held_bytes == 0


def test_a_trace_without_an_agent_span_waits_for_the_idle_timeout() -> None:
    clock = Clock()
    buf, released, probes = _buffer(clock)
    buf.route([_group((A, b"execute_tool t", b"t1"))], {A}, record=None)
    clock.now += 1.1
    buf.tick()
    assert released == [] and len(probes) == 1
    clock.now += 5
    buf.route([_group((A, b"execute_tool t2", b"t2"))], set(), record=None)
    clock.now += 1.1
    buf.tick()
    assert released == [] and len(probes) == 2  # only the new bytes are probed again
    assert probes[1] < probes[0] + 40
    clock.now += 9
    buf.tick()
    assert [t.reason for t in released] == ["idle"]


def test_a_nested_run_that_arrives_first_is_held_until_the_outer_agent_span_arrives() -> None:
    """The issue's case: the sub-agent's spans are exported while the outer agent thinks on;
    the outer agent's first model call hangs under the outer agent span, not here yet."""
    clock = Clock()
    buf, released, _ = _buffer(clock)
    first = _group(
        (A, b"chat m", b"m1", b"outer"),  # the outer agent's first model call
        (A, b"chat m", b"m2", b"inner"),
        (A, b"execute_tool lookup", b"t2", b"inner"),
        (A, b"invoke_agent AGENT inner", b"inner", b"t1"),  # under the outer tool span
    )
    buf.route([first], {A}, record=None)
    _quiet(buf, clock, 4.0)  # the outer agent thinks for 4 s: far past the grace
    assert released == [] and buf.held_spans == 4
    buf.route(
        [
            _group(
                (A, b"execute_tool delegate", b"t1", b"outer"),
                (A, b"chat m", b"m3", b"outer"),
                (A, b"invoke_agent AGENT outer", b"outer"),
            )
        ],
        set(),
        record=None,
    )
    _quiet(buf, clock, 0.9)
    assert released == []
    _quiet(buf, clock, 0.2)
    assert [(t.reason, t.spans) for t in released] == [("complete", 7)]


def test_a_run_under_a_web_request_is_not_held_for_the_request_span() -> None:
    """The trace's root is an HTTP server span that ends after the agent: the agent's own
    run is complete, so the root (and a DB call under it) hold nothing."""
    clock = Clock()
    buf, released, _ = _buffer(clock)
    buf.route(
        [
            _group(
                (A, b"SELECT orders", b"db", b"http"),
                (A, b"execute_tool lookup", b"t1", b"agent"),
                (A, b"invoke_agent AGENT", b"agent", b"http"),
            )
        ],
        {A},
        record=None,
    )
    _quiet(buf, clock, 1.1)
    assert [t.reason for t in released] == ["complete"]


def test_work_waiting_for_an_agent_span_that_never_comes_is_released_at_the_idle_timeout() -> None:
    clock = Clock()
    buf, released, _ = _buffer(clock)
    buf.route(
        [
            _group(
                (A, b"chat m", b"m1", b"outer"),
                (A, b"invoke_agent AGENT inner", b"inner", b"t1"),
            )
        ],
        {A},
        record=None,
    )
    _quiet(buf, clock, 9.9)
    assert released == []
    _quiet(buf, clock, 0.2)
    assert [t.reason for t in released] == ["idle"]


def test_the_shape_survives_a_parent_loop() -> None:
    trace = HeldTrace(A, bytearray(), 0, 0, 0, 0, 0)
    trace.parents = {b"a": b"b", b"b": b"a", b"c": b"missing", b"d": b"d"}
    trace.genai = {b"a", b"c", b"d"}
    assert waiting_fragments(trace) == 1  # only c: its parent is absent
    trace.agents = {b"c"}
    assert waiting_fragments(trace) == 0


def test_at_the_limits_the_oldest_traces_are_released_early_and_nothing_is_dropped() -> None:
    clock = Clock()
    buf, _, _ = _buffer(clock, max_traces=2)
    ids = [bytes([i]) * 16 for i in range(5)]
    early: list[HeldTrace] = []
    for tid in ids:
        clock.now += 0.01
        early += buf.route([_group((tid, b"execute_tool t", b"t"))], {tid}, record=None).released
    assert [t.trace_id for t in early] == ids[:3]
    assert all(t.reason == "limit" for t in early)
    assert buf.held_traces == 2


def test_spans_of_a_graded_trace_are_held_as_late_and_released_a_grace_later() -> None:
    clock = Clock()
    buf, released, _ = _buffer(clock)
    buf.route([_group((A, b"invoke_agent AGENT", b"agent"))], {A}, record=None)
    _quiet(buf, clock, 2)
    assert [t.reason for t in released] == ["complete"]
    routed = buf.route(
        [_group((A, b"execute_tool late", b"t9", b"agent"), (B, b"GET /", b"plain"))],
        set(),
        record=None,
    )
    assert (routed.late_spans, routed.held_spans, routed.passthrough_spans) == (1, 1, 1)
    assert buf.held_traces == 1
    _quiet(buf, clock, 0.9)
    assert len(released) == 1
    _quiet(buf, clock, 0.2)
    assert [(t.reason, t.late, t.spans) for t in released[1:]] == [("late", True, 1)]
    routed = buf.route([_group((A, b"execute_tool later", b"t10", b"agent"))], set(), record=None)
    assert (routed.late_spans, routed.held_spans) == (1, 1)  # late again: still remembered


def test_release_all_takes_every_trace_out_for_shutdown() -> None:
    clock = Clock()
    buf, _, _ = _buffer(clock)
    buf.route([_group((A, b"t", b"1"), (B, b"t", b"2"))], {A, B}, record=7)
    out = buf.release_all()
    assert sorted(t.trace_id for t in out) == [A, B]
    assert all(t.reason == "shutdown" and t.records == [7] for t in out)
    assert buf.held_traces == 0
