"""The dialects, in detection order, and the union of their markers.

Everything that must know a dialect's keys, scopes or span names reads them from here:
`adapt.detect` (which dialect is asked first), `ingest.candidate` (which spans are decoded in
full, and `ingest.otlp_keyscan`), the sidecar's byte tests (`sidecar.wire`, `sidecar.probe`),
`inspect`'s capture hints (`adapt.explain`) and the Collector's routing file
(`tools/gen_routing.py`). A dialect module declares its `DialectSpec` next to its reader; a
new built-in is that module plus its line in `BUILTIN`.

`register` adds a dialect at run time (a test's toy dialect, an embedding application's own
reader). Every part above rebuilds its tables when told (`watch`), so the hot paths keep
their precomputed tables and pay nothing per span for the indirection. A registration is this
process's own: a sidecar's grading processes start afresh and see only what their imports
register.
"""

from __future__ import annotations

from collections.abc import Callable

from attest_otel.adapt import (
    adk,
    genai,
    langsmith,
    openinference,
    openllmetry,
    pydantic_ai,
    strands,
    vercel,
)
from attest_otel.adapt.base import Dialect
from attest_otel.adapt.spec import DialectSpec, Markers, union

__all__ = [
    "BUILTIN",
    "GENERIC",
    "OWN",
    "DialectSpec",
    "Markers",
    "markers",
    "readers",
    "register",
    "specs",
    "unregister",
    "watch",
]

BUILTIN: tuple[DialectSpec, ...] = (
    openinference.SPEC,
    openllmetry.SPEC,
    vercel.SPEC_LEGACY,
    langsmith.SPEC,
    adk.SPEC,
    pydantic_ai.SPEC,
    strands.SPEC,
    vercel.SPEC_V7,
    genai.SPEC,
    genai.SPEC_OLD,
)
"""In detection order, most specific marker first, plain GenAI last (docs/dialects.md,
"Detection order")."""

GENERIC = DialectSpec(
    "generic",
    key_prefixes=(
        "agent",  # agent_name, agent.name, ...
        "tool_",  # tool_name, tool_input, ...
        "mcp.",  # MCP client and server spans (duplicates of a tool span)
        "langfuse.",  # langfuse.observation.type / input / output
    ),
    name_prefixes=(
        "Agent",  # Logfire openai-agents `Agent run: ...`
        "Function:",  # Logfire openai-agents tool spans
        "tool",  # MCP `tools/call x`, `tool ...`
        "Tool",
        "AutoFunctionInvocationLoop",  # Semantic Kernel
        "handoff",  # OpenAI Agents
        "Handoff",
        "gen_ai",
        "llm",
        "LLM",
    ),
    scope_markers=(
        "langchain",
        "llama_index",
        "llamaindex",
        "crewai",
        "smolagents",
        "semantickernel",
        "semantic_kernel",
        "autogen",
        "agent",  # `agents` (openai-agents), and an app's own agent tracer (`billing.agent`)
        "haystack",
        "mlflow",  # `mlflow.tracing.provider`
        "openlit",  # a failed tool span may carry no attribute at all
        "mcp",
        "langfuse",  # `langfuse-sdk`
    ),
    routing_keys=("mcp.method.name", "langfuse.observation.type", "agent.name", "tool_name"),
    capture="the framework's own content or tracing switch (a dialect file can name where "
    "it keeps content)",
)
"""The frameworks no dialect module reads: the generic reader reads their traces from
vocabulary (`adapt.generic`, per trace, after every dialect), so their spans must be decoded
and held like any dialect's."""

OWN = DialectSpec(
    "attest",
    key_prefixes=("attest.",),
    routing_keys=("attest.allowed_tools", "attest.tool_fallbacks"),
)
"""The attributes a user sets for the policy (`attest.allowed_tools`, ...), on any span."""

_specs: list[DialectSpec] = [*BUILTIN, GENERIC, OWN]
_watchers: list[Callable[[], None]] = []
_markers = union(_specs)


def specs() -> tuple[DialectSpec, ...]:
    """Every registered spec: the built-ins and run-time ones in detection order, then the
    markers-only ones."""
    return tuple(_specs)


def readers() -> tuple[Dialect, ...]:
    """The dialects `detect` asks, in detection order."""
    return tuple(s.reader for s in _specs if s.reader is not None)


def markers() -> Markers:
    """The union of every registered spec's markers (rebuilt on each registration)."""
    return _markers


def watch(rebuild: Callable[[], None]) -> None:
    """Call `rebuild` now and after every change of the registry: the derived tables of a
    module (compiled patterns, lookup dicts) are rebuilt there, not per span."""
    _watchers.append(rebuild)
    rebuild()


def register(spec: DialectSpec, *, before: str | None = None) -> None:
    """Add a dialect, asked before the dialect named `before` (default: after every dialect
    with a reader, so it never takes a span from a built-in)."""
    if any(s.name == spec.name for s in _specs):
        raise ValueError(f"a dialect named {spec.name!r} is already registered")
    names = [s.name for s in _specs]
    if before is not None:
        if before not in names:
            raise ValueError(f"no registered dialect is named {before!r}")
        at = names.index(before)
    else:
        at = max((i + 1 for i, s in enumerate(_specs) if s.reader is not None), default=0)
    _specs.insert(at, spec)
    _changed()


def unregister(name: str) -> None:
    """Remove a dialect `register` added (the built-ins stay)."""
    if any(s.name == name for s in BUILTIN) or name in (GENERIC.name, OWN.name):
        raise ValueError(f"{name!r} is built in")
    _specs[:] = [s for s in _specs if s.name != name]
    _changed()


def _changed() -> None:
    global _markers
    _markers = union(_specs)
    for rebuild in _watchers:
        rebuild()
