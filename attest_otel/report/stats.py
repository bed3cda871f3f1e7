"""`attest-otel report`: how the agents did over a window, with honest error bars.

Pure functions over stored grades (one `CheckResult` JSON per run, with its agent, trace id
and time); `report.text` and `report.html` render what they build. No I/O here: the CLI
reads the store and prints.

Why Wilson intervals: a pass rate from 3 runs and one from 3,000 must not look alike. The
Wilson score interval stays inside [0, 1] and keeps sensible coverage at small counts and
at rates near 0 or 1, where the textbook "p ± 1.96·sqrt(p(1-p)/n)" collapses to a width of
zero (0/5 would claim certainty that the agent always fails).

Why tools are rated by runs and not by calls: calls of one run share a task, a model and
a context, so they are not independent trials, and counting them would make the interval
too narrow. For each tool, a run that called it counts once, as passed when none of that
tool's calls in the run failed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from statistics import NormalDist
from typing import Any

from attest_otel.store.base import WorstRow

__all__ = [
    "NO_AGENT",
    "GradeRecord",
    "Problem",
    "Rate",
    "Report",
    "WorstRun",
    "build_report",
    "errors_by_recovery",
    "iso_time",
    "pass_rates_by_agent",
    "pass_rates_by_tool",
    "percent",
    "report_from_counts",
    "top_problems",
    "verdicts_by_tool",
    "wilson_interval",
    "worst_runs",
]

NO_AGENT = "(no agent)"


def wilson_interval(
    successes: int, trials: int, confidence: float = 0.95
) -> tuple[float, float] | None:
    """The Wilson score interval of a proportion; None when there were no trials (0/0 says
    nothing, and an interval of [0, 1] would look like a measurement)."""
    if trials < 0 or successes < 0 or successes > trials:
        raise ValueError(f"need 0 <= successes <= trials, got {successes}/{trials}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence}")
    if trials == 0:
        return None
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    p = successes / trials
    z2n = z * z / trials
    centre = (p + z2n / 2) / (1 + z2n)
    half = z / (1 + z2n) * math.sqrt(p * (1 - p) / trials + z2n / (4 * trials))
    # Exact ends: floating error must not turn 10/10 into an upper bound of 0.9999999.
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == trials else min(1.0, centre + half)
    return low, high


@dataclass(frozen=True, slots=True)
class GradeRecord:
    """One graded run as the store keeps it."""

    trace_id: str
    agent: str | None
    graded_ns: int
    result: Mapping[str, Any]
    span_id: str = ""

    @property
    def passed(self) -> bool:
        return bool(self.result.get("passed"))

    @property
    def findings(self) -> list[Mapping[str, Any]]:
        found = self.result.get("findings") or []
        return [f for f in found if isinstance(f, Mapping)]


@dataclass(frozen=True, slots=True)
class Rate:
    """Runs passed out of runs, with the interval; `calls`/`failed_calls` for tools only."""

    name: str
    passed: int
    total: int
    low: float | None
    high: float | None
    calls: int | None = None
    failed_calls: int | None = None

    @property
    def rate(self) -> float | None:
        return self.passed / self.total if self.total else None


def _rate(name: str, passed: int, total: int, **extra: int) -> Rate:
    interval = wilson_interval(passed, total)
    low, high = interval if interval is not None else (None, None)
    return Rate(name, passed, total, low, high, **extra)


def _worst_first(rates: Iterable[Rate]) -> list[Rate]:
    """Lowest pass rate first; among equals, the one with more runs (the surer verdict)."""
    return sorted(rates, key=lambda r: (r.rate if r.rate is not None else 2.0, -r.total, r.name))


def pass_rates_by_agent(records: Iterable[GradeRecord]) -> list[Rate]:
    counts: dict[str, list[int]] = {}
    for record in records:
        c = counts.setdefault(record.agent or NO_AGENT, [0, 0])
        c[0] += record.passed
        c[1] += 1
    return _worst_first(_rate(name, p, n) for name, (p, n) in counts.items())


def pass_rates_by_tool(records: Iterable[GradeRecord]) -> list[Rate]:
    runs: dict[str, list[int]] = {}  # tool -> [runs passed, runs, calls, failed calls]
    for record in records:
        failed_here: dict[str, bool] = {}
        for finding in record.findings:
            tool = str(finding.get("subject") or "")
            failed = finding.get("severity") == "fail"
            failed_here[tool] = failed_here.get(tool, False) or failed
            c = runs.setdefault(tool, [0, 0, 0, 0])
            c[2] += 1
            c[3] += failed
        for tool, failed in failed_here.items():
            runs[tool][0] += not failed
            runs[tool][1] += 1
    return _worst_first(
        _rate(tool, p, n, calls=calls, failed_calls=bad)
        for tool, (p, n, calls, bad) in runs.items()
    )


@dataclass(frozen=True, slots=True)
class Problem:
    verdict: str
    tool: str
    count: int
    """Calls with this verdict on this tool."""
    runs: int
    """Distinct runs they came from."""
    example_trace_id: str
    """The most recent trace that shows it: the one to open first."""


def top_problems(records: Iterable[GradeRecord], limit: int = 10) -> list[Problem]:
    """(verdict, tool) pairs of calls that did not pass, most frequent first."""
    counts: dict[tuple[str, str], list[Any]] = {}
    for record in sorted(records, key=lambda r: r.graded_ns):
        seen: set[tuple[str, str]] = set()
        for finding in record.findings:
            if finding.get("severity") == "pass":
                continue
            key = (str(finding.get("verdict") or ""), str(finding.get("subject") or ""))
            c = counts.setdefault(key, [0, 0, ""])
            c[0] += 1
            if key not in seen:
                seen.add(key)
                c[1] += 1
            c[2] = record.trace_id
    problems = [Problem(v, t, n, runs, example) for (v, t), (n, runs, example) in counts.items()]
    problems.sort(key=lambda p: (-p.count, -p.runs, p.verdict, p.tool))
    return problems[:limit]


WorstRun = WorstRow
"""A run that did not pass, as the report lists it: the store's row, whichever counted it."""


