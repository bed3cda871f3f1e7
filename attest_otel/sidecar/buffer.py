"""Per-trace holding: spans of GenAI traces wait here until their run is complete.

There is no "trace complete" signal in OTLP (pipeline.md a.), so completeness is inferred,
as in the Collector's groupbytrace/tail_sampling processors but from the runs in the trace.
A run is an agent span and the spans under it (`adapt.tree`: each span belongs to its
nearest agent ancestor); the agent span ends last in its run, so a run is complete once its
agent span has arrived and `grace_s` passed without a span (the grace catches stragglers of
the same batch schedule). The held spans fall into fragments: each span hangs under its
parent while the parent is held, and a fragment's top is a span whose parent is absent. Then
a trace is complete when it has an agent span, no span arrived for `grace_s`, and no fragment
*waits*: a fragment waits when its top is not an agent span, has a parent that has not
arrived, and holds GenAI-looking spans. That is work of a run whose agent span is still
running (a multi-agent system: the sub-agent's spans are exported while the outer agent
thinks on, and the outer agent's first model call hangs under the outer agent span, not yet
here). So:

- the whole trace is held until its outermost agent span has arrived, and graded at once:
  every run graded whole, nested runs with the outer run (see below for why not in parts);
- a fragment topped by an agent span does not wait for its parent: a web request that runs
  an agent (the trace's root is not an agent span) is not held for that root;
- plain spans (a DB call under the request) with an absent parent do not hold anything;
- a trace without an agent span is released `idle_timeout_s` after its last span (a run
  rooted at the trace root, or an agent still running), and so is a trace whose waiting
  fragment's agent span does not arrive within that time;
- at `max_traces` / `max_spans` / `max_bytes` traces are released early, so memory stays
  bounded and nothing is dropped: the oldest trace of the sender (`service.name` of the
  trace's first resource) holding the most of the limit that is exceeded. One noisy sender
  therefore pushes out its own traces, not everyone else's. With an ingest token the
  sender is the token (`fair_key`), not the name a span declares for itself: anyone may
  write any `service.name`, and a key that costs nothing to change buys no fairness;
- a trace still receiving spans `max_hold_s` after its first one is released as it is
  (reason `max_hold`; later spans are late and regrade it), so a trace kept alive by a
  span a second cannot pin memory and the durable log for ever.

Why not grade a nested run as soon as it is complete and release its spans: the outer run's
grading needs the nested run's spans too (the tree decides what belongs to whom), so their
bytes would stay in memory for the trace anyway, and the trace would be graded in parts with
the bookkeeping that needs. Holding costs latency for the nested run's spans (they go out
with the outer run's), not memory the limits do not already bound.

The shape (span id -> parent id, which spans look GenAI) is read from the bytes (`wire`)
when a trace's quiet period ends, over the spans that arrived since the last look, and the
`probe` says which of them are agent spans: by an exact byte match for the common
conventions, else by decoding (the expensive part of the whole sidecar; the grader needs the
same decode anyway, and the probe's parse is handed on when it covered the whole trace).
An agent span the probe misses only makes its fragment wait longer (up to the idle
timeout), never releases a run early.

A released trace's id is remembered (`late_cache_traces`, LRU) so a span arriving after
its trace was graded is recognised as late: its spans are held as a *late* trace for
`grace_s` and released with reason `late`, and the grader grades the trace again with them
(the earlier spans come from the store), instead of opening a new trace and grading a
fragment (groupbytrace's behaviour) or forwarding them ungraded.

Spans are held as their OTLP bytes (see `wire`; docs/measurements.md, "Held spans as bytes"), and a
trace's log records likewise beside them (`route_logs`, pipeline.md a.): a record moves the
trace's last arrival like a span does, so a run's grace counts from the last of its spans or
records, and a GenAI-looking record of a trace not seen yet opens it (no agent span yet: it
waits up to the idle timeout for the spans). A request refused for its size names its
traces (`note_refused`): they carry that as a gap into grading.
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

from attest_otel.sidecar.config import BufferConfig
from attest_otel.sidecar.shape import SpanFacts, read_shape, service_name, waiting_fragments
from attest_otel.sidecar.wire import ScopeGroup, encode_groups

__all__ = [
    "HeldTrace",
    "Routed",
    "RoutedLogs",
    "SpanFacts",
    "TraceBuffer",
    "read_shape",
    "waiting_fragments",
]

log = logging.getLogger(__name__)

REASON_COMPLETE = "complete"
REASON_IDLE = "idle"
REASON_LIMIT = "limit"
REASON_SHUTDOWN = "shutdown"
REASON_LATE = "late"
REASON_MAX_HOLD = "max_hold"


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
    """Bytes of `data` whose spans are already in the shape below."""
    has_agent: bool = False
    parents: dict[bytes, bytes] = field(default_factory=dict)
    """Span id -> parent span id (b"" at a root), of the spans probed so far."""
    agents: set[bytes] = field(default_factory=set)
    """Span ids the probe said are agent spans."""
    genai: set[bytes] = field(default_factory=set)
    """Span ids that look GenAI on the wire (scope, name or attribute keys)."""
    late: bool = False
    """Spans of a trace that was graded already: released after the grace, graded again."""
    reason: str = ""
    sender: str = ""
    """`service.name` of the resource the trace's first spans came with (fair limits)."""
    probe: Any = None
    """What the probe decoded (`Decoded`), when it covered all of `data` (handed on to the
    grader)."""
    logs: bytearray = field(default_factory=bytearray)
    """The trace's log records (a `LogsData` encoding): read with its spans, forwarded after."""
    log_count: int = 0
    log_wal: list[int] = field(default_factory=list)
    """Durable-log records of the logs requests these log records came in."""
    gaps: list[str] = field(default_factory=list)
    """Why the trace was not received whole (a request of it refused): every run of it is
    told (`Run.gaps`)."""

    @property
    def trace_id_hex(self) -> str:
        return self.trace_id.hex()


