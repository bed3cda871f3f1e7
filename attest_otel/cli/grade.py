"""`attest-otel grade`: the runs of OTLP traces, from a file or a trace source, graded."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from attest_otel.cli.common import (
    Warnings,
    budget_option,
    config_option,
    exit_for,
    fewer_collections,
    json_documents,
    json_item,
    json_option,
    model_options,
    settle,
    status,
    strict_option,
)
from attest_otel.cli.sources import trace_source_options
from attest_otel.errors import InputError, UsageError

if TYPE_CHECKING:
    from attest_otel.model import CheckResult
    from attest_otel.pipeline import GradedTrace


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
    from attest_otel.pipeline import Reading, grade_traces
    from attest_otel.policy import Policy, load_policy
    from attest_otel.sidecar.bounded import run_grader

    fewer_collections()
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
    out = _Output(as_json, keep=export, declared=loaded.dialects)
    if file is not None:
        from attest_otel.ingest.stream import ByTrace

        with status(f"reading {file}"):
            traces = ByTrace.of_file(file)
        settle()
        with traces:
            if not traces.span_count:
                raise InputError(str(file), "no spans to grade")
            with status(f"grading {traces.span_count} spans"):
                for one in traces:  # one trace at a time: memory does not grow with the file
                    for g in grade_traces(
                        one.spans,
                        one.logs,
                        reading,
                        judge=judge,
                        appropriate=appropriate,
                        grade_run=grade_run,
                    ):
                        out.add(g)
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
        for g in graded:
            out.add(g)
    for line in loaded.unused(out.agents):
        warn(line)
    warn.check()
    if not out.any_runs:
        raise InputError(str(file) if file is not None else source, "no agent runs to grade")
    out.print()
    if export:
        _export(
            out.kept,
            otlp_endpoint,
            spans=not no_grade_spans,
            logs=not no_log_events,
            metrics=not no_metrics,
        )
    exit_for(out.results)


class _Output:
    """What `grade` prints, made a trace at a time so that a trace's spans and runs can go
    once it is graded: each trace's text (or JSON), the results for the totals and the exit
    code, the agents for the policy check; the graded traces themselves only for --export."""

    def __init__(self, as_json: bool, *, keep: bool, declared: Sequence[Any] = ()) -> None:
        self.as_json = as_json
        self.keep = keep
        self.declared = declared
        """The policy's dialects, whose files may say how to turn capture on."""
        self.blocks: list[str] = []
        self.results: list[CheckResult] = []
        self.agents: set[str] = set()
        self.any_runs = False
        self.kept: list[GradedTrace] = []

    def add(self, graded: GradedTrace) -> None:
        from attest_otel.cli import render

        if self.as_json:
            self.blocks.append(json_item(render.trace_json(graded)))
        else:
            self.blocks.append(render.trace_block(graded, self.declared))
        self.results += graded.results
        self.agents.update(run.agent for run in graded.trace.runs if run.agent)
        self.any_runs = self.any_runs or bool(graded.trace.runs)
        if self.keep:
            self.kept.append(graded)

    def print(self) -> None:
        from attest_otel.cli import render

        if self.as_json:
            click.echo(json_documents("traces", self.blocks))
            return
        for block in self.blocks:
            click.echo(block)
            click.echo()
        click.echo(render.totals(self.results))


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