def worst_runs(records: Iterable[GradeRecord], limit: int = 10) -> list[WorstRun]:
    """Runs that did not pass, lowest score first, then most failed calls, newest first."""
    out = []
    for record in records:
        if record.passed and record.result.get("verdict") == "pass":
            continue
        failed = sum(1 for f in record.findings if f.get("severity") == "fail")
        out.append(
            WorstRun(
                trace_id=record.trace_id,
                span_id=record.span_id,
                agent=record.agent,
                graded_ns=record.graded_ns,
                score=float(record.result.get("score") or 0.0),
                verdict=str(record.result.get("verdict") or ""),
                failed_calls=failed,
                summary=str(record.result.get("summary") or ""),
            )
        )
    out.sort(key=lambda w: (w.score, -w.failed_calls, -w.graded_ns, w.trace_id))
    return out[:limit]


HOUR_NS = 3600 * 10**9


@dataclass(frozen=True, slots=True)
class Bucket:
    """Runs graded in one hour (or day) of the window: a regression after a deploy shows
    as a step down from one bucket to the next."""

    start_ns: int
    passed: int
    total: int

    @property
    def rate(self) -> float:
        return self.passed / self.total if self.total else 0.0


def pass_rate_by_hour(records: Iterable[GradeRecord]) -> list[Bucket]:
    counts: dict[int, list[int]] = {}
    for r in records:
        c = counts.setdefault(r.graded_ns // HOUR_NS, [0, 0])
        c[0] += r.passed
        c[1] += 1
    return [Bucket(h * HOUR_NS, p, n) for h, (p, n) in sorted(counts.items())]


def coarsen(buckets: Sequence[Bucket], most: int = 72) -> list[Bucket]:
    """Hours as days when there are more than `most` of them, so a week stays readable."""
    if len(buckets) <= most:
        return list(buckets)
    day = 24 * HOUR_NS
    days: dict[int, list[int]] = {}
    for b in buckets:
        c = days.setdefault(b.start_ns // day, [0, 0])
        c[0] += b.passed
        c[1] += b.total
    return [Bucket(d * day, p, n) for d, (p, n) in sorted(days.items())]


@dataclass(frozen=True, slots=True)
class Report:
    since_ns: int | None
    until_ns: int
    overall: Rate
    agents: list[Rate] = field(default_factory=list)
    tools: list[Rate] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    worst: list[WorstRun] = field(default_factory=list)
    verdicts_by_tool: dict[str, dict[str, int]] = field(default_factory=dict)
    """Tool -> verdict -> calls, for the HTML page's stacked bars."""
    errors_by_recovery: dict[str, int] = field(default_factory=dict)
    by_hour: list[Bucket] = field(default_factory=list)
    """Runs passed per hour of the window, hours with no run left out."""
    """Calls that errored, by how the agent handled them (`attest.recovery`)."""

    def to_dict(self) -> dict[str, Any]:
        def rate(r: Rate) -> dict[str, Any]:
            out = asdict(r)
            out["rate"] = r.rate
            out["interval"] = None if r.low is None else [r.low, r.high]
            del out["low"], out["high"]
            if r.calls is None:
                del out["calls"], out["failed_calls"]
            return out

        return {
            "since": iso_time(self.since_ns) if self.since_ns is not None else None,
            "until": iso_time(self.until_ns),
            "confidence": 0.95,
            "runs": rate(self.overall),
            "agents": [rate(r) for r in self.agents],
            "tools": [rate(r) for r in self.tools],
            "problems": [asdict(p) for p in self.problems],
            "worst_runs": [{**asdict(w), "graded_at": iso_time(w.graded_ns)} for w in self.worst],
            "verdicts_by_tool": self.verdicts_by_tool,
            "errors_by_recovery": self.errors_by_recovery,
            "by_hour": [
                {"start": iso_time(b.start_ns), "passed": b.passed, "runs": b.total}
                for b in self.by_hour
            ],
        }


def verdicts_by_tool(records: Iterable[GradeRecord]) -> dict[str, dict[str, int]]:
    """Calls per tool and verdict, tools with the most failing calls first."""
    counts: dict[str, dict[str, int]] = {}
    for record in records:
        for finding in record.findings:
            by = counts.setdefault(str(finding.get("subject") or ""), {})
            verdict = str(finding.get("verdict") or "")
            by[verdict] = by.get(verdict, 0) + 1
    order = sorted(
        counts,
        key=lambda t: (
            -(sum(counts[t].values()) - counts[t].get("correct", 0)),
            -sum(counts[t].values()),
            t,
        ),
    )
    return {tool: counts[tool] for tool in order}


def errors_by_recovery(records: Iterable[GradeRecord]) -> dict[str, int]:
    """Errored calls by how they were handled, most frequent first."""
    counts: dict[str, int] = {}
    for record in records:
        for finding in record.findings:
            meta = finding.get("metadata")
            recovery = meta.get("recovery") if isinstance(meta, Mapping) else None
            if recovery:
                counts[str(recovery)] = counts.get(str(recovery), 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def build_report(
    records: Sequence[GradeRecord],
    *,
    since_ns: int | None,
    until_ns: int,
    limit: int = 10,
) -> Report:
    """Everything `report` shows, for the records inside [since_ns, until_ns]."""
    kept = [
        r
        for r in records
        if (since_ns is None or r.graded_ns >= since_ns) and r.graded_ns <= until_ns
    ]
    passed = sum(r.passed for r in kept)
    return Report(
        since_ns=since_ns,
        until_ns=until_ns,
        overall=_rate("all runs", passed, len(kept)),
        agents=pass_rates_by_agent(kept),
        tools=pass_rates_by_tool(kept),
        problems=top_problems(kept, limit),
        worst=worst_runs(kept, limit),
        verdicts_by_tool=verdicts_by_tool(kept),
        errors_by_recovery=errors_by_recovery(kept),
        by_hour=pass_rate_by_hour(kept),
    )


def report_from_counts(
    counts: Any,
    *,
    since_ns: int | None,
    until_ns: int,
    limit: int = 10,
) -> Report:
    """`build_report` from what a store counted itself (a `store.GradeSummary`), for a
    store too large to read row by row: the same `Report`, field for field (a test holds
    the two equal), ordered by the same rules."""
    by_agent: dict[str, list[int]] = {}
    for agent, passed, total in counts.agents:
        c = by_agent.setdefault(agent or NO_AGENT, [0, 0])
        c[0] += passed
        c[1] += total
    tools: dict[str, list[int]] = {}
    verdicts: dict[str, dict[str, int]] = {}
    problems: dict[tuple[str, str], list[int]] = {}
    for tool, verdict, severity, calls, runs, tool_runs, tool_passed in counts.calls:
        c = tools.setdefault(tool, [0, 0, 0, 0])
        c[0] += tool_passed
        c[1] += tool_runs
        c[2] += calls
        c[3] += calls if severity == "fail" else 0
        by = verdicts.setdefault(tool, {})
        by[verdict] = by.get(verdict, 0) + calls
        if severity != "pass":
            p = problems.setdefault((verdict, tool), [0, 0])
            p[0] += calls
            p[1] += runs
    found = [
        Problem(v, t, n, runs, counts.examples.get((v, t), ""))
        for (v, t), (n, runs) in problems.items()
    ]
    found.sort(key=lambda p: (-p.count, -p.runs, p.verdict, p.tool))
    order = sorted(
        verdicts,
        key=lambda t: (
            -(sum(verdicts[t].values()) - verdicts[t].get("correct", 0)),
            -sum(verdicts[t].values()),
            t,
        ),
    )
    passed = sum(p for p, _ in by_agent.values())
    total = sum(n for _, n in by_agent.values())
    return Report(
        since_ns=since_ns,
        until_ns=until_ns,
        overall=_rate("all runs", passed, total),
        agents=_worst_first(_rate(name, p, n) for name, (p, n) in by_agent.items()),
        tools=_worst_first(
            _rate(tool, p, n, calls=calls, failed_calls=bad)
            for tool, (p, n, calls, bad) in tools.items()
        ),
        problems=found[:limit],
        worst=list(counts.worst[:limit]),
        verdicts_by_tool={tool: verdicts[tool] for tool in order},
        errors_by_recovery=dict(sorted(counts.recoveries, key=lambda kv: (-kv[1], kv[0]))),
        by_hour=[Bucket(h * HOUR_NS, p, n) for h, p, n in sorted(counts.hours)],
    )


# -- text -----------------------------------------------------------------------------------


def iso_time(ns: int) -> str:
    """A report's moments in UTC, the same in text and HTML."""
    return datetime.fromtimestamp(ns / 1e9, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def percent(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"
