"""The policy an agent span carries: `attest.allowed_tools` / `attest.tool_fallbacks`.

Reading span attributes is the assembler's job, so their parsing lives here; the policy file
(`config`) decides when these values apply (only when the file has no entry for the agent).
Lenient on purpose: a bad attribute on one span must not stop grading the others; the policy
file is where strictness belongs.
"""

from __future__ import annotations

import functools
import json
import logging
from typing import Any

__all__ = ["from_span", "parse_fallbacks_value", "parse_tools_value"]

log = logging.getLogger(__name__)


def from_span(
    on_span: tuple[Any, Any],
    allowed_override: list[str] | None = None,
    fallbacks_override: dict[str, list[str]] | None = None,
) -> tuple[list[str] | None, dict[str, list[str]]]:
    """A run's (allowed_tools, tool_fallbacks) from its agent span's raw values, with the
    one-off overrides winning; every tool allowed and no fallbacks when the span says nothing."""
    raw_allowed, raw_fallbacks = on_span
    allowed = parse_tools_value(raw_allowed) if raw_allowed is not None else None
    fallbacks = (parse_fallbacks_value(raw_fallbacks) or {}) if raw_fallbacks is not None else {}
    if allowed_override is not None:
        allowed = list(allowed_override)
    if fallbacks_override is not None:
        fallbacks = {k: list(v) for k, v in fallbacks_override.items()}
    return allowed, fallbacks


def parse_tools_value(value: Any) -> list[str] | None:
    """`attest.allowed_tools` as a span gives it: a string array, or a JSON string of one.

    Anything else is ignored (logged), because a bad attribute on one span must not stop
    grading the others; the policy file is where strictness belongs.
    """
    if isinstance(value, str) and len(value) <= CACHED_TEXT_CHARS:
        cached = _tools_from_text(value)
        return None if cached is None else list(cached)
    return _parse_tools(value)


CACHED_TEXT_CHARS = 65_536
"""Attribute texts longer than this are parsed each time, not cached: a process-wide cache of
256 texts must not pin 256 hostile multi-megabyte strings."""


@functools.lru_cache(maxsize=256)
def _tools_from_text(value: str) -> tuple[str, ...] | None:
    """Cached: every run of an agent carries the same attribute text."""
    tools = _parse_tools(value)
    return None if tools is None else tuple(tools)


def _parse_tools(value: Any) -> list[str] | None:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):
            log.debug("attest.allowed_tools is not JSON: %.80r", value)
            return None
    if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        return list(value)
    log.debug("attest.allowed_tools is not a list of strings: %.80r", value)
    return None


def parse_fallbacks_value(value: Any) -> dict[str, list[str]] | None:
    """`attest.tool_fallbacks` as a span gives it: a JSON object string (or a decoded map)."""
    if isinstance(value, str) and len(value) <= CACHED_TEXT_CHARS:
        cached = _fallbacks_from_text(value)
        return None if cached is None else {k: list(v) for k, v in cached}
    return _parse_fallbacks(value)


@functools.lru_cache(maxsize=256)
def _fallbacks_from_text(value: str) -> tuple[tuple[str, tuple[str, ...]], ...] | None:
    found = _parse_fallbacks(value)
    return None if found is None else tuple((k, tuple(v)) for k, v in found.items())


def _parse_fallbacks(value: Any) -> dict[str, list[str]] | None:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):
            log.debug("attest.tool_fallbacks is not JSON: %.80r", value)
            return None
    if not isinstance(value, dict):
        log.debug("attest.tool_fallbacks is not an object: %.80r", value)
        return None
    out: dict[str, list[str]] = {}
    for tool, alts in value.items():
        if isinstance(alts, str):
            alts = [alts]
        if not isinstance(tool, str) or not isinstance(alts, list | tuple):
            log.debug("attest.tool_fallbacks entry ignored: %.80r", (tool, alts))
            continue
        out[tool] = [a for a in alts if isinstance(a, str)]
    return out
