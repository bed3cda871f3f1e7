"""Why a trace came out as it did: what each span was read as, and what content is missing.

`attest-otel inspect` exists for the framework nobody has seen yet: a user must be able to
tell from its output alone why a run came out as it did. So the assembler, when asked
(`runs_from_spans(..., explain=True)`), records for every span the dialect and role it was
read as, which run or call it became, or why it was left out; and for every run what could
not be read, with the setting that turns capture on for the instrumentation that wrote it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from attest_otel.adapt import registry
from attest_otel.adapt.base import Dialect, Role
from attest_otel.adapt.tree import Node, RunBuild
from attest_otel.model import Run

__all__ = ["CAPTURE_SETTINGS", "RunGaps", "SpanReading", "capture_hints", "gaps", "readings"]

CAPTURE_SETTINGS: dict[str, str] = {}
"""Per dialect, the setting that makes its instrumentation record content: each dialect's
`DialectSpec.capture`, updated in place when a dialect registers."""


def _rebuild() -> None:
    CAPTURE_SETTINGS.clear()
    CAPTURE_SETTINGS.update(registry.markers().capture)


registry.watch(_rebuild)


@dataclass(slots=True)
class SpanReading:
    span_id: str
    parent_id: str | None
    name: str
    dialect: str | None
    role: str | None
    became: str
    """What the span became, or why nothing: `run 0`, `call 2 of run 0`, `model call in run
    0`, `not read: no dialect claims it`, ..."""
    rule: str | None = None
    """The declared dialect rule that matched, for a dialect from a YAML file."""


@dataclass(slots=True)
class RunGaps:
    """What one run could not read, and the setting that would have recorded it."""

    missing: list[str] = field(default_factory=list)
    capture: list[str] = field(default_factory=list)
    """Only when the trace recorded no content at all: where some content was recorded,
    capture is on, and telling the user to turn it on would send them the wrong way."""
    unread: bool = False
    """Some content was recorded, yet parts are missing: not captured for those spans (a
    tool that raised returns nothing), or kept where no reader looks (a dialect file can
    say where)."""


def readings(nodes: dict[str, Node], builds: list[RunBuild]) -> list[SpanReading]:
    """One reading per span, in the order the spans came."""
    runs = [b for b in builds if b.run is not None]
    index = {id(b): i for i, b in enumerate(sorted(runs, key=lambda b: b.root.key))}
    became: dict[str, str] = {}
    for build in runs:
        n = index[id(build)]
        run = build.run
        assert run is not None
        became[build.root.span.span_id] = f"run {n} ({run.agent or 'unnamed agent'})"
        for i, step in enumerate(run.steps):
            call = step.tool_call
            if call is not None and call.span_id:
                became.setdefault(call.span_id, f"call {i} of run {n} ({call.name})")
        for member in build.members:
            sid = member.span.span_id
            if sid in became:
                continue
            if member.role is Role.MODEL:
                became[sid] = f"model call in run {n}"
            elif member.role is Role.HANDOFF:
                became[sid] = f"handoff in run {n}: control passed on, not a call"
            else:
                became[sid] = f"not a call of run {n}: the same call seen twice, or an answer tool"
    out = []
    for node in nodes.values():
        span = node.span
        what = became.get(span.span_id) or _left_out(node)
        rule_for = getattr(node.dialect, "rule_for", None)
        out.append(
            SpanReading(
                span.span_id,
                span.parent_id,
                span.name,
                node.dialect.name if node.dialect is not None else None,
                node.role.value if node.role is not None else None,
                what,
                rule_for(span) if callable(rule_for) else None,
            )
        )
    return out


def _left_out(node: Node) -> str:
    if node.dialect is None:
        return "not read: no dialect claims it (not GenAI, or a framework no reader knows)"
    if node.role is Role.AGENT:
        return "not a run: an agent container that only holds other agents"
    if node.role is Role.WORKFLOW:
        return "not a run: a workflow or runner container"
    if node.role is Role.OTHER:
        return "recognised, not needed for grading"
    return "outside every run"


def gaps(run: Run, dialects: list[str], declared: Sequence[Dialect] = ()) -> RunGaps:
    """What content this run lacks, and how to turn its capture on (`declared`: the user's
    dialects, whose files may say)."""
    out = RunGaps()
    if not run.task:
        out.missing.append("task")
    if run.final_answer is None:
        out.missing.append("final answer")
    calls = [s.tool_call for s in run.steps if s.tool_call is not None]
    uncaptured = sum(1 for c in calls if not c.output_captured)
    if uncaptured:
        out.missing.append(f"tool results ({uncaptured} of {len(calls)} calls)")
    unargued = sum(1 for c in calls if c.arguments is None)
    if unargued:
        out.missing.append(f"tool arguments ({unargued} of {len(calls)} calls)")
    if out.missing and not run.content_captured:
        out.capture = capture_hints(dialects, declared)
    out.unread = bool(out.missing) and run.content_captured
    return out


def capture_hints(dialects: list[str], declared: Sequence[Dialect] = ()) -> list[str]:
    """`dialect: setting` for each dialect seen that has a content switch, first seen first:
    a registered dialect's declaration, or a declared one's `capture:`."""
    settings = {d.name: c for d in declared if (c := getattr(d, "capture", None))}
    settings.update(CAPTURE_SETTINGS)  # a declared name never shadows a built-in one
    return [f"{d}: {settings[d]}" for d in dialects if d in settings]
