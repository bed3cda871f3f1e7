"""How a store's size cap (`store.max_size_mib`) is shared out on disk.

The cap is what the user sizes a volume by, so it counts what `du` counts: for SQLite the
database file, its -wal and its -shm. The -wal takes a slice (`wal_bytes`: a checkpoint
empties it once it passes half, and one transaction carries at most `batch_bytes` of spans);
the database's pages in use get the rest, less room for the batch written between two
checks (`db_high`). Past `db_high` the oldest traces go until the pages in use are under
`db_low`, so one prune makes room for many writes. `docs/sizing.md` has the measured margin.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DiskBudget", "TableBudget"]

_MIB = 1024 * 1024
_SHM = 64 * 1024  # the -shm index: 32 KiB per 4096 frames of -wal
_LOW = 0.85


@dataclass(frozen=True, slots=True)
class DiskBudget:
    cap: int
    page: int
    wal_bytes: int
    batch_bytes: int
    db_high: int
    db_low: int

    @property
    def wal_pages(self) -> int:
        """SQLite's `wal_autocheckpoint`: half the -wal's slice, in pages."""
        return max(1, self.wal_bytes // self.page // 2)

    @classmethod
    def for_cap(cls, cap: int, page: int) -> DiskBudget:
        wal = min(max(cap // 8, 4 * page), 16 * _MIB)
        wal -= wal % page
        # A batch of spans takes about 2.5 times its bytes in pages (grades, indexes,
        # overflow-page slack), and lands in the -wal first.
        batch = min(max(wal // 6, page), 4 * _MIB)
        high = max(cap - wal - _SHM - 3 * batch, 8 * page)
        return cls(cap, page, wal, batch, high, max(int(high * _LOW), 4 * page))


@dataclass(frozen=True, slots=True)
class TableBudget:
    """The PostgreSQL store's cap: its tables' size (`pg_total_relation_size`). Past `high`
    in use the oldest traces go until the rest take about `low`: the writes between two
    checks (one batch, 8 MiB at most) and the free space's fragments fit in between."""

    cap: int
    high: int
    low: int

    @classmethod
    def for_cap(cls, cap: int) -> TableBudget:
        return cls(cap, int(cap * 0.85), int(cap * 0.7))
