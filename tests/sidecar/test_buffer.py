"""When held traces are released: agent span + grace, idle timeout, limits; late spans."""

from __future__ import annotations

from attest_otel.sidecar import wire
from attest_otel.sidecar.buffer import BufferLimits, HeldTrace, TraceBuffer


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _group(*spans: tuple[bytes, bytes]) -> wire.ScopeGroup:
    """Spans as (trace id, marker); the marker is what the fake probe looks for."""
    refs = [(tid, b"x", wire.field_bytes(0x12, b"\x0a\x10" + tid + marker))
            for tid, marker in spans]
    return wire.ScopeGroup(b"", b"", refs)


def _buffer(clock: Clock, **limits: float) -> tuple[TraceBuffer, list[HeldTrace], list[int]]:
    released: list[HeldTrace] = []
    probes: list[int] = []

    def probe(trace: HeldTrace, chunk: bytes, whole: bool) -> bool:
        probes.append(len(chunk))
        return b"AGENT" in chunk

    settings = {"grace_s": 1.0, "idle_timeout_s": 10.0, **limits}
    buf = TraceBuffer(BufferLimits(**settings), probe=probe,  # type: ignore[arg-type]
                      release=released.extend, clock=clock)
    return buf, released, probes


A = b"A" * 16
B = b"B" * 16


def test_a_trace_with_an_agent_span_is_released_a_grace_after_its_last_span() -> None:
    clock = Clock()
    buf, released, _ = _buffer(clock)
    buf.route([_group((A, b"tool"))], {A}, record=None)
    clock.now += 0.5
    buf.route([_group((A, b"AGENT"))], set(), record=None)  # held trace: no GenAI test needed
    clock.now += 0.9
    buf.tick()
    assert released == []
    clock.now += 0.2
    buf.tick()
    assert [t.reason for t in released] == ["complete"]
    assert released[0].spans == 2 and buf.held_spans == 0 and buf.held_bytes == 0


def test_a_trace_without_an_agent_span_waits_for_the_idle_timeout() -> None:
    clock = Clock()
    buf, released, probes = _buffer(clock)
    buf.route([_group((A, b"tool"))], {A}, record=None)
    clock.now += 1.1
    buf.tick()
    assert released == [] and len(probes) == 1
    clock.now += 5
    buf.route([_group((A, b"tool2"))], set(), record=None)
    clock.now += 1.1
    buf.tick()
    assert released == [] and len(probes) == 2  # only the new bytes are probed again
    assert probes[1] < probes[0] + 40
    clock.now += 9
    buf.tick()
    assert [t.reason for t in released] == ["idle"]


def test_at_the_limits_the_oldest_traces_are_released_early_and_nothing_is_dropped() -> None:
    clock = Clock()
    buf, _, _ = _buffer(clock, max_traces=2)
    ids = [bytes([i]) * 16 for i in range(5)]
    early: list[HeldTrace] = []
    for tid in ids:
        clock.now += 0.01
        early += buf.route([_group((tid, b"tool"))], {tid}, record=None).released
    assert [t.trace_id for t in early] == ids[:3]
    assert all(t.reason == "limit" for t in early)
    assert buf.held_traces == 2


def test_spans_of_a_graded_trace_are_late_and_pass_through() -> None:
    clock = Clock()
    buf, released, _ = _buffer(clock)
    buf.route([_group((A, b"AGENT"))], {A}, record=None)
    clock.now += 2
    buf.tick()
    buf.tick()
    assert len(released) == 1
    routed = buf.route([_group((A, b"late"), (B, b"plain"))], {A}, record=None)
    assert (routed.late_spans, routed.held_spans, routed.passthrough_spans) == (1, 0, 2)
    assert buf.held_traces == 0


def test_release_all_takes_every_trace_out_for_shutdown() -> None:
    clock = Clock()
    buf, _, _ = _buffer(clock)
    buf.route([_group((A, b"t"), (B, b"t"))], {A, B}, record=7)
    out = buf.release_all()
    assert sorted(t.trace_id for t in out) == [A, B]
    assert all(t.reason == "shutdown" and t.records == [7] for t in out)
    assert buf.held_traces == 0
