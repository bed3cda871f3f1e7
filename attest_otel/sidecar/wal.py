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
no acknowledged span. A request on disk whose "OK" the kill cut off is replayed and also
sent again by its sender: `replayed_copy` knows that retry by its bytes, and the receiver
answers "OK" without routing it twice (docs/peers.md, "The fleet: exactly once after a
`kill -9`"). A span forwarded but not yet marked done (between the next hop's answer and the
mark) is still sent twice, which OTLP accepts ("duplicates on retry are an accepted
trade-off").

Record layout: `<u32 length><u32 crc32><u64 record id>` then the bytes. A torn last record
(crash mid-write, before its fsync, so never acknowledged) fails its length or CRC; replay
then looks for the next intact record of that segment (a damaged record in the middle, or
garbage appended, costs only itself) and says in the log what it skipped. A segment that
cannot be read at all is skipped with an error in the log; the others are replayed.

Two bounds keep the directory from growing while a few records stay undone (a trace kept
alive by a span a second holds every request it was in, and so every segment):

- compaction: when a segment is sealed, every older segment whose undone records fill less
  than a quarter of it has them copied into the new segment (same record ids, fsynced) and
  is deleted. Replay reads a record id from any segment at or after its own, and takes each
  id once, done if any segment's `.ack` says so (a crash between the copy and the delete
  leaves both copies, replayed once);
- `max_bytes`: within a segment (or a quarter) of it, requests are compacted for first (a
  copy that would not fit beside the file it replaces is not made); past it a request is
  refused (`BufferDirError`, "retry later") rather than written, so the disk never fills.
  It counts what `du` counts: whole blocks, and the done marks to come. (The buffer's
  `max_hold_s` is what makes the held records done eventually.)

A write or fsync that fails (a full disk: ENOSPC, or EIO) raises `BufferDirError` and the
request is not acknowledged (the receivers answer "retry later"): the partial record is
cut off again (or, when that fails too, the segment is sealed and the next request starts a
new one), so a full disk never leaves a record behind that would end a later replay early.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import struct
import threading
import time
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from attest_otel.plumbing.throttled_log import Throttled
from attest_otel.sidecar.buffer_dir import open_private, read_private

__all__ = ["BufferDirError", "DurableLog"]

log = logging.getLogger(__name__)

_HEADER = struct.Struct("<IIQ")
_ACK = struct.Struct("<Q")
_SEGMENT_SHIFT = 32
_BLOCK = 4096
REPLAY_MATCH_S = 900.0
"""How long after a start retries are matched against the replayed requests: past the
senders' retry windows (300 s in collector-config/loadbalancing.yaml)."""


class BufferDirError(OSError):
    """A request could not be made durable under `--buffer-dir`; it was not acknowledged."""


