"""Per-trace holding: spans of GenAI traces wait here until their run is complete.

There is no "trace complete" signal in OTLP (pipeline.md a.), so completeness is inferred,
as in the Collector's groupbytrace/tail_sampling processors but with one more signal:

- a trace whose *agent span* has arrived is complete once no span has arrived for
  `grace_s` (the agent span ends last in its run, and its children are usually exported
  in the same or an earlier batch; the grace catches the stragglers);
- a trace without an agent span is released `idle_timeout_s` after its last span (a run
  rooted at the trace root, or an agent still running: see the README on sizing);
- at `max_traces` / `max_spans` / `max_bytes` the oldest traces are released early, so
  memory stays bounded and nothing is dropped.

Whether a trace has an agent span is asked lazily (`probe`), when its quiet period ends,
over the spans that arrived since the last asking: the question needs the attributes
decoded, which is the expensive part of the whole sidecar, and the grader needs the same
decode anyway (the probe's parse is handed on when it covered the whole trace).

A released trace's id is remembered (`late_cache_traces`, LRU) so a span arriving after
its trace was graded is recognised as late: forwarded as it is and counted, instead of
opening a new trace and being graded as a fragment (groupbytrace's behaviour).

Spans are held as their OTLP bytes (see `wire`), about 1.05x their size on the wire.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from attest_otel.sidecar.wire import ScopeGroup, encode_groups

__all__ = ["BufferLimits", "HeldTrace", "Routed", "TraceBuffer"]

log = logging.getLogger(__name__)

REASON_COMPLETE = "complete"
REASON_IDLE = "idle"
REASON_LIMIT = "limit"
REASON_SHUTDOWN = "shutdown"


@dataclass(frozen=True, slots=True)
class BufferLimits:
    grace_s: float = 1.0
    idle_timeout_s: float = 10.0
    max_traces: int = 10_000
    max_spans: int = 200_000
    max_bytes: int = 256 * 1024 * 1024
    late_cache_traces: int = 100_000
    tick_s: float = 0.05


@dataclass(slots=True, eq=False)
class HeldTrace:
    """One trace being held. `data` is a valid `TracesData` encoding at all times."""

    trace_id: bytes
    data: bytearray
    spans: int
    first_s: float
    last_s: float
    deadline_s: float
    scheduled_s: float
    records: list[int] = field(default_factory=list)
    """Durable-log record ids this trace holds a reference to (see `wal`)."""
    checked: int = 0
    """Bytes of `data` already probed for an agent span."""
    has_agent: bool = False
    reason: str = ""
    probe: Any = None
    """What the probe parsed, when it covered all of `data` (handed on to the grader)."""

    @property
    def trace_id_hex(self) -> str:
        return self.trace_id.hex()


@dataclass(slots=True)
class Routed:
    """Where the spans of one request went."""

    passthrough: list[tuple[tuple[bytes, bytes], list[bytes]]]
    """Spans to forward now, by origin; the whole request when `held_spans` is 0."""
    passthrough_spans: int
    held_spans: int
    late_spans: int
    traces_touched: int
    """Held traces that got spans from this request (each holds a record reference)."""
    released: list[HeldTrace]
    """Traces the limits pushed out early; the caller hands them to the grader."""


Probe = Callable[[HeldTrace, bytes, bool], bool]
"""(trace, new bytes, whether they are the whole trace) -> has an agent span."""
Release = Callable[[list[HeldTrace]], None]


class TraceBuffer:
    """The trace table, its timers (one ticker thread) and the late-span memory."""

    def __init__(
        self,
        limits: BufferLimits,
        *,
        probe: Probe,
        release: Release,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limits = limits
        self._probe = probe
        self._release = release
        self._clock = clock
        self._lock = threading.Lock()
        self._traces: OrderedDict[bytes, HeldTrace] = OrderedDict()
        self._graded: OrderedDict[bytes, None] = OrderedDict()
        self._heap: list[tuple[float, int, bytes]] = []
        self._seq = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.held_spans = 0
        self.held_bytes = 0
        self.released_by_reason: dict[str, int] = {}

    # --- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(
                target=self._run, name="attest-otel-buffer", daemon=True
            )
            self._thread.start()

    def stop(self) -> None:
        """Stops the ticker; held traces stay until `release_all`."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None

    def release_all(self, reason: str = REASON_SHUTDOWN) -> list[HeldTrace]:
        """Takes every held trace out (for grading now), oldest first."""
        with self._lock:
            out = [self._take(t, reason) for t in list(self._traces.values())]
        return out

    # --- the data path ---------------------------------------------------------------------

    @property
    def held_traces(self) -> int:
        return len(self._traces)

    def is_known(self, trace_id: bytes) -> bool:
        """Held now, or graded recently (so its spans are late)."""
        return trace_id in self._traces or trace_id in self._graded

    def has_state(self) -> bool:
        return bool(self._traces) or bool(self._graded)

    def route(
        self, groups: Iterable[ScopeGroup], genai: set[bytes], record: int | None
    ) -> Routed:
        """Holds the spans of held traces and of new GenAI traces (`genai`, raw ids); the
        rest pass through. Spans of recently graded traces pass through as late."""
        passthrough: list[tuple[tuple[bytes, bytes], list[bytes]]] = []
        incoming: dict[bytes, dict[tuple[bytes, bytes], list[bytes]]] = {}
        counts: dict[bytes, int] = {}
        late = 0
        passed = 0
        held_count = 0
        released: list[HeldTrace] = []
        with self._lock:
            traces = self._traces
            graded = self._graded
            for group in groups:
                keep: list[bytes] = []
                context = group.context
                for trace_id, _name, record_bytes in group.spans:
                    if trace_id in traces or (trace_id in genai and trace_id not in graded):
                        by_origin = incoming.get(trace_id)
                        if by_origin is None:
                            by_origin = incoming[trace_id] = {}
                        spans = by_origin.get(context)
                        if spans is None:
                            by_origin[context] = [record_bytes]
                        else:
                            spans.append(record_bytes)
                        counts[trace_id] = counts.get(trace_id, 0) + 1
                        held_count += 1
                    else:
                        if trace_id in graded:
                            late += 1
                        keep.append(record_bytes)
                if keep:
                    passed += len(keep)
                    passthrough.append((context, keep))
            if incoming:
                now = self._clock()
                for trace_id, by_origin in incoming.items():
                    self._add(trace_id, encode_groups(by_origin.items()), counts[trace_id],
                              record, now)
                released = self._enforce_limits()
        return Routed(passthrough, passed, held_count, late, len(incoming), released)

    def _add(self, trace_id: bytes, data: bytes, spans: int, record: int | None,
             now: float) -> None:
        trace = self._traces.get(trace_id)
        deadline = now + self.limits.grace_s
        if trace is None:
            trace = HeldTrace(
                trace_id=trace_id,
                data=bytearray(data),
                spans=spans,
                first_s=now,
                last_s=now,
                deadline_s=deadline,
                scheduled_s=deadline,
            )
            self._traces[trace_id] = trace
            self._push(deadline, trace_id)
        else:
            trace.data += data
            trace.spans += spans
            trace.last_s = now
            trace.deadline_s = deadline
            trace.probe = None
            if deadline < trace.scheduled_s:
                trace.scheduled_s = deadline
                self._push(deadline, trace_id)
        if record is not None:
            trace.records.append(record)
        self.held_spans += spans
        self.held_bytes += len(data)

    def _push(self, when: float, trace_id: bytes) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (when, self._seq, trace_id))

    def _enforce_limits(self) -> list[HeldTrace]:
        limits = self.limits
        out: list[HeldTrace] = []
        while self._traces and (
            len(self._traces) > limits.max_traces
            or self.held_spans > limits.max_spans
            or self.held_bytes > limits.max_bytes
        ):
            oldest = next(iter(self._traces.values()))
            out.append(self._take(oldest, REASON_LIMIT))
        if out:
            log.debug("buffer limits reached: %d trace(s) released early", len(out))
        return out

    def _take(self, trace: HeldTrace, reason: str) -> HeldTrace:
        """Removes a trace (lock held) and remembers its id for late spans."""
        del self._traces[trace.trace_id]
        self.held_spans -= trace.spans
        self.held_bytes -= len(trace.data)
        trace.reason = reason
        self.released_by_reason[reason] = self.released_by_reason.get(reason, 0) + 1
        if self.limits.late_cache_traces:
            self._graded[trace.trace_id] = None
            self._graded.move_to_end(trace.trace_id)
            while len(self._graded) > self.limits.late_cache_traces:
                self._graded.popitem(last=False)
        return trace

    # --- timers ----------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.wait(self.limits.tick_s):
            try:
                self.tick()
            except Exception:
                log.exception("buffer tick failed")

    def tick(self) -> None:
        """Releases due traces; probes for agent spans where the quiet period ended."""
        due: list[HeldTrace] = []
        probes: list[tuple[HeldTrace, bytes, int, bool]] = []
        grace = self.limits.grace_s
        idle = self.limits.idle_timeout_s
        with self._lock:
            now = self._clock()
            heap = self._heap
            while heap and heap[0][0] <= now:
                when, _seq, trace_id = heapq.heappop(heap)
                trace = self._traces.get(trace_id)
                if trace is None or when != trace.scheduled_s:
                    continue  # released already, or a newer entry supersedes this one
                if trace.deadline_s > now:
                    trace.scheduled_s = trace.deadline_s
                    self._push(trace.deadline_s, trace_id)
                    continue
                if trace.has_agent:
                    due.append(self._take(trace, REASON_COMPLETE))
                elif now - trace.last_s >= idle:
                    due.append(self._take(trace, REASON_IDLE))
                else:
                    whole = trace.checked == 0
                    probes.append((trace, bytes(trace.data[trace.checked :]), len(trace.data),
                                   whole))
                    trace.scheduled_s = float("inf")  # no timer while the probe runs
        found: list[tuple[HeldTrace, int, bool]] = []
        for trace, chunk, upto, whole in probes:
            try:
                has_agent = self._probe(trace, chunk, whole)
            except Exception:
                log.exception("agent probe failed for trace %s", trace.trace_id_hex)
                has_agent = False
            found.append((trace, upto, has_agent))
        if found:
            with self._lock:
                now = self._clock()
                for trace, upto, has_agent in found:
                    if self._traces.get(trace.trace_id) is not trace:
                        continue
                    trace.checked = upto
                    if len(trace.data) != upto:
                        trace.probe = None
                    if has_agent:
                        trace.has_agent = True
                    if trace.has_agent and now - trace.last_s >= grace:
                        due.append(self._take(trace, REASON_COMPLETE))
                        continue
                    if trace.scheduled_s != float("inf"):
                        continue  # new spans arrived meanwhile and set their own timer
                    when = trace.last_s + (grace if trace.has_agent else idle)
                    trace.deadline_s = when
                    trace.scheduled_s = when
                    self._push(when, trace.trace_id)
        if due:
            self._release(due)
