"""A sidecar that dies takes its grading processes with it (issue 18).

`kill -9` is what the kernel's OOM killer and many supervisors send: the parent gets no chance
to stop its pool, so the children must notice on their own. The processes are found through
/proc (Linux): every descendant of the sidecar, whatever re-parented it afterwards.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tests.sidecar.downstream import Downstream
from tests.sidecar.helpers import Sidecar

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")


def _children(pid: int) -> set[int]:
    """Every live descendant of `pid`, by walking parent links in /proc."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] != "Z":
            parents[int(entry.name)] = int(fields[1])
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _alive(pids: set[int]) -> set[int]:
    out = set()
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            out.add(pid)
    return out


def _wait_for_children(pid: int, want: int, timeout: float = 30.0) -> set[int]:
    deadline = time.monotonic() + timeout
    kids: set[int] = set()
    while time.monotonic() < deadline:
        kids = _children(pid)
        if len(kids) >= want:
            return kids
        time.sleep(0.1)
    return kids


def _reap(pids: set[int]) -> None:
    for pid in _alive(pids):
        os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("processes", [1, 2])
def test_kill_9_leaves_no_grading_process_behind(
    sidecar: Sidecar, downstream: Downstream, processes: int
) -> None:
    sidecar.config = {"grading": {"processes": processes}}
    sidecar.start()
    assert sidecar.proc is not None
    # the workers plus multiprocessing's resource tracker
    kids = _wait_for_children(sidecar.proc.pid, processes + 1)
    assert len(kids) >= processes + 1, f"expected {processes} workers and a tracker: {kids}"
    try:
        sidecar.kill()
        deadline = time.monotonic() + 5
        while _alive(kids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _alive(kids) == set(), "grading processes outlived a kill -9 of the sidecar"
    finally:
        _reap(kids)


def test_sigterm_still_stops_cleanly_with_its_workers(
    sidecar: Sidecar, downstream: Downstream
) -> None:
    sidecar.config = {"grading": {"processes": 1}}
    sidecar.start()
    assert sidecar.proc is not None
    kids = _wait_for_children(sidecar.proc.pid, 2)
    try:
        assert sidecar.terminate() == 0
        deadline = time.monotonic() + 5
        while _alive(kids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _alive(kids) == set()
    finally:
        _reap(kids)
