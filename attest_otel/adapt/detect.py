"""Which dialect a span speaks, decided per span (never per trace or service).

The same library emits different dialects by configuration, and one span may carry two (the
OpenInference processors copy GenAI attributes onto pydantic-ai and Strands spans; Vercel
legacy adds `gen_ai.*`), so the order below is the tie-break: the most specific marker first,
plain GenAI last (docs/dialects.md, "Detection order"). Each check is a handful of dict lookups.
"""

from __future__ import annotations

from collections.abc import Sequence

from attest_otel.adapt.adk import ADK
from attest_otel.adapt.base import Dialect, Role
from attest_otel.adapt.genai import GenAI, GenAIOld
from attest_otel.adapt.langsmith import LangSmith
from attest_otel.adapt.openinference import OpenInference
from attest_otel.adapt.openllmetry import OpenLLMetry
from attest_otel.adapt.pydantic_ai import PydanticAI
from attest_otel.adapt.strands import Strands
from attest_otel.adapt.vercel import VercelGenAI, VercelLegacy
from attest_otel.ingest.span import Span

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
    role = _OPENINFERENCE.detect(span)
    if role is not None:
        return _OPENINFERENCE, role
    for dialect in _BY_SCOPE.get(span.scope_name, ()):
        role = dialect.detect(span)
        if role is not None:
            return dialect, role
    for dialect in DIALECTS:
        role = dialect.detect(span)
        if role is not None:
            return dialect, role
    return None
