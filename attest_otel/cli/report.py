"""`attest-otel report`: pass rates, problems and the worst runs of a window of stored grades,
as text, JSON or one HTML page, and a CI gate on the pass rate."""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import click

from attest_otel.cli.common import config_option
from attest_otel.cli.sources import DEFAULT_SOURCE, Duration, Rate, open_source
from attest_otel.errors import UsageError


@click.command()
@config_option
@click.option(
    "--since",
    "since_s",
    type=Duration(),
    default="24h",
    show_default=True,
    metavar="DURATION",
    help="Window of grades to report on (30m, 24h, 7d, 2w).",
)
@click.option(
    "--from",
    "source",
    default=DEFAULT_SOURCE,
    show_default=True,
    metavar="store:[PATH|URL]",
    help="The sidecars' store to read grades from: a SQLite file, or the fleet's "
    "store:postgresql://USER:PASSWORD@HOST/DB.",
)
@click.option(
    "--limit", default=10, show_default=True, type=click.IntRange(min=1), help="Rows in each table."
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@click.option(
    "--fail-under",
    type=Rate(),
    metavar="RATE",
    help="Exit 1 when the pass rate of all runs is below RATE (0.9 or 90%).",
)
@click.option(
    "--agent-fail-under",
    type=Rate(),
    metavar="RATE",
    help="Exit 1 when any agent's pass rate is below RATE.",
)
@click.option(
    "--html",
    "html_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write a self-contained HTML page (inline SVG, nothing fetched).",
)
@click.option(
    "--trace-url",
    metavar="TEMPLATE",
    help="Link the worst runs in --html to their traces, e.g. "
    "'http://jaeger:16686/trace/{trace_id}'.",
)
def report(
    since_s: float,
    source: str,
    limit: int,
    as_json: bool,
    fail_under: float | None,
    agent_fail_under: float | None,
    html_path: Path | None,
    trace_url: str | None,
) -> None:
    """How the agents did: pass rate per agent and per tool with 95% Wilson intervals, the
    most frequent problems, and the worst runs with their trace ids.

    \b
    As a CI gate: attest-otel report --since 1d --fail-under 95% --agent-fail-under 90%
    (exit 1 below the rate, exit 2 when the window has no graded run)."""
    from attest_otel.report import stats as reporting
    from attest_otel.report.text import render_text
    from attest_otel.sources.store_source import StoreSource, since_to_ns

    opened = open_source(source)
    if not isinstance(opened, StoreSource):
        raise UsageError(
            f"report reads grades from the store: --from store:[PATH|URL], not {source}"
        )
    if trace_url is not None and "{trace_id}" not in trace_url:
        raise UsageError(f"--trace-url {trace_url!r} has no {{trace_id}} to fill in")
    now = time.time_ns()
    since_ns = since_to_ns(since_s, now_ns=now)
    try:  # a fleet's store counts in SQL; the SQLite file's rows are counted here
        counted = opened.summary(since_ns, now, limit)
        if counted is not None:
            built = reporting.report_from_counts(
                counted, since_ns=since_ns, until_ns=now, limit=limit
            )
        else:
            records = [
                reporting.GradeRecord(r.trace_id, r.agent, r.graded_ns, r.result, r.span_id)
                for r in opened.grades_since(since_ns)
            ]
            built = reporting.build_report(records, since_ns=since_ns, until_ns=now, limit=limit)
    finally:
        opened.close()
    if html_path is not None:
        from attest_otel.report.html import render_html

        try:
            html_path.write_text(render_html(built, trace_url=trace_url), encoding="utf-8")
        except OSError as e:
            raise UsageError(f"--html {html_path}: {e.strerror or e}") from None
    if as_json:
        click.echo(json.dumps(built.to_dict(), indent=2, ensure_ascii=False))
    elif html_path is not None:  # the page is the report: say where it went, not both
        o = built.overall
        click.echo(
            f"report: wrote {html_path} ({o.passed}/{o.total} runs passed in the window)",
            err=True,
        )
    else:
        width = shutil.get_terminal_size().columns if sys.stdout.isatty() else 120
        click.echo(render_text(built, width=max(60, width), limit=limit))
    _gate(built, fail_under, agent_fail_under, source)


def _gate(built: Any, overall: float | None, per_agent: float | None, source: str) -> None:
    """`--fail-under` / `--agent-fail-under`: one line per rate below its bar, then exit 1."""
    from attest_otel.errors import InputError

    if overall is None and per_agent is None:
        return
    if not built.overall.total:
        raise InputError(source, "no graded runs in that window: nothing to hold to a rate")
    low = []
    if overall is not None and (built.overall.rate or 0.0) < overall:
        low.append(f"all runs {built.overall.rate:.1%} < {overall:.1%}")
    if per_agent is not None:
        low += [
            f"agent {r.name} {r.rate:.1%} < {per_agent:.1%}"
            for r in built.agents
            if r.rate is not None and r.rate < per_agent
        ]
    for line in low:
        click.echo(f"attest-otel: below the bar: {line}", err=True)
    if low:
        sys.exit(1)