@dataclass(slots=True)
class RoutedLogs:
    """Where the log records of one request went."""

    passthrough: list[tuple[tuple[bytes, bytes], list[bytes]]]
    passthrough_records: int
    held_records: int
    late_records: int
    traces_touched: int
    released: list[HeldTrace]


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


Probe = Callable[[HeldTrace, bytes, bool, list[SpanFacts]], set[bytes]]
"""(trace, new bytes, whether they are the whole trace, their spans) -> the span ids of the
agent spans among them."""
Release = Callable[[list[HeldTrace]], None]


class TraceBuffer:
    """The trace table, its timers (one ticker thread) and the late-span memory."""

    def __init__(
        self,
        limits: BufferConfig,
        *,
        probe: Probe,
        release: Release,
        clock: Callable[[], float] = time.monotonic,
        fair_key: str | None = None,
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
        self._senders: dict[str, _Holding] = {}
        self._names: dict[bytes, str] = {}
        self.fair_key = fair_key
        """The sender of every trace when senders authenticate (the ingest token's name);
        None: the self-declared `service.name`."""
        self._refused: OrderedDict[bytes, list[str]] = OrderedDict()
        """Gaps of traces not held yet (a request of theirs refused), for when they are."""

    # --- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(
                target=self._run, name="attest-otel-buffer", daemon=True
            )
            self._thread.start()

    def shutdown(self, timeout_s: float) -> bool:
        """Stops the ticker and releases every held trace for grading now (the grading
        pool, shut down next, grades or forwards them within what is left)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(min(5.0, max(0.1, timeout_s)))
            self._thread = None
        self._release(self.release_all())
        return True

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

    def none_known(self, trace_ids: Iterable[bytes]) -> bool:
        """Whether none of these traces is held or recently graded (`is_known`), checked
        under the lock that `route` holds."""
        with self._lock:
            traces = self._traces
            graded = self._graded
            return not any(t in traces or t in graded for t in trace_ids)

    def has_state(self) -> bool:
        return bool(self._traces) or bool(self._graded)

    def route(self, groups: Iterable[ScopeGroup], genai: set[bytes], record: int | None) -> Routed:
        """Holds the spans of held traces and of new GenAI traces (`genai`, raw ids); the
        rest pass through. Spans of recently graded traces are held as a late trace (to be
        graded again with the spans graded before), and counted as late."""
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
                    if trace_id in traces or trace_id in genai or trace_id in graded:
                        if trace_id in graded:
                            late += 1
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
                        keep.append(record_bytes)
                if keep:
                    passed += len(keep)
                    passthrough.append((context, keep))
            if incoming:
                now = self._clock()
                for trace_id, by_origin in incoming.items():
                    self._add(
                        trace_id,
                        encode_groups(by_origin.items()),
                        counts[trace_id],
                        record,
                        now,
                        next(iter(by_origin))[0],
                    )
                released = self._enforce_limits()
        return Routed(passthrough, passed, held_count, late, len(incoming), released)

    def route_logs(
        self,
        groups: Iterable[tuple[ScopeGroup, list[bool]]],
        record: int | None,
    ) -> RoutedLogs:
        """Holds the log records of held traces, and the GenAI-looking ones (the flag beside
        each record) of traces not seen yet: their spans may still come, and the run is read
        with both. Records of a recently graded trace go on at once (late), like the rest:
        the grade was made without them, which the caller says in the log."""
        passthrough: list[tuple[tuple[bytes, bytes], list[bytes]]] = []
        incoming: dict[bytes, dict[tuple[bytes, bytes], list[bytes]]] = {}
        counts: dict[bytes, int] = {}
        late = passed = held = 0
        released: list[HeldTrace] = []
        with self._lock:
            traces = self._traces
            graded = self._graded
            for group, genai in groups:
                keep: list[bytes] = []
                for (trace_id, _event, record_bytes), looks in zip(group.spans, genai, strict=True):
                    known = trace_id in traces
                    if not known and trace_id in graded:
                        late += 1
                    opens = looks and len(trace_id) == 16 and any(trace_id)
                    if known or (opens and trace_id not in graded):
                        by_origin = incoming.setdefault(trace_id, {})
                        by_origin.setdefault(group.context, []).append(record_bytes)
                        counts[trace_id] = counts.get(trace_id, 0) + 1
                        held += 1
                    else:
                        keep.append(record_bytes)
                if keep:
                    passed += len(keep)
                    passthrough.append((group.context, keep))
            if incoming:
                now = self._clock()
                for trace_id, by_origin in incoming.items():
                    self._add(
                        trace_id,
                        b"",
                        0,
                        record,
                        now,
                        next(iter(by_origin))[0],
                        logs=encode_groups(by_origin.items()),
                        log_count=counts[trace_id],
                    )
                released = self._enforce_limits()
        return RoutedLogs(passthrough, passed, held, late, len(incoming), released)

    def note_refused(self, trace_ids: Iterable[bytes], reason: str) -> int:
        """A request naming these traces was refused: each held trace (or the next one held
        under that id) carries `reason` as a gap. Returns how many are held now."""
        held = 0
        with self._lock:
            for trace_id in trace_ids:
                trace = self._traces.get(trace_id)
                gaps = trace.gaps if trace is not None else self._refused.get(trace_id)
                if gaps is None:
                    gaps = self._refused[trace_id] = []
                    while len(self._refused) > 4096:
                        self._refused.popitem(last=False)
                held += trace is not None
                if reason not in gaps:
                    gaps.append(reason)
        return held

    def _sender(self, resource: bytes) -> str:
        """`service.name` of a ResourceSpans' resource fields (remembered per encoding)."""
        name = self._names.get(resource)
        if name is None:
            name = service_name(resource)
            if len(self._names) >= 4096:
                self._names.clear()
            self._names[resource] = name
        return name

    def _add(
        self,
        trace_id: bytes,
        data: bytes,
        spans: int,
        record: int | None,
        now: float,
        resource: bytes = b"",
        logs: bytes = b"",
        log_count: int = 0,
    ) -> None:
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
            trace.late = trace_id in self._graded
            trace.sender = self.fair_key or self._sender(resource)
            trace.gaps = self._refused.pop(trace_id, [])
            self._traces[trace_id] = trace
            holding = self._senders.get(trace.sender)
            if holding is None:
                holding = self._senders[trace.sender] = _Holding()
            holding.traces[trace_id] = None
            self._push(deadline, trace_id)
        else:
            if data:
                trace.data += data
                trace.spans += spans
                trace.probe = None
            trace.last_s = now
            trace.deadline_s = deadline
            if deadline < trace.scheduled_s:
                trace.scheduled_s = deadline
                self._push(deadline, trace_id)
        if logs:
            trace.logs += logs
            trace.log_count += log_count
        if record is not None:
            (trace.log_wal if logs else trace.records).append(record)
        self.held_spans += spans
        self.held_bytes += len(data) + len(logs)
        holding = self._senders[trace.sender]
        holding.spans += spans
        holding.bytes += len(data) + len(logs)

    def _push(self, when: float, trace_id: bytes) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (when, self._seq, trace_id))

    def _enforce_limits(self) -> list[HeldTrace]:
        limits = self.limits
        out: list[HeldTrace] = []
        while self._traces:
            if len(self._traces) > limits.max_traces:

                def measure(h: _Holding) -> int:
                    return len(h.traces)
            elif self.held_spans > limits.max_spans:

                def measure(h: _Holding) -> int:
                    return h.spans
            elif self.held_bytes > limits.max_bytes:

                def measure(h: _Holding) -> int:
                    return h.bytes
            else:
                break
            biggest = max((h for h in self._senders.values() if h.traces), key=measure)
            oldest = self._traces[next(iter(biggest.traces))]
            out.append(self._take(oldest, REASON_LIMIT))
        if out:
            log.debug("buffer limits reached: %d trace(s) released early", len(out))
        return out

    def _take(self, trace: HeldTrace, reason: str) -> HeldTrace:
        """Removes a trace (lock held) and remembers its id for late spans."""
        del self._traces[trace.trace_id]
        self.held_spans -= trace.spans
        self.held_bytes -= len(trace.data) + len(trace.logs)
        holding = self._senders.get(trace.sender)
        if holding is not None:
            holding.traces.pop(trace.trace_id, None)
            holding.spans -= trace.spans
            holding.bytes -= len(trace.data) + len(trace.logs)
            if not holding.traces:
                del self._senders[trace.sender]
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
        """Releases due traces; reads the shape of what arrived where the quiet period ended."""
        due: list[HeldTrace] = []
        probes: list[tuple[HeldTrace, bytes, int, bool]] = []
        with self._lock:
            now = self._clock()
            heap = self._heap
            while heap and heap[0][0] <= now:
                when, _seq, trace_id = heapq.heappop(heap)
                trace = self._traces.get(trace_id)
                if trace is None or when != trace.scheduled_s:
                    continue  # released already, or a newer entry supersedes this one
                if now - trace.first_s >= self.limits.max_hold_s and not trace.late:
                    due.append(self._take(trace, REASON_MAX_HOLD))
                    continue
                if trace.deadline_s > now:
                    trace.scheduled_s = trace.deadline_s
                    self._push(trace.deadline_s, trace_id)
                    continue
                if trace.late:
                    due.append(self._take(trace, REASON_LATE))
                elif trace.checked < len(trace.data):
                    whole = trace.checked == 0
                    probes.append(
                        (trace, bytes(trace.data[trace.checked :]), len(trace.data), whole)
                    )
                    trace.scheduled_s = float("inf")  # no timer while the probe runs
                else:
                    reason = self._decide(trace, now)
                    if reason:
                        due.append(self._take(trace, reason))
        found: list[tuple[HeldTrace, int, list[SpanFacts], set[bytes]]] = []
        for trace, chunk, upto, whole in probes:
            spans = read_shape(chunk)
            try:
                agents = self._probe(trace, chunk, whole, spans)
            except Exception:
                log.exception("agent probe failed for trace %s", trace.trace_id_hex)
                agents = set()
            for span in spans:
                span.record = b""  # the shape keeps ids only
            found.append((trace, upto, spans, agents))
        if found:
            with self._lock:
                now = self._clock()
                for trace, upto, spans, agents in found:
                    if self._traces.get(trace.trace_id) is not trace:
                        continue
                    trace.checked = upto
                    if len(trace.data) != upto:
                        trace.probe = None
                    for span in spans:
                        if span.span_id:
                            trace.parents[span.span_id] = span.parent_id
                            if span.genai:
                                trace.genai.add(span.span_id)
                    trace.agents |= agents
                    if agents:
                        trace.has_agent = True
                    if trace.scheduled_s != float("inf"):
                        continue  # new spans arrived meanwhile and set their own timer
                    reason = self._decide(trace, now)
                    if reason:
                        due.append(self._take(trace, reason))
        if due:
            self._release(due)

    def _decide(self, trace: HeldTrace, now: float) -> str:
        """Why the trace is released now ("" to keep it, with its next timer set)."""
        quiet = now - trace.last_s
        complete = trace.has_agent and not waiting_fragments(trace)
        if complete and quiet >= self.limits.grace_s:
            return REASON_COMPLETE
        if quiet >= self.limits.idle_timeout_s:
            return REASON_IDLE
        when = trace.last_s + (self.limits.grace_s if complete else self.limits.idle_timeout_s)
        trace.deadline_s = when
        trace.scheduled_s = when
        self._push(when, trace.trace_id)
        return ""


@dataclass(slots=True)
class _Holding:
    """What one sender holds in the buffer: its traces (oldest first), spans and bytes."""

    traces: OrderedDict[bytes, None] = field(default_factory=OrderedDict)
    spans: int = 0
    bytes: int = 0
