"""The CLI pieces, wired into a click group the way `cli.py` wires them: `grade --trace-id
--from`, `grade --since` with its progress bar, `report`, and the option parsing.

`--from jaeger:` reads the real Jaeger v2 of tests/sources/conftest.py (skipped where it is
not built); the fake backend stays for Tempo (AGPL, not built here: tests/sources/test_tempo.py)
and for a request that must never be sent."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from attest_otel.adapt import runs_from_spans
from attest_otel.cli import main
from attest_otel.cli.sources import (
    load_trace,
    parse_duration,
    progress,
)
from attest_otel.errors import UsageError
from attest_otel.grade.grader import grade
from attest_otel.ingest.decode import decode_file
from attest_otel.store import StoredGrade, TraceStore
from tests.peers.servers import Jaeger
from tests.sources import shapes
from tests.sources.fake_http import FakeBackend
from tests.sources.real_jaeger import relay

NAMES = ["vercel__fallback", "vercel__unrecovered_ignores", "strands__disallowed"]


cli = main


def _invoke(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90s", 90),
        ("30m", 1800),
        ("24h", 86400),
        ("7d", 604800),
        ("2w", 1209600),
        ("1h30m", 5400),
        ("0.5h", 1800),
    ],
)
def test_durations_read_as_a_number_and_a_unit(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("bad", ["", "24", "h", "1x", "0m", "1h 30m"])
def test_a_duration_without_a_unit_is_a_usage_error(bad: str) -> None:
    with pytest.raises(UsageError):
        parse_duration(bad)


def test_grade_by_trace_id_from_jaeger_prints_the_same_grade_as_the_file(
    backend: FakeBackend, jaeger: Jaeger
) -> None:
    # The real Jaeger's answer, through a relay that records the headers it was sent.
    name = "vercel__unrecovered_ignores"
    tid = shapes.trace_id_of(name)
    backend.routes[f"/api/v3/traces/{tid}"] = relay(jaeger)

    result = _invoke(
        "grade",
        "--trace-id",
        tid,
        "--from",
        f"jaeger:{backend.url}",
        "--json",
        "--header",
        "Authorization=Bearer t0ken",
    )

    assert result.exit_code == 1  # the run has an unrecovered error: graded, and failed
    (trace,) = json.loads(result.output)["traces"]
    decoded = decode_file(shapes.fixture(name))
    expected = [
        grade(r, judge=None).to_dict() for t in runs_from_spans(decoded.spans) for r in t.runs
    ]
    assert trace["trace_id"] == tid
    assert [r["result"] for r in trace["runs"]] == expected
    assert backend.requests[0].headers["authorization"] == "Bearer t0ken"


def test_grade_by_unknown_trace_id_is_one_line_and_exit_2(backend: FakeBackend) -> None:
    tid = "0af7651916cd43dd8448eb211c80319c"
    result = _invoke("grade", "--trace-id", tid, "--from", f"tempo:{backend.url}")
    assert result.exit_code == 2
    assert (
        result.stderr == f"attest-otel: error: trace ID {tid} not found in tempo at {backend.url}\n"
    )


def test_a_bad_header_is_a_usage_error_before_any_request(backend: FakeBackend) -> None:
    result = _invoke(
        "grade", "--trace-id", "abc", "--from", f"jaeger:{backend.url}", "--header", "nonsense"
    )
    assert result.exit_code == 2
    assert "expected NAME=VALUE" in result.stderr
    assert backend.requests == []


def _store_with_grades(path: Path, *, graded_ns: int) -> list[str]:
    """The fixtures in a store as the sidecar leaves them: spans, and each run's grade."""
    tids = []
    with TraceStore(path) as store:
        for i, name in enumerate(NAMES):
            decoded = decode_file(shapes.fixture(name))
            grades = []
            for trace in runs_from_spans(decoded.spans):
                for run in trace.runs:
                    grades.append(
                        StoredGrade(
                            trace.trace_id,
                            run.span_id or "",
                            run.agent,
                            graded_ns + i,
                            grade(run, judge=None).to_dict(),
                        )
                    )
            tid = shapes.trace_id_of(name)
            store.put_trace(
                tid, shapes.tempo_protobuf(name), len(decoded.spans), grades, now_ns=graded_ns + i
            )
            tids.append(tid)
    return tids


def test_grade_since_grades_every_trace_of_the_window_from_the_store(tmp_path: Path) -> None:
    import time

    path = tmp_path / "store.db"
    tids = _store_with_grades(path, graded_ns=time.time_ns() - 3600 * 10**9)
    result = _invoke("grade", "--since", "2h", "--from", f"store:{path}", "--json")
    assert [t["trace_id"] for t in json.loads(result.output)["traces"]] == tids
    assert result.exit_code == 1

    result = _invoke("grade", "--since", "30m", "--from", f"store:{path}")
    assert result.exit_code == 2  # an empty window must not pass a CI gate
    assert "no traces in that window" in result.stderr


