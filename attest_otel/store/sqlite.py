"""The embedded store: recent GenAI traces and their grades, in one SQLite file.

It is what makes `attest-otel grade --trace-id` work on one machine with nothing else
installed. Traces are kept as OTLP protobuf (`TracesData`, the spans as they arrived), so
the same decoder that reads files reads them back; grades are the `CheckResult` JSON of
each run, keyed by the run's agent span.

SQLite in WAL mode lets the CLI read while the sidecar writes. The sidecar writes from one
thread (`StoreWriter`), so grading never waits on the disk and a slow or full disk costs
store entries (counted), never telemetry. Retention is by age and by total size of the
store on disk, oldest first: the cap (`max_bytes`) counts what `du` counts, the database's
pages and its -wal and -shm files, not the spans' bytes (which are about half of it: grades,
indexes and page overhead are the rest). The database uses incremental auto-vacuum, so the
pages a prune frees are given back to the file system at once; a database made before this
was converted once, at open (`VACUUM`). `docs/sizing.md` has the measured margin.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import queue
import sqlite3
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from attest_otel.content import KEEP, ContentPolicy
from attest_otel.errors import SourceError
from attest_otel.store.records import StoredGrade, StoredTrace, grades_from_rows
from attest_otel.store.scrub import scrub_result, scrub_traces
from attest_otel.store.sizing import DiskBudget

__all__ = ["StoreWriter", "TraceStore", "default_store_path"]

log = logging.getLogger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS traces (
    trace_id    TEXT PRIMARY KEY,
    first_ns    INTEGER NOT NULL,
    updated_ns  INTEGER NOT NULL,
    span_count  INTEGER NOT NULL,
    size_bytes  INTEGER NOT NULL,
    data        BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS traces_by_age ON traces (updated_ns);
CREATE TABLE IF NOT EXISTS grades (
    trace_id    TEXT NOT NULL,
    span_id     TEXT NOT NULL,
    agent       TEXT,
    graded_ns   INTEGER NOT NULL,
    verdict     TEXT NOT NULL,
    score       REAL NOT NULL,
    result      TEXT NOT NULL,
    PRIMARY KEY (trace_id, span_id)
);
"""


def _private_file(path: Path) -> None:
    """The store holds prompts and tool outputs: its directory is created 0700 and the
    database 0600 before SQLite opens it. SQLite gives its -wal and -shm files the mode of
    the database file, so they are 0600 too; an existing store is tightened the same way,
    through its own open file, never by path: a symlink at the store path (or at its -wal or
    -shm) is refused, since a chmod through it would change a file that is not ours
    (docs/hostile-input.md, "The buffer dir and the store")."""
    if not path.parent.exists():
        path.parent.mkdir(parents=True, mode=0o700)
    for one in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        if one.is_symlink():
            raise SourceError(f"{one}: the store path is a symlink; refused (give the real path)")
        try:
            fd = os.open(
                one,
                os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_CREAT if one == path else 0),
                0o600,
            )
        except FileNotFoundError:
            continue
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise SourceError(f"{one}: the store path is a symlink; refused") from None
            if one == path:
                raise SourceError(f"{one}: cannot open the store: {e.strerror or e}") from None
            log.warning("store: cannot make %s private: %s", one, e.strerror or e)
            continue
        try:
            if os.fstat(fd).st_mode & 0o077:
                os.fchmod(fd, 0o600)
        except OSError as e:  # not ours to change (a shared store): say so, go on
            log.warning("store: cannot make %s private: %s", one, e.strerror or e)
        finally:
            os.close(fd)


def default_store_path() -> Path:
    """`$XDG_DATA_HOME/attest-otel/store.db`, else `~/.local/share/attest-otel/store.db`."""
    base = os.environ.get("XDG_DATA_HOME", "").strip()
    root = Path(base) if base else Path.home() / ".local" / "share"
    return root / "attest-otel" / "store.db"


