"""What every fuzz harness checks, whatever built the input: the decode -> adapt -> grade
contract. Used by the hypothesis tests and the atheris harnesses alike (no hypothesis here).

Contract: `decode_bytes` returns a `Decoded` or raises `InputError`; nothing else escapes.
Whatever decodes goes through `hydrate`, `runs_from_spans` and `grade(run, judge=None)`
without raising, and every run and result can be written as UTF-8 JSON (what the CLI and
exporters do with them). The safety nets (an ERROR record from `attest_otel`: the decoder's
for walker bugs, the assembler's for a trace it could not rebuild) count as failures too: they
protect production, but here they mean a check is missing.
"""

from __future__ import annotations

import json
import logging
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from attest_otel.adapt import runs_from_spans
from attest_otel.errors import InputError
from attest_otel.grade.grader import grade
from attest_otel.ingest.decode import Decoded, decode_bytes, hydrate, is_skeleton
from attest_otel.model import Run, read_runs, run_from_dict, run_to_dict

FUZZ_MAX_INFLATED_BYTES = 4 * 1024 * 1024
"""Fuzz inputs are small: a smaller inflate bound keeps a generated gzip bomb cheap."""


class WalkerBug(AssertionError):
    """A safety net caught an exception: a walker should have turned it into a proper
    `MalformedOTLP` message, or the assembler should have handled the trace."""


class _RaiseOnError(logging.Handler):
    """Collects ERROR records logged by this thread (a sidecar another test left running
    logs from its own threads: not ours)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.thread = threading.get_ident()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.thread == self.thread:
            self.records.append(record)


@contextmanager
def no_walker_bugs() -> Iterator[None]:
    """Fail (WalkerBug) if the decoders or the assembler logged an ERROR while the block ran."""
    handler = _RaiseOnError()
    logs = [logging.getLogger(name) for name in _WATCHED]
    for log in logs:
        log.addHandler(handler)
    try:
        yield
    finally:
        for log in logs:
            log.removeHandler(handler)
    if handler.records:
        record = handler.records[0]
        cause = record.exc_info[1] if record.exc_info else None
        raise WalkerBug(f"{record.name}: {record.getMessage()}") from cause


_WATCHED = ("attest_otel.ingest", "attest_otel.adapt", "attest_otel.grade")


def decode_or_refuse(
    data: bytes, content_type: str | None = None, *, lazy: bool = True
) -> Decoded | None:
    """The decoded input, or None when it was refused with an `InputError`."""
    try:
        with no_walker_bugs():
            return decode_bytes(
                data, content_type, lazy=lazy, max_inflated_bytes=FUZZ_MAX_INFLATED_BYTES
            )
    except InputError as exc:
        check_input_error(exc)
        return None


def check_input_error(exc: InputError) -> None:
    """An InputError is one line naming the source."""
    text = str(exc)
    assert "\n" not in text, text
    assert exc.source, text


def grade_decoded(decoded: Decoded) -> int:
    """Hydrate, adapt and grade everything in `decoded`; how many runs were graded."""
    for span in decoded.spans:
        if is_skeleton(span):
            try:
                with no_walker_bugs():
                    hydrate(span)
            except InputError as exc:  # lazily skipped attributes may be malformed
                check_input_error(exc)
    graded = 0
    with no_walker_bugs():
        traces = runs_from_spans(decoded.spans, decoded.logs)
    for trace in traces:
        for run in trace.runs:
            grade_run(run)
            graded += 1
    return graded


def grade_run(run: Run) -> None:
    """Grade offline and write run and result as UTF-8 JSON, as the CLI would."""
    result = grade(run, judge=None)
    _utf8_json(run_to_dict(run))
    _utf8_json(result.to_dict())


def _utf8_json(value: Any) -> None:
    json.dumps(value, ensure_ascii=False, default=str).encode("utf-8")


def exercise_otlp(data: bytes, content_type: str | None = None, *, lazy: bool = True) -> int:
    """The whole contract for one OTLP body; runs graded (0 when refused)."""
    decoded = decode_or_refuse(data, content_type, lazy=lazy)
    if decoded is None:
        return 0
    assert decoded.span_count == len(decoded.spans)
    return grade_decoded(decoded)


def exercise_run_text(text: bytes, suffix: str, directory: Path | None = None) -> int:
    """The contract for one run file (`.json` or `.jsonl`): `read_runs` returns runs or
    raises InputError; every run grades. Runs graded."""
    with tempfile.TemporaryDirectory(dir=directory) as tmp:
        path = Path(tmp) / f"run{suffix}"
        path.write_bytes(text)
        return exercise_run_file(path)


def exercise_run_file(path: Path) -> int:
    """`exercise_run_text` on a file already written."""
    try:
        runs = read_runs(path)
    except InputError as exc:
        check_input_error(exc)
        return 0
    for run in runs:
        grade_run(run)
    return len(runs)


def exercise_run_value(value: Any) -> bool:
    """`run_from_dict` on any JSON value: a run that grades, or an InputError."""
    try:
        run = run_from_dict(value)
    except InputError:
        return False
    grade_run(run)
    return True
