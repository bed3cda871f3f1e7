"""What of a run's content may leave the process: `keep`, `truncate` or `drop`.

Run content (tool outputs, answers, the evidence an explanation quotes) can hold what an
operator must not ship: card numbers, names, secrets. Three outputs carry it, and all three
take the same `ContentPolicy`: the grade events on spans and the log events (`export`), and
the prompts of the model checks (`grade.llm`). The policy lives here, below both, so that
grading never imports export, and it is passed to each of them explicitly (the sidecar
hands it to its grading processes too): a process-wide setting would make every test and
every embedding of the library depend on who set it last.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

__all__ = [
    "CONTENT_MODES",
    "KEEP",
    "TRUNCATED_MARKER",
    "ContentMode",
    "ContentPolicy",
    "truncate",
]

ContentMode = Literal["keep", "truncate", "drop"]
CONTENT_MODES: tuple[ContentMode, ...] = get_args(ContentMode)
"""The modes in the order a message lists them: the one spelling of the vocabulary."""

TRUNCATED_MARKER = "…[truncated]"


def truncate(value: str, max_chars: int) -> str:
    """`value` cut to at most `max_chars` characters, the marker included."""
    if len(value) <= max_chars:
        return value
    keep = max(0, max_chars - len(TRUNCATED_MARKER))
    return value[:keep] + TRUNCATED_MARKER[: max_chars - keep]


@dataclass(frozen=True, slots=True)
class ContentPolicy:
    """`keep` every text; `truncate` each to `max_chars` (marker included); `drop` it.

    This is also the sidecar's `content:` section as it is configured: its defaults here
    are the config's defaults.
    """

    mode: ContentMode = "keep"
    max_chars: int = 256

    def __post_init__(self) -> None:
        if self.mode not in CONTENT_MODES:
            raise ValueError(
                f"content mode must be one of {', '.join(CONTENT_MODES)}, got {self.mode!r}"
            )
        if self.max_chars < 1:
            raise ValueError(f"content max_chars must be at least 1, got {self.max_chars}")

    def text(self, value: str) -> str | None:
        """`value` as this policy lets it out; None when dropped (leave the field out)."""
        if self.mode == "drop":
            return None
        if self.mode == "truncate":
            return truncate(value, self.max_chars)
        return value


KEEP = ContentPolicy()
"""The default everywhere a caller passes no policy: content is kept."""