def test_grade_needs_a_trace_id_or_a_window_but_not_both() -> None:
    result = _invoke("grade", "--trace-id", "ab", "--since", "1h", "--from", "file:x.json")
    assert result.exit_code == 2
    assert "--trace-id and --since exclude each other" in result.stderr
    assert len(result.stderr.splitlines()) == 1


def test_since_over_jaeger_says_to_search_there_first(backend: FakeBackend) -> None:
    result = _invoke("grade", "--since", "1h", "--from", f"jaeger:{backend.url}")
    assert result.exit_code == 2
    assert "--since works with store: and file: sources, not jaeger" in result.stderr


def test_the_progress_bar_shows_on_a_terminal_only() -> None:
    runner = CliRunner()

    @click.command()
    @click.option("--tty", is_flag=True)
    def walk(tty: bool) -> None:
        for _ in progress(list(range(3)), "grading 3 traces", enabled=tty or None):
            pass

    assert "grading 3 traces" in runner.invoke(walk, ["--tty"]).stderr
    assert runner.invoke(walk, []).stderr == ""  # CliRunner's stderr is no terminal


def test_load_trace_reads_a_file_source_by_id() -> None:
    name = "vercel__fallback"
    decoded = load_trace(shapes.trace_id_of(name), f"file:{shapes.fixture(name)}")
    assert [s.span_id for s in decoded.spans] == [s.span_id for s in shapes.original_spans(name)]


def test_report_reads_the_stores_grades_of_the_window(tmp_path: Path) -> None:
    import time

    path = tmp_path / "store.db"
    tids = _store_with_grades(path, graded_ns=time.time_ns() - 3600 * 10**9)

    data = json.loads(_invoke("report", "--from", f"store:{path}", "--json").output)
    assert data["runs"]["total"] == 3
    assert data["runs"]["passed"] == 1
    assert data["runs"]["interval"] == [
        pytest.approx(0.0615, abs=5e-5),
        pytest.approx(0.7923, abs=5e-5),
    ]
    assert {w["trace_id"] for w in data["worst_runs"]} == set(tids[1:])

    text = _invoke("report", "--from", f"store:{path}", "--since", "7d").output
    assert "Runs passed: 1/3 = 33.3% (95% CI 6.1% - 79.2%)" in text
    assert "Worst runs" in text

    empty = _invoke("report", "--from", f"store:{path}", "--since", "10m").output
    assert "No graded runs in this window." in empty


def test_report_from_anything_but_the_store_is_a_usage_error() -> None:
    result = _invoke("report", "--from", "jaeger:http://localhost:16686")
    assert result.exit_code == 2
    assert "report reads grades from the store" in result.stderr


def test_export_sends_the_grade_back_into_the_trace_under_the_agent_span(
    jaeger: Jaeger, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.fakes.otlp_server import OtlpGrpcReceiver

    name = "vercel__unrecovered_ignores"
    tid = shapes.trace_id_of(name)
    decoded = decode_file(shapes.fixture(name))
    (run,) = [r for t in runs_from_spans(decoded.spans) for r in t.runs]

    with OtlpGrpcReceiver() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")

        result = _invoke("grade", "--trace-id", tid, "--from", f"jaeger:{jaeger.url}", "--export")
        assert result.exit_code == 1, result.output  # graded, and the run failed
        assert receiver.wait_for(lambda r: len(r.spans()) == 1, timeout=10)

    (span,) = receiver.spans()
    assert span.name == "attest.grade"
    assert span.trace_id.hex() == tid
    assert span.parent_span_id.hex() == run.span_id
    assert result.stderr.startswith("sent ")
    assert "error_silent" in result.stdout


def test_config_gives_the_sidecars_store_to_grade_inspect_and_report(tmp_path: Path) -> None:
    import time

    path = tmp_path / "sidecar-store.db"
    tids = _store_with_grades(path, graded_ns=time.time_ns() - 60 * 10**9)
    config = tmp_path / "attest-otel.yaml"
    config.write_text(f"forward:\n  endpoint: http://127.0.0.1:1\nstore:\n  path: {path}\n")
    result = _invoke("grade", "--since", "1h", "--config", str(config), "--json")
    assert [t["trace_id"] for t in json.loads(result.output)["traces"]] == tids
    result = _invoke("inspect", "--trace-id", tids[0], "--config", str(config), "--json")
    assert result.exit_code == 0, result.stderr
    assert [t["trace_id"] for t in json.loads(result.output)["traces"]] == [tids[0]]
    result = _invoke("report", "--since", "1h", "--config", str(config), "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.output)["runs"]["total"] > 0

    # A flag still wins over the config; a broken config is one line and exit 2.
    other = tmp_path / "other.db"
    result = _invoke("grade", "--since", "1h", "--config", str(config), "--from", f"store:{other}")
    assert result.exit_code == 2 and f"{other}: no trace store here" in result.stderr
    config.write_text("forward: {endpoint: http://127.0.0.1:1}\nstore: {paht: x}\n")
    result = _invoke("report", "--config", str(config))
    assert result.exit_code == 2
    assert len(result.stderr.splitlines()) == 1 and "store.paht" in result.stderr
