"""How `--from KIND:WHERE` becomes a source: each source module declares its `SourceKind`,
and `sources/__init__.py` registers them all in one tuple (docs/architecture.md)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from attest_otel.sources.base import Source
from attest_otel.sources.http import HttpOptions

__all__ = ["SourceKind"]


@dataclass(frozen=True, slots=True)
class SourceKind:
    """One `--from KIND:WHERE` entry: how WHERE becomes a `Source`. Each source module
    declares its own; `sources/__init__.py` registers them in one tuple."""

    name: str
    """The prefix of `--from`."""
    where: Literal["url", "path", "optional path"]
    """What follows the colon; a URL gets the HTTP options (headers, TLS, timeout)."""
    example: str
    """Shown when WHERE is missing."""
    build: Callable[[str, HttpOptions | None], Source]
