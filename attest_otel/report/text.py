"""The report as plain text for a terminal: fixed-width tables, worst first."""

from __future__ import annotations

from collections.abc import Sequence

from attest_otel.model import shown_score
from attest_otel.plumbing.terminal import printable
from attest_otel.report.stats import NO_AGENT, Rate, Report, iso_time, percent, review_headline

__all__ = ["render_text", "table"]


def _interval(r: Rate) -> str:
    return "-" if r.low is None or r.high is None else f"{percent(r.low)} - {percent(r.high)}"


def _clip(text: str, width: int) -> str:
    text = printable(" ".join(text.split()), newlines=False)
    return text if len(text) <= width else text[: max(0, width - 3)] + "..."


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[bool]) -> str:
    """Columns padded to their widest cell; `right` aligns numbers to the right."""
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]

    def line(cells: Sequence[str]) -> str:
        parts = [
            c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, right, strict=True)
        ]
        return "  ".join(parts).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *map(line, rows)])


def _rate_rows(rates: Sequence[Rate], width: int) -> list[list[str]]:
    return [
        [_clip(r.name, width), str(r.total), str(r.passed), percent(r.rate), _interval(r)]
        for r in rates
    ]


def review_lines(report: Report, width: int, limit: int) -> list[str]:
    if not report.review:
        return []
    lines = ["", review_headline(report)]
    if report.reviews:
        reason_w = max(20, width - 32 - 20 - 2 * 2)
        lines.append(
            table(
                ["trace id", "agent", "why"],
                [
                    [
                        r.trace_id,
                        _clip(r.agent or NO_AGENT, 20),
                        _clip(" ".join(r.reasons), reason_w),
                    ]
                    for r in report.reviews[:limit]
                ],
                [False, False, False],
            )
        )
    return lines


def render_text(report: Report, *, width: int = 100, limit: int = 10) -> str:
    """The short plain-text report for a terminal; agent and tool names and summaries are
    the senders' text, so control characters in them are shown as escapes."""
    return printable(_render(report, width, limit))


def _render(report: Report, width: int, limit: int) -> str:
    o = report.overall
    window = (
        f"since {iso_time(report.since_ns)}" if report.since_ns is not None else "all stored grades"
    )
    lines = [f"Tool use of graded agent runs, {window} (until {iso_time(report.until_ns)})", ""]
    if not o.total:
        lines.append("No graded runs in this window.")
        return "\n".join(lines)
    lines.append(f"Runs passed: {o.passed}/{o.total} = {percent(o.rate)} (95% CI {_interval(o)})")
    lines += review_lines(report, width, limit)
    name_w = max(16, width // 3)
    lines += [
        "",
        "By agent, worst first",
        table(
            ["agent", "runs", "passed", "pass rate", "95% CI"],
            _rate_rows(report.agents[:limit], name_w),
            [False, True, True, True, False],
        ),
    ]
    if report.tools:
        rows = [
            [*row, str(r.calls), str(r.failed_calls)]
            for row, r in zip(_rate_rows(report.tools[:limit], name_w), report.tools, strict=False)
        ]
        lines += [
            "",
            "By tool, worst first (runs that called it; passed: none of its calls failed)",
            table(
                ["tool", "runs", "passed", "pass rate", "95% CI", "calls", "failed"],
                rows,
                [False, True, True, True, False, True, True],
            ),
        ]
    if report.problems:
        lines += [
            "",
            "Most frequent problems",
            table(
                ["calls", "runs", "verdict", "tool", "latest trace"],
                [
                    [
                        str(p.count),
                        str(p.runs),
                        p.verdict,
                        _clip(p.tool, name_w),
                        p.example_trace_id,
                    ]
                    for p in report.problems[:limit]
                ],
                [True, True, False, False, False],
            ),
        ]
    if report.worst:
        fixed = 6 + 8 + 7 + 32 + 20 + 5 * 2
        summary_w = max(20, width - fixed)
        lines += [
            "",
            "Worst runs",
            table(
                ["score", "verdict", "failed", "trace id", "agent", "summary"],
                [
                    [
                        f"{shown_score(w.score):.2f}",
                        w.verdict,
                        str(w.failed_calls),
                        w.trace_id,
                        _clip(w.agent or NO_AGENT, 20),
                        _clip(w.summary, summary_w),
                    ]
                    for w in report.worst[:limit]
                ],
                [True, False, True, False, False, False],
            ),
        ]
    return "\n".join(lines)
