"""`sidecar/bounded.py`: grading in this process waited for at most its budget, with real
threads (docs/hostile-input.md, "Grading budget")."""

from __future__ import annotations

import threading
import time

from attest_otel.sidecar.bounded import ABANDONED, KEPT_IDLE_S, BoundedJudge, InProcessBudget
from attest_otel.sidecar.workers import Failed


def _sleeper(release: threading.Event) -> object:
    def grade(abandoned: threading.Event) -> str:
        release.wait(30)
        return "graded"

    return grade


def test_an_answer_within_the_budget_is_returned_and_an_error_is_failed() -> None:
    budget = InProcessBudget(5.0)
    assert budget.run(lambda abandoned: 42) == 42

    def broken(abandoned: threading.Event) -> int:
        raise ValueError("a bug in a rule")

    failed = budget.run(broken)
    assert isinstance(failed, Failed) and failed.reason == "error"
    assert "ValueError: a bug in a rule" in failed.detail
    assert budget.abandoned == 0 and budget.oldest_s() == 0.0


def test_past_the_budget_the_caller_goes_on_and_the_thread_is_told() -> None:
    budget = InProcessBudget(0.2, max_abandoned=2)
    release = threading.Event()
    told: list[threading.Event] = []

    def grade(abandoned: threading.Event) -> str:
        told.append(abandoned)
        release.wait(30)
        return "late"

    started = time.monotonic()
    failed = budget.run(grade)
    assert time.monotonic() - started < 1.0
    assert isinstance(failed, Failed) and failed.reason == "time"
    assert "budget (0.2s)" in failed.detail
    assert told[0].is_set() and budget.abandoned == 1
    assert budget.oldest_s() >= 0.2  # still running: /readyz sees it
    # A second abandoned one reaches the cap; the third is not started at all.
    assert isinstance(budget.run(grade), Failed)
    started = time.monotonic()
    refused = budget.run(grade)
    assert time.monotonic() - started < 0.1
    assert isinstance(refused, Failed) and "2 earlier traces are still grading" in refused.detail
    assert len(told) == 2
    release.set()
    deadline = time.monotonic() + 5
    while budget.abandoned and time.monotonic() < deadline:
        time.sleep(0.01)
    assert budget.abandoned == 0 and budget.oldest_s() == 0.0
    assert budget.run(lambda abandoned: "again") == "again"


def test_stop_ends_every_wait_at_once() -> None:
    budget = InProcessBudget(60.0)
    release = threading.Event()
    out: list[object] = []
    waiter = threading.Thread(target=lambda: out.append(budget.run(_sleeper(release))))  # type: ignore[arg-type]
    waiter.start()
    time.sleep(0.2)
    started = time.monotonic()
    budget.stop()
    waiter.join(5)
    assert time.monotonic() - started < 0.5
    assert out == [Failed("shutdown", "the sidecar is stopping")]
    assert budget.run(lambda abandoned: 1) == Failed("shutdown", "the sidecar is stopping")
    release.set()


class _Judge:
    model = "m"

    def __init__(self) -> None:
        self.asked = 0

    def answer(self, questions: object) -> list[str]:
        self.asked += 1
        return ["verdict"]

    def choose(self, questions: object) -> list[str]:
        self.asked += 1
        return ["verdict"]


def test_an_abandoned_trace_asks_the_model_nothing_more() -> None:
    judge = _Judge()
    abandoned = threading.Event()
    bounded = BoundedJudge(judge, abandoned)  # type: ignore[arg-type]
    assert bounded.answer([object()]) == ["verdict"]  # type: ignore[list-item]
    abandoned.set()
    (failure,) = bounded.answer([object()])  # type: ignore[list-item]
    assert failure.reason == ABANDONED  # type: ignore[union-attr]
    (failure,) = bounded.choose([object()])  # type: ignore[list-item]
    assert failure.reason == ABANDONED  # type: ignore[union-attr]
    assert judge.asked == 1


def test_a_kept_thread_grades_run_after_run_and_one_abandoned_is_replaced() -> None:
    budget = InProcessBudget(0.3, keep_thread=True)
    threads = [budget.run(lambda abandoned: threading.get_ident()) for _ in range(5)]
    assert len(set(threads)) == 1 and threads[0] != threading.get_ident()
    release = threading.Event()
    failed = budget.run(_sleeper(release))  # type: ignore[arg-type]
    assert isinstance(failed, Failed) and failed.reason == "time"
    after = budget.run(lambda abandoned: threading.get_ident())
    assert after not in threads  # the kept thread is still busy: another took the run
    assert budget.run(lambda abandoned: threading.get_ident()) == after
    release.set()
    deadline = time.monotonic() + 5
    while budget.abandoned and time.monotonic() < deadline:
        time.sleep(0.01)
    assert budget.abandoned == 0
    time.sleep(0.05)  # the late thread found another idle, and ended
    assert budget.run(lambda abandoned: threading.get_ident()) == after
    assert budget.run(lambda abandoned: 1 / 0).reason == "error"  # type: ignore[union-attr]
    assert budget.run(lambda abandoned: threading.get_ident()) == after


def test_a_kept_thread_ends_once_no_run_comes() -> None:
    """A caller that stops grading (the library in a long-lived process) keeps no thread."""
    budget = InProcessBudget(5, keep_thread=True)
    ident = budget.run(lambda abandoned: threading.get_ident())
    assert any(t.ident == ident for t in threading.enumerate())
    deadline = time.monotonic() + KEPT_IDLE_S + 5
    while any(t.ident == ident for t in threading.enumerate()) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not any(t.ident == ident for t in threading.enumerate())
    again = budget.run(lambda abandoned: threading.get_ident())  # a new one takes the next run
    assert again != threading.get_ident()
    assert budget.run(lambda abandoned: threading.get_ident()) == again
