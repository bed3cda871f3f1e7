"""`file:PATH`: a trace by id from an OTLP file (JSON lines, JSON or protobuf, gzip or not).

The Collector's file exporter writes many traces to one file; this is how a user greps one
out of it without a backend. Decoding errors stay `InputError`s naming the file and line.
"""

from __future__ import annotations

from pathlib import Path

from attest_otel.ingest.decode import Decoded, decode_file
from attest_otel.sources.base import (
    TraceNotFoundError,
    normalize_trace_id,
    only_trace,
)
from attest_otel.sources.kind import SourceKind

__all__ = ["FileSource"]


class FileSource:
    kind = "file"

    def __init__(self, path: str | Path) -> None:
        self.location = str(path)
        self._decoded: Decoded | None = None

    def close(self) -> None:
        self._decoded = None

    def fetch(self, trace_id: str) -> Decoded:
        tid = normalize_trace_id(trace_id)
        if self._decoded is None:  # one read for many ids (`--since` over a file)
            self._decoded = decode_file(self.location)
        found = only_trace(self._decoded, tid)
        if not found.spans:
            raise TraceNotFoundError(tid, f"file {self.location}")
        return found

    def trace_ids(self) -> list[str]:
        """Every trace id in the file, in order of first appearance."""
        if self._decoded is None:
            self._decoded = decode_file(self.location)
        return list(self._decoded.by_trace())


KIND = SourceKind("file", "path", "traces.jsonl", lambda path, _: FileSource(path))
