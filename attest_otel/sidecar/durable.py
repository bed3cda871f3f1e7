"""The buffer dir as one component of the sidecar: its lock, its quarantine list and the
durable log, opened first and closed last (`lifecycle`).

Opened first, because everything after may append to the log or release records in it;
closed last, after the forwarders have released what they delivered. What an earlier run
left undone is read at start and kept in `replay` until the request paths take it back
(`service.Service`), once the forwarders and the grading pool run.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from attest_otel.errors import UsageError
from attest_otel.sidecar.buffer_dir import claim, release
from attest_otel.sidecar.config import BufferConfig
from attest_otel.sidecar.quarantine import Quarantine
from attest_otel.sidecar.wal import DurableLog

__all__ = ["BufferDir"]


class BufferDir:
    """`--buffer-dir`: see the module docstring. Without one, a component that does
    nothing, with no log (`wal` None) and a quarantine that keeps nothing."""

    def __init__(self, config: BufferConfig) -> None:
        self.dir: Path | None = config.dir
        self.wal: DurableLog | None = (
            DurableLog(
                config.dir, segment_bytes=config.segment_bytes, max_bytes=config.max_dir_bytes
            )
            if config.dir is not None
            else None
        )
        self.quarantine = Quarantine(config.dir)
        self.replay: list[tuple[int, bytes]] = []
        """Records an earlier run left undone, read at start, until they are routed."""
        self._lock: int | None = None

    def start(self) -> None:
        """Takes the dir's lock, then opens the quarantine and the log; UsageError (one
        line) when a file of ours is a symlink or another user's."""
        if self.dir is None or self.wal is None:
            return
        self._lock = claim(self.dir)
        try:
            self.quarantine.open()
            self.replay = self.wal.open()
        except OSError as e:  # a symlink where a file of ours goes, another's file
            self.shutdown(0.0)
            what = "is a symlink" if e.errno == errno.ELOOP else (e.strerror or str(e))
            name = os.path.basename(str(e.filename)) if e.filename else "a file"
            raise UsageError(f"buffer-dir {self.dir}: {name} {what}; refused") from None

    def shutdown(self, timeout_s: float) -> bool:
        """Closes the log and the quarantine and gives up the lock (nothing left to wait
        for: every append was fsynced when it was made)."""
        self.replay = []
        if self.wal is not None:
            self.wal.close()
        self.quarantine.close()
        if self._lock is not None:
            release(self._lock)
            self._lock = None
        return True
