"""Human-readable grades for a terminal: a failing call has to stand out at a glance.

Plain text with optional colour; the CLI decides whether colour is on (a terminal) or off.
Every piece of span content goes through `terminal.printable` before it is styled, so a
tool name or result cannot send the terminal commands (attest_otel/plumbing/terminal.py).
"""

from __future__ import annotations

import functools
import shutil
import textwrap
from collections.abc import Sequence
from typing import Any

import click

from attest_otel.adapt import Dialect
from attest_otel.adapt.explain import capture_hints
from attest_otel.model import CheckResult, Finding, Run, shown_score
from attest_otel.pipeline import GradedTrace
from attest_otel.plumbing.terminal import printable


@functools.lru_cache(maxsize=256)
def _styled(text: str, fg: str | None = None, bold: bool | None = None) -> str:
    """`click.style`, remembered: a run of thousands of calls styles the same few words."""
    return click.style(text, fg=fg, bold=bold)


_MARK = {"pass": "✓", "warn": "?", "fail": "✗"}
_COLOUR = {"pass": "green", "warn": "yellow", "fail": "red"}
_HEADLINE = {"pass": "PASS", "review": "REVIEW", "fail": "FAIL"}
_HEADLINE_COLOUR = {"pass": "green", "review": "yellow", "fail": "red"}


def width() -> int:
    """The terminal's width ($COLUMNS first), else 100 for a pipe or a CI log."""
    return max(60, shutil.get_terminal_size((100, 24)).columns)


def wrapped(text: str | None, indent: str, columns: int | None = None) -> str:
    """A reason in full, wrapped to the terminal: a cut reason hides the part that says
    what to do (which step recovered it, what the answer claimed)."""
    return textwrap.fill(
        printable(" ".join((text or "").split()), newlines=False),
        width=columns or width(),
        initial_indent=indent,
        subsequent_indent=indent,
        break_on_hyphens=False,
    )


def one_line(text: str | None, width: int = 90) -> str:
    flat = printable(" ".join((text or "").split()), newlines=False)
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def call_sequence(names: Sequence[str], width: int = 110) -> str:
    """A run's calls in order, repeats folded (`search x3`), cut to about `width` with how
    many were left out: a 30,000-call run is one short line, not 300 KB of one."""
    if not names:
        return "none"
    runs: list[tuple[str, int]] = []  # (name, repeats); a name may hold " x" itself
    i = 0
    while i < len(names):
        j = i
        while j + 1 < len(names) and names[j + 1] == names[i]:
            j += 1
        runs.append((names[i], j - i + 1))
        i = j + 1
    folded = [name if n == 1 else f"{name} x{n}" for name, n in runs]
    text = " -> ".join(folded)
    if len(text) <= width:
        return text
    kept: list[str] = []
    used = 0
    shown = 0
    for part, (_name, n) in zip(folded, runs, strict=True):
        if used + len(part) + 4 > width and kept:
            break
        kept.append(part)
        used += len(part) + 4
        shown += n
    return " -> ".join(kept) + f" -> ... ({len(names) - shown} more calls, {len(names)} in all)"


MAX_PASSING_LINES = 20
"""Past this many correct calls, a run's text lists its problems and counts the rest."""


def headline(result: CheckResult) -> str:
    label = _styled(f"{_HEADLINE[result.verdict]:<6}", _HEADLINE_COLOUR[result.verdict], True)
    correct = sum(f.verdict == "correct" for f in result.findings)
    score = shown_score(result.score)
    return f"{label} score {score:.2f} ({correct}/{len(result.findings)} calls correct)"


def finding_line(finding: Finding, *, indent: str = "  ") -> str:
    mark = _styled(_MARK[finding.severity], _COLOUR[finding.severity], True)
    verdict = _styled(finding.verdict, _COLOUR[finding.severity])
    extra = ""
    recovery = finding.metadata.get("recovery")
    if recovery:
        at = finding.metadata.get("recovered_at")
        extra = f" [{recovery}{f' at step {at}' if at is not None else ''}]"
    subject = printable(finding.subject, newlines=False)
    extra = printable(extra, newlines=False)
    line = f"{indent}{mark} step {finding.step:<2} {subject:<24} {verdict}{extra}"
    if finding.severity != "pass":
        columns = width()
        line += "\n" + wrapped(finding.reason, indent + "    ", columns)
        if finding.evidence:  # tool output can be pages long: one line, as wide as the screen
            room = columns - len(indent) - len("    evidence: ")
            line += "\n" + indent + "    evidence: " + one_line(finding.evidence, max(40, room))
    return line


