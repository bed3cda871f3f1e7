"""Persistence only: recent GenAI traces (as the OTLP bytes they arrived in) and their grades.

The one reader and writer of the store's tables: the sidecar writes through `StoreWriter`,
and everything that reads (`store:` sources, `report`, the Grader API) goes through
`TraceStore`. Nothing here decodes spans or grades runs; that is `pipeline`'s job.
"""

from attest_otel.store.sqlite import (
    StoredGrade,
    StoredTrace,
    StoreWriter,
    TraceStore,
    default_store_path,
)

__all__ = ["StoreWriter", "StoredGrade", "StoredTrace", "TraceStore", "default_store_path"]
