"""Traces that broke grading, kept across a restart so a replay does not stall again.

With `--buffer-dir`, a trace stays in the durable log until it is forwarded; a sidecar
killed while grading it replays it at restart and would grade it again, into the same stall
(docs/hostile-input.md, "Grading budget"). So the trace ids that broke grading (past its
time or memory budget, or a grading process that died) go to `quarantine` in the buffer dir,
and so does a trace whose grading has taken a second already ("slow"), until it finishes:
a sidecar killed in that second leaves it listed. A listed trace is forwarded ungraded,
flagged with the reason, and never graded again by this buffer dir.

One line per event (`broke ID REASON`, `slow ID`, `done ID`), appended and flushed to the
kernel; the file is read and rewritten whole when the sidecar starts. Without a buffer dir
the list lives in memory only.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

log = logging.getLogger(__name__)

__all__ = ["MAX_ENTRIES", "Quarantine"]

MAX_ENTRIES = 10_000
"""Trace ids kept, at most (the oldest go first): a trace id is not reused, and a replay
only needs the ids of the traces the durable log still holds."""


class Quarantine:
    def __init__(self, directory: Path | None) -> None:
        self.path = directory / "quarantine" if directory is not None else None
        self._listed: dict[str, str] = {}
        """Trace id -> why it is quarantined."""
        self._slow: set[str] = set()
        self._lock = threading.Lock()
        self._fd: int | None = None

    def open(self) -> None:
        """Reads what an earlier run left, rewrites it compacted, and keeps it open."""
        if self.path is None:
            return
        flags = os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(self.path, os.O_RDONLY | flags)
        except FileNotFoundError:
            text = ""
        else:
            with os.fdopen(fd, encoding="utf-8", errors="replace") as f:
                text = f.read()
        slow: dict[str, None] = {}
        for line in text.splitlines():
            parts = line.split(" ", 2)
            if len(parts) >= 2 and parts[0] == "broke":
                self._listed[parts[1]] = parts[2] if len(parts) > 2 else "broke grading"
            elif len(parts) == 2 and parts[0] == "slow":
                slow[parts[1]] = None
            elif len(parts) == 2 and parts[0] == "done":
                slow.pop(parts[1], None)
        for trace_id in slow:  # its grading was under way when the sidecar ended
            self._listed.setdefault(trace_id, "the sidecar ended while grading it")
        while len(self._listed) > MAX_ENTRIES:
            del self._listed[next(iter(self._listed))]
        tmp = self.path.with_name("quarantine.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | flags, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.writelines(f"broke {tid} {why}\n" for tid, why in self._listed.items())
        os.replace(tmp, self.path)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | flags)
        if self._listed:
            log.warning(
                "buffer-dir: %d trace(s) broke grading before; a replay forwards them ungraded",
                len(self._listed),
            )

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def reason(self, trace_id: str) -> str | None:
        """Why the trace is quarantined; None when it is not."""
        with self._lock:
            return self._listed.get(trace_id)

    def broke(self, trace_id: str, why: str) -> None:
        with self._lock:
            self._listed[trace_id] = why
            self._slow.discard(trace_id)
            self._write(f"broke {trace_id} {why}\n")

    def slow(self, trace_id: str, done: bool) -> None:
        """A trace's grading has taken a while (done=False), then finished (done=True)."""
        with self._lock:
            if done:
                if trace_id in self._slow:
                    self._slow.discard(trace_id)
                    self._write(f"done {trace_id}\n")
            elif trace_id not in self._slow:
                self._slow.add(trace_id)
                self._write(f"slow {trace_id}\n")

    def _write(self, line: str) -> None:
        if self._fd is None:
            return
        try:
            os.write(self._fd, line.replace("\n", " ").rstrip().encode() + b"\n")
        except OSError as e:  # a full disk: the trace may be graded again after a restart
            log.warning("buffer-dir: cannot note a trace in the quarantine (%s)", e)
