"""`grading.nice`: the grading processes yield the CPU to the receiving process (issue 12).

The sidecar runs as `attest-otel serve`; its grading process is found through /proc (Linux)
as the child that multiprocessing spawned, not its resource tracker.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.sidecar.downstream import Downstream
from tests.sidecar.helpers import Sidecar

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")


def _grading_process(parent: int, timeout: float = 30.0) -> int:
    """The pid of the spawned grading process under `parent`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if ppid == parent and b"spawn_main" in cmdline:
                return int(entry.name)
        time.sleep(0.1)
    raise AssertionError(f"no grading process under {parent}")


@pytest.mark.parametrize("nice", [None, 7, 19])
def test_grading_processes_run_at_the_configured_niceness_and_receivers_do_not(
    sidecar: Sidecar, downstream: Downstream, nice: int | None
) -> None:
    grading: dict[str, int] = {"processes": 1}
    if nice is None:
        nice = 0  # the default: grading at the receivers' priority
    else:
        grading["nice"] = nice
    sidecar.config = {"grading": grading}
    sidecar.start()
    assert sidecar.proc is not None
    main = sidecar.proc.pid
    worker = _grading_process(main)
    own = os.getpriority(os.PRIO_PROCESS, os.getpid())  # what the sidecar inherited
    assert os.getpriority(os.PRIO_PROCESS, main) == own
    assert os.getpriority(os.PRIO_PROCESS, worker) == min(19, own + nice)
