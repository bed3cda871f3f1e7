"""Grading in this process, within a time budget: what the grading processes cannot take.

A trace is graded here, not in a grading process (`workers`), when model checks are on (the
model budget and the judge live here), when `grading.processes` is 0, for a late trace's
regrade without processes, and for the Grader API's `GradeRun`. A thread in this process
cannot be killed, so the budget is kept by waiting: the grading runs on a thread of its
own, and its caller waits at most `budget_s` (docs/hostile-input.md, "Grading budget").
Past it the caller gets `Failed("time")` and goes on (the trace forwarded ungraded and
flagged `review`), while the abandoned thread runs to its end and its answer is dropped.

What that leaves: an abandoned thread still spends CPU (a model call it is in ends at the
client's own timeout; a judge told the trace is abandoned asks nothing more), and memory is
not bounded per trace here (`grading.max_trace_size_mib` bounds what a trace brings). So
at most `max_abandoned` abandoned threads may run at once: past that a trace is not
started here at all but goes on ungraded at once, and /readyz reports the oldest one
(`oldest_s`) until it ends. `stop()` (SIGTERM) makes every waiter give up at once with
`Failed("shutdown")`, so shutdown is never held by grading here.
"""

from __future__ import annotations

import queue
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from attest_otel.grade.questions import (
    AnswerQuestion,
    AnswerVerdict,
    ChoiceQuestion,
    ChoiceVerdict,
    Judge,
    ModelFailure,
)
from attest_otel.grade.rules import CHECK_NAME
from attest_otel.model import CheckResult, Run
from attest_otel.sidecar.workers import Failed

__all__ = ["ABANDONED", "BoundedJudge", "InProcessBudget", "run_grader", "ungraded_result"]

T = TypeVar("T")

ABANDONED = "grading ran past its budget, so the model was not asked"
"""The reason a question asked after its trace was abandoned gets (`BoundedJudge`)."""


class _Box(Generic[T]):
    __slots__ = ("abandoned", "done", "error", "started", "value")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.value: T | None = None
        self.error: str | None = None
        self.abandoned = False
        self.started = time.monotonic()


class InProcessBudget:
    """Runs one trace's grading on a thread of its own and waits at most `budget_s`."""

    def __init__(
        self, budget_s: float, *, max_abandoned: int = 4, keep_thread: bool = False
    ) -> None:
        self.budget_s = budget_s
        self.max_abandoned = max(1, max_abandoned)
        self.keep_thread = keep_thread
        """A thread whose grading ended waits for the next one (`_Kept`), instead of a thread
        started per run: for a caller that grades run after run (the CLI), not the sidecar,
        whose threads must all end with it."""
        self._kept: _Kept | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._running: dict[int, _Box[Any]] = {}
        """Every grading thread still running here (waited for or abandoned), by id."""
        self.abandoned = 0
        """Threads still running whose caller gave up on them."""

    def stop(self) -> None:
        """Shutdown: every caller waiting stops waiting now (`Failed("shutdown")`)."""
        self._stop.set()

    def oldest_s(self) -> float:
        """How long the longest grading still running here has run (0: none)."""
        with self._lock:
            started = min((box.started for box in self._running.values()), default=None)
        return 0.0 if started is None else time.monotonic() - started

    def run(
        self,
        grade: Callable[[threading.Event], T],
        budget_s: float | None = None,
    ) -> T | Failed:
        """`grade(abandoned)` within the budget; the event it is given is set when its
        caller gives up on it, so it can stop asking the model. Never raises: an exception
        is `Failed("error", traceback)`."""
        budget = self.budget_s if budget_s is None else budget_s
        if self._stop.is_set():
            return Failed("shutdown", "the sidecar is stopping")
        box: _Box[T] = _Box()
        gave_up = threading.Event()
        with self._lock:
            if self.abandoned >= self.max_abandoned:
                return Failed(
                    "time",
                    f"{self.abandoned} earlier traces are still grading in this process past "
                    f"their budget ({budget:g}s); this one was not started",
                )
            key = id(box)
            self._running[key] = box

        def target(back: Callable[[], None] | None = None) -> None:
            try:
                box.value = grade(gave_up)
            except BaseException:
                box.error = traceback.format_exc()
            finally:
                with self._lock:
                    if back is not None:
                        back()  # idle again before the caller hears, so it is taken next
                    box.done.set()
                    self._running.pop(key, None)
                    if box.abandoned:
                        self.abandoned -= 1

        if self.keep_thread:
            with self._lock:
                kept, self._kept = self._kept, None
            (kept or _Kept(self)).jobs.put(target)
        else:
            threading.Thread(target=target, name="attest-otel-grading-here", daemon=True).start()
        deadline = box.started + budget
        failed: Failed | None = None
        while not box.done.is_set():
            left = deadline - time.monotonic()
            if self._stop.is_set():
                failed = Failed("shutdown", "the sidecar is stopping")
            elif left <= 0:
                failed = Failed(
                    "time",
                    f"grading took longer than its budget ({budget:g}s) in this process; "
                    "its answer will be dropped",
                )
            if failed is not None:
                with self._lock:
                    if not box.done.is_set():
                        box.abandoned = True
                        self.abandoned += 1
                        gave_up.set()
                        return failed
                break
            box.done.wait(min(0.1, max(left, 0.001)))
        if box.error is not None:
            return Failed("error", box.error)
        return box.value  # type: ignore[return-value]


