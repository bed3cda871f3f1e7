"""The durable request log behind `--buffer-dir`."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from attest_otel.sidecar import wal as wal_module
from attest_otel.sidecar.wal import DurableLog


def test_undone_records_come_back_after_a_restart_and_done_ones_do_not(tmp_path: Path) -> None:
    log = DurableLog(tmp_path)
    assert log.open() == []
    first = log.append(b"one")
    second = log.append(b"two")
    for rid in (first, second):
        log.hold(rid)
        log.unpin(rid)
    log.release([first])
    # no close(): the process dies here
    again = DurableLog(tmp_path)
    assert [data for _, data in again.open()] == [b"two"]


def test_a_pinned_record_survives_pieces_that_finish_before_they_are_counted(
    tmp_path: Path,
) -> None:
    log = DurableLog(tmp_path)
    log.open()
    rid = log.append(b"request")
    log.release([rid])  # a held trace graded and forwarded before the receiver's hold
    log.hold(rid, 2)
    log.unpin(rid)
    assert log.pending_records == 1
    log.release([rid])
    assert log.pending_records == 0


def test_a_torn_last_record_is_ignored(tmp_path: Path) -> None:
    log = DurableLog(tmp_path)
    log.open()
    log.append(b"kept")
    log.close()
    segment = next(tmp_path.glob("wal-*.log"))
    with open(segment, "ab") as f:
        f.write(b"\x10\x00\x00\x00garbage")
    assert [d for _, d in DurableLog(tmp_path).open()] == [b"kept"]


def test_segments_rotate_and_fully_done_segments_are_deleted(tmp_path: Path) -> None:
    log = DurableLog(tmp_path, segment_bytes=100)
    log.open()
    rids = [log.append(b"x" * 60) for _ in range(6)]
    for rid in rids:
        log.hold(rid)
        log.unpin(rid)
    assert len(list(tmp_path.glob("wal-*.log"))) >= 3
    log.release(rids)
    assert len(list(tmp_path.glob("wal-*.log"))) == 1  # only the active one
    log.close()
    assert DurableLog(tmp_path).open() == []


def test_concurrent_appends_share_fsyncs(tmp_path: Path) -> None:
    log = DurableLog(tmp_path)
    log.open()
    threads = [
        threading.Thread(target=lambda: [log.append(b"r" * 100) for _ in range(50)])
        for _ in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert log.records_written == 400
    # Every record was fsynced (at least once), and group commit shared some fsyncs.
    assert 1 <= log.fsyncs <= 400
    assert len(DurableLog(tmp_path).open()) == 400


def test_a_full_disk_logs_one_warning_per_interval_with_a_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 26, item 9: with the disk full, every request's done mark failed with a line of
    its own (12,332 lines). Now the first is logged at once and the rest are counted."""
    import errno

    from attest_otel.sidecar import wal as wal_module

    log = DurableLog(tmp_path)
    log.open()
    rids = [log.append(b"x") for _ in range(1001)]

    def full(fd: int, data: bytes) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(wal_module, "_write_all", full)
    caplog.set_level("WARNING", logger="attest_otel.sidecar.wal")
    for rid in rids[:1000]:
        log.hold(rid)
        log.unpin(rid)
        log.release([rid])
    lines = [r.getMessage() for r in caplog.records if "cannot mark" in r.getMessage()]
    assert len(lines) == 1 and "No space left on device" in lines[0], lines
    log._ack_failed.interval_s = 0  # the interval has passed
    log.hold(rids[1000])
    log.unpin(rids[1000])
    log.release([rids[1000]])
    lines = [r.getMessage() for r in caplog.records if "cannot mark" in r.getMessage()]
    assert len(lines) == 2 and "1000 time(s) since the last such line, 1001 in all" in lines[1]


def test_a_replayed_request_sent_again_is_known_once_by_its_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = DurableLog(tmp_path)
    log.open()
    assert not log.replayed_copy(b"one")  # nothing replayed: nothing matches
    log.append(b"one")
    log.append(b"two")
    # no close(): the process dies before either request was answered
    again = DurableLog(tmp_path)
    assert [d for _, d in again.open()] == [b"one", b"two"]
    assert not again.replayed_copy(b"thr")  # same length, other bytes
    assert again.replayed_copy(b"one")
    assert not again.replayed_copy(b"one")  # once: a third copy is the sender's own
    assert again.replayed_copy(b"two")
    assert again.replayed_copies == 2

    monkeypatch.setattr(wal_module, "REPLAY_MATCH_S", -1.0)  # the senders' retry window over
    late = DurableLog(tmp_path / "late")
    late.open()
    late.append(b"one")
    past = DurableLog(tmp_path / "late")
    assert [d for _, d in past.open()] == [b"one"]
    assert not past.replayed_copy(b"one")
