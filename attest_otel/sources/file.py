"""`file:PATH`: a trace by id from an OTLP file (JSON lines, JSON or protobuf, gzip or not).

The Collector's file exporter writes many traces to one file; this is how a user greps one
out of it without a backend. Decoding errors stay `InputError`s naming the file and line.
The file is read once, a request at a time, its traces held or spilled by `ByTrace`, so
`--since` over a big file does not hold all of it either.
"""

from __future__ import annotations

from pathlib import Path

from attest_otel.ingest.decode import Decoded
from attest_otel.ingest.stream import ByTrace
from attest_otel.sources.base import TraceNotFoundError, normalize_trace_id
from attest_otel.sources.kind import SourceKind

__all__ = ["FileSource"]


class FileSource:
    kind = "file"

    def __init__(self, path: str | Path) -> None:
        self.location = str(path)
        self._traces: ByTrace | None = None

    def close(self) -> None:
        if self._traces is not None:
            self._traces.close()
            self._traces = None

    def _read(self) -> ByTrace:
        if self._traces is None:  # one read for many ids (`--since` over a file)
            self._traces = ByTrace.of_file(self.location)
        return self._traces

    def fetch(self, trace_id: str) -> Decoded:
        tid = normalize_trace_id(trace_id)
        found = self._read().trace(tid)
        if not found.spans:
            raise TraceNotFoundError(tid, f"file {self.location}")
        return found

    def trace_ids(self) -> list[str]:
        """Every trace id in the file, in order of first appearance."""
        return self._read().trace_ids()


KIND = SourceKind("file", "path", "traces.jsonl", lambda path, _: FileSource(path))
