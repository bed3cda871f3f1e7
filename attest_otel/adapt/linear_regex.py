"""Users' regular expressions (declared dialects' `name_regex`, `span_name`), run by RE2.

A declared dialect's pattern runs on every span name that reaches it, and span names come
from outside. Python's `re` backtracks: an unanchored pattern with nested or overlapping
repeats takes time exponential, or at best quadratic, in the name's length, and holds the
interpreter lock all the while (one 1 MB span name stopped a sidecar's forwarding:
docs/hostile-input.md, "Grading budget"). RE2 (google-re2, its maintained Python binding)
matches in time linear in the text, whatever the pattern; the price is its syntax: no
backreferences or look-around (refused when the dialect file loads, one line naming the
key), and `\\w`, `\\d`, `\\s`, `\\b` are ASCII, as the README's dialect section says.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import re2

__all__ = ["LinearRegex", "RegexError", "compile_linear"]


class RegexError(ValueError):
    """A pattern RE2 cannot compile; the message is RE2's own."""


def _options() -> Any:
    options = re2.Options()
    options.log_errors = False  # the problem goes into the load error, not to stderr
    return options


@dataclass(frozen=True, slots=True)
class LinearRegex:
    """A compiled pattern: `search` and `capture`, linear in the text's length."""

    pattern: str
    _compiled: Any

    def _search(self, text: str) -> Any:
        try:
            return self._compiled.search(text)
        except UnicodeEncodeError:  # a lone surrogate: RE2 reads UTF-8
            return self._compiled.search(text.encode("utf-8", "replace").decode("utf-8"))

    def search(self, text: str) -> bool:
        """Whether the pattern is found anywhere in `text`."""
        return self._search(text) is not None

    def capture(self, text: str) -> str | None:
        """The first group the pattern captures in `text` (the whole match when it has no
        group); None when not found."""
        found = self._search(text)
        if found is None:
            return None
        value = found.group(1) if self._compiled.groups else found.group(0)
        return value if isinstance(value, str) else None


def compile_linear(pattern: str) -> LinearRegex:
    """`pattern` compiled by RE2; RegexError when RE2 refuses it."""
    try:
        compiled = re2.compile(pattern, _options())
    except re2.error as e:
        message = e.args[0] if e.args else str(e)
        if isinstance(message, bytes):
            message = message.decode("utf-8", "replace")
        raise RegexError(str(message)) from None
    return LinearRegex(pattern, compiled)