def run_block(title: str, run: Run, result: CheckResult, *, indent: str = "") -> str:
    lines = [f"{indent}{title}  {headline(result)}"]
    if run.task:
        lines.append(f"{indent}  task: {one_line(run.task)}")
    if result.findings:
        sequence = call_sequence(
            [printable(" ".join(f.subject.split()), newlines=False) for f in result.findings]
        )
        lines.append(f"{indent}  sequence: {sequence}")
        passing = sum(f.severity == "pass" for f in result.findings)
        fold = passing > MAX_PASSING_LINES
        lines.extend(
            finding_line(f, indent=indent + "  ")
            for f in result.findings
            if not fold or f.severity != "pass"
        )
        if fold:
            lines.append(f"{indent}  ... and {passing} correct calls (--json lists every call)")
    else:
        lines.append(f"{indent}  no tool calls")
    mark = _styled(_MARK["warn"], _COLOUR["warn"], True)
    for gap in unread(result):
        lines.append(f"{indent}  {mark} not read whole:")
        lines.append(wrapped(gap, f"{indent}      "))
    return "\n".join(lines)


def unread(result: CheckResult) -> list[str]:
    """Why the run could not be read whole (`Run.gaps`, kept in the result's metadata)."""
    found = result.metadata.get("gaps")
    return [str(g) for g in found] if isinstance(found, list) else []


def totals(results: Sequence[CheckResult]) -> str:
    passed = sum(r.verdict == "pass" for r in results)
    review = sum(r.verdict == "review" for r in results)
    unread_runs = sum(bool(unread(r)) for r in results)
    failed = sum(r.verdict == "fail" for r in results)
    parts = [f"{len(results)} run{'s' if len(results) != 1 else ''}", f"{passed} passed"]
    if review:
        parts.append(f"{review} to review")
        if unread_runs:
            parts[-1] += f" ({unread_runs} could not be read whole)"
    parts.append(f"{failed} failed")
    return ", ".join(parts)


def trace_json(graded: GradedTrace) -> dict[str, Any]:
    """`grade --json`: one trace, its runs in start order, each with where it came from and
    whether its grade is the one the store kept."""
    return {
        "trace_id": graded.trace.trace_id,
        "runs": [
            {
                "agent": g.run.agent,
                "span_id": g.run.span_id,
                "task": g.run.task,
                "final_answer": g.run.final_answer,
                "content_captured": g.run.content_captured,
                "gaps": list(g.run.gaps),
                "stored_grade": g.stored,
                "regraded": g.regraded,
                "result": g.result.to_dict(),
            }
            for g in graded.runs
        ],
    }


def trace_block(graded: GradedTrace, declared: Sequence[Dialect] = ()) -> str:
    """One trace for a terminal; a run with no tool calls says which dialects were seen, and a
    trace that captured no content says so and which setting captures it: without content a
    returned error is invisible, and a clean grade would look like more than it is."""
    trace = graded.trace
    results = graded.results
    lines = [click.style(f"trace {printable(trace.trace_id, newlines=False)}", bold=True)]
    for g in graded.runs:
        title = f"  run {printable(g.run.agent or '(no agent name)', newlines=False)}"
        if g.stored:
            title += "  (the grade the sidecar stored)"
        elif g.regraded:
            title += f"  (graded again: {g.regraded})"
        lines.append(run_block(title, g.run, g.result, indent=""))
    if not any(result.findings for result in results):
        seen = printable(", ".join(trace.dialects), newlines=False) or "none"
        lines.append(f"  note: no tool call recognised in this trace; span dialects seen: {seen}")
    if not all(run.content_captured for run in trace.runs):
        hints = (
            "; ".join(capture_hints(trace.dialects, declared)) or "the framework's content switch"
        )
        lines.append(
            "  note: no content captured (task, answer, tool arguments and results): calls "
            f"graded by span status alone, model checks skipped; turn capture on: {hints}"
        )
    return "\n".join(lines)
