"""`attest-otel grade`: the runs of OTLP traces, from a file or a trace source, graded."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from attest_otel.cli.common import (
    Warnings,
    budget_option,
    config_option,
    exit_for,
    json_option,
    model_options,
    status,
    strict_option,
)
from attest_otel.cli.sources import trace_source_options
from attest_otel.errors import InputError, UsageError

if TYPE_CHECKING:
    from attest_otel.pipeline import GradedTrace


def _unused_policy_agents(policy: Any, traces: Sequence[Any], warn: Warnings) -> None:
    for line in policy.unused(run.agent for trace in traces for run in trace.runs if run.agent):
        warn(line)


def _split_tools(ctx: click.Context, param: click.Parameter, value: str | None) -> list[str] | None:
    if value is None:
        return None
    return [t.strip() for t in value.split(",") if t.strip()]


def _parse_fallbacks(
    ctx: click.Context, param: click.Parameter, values: tuple[str, ...]
) -> dict[str, list[str]]:
    fallbacks: dict[str, list[str]] = {}
    for value in values:
        tool, sep, alt = value.partition("=")
        if not sep or not tool.strip() or not alt.strip():
            raise click.BadParameter(f"expected TOOL=ALTERNATIVE, got {value!r}")
        fallbacks.setdefault(tool.strip(), []).append(alt.strip())
    return fallbacks


@click.command()
@click.option(
    "--file",
    "file",
    type=click.Path(path_type=Path),
    help="An OTLP file (protobuf, JSON, JSON lines; gzip ok).",
)
@click.option("--trace-id", help="Grade one trace by id, from --from (default: the store).")
@trace_source_options
@config_option
@click.option(
    "--store",
    "store",
    metavar="PATH|URL",
    help="The sidecar's store to read --trace-id from (same as --from store:PATH); a "
    "fleet's is postgresql://USER:PASSWORD@HOST/DB.",
)
@click.option(
    "--policy",
    type=click.Path(path_type=Path),
    help="Policy YAML: allowed tools and fallbacks per agent.",
)
@click.option(
    "--dialects",
    "dialect_files",
    multiple=True,
    type=click.Path(path_type=Path),
    help="YAML file of declared dialects (`dialects:`), repeatable; asked before built-ins.",
)
@click.option(
    "--allowed-tools",
    callback=_split_tools,
    help="Allowed tools for every run: a,b,c (wins over the policy).",
)
@click.option(
    "--fallback",
    "fallbacks",
    multiple=True,
    callback=_parse_fallbacks,
    help="TOOL=ALTERNATIVE, repeatable.",
)
@model_options
@budget_option
@json_option
@strict_option
@click.option("--export", is_flag=True, help="Send grade spans, log events and metrics over OTLP.")
@click.option(
    "--otlp-endpoint",
    help="Where --export sends (default: the OTEL_EXPORTER_OTLP_* variables).",
)
@click.option("--no-grade-spans", is_flag=True, help="With --export: no attest.grade spans.")
@click.option("--no-log-events", is_flag=True, help="With --export: no log-based events.")
@click.option("--no-metrics", is_flag=True, help="With --export: no metrics.")
def grade(
    file: Path | None,
    trace_id: str | None,
    source: str,
    headers: tuple[str, ...],
    ca_file: Path | None,
    client_cert: Path | None,
    client_key: Path | None,
    insecure: bool,
    timeout_s: float,
    since_s: float | None,
    store: str | None,
    policy: Path | None,
    dialect_files: tuple[Path, ...],
    allowed_tools: list[str] | None,
    fallbacks: dict[str, list[str]],
    appropriate: bool,
    check_answer: bool,
    model: str | None,
    budget_s: float,
    as_json: bool,
    strict: bool,
    export: bool,
    otlp_endpoint: str | None,
    no_grade_spans: bool,
    no_log_events: bool,
    no_metrics: bool,
) -> None:
    """Grade every agent run of the traces in an OTLP file, or of one trace by id.

    \b
    attest-otel grade --file traces.json
    attest-otel grade --trace-id ID                      # from the sidecar's store
    attest-otel grade --trace-id ID --from jaeger:http://localhost:16686
    attest-otel grade --since 1h                         # every trace the store got in 1h
    """
    from attest_otel.grade import grader, llm
    from attest_otel.ingest.decode import decode_file
    from attest_otel.pipeline import Reading, grade_traces
    from attest_otel.policy import Policy, load_policy
    from attest_otel.sidecar.bounded import run_grader

    if file is not None and (trace_id is not None or since_s is not None):
        other = "--trace-id" if trace_id is not None else "--since"
        raise UsageError(
            f"--file and {other} exclude each other: grade a file, or traces from --from, not both"
        )
    if file is None and trace_id is None and since_s is None:
        raise UsageError("grade needs one of --file PATH, --trace-id ID or --since DURATION")
    warn = Warnings(strict)
    loaded = load_policy(policy) if policy is not None else Policy.empty()
    if dialect_files:
        import dataclasses

        from attest_otel.adapt.dialect_config import load_dialects

        extra = tuple(d for f in dialect_files for d in load_dialects(f))
        loaded = dataclasses.replace(loaded, dialects=loaded.dialects + extra)
    if appropriate or check_answer:
        judge = grader.judge_for_tool_use(asked=True, model=model)
    else:
        judge = llm.judge_from_env(model)
    given = (
        ("--policy", policy is not None),
        ("--dialects", bool(dialect_files)),
        ("--check-answer", check_answer),
        ("--appropriate", appropriate),
    )
    reading = Reading(
        loaded,
        allowed_tools,
        fallbacks or None,
        regrade=tuple(flag for flag, on in given if on),
    )
    # Each run within the budget, in a thread of its own: a model that never answers, or a
    # run that grades for ever, costs the budget (docs/hostile-input.md, "Grading budget").
    grade_run = run_grader(grader.grade, judge, appropriate, budget_s)
    graded: list[GradedTrace]
    if file is not None:
        with status(f"reading {file}"):
            decoded = decode_file(file)
        if not decoded.spans:
            raise InputError(str(file), "no spans to grade")
        with status(f"grading {len(decoded.spans)} spans"):
            graded = grade_traces(
                decoded.spans,
                decoded.logs,
                reading,
                judge=judge,
                appropriate=appropriate,
                grade_run=grade_run,
            )
        _unused_policy_agents(loaded, [g.trace for g in graded], warn)
        warn.check()
    else:
        from attest_otel.cli import sources as cli_sources

        http = cli_sources.http_options(
            headers,
            ca_file=ca_file,
            client_cert=client_cert,
            client_key=client_key,
            insecure=insecure,
            timeout_s=timeout_s,
        )
        graded = cli_sources.grade_from_source(
            trace_id=trace_id,
            since_s=since_s,
            source=f"store:{store}" if store is not None else source,
            http=http,
            reading=reading,
            judge=judge,
            appropriate=appropriate,
            grade_run=grade_run,
        )
        if not graded:
            from attest_otel.store import redact

            where = f"store:{redact(store)}" if store is not None else redact(source)
            raise InputError(where, "no traces in that window: nothing to grade")
        _unused_policy_agents(loaded, [g.trace for g in graded], warn)
        warn.check()
    if not any(g.trace.runs for g in graded):
        raise InputError(str(file) if file is not None else source, "no agent runs to grade")
    _print_traces(graded, as_json)
    if export:
        _export(
            graded,
            otlp_endpoint,
            spans=not no_grade_spans,
            logs=not no_log_events,
            metrics=not no_metrics,
        )
    exit_for([r for g in graded for r in g.results])


def _print_traces(graded: Sequence[GradedTrace], as_json: bool) -> None:
    from attest_otel.cli import render

    if as_json:
        out = {"traces": [render.trace_json(g) for g in graded]}
        click.echo(json.dumps(out, indent=2, ensure_ascii=False))
        return
    for g in graded:
        click.echo(render.trace_block(g))
        click.echo()
    click.echo(render.totals([r for g in graded for r in g.results]))


def _export(
    graded: Sequence[GradedTrace],
    endpoint: str | None,
    *,
    spans: bool,
    logs: bool,
    metrics: bool,
) -> None:
    """Send the grades and say in one line what went where; a failure is one line and exit 1."""
    from attest_otel.export.telemetry import build_telemetry

    telemetry = build_telemetry(
        endpoint=endpoint, protocol=None, spans=spans, logs=logs, metrics=metrics, prometheus=None
    )
    try:
        for g in graded:
            for one in g.runs:
                telemetry.emit_grade(one.run, one.result, grade_span=spans)
    finally:
        report = telemetry.shutdown()
    report.raise_for_failure()
    click.echo(report.summary(), err=True)