class TraceStore:
    """One SQLite connection; safe to share between threads (calls are serialised)."""

    def __init__(
        self,
        path: str | Path,
        *,
        max_age_s: float | None = None,
        max_bytes: int | None = None,
        readonly: bool = False,
    ) -> None:
        self.path = Path(path)
        self.location = str(self.path)
        self.max_age_s = max_age_s
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._budget: DiskBudget | None = None
        if readonly:
            if not self.path.is_file():
                raise SourceError(
                    f"{self.path}: no trace store here (is `attest-otel serve` "
                    "writing to another --store?)"
                )
            uri = f"file:{self.path}?mode=ro"
            self._db = sqlite3.connect(uri, uri=True, check_same_thread=False, timeout=10)
        else:
            _private_file(self.path)
            self._db = sqlite3.connect(self.path, check_same_thread=False, timeout=10)
            # A trace is tens of KB: in 4 KB pages it is a chain of overflow pages, each
            # its own write. 16 KB pages halve the writer's CPU per span (docs/measurements.md,
            # "SQLite page size"); it takes effect in a new file, before the WAL switch.
            self._db.execute("PRAGMA page_size=16384")
            # Freed pages go back to the file system only with auto-vacuum, which a new
            # file takes here, before its first table; an older file is converted below.
            self._db.execute("PRAGMA auto_vacuum=INCREMENTAL")
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SCHEMA)
            self._db.commit()
            if max_bytes is not None:
                page = int(self._db.execute("PRAGMA page_size").fetchone()[0])
                self._budget = DiskBudget.for_cap(max_bytes, page)
                self._db.execute(f"PRAGMA wal_autocheckpoint={self._budget.wal_pages}")
                self._db.execute(f"PRAGMA journal_size_limit={self._budget.wal_bytes}")
                self._convert_to_incremental_vacuum()

    def _convert_to_incremental_vacuum(self) -> None:
        """A store made before the cap counted the disk has no auto-vacuum: its file never
        shrinks. One `VACUUM` converts it (it rewrites the file, so it needs that much free
        disk for a moment, and it says so in the log)."""
        if int(self._db.execute("PRAGMA auto_vacuum").fetchone()[0]) == 2:
            return
        size = self.disk_bytes()
        log.warning(
            "store: converting %s (%.1f MiB) to incremental vacuum, once, so it can stay "
            "under store.max_size_mib",
            self.path,
            size / 2**20,
        )
        try:
            self._db.execute("PRAGMA auto_vacuum=INCREMENTAL")
            self._db.execute("VACUUM")
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except sqlite3.Error as e:  # busy, or no room for the copy: the next start tries again
            log.warning("store: could not convert %s (%s); it will not shrink", self.path, e)

    def disk_bytes(self) -> int:
        """What the store takes on disk: the database file, its -wal and its -shm, in the
        blocks the file system allocated (what `du` says)."""
        total = 0
        for one in (
            self.path,
            *(self.path.with_name(self.path.name + x) for x in ("-wal", "-shm")),
        ):
            try:
                st = one.stat()
            except FileNotFoundError:
                continue
            total += st.st_blocks * 512
        return total

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> TraceStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- writing ---------------------------------------------------------------------------

    def put_trace(
        self,
        trace_id: str,
        data: bytes,
        span_count: int,
        grades: Sequence[StoredGrade] = (),
        *,
        now_ns: int | None = None,
    ) -> None:
        """Adds the spans to the trace (appending if it is already stored) and its grades
        (replacing earlier grades of the same runs)."""
        self.put_many([(trace_id, data, span_count, grades)], now_ns=now_ns)

    def put_many(
        self,
        items: Sequence[tuple[str, bytes, int, Sequence[StoredGrade]]],
        *,
        now_ns: int | None = None,
    ) -> None:
        """`put_trace` for several traces in one transaction (one commit, not one each)."""
        now = time.time_ns() if now_ns is None else now_ns
        with self._lock:
            with self._db:
                for trace_id, data, span_count, grades in items:
                    self._put(trace_id, data, span_count, grades, now)
            self._keep_under_cap()

    @property
    def batch_bytes(self) -> int:
        """How many bytes of spans one transaction should carry: a commit puts them in the
        -wal file first, so under a small cap a large batch alone would pass it."""
        return self._budget.batch_bytes if self._budget is not None else 8 * 2**20

    def _put(
        self, trace_id: str, data: bytes, span_count: int, grades: Sequence[StoredGrade], now: int
    ) -> None:
        # Appending in Python, not with SQL's `||`, which turns BLOBs into text.
        row = self._db.execute("SELECT data FROM traces WHERE trace_id = ?", (trace_id,)).fetchone()
        if row is None:
            self._db.execute(
                "INSERT INTO traces"
                " (trace_id, first_ns, updated_ns, span_count, size_bytes, data)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (trace_id, now, now, span_count, len(data), data),
            )
        elif data:
            merged = bytes(row[0]) + data
            self._db.execute(
                "UPDATE traces SET updated_ns = ?, span_count = span_count + ?,"
                " size_bytes = ?, data = ? WHERE trace_id = ?",
                (now, span_count, len(merged), merged, trace_id),
            )
        if grades:
            self._db.executemany(
                "INSERT OR REPLACE INTO grades"
                " (trace_id, span_id, agent, graded_ns, verdict, score, result)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        g.trace_id,
                        g.span_id,
                        g.agent,
                        g.graded_ns,
                        g.verdict,
                        g.score,
                        g.result_json(),
                    )
                    for g in grades
                ],
            )

    def prune(self, *, now_ns: int | None = None) -> int:
        """Deletes traces past the age limit, then the oldest until under the size limit."""
        now = time.time_ns() if now_ns is None else now_ns
        removed = 0
        with self._lock:
            if self.max_age_s is not None:
                cutoff = now - int(self.max_age_s * 1e9)
                old = [
                    r[0]
                    for r in self._db.execute(
                        "SELECT trace_id FROM traces WHERE updated_ns < ?", (cutoff,)
                    )
                ]
                with self._db:
                    removed += self._delete(old)
            removed += self._keep_under_cap(force=removed > 0)
        return removed

    def _wal_size(self) -> int:
        try:
            return self.path.with_name(self.path.name + "-wal").stat().st_size
        except FileNotFoundError:
            return 0

    def _give_back(self, budget: DiskBudget) -> None:
        """Free pages back to the file system, a -wal's slice at a time: the vacuum moves
        pages through the -wal, and the file shrinks at the checkpoint after it. A reader
        that keeps the checkpoint from finishing stops this until a later write; the free
        pages are reused meanwhile and are not counted as used."""
        while self._pages("freelist_count") > 0:
            # Each step of this pragma frees one page, and `execute` steps once where
            # `executescript` runs each statement to the end.
            self._db.executescript(f"PRAGMA incremental_vacuum({budget.wal_pages});")
            busy = self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
            if busy:
                return

    def _pages(self, name: str) -> int:
        return int(self._db.execute(f"PRAGMA {name}").fetchone()[0])

    def _keep_under_cap(self, *, force: bool = False) -> int:
        """Called with the lock held, after each write: when the database's pages in use
        pass the budget's high mark, the oldest traces go until they are under its low
        mark (so a prune frees room for many writes, not one), then the freed pages are
        given back and the -wal file cut short. `force`: give back what an age prune freed."""
        budget = self._budget
        if budget is None:
            return 0
        page = self._pages("page_size")
        used = (self._pages("page_count") - self._pages("freelist_count")) * page
        removed = 0
        if used > budget.db_high:
            data = int(
                self._db.execute("SELECT COALESCE(SUM(size_bytes), 0) FROM traces").fetchone()[0]
            )
            # Grades, indexes and page slack scale with the spans: the ratio of pages in use
            # to span bytes says how much disk deleting a trace gives back.
            per_byte = used / data if data else 1.0
            excess = used - budget.db_low
            doomed: list[str] = []
            for trace_id, size in self._db.execute(
                "SELECT trace_id, size_bytes FROM traces ORDER BY updated_ns, trace_id"
            ):
                if excess <= 0:
                    break
                doomed.append(trace_id)
                excess -= max(int(size * per_byte), page // 4)
            with self._db:
                removed = self._delete(doomed)
        if removed or force or self._pages("freelist_count") > budget.wal_pages:
            self._give_back(budget)
        elif self._wal_size() > budget.wal_bytes:
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return removed

    def _delete(self, trace_ids: list[str]) -> int:
        for i in range(0, len(trace_ids), 500):
            chunk = trace_ids[i : i + 500]
            marks = ",".join("?" * len(chunk))
            self._db.execute(f"DELETE FROM traces WHERE trace_id IN ({marks})", chunk)
            self._db.execute(f"DELETE FROM grades WHERE trace_id IN ({marks})", chunk)
        return len(trace_ids)

    # --- reading ---------------------------------------------------------------------------

    def get_trace(self, trace_id: str) -> StoredTrace | None:
        key = trace_id.strip().lower()
        with self._lock:
            row = self._db.execute(
                "SELECT trace_id, data, span_count, first_ns, updated_ns FROM traces"
                " WHERE trace_id = ?",
                (key,),
            ).fetchone()
            if row is None:
                return None
            grades = tuple(
                StoredGrade(r[0], r[1], r[2], r[3], json.loads(r[4]))
                for r in self._db.execute(
                    "SELECT trace_id, span_id, agent, graded_ns, result FROM grades"
                    " WHERE trace_id = ? ORDER BY graded_ns, span_id",
                    (key,),
                )
            )
        return StoredTrace(row[0], bytes(row[1]), row[2], row[3], row[4], grades)

    def trace_ids_since(self, since_ns: int) -> list[str]:
        """Traces that received spans at or after `since_ns` (epoch ns), oldest first
        (`grade --since`)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT trace_id FROM traces WHERE updated_ns >= ? ORDER BY updated_ns, trace_id",
                (since_ns,),
            ).fetchall()
        return [str(r[0]) for r in rows]

    def grades_since(self, since_ns: int | None = None) -> list[StoredGrade]:
        """Grades made at or after `since_ns` (all when None), oldest first (`report`).

        A row whose JSON does not parse is skipped: one bad row must not hide a week of
        grades from the report.
        """
        out: list[StoredGrade] = []
        with self._lock:
            cursor = self._db.execute(
                "SELECT trace_id, span_id, agent, graded_ns, result FROM grades"
                " WHERE graded_ns >= ? ORDER BY graded_ns, trace_id, span_id",
                (since_ns if since_ns is not None else -(2**63),),
            )
            out = grades_from_rows(cursor)
        return out

    def trace_ids(self, limit: int = 100) -> list[str]:
        """The most recently updated trace ids, newest first."""
        with self._lock:
            return [
                r[0]
                for r in self._db.execute(
                    "SELECT trace_id FROM traces ORDER BY updated_ns DESC LIMIT ?", (limit,)
                )
            ]

    def stats(self) -> tuple[int, int]:
        """(traces, bytes of trace data)."""
        with self._lock:
            row = self._db.execute(
                "SELECT COUNT(*), COALESCE(SUM(size_bytes), 0) FROM traces"
            ).fetchone()
        return int(row[0]), int(row[1])


@dataclass(frozen=True, slots=True)
class _Put:
    trace_id: str
    data: bytes
    span_count: int
    grades: tuple[StoredGrade, ...]


class StoreWriter:
    """Writes to a `TraceStore` from its own thread, through a bounded queue.

    `put` never blocks: when the queue is full the write is dropped and counted
    (`dropped`), because the store is a convenience and must not slow the pipeline.
    """

    def __init__(
        self,
        store: TraceStore,
        *,
        max_pending: int = 10_000,
        prune_every: int = 500,
        content: ContentPolicy = KEEP,
    ):
        self.store = store
        self.content = content
        """Applied to each write on the writer thread (`scrub`): what the store keeps."""
        self.dropped = 0
        self.errors = 0
        self.written = 0
        self._queue: queue.Queue[_Put | None] = queue.Queue(max_pending)
        self._prune_every = prune_every
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="attest-otel-store", daemon=True)
            self._thread.start()

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
        """`basis`/`runs` matter to a shared store (`postgres`); this one has one writer."""
        try:
            self._queue.put_nowait(_Put(trace_id, data, span_count, tuple(grades)))
        except queue.Full:
            self.dropped += 1

    def _run(self) -> None:
        since_prune = 0
        while True:
            first = self._queue.get()
            batch = [first]
            # Whatever queued meanwhile goes in the same transaction: one commit per batch,
            # up to the bytes the store's -wal has room for.
            size = len(first.data) if first is not None else 0
            limit = self.store.batch_bytes
            while first is not None and len(batch) < 200 and size < limit:
                try:
                    one = self._queue.get_nowait()
                except queue.Empty:
                    break
                batch.append(one)
                if one is None:
                    break
                size += len(one.data)
            items = [i for i in batch if i is not None]
            if items:
                try:
                    self.store.put_many([self._scrubbed(i) for i in items])
                    self.written += len(items)
                    since_prune += len(items)
                    if since_prune >= self._prune_every:
                        since_prune = 0
                        self.store.prune()
                except sqlite3.Error:
                    self.errors += len(items)
                    log.exception("store: could not write %d trace(s)", len(items))
            for _ in batch:
                self._queue.task_done()
            if None in batch:
                return

    def _scrubbed(self, item: _Put) -> tuple[str, bytes, int, Sequence[StoredGrade]]:
        policy = self.content
        if policy.mode == "keep":
            return item.trace_id, item.data, item.span_count, item.grades
        grades = [
            StoredGrade(g.trace_id, g.span_id, g.agent, g.graded_ns, scrub_result(g.result, policy))
            for g in item.grades
        ]
        return item.trace_id, scrub_traces(item.data, policy), item.span_count, grades

    def flush(self, timeout_s: float = 5.0) -> bool:
        """Waits until every write queued so far is in the database; False at the timeout.

        The sidecar grades a trace again when spans arrive after it was graded, from what
        the store holds: the first grading's write must be in before that is read.
        """
        if self._thread is None:
            return self._queue.unfinished_tasks == 0
        deadline = time.monotonic() + timeout_s
        done = self._queue.all_tasks_done
        with done:
            while self._queue.unfinished_tasks:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                done.wait(remaining)
        return True

    def close(self, timeout_s: float = 5.0) -> None:
        """Writes what is queued (up to `timeout_s`), prunes, and closes the store."""
        thread = self._thread
        if thread is not None:
            try:
                self._queue.put(None, timeout=timeout_s)
            except queue.Full:
                log.warning(
                    "store: queue still full at shutdown; %d writes lost", self._queue.qsize()
                )
            thread.join(timeout_s)
            self._thread = None
        try:
            self.store.prune()
        except sqlite3.Error:
            log.exception("store: prune at shutdown failed")
        self.store.close()
