"""What the decoders do with hostile but parseable input: huge strings and broken Unicode.

Both are decisions, counted on `decode.Decoded` and logged, never errors:

- **Huge strings.** A string longer than `max_attribute_chars` (an attribute value at any
  depth, an event's or log record's attribute, a log body, a span name or status message) is
  cut to that many characters and `TRUNCATION_MARKER` is appended, e.g.
  `…[truncated 49999000 chars]`, so a reader (and the model judge) can tell a cut value from a
  short one. Bytes values are cut the same way (the marker is ASCII). The limit bounds what the
  adapters parse (`gen_ai.input.messages` is JSON the adapters load) and what a run carries.
  Cut JSON no longer parses: the adapters then keep it as text, which the rules still read.
- **Unpaired UTF-16 surrogates.** JSON can spell them (`"\\ud800"`), UTF-8 cannot: such a
  string would fail every later encoder (protobuf export, stdout). Each one becomes U+FFFD,
  as the JSON reader parses it (the wire core's `json.rs`), counted on `Decoded`.
  Binary protobuf cannot carry them: upb refuses invalid UTF-8 in a string field, and the
  decoder reports that as an `InputError`.
"""

from __future__ import annotations

import json
from typing import Any

from attest_otel.model import LogRecord, Span

DEFAULT_MAX_ATTRIBUTE_CHARS = 4 * 1024 * 1024
"""Default cut-off for one string value (characters; bytes for bytes values): 4 Mi, well
above any tool output or message history seen in practice, far below what would let one
attribute take the adapters' memory (docs/measurements.md, "Attribute size cut-off")."""

TRUNCATION_MARKER = "…[truncated {n} chars]"
"""Appended to a cut string; `n` is the number of characters removed."""

_BYTES_MARKER = "...[truncated {n} bytes]"

__all__ = [
    "DEFAULT_MAX_ATTRIBUTE_CHARS",
    "TRUNCATION_MARKER",
    "json_problem",
    "truncate_decoded",
    "truncate_span",
]


# -- huge strings -----------------------------------------------------------------------------


class _Cutter:
    """Cuts over-long strings in place and counts them."""

    __slots__ = ("count", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.count = 0

    def cut(self, value: Any) -> Any:
        limit = self.limit
        if type(value) is str:
            if len(value) <= limit:
                return value
            self.count += 1
            return value[:limit] + TRUNCATION_MARKER.format(n=len(value) - limit)
        if type(value) is bytes and len(value) > limit:
            self.count += 1
            return value[:limit] + _BYTES_MARKER.format(n=len(value) - limit).encode()
        return value

    def values(self, root: Any) -> Any:
        """`root` with every long string at any depth cut; lists and dicts changed in place."""
        if type(root) is not dict and type(root) is not list:
            return self.cut(root)
        stack: list[Any] = [root]
        limit = self.limit
        while stack:
            node = stack.pop()
            items = node.items() if type(node) is dict else enumerate(node)
            changed: list[tuple[Any, Any]] = []
            for key, value in items:
                kind = type(value)
                if kind is str or kind is bytes:
                    if len(value) > limit:
                        changed.append((key, self.cut(value)))
                elif kind is dict or kind is list:
                    stack.append(value)
            for key, value in changed:
                node[key] = value
        return root


def truncate_span(span: Span, limit: int | None) -> int:
    """Cut the long strings of one span in place; how many were cut."""
    if not limit or limit < 0:
        return 0
    cutter = _Cutter(limit)
    _cut_span(span, cutter)
    return cutter.count


def truncate_decoded(spans: list[Span], logs: list[LogRecord], limit: int | None) -> int:
    """Cut the long strings of decoded spans and log records in place; how many were cut.

    Skeleton spans (no attributes yet) cost two length checks; resource attribute dicts,
    shared by the spans of a resource, are walked once.
    """
    if not limit or limit < 0:
        return 0
    cutter = _Cutter(limit)
    resources: set[int] = set()
    for span in spans:
        _cut_span(span, cutter)
        resource = span.resource
        if resource and id(resource) not in resources:
            resources.add(id(resource))
            cutter.values(resource)
    for record in logs:
        record.body = cutter.values(record.body)
        if record.attributes:
            cutter.values(record.attributes)
    return cutter.count


def _cut_span(span: Span, cutter: _Cutter) -> None:
    limit = cutter.limit
    if type(span.name) is str and len(span.name) > limit:
        span.name = cutter.cut(span.name)
    if type(span.status_message) is str and len(span.status_message) > limit:
        span.status_message = cutter.cut(span.status_message)
    if span.attributes:
        cutter.values(span.attributes)
    for event in span.events:
        if type(event.name) is str and len(event.name) > limit:
            event.name = cutter.cut(event.name)
        if event.attributes:
            cutter.values(event.attributes)


# -- messages ---------------------------------------------------------------------------------


def json_problem(exc: Exception) -> str:
    """One line for why `json` refused a document."""
    if isinstance(exc, json.JSONDecodeError):
        return f"invalid JSON at column {exc.colno}: {exc.msg}"
    if isinstance(exc, RecursionError):
        return "invalid JSON: nested too deeply (arrays or objects inside each other)"
    # int() refuses numbers of more than 4300 digits with a long hint after a semicolon.
    return f"invalid JSON: {str(exc).split(';', 1)[0]}"
