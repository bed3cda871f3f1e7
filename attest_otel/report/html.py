"""`attest-otel report --html FILE`: the report as one page for teams without Grafana.

One file that can be mailed, attached to a CI run or opened from disk: the styles and the
charts (inline SVG, drawn here, no script) are inside it, and its Content-Security-Policy
forbids every fetch, so opening it offline or behind a proxy shows the same page and tells
no one it was opened. The only URLs are the links of the worst runs to their traces
(`--trace-url`), which are followed only when clicked.

Why SVG drawn by hand: a chart library would be a script to inline (hundreds of KiB) or to
fetch (the network this page must not need), and the three charts are bars.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape
from urllib.parse import quote

from attest_otel.model import shown_score
from attest_otel.report.stats import (
    HOUR_NS,
    NO_AGENT,
    Bucket,
    Rate,
    Report,
    WorstRun,
    coarsen,
    iso_time,
    percent,
)

__all__ = ["CSP", "render_html"]

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'"
"""Nothing may be loaded: no script, font, image or style from anywhere."""

_VERDICT_COLOUR = {
    "correct": "#2e7d32",
    "review": "#f9a825",
    "incorrect": "#ef6c00",
    "disallowed_tool": "#6a1b9a",
    "error_silent": "#c62828",
    "error_claimed_success": "#880e4f",
}
_RECOVERY_COLOUR = {
    "retried": "#2e7d32",
    "fallback": "#558b2f",
    "acknowledged": "#9e9d24",
    "unchecked": "#757575",
    "silent": "#c62828",
    "claimed_success": "#880e4f",
}
_OTHER = "#455a64"

_STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:2em auto;max-width:70em;padding:0 1em;color:#222}
h1{font-size:1.4em}h2{font-size:1.1em;margin-top:2em}
table{border-collapse:collapse;margin:.5em 0}td,th{padding:.2em .8em;text-align:left}
th{border-bottom:1px solid #999}td.n{text-align:right;font-variant-numeric:tabular-nums}
svg text{font:12px system-ui,sans-serif}.legend span{display:inline-block;margin-right:1em}
.legend i{display:inline-block;width:.8em;height:.8em;margin-right:.3em}
.summary{color:#555;max-width:40em}
"""

_LABEL_W = 180
_BAR_W = 480
_ROW_H = 22


def _svg(chart_id: str, title: str, rows: int, body: list[str]) -> str:
    height = max(1, rows) * _ROW_H + 24
    width = _LABEL_W + _BAR_W + 120
    return (
        f'<svg id="{chart_id}" class="chart" xmlns="http://www.w3.org/2000/svg" '
        f'width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="{escape(title)}"><title>{escape(title)}</title>'
        + "".join(body)
        + _axis(rows)
        + "</svg>"
    )


def _axis(rows: int) -> str:
    y = rows * _ROW_H + 4
    ticks = []
    for i in range(5):
        x = _LABEL_W + _BAR_W * i / 4
        ticks.append(
            f'<line x1="{x:.1f}" y1="0" x2="{x:.1f}" y2="{y}" stroke="#ddd"/>'
            f'<text x="{x:.1f}" y="{y + 14}" text-anchor="middle">{i * 25}%</text>'
        )
    return "".join(ticks)


def _label(i: int, text: str) -> str:
    y = i * _ROW_H + 15
    short = text if len(text) <= 26 else text[:25] + "…"
    return (
        f'<text x="{_LABEL_W - 6}" y="{y}" text-anchor="end">'
        f"<title>{escape(text)}</title>{escape(short)}</text>"
    )


def rate_chart(rates: Sequence[Rate]) -> str:
    """Pass rate per agent as a bar, its 95% Wilson interval as a whisker over it."""
    body = []
    for i, r in enumerate(rates):
        y = i * _ROW_H
        body.append(_label(i, r.name))
        w = _BAR_W * (r.rate or 0.0)
        body.append(
            f'<rect class="bar" x="{_LABEL_W}" y="{y + 4}" width="{w:.1f}" height="14" '
            f'fill="#1565c0"><title>{escape(r.name)}: {r.passed}/{r.total} passed, '
            f"{percent(r.rate)} (95% CI {percent(r.low)} - {percent(r.high)})</title></rect>"
        )
        if r.low is not None and r.high is not None:
            x1, x2 = _LABEL_W + _BAR_W * r.low, _LABEL_W + _BAR_W * r.high
            mid = y + 11
            body.append(
                f'<path class="interval" d="M{x1:.1f} {mid - 5}v10M{x1:.1f} {mid}H{x2:.1f}'
                f'M{x2:.1f} {mid - 5}v10" stroke="#000" fill="none"/>'
            )
        body.append(
            f'<text x="{_LABEL_W + _BAR_W + 8}" y="{y + 15}">{percent(r.rate)} '
            f"({r.passed}/{r.total})</text>"
        )
    return _svg(
        "chart-agents", "Pass rate per agent with its 95% Wilson interval", len(rates), body
    )


