"""What a dialect says about itself, in one place: how its spans are recognised, and how its
instrumentation is told to record content.

Several parts of the package must know a dialect's keys, scopes and span names without
decoding a span: the candidate filter that decides which spans are decoded in full
(docs/dialects.md, "The candidate filter is a superset"), the sidecar's byte tests that
decide which traces are held, the Collector's routing file, and `inspect`'s capture hints.
Each used to keep its own copy of those lists, so a marker learnt in a dialect module had to
be added in four more places. A `DialectSpec` is the one copy; `adapt.registry` collects
them and every one of those parts is derived from the union (`Markers`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TypeVar

from attest_otel.adapt.base import Dialect

__all__ = ["DialectSpec", "Markers", "union"]

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class DialectSpec:
    """One dialect's declaration.

    The marker fields are deliberately liberal: they only decide which spans are decoded
    and which traces the sidecar holds, and must cover every span `reader.detect` could
    claim (a false positive costs one attribute walk, a false negative hides a span).
    """

    name: str
    """The dialect's name as runs and `inspect` show it; equal to `reader.name`."""
    reader: Dialect | None = None
    """The code that reads the spans; None for markers read by a reader elsewhere (the
    generic reader, the duplicate-span matcher, the policy's own attributes)."""
    scopes: tuple[str, ...] = ()
    """Instrumentation scope names that are this dialect's own: a span of one of them asks
    this dialect right after OpenInference, and one with no attributes at all asks only it."""
    scope_markers: tuple[str, ...] = ()
    """Substrings of a lower-cased scope name that mark all of its spans as candidates."""
    key_prefixes: tuple[str, ...] = ()
    """An attribute key starting with one of these marks a candidate span."""
    name_prefixes: tuple[str, ...] = ()
    """A span name starting with one of these marks a candidate span."""
    name_suffixes: tuple[str, ...] = ()
    """A span name ending with one of these (each `.word`) marks a candidate span."""
    event_prefixes: tuple[str, ...] = ()
    """A log record whose event name starts with one of these is kept."""
    capture: str | None = None
    """The setting that makes the instrumentation record content, for `inspect`'s hint."""
    agent_attributes: tuple[tuple[str, str], ...] = ()
    """(key, string value) pairs that make a span an agent span, exactly: the sidecar finds
    them in a span's bytes without decoding it, to know early that a run is there."""
    agent_span_names: tuple[str, ...] = ()
    """Span names, exact, that make a span an agent span (the same byte test)."""
    role_keys: tuple[str, ...] = ()
    """Attribute keys that make a span this dialect's whatever else it carries (its own
    span kind): a span showing one is not taken for another dialect's agent by the byte
    test, and is decoded instead."""
    routing_keys: tuple[str, ...] = ()
    """Attribute keys, exact, that mark a span for the Collector's GenAI-only routing
    (`collector-config/genai-routing.yaml`) besides the role keys and agent attributes: the
    Collector tests a few exact keys per span at the cost of a lookup each, where testing
    every key against `key_prefixes` costs it several times its own work per span
    (docs/genai-routing.md). Each must start with one of `key_prefixes`, so a routed span is
    always a candidate."""
    before_scopes: bool = False
    """Asked before the scope's own dialect: OpenInference, whose span processors copy its
    keys onto other frameworks' spans and mean them (docs/dialects.md, "Detection order")."""

    def __post_init__(self) -> None:
        if self.reader is not None and self.reader.name != self.name:
            raise ValueError(f"dialect spec {self.name!r} names a reader of {self.reader.name!r}")
        bad = [s for s in self.name_suffixes if not s.startswith(".") or "." in s[1:]]
        if bad:
            raise ValueError(f"dialect spec {self.name!r}: name suffixes must be `.word`: {bad}")
        if any(not m for m in (*self.key_prefixes, *self.name_prefixes, *self.scope_markers)):
            raise ValueError(f"dialect spec {self.name!r}: an empty marker would match anything")
        loose = [k for k in self.routing_keys if not k.startswith(self.key_prefixes)]
        if loose:
            raise ValueError(
                f"dialect spec {self.name!r}: routing keys outside its key prefixes: {loose}"
            )

    def covers(self, name: str, keys: Iterable[str], scope_name: str = "") -> bool:
        """Whether this declaration alone marks a span as a candidate: the plain statement
        of what `ingest.candidate` computes, fast, for the union. Each spec must cover every
        span its own reader claims, so a dialect never leans on another's markers."""
        low = scope_name.lower()
        return (
            name.startswith(self.name_prefixes)
            or name.endswith(self.name_suffixes)
            or low in (s.lower() for s in self.scopes)
            or any(m in low for m in self.scope_markers)
            or any(k.startswith(self.key_prefixes) for k in keys)
        )


