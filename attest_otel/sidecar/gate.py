"""Whether a run may use the model: a sample by trace id and a per-minute call budget."""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from attest_otel.grade import rules
from attest_otel.grade.grader import grade
from attest_otel.model import CheckResult, Run
from attest_otel.sidecar.bounded import BoundedJudge
from attest_otel.sidecar.stats import SidecarStats

log = logging.getLogger(__name__)


class ModelGate:
    """Whether a run may use the model: sampled by trace id, within the per-minute budget.

    The sample is taken on the trace id as OpenTelemetry's TraceIdRatioBased sampler does
    (its low 64 bits against rate x 2^64), so every run of a trace is treated alike and a
    trace sampled by the SDK at rate r is sampled here at any rate >= r. The budget counts
    model calls: a run is admitted only if the calls it would make (its unrecovered errors,
    plus one per call when `appropriate` is on) fit in what is left of the last minute;
    a run that does not fit is graded offline (counted).
    """

    def __init__(
        self,
        judge: Any,
        *,
        sample_rate: float,
        calls_per_minute: int,
        max_concurrency: int,
        appropriate: bool,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.judge = judge
        self.sample_rate = sample_rate
        self.calls_per_minute = calls_per_minute
        self.appropriate = appropriate
        self.semaphore = threading.BoundedSemaphore(max_concurrency)
        self._clock = clock
        self._lock = threading.Lock()
        self._window: collections.deque[tuple[float, int]] = collections.deque()
        self._used = 0
        self.over_budget = 0
        self.admitted = 0

    def sampled(self, trace_id: str | None) -> bool:
        if self.sample_rate >= 1.0 or not trace_id:
            return self.sample_rate > 0.0
        try:
            low = int(trace_id[-16:], 16)
        except ValueError:
            return False
        return low < int(self.sample_rate * (1 << 64))

    def estimate(self, run: Run) -> int:

        facts = rules.assess(run)
        calls = 0
        if (run.final_answer or "").strip():
            calls += sum(1 for f in facts if rules.needs_answer_check(f))
        if self.appropriate:
            calls += len(facts)
        return calls

    def admit(self, run: Run) -> bool:
        if not self.sampled(run.trace_id):
            return False
        calls = self.estimate(run)
        if calls == 0:
            return False
        with self._lock:
            now = self._clock()
            while self._window and now - self._window[0][0] >= 60.0:
                self._used -= self._window.popleft()[1]
            if self._used + calls > self.calls_per_minute:
                self.over_budget += 1
                return False
            self._window.append((now, calls))
            self._used += calls
            self.admitted += 1
        return True


def run_grader(gate: ModelGate | None, stats: SidecarStats) -> Callable[..., CheckResult]:
    """Grades one run, with the model when the gate admits it (its budget and sampling);
    `abandoned` set: its caller gave up (`bounded`), so the model is asked nothing more."""

    def grade_run(run: Run, abandoned: threading.Event | None = None) -> CheckResult:
        if gate is not None and gate.admit(run):
            with gate.semaphore:
                stats.add(model_runs=1)
                judge = gate.judge if abandoned is None else BoundedJudge(gate.judge, abandoned)
                return grade(run, judge=judge, appropriate=gate.appropriate)
        return grade(run, judge=None)

    return grade_run