_TIME_H = 120


def timeline_chart(hours: Sequence[Bucket]) -> str:
    """Pass rate per hour (per day past three days) as columns, so a step down after a
    deploy shows; a column's tooltip gives its runs."""
    buckets = coarsen(hours)
    per_day = len(buckets) != len(hours) or (
        len(buckets) > 1 and buckets[1].start_ns - buckets[0].start_ns >= 24 * HOUR_NS
    )
    width = _LABEL_W + _BAR_W + 120
    step = _BAR_W / max(1, len(buckets))
    body = []
    for pct in (0, 50, 100):
        y = 4 + _TIME_H * (1 - pct / 100)
        body.append(
            f'<line x1="{_LABEL_W}" y1="{y:.1f}" x2="{_LABEL_W + _BAR_W}" y2="{y:.1f}" '
            f'stroke="#ddd"/><text x="{_LABEL_W - 6}" y="{y + 4:.1f}" '
            f'text-anchor="end">{pct}%</text>'
        )
    for i, b in enumerate(buckets):
        h = _TIME_H * b.rate
        x = _LABEL_W + i * step
        when = iso_time(b.start_ns)[: 10 if per_day else 13] + ("" if per_day else "h")
        body.append(
            f'<rect class="bucket" x="{x + 1:.1f}" y="{4 + _TIME_H - h:.1f}" '
            f'width="{max(1.0, step - 2):.1f}" height="{h:.1f}" fill="#1565c0">'
            f"<title>{escape(when)}: {b.passed}/{b.total} passed, {percent(b.rate)}</title></rect>"
        )
    first = iso_time(buckets[0].start_ns)[:16] if buckets else ""
    last = iso_time(buckets[-1].start_ns)[:16] if buckets else ""
    body.append(
        f'<text x="{_LABEL_W}" y="{_TIME_H + 22}">{escape(first)}</text>'
        f'<text x="{_LABEL_W + _BAR_W}" y="{_TIME_H + 22}" text-anchor="end">{escape(last)}</text>'
    )
    unit = "day" if per_day else "hour"
    title = f"Pass rate per {unit}"
    height = _TIME_H + 30
    return (
        f'<svg id="chart-time" class="chart" xmlns="http://www.w3.org/2000/svg" '
        f'width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="{title}"><title>{title}</title>' + "".join(body) + "</svg>"
    )


def _stacked(
    chart_id: str, title: str, rows: Mapping[str, Mapping[str, int]], colours: Mapping[str, str]
) -> str:
    body = []
    for i, (name, counts) in enumerate(rows.items()):
        y = i * _ROW_H
        total = sum(counts.values()) or 1
        body.append(_label(i, name))
        x = float(_LABEL_W)
        for key in [*colours, *sorted(k for k in counts if k not in colours)]:
            n = counts.get(key, 0)
            if not n:
                continue
            w = _BAR_W * n / total
            body.append(
                f'<rect class="bar" x="{x:.1f}" y="{y + 4}" width="{w:.1f}" height="14" '
                f'fill="{colours.get(key, _OTHER)}"><title>{escape(name)}: '
                f"{escape(key)} {n}</title></rect>"
            )
            x += w
        body.append(f'<text x="{_LABEL_W + _BAR_W + 8}" y="{y + 15}">{sum(counts.values())}</text>')
    return _svg(chart_id, title, len(rows), body)


