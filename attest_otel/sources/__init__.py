"""Trace-by-id sources: where `grade --trace-id ID --from SOURCE` finds a finished trace.

    parse_source("jaeger:http://jaeger:16686")          Jaeger query (api_v3, else classic)
    parse_source("tempo:http://tempo:3200")             Tempo query frontend
    parse_source("phoenix:http://phoenix:6006#project") Phoenix REST (project optional)
    parse_source("file:traces.jsonl")                   an OTLP file
    parse_source("store:")  /  "store:PATH"             the sidecar's store (default path)
        .fetch(trace_id) -> Decoded                     spans of that trace only
        .close()

Every source turns its backend's shape into the same `Decoded` a file gives, so adapting
and grading never know where a trace came from. Failures are one-line `SourceError`s
(`TraceNotFoundError` when the backend answered and has no such trace); a malformed id or
URL is a `UsageError`.
"""

from __future__ import annotations

from attest_otel.errors import UsageError
from attest_otel.ingest.decode import Decoded
from attest_otel.sources import file, jaeger, phoenix, store_source, tempo
from attest_otel.sources.base import Source as Source
from attest_otel.sources.base import TraceNotFoundError as TraceNotFoundError
from attest_otel.sources.base import normalize_trace_id as normalize_trace_id
from attest_otel.sources.http import HttpOptions as HttpOptions
from attest_otel.sources.http import parse_headers as parse_headers
from attest_otel.sources.kind import SourceKind

__all__ = [
    "KINDS",
    "SOURCE_KINDS",
    "HttpOptions",
    "Source",
    "TraceNotFoundError",
    "fetch",
    "normalize_trace_id",
    "parse_headers",
    "parse_source",
]

KINDS: tuple[SourceKind, ...] = (
    store_source.KIND,
    jaeger.KIND,
    tempo.KIND,
    phoenix.KIND,
    file.KIND,
)
"""Every trace source, in the order `--help` and error messages list them: the one place a
new source is registered (docs/architecture.md, "Adding a trace source")."""

SOURCE_KINDS = tuple(kind.name for kind in KINDS)
_BY_NAME = {kind.name: kind for kind in KINDS}


def _url(kind: SourceKind, rest: str) -> str:
    url = rest.strip()
    if not url:
        raise UsageError(f"--from {kind.name}: needs a URL, e.g. {kind.name}:{kind.example}")
    if "://" not in url:
        url = "http://" + url  # `jaeger:localhost:16686`: plain HTTP, as curl assumes
    scheme = url.split("://", 1)[0].lower()
    if scheme not in ("http", "https"):
        raise UsageError(f"--from {kind.name}:{rest}: expected an http:// or https:// URL")
    return url


def parse_source(text: str, *, http: HttpOptions | None = None) -> Source:
    """`KIND:WHERE` -> a source. `http` (headers, TLS, timeout) applies to URL sources only."""
    name, sep, rest = text.partition(":")
    kind = _BY_NAME.get(name.strip().lower()) if sep else None
    if kind is None:
        kinds = ", ".join(f"{k}:" for k in SOURCE_KINDS)
        raise UsageError(
            f"--from {text!r}: expected one of {kinds} followed by a URL or path "
            "(e.g. jaeger:http://localhost:16686)"
        )
    if kind.where == "url":
        return kind.build(_url(kind, rest), http)
    where = rest.strip()
    if not where and kind.where == "path":
        raise UsageError(f"--from {kind.name}: needs a path, e.g. {kind.name}:{kind.example}")
    return kind.build(where, None)


def fetch(trace_id: str, source: str | Source, *, http: HttpOptions | None = None) -> Decoded:
    """One trace by id from a source given as text (`jaeger:URL`, ...) or already built."""
    if isinstance(source, str):
        built = parse_source(source, http=http)
        try:
            return built.fetch(trace_id)
        finally:
            built.close()
    return source.fetch(trace_id)
