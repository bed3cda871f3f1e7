"""The store as a component of the sidecar: opened at start, its writer's queue flushed and
closed at shutdown.

The grader and the regrader are handed this part when they are built, before anything is
opened; `put`, `flush` and the shared writer's own questions (`backlog`, `pending_for`,
`reachable`) go to the writer once it is open. A fleet's shared store (`store.url`) is
waited for at start, so a sidecar that cannot reach its database never opens a port.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from attest_otel.content import ContentPolicy
from attest_otel.sidecar.config import StoreConfig
from attest_otel.store import Store, StoredGrade, Writer, open_store, open_writer
from attest_otel.store.shared_writer import SharedStoreWriter

__all__ = ["StorePart"]


class StorePart:
    """`Writer` for the grader (see the module docstring); a lifecycle component."""

    def __init__(
        self,
        config: StoreConfig,
        *,
        content: ContentPolicy,
        spool_dir: Path | None,
        on_stale: Callable[[str], None] | None = None,
    ) -> None:
        """`spool_dir`: where the shared store's queue waits on disk (None: in memory).
        `on_stale`: told a trace another sidecar also stored spans of (shared store only)."""
        self.config = config
        self.content = content
        self.spool_dir = spool_dir
        self.on_stale = on_stale
        self._store: Store | None = None
        self._writer: Writer | None = None

    def start(self) -> None:
        config = self.config
        opened = open_store(  # a URL: the fleet's shared store, migrated now
            config.url or config.path,
            max_age_s=config.max_age_s,
            max_bytes=config.max_bytes,
            wait_for_database=True,
        )
        self._store = opened
        writer = open_writer(
            opened,
            spool_dir=self.spool_dir,
            content=self.content,
            max_queue_bytes=config.max_queue_bytes,
        )
        if isinstance(writer, SharedStoreWriter):  # another sidecar's spans
            writer.on_stale = self.on_stale
        self._writer = writer
        writer.start()

    def shutdown(self, timeout_s: float) -> bool:
        """Writes what is queued within `timeout_s` (at least half a second), then closes."""
        if self._writer is not None:
            self._writer.close(timeout_s=max(0.5, timeout_s))
            self._writer = None
        elif self._store is not None:
            self._store.close()
        self._store = None
        return True

    # --- Writer ----------------------------------------------------------------------------

    @property
    def store(self) -> Store:
        assert self._store is not None, "the store is opened at start"
        return self._store

    @property
    def opened(self) -> Store | None:
        """The store once started (None before, and after shutdown)."""
        return self._store

    def put(
        self,
        trace_id: str,
        data: bytes,
        span_count: int,
        grades: Sequence[StoredGrade] = (),
        *,
        basis: Sequence[str] | None = None,
        runs: Sequence[str] | None = None,
    ) -> None:
        if self._writer is not None:
            self._writer.put(trace_id, data, span_count, grades, basis=basis, runs=runs)

    def flush(self, timeout_s: float = 5.0) -> bool:
        return self._writer.flush(timeout_s) if self._writer is not None else True

    def close(self, timeout_s: float = 5.0) -> None:
        self.shutdown(timeout_s)

    def __getattr__(self, name: str) -> Any:
        """The shared writer's own questions (`backlog`, `pending_for`, `reachable`,
        `written`, `dropped`): absent, as on the SQLite writer, until it is open."""
        writer = self.__dict__.get("_writer")
        if writer is None or name.startswith("_"):
            raise AttributeError(name)
        return getattr(writer, name)
