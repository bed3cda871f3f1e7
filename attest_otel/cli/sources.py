"""CLI pieces for traces that live elsewhere: `grade --trace-id ID --from SOURCE`, `--since`,
`inspect --trace-id` and `report`'s store.

The command modules own the commands; this module gives them what they need without deciding
how `grade` prints (so `grade --file` and `grade --trace-id` print alike):

- `trace_source_options`: the `--from/--header/--ca-file/--client-cert/--client-key/
  --insecure/--timeout/--since` options, one decorator;
- `http_options(...)`: those values -> `HttpOptions` (every check a one-line UsageError);
- `load_trace(...)`: one trace by id -> `Decoded`; `grade_trace(...)`: -> (run, result)
  pairs, taking the sidecar's stored grade where the store has one;
- `traces_since(...)` and `progress(...)`: the trace ids of a window, and a progress bar
  that shows only on a terminal (a pipe or a CI log gets no bar);

Like the command modules, it imports the stages inside the functions that use them, so that
loading the CLI does not load protobuf, the OTel SDK and the HTTP clients of every source.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from attest_otel.cli.common import status
from attest_otel.errors import UsageError

if TYPE_CHECKING:
    from attest_otel.grade.questions import Judge
    from attest_otel.ingest.decode import Decoded
    from attest_otel.model import CheckResult, Run
    from attest_otel.pipeline import GradedTrace, Reading
    from attest_otel.sources import HttpOptions, Source

__all__ = [
    "DEFAULT_SOURCE",
    "Duration",
    "grade_from_source",
    "grade_trace",
    "http_options",
    "load_trace",
    "open_source",
    "parse_duration",
    "progress",
    "trace_source_options",
    "traces_since",
]

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")

DEFAULT_SOURCE = "store:"
"""The sidecar's store at its default path: `grade --trace-id` works with nothing else."""

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")


def parse_duration(text: str) -> float:
    """`90s`, `30m`, `24h`, `7d`, `2w` or a sum such as `1h30m` -> seconds."""
    value = text.strip().lower()
    pos, total = 0, 0.0
    for match in _DURATION.finditer(value):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if not value or pos != len(value):
        raise UsageError(f"duration {text!r}: expected a number and a unit, e.g. 30m, 24h, 7d")
    if total <= 0:
        raise UsageError(f"duration {text!r} must be longer than zero")
    return total


if TYPE_CHECKING:
    _ParamType = click.ParamType[float, Any]
else:  # click < 8.2 has no generic ParamType; the lock's 8.5 has
    _ParamType = click.ParamType


class Duration(_ParamType):
    """A click type for `--since`: the value in seconds."""

    name = "duration"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        if isinstance(value, int | float):
            return float(value)
        try:
            return parse_duration(str(value))
        except UsageError as e:
            self.fail(str(e).removeprefix("duration "), param, ctx)


class Rate(_ParamType):
    """A pass rate for a gate: `0.9` or `90%`."""

    name = "rate"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        if isinstance(value, float):
            return value
        text = str(value).strip()
        try:
            rate = float(text[:-1]) / 100 if text.endswith("%") else float(text)
        except ValueError:
            self.fail(f"{text!r}: expected a rate such as 0.9 or 90%", param, ctx)
        if not 0 <= rate <= 1:
            self.fail(f"{text!r}: a rate is between 0 and 1 (0% and 100%)", param, ctx)
        return rate