@dataclass(slots=True)
class _Segment:
    seq: int
    path: Path
    ack_path: Path
    pending: set[int] = field(default_factory=set)
    sealed: bool = False
    size: int = 0
    acked: int = 0  # bytes of its .ack file

    @property
    def on_disk(self) -> int:
        """What `du` counts for the segment and its .ack: whole file-system blocks. With
        small requests the done marks are a few percent of the segment; the cap counts them,
        and the marks its undone records will add."""
        marks = self.acked + _ACK.size * len(self.pending)  # what .ack will hold at most
        return -(-self.size // _BLOCK) * _BLOCK + -(-marks // _BLOCK) * _BLOCK


class DurableLog:
    """Segmented, fsynced request log with per-record reference counts."""

    def __init__(
        self,
        directory: str | Path,
        *,
        segment_bytes: int = 64 * 1024 * 1024,
        max_bytes: int | None = None,
    ):
        self.dir = Path(directory)
        self.segment_bytes = segment_bytes
        self.max_bytes = max_bytes
        self._sizes: dict[int, int] = {}  # undone record -> its bytes on disk
        self._where: dict[int, int] = {}  # a moved record -> the segment holding it now
        self.compactions = 0
        self.refused_full = 0
        self._ack_failed = Throttled(log)  # a full disk fails every request's done mark
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
        self._failed_upto = 0  # bytes of the active segment whose fsync failed
        self._failed_before_rotation: dict[int, int] = {}
        self._poisoned = False  # the active segment has bytes we could not cut off
        self.records_written = 0
        self.fsyncs = 0
        self.write_errors = 0
        self._replayed: dict[bytes, int] = {}  # digest of a replayed record -> its length
        self._replayed_sizes: Counter[int] = Counter()  # lengths of those, counted
        self._replayed_until, self.replayed_copies = 0.0, 0
        self._copy_logged = Throttled(log, logging.INFO)

    # --- start-up --------------------------------------------------------------------------

    def open(self) -> list[tuple[int, bytes]]:
        """Opens a fresh segment and returns (record id, bytes) of every record left undone
        by earlier runs, oldest first. Each comes back pinned, as from `append`."""
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)  # `buffer_dir.claim` checked it
        pending: list[tuple[int, bytes]] = []
        last_seq = 0
        found: list[tuple[int, Path]] = []
        done: set[int] = set()
        for path in sorted(self.dir.glob("wal-*.log")):
            try:
                seq = int(path.stem.split("-", 1)[1])
            except ValueError:
                continue
            found.append((seq, path))
            try:
                done |= self._read_acks(path.with_suffix(".ack"))
            except OSError as e:
                log.error(
                    "buffer-dir: %s cannot be read (%s)",
                    path.with_suffix(".ack").name,
                    e.strerror or e,
                )
        for seq, path in found:
            last_seq = max(last_seq, seq)
            segment = _Segment(seq, path, path.with_suffix(".ack"), sealed=True)
            try:
                records = self._read_records(path, seq)
                segment.size = path.stat().st_size
                with contextlib.suppress(FileNotFoundError):
                    segment.acked = segment.ack_path.stat().st_size
            except OSError as e:  # a symlink (ELOOP), another user's file (EPERM), a bad disk
                log.error(
                    "buffer-dir: %s cannot be read (%s); skipped, the rest is replayed",
                    path.name,
                    e.strerror or e,
                )
                continue
            for rid, data in records:
                if rid in done or rid in self._refs:
                    continue  # done, or a copy compaction made (replayed once)
                segment.pending.add(rid)
                self._refs[rid] = 0
                self._sizes[rid] = _HEADER.size + len(data)
                if rid >> _SEGMENT_SHIFT != seq:
                    self._where[rid] = seq
                self._pinned.add(rid)
                pending.append((rid, data))
            if segment.pending:
                self._segments[seq] = segment
            else:
                self._remove(segment)
        self._rotate(last_seq + 1)
        if pending:
            log.info("buffer-dir: replaying %d request(s) from %s", len(pending), self.dir)
            self._replayed = {_digest(data): len(data) for _rid, data in pending}
            self._replayed_sizes = Counter(self._replayed.values())
            self._replayed_until = time.monotonic() + REPLAY_MATCH_S
        return pending

    def replayed_copy(self, data: bytes) -> bool:
        """True, once, for a request byte for byte the same as a record this start replayed:
        the sender's retry of a request whose answer the crash cut off. The caller answers
        "OK" and does not route it again (it was, from the replay). A dict lookup per request
        while no replayed record has its length. `data` as `append` would be given it."""
        if len(data) not in self._replayed_sizes:
            return False
        with self._lock:
            if time.monotonic() > self._replayed_until:
                self._replayed, self._replayed_sizes = {}, Counter()
                return False
            if self._replayed.pop(_digest(data), None) is None:
                return False
            if self._replayed_sizes[len(data)] > 1:
                self._replayed_sizes[len(data)] -= 1
            else:
                del self._replayed_sizes[len(data)]
            self.replayed_copies += 1
        self._copy_logged(
            "buffer-dir: a retried request is one replayed from the buffer dir; "
            "acknowledged without routing it again"
        )
        return True

    @staticmethod
    def _read_acks(path: Path) -> set[int]:
        try:
            raw = read_private(path)
        except FileNotFoundError:
            return set()
        usable = len(raw) - len(raw) % _ACK.size
        return {v for (v,) in _ACK.iter_unpack(raw[:usable])}

    @staticmethod
    def _read_records(path: Path, seq: int | None = None) -> list[tuple[int, bytes]]:
        out: list[tuple[int, bytes]] = []
        raw = read_private(path)
        pos = 0
        while pos + _HEADER.size <= len(raw):
            record = _record_at(raw, pos, seq)
            if record is not None:
                out.append(record)
                pos += _HEADER.size + len(record[1])
                continue
            found = _next_record(raw, pos + 1, seq)
            if found < 0:
                log.warning(
                    "buffer-dir: %s: %d damaged or torn byte(s) at the end (from byte %d) ignored",
                    path.name,
                    len(raw) - pos,
                    pos,
                )
                return out
            log.warning(
                "buffer-dir: %s: %d damaged byte(s) at byte %d skipped; replay goes on "
                "with the next intact record",
                path.name,
                found - pos,
                pos,
            )
            pos = found
        if pos < len(raw):
            log.warning("buffer-dir: %s: torn record at byte %d ignored", path.name, pos)
        return out

    def _rotate(self, seq: int) -> None:
        """Starts segment `seq`; called with `_lock` held (or before any writer exists).

        The new files are opened before the old ones are closed, so a failure (a full
        disk) leaves the log as it was."""
        path = self.dir / f"wal-{seq:012d}.log"
        segment = _Segment(seq, path, path.with_suffix(".ack"))
        fd = open_private(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            ack_fd = open_private(segment.ack_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        except OSError:
            os.close(fd)
            raise
        if self._active is not None:
            with contextlib.suppress(OSError):
                os.fsync(self._fd)
            os.close(self._fd)
            os.close(self._ack_fd)
            self._active.sealed = True
            if not self._active.pending:
                self._remove(self._active)
                self._segments.pop(self._active.seq, None)
        self._fd = fd
        self._ack_fd = ack_fd
        _fsync_dir(self.dir)
        self._segments[seq] = segment
        self._active = segment
        self._next_index = 0
        self._written = 0
        self._synced = 0
        self._failed_upto = 0
        self._poisoned = False
        self._generation += 1
        self._compact()

    def _compact(self, force: bool = False) -> None:
        """Copies the undone records of mostly-done sealed segments (all sealed segments
        when `force`) into the active one, fsyncs, and deletes the old files (lock held)."""
        active = self._active
        if active is None:
            return
        for segment in [s for s in self._segments.values() if s is not active]:
            live = sum(self._sizes.get(rid, 0) for rid in segment.pending)
            if not segment.pending or (not force and live * 4 >= max(segment.size, 1)):
                continue
            moved = len(segment.pending)
            if self.max_bytes is not None and (
                self._footprint_with(active, live, moved) > self.max_bytes
            ):
                continue  # the copy sits beside the old file for a moment: it must fit too
            try:
                records = [
                    r
                    for r in self._read_records(segment.path, segment.seq)
                    if r[0] in segment.pending
                ]
                blob = b"".join(
                    _HEADER.pack(len(data), zlib.crc32(data), rid) + data for rid, data in records
                )
                _write_all(self._fd, blob)
                os.fsync(self._fd)
            except OSError as e:
                log.warning(
                    "buffer-dir: cannot compact %s (%s)", segment.path.name, e.strerror or e
                )
                self._cut(self._written)
                return
            self._written += len(blob)
            self._synced = self._written
            active.size += len(blob)
            for rid, _data in records:
                self._where[rid] = active.seq
                active.pending.add(rid)
            self._remove(segment)
            del self._segments[segment.seq]
            self.compactions += 1
            log.info(
                "buffer-dir: %s compacted: %d undone record(s), %d of %d bytes kept",
                segment.path.name,
                len(records),
                len(blob),
                segment.size,
            )

    @property
    def disk_bytes(self) -> int:
        with self._lock:
            return sum(s.on_disk for s in self._segments.values())

    def _footprint_with(self, active: _Segment, need: int, records: int = 1) -> int:
        """The directory's blocks once `need` more bytes (`records` records) are in `active`
        and marked done."""
        marks = active.acked + _ACK.size * (len(active.pending) + records)
        grown = -(-(active.size + need) // _BLOCK) * _BLOCK + -(-marks // _BLOCK) * _BLOCK
        return sum(s.on_disk for s in self._segments.values()) - active.on_disk + grown

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
            if self._written >= self.segment_bytes or self._poisoned:
                try:
                    self._rotate(active.seq + 1)
                except OSError as e:
                    self.write_errors += 1
                    raise BufferDirError(
                        e.errno, f"cannot start a new segment: {e.strerror or e}"
                    ) from e
                active = self._active
                assert active is not None
            need = _HEADER.size + len(data)
            if self.max_bytes is not None:
                # Compacted while a segment's room is left (a quarter of a small cap), so
                # the copies fit beside the files they replace; at the cap, refused.
                room = min(self.segment_bytes, self.max_bytes // 4)
                if self._footprint_with(active, need) > self.max_bytes - room:
                    self._compact(force=True)
                if self._footprint_with(active, need) > self.max_bytes:
                    self.refused_full += 1
                    raise BufferDirError(28, "the buffer dir is at buffer.max_dir_size_mib")
            rid = (active.seq << _SEGMENT_SHIFT) | self._next_index
            start = self._written
            try:
                _write_all(self._fd, _HEADER.pack(len(data), zlib.crc32(data), rid) + data)
            except OSError as e:
                self.write_errors += 1
                self._cut(start)
                raise BufferDirError(e.errno, f"cannot write: {e.strerror or e}") from e
            self._next_index += 1
            self._written += need
            active.size += need
            active.pending.add(rid)
            self._sizes[rid] = need
            self._refs[rid] = 0
            self._pinned.add(rid)
            self.records_written += 1
            target = self._written
            generation = self._generation
            fd = self._fd
        try:
            self._sync(fd, target, generation)
        except OSError as e:
            with self._lock:
                self.write_errors += 1
                # Not known to be on disk: not acknowledged, so not ours to replay either
                # (if it did reach the disk, a restart sends it once more: a duplicate).
                self._refs.pop(rid, None)
                self._sizes.pop(rid, None)
                self._pinned.discard(rid)
                active.pending.discard(rid)
            raise BufferDirError(e.errno, f"cannot fsync: {e.strerror or e}") from e
        return rid

    def _cut(self, start: int) -> None:
        """Removes a partly written record (lock held); if that fails, the segment is sealed
        so no record is ever appended after damaged bytes."""
        try:
            os.ftruncate(self._fd, start)
        except OSError:
            log.error(
                "buffer-dir: could not cut a partial record off %s; starting a new "
                "segment with the next request",
                self._active.path.name if self._active else "?",
            )
            self._poisoned = True

    def _sync(self, fd: int, target: int, generation: int) -> None:
        # Group commit: whoever gets the sync lock flushes everything written so far; the
        # others find their bytes already covered and return without a second fsync. After
        # a failed fsync the bytes it covered are never taken as durable (a later fsync may
        # succeed without them: the kernel can drop the dirty pages), and the segment is
        # sealed so later records go to a fresh file.
        with self._sync_lock:
            with self._lock:
                if generation != self._generation:
                    if target <= self._failed_before_rotation.get(generation, 0):
                        raise OSError(5, "an earlier fsync of this segment failed")
                    return  # rotation fsynced and closed that segment
                if target <= self._failed_upto:
                    raise OSError(5, "an earlier fsync of this segment failed")
                if self._synced >= target:
                    return
                upto = self._written
            try:
                os.fsync(fd)
            except OSError:
                with self._lock:
                    if generation == self._generation:
                        self._failed_upto = max(self._failed_upto, upto)
                        self._failed_before_rotation[generation] = self._failed_upto
                        self._poisoned = True
                raise
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
        self._sizes.pop(rid, None)
        segment = self._segments.get(self._where.pop(rid, rid >> _SEGMENT_SHIFT))
        if segment is None:
            return
        segment.pending.discard(rid)
        try:
            if segment is self._active:
                _write_all(self._ack_fd, _ACK.pack(rid))
                segment.acked += _ACK.size
            elif not segment.pending:
                self._remove(segment)
                del self._segments[segment.seq]
            else:
                fd = open_private(segment.ack_path, os.O_WRONLY | os.O_APPEND)
                try:
                    _write_all(fd, _ACK.pack(rid))
                finally:
                    os.close(fd)
                segment.acked += _ACK.size
        except OSError as e:  # a full disk: the record is replayed once more after a restart
            self._ack_failed("buffer-dir: cannot mark a record done (%s)", e.strerror or e)

    @property
    def pending_records(self) -> int:
        with self._lock:
            return len(self._refs)

    def close(self) -> None:
        with self._lock:
            if self._active is None:
                return
            try:
                os.fsync(self._ack_fd)
            except OSError as e:
                log.warning("buffer-dir: cannot fsync the done marks (%s)", e.strerror or e)
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


def _record_at(raw: bytes, pos: int, seq: int | None) -> tuple[int, bytes] | None:
    """The intact record starting at `pos` (of segment `seq` when known), else None."""
    if pos + _HEADER.size > len(raw):
        return None
    length, crc, rid = _HEADER.unpack_from(raw, pos)
    if seq is not None and rid >> _SEGMENT_SHIFT > seq:  # older ids: copied by compaction
        return None
    start = pos + _HEADER.size
    if start + length > len(raw):
        return None
    data = raw[start : start + length]
    if zlib.crc32(data) != crc:
        return None
    return rid, data


def _next_record(raw: bytes, pos: int, seq: int | None) -> int:
    """Where the next intact record starts at or after `pos`, or -1. With the segment's
    number known, the record id's top half must be it: a cheap test before the CRC."""
    if seq is None:
        return -1
    tag = struct.pack("<I", seq)
    # The id's high 32 bits sit at bytes 12..16 of the header.
    at = raw.find(tag, pos + 12)
    while at >= 0:
        start = at - 12
        if start >= pos and _record_at(raw, start, seq) is not None:
            return start
        at = raw.find(tag, at + 1)
    return -1


def _digest(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=16).digest()


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