@dataclass(frozen=True, slots=True)
class Markers:
    """The union of every registered spec's markers, each list without repeats, in the
    order the specs were registered (so generated files are stable)."""

    key_prefixes: tuple[str, ...] = ()
    name_prefixes: tuple[str, ...] = ()
    name_suffixes: tuple[str, ...] = ()
    scopes: tuple[str, ...] = ()
    scope_markers: tuple[str, ...] = ()
    event_prefixes: tuple[str, ...] = ()
    agent_attributes: tuple[tuple[str, str], ...] = ()
    agent_span_names: tuple[str, ...] = ()
    role_keys: tuple[str, ...] = ()
    routing_keys: tuple[str, ...] = ()
    """Every spec's routing keys, role keys and agent attribute keys."""
    capture: dict[str, str] = field(default_factory=dict)
    """Per dialect name, its capture setting."""

    def routes(self, name: str, keys: Iterable[str], scope_name: str = "") -> bool:
        """Whether the Collector's GenAI-only routing sends this span to the sidecar: the
        candidate test with exact routing keys in place of the key prefixes, so a subset of
        the candidates (tests/peers/test_genai_routing.py checks the real Collector agrees)."""
        return (
            name.startswith(self.name_prefixes)
            or name.endswith(self.name_suffixes)
            or self._routes_scope(scope_name)
            or not set(self.routing_keys).isdisjoint(keys)
        )

    def routes_record(self, event_name: str, keys: Iterable[str], scope_name: str = "") -> bool:
        """The same for a log record: its scope, its event name, its routing keys."""
        return (
            event_name.startswith(self.event_prefixes)
            or self._routes_scope(scope_name)
            or not set(self.routing_keys).isdisjoint(keys)
        )

    def _routes_scope(self, scope_name: str) -> bool:
        low = scope_name.lower()
        return low in (s.lower() for s in self.scopes) or any(m in low for m in self.scope_markers)


def _unique(items: Iterable[_T]) -> tuple[_T, ...]:
    return tuple(dict.fromkeys(items))


def union(specs: Iterable[DialectSpec]) -> Markers:
    specs = tuple(specs)
    return Markers(
        key_prefixes=_unique(k for s in specs for k in s.key_prefixes),
        name_prefixes=_unique(n for s in specs for n in s.name_prefixes),
        name_suffixes=_unique(n for s in specs for n in s.name_suffixes),
        scopes=_unique(n for s in specs for n in s.scopes),
        scope_markers=_unique(m for s in specs for m in s.scope_markers),
        event_prefixes=_unique(e for s in specs for e in s.event_prefixes),
        agent_attributes=_unique(a for s in specs for a in s.agent_attributes),
        agent_span_names=_unique(n for s in specs for n in s.agent_span_names),
        role_keys=_unique(k for s in specs for k in s.role_keys),
        routing_keys=_unique(
            k
            for s in specs
            for k in (*s.role_keys, *(key for key, _ in s.agent_attributes), *s.routing_keys)
        ),
        capture={s.name: s.capture for s in specs if s.capture is not None},
    )
