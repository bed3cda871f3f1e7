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


GC_THRESHOLD0 = 10_000
"""Allocations between two young-generation collections in `grade` and `inspect`."""


def fewer_collections() -> None:
    """Collect cyclic garbage less often for the rest of this process (a one-shot command).

    Decoding a big file makes millions of objects that live until the command ends, and
    with CPython's default of a collection every 700 allocations the collector walks them
    over and over: on a 30,000-call trace that was a large share of `grade`'s CPU
    (docs/measurements.md, "Big traces"). What the rarer collections leave waiting is at
    most `GC_THRESHOLD0` objects."""
    import gc

    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GC_THRESHOLD0, older, oldest)


def settle() -> None:
    """Leave every object alive now out of the cyclic collector's walks, for the rest of this
    one-shot command (`gc.freeze`): called once a file is read, that is mostly its spans,
    which live until their trace is graded and then go by reference counting (decoded
    values hold no cycle). On a 30,000-call trace the collector walked them in every
    older-generation collection while the run was graded (docs/measurements.md, "OTLP/JSON
    read by the wire core")."""
    import gc

    gc.freeze()


def json_document(value: Any) -> str:
    """`json.dumps(value, indent=2, ensure_ascii=False)`, the text every `--json` prints,
    written by orjson when that gives the same text.

    `indent` makes `json` use its pure-Python encoder, many times slower than orjson on
    the output of a big trace (docs/measurements.md, "Big traces"). orjson writes the same
    text for plain JSON values except floats: `1e-05` comes out `0.00001`, and NaN or
    infinity `null`. So a value holding such a float, or anything but dicts, lists, str,
    int, float, bool and None, is written by `json` as before, and so is any value orjson
    refuses (a key that is not a str, a lone surrogate, an int beyond 64 bits)."""
    if _plain(value):
        import orjson

        try:
            return orjson.dumps(value, option=orjson.OPT_INDENT_2).decode()
        except (TypeError, orjson.JSONEncodeError):
            pass
    return json.dumps(value, indent=2, ensure_ascii=False)


def json_documents(key: str, items: Sequence[str]) -> str:
    """`json_document({key: [...]})` from the items' `json_item` texts: a command that
    renders each trace once it is read need not hold them all to print one document."""
    if not items:
        return json_document({key: []})
    return "{\n  " + json.dumps(key) + ": [\n" + ",\n".join(items) + "\n  ]\n}"


def json_item(value: Any) -> str:
    """The lines `json_document` gives `value` as an item of `json_documents`: the same,
    two levels deeper (a JSON string holds no raw newline)."""
    return "    " + json_document(value).replace("\n", "\n    ")


_PLAIN = frozenset((str, int, bool, type(None)))


def _plain(value: Any) -> bool:
    """Whether orjson writes `value` as `json` does (see `json_document`)."""
    stack = [value]
    pop, push = stack.pop, stack.extend
    while stack:
        item = pop()
        kind = type(item)
        if kind is dict:  # orjson refuses a key that is not a str: `json` writes it
            push(item.values())
        elif kind is list or kind is tuple:
            push(item)
        elif kind is float:
            if not (item == 0.0 or 1e-4 <= abs(item) < float("inf")):
                return False  # NaN fails both comparisons
        elif kind not in _PLAIN:
            return False
    return True


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
        click.echo(json_document(out))
        return
    for i, (run, result) in enumerate(zip(runs, results, strict=True), start=1):
        click.echo(render.run_block(f"run {i}/{len(runs)}", run, result))
        click.echo()
    click.echo(render.totals(results))


def exit_for(results: Sequence[Any]) -> None:
    if any(not r.passed for r in results):
        sys.exit(1)
