"""How a sidecar writes to the shared store: in batches, from its own thread, and through a
bounded queue that outlasts the database being away (and, with `--buffer-dir`, the sidecar).

A database is a network peer: it restarts, fails over, is unreachable for a minute. Grading
and forwarding must not wait for it, so `put` only queues; one thread writes what queued in
one transaction. While the database cannot be reached the batch stays at the head of the
queue and is retried with backoff; new grades queue behind it. The queue is bounded in
bytes: past the bound a grade is refused and counted (`dropped`, a WARNING), never lost
silently, and `backlog()` gives `/readyz` the reason to answer 503, so a Collector in front
sends elsewhere.

With a spool directory (`<buffer-dir>/store-queue`) every queued write is also appended to a
segment file before `put` returns, and a segment is deleted once all its writes are in the
database: a sidecar killed with `kill -9` writes them on its next start. The bound holds on
disk too: a segment is an eighth of it, and the spool's files (written writes kept until
their segment empties included) never pass it. Appends are not
fsynced (a power cut may lose the last ones; a killed process does not). Writing a record
twice is harmless: parts are keyed by digest and a grade replaces only one from no more
spans.
"""

from __future__ import annotations

import json
import logging
import os
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import psycopg

from attest_otel.content import KEEP, ContentPolicy
from attest_otel.plumbing.throttled_log import Throttled
from attest_otel.store.postgres import PostgresStore, PutItem, Unreachable
from attest_otel.store.records import StoredGrade
from attest_otel.store.scrub import scrub_result, scrub_traces

__all__ = ["SharedStoreWriter"]

log = logging.getLogger(__name__)

_HEADER = struct.Struct(">II")
_SEGMENT_BYTES = 16 * 1024 * 1024
_BATCH_ITEMS = 200
_BATCH_BYTES = 8 * 1024 * 1024


@dataclass(slots=True)
class _Pending:
    trace_id: str
    data: bytes
    span_count: int
    grades: tuple[StoredGrade, ...]
    basis: tuple[str, ...] | None
    runs: tuple[str, ...] | None
    size: int
    segment: int


def _encode(p: _Pending) -> bytes:
    meta = json.dumps(
        {
            "t": p.trace_id,
            "n": p.span_count,
            "b": p.basis,
            "r": p.runs,
            "g": [[g.trace_id, g.span_id, g.agent, g.graded_ns, g.result] for g in p.grades],
        },
        ensure_ascii=False,
    ).encode()
    return _HEADER.pack(len(meta), len(p.data)) + meta + p.data


def _decode(blob: bytes, segment: int) -> list[_Pending]:
    """The records of one segment, up to the first torn or unreadable one (a crash mid-write
    leaves at most the last record incomplete)."""
    out: list[_Pending] = []
    pos = 0
    while pos + _HEADER.size <= len(blob):
        n_meta, n_data = _HEADER.unpack_from(blob, pos)
        end = pos + _HEADER.size + n_meta + n_data
        if end > len(blob):
            break
        try:
            meta = json.loads(blob[pos + _HEADER.size : pos + _HEADER.size + n_meta])
            grades = tuple(
                StoredGrade(str(t), str(s), a, int(ns), dict(r)) for t, s, a, ns, r in meta["g"]
            )
            basis = tuple(meta["b"]) if meta["b"] is not None else None
            runs = tuple(meta["r"]) if meta["r"] is not None else None
            data = blob[end - n_data : end]
            out.append(
                _Pending(
                    str(meta["t"]), data, int(meta["n"]), grades, basis, runs, end - pos, segment
                )
            )
        except (ValueError, KeyError, TypeError):
            break
        pos = end
    return out


