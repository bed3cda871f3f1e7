"""The grading pool: released traces to grading threads (and grading processes), in batches.

Two components of the sidecar's lifecycle (`lifecycle`):

- `OfflineGrading`, the grading processes. Offline grading in worker processes keeps the
  receivers' interpreter free: the decode, adapt and annotate work of GenAI spans holds the
  GIL for milliseconds. When they cannot start, grading goes on in this process (slower,
  not wrong), which is why the grader asks `running` rather than being told later.
- `GradingPool`, the threads that call the grader. `submit` is the buffer's release: a
  trace over the size cap goes on ungraded, the others are graded in batches (offline
  grading) or one per thread (model checks, so that the model calls of several runs
  overlap). Its shutdown grades what it holds until shortly before the end, then kills
  what is still grading and forwards those traces ungraded.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from attest_otel.content import ContentPolicy
from attest_otel.sidecar.buffer import HeldTrace
from attest_otel.sidecar.config import GradingConfig
from attest_otel.sidecar.grading import TraceGrader
from attest_otel.sidecar.grading_worker import init_worker
from attest_otel.sidecar.quarantine import Quarantine
from attest_otel.sidecar.requests import GradingCapacity
from attest_otel.sidecar.stats import SidecarStats
from attest_otel.sidecar.workers import GradingProcesses

__all__ = ["BATCH_BYTES", "BATCH_TRACES", "GradingPool", "OfflineGrading"]

log = logging.getLogger(__name__)

BATCH_TRACES = 32
BATCH_BYTES = 1 << 20
"""Released traces graded offline together, at most (`GradingPool.submit`): each task for
the grading process costs a pickle, a pipe trip each way and thread wake-ups in this
process, and each forwarded request a gRPC call at both ends; a batch pays them once."""


class OfflineGrading:
    """The grading processes as a component; `map` and `oldest_s` as `GradingProcesses`."""

    def __init__(
        self,
        grading: GradingConfig,
        content: ContentPolicy,
        *,
        enabled: bool,
        quarantine: Quarantine | None = None,
    ) -> None:
        """`enabled`: False with `grading.processes: 0` or model checks on (a run that may
        use the model is graded where the model budget lives). `quarantine`: told the
        traces that take long, so one that kills the sidecar is not graded again."""
        self._processes: GradingProcesses | None = None
        if enabled and grading.processes > 0:
            policy = grading.policy
            self._processes = GradingProcesses(
                grading.processes,
                budget_s=grading.budget_s,
                max_memory_bytes=grading.max_memory_bytes,
                initializer=init_worker,
                initargs=(str(policy) if policy is not None else None, content, grading.nice),
                on_slow=quarantine.slow if quarantine is not None else None,
            )
        self.running = False

    def start(self) -> None:
        processes = self._processes
        if processes is None:
            return
        try:
            processes.start()
        except Exception:  # grading in-process is slower, not wrong
            log.exception("grading processes did not start; grading in this process")
            processes.shutdown()
            return
        self.running = True

    def shutdown(self, timeout_s: float) -> bool:
        """Ends every process now (busy ones are killed: their callers forward their
        traces ungraded). Idempotent."""
        self.running = False
        if self._processes is not None:
            self._processes.shutdown()
        return True

    def map(
        self, fn: Callable[..., Any], items: Sequence[tuple[Any, ...]], labels: Sequence[str]
    ) -> list[Any]:
        assert self._processes is not None, "map only while running"
        return self._processes.map(fn, items, labels)

    def oldest_s(self) -> float:
        processes = self._processes
        return processes.oldest_s() if processes is not None and self.running else 0.0


class GradingPool:
    """Grading threads over the grader; see the module docstring."""

    def __init__(
        self,
        grading: GradingConfig,
        *,
        grader: TraceGrader,
        offline: OfflineGrading,
        stats: SidecarStats,
        capacity: GradingCapacity | None,
        refresh: Callable[[str], None] | None = None,
    ) -> None:
        """`refresh`: grades a trace again from its whole (`regrade.Regrader.refresh`),
        asked by `stale` for a trace another sidecar also stored spans of."""
        self.grading = grading
        self.grader = grader
        self.offline = offline
        self.stats = stats
        self.capacity = capacity
        self._refresh = refresh
        self._pool: ThreadPoolExecutor | None = None
        self._pending: dict[Future[None], list[HeldTrace]] = {}
        self._lock = threading.Lock()

    def start(self) -> None:
        self._pool = ThreadPoolExecutor(
            max_workers=max(self.grading.workers, 8 * self.grading.processes),
            thread_name_prefix="attest-otel-grade",
        )

    # --- the data path ---------------------------------------------------------------------

    def stale(self, trace_id: str) -> None:
        """What the shared store's writer calls for a trace another sidecar also stored
        spans of: graded again from the whole trace, on these threads."""
        pool = self._pool
        if pool is None or self._refresh is None:
            return
        try:
            pool.submit(self._refresh, trace_id)
        except RuntimeError:  # shutting down: the next writer of the trace will
            log.warning("store: trace %s not graded again from its whole (shutdown)", trace_id)

    def submit(self, traces: list[HeldTrace]) -> None:
        """The buffer's release: each trace graded, or forwarded ungraded when too large."""
        pool = self._pool
        grader = self.grader
        if pool is None:
            return
        limit = self.grading.max_trace_bytes
        batched = self.offline.running and grader.gate is None
        batch: list[HeldTrace] = []
        size = 0
        for trace in traces:
            if len(trace.data) > limit and not trace.late:
                # Grading costs many times a trace's bytes: past the cap it goes on ungraded.
                log.warning(
                    "trace %s holds %d bytes, over grading.max_trace_size_mib: forwarded ungraded",
                    trace.trace_id_hex,
                    len(trace.data),
                    extra={"trace_id": trace.trace_id_hex, "spans": trace.spans},
                )
                self.stats.graded("too_large", 0, False)
                grader.forward_ungraded([trace])
                continue
            if not batched:
                self._submit_batch(pool, [trace])
                continue
            batch.append(trace)
            size += len(trace.data)
            if len(batch) >= BATCH_TRACES or size >= BATCH_BYTES:
                self._submit_batch(pool, batch)
                batch, size = [], 0
        if batch:
            self._submit_batch(pool, batch)

    def _submit_batch(self, pool: ThreadPoolExecutor, batch: list[HeldTrace]) -> None:
        spans = sum(trace.spans for trace in batch)
        self.stats.add(grading_spans=spans)
        if self.capacity is not None:
            self.capacity.submitted()
        try:
            future = pool.submit(self.grader.grade_batch, batch)
        except RuntimeError:  # pool shut down: forward as it came rather than lose it
            self.stats.add(grading_spans=-spans)
            self.grader.forward_ungraded(batch)
            return
        with self._lock:
            self._pending[future] = batch
        future.add_done_callback(self._graded)

    def _graded(self, future: Future[None]) -> None:
        with self._lock:
            batch = self._pending.pop(future, None)
        if batch is not None:
            spans = sum(trace.spans for trace in batch)
            self.stats.add(grading_spans=-spans)
            if self.capacity is not None:
                self.capacity.graded(spans, self.stats.grading_spans)

    # --- shutdown --------------------------------------------------------------------------

    def shutdown(self, timeout_s: float) -> bool:
        """Grading finishes what it holds until shortly before `timeout_s` ends (leaving
        the forwarders time for what it could not grade); then what is still grading is
        killed, and its traces are forwarded ungraded within `timeout_s`."""
        pool = self._pool
        if pool is None:
            return True
        deadline = time.monotonic() + timeout_s
        kill_at = deadline - min(5.0, timeout_s / 3)
        while time.monotonic() < kill_at and self._busy():
            time.sleep(0.02)
        self.grader.here.stop()  # grading here stops waiting: its traces go on ungraded
        with self._lock:
            left = [t for f, batch in self._pending.items() if f.cancel() for t in batch]
        if left:  # never started: forward rather than lose them
            self.grader.forward_ungraded(left)
        # Grading still under way past the deadline is killed: its callers forward their
        # traces ungraded (`workers.Failed("shutdown")`) and return.
        self.offline.shutdown(0.0)
        pool.shutdown(wait=False, cancel_futures=True)
        while time.monotonic() < deadline and self._busy():  # their callers flag and offer them
            time.sleep(0.02)
        self._pool = None
        return True  # what it could not grade went to the forwarder, which counts delivery

    def _busy(self) -> bool:
        with self._lock:
            return bool(self._pending)
