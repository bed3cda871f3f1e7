"""What every store is to its users, whichever database holds it.

The sidecar writes through a `Writer` and everything that reads (`store:` sources, `report`,
the Grader API, late-span regrading) asks a `Store`. SQLite (`sqlite.TraceStore`, one
machine, zero setup) and PostgreSQL (`postgres.PostgresStore`, one store for a fleet) both
are one, so `grade --trace-id`, `--since`, `report` and `inspect` do not know which they read.

`GradeSummary` is what `report` needs of a window of grades, already counted: a store that
can count in SQL answers with it (a million runs in well under a second), and `report`
turns it into the same `Report` it builds from grade rows in Python. `grade_facts` is the one
reading of a stored `CheckResult` both sides count from, so the two cannot disagree.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit

from attest_otel.store.records import StoredGrade, StoredTrace

__all__ = [
    "URL_SCHEMES",
    "CallCount",
    "GradeFacts",
    "GradeSummary",
    "ReviewRow",
    "Store",
    "WorstRow",
    "Writer",
    "grade_facts",
    "is_url",
    "part_digest",
    "redact",
    "review_reasons",
    "url_problem",
]


URL_SCHEMES = ("postgresql", "postgres")


def is_url(target: object) -> bool:
    """Whether `target` names a database server (`postgresql://...`), not a file."""
    if not isinstance(target, str) or "://" not in target:
        return False
    return target.split("://", 1)[0].lower() in URL_SCHEMES


def url_problem(url: str) -> str | None:
    """What is wrong with a store URL, in words, or None."""
    if not is_url(url):
        return "expected postgresql://USER:PASSWORD@HOST[:PORT]/DATABASE"
    parts = urlsplit(url)
    try:
        parts.port  # noqa: B018 (parsing it is the check)
    except ValueError as e:
        return f"bad port: {e}"
    if not parts.hostname:
        return "no host (postgresql://USER:PASSWORD@HOST[:PORT]/DATABASE)"
    return None


def redact(target: object) -> str:
    """`target` as logs and messages may show it: a URL without its password (also after a
    `store:` prefix); a path as it is."""
    text = str(target)
    if text.startswith("store:"):
        return "store:" + redact(text[len("store:") :])
    if "://" not in text:
        return text
    parts = urlsplit(text)
    try:
        password, port = parts.password, parts.port
    except ValueError:  # a port that is not a number: show no more than the scheme
        return f"{parts.scheme}://***"
    if password is None:
        return text
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{parts.username or ''}:***@{host}" + (f":{port}" if port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def part_digest(data: bytes) -> str:
    """The identity of one stored part of a trace (the OTLP bytes one grading wrote): the
    same spans written twice (a replay after a crash, two sidecars) are stored once."""
    return hashlib.sha256(data).hexdigest()[:32]


class Store(Protocol):
    """The questions every store answers (see `sqlite.TraceStore` for each one's meaning)."""

    @property
    def location(self) -> str: ...

    def get_trace(self, trace_id: str) -> StoredTrace | None: ...

    def trace_ids_since(self, since_ns: int) -> list[str]: ...

    def grades_since(self, since_ns: int | None = None) -> list[StoredGrade]: ...

    def trace_ids(self, limit: int = 100) -> list[str]: ...

    def stats(self) -> tuple[int, int]: ...

    def prune(self, *, now_ns: int | None = None) -> int: ...

    def close(self) -> None: ...


class Writer(Protocol):
    """How the sidecar stores a graded trace: `put` never blocks grading or forwarding."""

    @property
    def store(self) -> Store: ...

    def start(self) -> None: ...

    def put(
        self,
        trace_id: str,
        data: bytes,
        span_count: int,
        grades: Sequence[StoredGrade] = (),
        *,
        basis: Sequence[str] | None = None,
        runs: Sequence[str] | None = None,
    ) -> None: ...

    def flush(self, timeout_s: float = 5.0) -> bool: ...

    def close(self, timeout_s: float = 5.0) -> None: ...


# --- what report counts ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CallCount:
    """Calls of one run to one tool with one verdict (a row of the report's tallies)."""

    tool: str
    verdict: str
    severity: str
    calls: int
    tool_first: bool
    """The first row of this run for this tool: counts the run once for the tool."""
    tool_failed: bool
    """Any call of this run to this tool failed (the run fails the tool)."""


@dataclass(frozen=True, slots=True)
class GradeFacts:
    passed: bool
    verdict: str
    score: float
    failed_calls: int
    calls: tuple[CallCount, ...]
    recoveries: tuple[tuple[str, int], ...]


def grade_facts(result: Mapping[str, Any]) -> GradeFacts:
    """A `CheckResult` dict read the way `report` reads it (the same `or` defaults)."""
    findings = [f for f in (result.get("findings") or []) if isinstance(f, Mapping)]
    groups: dict[tuple[str, str, str], int] = {}
    failed_tools: set[str] = set()
    recoveries: dict[str, int] = {}
    failed = 0
    for finding in findings:
        tool = str(finding.get("subject") or "")
        verdict = str(finding.get("verdict") or "")
        severity = str(finding.get("severity") or "")
        key = (tool, verdict, severity)
        groups[key] = groups.get(key, 0) + 1
        if severity == "fail":
            failed += 1
            failed_tools.add(tool)
        meta = finding.get("metadata")
        recovery = meta.get("recovery") if isinstance(meta, Mapping) else None
        if recovery:
            recoveries[str(recovery)] = recoveries.get(str(recovery), 0) + 1
    seen: set[str] = set()
    calls = []
    for (tool, verdict, severity), n in groups.items():
        calls.append(CallCount(tool, verdict, severity, n, tool not in seen, tool in failed_tools))
        seen.add(tool)
    return GradeFacts(
        passed=bool(result.get("passed")),
        verdict=str(result.get("verdict") or ""),
        score=float(result.get("score") or 0.0),
        failed_calls=failed,
        calls=tuple(calls),
        recoveries=tuple(recoveries.items()),
    )


@dataclass(frozen=True, slots=True)
class WorstRow:
    trace_id: str
    span_id: str
    agent: str | None
    graded_ns: int
    score: float
    verdict: str
    failed_calls: int
    summary: str


@dataclass(frozen=True, slots=True)
class ReviewRow:
    """A run graded `review`, as the report lists it apart: why, in the grade's own words."""

    trace_id: str
    span_id: str
    agent: str | None
    graded_ns: int
    unread: bool
    """The run could not be read whole (its grade names gaps), rather than a check failed."""
    reasons: tuple[str, ...]


def review_reasons(result: Mapping[str, Any]) -> tuple[bool, tuple[str, ...]]:
    """(whether the run was not read whole, why it is `review`) from a stored `CheckResult`:
    its gaps (docs/rules.md, point 13), else its warning findings' reasons."""
    meta = result.get("metadata")
    gaps = meta.get("gaps") if isinstance(meta, Mapping) else None
    if isinstance(gaps, list) and gaps:
        return True, tuple(str(g) for g in gaps)
    findings = [f for f in (result.get("findings") or []) if isinstance(f, Mapping)]
    return False, tuple(str(f.get("reason") or "") for f in findings if f.get("severity") == "warn")


@dataclass(frozen=True, slots=True)
class GradeSummary:
    """A window of grades, counted by the store (see the module docstring)."""

    agents: list[tuple[str | None, int, int]] = field(default_factory=list)
    """(agent, runs passed, runs); None and "" are both "no agent"."""
    calls: list[tuple[str, str, str, int, int, int, int]] = field(default_factory=list)
    """(tool, verdict, severity, calls, runs with such calls, runs calling the tool counted
    here, of those the runs where none of the tool's calls failed)."""
    examples: dict[tuple[str, str], str] = field(default_factory=dict)
    """(verdict, tool) -> the latest trace id with such a call that did not pass."""
    recoveries: list[tuple[str, int]] = field(default_factory=list)
    hours: list[tuple[int, int, int]] = field(default_factory=list)
    """(hour since the epoch, runs passed, runs), for the report's pass rate over time."""
    worst: list[WorstRow] = field(default_factory=list)
    review: int = 0
    """Runs graded `review` in the window."""
    unread: int = 0
    """Of those, runs that could not be read whole."""
    reviews: list[ReviewRow] = field(default_factory=list)
    """The latest `review` runs, newest first."""
