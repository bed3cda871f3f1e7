"""`store:PATH`: traces and grades from the sidecar's embedded store.

Every question goes through `attest_otel.store.TraceStore`, opened read-only for the call,
so nothing here can change or lock the sidecar's data for long, and the store's tables have
one reader.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from attest_otel.errors import InputError, SourceError
from attest_otel.ingest.decode import Decoded, decode_bytes
from attest_otel.ingest.sources.base import TraceNotFoundError, normalize_trace_id, only_trace
from attest_otel.store import StoredGrade, TraceStore, default_store_path

__all__ = ["StoreSource", "since_to_ns"]

T = TypeVar("T")


class StoreSource:
    kind = "store"

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path).expanduser() if path else default_store_path()
        self.location = str(self.path)

    def close(self) -> None:
        """Nothing held open: each call opens and closes its own read-only store."""

    def _read(self, what: str, question: Callable[[TraceStore], T]) -> T:
        try:
            with TraceStore(self.path, readonly=True) as store:
                return question(store)
        except sqlite3.Error as e:
            raise SourceError(f"{self.path}: cannot {what}: {e}") from None

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
