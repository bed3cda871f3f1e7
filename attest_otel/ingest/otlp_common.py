"""What the protobuf and JSON walkers share: the malformed-input signal, enum names, id rules."""

from __future__ import annotations

import base64
import binascii
import dataclasses

from attest_otel.model import Event, Span

TRACE_ID_BYTES = 16
SPAN_ID_BYTES = 8

SPAN_KIND_NAMES: dict[str, int] = {
    "SPAN_KIND_UNSPECIFIED": 0,
    "SPAN_KIND_INTERNAL": 1,
    "SPAN_KIND_SERVER": 2,
    "SPAN_KIND_CLIENT": 3,
    "SPAN_KIND_PRODUCER": 4,
    "SPAN_KIND_CONSUMER": 5,
}
STATUS_CODE_NAMES: dict[str, int] = {
    "STATUS_CODE_UNSET": 0,
    "STATUS_CODE_OK": 1,
    "STATUS_CODE_ERROR": 2,
}


SPAN_FIELDS = (
    "trace_id",
    "span_id",
    "parent_id",
    "name",
    "start_ns",
    "end_ns",
    "kind",
    "status_code",
    "status_message",
    "attributes",
    "events",
    "resource",
    "scope_name",
    "scope_version",
    "source",
)
"""`Span`'s fields in order. The walkers build every span by position (a class call with
keywords builds a kwargs dict first: 15 of them cost about 1.5 us per span), so a change to
the order must fail here, at import, and not shuffle fields silently."""

EVENT_FIELDS = ("name", "time_ns", "attributes")

if (
    tuple(f.name for f in dataclasses.fields(Span)) != SPAN_FIELDS
    or tuple(f.name for f in dataclasses.fields(Event)) != EVENT_FIELDS
):  # pragma: no cover - a guard for whoever edits ingest/span.py
    raise ImportError("model.Span/Event fields changed: update the walkers' Span(...) calls")


class MalformedOTLP(Exception):
    """A walker found something that is not valid OTLP.

    `where` is the path inside the request (`resourceSpans[0].scopeSpans[1].spans[3]`), filled
    in by the walker; `decode` turns this into an `InputError` naming the file and line.
    """

    def __init__(self, problem: str, where: str = "") -> None:
        super().__init__(problem)
        self.problem = problem
        self.where = where

    def __str__(self) -> str:
        return f"{self.where}: {self.problem}" if self.where else self.problem


def id_length_problem(what: str, nbytes: int, got: object) -> str:
    """One line saying what a bad id looks like, e.g. for `trace id` and 16 bytes."""
    if isinstance(got, bytes):
        return f"{what} must be {nbytes} bytes, got {len(got)} bytes ({got.hex() or 'empty'})"
    if isinstance(got, str):
        shown = got if len(got) <= 40 else got[:40] + "..."
        return (
            f"{what} must be {nbytes} bytes ({2 * nbytes} hex chars), "
            f"got {shown!r} ({len(got)} chars)"
        )
    if got is None:
        return f"{what} is missing"
    return f"{what} must be a string of {2 * nbytes} hex chars, got {type(got).__name__}"


def bytes_id_to_hex(raw: bytes, nbytes: int, what: str) -> str:
    """A protobuf id (raw bytes) as lowercase hex, checked for length."""
    if len(raw) != nbytes:
        raise MalformedOTLP(id_length_problem(what, nbytes, raw))
    return raw.hex()


def text_id_to_hex(raw: object, nbytes: int, what: str) -> str:
    """A JSON id as lowercase hex: hex as OTLP/JSON writes it, or base64 as protobuf's JSON
    mapping does. The two never share a length (16 bytes: 32 hex or 24/22 base64 chars;
    8 bytes: 16 hex or 12/11 base64 chars), so each id is read by its length."""
    if type(raw) is not str:
        raise MalformedOTLP(id_length_problem(what, nbytes, raw))
    n = len(raw)
    if n == 2 * nbytes:
        try:
            decoded = bytes.fromhex(raw)
        except ValueError:
            raise MalformedOTLP(f"{what} is not hex: {raw!r}") from None
    elif 0 < n < 2 * nbytes:
        try:
            decoded = base64_to_bytes(raw)
        except ValueError:
            raise MalformedOTLP(id_length_problem(what, nbytes, raw)) from None
    else:
        raise MalformedOTLP(id_length_problem(what, nbytes, raw))
    if len(decoded) != nbytes:  # fromhex skips spaces; base64 of the wrong size
        raise MalformedOTLP(id_length_problem(what, nbytes, raw))
    return decoded.hex()


def base64_to_bytes(text: str) -> bytes:
    """Standard or URL-safe base64, padding optional (protobuf's JSON parser accepts all)."""
    if "-" in text or "_" in text:
        text = text.replace("-", "+").replace("_", "/")
    missing = -len(text) % 4
    if missing:
        text += "=" * missing
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error as exc:
        raise ValueError(f"invalid base64: {exc}") from None
