"""What every command shares: one error line and an exit code, warnings, the common options,
and how runs and their results are printed."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import click

from attest_otel.errors import EXIT_BROKEN_PIPE, UsageError

F = TypeVar("F", bound=Callable[..., Any])


def fail(message: str, code: int) -> None:
    click.echo(f"attest-otel: error: {message}", err=True)
    sys.exit(code)


def broken_pipe() -> None:
    """`grade ... | head`: the reader has all it wanted. Point stdout at /dev/null so the
    interpreter's final flush cannot fail again, say it once, and exit as a shell reports a
    writer SIGPIPE killed."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    with contextlib.suppress(OSError):
        click.echo("attest-otel: stdout was closed before the output ended", err=True)
    sys.exit(EXIT_BROKEN_PIPE)


class Warnings:
    """Problems that do not stop grading but could make a pass mean nothing (a misspelt key,
    a policy entry no run uses): one stderr line each; `--strict` makes them exit 2."""

    def __init__(self, strict: bool) -> None:
        self.strict = strict
        self.count = 0

    def __call__(self, message: str) -> None:
        self.count += 1
        click.echo(f"attest-otel: warning: {message}", err=True)

    def check(self) -> None:
        if self.strict and self.count:
            raise UsageError(f"{self.count} warning(s) above, and --strict makes them errors")


def strict_option(f: F) -> F:
    return click.option(
        "--strict", is_flag=True, help="Treat warnings (unknown keys, unused policy) as errors."
    )(f)


def model_options(f: F) -> F:
    f = click.option(
        "--model", help="Model for the checks (default: $ATTEST_OTEL_MODEL or claude-haiku-4-5)."
    )(f)
    f = click.option(
        "--check-answer",
        is_flag=True,
        help="Read final answers of unrecovered errors with a model.",
    )(f)
    f = click.option(
        "--appropriate",
        is_flag=True,
        help="Also ask a model whether each tool was a reasonable choice.",
    )(f)
    return f


def budget_option(f: F) -> F:
    """`--budget SECONDS`: how long grading one run may take, model calls included
    (`sidecar.bounded.run_grader`; docs/hostile-input.md, "Grading budget")."""
    return click.option(
        "--budget",
        "budget_s",
        type=click.FloatRange(min=0, min_open=True),
        default=300.0,
        show_default=True,
        metavar="SECONDS",
        help="How long grading one run may take, model calls included; past it the run is "
        "reported review, not graded.",
    )(f)


def _apply_config(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    """The sidecar's config file as the defaults of this command: its store for `--from`,
    its policy for `--policy`. Flags given on the command line still win (click reads
    `default_map` only for what the user left out)."""
    if value is None:
        return
    from attest_otel.sidecar.config import load_service_config

    config = load_service_config(value)
    store = config.store.url or str(config.store.path)
    defaults: dict[str, Any] = {"source": f"store:{store}"}
    if config.grading.policy is not None:
        defaults["policy"] = str(config.grading.policy)
    names = {param.name for param in ctx.command.params}
    ctx.default_map = {
        **(ctx.default_map or {}),
        **{k: v for k, v in defaults.items() if k in names},
    }


def config_option(f: F) -> F:
    """`--config FILE`: read where the sidecar keeps its store (and its policy) from its
    config, instead of repeating `--from store:PATH` on every call."""
    return click.option(
        "--config",
        "config",
        type=click.Path(dir_okay=False),
        is_eager=True,
        expose_value=False,
        callback=_apply_config,
        help="The sidecar's config file: its store and policy become the defaults of "
        "--from and --policy.",
    )(f)


@contextlib.contextmanager
def status(label: str, *, enabled: bool | None = None) -> Iterator[None]:
    """`label...` on stderr while a long step runs, with the seconds it took once done, on a
    terminal only (a pipe or a CI log gets nothing): a 12-second read shows a sign of life."""
    show = sys.stderr.isatty() if enabled is None else enabled
    if not show:
        yield
        return
    started = time.monotonic()
    click.echo(f"{label}...", err=True, nl=False)
    try:
        yield
    finally:
        click.echo(f" {time.monotonic() - started:.1f}s", err=True)


def json_option(f: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")(f)


def print_runs(runs: Sequence[Any], results: Sequence[Any], as_json: bool) -> None:
    from attest_otel.cli import render

    if as_json:
        out = [
            {"task": run.task, "result": r.to_dict()} for run, r in zip(runs, results, strict=True)
        ]
        click.echo(json.dumps(out, indent=2, ensure_ascii=False))
        return
    for i, (run, result) in enumerate(zip(runs, results, strict=True), start=1):
        click.echo(render.run_block(f"run {i}/{len(runs)}", run, result))
        click.echo()
    click.echo(render.totals(results))


def exit_for(results: Sequence[Any]) -> None:
    if any(not r.passed for r in results):
        sys.exit(1)