class SharedStoreWriter:
    """Batched, non-blocking writes to a `PostgresStore` (see the module docstring)."""

    def __init__(
        self,
        store: PostgresStore,
        *,
        max_bytes: int = 64 * 1024 * 1024,
        spool_dir: Path | None = None,
        prune_every: int = 500,
        content: ContentPolicy = KEEP,
    ) -> None:
        self._store = store
        self.content = content
        """Applied to each write on the writer thread (`scrub`): what the store keeps."""
        self.max_bytes = max_bytes
        self.spool_dir = spool_dir
        self.on_stale: Callable[[str], None] | None = None
        """Told each trace whose write missed a part another sidecar stored: grade it again
        from the whole trace (called on this writer's thread: hand it off)."""
        self.written = 0
        self.dropped = 0
        self.errors = 0
        self.retries = 0
        self.replayed = 0
        self._prune_every = prune_every
        self._items: deque[_Pending] = deque()
        self._bytes = 0
        self._busy = 0
        self._cond = threading.Condition()
        self._stop = False
        self._thread: threading.Thread | None = None
        self._failing_since: float | None = None
        self._refused_at = 0.0
        self._logged_at = 0.0
        self._spool_failed = Throttled(log, logging.ERROR)  # a full disk: every write
        self._segments: dict[int, int] = {}
        self._segment_bytes = min(_SEGMENT_BYTES, max(max_bytes // 8, 64 * 1024))
        self._files: dict[int, int] = {}  # each spool file's bytes
        self._segment = 0
        self._fd: int | None = None
        self._segment_size = 0
        if spool_dir is not None:
            self._open_spool(spool_dir)

    @property
    def store(self) -> PostgresStore:
        return self._store

    @property
    def pending(self) -> int:
        with self._cond:
            return len(self._items)

    def pending_for(self, trace_id: str) -> list[tuple[bytes, tuple[StoredGrade, ...]]]:
        """The writes of `trace_id` not yet in the database, oldest first (data, grades):
        what a regrade adds to what the store holds, so spans graded while the database
        was away are not missing from it."""
        with self._cond:
            return [(i.data, i.grades) for i in self._items if i.trace_id == trace_id]

    @property
    def reachable(self) -> bool:
        """False while the last write could not reach the database."""
        return self._failing_since is None

    # --- the spool -------------------------------------------------------------------------

    def _path(self, segment: int) -> Path:
        assert self.spool_dir is not None
        return self.spool_dir / f"q-{segment:012d}.log"

    def _open_spool(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        last = 0
        for path in sorted(directory.glob("q-*.log")):
            segment = int(path.stem[2:])
            info = path.lstat()
            if path.is_symlink() or info.st_uid != os.geteuid():
                log.error("store: spool file %s is a symlink or not ours; refused", path.name)
                continue
            last = max(last, segment)
            items = _decode(path.read_bytes(), segment)
            if not items:
                path.unlink(missing_ok=True)
                continue
            self._segments[segment] = len(items)
            self._files[segment] = path.stat().st_size
            for item in items:
                self._items.append(item)
                self._bytes += item.size
        self.replayed = len(self._items)
        if self.replayed:
            log.info(
                "store: %d write(s) left queued by the last run, writing them now",
                self.replayed,
                extra={"dir": str(directory)},
            )
        self._new_segment(last + 1)

    def _new_segment(self, segment: int) -> None:
        if self._fd is not None:
            os.close(self._fd)
            if not self._segments.get(self._segment):
                self._path(self._segment).unlink(missing_ok=True)
                self._files.pop(self._segment, None)
        self._segment = segment
        self._segment_size = 0
        self._files[segment] = 0
        self._fd = os.open(  # no symlink followed (docs/hostile-input.md)
            self._path(segment), os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600
        )

    def _spool_full(self, blob: bytes) -> bool:
        """Whether `blob` would take the spool's files past the bound (under the lock)."""
        if self._fd is None:
            return False
        files = dict(self._files)
        files[self._segment] = files.get(self._segment, 0) + len(blob)
        return sum(-(-n // 4096) * 4096 for n in files.values()) > self.max_bytes  # du's blocks

    def _spool(self, item: _Pending, blob: bytes) -> None:
        if self._fd is None:
            return
        if self._segment_size >= self._segment_bytes:
            self._new_segment(self._segment + 1)
        try:
            os.write(self._fd, blob)
        except OSError as e:  # kept in memory: written unless the process dies first
            self._spool_failed(
                "store: cannot spool a write under %s (%s)", self.spool_dir, e.strerror or e
            )
            return
        self._segment_size += len(blob)
        self._files[self._segment] = self._segment_size
        item.segment = self._segment
        self._segments[self._segment] = self._segments.get(self._segment, 0) + 1

    def _done(self, items: Sequence[_Pending]) -> None:
        """Forgets the spooled copies of written items (under the lock)."""
        for item in items:
            if item.segment in self._segments:
                self._segments[item.segment] -= 1
        for segment in [s for s, n in self._segments.items() if n <= 0]:
            del self._segments[segment]
            if segment != self._segment:
                self._path(segment).unlink(missing_ok=True)
                self._files.pop(segment, None)
            elif self._fd is not None:
                os.ftruncate(self._fd, 0)
                self._segment_size = 0
                self._files[segment] = 0

    # --- the queue -------------------------------------------------------------------------

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
        """Queues one write; never blocks. Refused (counted) when the queue is full."""
        size = len(data) + 512 + sum(len(str(g.result)) for g in grades)
        item = _Pending(
            trace_id,
            data,
            span_count,
            tuple(grades),
            tuple(basis) if basis is not None else None,
            tuple(runs) if runs is not None else None,
            size,
            -1,
        )
        blob = _encode(item) if self.spool_dir is not None else b""
        with self._cond:
            if self._items and (self._bytes + size > self.max_bytes or self._spool_full(blob)):
                self.dropped += 1
                self._refused_at = time.monotonic()
                self._warn(
                    f"store: write queue full ({self._bytes} bytes, "
                    f"{len(self._items)} writes waiting for the database); "
                    f"{self.dropped} trace write(s) refused so far"
                )
                return
            self._spool(item, blob)
            self._items.append(item)
            self._bytes += size
            self._cond.notify_all()

    def backlog(self) -> str | None:
        """Why `/readyz` should say 503: the queue is full (or refused a write in the last
        5 s). A slow or absent database alone is not a reason while the queue has room."""
        with self._cond:
            full = self._bytes >= self.max_bytes * 0.95
            if not full and time.monotonic() - self._refused_at >= 5.0:
                return None
            return (
                f"store write queue full ({len(self._items)} writes waiting, "
                f"{self.dropped} refused)"
            )

    def _warn(self, message: str) -> None:
        now = time.monotonic()
        if now - self._logged_at >= 10.0:
            self._logged_at = now
            log.warning(message)

    def _run(self) -> None:
        since_prune = 0
        backoff = 0.1
        while True:
            with self._cond:
                while not self._items and not self._stop:
                    self._cond.wait()
                if self._stop and (not self._items or self._failing_since is not None):
                    return
                batch: list[_Pending] = []
                size = 0
                for item in self._items:
                    if batch and (len(batch) >= _BATCH_ITEMS or size + item.size > _BATCH_BYTES):
                        break
                    batch.append(item)
                    size += item.size
                self._busy = len(batch)
            stale, failed = self._write(batch)
            if failed:
                self.retries += 1
                with self._cond:
                    self._busy = 0
                    self._cond.notify_all()
                    self._cond.wait(backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            backoff = 0.1
            with self._cond:
                for _ in batch:
                    self._bytes -= self._items.popleft().size
                self._done(batch)
                self._busy = 0
                self._cond.notify_all()
            since_prune += len(batch)
            if since_prune >= self._prune_every or self._over_cap():
                since_prune = 0
                self._prune()
            for trace_id in stale:
                if self.on_stale is not None:
                    self.on_stale(trace_id)

    def _write(self, batch: list[_Pending]) -> tuple[list[str], bool]:
        """(stale trace ids, whether the database could not be reached)."""
        try:
            stale = self._store.put_many([self._scrubbed(i) for i in batch])
        except Unreachable as e:
            if self._failing_since is None:
                self._failing_since = time.monotonic()
                log.error(
                    "store: cannot reach %s (%s); %d write(s) wait in the queue",
                    self._store.location,
                    " ".join(str(e).split()),
                    len(self._items),
                )
            return [], True
        except psycopg.Error:
            return self._one_by_one(batch), False
        if self._failing_since is not None:
            log.warning(
                "store: %s reachable again after %.0fs; writing the %d queued",
                self._store.location,
                time.monotonic() - self._failing_since,
                len(self._items),
            )
            self._failing_since = None
        self.written += len(batch)
        return stale, False

    def _scrubbed(self, item: _Pending) -> PutItem:
        policy = self.content
        if policy.mode == "keep":
            return (item.trace_id, item.data, item.span_count, item.grades, item.basis, item.runs)
        grades = [
            StoredGrade(g.trace_id, g.span_id, g.agent, g.graded_ns, scrub_result(g.result, policy))
            for g in item.grades
        ]
        return (
            item.trace_id,
            scrub_traces(item.data, policy),
            item.span_count,
            grades,
            item.basis,
            item.runs,
        )

    def _one_by_one(self, batch: list[_Pending]) -> list[str]:
        """A batch the database refused (not a connection problem): the writes that go in
        alone do; the others are counted in `errors` and logged, not retried for ever."""
        stale: list[str] = []
        for i in batch:
            try:
                stale += self._store.put_many([self._scrubbed(i)])
                self.written += 1
            except psycopg.Error:
                self.errors += 1
                log.exception("store: could not write trace %s", i.trace_id)
        return stale

    def _over_cap(self) -> bool:
        """Checked after every batch (one cheap query): the size cap holds between the
        age prunes, which come every `prune_every` writes."""
        try:
            return self._store.over_cap()
        except psycopg.Error:
            return False

    def _prune(self) -> None:
        try:
            self._store.prune()
        except psycopg.Error as e:
            log.warning("store: prune failed: %s", " ".join(str(e).split()))

    def flush(self, timeout_s: float = 5.0) -> bool:
        """Waits until every write queued so far is in the database; False at the timeout."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._items:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._thread is None:
                    return False
                self._cond.wait(remaining)
        return True

    def close(self, timeout_s: float = 5.0) -> None:
        """Writes what is queued (up to `timeout_s`), prunes and closes. What is still
        queued then is named in a WARNING: kept in the spool for the next start, or lost."""
        self.flush(timeout_s)
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None
        left = self.pending
        if left:
            where = (
                f"kept under {self.spool_dir} for the next start"
                if self._fd is not None
                else "lost (no --buffer-dir)"
            )
            log.warning("store: %d write(s) not in the database at shutdown: %s", left, where)
        if not left:
            self._prune()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
            if not self._segments.get(self._segment):
                self._path(self._segment).unlink(missing_ok=True)
        self._store.close()
