"""`buffer.max_dir_size_mib` is what the buffer dir takes on disk, as `du` counts it (segments,
their done marks, whole blocks), under sustained requests, half of them held until the dir is full."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from attest_otel.sidecar.wal import BufferDirError, DurableLog

MIB = 1024 * 1024
CAP = 4 * MIB


def du(path: Path) -> int:
    return sum(p.stat().st_blocks * 512 for p in path.rglob("*") if p.is_file())


def test_a_4_mib_buffer_dir_stays_within_its_cap_on_disk(tmp_path: Path) -> None:
    log = DurableLog(tmp_path, segment_bytes=MIB, max_bytes=CAP)
    log.open()
    sizes: list[int] = []
    remove = log._remove

    def measured_remove(segment: Any) -> None:
        # The fullest moment of a compaction: the copies written, the old file not yet gone.
        sizes.append(du(tmp_path))
        remove(segment)

    log._remove = measured_remove  # type: ignore[method-assign]
    held: list[int] = []
    refused = accepted = 0
    for i in range(2000):  # 16 MiB of requests through a 4 MiB dir
        try:
            rid = log.append(b"r" * 8000)
        except BufferDirError:
            refused += 1  # the sender hears "retry later"; the oldest held ones go
            sizes.append(du(tmp_path))  # the dir at its fullest
            for old in held[: len(held) // 2]:
                log.release([old])
            del held[: len(held) // 2]
            continue
        accepted += 1
        log.hold(rid)
        log.unpin(rid)
        if i % 2 == 0:
            held.append(rid)  # a trace still open: held until the dir fills
        else:
            log.release([rid])
        if i % 25 == 0:
            sizes.append(du(tmp_path))
    sizes.append(du(tmp_path))
    log.close()
    assert refused > 0 and accepted > 1500  # the cap was reached, and it kept taking
    assert log.compactions > 0
    # README, "Sizing the disk": du stays within 1 % of buffer.max_dir_size_mib (the file
    # system may allocate a block or two ahead of a file being appended to).
    assert max(sizes) <= CAP * 1.01, [round(s / MIB, 3) for s in sizes]
    assert log.disk_bytes >= du(tmp_path) - 2 * 4096  # what it counts is what du says
