"""`store.max_size_mib` is what the store takes on disk, as `du` counts it (database, -wal
and -shm), within the margin the README states, under sustained writes; and a store made
before the cap counted the disk is converted so it can shrink."""

from __future__ import annotations

import random
import sqlite3
import time
from pathlib import Path

from attest_otel.store import StoredGrade, open_store
from attest_otel.store.postgres import PostgresStore
from attest_otel.store.shared_writer import SharedStoreWriter
from attest_otel.store.sqlite import _SCHEMA, StoreWriter, TraceStore
from tests.pg import Postgres

MIB = 1024 * 1024
CAP = 4 * MIB
MARGIN = 0.05  # README, "Sizing the disk": du stays within 5 % of store.max_size_mib


def du(*paths: Path) -> int:
    """Bytes allocated on disk, as `du` counts them (blocks, not lengths)."""
    total = 0
    for path in paths:
        for one in [path] if path.is_file() else path.rglob("*"):
            if one.is_file():
                total += one.stat().st_blocks * 512
    return total


def store_files(db: Path) -> list[Path]:
    return [p for p in (db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm"))]


def _trace(rng: random.Random, i: int) -> tuple[str, bytes, StoredGrade]:
    tid = f"{i:032x}"
    # Spans as they arrive: incompressible enough that pages hold what the bytes say.
    data = rng.randbytes(rng.randint(8_000, 60_000))
    grade = StoredGrade(
        tid,
        "01" * 8,
        "agent",
        i,
        {"check": "tool_use", "verdict": "pass", "score": 1.0, "summary": "x" * 2000},
    )
    return tid, data, grade


def _sizes_while_writing(db: Path, total_bytes: int, **store_args: object) -> list[int]:
    rng = random.Random(7)
    store = TraceStore(db, max_bytes=CAP, **store_args)  # type: ignore[arg-type]
    writer = StoreWriter(store)
    writer.start()
    sizes: list[int] = []
    written, i = 0, 0
    while written < total_bytes:
        tid, data, grade = _trace(rng, i)
        writer.put(tid, data, 3, [grade])
        written += len(data)
        i += 1
        if i % 20 == 0:
            assert writer.flush(10)
            sizes.append(du(*[p for p in store_files(db) if p.exists()]))
    writer.close()
    sizes.append(du(*[p for p in store_files(db) if p.exists()]))
    assert writer.dropped == 0 and writer.errors == 0
    return sizes


def test_a_4_mib_store_stays_within_its_cap_on_disk_under_sustained_writes(
    tmp_path: Path,
) -> None:
    db = tmp_path / "store.db"
    sizes = _sizes_while_writing(db, 15 * CAP)  # 60 MiB of spans through a 4 MiB store
    assert max(sizes) <= CAP * (1 + MARGIN), [s / MIB for s in sizes]
    with TraceStore(db, readonly=True) as store:
        count, data = store.stats()
        ids = set(store.trace_ids(10_000))
    # Pruned, and the newest kept: the store is not emptied to stay small.
    assert f"{0:032x}" not in ids and count >= 20 and data >= CAP // 4, (count, data)
    assert max(int(t, 16) for t in ids) == max(int(t, 16) for t in ids | {f"{0:032x}"})


def test_a_store_made_without_auto_vacuum_is_converted_and_shrinks(tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    # A store as the sidecar made it before the cap counted the disk: no auto-vacuum,
    # and 3x the new cap in it.
    raw = sqlite3.connect(db)
    raw.execute("PRAGMA page_size=16384")
    raw.execute("PRAGMA journal_mode=WAL")
    raw.executescript(_SCHEMA)
    rng = random.Random(3)
    with raw:
        for i in range(400):
            tid, data, _ = _trace(rng, i)
            raw.execute(
                "INSERT INTO traces VALUES (?, ?, ?, 3, ?, ?)", (tid, i, i, len(data), data)
            )
    assert raw.execute("PRAGMA auto_vacuum").fetchone()[0] == 0
    raw.close()
    assert du(db) > 3 * CAP
    sizes = _sizes_while_writing(db, 5 * CAP)
    assert max(sizes[1:]) <= CAP * (1 + MARGIN), [s / MIB for s in sizes]
    raw = sqlite3.connect(db)
    assert raw.execute("PRAGMA auto_vacuum").fetchone()[0] == 2
    raw.close()


def test_a_postgres_store_stays_within_its_cap_under_sustained_writes(postgres: Postgres) -> None:
    """The shared store: its tables (rows, TOAST, indexes) stay within the margin of
    `store.max_size_mib` while 15 times the cap is written through the sidecar's writer."""
    url = postgres.database()
    store = open_store(url, max_bytes=CAP)
    assert isinstance(store, PostgresStore)
    writer = SharedStoreWriter(store)
    writer.start()
    rng = random.Random(11)
    sizes: list[int] = []
    written, i = 0, 0
    while written < 15 * CAP:
        tid, data, grade = _trace(rng, i)
        writer.put(tid, data, 3, [grade])
        written += len(data)
        i += 1
        if i % 20 == 0:
            assert writer.flush(20)
            sizes.append(store.disk_bytes())
    writer.close()  # and the store
    with PostgresStore(url, readonly=True) as again:
        sizes.append(again.disk_bytes())
        ids = set(again.trace_ids(10_000))
    assert writer.dropped == 0
    assert max(sizes) <= CAP * (1 + MARGIN), [round(s / MIB, 2) for s in sizes]
    assert f"{0:032x}" not in ids and f"{i - 1:032x}" in ids and len(ids) >= 20


def test_the_shared_store_queue_spool_stays_within_its_cap_on_disk(
    postgres: Postgres, tmp_path: Path
) -> None:
    """`store.max_queue_size_mib` bounds the spool under `--buffer-dir` as `du` counts it,
    while the writer keeps up (written writes wait in their segment till it empties) and
    while the database is away (the queue fills: writes refused and counted)."""
    url = postgres.database()
    store = open_store(url)
    assert isinstance(store, PostgresStore)
    spool = tmp_path / "store-queue"
    writer = SharedStoreWriter(store, spool_dir=spool, max_bytes=CAP)
    writer.start()
    rng = random.Random(5)
    sizes: list[int] = []
    for i in range(1200):  # ~40 MiB, about as fast as one writer thread writes them
        tid, data, grade = _trace(rng, i)
        writer.put(tid, data, 3, [grade])
        time.sleep(0.004)
        if i % 10 == 0:
            sizes.append(du(spool))
    assert writer.flush(60)
    writer.close()
    assert writer.written + writer.dropped == 1200 and writer.written > 600
    assert max(sizes) <= CAP, [round(s / MIB, 2) for s in sizes]
    # The database away: the queue fills to its cap, on disk as in memory, and refuses.
    away = open_store(f"postgresql://x:y@127.0.0.1:{_free_port()}/db", wait_for_database=True)
    assert isinstance(away, PostgresStore)
    writer = SharedStoreWriter(away, spool_dir=spool, max_bytes=CAP)
    writer.start()
    for i in range(400):
        tid, data, grade = _trace(rng, i)
        writer.put(tid, data, 3, [grade])
    assert writer.dropped > 0 and CAP // 2 < du(spool) <= CAP, du(spool) / MIB
    writer.close(timeout_s=0.1)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
