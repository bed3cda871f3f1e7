"""Is this span (or log record) possibly GenAI? One cheap, liberal test used by every decoder.

The decoders call it for every span before they build any attribute dict: a span that passes is
decoded in full, a span that fails becomes a skeleton (ids, parent, name, times, kind, status,
resource and scope, but no attributes or events). It only looks at the span name, the attribute
*keys* (never the values) and the instrumentation scope name, with prefix tests.

It must stay a superset of every dialect detector in `attest_otel.adapt` (docs/dialects.md):
a false positive costs one attribute walk, a false negative hides a span from grading. So the
markers are not kept here: they are the union of the dialects' own declarations
(`adapt.registry`, each dialect module's `DialectSpec`), rebuilt when a dialect registers.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable

from attest_otel.adapt import registry


def _by_first_char(prefixes: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    out: dict[str, list[str]] = {}
    for prefix in prefixes:
        out.setdefault(prefix[:1], []).append(prefix)
    return {first: tuple(group) for first, group in out.items()}


GENAI_KEY_PREFIXES: tuple[str, ...] = ()
"""A span with any attribute key starting with one of these is a GenAI candidate."""
GENAI_NAME_PREFIXES: tuple[str, ...] = ()
"""A span whose name starts with one of these is a GenAI candidate."""
GENAI_NAME_SUFFIXES: tuple[str, ...] = ()
"""A span whose name ends with one of these is a GenAI candidate."""
GENAI_SCOPES: frozenset[str] = frozenset()
"""Scope names, exact and lower-cased, whose spans are all candidates (the Vercel AI SDK's
scope is literally `ai`, which no marker could safely contain)."""
GENAI_SCOPE_MARKERS: tuple[str, ...] = ()
"""A scope whose (lower-cased) name contains one of these marks all its spans as candidates."""
GENAI_EVENT_PREFIXES: tuple[str, ...] = ()
"""A log record whose event name starts with one of these is kept."""

# `str.startswith` with a tuple of 17 prefixes costs ~0.7 us per key; looking up the prefixes
# that share the key's first character first costs ~0.1 us for the usual non-matching key.
KEY_PREFIXES_BY_FIRST_CHAR: dict[str, tuple[str, ...]] = {}
NAME_PREFIXES_BY_FIRST_CHAR: dict[str, tuple[str, ...]] = {}
NAME_SUFFIXES: frozenset[str] = frozenset()
"""Every suffix is `.word`: compare the text after the name's last dot."""
_SCOPE_MARKERS = re.compile("(?!)")


def _rebuild() -> None:
    """The tables above, from the registered dialects' declarations (`adapt.registry`)."""
    global GENAI_KEY_PREFIXES, GENAI_NAME_PREFIXES, GENAI_NAME_SUFFIXES, GENAI_SCOPES
    global GENAI_SCOPE_MARKERS, GENAI_EVENT_PREFIXES, KEY_PREFIXES_BY_FIRST_CHAR
    global NAME_PREFIXES_BY_FIRST_CHAR, NAME_SUFFIXES, _SCOPE_MARKERS
    m = registry.markers()
    GENAI_KEY_PREFIXES = m.key_prefixes
    GENAI_NAME_PREFIXES = m.name_prefixes
    GENAI_NAME_SUFFIXES = m.name_suffixes
    GENAI_SCOPES = frozenset(s.lower() for s in m.scopes)
    GENAI_SCOPE_MARKERS = m.scope_markers
    GENAI_EVENT_PREFIXES = m.event_prefixes
    KEY_PREFIXES_BY_FIRST_CHAR = _by_first_char(GENAI_KEY_PREFIXES)
    NAME_PREFIXES_BY_FIRST_CHAR = _by_first_char(GENAI_NAME_PREFIXES)
    NAME_SUFFIXES = frozenset(GENAI_NAME_SUFFIXES)
    _SCOPE_MARKERS = re.compile(
        "|".join(re.escape(marker) for marker in GENAI_SCOPE_MARKERS) or "(?!)"
    )
    _scope_verdict.cache_clear()


def is_genai_key(key: str) -> bool:
    prefixes = KEY_PREFIXES_BY_FIRST_CHAR.get(key[:1])
    return prefixes is not None and key.startswith(prefixes)


def is_genai_scope(scope_name: str) -> bool:
    """Whether every span of this instrumentation scope is a candidate (checked once per scope)."""
    if not scope_name:
        return False
    if type(scope_name) is str and len(scope_name) <= 1024:  # a cache must not pin huge names
        return _scope_verdict(scope_name)
    return _scope_check(scope_name)  # malformed input fails exactly as it always did


@functools.lru_cache(maxsize=1024)
def _scope_verdict(scope_name: str) -> bool:
    """`_scope_check`, remembered: an SDK exporting one span per request repeats its scope in
    every request, and a request repeats it per resource, so the walkers ask again and again
    about a handful of names. Bounded, since scope names come from the senders."""
    return _scope_check(scope_name)


def _scope_check(scope_name: str) -> bool:
    low = scope_name.lower()
    return low in GENAI_SCOPES or _SCOPE_MARKERS.search(low) is not None


def is_genai_name(name: str) -> bool:
    """Whether the span name alone marks a candidate."""
    prefixes = NAME_PREFIXES_BY_FIRST_CHAR.get(name[:1])
    if prefixes is not None and name.startswith(prefixes):
        return True
    dot = name.rfind(".")
    return dot >= 0 and name[dot:] in NAME_SUFFIXES


def is_genai_candidate(name: str, keys: Iterable[str], scope_name: str = "") -> bool:
    """Cheap, liberal test: may this span matter to grading?

    `keys` are the span's attribute keys; only their prefixes are looked at, and the loop stops
    at the first hit. The decoders inline the same test over their own attribute containers.
    """
    if is_genai_name(name) or is_genai_scope(scope_name):
        return True
    return any(is_genai_key(key) for key in keys)


def is_genai_log(event_name: str, keys: Iterable[str], scope_name: str = "") -> bool:
    """The same test for a log record: old GenAI conventions put message content in log events."""
    if event_name.startswith(GENAI_EVENT_PREFIXES) or is_genai_scope(scope_name):
        return True
    return any(is_genai_key(key) for key in keys)


registry.watch(_rebuild)
