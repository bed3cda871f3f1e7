"""`--buffer-dir`: every accepted request on disk before the sender hears "OK".

A request is appended to the current segment file and fsynced before the receiver
answers; concurrent requests share one fsync (group commit), so durability costs one
disk flush per batch of requests in flight, not one per request. The request bytes stay
there until every span of the request has been forwarded (or dropped for good by the
downstream): the request's pieces (spans passed through at once, spans held in a trace,
graded and forwarded later) each hold a reference, and the last `release` marks the record
done in the segment's `.ack` file. A segment whose records are all done is deleted.

On start, `open()` returns the records of earlier segments that were never marked done;
the service routes them again as if they had just arrived. A `kill -9` therefore loses
no acknowledged span; a span that was forwarded but not yet marked done is sent twice,
which OTLP accepts ("duplicates on retry are an accepted trade-off").

Record layout: `<u32 length><u32 crc32><u64 record id>` then the bytes. A torn last record
(crash mid-write, before its fsync, so never acknowledged) fails its length or CRC and ends
the segment's replay.
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct
import threading
import zlib
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["DurableLog"]

log = logging.getLogger(__name__)

_HEADER = struct.Struct("<IIQ")
_ACK = struct.Struct("<Q")
_SEGMENT_SHIFT = 32


@dataclass(slots=True)
class _Segment:
    seq: int
    path: Path
    ack_path: Path
    pending: set[int] = field(default_factory=set)
    sealed: bool = False


class DurableLog:
    """Segmented, fsynced request log with per-record reference counts."""

    def __init__(self, directory: str | Path, *, segment_bytes: int = 64 * 1024 * 1024):
        self.dir = Path(directory)
        self.segment_bytes = segment_bytes
        self._lock = threading.Lock()
        self._sync_lock = threading.Lock()
        self._refs: dict[int, int] = {}
        self._pinned: set[int] = set()
        self._segments: dict[int, _Segment] = {}
        self._active: _Segment | None = None
        self._fd = -1
        self._ack_fd = -1
        self._written = 0  # bytes appended to the active segment
        self._synced = 0
        self._generation = 0  # bumps on rotation, so a stale sync target is not trusted
        self._next_index = 0
        self.records_written = 0
        self.fsyncs = 0

    # --- start-up --------------------------------------------------------------------------

    def open(self) -> list[tuple[int, bytes]]:
        """Opens a fresh segment and returns (record id, bytes) of every record left undone
        by earlier runs, oldest first. Each comes back pinned, as from `append`."""
        self.dir.mkdir(parents=True, exist_ok=True)
        pending: list[tuple[int, bytes]] = []
        last_seq = 0
        for path in sorted(self.dir.glob("wal-*.log")):
            try:
                seq = int(path.stem.split("-", 1)[1])
            except ValueError:
                continue
            last_seq = max(last_seq, seq)
            segment = _Segment(seq, path, path.with_suffix(".ack"), sealed=True)
            done = self._read_acks(segment.ack_path)
            for rid, data in self._read_records(path):
                if rid in done:
                    continue
                segment.pending.add(rid)
                self._refs[rid] = 0
                self._pinned.add(rid)
                pending.append((rid, data))
            if segment.pending:
                self._segments[seq] = segment
            else:
                self._remove(segment)
        self._rotate(last_seq + 1)
        if pending:
            log.info("buffer-dir: replaying %d request(s) from %s", len(pending), self.dir)
        return pending

    @staticmethod
    def _read_acks(path: Path) -> set[int]:
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return set()
        usable = len(raw) - len(raw) % _ACK.size
        return {v for (v,) in _ACK.iter_unpack(raw[:usable])}

    @staticmethod
    def _read_records(path: Path) -> list[tuple[int, bytes]]:
        out: list[tuple[int, bytes]] = []
        raw = path.read_bytes()
        pos = 0
        while pos + _HEADER.size <= len(raw):
            length, crc, rid = _HEADER.unpack_from(raw, pos)
            start = pos + _HEADER.size
            data = raw[start : start + length]
            if len(data) != length or zlib.crc32(data) != crc:
                log.warning("buffer-dir: %s: torn record at byte %d ignored", path.name, pos)
                break
            out.append((rid, data))
            pos = start + length
        return out

    def _rotate(self, seq: int) -> None:
        """Starts segment `seq`; called with `_lock` held (or before any writer exists)."""
        if self._active is not None:
            os.fsync(self._fd)
            os.close(self._fd)
            os.close(self._ack_fd)
            self._active.sealed = True
            if not self._active.pending:
                self._remove(self._active)
                self._segments.pop(self._active.seq, None)
        path = self.dir / f"wal-{seq:012d}.log"
        segment = _Segment(seq, path, path.with_suffix(".ack"))
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._ack_fd = os.open(segment.ack_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        _fsync_dir(self.dir)
        self._segments[seq] = segment
        self._active = segment
        self._next_index = 0
        self._written = 0
        self._synced = 0
        self._generation += 1

    # --- the data path ---------------------------------------------------------------------

    def append(self, data: bytes) -> int:
        """Writes one request and returns once it is on disk.

        The record comes back *pinned*: it cannot be marked done, whatever `hold` and
        `release` do, until `unpin`. The caller routes the request, `hold`s one reference per
        piece it made, then unpins; a piece that completes before its `hold` (a trace graded
        in between) only takes the count below zero for a moment."""
        with self._lock:
            active = self._active
            if active is None:
                raise RuntimeError("DurableLog.append before open()")
            if self._written >= self.segment_bytes:
                self._rotate(active.seq + 1)
                active = self._active
                assert active is not None
            rid = (active.seq << _SEGMENT_SHIFT) | self._next_index
            self._next_index += 1
            _write_all(self._fd, _HEADER.pack(len(data), zlib.crc32(data), rid) + data)
            self._written += _HEADER.size + len(data)
            active.pending.add(rid)
            self._refs[rid] = 0
            self._pinned.add(rid)
            self.records_written += 1
            target = self._written
            generation = self._generation
            fd = self._fd
        self._sync(fd, target, generation)
        return rid

    def _sync(self, fd: int, target: int, generation: int) -> None:
        # Group commit: whoever gets the sync lock flushes everything written so far; the
        # others find their bytes already covered and return without a second fsync.
        with self._sync_lock:
            with self._lock:
                if generation != self._generation:
                    return  # rotation fsynced and closed that segment
                if self._synced >= target:
                    return
                upto = self._written
            os.fsync(fd)
            self.fsyncs += 1
            with self._lock:
                if generation == self._generation:
                    self._synced = max(self._synced, upto)

    def hold(self, rid: int, count: int = 1) -> None:
        with self._lock:
            if rid in self._refs:
                self._refs[rid] += count

    def unpin(self, rid: int) -> None:
        with self._lock:
            self._pinned.discard(rid)
            if self._refs.get(rid, 1) <= 0:
                self._done(rid)

    def release(self, rids: tuple[int, ...] | list[int]) -> None:
        """Drops one reference per id; an unpinned record with none left is marked done."""
        if not rids:
            return
        with self._lock:
            for rid in rids:
                left = self._refs.get(rid)
                if left is None:
                    continue
                self._refs[rid] = left - 1
                if left <= 1 and rid not in self._pinned:
                    self._done(rid)

    def _done(self, rid: int) -> None:
        """Marks a record done (lock held); a sealed segment with nothing left goes away."""
        del self._refs[rid]
        segment = self._segments.get(rid >> _SEGMENT_SHIFT)
        if segment is None:
            return
        segment.pending.discard(rid)
        if segment is self._active:
            _write_all(self._ack_fd, _ACK.pack(rid))
        elif not segment.pending:
            self._remove(segment)
            del self._segments[segment.seq]
        else:
            with open(segment.ack_path, "ab") as f:
                f.write(_ACK.pack(rid))

    @property
    def pending_records(self) -> int:
        with self._lock:
            return len(self._refs)

    def close(self) -> None:
        with self._lock:
            if self._active is None:
                return
            os.fsync(self._ack_fd)
            os.close(self._fd)
            os.close(self._ack_fd)
            if not self._active.pending:
                self._remove(self._active)
            self._active = None

    @staticmethod
    def _remove(segment: _Segment) -> None:
        for path in (segment.path, segment.ack_path):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _fsync_dir(directory: Path) -> None:
    """Makes a new file's directory entry durable too (a crash could lose the file)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