def _legend(keys: Sequence[str], colours: Mapping[str, str]) -> str:
    return (
        '<p class="legend">'
        + "".join(
            f'<span><i style="background:{colours.get(k, _OTHER)}"></i>{escape(k)}</span>'
            for k in keys
        )
        + "</p>"
    )


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], numeric: Sequence[bool]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join(
        "<tr>"
        + "".join(
            f'<td class="n">{c}</td>' if n else f"<td>{c}</td>"
            for c, n in zip(row, numeric, strict=True)
        )
        + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _trace_link(w: WorstRun, trace_url: str | None) -> str:
    text = escape(w.trace_id)
    if not trace_url:
        return f"<code>{text}</code>"
    href = trace_url.replace("{trace_id}", quote(w.trace_id, safe=""))
    href = href.replace("{span_id}", quote(w.span_id, safe=""))
    return f'<a href="{escape(href, quote=True)}"><code>{text}</code></a>'


def render_html(report: Report, *, trace_url: str | None = None) -> str:
    """The whole page. `trace_url` has `{trace_id}` (and optionally `{span_id}`)."""
    o = report.overall
    window = (
        f"since {iso_time(report.since_ns)}" if report.since_ns is not None else "all stored grades"
    )
    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        "<title>attest-otel: agent tool use</title>",
        f"<style>{_STYLE}</style></head><body>",
        "<h1>Tool use of graded agent runs</h1>",
        f"<p>{escape(window)} until {escape(iso_time(report.until_ns))}</p>",
    ]
    if not o.total:
        parts.append("<p>No graded runs in this window.</p></body></html>")
        return "\n".join(parts)
    parts.append(
        f'<p id="overall">Runs passed: <b>{o.passed}/{o.total} = {percent(o.rate)}</b> '
        f"(95% CI {percent(o.low)} - {percent(o.high)})</p>"
    )
    if report.by_hour:
        parts += [
            "<h2>Pass rate over time</h2>",
            "<p>Share of runs that passed in each hour of the window (each day, for a window "
            "of more than three days); hours with no graded run are left out.</p>",
            timeline_chart(report.by_hour),
        ]
    parts += [
        "<h2>Pass rate per agent</h2>",
        "<p>The bar is the share of runs that passed; the whisker is its 95% Wilson "
        "interval, wide when there were few runs.</p>",
        rate_chart(report.agents),
    ]
    if report.verdicts_by_tool:
        seen = sorted(
            {k for c in report.verdicts_by_tool.values() for k in c},
            key=lambda k: (list(_VERDICT_COLOUR).index(k) if k in _VERDICT_COLOUR else 99, k),
        )
        parts += [
            "<h2>Verdicts by tool</h2>",
            _legend(seen, _VERDICT_COLOUR),
            _stacked(
                "chart-verdicts",
                "Tool calls per tool, by verdict",
                report.verdicts_by_tool,
                _VERDICT_COLOUR,
            ),
        ]
    if report.errors_by_recovery:
        rows = {k: {k: n} for k, n in report.errors_by_recovery.items()}
        parts += [
            "<h2>Errors by how they were handled</h2>",
            "<p>Tool calls that returned an error: recovered by a retry or a fallback, "
            "acknowledged in the answer, or not handled.</p>",
            _errors_chart(rows),
        ]
    if report.problems:
        parts += [
            "<h2>Most frequent problems</h2>",
            _table(
                ["calls", "runs", "verdict", "tool", "latest trace"],
                [
                    [
                        str(p.count),
                        str(p.runs),
                        escape(p.verdict),
                        escape(p.tool),
                        f"<code>{escape(p.example_trace_id)}</code>",
                    ]
                    for p in report.problems
                ],
                [True, True, False, False, False],
            ),
        ]
    if report.worst:
        parts += [
            "<h2>Worst runs</h2>",
            _table(
                ["score", "verdict", "failed calls", "agent", "trace", "summary"],
                [
                    [
                        f"{shown_score(w.score):.2f}",
                        escape(w.verdict),
                        str(w.failed_calls),
                        escape(w.agent or NO_AGENT),
                        _trace_link(w, trace_url),
                        f'<span class="summary">{escape(w.summary)}</span>',
                    ]
                    for w in report.worst
                ],
                [True, False, True, False, False, False],
            ),
        ]
    parts.append("</body></html>")
    return "\n".join(parts)


def _errors_chart(rows: Mapping[str, Mapping[str, int]]) -> str:
    """One bar per way of handling, scaled to the most frequent (not stacked to 100%)."""
    top = max((sum(c.values()) for c in rows.values()), default=1) or 1
    body = []
    for i, (name, counts) in enumerate(rows.items()):
        n = sum(counts.values())
        y = i * _ROW_H
        body.append(_label(i, name))
        body.append(
            f'<rect class="bar" x="{_LABEL_W}" y="{y + 4}" '
            f'width="{_BAR_W * n / top:.1f}" height="14" '
            f'fill="{_RECOVERY_COLOUR.get(name, _OTHER)}"><title>{escape(name)}: {n}'
            "</title></rect>"
        )
        body.append(f'<text x="{_LABEL_W + _BAR_W + 8}" y="{y + 15}">{n}</text>')
    height = max(1, len(rows)) * _ROW_H + 8
    width = _LABEL_W + _BAR_W + 120
    return (
        f'<svg id="chart-errors" class="chart" xmlns="http://www.w3.org/2000/svg" '
        f'width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
        'aria-label="Errored tool calls by how they were handled">'
        "<title>Errored tool calls by how they were handled</title>" + "".join(body) + "</svg>"
    )
