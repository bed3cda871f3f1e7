"""`attest-otel inspect`: why a trace's runs came out as they did.

For the framework nobody has tested yet: per trace, which dialect each span was read as,
which span became each run and each call, which spans were left out and why, and what
content is missing with the setting that turns its capture on (`adapt.explain`). It reads
the trace exactly as `grade` does, policy and declared dialects included, and grades nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from attest_otel.adapt import Dialect, TraceRuns
from attest_otel.adapt.explain import SpanReading, gaps
from attest_otel.cli.common import (
    config_option,
    fewer_collections,
    json_documents,
    json_item,
    settle,
    status,
)
from attest_otel.cli.sources import load_trace, trace_source_options
from attest_otel.errors import UsageError
from attest_otel.plumbing.terminal import printable

if TYPE_CHECKING:
    from attest_otel.ingest.decode import Decoded


@click.command()
@click.option("--file", "file", type=click.Path(path_type=Path), help="An OTLP file to read.")
@click.option("--trace-id", help="Read one trace by id, from --from (default: the store).")
@click.option(
    "--policy", type=click.Path(path_type=Path), help="Policy file (its dialects: are used)."
)
@click.option(
    "--json", "as_json", is_flag=True, help='One JSON document: {"traces": [...]}, as grade --json.'
)
@trace_source_options
@config_option
def inspect(
    file: Path | None,
    trace_id: str | None,
    policy: Path | None,
    as_json: bool,
    source: str,
    headers: Sequence[str],
    ca_file: Path | None,
    client_cert: Path | None,
    client_key: Path | None,
    insecure: bool,
    timeout_s: float,
    since_s: float | None,
) -> None:
    """Show how each span of a trace was read, and what content is missing."""
    # Imported when the command runs: the decoders and readers load protobuf and every
    # dialect, which `attest-otel --help` need not wait for.
    from attest_otel.pipeline import Reading, read
    from attest_otel.policy import Policy, load_policy

    fewer_collections()
    if (file is None) == (trace_id is None):
        raise UsageError("inspect takes --file PATH or --trace-id ID (they exclude each other)")
    if since_s is not None:
        raise UsageError("inspect reads one trace or file; --since is for grade")
    loaded = load_policy(policy) if policy is not None else None
    how = Reading(loaded or Policy.empty())
    declared = loaded.dialects if loaded is not None else ()
    blocks: list[str] = []
    with _traces(
        file, trace_id, source, headers, ca_file, client_cert, client_key, insecure, timeout_s
    ) as decoded:
        for one in decoded:  # a trace at a time: memory does not grow with the file
            for trace in read(one.spans, one.logs, how, explain=True):
                if as_json:
                    blocks.append(json_item(_as_dict(trace, declared)))
                else:
                    # Span names and content are the sender's: shown, never sent to the
                    # terminal.
                    blocks.append(printable("\n".join(_lines(trace, declared))))
    if not blocks:
        raise UsageError("no spans in the input")
    if as_json:  # one document for the whole input, as `grade --json` prints
        click.echo(json_documents("traces", blocks))
        return
    for block in blocks:
        click.echo(block)


@contextlib.contextmanager
def _traces(
    file: Path | None,
    trace_id: str | None,
    source: str,
    headers: Sequence[str],
    ca_file: Path | None,
    client_cert: Path | None,
    client_key: Path | None,
    insecure: bool,
    timeout_s: float,
) -> Iterator[Iterable[Decoded]]:
    """The input's traces, each with its spans and log records: a file's one at a time."""
    if file is not None:
        from attest_otel.ingest.stream import ByTrace

        with status(f"reading {file}"):
            by_trace = ByTrace.of_file(file)
        settle()
        with by_trace:
            yield by_trace
        return
    assert trace_id is not None
    yield [
        load_trace(
            trace_id,
            source,
            headers,
            ca_file=ca_file,
            client_cert=client_cert,
            client_key=client_key,
            insecure=insecure,
            timeout_s=timeout_s,
        )
    ]


def _as_dict(trace: TraceRuns, declared: Sequence[Dialect]) -> dict[str, Any]:
    return {
        "trace_id": trace.trace_id,
        "dialects": trace.dialects,
        "anomalies": trace.anomalies,
        "spans": [asdict(r) for r in trace.spans or ()],
        "runs": [
            {
                "agent": run.agent,
                "span_id": run.span_id,
                "task": run.task,
                "final_answer": run.final_answer,
                "calls": [
                    {
                        "name": s.tool_call.name,
                        "span_id": s.tool_call.span_id,
                        "call_id": s.tool_call.call_id,
                        "output_captured": s.tool_call.output_captured,
                    }
                    for s in run.steps
                    if s.tool_call is not None
                ],
                **asdict(gaps(run, trace.dialects, declared)),
            }
            for run in trace.runs
        ],
    }


def _lines(trace: TraceRuns, declared: Sequence[Dialect]) -> list[str]:
    from attest_otel.cli import render

    out = [f"trace {trace.trace_id}", f"  read as: {', '.join(trace.dialects) or 'nothing'}"]
    if "generic" in trace.dialects:
        out.append(
            "  note: the generic reader guessed from names and shapes (no dialect "
            "module knows these spans); a dialect file makes it exact"
        )
    for kind, count in sorted(trace.anomalies.items()):
        out.append(f"  anomaly: {kind} x{count}")
    out.append("  spans:")
    out.extend(_tree(trace.spans or []))
    for n, run in enumerate(trace.runs):
        calls = [s.tool_call for s in run.steps if s.tool_call is not None]
        out.append(f"  run {n}: agent {run.agent or '(no name)'} from span {run.span_id}")
        out.append(f"    task: {_short(run.task) or '(not captured)'}")
        answer = run.final_answer
        out.append(f"    answer: {_short(answer) if answer is not None else '(not captured)'}")
        out.append(f"    calls: {render.call_sequence([c.name for c in calls])}")
        found = gaps(run, trace.dialects, declared)
        if found.missing:
            out.append(f"    missing: {', '.join(found.missing)}")
            out.extend(f"    turn capture on: {hint}" for hint in found.capture)
            if found.unread:
                out.append(
                    "    content was recorded, so capture is on: what is missing was not "
                    "captured for those spans, or sits where no reader looks (a dialect "
                    "file can say where: README, 'Teach it a dialect')"
                )
    return out


def _tree(readings: list[SpanReading]) -> list[str]:
    """The spans as a tree, parents first, children in the order they came."""
    ids = {r.span_id for r in readings}
    children: dict[str | None, list[SpanReading]] = {}
    for r in readings:
        parent = r.parent_id if r.parent_id in ids else None
        children.setdefault(parent, []).append(r)
    out: list[str] = []
    stack = [(r, 0) for r in reversed(children.get(None, []))]
    seen: set[str] = set()
    while stack:
        r, depth = stack.pop()
        if r.span_id in seen:
            continue
        seen.add(r.span_id)
        read = f"{r.dialect}/{r.role}" if r.dialect else "-"
        rule = f" [rule {r.rule}]" if r.rule else ""
        out.append(f"    {'  ' * depth}{_short(r.name, 60)}  ({read}{rule}) -> {r.became}")
        stack.extend((c, depth + 1) for c in reversed(children.get(r.span_id, [])))
    return out


def _short(text: str | None, width: int = 100) -> str:
    if not text:
        return ""
    one = " ".join(text.split())
    return one if len(one) <= width else one[: width - 1] + "…"
