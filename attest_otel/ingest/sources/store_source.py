"""`store:PATH`: traces and grades from the sidecar's embedded SQLite store.

Reading a trace by id goes through `attest_otel.store.TraceStore` (its public API). Two
questions that API does not answer yet are asked here, read-only, against the same file:
which traces arrived since a moment (`grade --since`), and which grades were made since a
moment (`report`). They read the `traces` and `grades` tables `store.py` creates, with a
`mode=ro` connection, so nothing here can change or lock the sidecar's data for long. If
`TraceStore` grows these queries, this module should call them instead.
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attest_otel.errors import InputError, SourceError
from attest_otel.ingest.decode import Decoded, decode_bytes
from attest_otel.ingest.sources.base import TraceNotFoundError, normalize_trace_id, only_trace

__all__ = ["GradeRow", "StoreSource", "default_store_path", "since_to_ns"]


def default_store_path() -> Path:
    """The sidecar's default (`$XDG_DATA_HOME/attest-otel/store.db`), from its own config."""
    from attest_otel.sidecar.config import default_store_path as sidecar_default

    return sidecar_default()


@dataclass(frozen=True, slots=True)
class GradeRow:
    """One stored grade: the CheckResult JSON of a run, where and when it was made."""

    trace_id: str
    span_id: str
    agent: str | None
    graded_ns: int
    result: dict[str, Any]


class StoreSource:
    kind = "store"

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path).expanduser() if path else default_store_path()
        self.location = str(self.path)

    def close(self) -> None:
        """Nothing held open: each call opens and closes its own read-only connection."""

    def _missing(self) -> SourceError:
        return SourceError(
            f"{self.path}: no trace store here (is `attest-otel serve` writing to another "
            "--store?)"
        )

    def fetch(self, trace_id: str) -> Decoded:
        return self.fetch_with_grades(trace_id)[0]

    def fetch_with_grades(self, trace_id: str) -> tuple[Decoded, dict[str, dict[str, Any]]]:
        """The trace's spans, and the grades the sidecar stored for it by agent span id."""
        from attest_otel.store import TraceStore

        tid = normalize_trace_id(trace_id)
        if not self.path.is_file():
            raise self._missing()
        try:
            with TraceStore(self.path, readonly=True) as store:
                stored = store.get_trace(tid)
        except sqlite3.Error as e:
            raise SourceError(f"{self.path}: cannot read the trace store: {e}") from None
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

    def _connect(self) -> sqlite3.Connection:
        if not self.path.is_file():
            raise self._missing()
        try:
            return sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True, timeout=10)
        except sqlite3.Error as e:
            raise SourceError(f"{self.path}: cannot open the trace store: {e}") from None

    def trace_ids_since(self, since_ns: int) -> list[str]:
        """Traces that received spans at or after `since_ns` (epoch ns), oldest first."""
        db = self._connect()
        try:
            rows = db.execute(
                "SELECT trace_id FROM traces WHERE updated_ns >= ? ORDER BY updated_ns, trace_id",
                (since_ns,),
            ).fetchall()
        except sqlite3.Error as e:
            raise SourceError(f"{self.path}: cannot list traces: {e}") from None
        finally:
            db.close()
        return [str(r[0]) for r in rows]

    def grades_since(self, since_ns: int | None = None) -> list[GradeRow]:
        """Stored grades made at or after `since_ns` (all when None), oldest first.

        A row whose JSON does not parse is skipped: one bad row must not hide a week of
        grades from the report.
        """
        out: list[GradeRow] = []
        db = self._connect()
        try:
            cursor = db.execute(
                "SELECT trace_id, span_id, agent, graded_ns, result FROM grades"
                " WHERE graded_ns >= ? ORDER BY graded_ns, trace_id, span_id",
                (since_ns if since_ns is not None else -(2**63),),
            )
            for trace_id, span_id, agent, graded_ns, text in cursor:
                try:
                    result = json.loads(text)
                except (TypeError, ValueError):
                    continue
                if isinstance(result, dict):
                    out.append(GradeRow(str(trace_id), str(span_id), agent, int(graded_ns), result))
        except sqlite3.Error as e:
            raise SourceError(f"{self.path}: cannot read grades: {e}") from None
        finally:
            db.close()
        return out


def since_to_ns(seconds: float, *, now_ns: int | None = None) -> int:
    """The epoch-ns moment `seconds` before now."""
    now = time.time_ns() if now_ns is None else now_ns
    return now - int(seconds * 1e9)
