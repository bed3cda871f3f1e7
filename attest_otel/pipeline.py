"""Spans to graded traces: the one grading loop every caller uses.

    spans (+ log records) ──► read: runs per trace (adapt, the policy, declared dialects)
                          ──► grade: each run by the rules, with a judge when one is given,
                              or the grade the store kept for it

`grade --file`, `grade --trace-id`, `grade --since`, the sidecar and the Grader API all come
through `grade_traces`, and `inspect` through `read`, so the same spans grade the same way
wherever they are read from. A stored grade is reused only when the reading is the one it was
made with: one-off overrides (`--allowed-tools`, `--fallback`) always grade again, and every
reused grade says so (`GradedRun.stored`), so the output can.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attest_otel.adapt import TraceRuns, runs_from_spans
from attest_otel.grade.grader import grade
from attest_otel.grade.questions import Judge
from attest_otel.ingest.decode import decode_file, hydrate, transport_skeleton
from attest_otel.model import CheckResult, Finding, LogRecord, Run, Span
from attest_otel.policy import Policy

__all__ = ["GradedRun", "GradedTrace", "Reading", "grade_traces", "read", "read_file"]


@dataclass(frozen=True, slots=True)
class Reading:
    """How spans are read into runs: the policy (and its declared dialects), and the one-off
    overrides that win over it and over the spans' own policy attributes."""

    policy: Policy = field(default_factory=Policy.empty)
    allowed_tools: list[str] | None = None
    fallbacks: dict[str, list[str]] | None = None
    regrade: tuple[str, ...] = ()
    """What the caller changed that a stored grade was not made with (`--policy`, ...):
    any makes every run grade again, and the first is the reason the output gives."""

    @property
    def overridden(self) -> bool:
        return self.allowed_tools is not None or bool(self.fallbacks)

    @property
    def changes(self) -> tuple[str, ...]:
        """Everything in this reading that a stored grade cannot have been made with."""
        out = list(self.regrade)
        if self.allowed_tools is not None and "--allowed-tools" not in out:
            out.append("--allowed-tools")
        if self.fallbacks and "--fallback" not in out:
            out.append("--fallback")
        return tuple(out)


@dataclass(slots=True)
class GradedRun:
    run: Run
    result: CheckResult
    stored: bool = False
    """The grade is the one the store kept (made when the sidecar graded the run)."""
    regraded: str | None = None
    """Why a grade the store kept was not reused (e.g. "--policy given"); None when there
    was none to reuse, or it was."""


@dataclass(slots=True)
class GradedTrace:
    trace: TraceRuns
    runs: list[GradedRun]

    @property
    def results(self) -> list[CheckResult]:
        return [g.result for g in self.runs]


def read(
    spans: Sequence[Span],
    logs: Sequence[LogRecord] = (),
    reading: Reading | None = None,
    *,
    explain: bool = False,
) -> list[TraceRuns]:
    """The runs of every trace in `spans`, read as `reading` says."""
    how = reading or Reading()
    return runs_from_spans(
        spans,
        logs,
        policy=how.policy,
        allowed_tools=how.allowed_tools,
        fallbacks=how.fallbacks or None,
        dialects=how.policy.dialects,
        hydrate=hydrate,
        transport=transport_skeleton,
        explain=explain,
    )


def read_file(path: str | Path, reading: Reading | None = None) -> list[TraceRuns]:
    """`read` over an OTLP file (JSON lines or protobuf, gzip or not), with its log records."""
    decoded = decode_file(path)
    return read(decoded.spans, decoded.logs, reading)


def grade_traces(
    spans: Sequence[Span],
    logs: Sequence[LogRecord] = (),
    reading: Reading | None = None,
    *,
    judge: Judge | None = None,
    appropriate: bool = False,
    grade_run: Callable[[Run], CheckResult] | None = None,
    stored: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[GradedTrace]:
    """Every run of every trace, graded.

    `grade_run` replaces the plain `grade(run, judge=judge)` (the sidecar's model gate decides
    per run); `stored` holds CheckResult dicts by the run's agent span id, which are reused
    only when nothing that changes a grade differs (`regrade_reason`). A stored dict that does
    not parse (a grade from another version) is graded again.
    """
    how = reading or Reading()
    changes = how.changes

    def fresh(run: Run) -> CheckResult:
        if grade_run is not None:
            return grade_run(run)
        return grade(run, judge=judge, appropriate=appropriate)

    out: list[GradedTrace] = []
    for trace in read(spans, logs, how):
        graded: list[GradedRun] = []
        for run in trace.runs:
            kept = result_from_dict((stored or {}).get(run.span_id or ""))
            why = regrade_reason(run, kept, changes, judge) if kept is not None else None
            if kept is not None and why is None:
                graded.append(GradedRun(run, kept, True))
                continue
            if kept is not None:
                # What the sidecar knew and the stored spans cannot tell again (a request it
                # refused or cut) stays with the run: a regrade must not make it a blind pass.
                run.gaps += [g for g in _gaps_of(kept) if g not in run.gaps]
            graded.append(GradedRun(run, fresh(run), regraded=why))
        out.append(GradedTrace(trace, graded))
    return out


def regrade_reason(
    run: Run, kept: CheckResult, changes: Sequence[str], judge: Judge | None
) -> str | None:
    """Why a stored grade cannot stand for this run now; None when it can."""
    if changes:
        return f"{', '.join(changes)} given"
    if judge is not None and kept.metadata.get("model") is None:
        return "a model is available now and the stored grade had none"
    stored_gaps = _gaps_of(kept)
    if any(g not in stored_gaps for g in run.gaps):
        return "the run reads with gaps the stored grade does not name"
    return None


def _gaps_of(result: CheckResult) -> list[str]:
    found = result.metadata.get("gaps")
    return [str(g) for g in found] if isinstance(found, list) else []


def result_from_dict(data: Mapping[str, Any] | None) -> CheckResult | None:
    """A CheckResult from its JSON (`CheckResult.to_dict`); None if it is not one."""
    if data is None:
        return None
    try:
        return CheckResult(
            check=data["check"],
            passed=data["passed"],
            verdict=data["verdict"],
            score=data["score"],
            summary=data["summary"],
            findings=[Finding(**f) for f in data.get("findings", [])],
            metadata=dict(data.get("metadata") or {}),
        )
    except (KeyError, TypeError, ValueError):
        return None
