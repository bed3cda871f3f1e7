"""Grading processes with a budget: one trace's grading may take so long and so much memory.

Span content comes from outside, and one trace can make grading slow (a pattern that
backtracks, a run of a hundred thousand calls) or large. A process pool that waits for its
task has no answer to that: the trace stalls every trace behind it, and a sidecar stopped
meanwhile waits for it too (docs/hostile-input.md, "Grading budget"). So each grading
process here takes one task at a time over a pipe of its own, sends back each trace's
result as soon as it has it, and the thread waiting for it gives it `budget_s` per trace:
past that the process is killed (SIGKILL: a regex in C answers no gentler signal), a new
one is started in its place, and the trace comes back as `Failed("time")` for its caller to
forward ungraded. Memory is bounded by the kernel: RLIMIT_DATA makes an allocation past
`max_memory_bytes` a MemoryError in the child (`Failed("memory")`), and a child that dies
anyway (the OOM killer, a crash) is `Failed("died")`.

A grading process dies with the sidecar however the sidecar dies, even busy in C: it asks
the kernel for SIGKILL when its parent thread ends (prctl PR_SET_PDEATHSIG). The kernel
means the thread that started it, so every process is started by one long-lived thread of
this pool, never by a grading thread that may come and go.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import multiprocessing
import os
import queue
import resource
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any, NamedTuple

log = logging.getLogger(__name__)

__all__ = ["Failed", "GradingProcesses"]

_PR_SET_PDEATHSIG = 1


class Failed(NamedTuple):
    """An item a grading process did not answer: `reason` is time, memory, died, error or
    shutdown; `detail` says more (a traceback for error)."""

    reason: str
    detail: str


class _Closed(Exception):
    """The pool is shutting down: no process will take the item."""


@dataclass(eq=False)
class _Worker:
    process: BaseProcess
    conn: Connection


def _die_with_parent(parent_pid: int) -> None:
    """SIGKILL from the kernel when the thread that started this process ends; a Python
    thread watching the parent would never run while a regex holds the interpreter."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)


def _serve(
    conn: Connection,
    parent_pid: int,
    max_memory_bytes: int,
    initializer: Callable[..., None] | None,
    initargs: tuple[Any, ...],
) -> None:
    """A grading process's life: set up, say ready, then answer tasks, item by item."""
    _die_with_parent(parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if initializer is not None:
        initializer(*initargs)
    if max_memory_bytes:
        # After the imports: they are the same for every process and not the trace's.
        limit = _data_bytes() + max_memory_bytes
        resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
    conn.send(("ready", os.getpid()))
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):
            os._exit(0)
        if task is None:
            os._exit(0)
        fn, items = task
        for item in items:
            try:
                answer: tuple[bool, Any] = (True, fn(*item))
            except MemoryError:
                answer = (False, ("memory", "grading ran out of its memory budget"))
            except Exception:
                answer = (False, ("error", traceback.format_exc()))
            try:
                conn.send(answer)
            except MemoryError:
                conn.send((False, ("memory", "the result was over the memory budget")))


