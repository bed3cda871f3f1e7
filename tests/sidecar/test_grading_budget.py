"""Grading processes with a budget (`sidecar.workers`): a task past its time or memory is
ended, its item comes back failed, the process is replaced, and the others go on."""

from __future__ import annotations

import time

from attest_otel.sidecar.quarantine import Quarantine
from attest_otel.sidecar.workers import Failed, GradingProcesses
from tests.sidecar.hostile_work import allocate, backtrack, echo


def test_a_stalled_item_is_killed_at_the_budget_and_the_rest_goes_on(tmp_path) -> None:
    slow: list[tuple[str, bool]] = []
    pool = GradingProcesses(
        1, budget_s=1.0, slow_s=0.3, on_slow=lambda label, done: slow.append((label, done))
    )
    pool.start()
    try:
        started = time.monotonic()
        out = pool.map(
            lambda_free_dispatch, [("echo", 1), ("backtrack", 40), ("echo", 3)], ["a", "b", "c"]
        )
        took = time.monotonic() - started
        assert out[0] == 1 and out[2] == 3
        assert isinstance(out[1], Failed) and out[1].reason == "time"
        assert "budget (1s)" in out[1].detail
        assert took < 8.0  # the budget, plus a new process started in its place
        assert pool.killed == {"time": 1}
        assert ("b", False) in slow and ("b", True) not in slow
        assert pool.map(lambda_free_dispatch, [("echo", 7)], ["d"]) == [7]  # replaced
    finally:
        pool.shutdown()


def test_an_item_over_the_memory_budget_fails_alone(tmp_path) -> None:
    pool = GradingProcesses(1, budget_s=20.0, max_memory_bytes=64 << 20)
    pool.start()
    try:
        out = pool.map(lambda_free_dispatch, [("allocate", 512), ("allocate", 8)], ["big", "small"])
        assert isinstance(out[0], Failed) and out[0].reason == "memory"
        assert out[1] == 8 << 20
    finally:
        pool.shutdown()


def test_shutdown_ends_a_stalled_item_at_once(tmp_path) -> None:
    pool = GradingProcesses(1, budget_s=60.0)
    pool.start()
    import threading

    got: list[object] = []
    thread = threading.Thread(
        target=lambda: got.extend(pool.map(lambda_free_dispatch, [("backtrack", 40)], ["s"]))
    )
    thread.start()
    time.sleep(0.5)
    started = time.monotonic()
    pool.shutdown()
    thread.join(10)
    assert not thread.is_alive() and time.monotonic() - started < 6.0
    assert isinstance(got[0], Failed) and got[0].reason == "shutdown"


def test_the_quarantine_keeps_what_broke_or_was_under_way_across_a_restart(tmp_path) -> None:
    q = Quarantine(tmp_path)
    q.open()
    q.broke("aa", "grading took longer than its budget (1s); process killed")
    q.slow("bb", False)  # the sidecar dies here
    q.slow("cc", False)
    q.slow("cc", True)
    q.close()
    again = Quarantine(tmp_path)
    again.open()
    assert again.reason("aa") == "grading took longer than its budget (1s); process killed"
    assert again.reason("bb") == "the sidecar ended while grading it"
    assert again.reason("cc") is None
    again.close()


def lambda_free_dispatch(name: str, value: int) -> object:
    return {"echo": echo, "backtrack": backtrack, "allocate": allocate}[name](value)


_PARENT = """
import sys, time
from attest_otel.sidecar.workers import GradingProcesses
from tests.sidecar.test_grading_budget import lambda_free_dispatch
pool = GradingProcesses(1, budget_s=600.0)
pool.start()
print(next(iter(pool._all)).process.pid, flush=True)
pool.map(lambda_free_dispatch, [("backtrack", 40)], ["stuck"])
"""


def test_a_grading_process_busy_in_c_dies_with_its_parent() -> None:
    """The kernel's parent-death signal, not a thread: a regex in C holds the child's
    interpreter, so a watcher thread in it would never run."""
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    parent = subprocess.Popen(
        [sys.executable, "-c", _PARENT], cwd=repo, stdout=subprocess.PIPE, text=True
    )
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    time.sleep(1.0)  # busy in the regex
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait(5)
    deadline = time.monotonic() + 5
    alive = True
    while alive and time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0]
            alive = state != "Z"
        except OSError:
            alive = False
        time.sleep(0.05)
    if alive:
        os.kill(child, signal.SIGKILL)
    assert not alive, "the grading process outlived its parent"
