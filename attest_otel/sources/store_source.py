"""`store:PATH` or `store:postgresql://...`: traces and grades from the sidecars' store.

Every question goes through `attest_otel.store` (`open_store(..., readonly=True)`), so
nothing here can change the sidecar's data, and the store's tables have one reader. A SQLite
file is opened for each call, so nothing holds it open or locked for long; a PostgreSQL
store is opened once (a connection is dear) and closed with the source.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from attest_otel.errors import InputError, SourceError
from attest_otel.ingest.decode import Decoded, decode_bytes
from attest_otel.sources.base import (
    TraceNotFoundError,
    normalize_trace_id,
    only_trace,
)
from attest_otel.sources.kind import SourceKind
from attest_otel.store import (
    GradeSummary,
    Store,
    StoredGrade,
    default_store_path,
    is_url,
    open_store,
    redact,
)

__all__ = ["StoreSource", "since_to_ns"]

T = TypeVar("T")


class StoreSource:
    kind = "store"

    def __init__(self, path: str | Path | None = None) -> None:
        self.target: str | Path = (
            path
            if isinstance(path, str) and is_url(path)
            else Path(path).expanduser()
            if path
            else default_store_path()
        )
        self.location = redact(self.target)
        self.path: Path | str = self.target if isinstance(self.target, Path) else self.location
        """The SQLite file, or the URL as messages show it (without its password)."""
        self._shared: Store | None = None

    def close(self) -> None:
        """Closes the PostgreSQL store if one was opened (a SQLite file is never held)."""
        if self._shared is not None:
            self._shared.close()
            self._shared = None

    def _read(self, what: str, question: Callable[[Any], T]) -> T:
        if not is_url(self.target):
            try:
                with open_store(self.target, readonly=True) as store:
                    return question(store)
            except sqlite3.Error as e:
                raise SourceError(f"{self.location}: cannot {what}: {e}") from None
        import psycopg

        try:
            if self._shared is None:
                self._shared = open_store(self.target, readonly=True)
            return question(self._shared)
        except psycopg.Error as e:
            raise SourceError(
                f"{self.location}: cannot {what}: {' '.join(str(e).split())}"
            ) from None

    def summary(self, since_ns: int | None, until_ns: int, limit: int = 10) -> GradeSummary | None:
        """The window counted by the store itself, when it can (PostgreSQL); else None and
        `report` counts the rows of `grades_since`."""
        if not is_url(self.target):
            return None
        counted: GradeSummary = self._read(
            "count grades", lambda store: store.summary(since_ns, until_ns, limit)
        )
        return counted

    def fetch(self, trace_id: str) -> Decoded:
        return self.fetch_with_grades(trace_id)[0]

    def fetch_with_grades(self, trace_id: str) -> tuple[Decoded, dict[str, dict[str, Any]]]:
        """The trace's spans, and the grades the sidecar stored for it by agent span id."""
        tid = normalize_trace_id(trace_id)
        stored = self._read("read the trace store", lambda store: store.get_trace(tid))
        if stored is None:
            raise TraceNotFoundError(tid, f"the store {self.path}")
        try:
            decoded = decode_bytes(
                stored.data, "application/x-protobuf", source=f"{self.path} trace {tid}"
            )
        except InputError as e:
            raise SourceError(f"{self.path}: stored trace {tid} is corrupt: {e.problem}") from None
        grades = {g.span_id: g.result for g in stored.grades}
        return only_trace(decoded, tid), grades

    def trace_ids_since(self, since_ns: int) -> list[str]:
        """Traces that received spans at or after `since_ns` (epoch ns), oldest first."""
        return self._read("list traces", lambda store: store.trace_ids_since(since_ns))

    def grades_since(self, since_ns: int | None = None) -> list[StoredGrade]:
        """Stored grades made at or after `since_ns` (all when None), oldest first."""
        return self._read("read grades", lambda store: store.grades_since(since_ns))


def since_to_ns(seconds: float, *, now_ns: int | None = None) -> int:
    """The epoch-ns moment `seconds` before now."""
    now = time.time_ns() if now_ns is None else now_ns
    return now - int(seconds * 1e9)


KIND = SourceKind(
    "store",
    "optional path",
    "/var/lib/attest-otel/store.db",
    lambda path, _: StoreSource(path or None),  # no path: the sidecar's default store
)