def _data_bytes() -> int:
    """This process's data size as RLIMIT_DATA counts it (VmData)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmData:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class GradingProcesses:
    """`count` grading processes; `map` grades items on them within the budget."""

    def __init__(
        self,
        count: int,
        *,
        budget_s: float,
        max_memory_bytes: int = 0,
        initializer: Callable[..., None] | None = None,
        initargs: tuple[Any, ...] = (),
        start_timeout_s: float = 120.0,
        slow_s: float = 1.0,
        on_slow: Callable[[str, bool], None] | None = None,
    ) -> None:
        self.count = count
        self.slow_s = min(slow_s, budget_s)
        self.on_slow = on_slow
        """Told (label, False) when an item has taken `slow_s`, and (label, True) if it
        then finishes: what the quarantine keeps across a restart (`quarantine`)."""
        self.budget_s = budget_s
        self.max_memory_bytes = max_memory_bytes
        self._initializer = initializer
        self._initargs = initargs
        self._start_timeout_s = start_timeout_s
        self._context = multiprocessing.get_context("spawn")
        self._idle: queue.Queue[_Worker | None] = queue.Queue()
        self._spawns: queue.Queue[bool] = queue.Queue()
        self._all: set[_Worker] = set()
        self._busy: dict[_Worker, float] = {}
        """Processes grading an item -> when they began it (monotonic)."""
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._spawner = threading.Thread(
            target=self._spawn_loop, name="attest-grading-spawner", daemon=True
        )
        self.killed: dict[str, int] = {}
        """Processes ended by this pool, by reason (time, memory, died)."""

    # --- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        """Starts every process and waits until each has imported what grading needs;
        raises when one does not come up."""
        self._spawner.start()
        for _ in range(self.count):
            self._spawns.put(True)
        deadline = time.monotonic() + self._start_timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                if len(self._all) >= self.count:
                    return
            if not self._spawner.is_alive():
                break
            time.sleep(0.02)
        raise RuntimeError(f"grading processes did not start within {self._start_timeout_s}s")

    def _spawn_loop(self) -> None:
        """The one thread that starts grading processes (see the module docstring); it
        lives as long as the pool, since its end is their parent-death signal."""
        while not self._closed.is_set():
            try:
                self._spawns.get(timeout=0.2)
            except queue.Empty:
                continue
            while not self._closed.is_set():
                try:
                    worker = self._spawn()
                except Exception:
                    if self._closed.is_set():  # stopped while it started
                        return
                    log.exception("a grading process did not start; trying again in 1s")
                    time.sleep(1.0)
                    continue
                with self._lock:
                    self._all.add(worker)
                self._idle.put(worker)
                break
        self._closed.wait()

    def _spawn(self) -> _Worker:
        ours, theirs = self._context.Pipe(duplex=True)
        process = self._context.Process(
            target=_serve,
            args=(theirs, os.getpid(), self.max_memory_bytes, self._initializer, self._initargs),
            name="attest-otel-grading",
            daemon=True,
        )
        process.start()
        theirs.close()
        try:
            if not ours.poll(self._start_timeout_s):
                raise RuntimeError("no answer from a new grading process")
            ours.recv()
        except BaseException:
            _kill(process)
            ours.close()
            raise
        return _Worker(process, ours)

    def shutdown(self) -> None:
        """Ends every process now: busy ones are killed (their callers get
        `Failed("shutdown")`), idle ones told to exit."""
        self._closed.set()
        with self._lock:
            workers = list(self._all)
            self._all.clear()
        for worker in workers:  # a busy one's caller sees EOF and closes its end
            _kill(worker.process)
        self._idle.put(None)  # wakes a caller waiting for a process

    # --- grading --------------------------------------------------------------------------

    def oldest_s(self) -> float:
        """How long the longest item in grading has taken so far (0: none in grading)."""
        with self._lock:
            started = min(self._busy.values(), default=None)
        return 0.0 if started is None else time.monotonic() - started

    def map(
        self, fn: Callable[..., Any], items: Sequence[tuple[Any, ...]], labels: Sequence[str]
    ) -> list[Any]:
        """`fn(*item)` for each item, in grading processes, each within the budget; an item
        that was not answered is a `Failed` in its place. Never raises."""
        out: list[Any] = []
        while len(out) < len(items):
            try:
                worker = self._take()
            except _Closed:
                out += [Failed("shutdown", "the sidecar is stopping")] * (len(items) - len(out))
                break
            out += self._run(worker, fn, items[len(out) :], labels[len(out) :])
        return out

    def _take(self) -> _Worker:
        while True:
            if self._closed.is_set():
                raise _Closed
            try:
                worker = self._idle.get(timeout=0.5)
            except queue.Empty:
                continue
            if worker is None:
                self._idle.put(None)  # for the next waiter
                raise _Closed
            with self._lock:
                if worker in self._all:
                    return worker

    def _run(
        self,
        worker: _Worker,
        fn: Callable[..., Any],
        items: Sequence[tuple[Any, ...]],
        labels: Sequence[str],
    ) -> list[Any]:
        """Items given to one process, answered in order, until one fails it."""
        out: list[Any] = []
        with self._lock:
            self._busy[worker] = time.monotonic()
        try:
            worker.conn.send((fn, list(items)))
        except (OSError, ValueError):
            return [self._lost(worker, labels[0])]
        try:
            for label in labels:
                with self._lock:
                    self._busy[worker] = time.monotonic()
                slow = False
                try:
                    answered = worker.conn.poll(self.slow_s)
                    if not answered and self.on_slow is not None:
                        slow = True
                        self.on_slow(label, False)
                    if not answered:
                        answered = worker.conn.poll(self.budget_s - self.slow_s)
                    answer = worker.conn.recv() if answered else None
                except (EOFError, OSError, ValueError):
                    out.append(self._lost(worker, label))
                    return out
                if slow and answer is not None and answer[0] and self.on_slow is not None:
                    self.on_slow(label, True)
                if answer is None:
                    out.append(self._replace(worker, "time", label))
                    return out
                ok, value = answer
                if ok:
                    out.append(value)
                    continue
                reason, detail = value
                if reason == "memory":
                    out.append(self._replace(worker, "memory", label))
                    return out
                out.append(Failed(reason, detail))
        finally:
            with self._lock:
                self._busy.pop(worker, None)
        if not self._closed.is_set():
            self._idle.put(worker)
        return out

    def _lost(self, worker: _Worker, label: str) -> Failed:
        """The process died under an item (or the pool is stopping and killed it)."""
        if self._closed.is_set():
            return Failed("shutdown", "the sidecar is stopping")
        worker.process.join(1.0)
        code = worker.process.exitcode
        died = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
        return self._replace(worker, "died", label, f"the grading process died ({died})")

    def _replace(self, worker: _Worker, reason: str, label: str, detail: str = "") -> Failed:
        """Kills `worker` (if it still runs) and asks for a new process in its place."""
        with self._lock:
            ours = worker in self._all
            self._all.discard(worker)
            self.killed[reason] = self.killed.get(reason, 0) + 1
        _kill(worker.process)
        worker.conn.close()
        if ours and not self._closed.is_set():
            self._spawns.put(True)
        if not detail:
            detail = (
                f"grading took longer than its budget ({self.budget_s:g}s); process killed"
                if reason == "time"
                else f"grading needed more than its memory budget "
                f"({self.max_memory_bytes >> 20} MiB); process replaced"
            )
        log.debug("grading process replaced (%s) under %s", reason, label)
        return Failed(reason, detail)


def _kill(process: BaseProcess) -> None:
    if process.is_alive() and process.pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGKILL)
    process.join(5.0)