KEPT_IDLE_S = 0.5
"""How long a kept grading thread waits for the next run before it ends: run after run
reuse it, and a caller that stops grading (the library in a long-lived process) keeps no
thread."""


class _Kept:
    """A grading thread kept between runs (`InProcessBudget(keep_thread=True)`): it runs a
    job, then waits for the next while the budget has no other idle thread, at most
    KEPT_IDLE_S; a thread whose run was abandoned and ends after another was started ends
    with it."""

    def __init__(self, budget: InProcessBudget) -> None:
        self.budget = budget
        self.jobs: queue.SimpleQueue[Callable[[Callable[[], None]], None]] = queue.SimpleQueue()
        self.stay = True
        threading.Thread(target=self._loop, name="attest-otel-grading-here", daemon=True).start()

    def _loop(self) -> None:
        while self.stay:
            try:
                job = self.jobs.get(timeout=KEPT_IDLE_S)
            except queue.Empty:
                with self.budget._lock:
                    if self.budget._kept is self:  # still idle, nobody took it: end
                        self.budget._kept = None
                        return
                continue  # taken meanwhile: its job is on the way
            job(self._back)

    def _back(self) -> None:
        """Under the budget's lock: idle again, unless another thread already is."""
        budget = self.budget
        self.stay = budget._kept is None
        if self.stay:
            budget._kept = self


class BoundedJudge:
    """A judge that stops asking once its trace's caller gave up on it (`InProcessBudget`):
    an abandoned trace spends no more of the model budget than the calls already in flight."""

    def __init__(self, judge: Judge, abandoned: threading.Event) -> None:
        self._judge = judge
        self._abandoned = abandoned
        self.model = judge.model

    def answer(self, questions: Sequence[AnswerQuestion]) -> list[AnswerVerdict | ModelFailure]:
        if self._abandoned.is_set():
            return [ModelFailure(ABANDONED) for _ in questions]
        return self._judge.answer(questions)

    def choose(self, questions: Sequence[ChoiceQuestion]) -> list[ChoiceVerdict | ModelFailure]:
        if self._abandoned.is_set():
            return [ModelFailure(ABANDONED) for _ in questions]
        return self._judge.choose(questions)


def why(failed: Failed) -> str:
    """One line: the detail's last (an exception's message), else the reason."""
    lines = failed.detail.strip().splitlines()
    return lines[-1] if lines else failed.reason


def ungraded_result(failed: Failed) -> CheckResult:
    """The grade of a run that was not graded: `review`, saying why."""
    said = why(failed)
    return CheckResult(
        check=CHECK_NAME,
        passed=False,
        verdict="review",
        score=0.0,
        summary=f"not graded: {said}",
        findings=[],
        metadata={"ungraded": failed.reason, "ungraded_reason": said},
    )


def run_grader(
    grade: Callable[..., CheckResult],
    judge: Judge | None,
    appropriate: bool,
    budget_s: float,
) -> Callable[[Run], CheckResult]:
    """`grade(run, judge=, appropriate=)` for `pipeline.grade_traces`, each run within
    `budget_s` (the CLI's `grade --budget`); past it the run's grade is `review`, saying
    why, and its judge asks nothing more. One thread grades run after run (`keep_thread`):
    a thread started per run cost more than grading a small run."""
    budget = InProcessBudget(budget_s, keep_thread=True)

    def grade_run(run: Run) -> CheckResult:
        def one(abandoned: threading.Event) -> CheckResult:
            bounded = None if judge is None else BoundedJudge(judge, abandoned)
            return grade(run, judge=bounded, appropriate=appropriate)

        answer = budget.run(one)
        return ungraded_result(answer) if isinstance(answer, Failed) else answer

    return grade_run
