"""Which dialect a span speaks, decided per span (never per trace or service).

The same library emits different dialects by configuration, and one span may carry two (the
OpenInference processors copy GenAI attributes onto pydantic-ai and Strands spans; Vercel
legacy adds `gen_ai.*`), so the order below is the tie-break: the most specific marker first,
plain GenAI last (docs/dialects.md, "Detection order"). Each check is a handful of dict lookups.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from attest_otel.adapt.adk import ADK
from attest_otel.adapt.base import Dialect, Role
from attest_otel.adapt.genai import GenAI, GenAIOld
from attest_otel.adapt.langsmith import LangSmith
from attest_otel.adapt.openinference import OpenInference
from attest_otel.adapt.openllmetry import OpenLLMetry
from attest_otel.adapt.pydantic_ai import PydanticAI
from attest_otel.adapt.strands import Strands
from attest_otel.adapt.vercel import VercelGenAI, VercelLegacy
from attest_otel.model import Span

_OPENINFERENCE = OpenInference()
_OPENLLMETRY = OpenLLMetry()
_VERCEL = VercelLegacy()
_LANGSMITH = LangSmith()
_ADK = ADK()
_PYDANTIC_AI = PydanticAI()
_STRANDS = Strands()
_VERCEL_GENAI = VercelGenAI()

DIALECTS: tuple[Dialect, ...] = (
    _OPENINFERENCE,
    _OPENLLMETRY,
    _VERCEL,
    _LANGSMITH,
    _ADK,
    _PYDANTIC_AI,
    _STRANDS,
    _VERCEL_GENAI,
    GenAI(),
    GenAIOld(),
)
"""In detection order."""

BY_NAME: dict[str, Dialect] = {d.name: d for d in DIALECTS}

_BY_SCOPE: dict[str, tuple[Dialect, ...]] = {
    "pydantic-ai": (_PYDANTIC_AI,),
    "ai": (_VERCEL, _VERCEL_GENAI),
    "gen_ai": (_VERCEL_GENAI,),
    "strands.telemetry.tracer": (_STRANDS,),
    "gcp.vertex.agent": (_ADK,),
    "traceloop.tracer": (_OPENLLMETRY,),
    "langsmith": (_LANGSMITH,),
}
"""A framework's own scope names its dialect; only OpenInference (whose processors copy their
keys onto other frameworks' spans) is checked before it."""


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
    """The built-in dialects in the order a span of this scope asks them: OpenInference,
    the scope's own, then the rest of `DIALECTS`; each once, with its bound `detect`.

    Decided once per scope name rather than per span. Asking a dialect that already said
    no again cannot change the answer (`detect` reads the span and nothing else), so each
    is asked once; binding the methods saves an attribute lookup per dialect and span.
    """
    found = _ORDERS.get(scope_name)
    if found is None:
        first = (_OPENINFERENCE, *_BY_SCOPE.get(scope_name, ()))
        dialects = first + tuple(d for d in DIALECTS if all(d is not f for f in first))
        found = tuple((d, d.detect) for d in dialects)
        if len(_ORDERS) >= _ORDERS_LIMIT:
            _ORDERS.clear()
        _ORDERS[scope_name] = found
    return found
