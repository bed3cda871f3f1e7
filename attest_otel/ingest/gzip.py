"""Bounded, linear gzip inflation: the one every input path uses (files, the sidecar's HTTP
receiver, stored bodies), so a hostile body costs the same everywhere.

Gzip bodies may hold several members (a Collector concatenates); each is inflated up to what is
left of the limit, so a bomb is refused after `limit` bytes of output, never held whole.
"""

from __future__ import annotations

import zlib

from attest_otel.errors import InputError

__all__ = ["GZIP_MAGIC", "InflatesTooFar", "gunzip"]

GZIP_MAGIC = b"\x1f\x8b"
_FIRST_READ = 1024
_MAX_READ = 1024 * 1024


class InflatesTooFar(InputError):
    """The body inflates past the limit: "too large" (HTTP 413), not "malformed" (400)."""


def gunzip(data: bytes, source: str, limit: int) -> bytes:
    """Inflate every gzip member of `data`, refusing to produce more than `limit` bytes.

    Input is fed in growing slices (1 KiB, doubling to 1 MiB per member): zlib copies what
    follows the end of a member, so feeding all the rest to each member would make many tiny
    members (a cheap hostile body) cost quadratic time.
    """
    parts: list[bytes] = []
    total = 0
    pos, size = 0, len(data)
    view = memoryview(data)
    while pos < size:
        inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        read = _FIRST_READ
        while not inflater.eof:
            piece = view[pos : pos + read]
            if not piece:
                raise InputError(source, "truncated gzip data")
            try:
                chunk = inflater.decompress(piece, limit - total + 1)
            except zlib.error as exc:
                raise InputError(source, f"invalid gzip data: {exc}") from None
            total += len(chunk)
            if total > limit:
                raise InflatesTooFar(
                    source, f"gzip data inflates to more than {limit} bytes (max_inflated_bytes)"
                )
            if chunk:
                parts.append(chunk)
            # Under the output bound, zlib takes the whole slice: all of it, or up to the end
            # of the member (the rest is `unused_data`).
            pos += len(piece) - len(inflater.unused_data)
            read = min(read * 2, _MAX_READ)
        if data[pos : pos + 2] != GZIP_MAGIC:
            if data[pos:].strip(b"\x00"):
                raise InputError(source, "unexpected bytes after the gzip data")
            break
    if len(parts) == 1:
        return parts[0]
    return b"".join(parts)
