"""Which dialect a span speaks, decided per span (never per trace or service).

The same library emits different dialects by configuration, and one span may carry two (the
OpenInference processors copy GenAI attributes onto pydantic-ai and Strands spans; Vercel
legacy adds `gen_ai.*`), so the order below is the tie-break: the most specific marker first,
plain GenAI last (docs/dialects.md, "Detection order"). Each check is a handful of dict lookups.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from attest_otel.adapt import registry
from attest_otel.adapt.base import Dialect, Role
from attest_otel.model import Span

DIALECTS: tuple[Dialect, ...] = ()
"""In detection order (`adapt.registry`, rebuilt when a dialect registers)."""

BY_NAME: dict[str, Dialect] = {}
"""Updated in place, so a module that imported it sees registrations too."""

_BY_SCOPE: dict[str, tuple[Dialect, ...]] = {}
"""A framework's own scope names its dialect (`DialectSpec.scopes`); only the dialects asked
before the scopes (OpenInference, whose processors copy their keys onto other frameworks'
spans) come first."""

_FIRST: tuple[Dialect, ...] = ()


def _rebuild() -> None:
    global DIALECTS, _BY_SCOPE, _FIRST
    pairs = [(s, s.reader) for s in registry.specs() if s.reader is not None]
    DIALECTS = tuple(reader for _, reader in pairs)
    BY_NAME.clear()
    BY_NAME.update((d.name, d) for d in DIALECTS)
    by_scope: dict[str, list[Dialect]] = {}
    for spec, reader in pairs:
        for scope in spec.scopes:
            by_scope.setdefault(scope, []).append(reader)
    _BY_SCOPE = {scope: tuple(found) for scope, found in by_scope.items()}
    _FIRST = tuple(reader for spec, reader in pairs if spec.before_scopes)
    _ORDERS.clear()


def detect(span: Span, declared: Sequence[Dialect] = ()) -> tuple[Dialect, Role] | None:
    """The span's dialect and role, or None for a span no dialect claims (HTTP, DB, ...).

    `declared` are the user's own dialects (a policy file's `dialects:`), asked first: whoever
    wrote one knows their spans better than any marker here."""
    for dialect in declared:
        role = dialect.detect(span)
        if role is not None:
            return dialect, role
    if not span.attributes:
        # A framework's span may carry nothing but its name (ADK's `agent_run [x]`).
        by_scope = _BY_SCOPE.get(span.scope_name)
        if by_scope is None:
            return None
        for dialect in by_scope:
            role = dialect.detect(span)
            if role is not None:
                return dialect, role
        return None
    for dialect, ask in _order(span.scope_name):
        role = ask(span)
        if role is not None:
            return dialect, role
    return None


_Asked = tuple[tuple[Dialect, Callable[[Span], "Role | None"]], ...]
_ORDERS: dict[str, _Asked] = {}
_ORDERS_LIMIT = 1024
"""Scope names whose order is kept; past it the cache starts again (scope names are few,
but they come from the input)."""


def _order(scope_name: str) -> _Asked:
    """The dialects in the order a span of this scope asks them: OpenInference, the
    scope's own, then the rest of `DIALECTS`; each once, with its bound `detect`.

    Decided once per scope name rather than per span. Asking a dialect that already said
    no again cannot change the answer (`detect` reads the span and nothing else), so each
    is asked once; binding the methods saves an attribute lookup per dialect and span.
    """
    found = _ORDERS.get(scope_name)
    if found is None:
        first = (*_FIRST, *_BY_SCOPE.get(scope_name, ()))
        dialects = first + tuple(d for d in DIALECTS if all(d is not f for f in first))
        found = tuple((d, d.detect) for d in dialects)
        if len(_ORDERS) >= _ORDERS_LIMIT:
            _ORDERS.clear()
        _ORDERS[scope_name] = found
    return found


def claimed(span: Span, declared: Sequence[Dialect] = ()) -> bool:
    """Whether some dialect (a declared one, or a registered one) claims the span: the spans
    that are not claimed are the ones left to the generic reader."""
    return detect(span, declared) is not None


registry.watch(_rebuild)