def trace_source_options(f: F) -> F:
    """`--from`, `--header`, the TLS flags, `--timeout` and `--since` for `grade`."""
    options = [
        click.option(
            "--from",
            "source",
            default=DEFAULT_SOURCE,
            show_default=True,
            metavar="SOURCE",
            help="Where the trace is: store:[PATH|postgresql://...], jaeger:URL, tempo:URL, "
            "phoenix:URL[#PROJECT] or file:PATH.",
        ),
        click.option(
            "--header",
            "headers",
            multiple=True,
            metavar="NAME=VALUE",
            help="HTTP header for the backend (repeatable), e.g. 'Authorization=Bearer TOKEN'.",
        ),
        click.option(
            "--ca-file",
            type=click.Path(dir_okay=False, path_type=Path),
            help="PEM CA bundle to trust for the backend's certificate.",
        ),
        click.option(
            "--client-cert",
            type=click.Path(dir_okay=False, path_type=Path),
            help="PEM client certificate for mutual TLS (may hold the key too).",
        ),
        click.option(
            "--client-key",
            type=click.Path(dir_okay=False, path_type=Path),
            help="PEM key of --client-cert.",
        ),
        click.option(
            "--insecure", is_flag=True, help="Do not verify the backend's TLS certificate."
        ),
        click.option(
            "--timeout",
            "timeout_s",
            type=click.FloatRange(min=0, min_open=True),
            default=10.0,
            show_default=True,
            metavar="SECONDS",
            help="Time allowed for each request to the backend, body included.",
        ),
        click.option(
            "--since",
            "since_s",
            type=Duration(),
            metavar="DURATION",
            help="Every trace received in this window (30m, 24h, 7d), not one trace id; "
            "store: and file: sources.",
        ),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def http_options(
    headers: Sequence[str] = (),
    *,
    ca_file: str | Path | None = None,
    client_cert: str | Path | None = None,
    client_key: str | Path | None = None,
    insecure: bool = False,
    timeout_s: float = 10.0,
) -> HttpOptions:
    from attest_otel.sources import HttpOptions, parse_headers

    return HttpOptions(
        headers=parse_headers(headers),
        timeout_s=timeout_s,
        ca_file=str(ca_file) if ca_file else None,
        client_cert=str(client_cert) if client_cert else None,
        client_key=str(client_key) if client_key else None,
        insecure=insecure,
    )


def open_source(source: str, http: HttpOptions | None = None) -> Source:
    from attest_otel.sources import parse_source

    return parse_source(source or DEFAULT_SOURCE, http=http)


def load_trace(
    trace_id: str,
    source: str = DEFAULT_SOURCE,
    headers: Sequence[str] = (),
    *,
    ca_file: str | Path | None = None,
    client_cert: str | Path | None = None,
    client_key: str | Path | None = None,
    insecure: bool = False,
    timeout_s: float = 10.0,
) -> Decoded:
    """The spans of one trace from `source` (`jaeger:URL`, ...); one-line errors only."""
    options = http_options(
        headers,
        ca_file=ca_file,
        client_cert=client_cert,
        client_key=client_key,
        insecure=insecure,
        timeout_s=timeout_s,
    )
    opened = open_source(source, options)
    try:
        with status(f"reading trace {trace_id}"):
            return opened.fetch(trace_id)
    finally:
        opened.close()


def grade_trace(
    trace_id: str,
    source: Source,
    *,
    reading: Reading | None = None,
    judge: Judge | None = None,
    appropriate: bool = False,
    grade_run: Callable[[Run], CheckResult] | None = None,
) -> list[GradedTrace]:
    """Every run of one trace with its grade, as `grade --file` grades a file's traces.

    From the store, a run the sidecar already graded keeps that grade (it may have had a
    model check the CLI would not repeat) unless something that changes a grade differs
    (`pipeline.regrade_reason`); every other run is graded now.
    """
    from attest_otel.pipeline import grade_traces
    from attest_otel.sources.store_source import StoreSource

    stored: dict[str, dict[str, Any]] = {}
    if isinstance(source, StoreSource):
        decoded, stored = source.fetch_with_grades(trace_id)
    else:
        decoded = source.fetch(trace_id)
    return grade_traces(
        decoded.spans,
        decoded.logs,
        reading,
        judge=judge,
        appropriate=appropriate,
        grade_run=grade_run,
        stored=stored,
    )


def traces_since(source: Source, since_s: float, *, now_ns: int | None = None) -> list[str]:
    """Trace ids of the window, oldest first: received then (store), or with a span
    ending then (file)."""
    from attest_otel.sources.file import FileSource
    from attest_otel.sources.store_source import StoreSource, since_to_ns

    cutoff = since_to_ns(since_s, now_ns=now_ns)
    if isinstance(source, StoreSource):
        return source.trace_ids_since(cutoff)
    if isinstance(source, FileSource):
        latest: dict[str, int] = {}
        for tid in source.trace_ids():
            spans = source.fetch(tid).spans
            latest[tid] = max((s.end_ns or s.start_ns for s in spans), default=0)
        return [tid for tid, end in sorted(latest.items(), key=lambda kv: kv[1]) if end >= cutoff]
    raise UsageError(
        f"--since works with store: and file: sources, not {source.kind}: "
        f"search {source.kind} for trace ids first (see docs/jaeger-tempo-grafana.md)"
    )


def progress(items: Sequence[T], label: str, *, enabled: bool | None = None) -> Iterator[T]:
    """`items`, with a progress bar on stderr when stderr is a terminal (or `enabled`)."""
    show = sys.stderr.isatty() if enabled is None else enabled
    if not show or len(items) < 2:
        yield from items
        return
    with click.progressbar(
        items, label=label, file=sys.stderr, show_pos=True, show_eta=True, width=30
    ) as bar:
        yield from bar


def grade_from_source(
    *,
    trace_id: str | None,
    source: str,
    http: HttpOptions | None = None,
    since_s: float | None = None,
    reading: Reading | None = None,
    judge: Judge | None = None,
    appropriate: bool = False,
    show_progress: bool | None = None,
    grade_run: Callable[[Run], CheckResult] | None = None,
) -> list[GradedTrace]:
    """`grade --trace-id ID` or `grade --since D`, from any source: the graded traces, for
    the CLI to print and export exactly as it does those of `grade --file`."""
    from attest_otel.sources import TraceNotFoundError

    if (trace_id is None) == (since_s is None):
        raise UsageError("--trace-id and --since exclude each other: give one")
    opened = open_source(source, http)

    def one(tid: str) -> list[GradedTrace]:
        return grade_trace(
            tid,
            opened,
            reading=reading,
            judge=judge,
            appropriate=appropriate,
            grade_run=grade_run,
        )

    graded: list[GradedTrace] = []
    try:
        if trace_id is not None:
            with status(f"reading and grading trace {trace_id}", enabled=show_progress):
                graded = one(trace_id)
        elif since_s is not None:
            ids = traces_since(opened, since_s)
            for tid in progress(ids, f"grading {len(ids)} traces", enabled=show_progress):
                try:
                    graded += one(tid)
                except TraceNotFoundError:
                    continue  # pruned from the store since it was listed
    finally:
        opened.close()
    return graded
