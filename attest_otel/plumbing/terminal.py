"""Text from spans made safe to print on a terminal.

Span content is written by whoever sends spans. Printed raw, its control characters are
commands to the terminal: an OSC sequence sets the window title or makes a link (OSC 8),
CSI sequences clear the screen and move the cursor, so a tool name or a tool result can
repaint the verdict lines printed before it. Every text output (`grade`, `inspect`,
`report`) passes content through `printable`, which shows such characters as escapes
instead of sending them; our own colours are added after, around the escaped text.
"""

from __future__ import annotations

import re

__all__ = ["printable"]

_CONTROLS = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f"  # C0 but tab and newline, DEL, C1 (\x9b is an 8-bit CSI)
    "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]"  # bidi marks, overrides and isolates
)
_CONTROLS_AND_NEWLINES = re.compile(_CONTROLS.pattern[:-1] + "\n\t]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str, *, newlines: bool = True) -> str:
    """`text` with every terminal control character shown as an escape (`\\x1b`);
    `newlines=False` escapes newlines and tabs too (a value printed on one line)."""
    pattern = _CONTROLS if newlines else _CONTROLS_AND_NEWLINES
    return pattern.sub(_escape, text)
