"""Persistence only: recent GenAI traces (as the OTLP bytes they arrived in) and their grades.

The one reader and writer of the store's tables: the sidecar writes through a `Writer`, and
everything that reads (`store:` sources, `report`, the Grader API) asks a `Store`. Nothing
here decodes spans or grades runs; that is `pipeline`'s job.

Two stores, one interface, chosen by what `open_store` is given: a path is the embedded
SQLite file (one machine, nothing to set up: the default); a `postgresql://` URL is the
store a fleet of sidecars shares (`postgres`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from attest_otel.content import KEEP, ContentPolicy
from attest_otel.store.base import (
    GradeSummary,
    Store,
    WorstRow,
    Writer,
    is_url,
    part_digest,
    redact,
)
from attest_otel.store.records import StoredGrade, StoredTrace
from attest_otel.store.sqlite import StoreWriter, TraceStore, default_store_path

if TYPE_CHECKING:
    from attest_otel.store.postgres import PostgresStore

__all__ = [
    "GradeSummary",
    "Store",
    "StoreWriter",
    "StoredGrade",
    "StoredTrace",
    "TraceStore",
    "WorstRow",
    "Writer",
    "default_store_path",
    "is_url",
    "open_store",
    "open_writer",
    "part_digest",
    "redact",
]


def open_store(
    target: str | Path,
    *,
    readonly: bool = False,
    max_age_s: float | None = None,
    max_bytes: int | None = None,
    wait_for_database: bool = False,
) -> TraceStore | PostgresStore:
    """The store at `target`: a `postgresql://` URL (migrated at open unless `readonly`), or
    the path of a SQLite file. Raises SourceError when it cannot be opened (the one line the
    CLI prints), UsageError for a URL that does not parse."""
    if is_url(target):
        from attest_otel.store.postgres import PostgresStore

        return PostgresStore(
            str(target),
            readonly=readonly,
            max_age_s=max_age_s,
            max_bytes=max_bytes,
            wait_for_database=wait_for_database,
        )
    return TraceStore(
        Path(target).expanduser(), readonly=readonly, max_age_s=max_age_s, max_bytes=max_bytes
    )


def open_writer(
    store: TraceStore | PostgresStore,
    *,
    spool_dir: Path | None = None,
    max_queue_bytes: int = 64 * 1024 * 1024,
    content: ContentPolicy = KEEP,
) -> Writer:
    """The sidecar's writer for `store`: batched from one thread either way; for the shared
    store, with the bounded (spooled, with `spool_dir`) queue that outlasts the database
    being away (`shared_writer`)."""
    if isinstance(store, TraceStore):
        return StoreWriter(store, content=content)
    from attest_otel.store.shared_writer import SharedStoreWriter

    return SharedStoreWriter(store, spool_dir=spool_dir, max_bytes=max_queue_bytes, content=content)
