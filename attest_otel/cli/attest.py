"""attest's own commands on attest's run files: `tools` and `run`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from attest_otel.cli.common import (
    Warnings,
    budget_option,
    exit_for,
    json_option,
    model_options,
    print_runs,
    strict_option,
)
from attest_otel.errors import InputError


@click.command()
@click.argument("file", type=click.Path(path_type=Path))
@model_options
@budget_option
@json_option
@strict_option
def tools(
    file: Path,
    appropriate: bool,
    check_answer: bool,
    model: str | None,
    budget_s: float,
    as_json: bool,
    strict: bool,
) -> None:
    """Grade the tool use of the runs in FILE (.json: one run; .jsonl: one per line)."""
    from attest_otel.grade import grader
    from attest_otel.sidecar.bounded import run_grader

    runs = _read_runs(file, strict)
    judge = grader.judge_for_tool_use(asked=appropriate or check_answer, model=model)
    grade_run = run_grader(grader.grade, judge, appropriate, budget_s)
    results = [grade_run(run) for run in runs]
    print_runs(runs, results, as_json)
    exit_for(results)


@click.command()
@click.argument("file", type=click.Path(path_type=Path))
@click.option(
    "--model", help="Model for the checks (default: $ATTEST_OTEL_MODEL or claude-haiku-4-5)."
)
@budget_option
@json_option
@strict_option
def run(file: Path, model: str | None, budget_s: float, as_json: bool, strict: bool) -> None:
    """Run every check on the runs in FILE; model checks whenever ANTHROPIC_API_KEY is set."""
    from attest_otel.grade import grader, llm
    from attest_otel.sidecar.bounded import run_grader

    runs = _read_runs(file, strict)
    judge = llm.judge_from_env(model)
    grade_run = run_grader(grader.grade, judge, False, budget_s)
    results = [grade_run(r) for r in runs]
    print_runs(runs, results, as_json)
    exit_for(results)


def _read_runs(file: Path, strict: bool) -> list[Any]:
    """The runs of a run file, with its unknown keys warned about; none at all is exit 2,
    since a CI gate reading "0 runs, 0 failed" as a pass would pass on an empty file."""
    from attest_otel.model import read_runs

    warn = Warnings(strict)
    runs = read_runs(file, warn=warn)
    warn.check()
    if not runs:
        raise InputError(str(file), "no runs to grade")
    return runs
