"""The request path: what the receivers call for every export request.

Classify each span's trace on the wire, hold the spans of GenAI traces in the buffer,
pass the rest on as they came, and keep the durable log right. Never raises: a request
that cannot be parsed gets the protocol's "bad data" answer, a full queue "try later".

Admission follows grading: a sidecar that takes GenAI spans faster than it grades them only
moves the queue from the sender (who can hold it, and knows) into its own memory, and every
graded span waits longer. So beyond the forward queue's bound, a request is refused ("try
later") while the spans waiting for grading exceed what grading clears in `horizon_s` at its
measured rate (`GradingCapacity`), or `max_backlog_spans`. Spans held in the last grace
period count as waiting too: they are released within the next one, and a burst that arrives
faster than one grace period would otherwise all be admitted before any of it is graded.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence

from attest_otel.sidecar import wire
from attest_otel.sidecar.buffer import HeldTrace, TraceBuffer
from attest_otel.sidecar.forward import Forwarder, ForwardItem
from attest_otel.sidecar.receivers import (
    OK,
    Outcome,
)
from attest_otel.sidecar.stats import SidecarStats
from attest_otel.sidecar.wal import DurableLog
from attest_otel.sidecar.wire import (
    DeclaredMarks,
    ScopeGroup,
    WireError,
    check_traces,
    encode_groups,
    is_genai_name,
    split_request,
)

log = logging.getLogger(__name__)


class GradingCapacity:
    """How many spans may wait for grading: what grading clears in `horizon_s` plus the
    arrival window, at its measured rate, never less than `floor_spans` (two large requests);
    `cold_spans` until a rate is measured, so a cold start is not throttled to the floor.

    The rate is spans graded per second of busy grading (some batch submitted and not done),
    so idle gaps between bursts do not make the sidecar look slower than it is.

    Waiting means submitted to grading and not done, or held in the last `arriving_s` (the
    grace period): a held span is due for grading one grace after its run's last span came,
    so the recent arrivals are the grading work of the next grace period. Spans of a run that
    is still going, held for longer, are not counted: they are not load yet.
    """

    def __init__(
        self,
        horizon_s: float,
        *,
        arriving_s: float = 0.0,
        floor_spans: int = 1024,
        cold_spans: int = 16384,
        window_s: float = 0.25,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.horizon_s = horizon_s
        self.arriving_s = arriving_s
        self.floor_spans = floor_spans
        self.cold_spans = cold_spans
        self.window_s = window_s
        self.rate = 0.0
        """Spans graded per busy second (0 until `window_s` of busy grading was seen)."""
        self._clock = clock
        self._lock = threading.Lock()
        self._busy_since: float | None = None
        self._busy_s = 0.0
        self._count = 0
        self._arrivals: deque[tuple[float, int]] = deque()
        self._arriving = 0

    def submitted(self) -> None:
        """Grading was given work: it is busy from now if it was not."""
        with self._lock:
            if self._busy_since is None:
                self._busy_since = self._clock()

    def graded(self, spans: int, backlog: int) -> None:
        """A batch of `spans` finished grading; `backlog` spans still wait."""
        with self._lock:
            now = self._clock()
            self._count += spans
            if self._busy_since is not None:
                self._busy_s += now - self._busy_since
                self._busy_since = now if backlog > 0 else None
            if self._busy_s < self.window_s:
                return
            rate = self._count / self._busy_s
            self.rate = rate if self.rate == 0 else 0.5 * self.rate + 0.5 * rate
            self._busy_s = 0.0
            self._count = 0

    def held(self, spans: int) -> None:
        """`spans` were just put in the buffer to wait for their run."""
        with self._lock:
            self._arrivals.append((self._clock(), spans))
            self._arriving += spans

    def arriving(self) -> int:
        """Spans held within the last `arriving_s`."""
        with self._lock:
            horizon = self._clock() - self.arriving_s
            arrivals = self._arrivals
            while arrivals and arrivals[0][0] < horizon:
                self._arriving -= arrivals.popleft()[1]
            return self._arriving

    def allowed(self) -> int:
        if self.rate == 0:
            return self.cold_spans
        return max(self.floor_spans, int(self.rate * (self.horizon_s + self.arriving_s)))

    def has_room(self, backlog: int) -> bool:
        """Whether `backlog` spans in grading, with the recent arrivals, leave room."""
        return backlog + self.arriving() <= self.allowed()


class RequestPath:
    """What the receivers call: classify, hold or pass, and keep the durable log right."""

    def __init__(
        self,
        *,
        buffer: TraceBuffer,
        forwarder: Forwarder,
        stats: SidecarStats,
        wal: DurableLog | None,
        submit: Callable[[list[HeldTrace]], None],
        retry_after_s: float,
        max_backlog_spans: int,
        unready_after_s: float = 30.0,
        declared: DeclaredMarks | None = None,
        capacity: GradingCapacity | None = None,
    ) -> None:
        self.capacity = capacity
        """Grading's measured capacity, which bounds the backlog; None: `max_backlog_spans`
        alone."""
        self.declared = declared
        """The policy's declared dialects: their spans are held like GenAI spans."""
        self.buffer = buffer
        self.forwarder = forwarder
        self.stats = stats
        self.wal = wal
        self.submit = submit
        self.retry_after_s = retry_after_s
        self.max_backlog_spans = max_backlog_spans
        self.unready_after_s = unready_after_s
        self.closing = False
        self.disk_error: str | None = None
        self._disk_refused = 0
        self._disk_logged = 0.0
        self._disk_failed_at = 0.0

    # --- lifecycle: the intake, started last and shut down first --------------------------

    def start(self) -> None:
        self.closing = False

    def shutdown(self, timeout_s: float) -> bool:
        """From now on every request is answered "retry later" (`closing`)."""
        self.closing = True
        return True

    def ready(self) -> tuple[bool, str]:
        if self.closing:
            return False, "shutting down"
        if self.disk_error is not None and time.monotonic() - self._disk_failed_at < 5.0:
            return False, f"buffer-dir: {self.disk_error}"
        # Flow control is not health: a sidecar that answers "retry later" to a burst is
        # working; only the hard bounds make it unready.
        if not self.forwarder.has_room(1, 0) or self.stats.grading_spans > self.max_backlog_spans:
            return False, "forward queue or grading backlog full"
        failing = self.forwarder.failing()
        if failing is not None and failing[0] >= self.unready_after_s:
            seconds, error = failing
            return False, (
                f"forwarding to {self.forwarder.settings.endpoint} has failed for "
                f"{seconds:.0f}s: {error}"
            )
        return True, ""

    def grading_has_room(self) -> bool:
        """Whether grading takes more spans to hold; asked only of requests that may hold
        some, so a plain request is never refused because agents keep grading busy."""
        backlog = self.stats.grading_spans
        return backlog <= self.max_backlog_spans and (
            self.capacity is None or self.capacity.has_room(backlog)
        )

    def accept(self, data: bytes) -> Outcome:
        """One export request (protobuf bytes, already inflated). Never raises."""
        if self.closing:
            self.stats.reject("shutting_down")
            return Outcome("closing", "the sidecar is shutting down; retry", self.retry_after_s)
        if not data:
            return OK
        problem, scanned = check_traces(data)
        if problem is not None:
            self.stats.reject("malformed")
            return Outcome("malformed", f"not a valid OTLP ExportTraceServiceRequest: {problem}")
        if self.wal is not None and self.wal.replayed_copy(data):
            return OK  # routed already, from the buffer dir's replay (wal.py)
        groups: list[ScopeGroup] | None = None
        try:
            plain = self.plain(data, scanned)
            if plain is None:
                # Refused before it is cut up: under a burst most refusals land here.
                if not self.grading_has_room():
                    self.stats.reject("grading_busy")
                    return Outcome(
                        "full", "grading is at capacity; retry later", self.retry_after_s
                    )
                groups = split_request(data)
                spans = sum(len(g.spans) for g in groups)
            else:
                spans = plain
        except WireError as e:
            self.stats.reject("malformed")
            return Outcome("malformed", f"not an OTLP ExportTraceServiceRequest: {e}")
        if spans == 0:
            return OK
        if not self.forwarder.has_room(spans, len(data)):
            self.stats.reject("queue_full")
            return Outcome("full", "forward queue full; retry later", self.retry_after_s)
        record: int | None = None
        if self.wal is not None:
            try:
                record = self.wal.append(data)
            except OSError as e:
                self.stats.reject("buffer_dir_error")
                self._disk_error(e)
                return Outcome(
                    "full",
                    f"cannot persist the request under --buffer-dir "
                    f"({e.strerror or e}); retry later",
                    self.retry_after_s,
                )
            if self.disk_error is not None:
                log.warning(
                    "buffer-dir: writing again after %d refused request(s)", self._disk_refused
                )
                self.disk_error = None
                self._disk_refused = 0
        if groups is None:
            self.pass_whole(data, spans, record)
        else:
            self.route(data, groups, spans, record)
        return OK

    def plain(self, data: bytes, scanned: tuple[int, set[bytes]] | None) -> int | None:
        """The span count of a request that holds no GenAI span and no span of a held or
        recently graded trace (forwarded as it came, without cutting it into spans); None
        for any other.

        Under mixed load most requests are plain: cutting them up (`split_request`) and
        routing span by span costs about 3 us a span. The tests are `classify`'s, on the
        whole request, noted by the validation walk (`wire.check_traces`, which gives
        `scanned`: the spans and trace ids, None when a scope, name or attribute key is
        GenAI); a policy's declared dialects take the full path.
        """
        if self.declared is not None or scanned is None:
            return None
        spans, trace_ids = scanned
        return spans if self.buffer.none_known(trace_ids) else None

    def pass_whole(self, data: bytes, spans: int, record: int | None) -> None:
        """What `route` does for a request none of whose spans is held: forward its bytes."""
        records = (record,) if record is not None else ()
        if self.wal is not None and record is not None:
            self.wal.hold(record, 1)
            self.wal.unpin(record)
        self.forwarder.offer(ForwardItem(data, spans, records, mergeable=False))
        self.stats.add(
            requests=1, spans_received=spans, spans_held=0, spans_passed=spans, spans_late=0
        )

    def _disk_error(self, error: OSError) -> None:
        """One clear line when the buffer dir starts failing, then one per 10 s at most."""
        now = time.monotonic()
        self._disk_failed_at = now
        self._disk_refused += 1
        if self.disk_error is None or now - self._disk_logged >= 10.0:
            log.error(
                "buffer-dir: cannot persist a request (%s); answering 'retry later' until "
                "it can (%d refused so far)",
                error.strerror or error,
                self._disk_refused,
                extra={"dir": str(self.wal.dir) if self.wal is not None else ""},
            )
            self._disk_logged = now
        self.disk_error = error.strerror or str(error)

    def classify(self, data: bytes, groups: Sequence[ScopeGroup]) -> set[bytes]:
        """Raw ids of the traces that have a GenAI candidate span in this request.

        The same test as `candidate.is_genai_candidate` (scope, name, attribute keys), done
        on the bytes: the key test is one regex over the whole request, repeated per span
        only when it matched somewhere.
        """
        genai: set[bytes] = set()
        key_search = wire.GENAI_KEY_BYTES.search
        keys_somewhere = key_search(data) is not None
        known = self.buffer.is_known
        declared = self.declared
        for group in groups:
            whole = group.is_genai_scope() or (
                declared is not None and declared.scope(group.scope_name())
            )
            for trace_id, name, record in group.spans:
                if trace_id in genai or known(trace_id):
                    continue
                if (
                    whole
                    or is_genai_name(name)
                    or (keys_somewhere and key_search(record))
                    or (declared is not None and declared.span(name, record))
                ):
                    genai.add(trace_id)
        return genai

    def route(self, data: bytes, groups: list[ScopeGroup], spans: int, record: int | None) -> None:
        genai = self.classify(data, groups)
        routed = self.buffer.route(groups, genai, record)
        item: ForwardItem | None = None
        records = (record,) if record is not None else ()
        if routed.held_spans == 0:
            item = ForwardItem(data, spans, records, mergeable=False)
        elif routed.passthrough:
            item = ForwardItem(
                encode_groups(routed.passthrough), routed.passthrough_spans, records, mergeable=True
            )
        if routed.held_spans and self.capacity is not None:
            self.capacity.held(routed.held_spans)
        if self.wal is not None and record is not None:
            self.wal.hold(record, routed.traces_touched + (item is not None))
            self.wal.unpin(record)
        if item is not None:
            self.forwarder.offer(item)
        self.stats.add(
            requests=1,
            spans_received=spans,
            spans_held=routed.held_spans,
            spans_passed=routed.passthrough_spans,
            spans_late=routed.late_spans,
        )
        if routed.released:
            self.submit(routed.released)
