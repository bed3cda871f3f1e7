"""The shared PostgreSQL store, against a real server: the SQLite store's interface, plus what
a fleet needs (migrations under concurrency, parts stored once, grades from the union,
the report counted in SQL equal to the report counted in Python, a writer that waits out
the database)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from attest_otel.cli import main
from attest_otel.errors import SourceError, UsageError
from attest_otel.pipeline import Reading, grade_traces
from attest_otel.policy import load_policy
from attest_otel.report import stats as reporting
from attest_otel.store import StoredGrade, open_store, open_writer, part_digest
from attest_otel.store.postgres import PostgresStore
from attest_otel.store.shared_writer import SharedStoreWriter
from tests.pg import Postgres

NS = 1_000_000_000
TRACES = Path(__file__).parents[1] / "fixtures" / "traces"


def _grade(trace_id: str, span_id: str, verdict: str = "pass", **extra: Any) -> StoredGrade:
    return StoredGrade(
        trace_id,
        span_id,
        "agent",
        5,
        {
            "check": "tool_use",
            "passed": verdict == "pass",
            "verdict": verdict,
            "score": 1.0,
            "summary": "ok",
            "findings": [],
            "metadata": {},
            **extra,
        },
    )


def _store(postgres: Postgres, **kw: Any) -> PostgresStore:
    opened = open_store(postgres.database(), **kw)
    assert isinstance(opened, PostgresStore)
    return opened


def test_parts_are_stored_once_and_a_write_that_missed_a_part_is_stale(postgres: Postgres) -> None:
    with _store(postgres) as store:
        tid = "ab" * 16
        assert store.put_trace(tid, b"\x0a\x01x", 1, [_grade(tid, "01" * 8)], now_ns=NS) == []
        assert store.put_trace(tid, b"\x0a\x01x", 1, [_grade(tid, "01" * 8)]) == []  # replay
        # another sidecar's part, graded alone: stale, the trace must be graded from both
        assert store.put_trace(tid, b"\x0a\x01y", 2, [_grade(tid, "02" * 8)]) == [tid]
        got = store.get_trace(tid.upper())
        assert got is not None
        assert (got.data, got.span_count) == (b"\x0a\x01x\x0a\x01y", 3)
        assert got.parts == (part_digest(b"\x0a\x01x"), part_digest(b"\x0a\x01y"))
        # the union's grade: one run, the partial run's grade goes
        assert (
            store.put_trace(
                tid, b"", 0, [_grade(tid, "01" * 8, "fail")], basis=got.parts, runs=["01" * 8]
            )
            == []
        )
        # a late write from a smaller span set does not replace it
        store.put_trace(
            tid, b"", 0, [_grade(tid, "01" * 8, "pass")], basis=[part_digest(b"\x0a\x01x")]
        )
        again = store.get_trace(tid)
        assert again is not None
        assert [(g.span_id, g.result["verdict"]) for g in again.grades] == [("01" * 8, "fail")]
        assert store.get_trace("cd" * 16) is None


def test_retention_by_age_oldest_first(postgres: Postgres) -> None:
    # by size: tests/store/test_disk_cap.py (the cap counts the tables' size on disk)
    with _store(postgres, max_age_s=125) as store:
        for i in range(5):
            store.put_trace(
                f"{i:032x}",
                bytes([i]) * 100,
                1,
                [_grade(f"{i:032x}", "01" * 8)],
                now_ns=(1000 + i * 10) * NS,
            )
        assert store.prune(now_ns=1155 * NS) == 3  # age removes traces 0, 1 and 2
        assert store.trace_ids() == [f"{4:032x}", f"{3:032x}"]
        assert {g.trace_id for g in store.grades_since()} == {f"{4:032x}", f"{3:032x}"}
        assert store.stats() == (2, 200)


def test_sidecars_starting_together_migrate_once(postgres: Postgres) -> None:
    url = postgres.database()
    errors: list[BaseException] = []

    def one() -> None:
        try:
            open_store(url).close()
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=one) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT version FROM attest_schema ORDER BY 1").fetchall() == [
            (1,),
            (2,),
            (3,),
        ]


def test_bad_url_and_unreachable_database_are_one_line_errors(postgres: Postgres) -> None:
    with pytest.raises(UsageError, match="bad port"):
        open_store("postgresql://u:secret@h:xx/db")
    with pytest.raises(SourceError, match="cannot connect") as caught:
        open_store("postgresql://u:secret@127.0.0.1:1/db")
    assert "secret" not in str(caught.value) and "\n" not in str(caught.value)
    with pytest.raises(SourceError, match="no attest-otel store"):
        open_store(postgres.url(), readonly=True)
    runner = CliRunner()
    for args in (
        ["report", "--from", "store:postgresql://u:secret@127.0.0.1:1/db"],
        ["grade", "--trace-id", "ab" * 16, "--store", "postgresql://u:secret@h:x/d"],
    ):
        result = runner.invoke(main, args)
        assert result.exit_code == 2, result.output
        assert result.stderr.count("\n") == 1 and "secret" not in result.stderr


def _fixture_grades(limit: int = 80) -> list[StoredGrade]:
    """Real grades, of labelled fixtures with their label's policy: varied findings."""
    from attest_otel.grade.grader import grade
    from attest_otel.pipeline import read_file
    from tests.fixtures.labels import reading_for

    out: list[StoredGrade] = []
    for n, label_path in enumerate(sorted(TRACES.glob("*.labels.json"))[:limit]):
        label = json.loads(label_path.read_text())
        trace = label_path.with_name(label_path.name.replace(".labels.json", ".json"))
        for t in read_file(trace, reading_for(label)):
            for i, run in enumerate(t.runs):
                out.append(
                    StoredGrade(
                        run.trace_id or f"{n:032x}",
                        run.span_id or f"{i:016x}",
                        run.agent,
                        (n * 1234 + 7) * NS,
                        grade(run, judge=None).to_dict(),
                    )
                )
    return out


def _same_report(store: PostgresStore) -> None:
    """Windows with whole hours inside (tallies) and without (rows only), edges mid-hour."""
    for since, until in (
        (None, 10**6 * NS),
        (20_000 * NS, 90_000 * NS),
        (30_100 * NS, 31_000 * NS),
        (7_200 * NS, 14_399 * NS),
    ):
        counted = store.summary(since, until, limit=7)
        from_sql = reporting.report_from_counts(counted, since_ns=since, until_ns=until, limit=7)
        records = [
            reporting.GradeRecord(g.trace_id, g.agent, g.graded_ns, g.result, g.span_id)
            for g in store.grades_since(since)
        ]
        from_rows = reporting.build_report(records, since_ns=since, until_ns=until, limit=7)
        assert from_sql.to_dict() == from_rows.to_dict(), (since, until)


def test_report_counted_in_sql_equals_report_counted_in_python(postgres: Postgres) -> None:
    grades = _fixture_grades()
    assert len(grades) > 80
    with _store(postgres, max_age_s=50_000) as store:
        by_trace: dict[str, list[StoredGrade]] = {}
        for g in grades:
            by_trace.setdefault(g.trace_id, []).append(g)
        store.put_many([(tid, b"", 0, gs, None, None) for tid, gs in by_trace.items()], now_ns=1)
        full = store.summary(None, 10**6 * NS)
        assert sum(n for _, _, n in full.agents) == len(grades) and full.worst
        _same_report(store)
        # grades replaced (a regrade, later and failing), partial runs deleted, then pruned:
        # the tallies follow every change
        tids = sorted(by_trace)
        for tid in tids[:10]:
            first = by_trace[tid][0]
            store.put_trace(
                tid,
                b"",
                0,
                [
                    StoredGrade(
                        tid,
                        first.span_id,
                        first.agent,
                        95_000 * NS,
                        {**first.result, "passed": False, "verdict": "fail"},
                    )
                ],
                runs=[first.span_id],
                now_ns=1,
            )
        _same_report(store)
        for tid in tids[-20:]:
            store.put_trace(tid, b"x", 1, now_ns=10**9 * NS)  # kept: recently updated
        assert store.prune(now_ns=50_001 * NS) == len(tids) - 20
        _same_report(store)


def test_the_cli_reads_the_shared_store(postgres: Postgres, tmp_path: Path) -> None:
    url = postgres.database()
    policy = tmp_path / "p.yaml"
    policy.write_text("agents: {}\n")
    from tests.sidecar.test_wire import _fixture_requests

    data = b"".join(_fixture_requests(TRACES / "adk__multi_agent.json"))
    from attest_otel.ingest.decode import decode_bytes

    decoded = decode_bytes(data, "application/x-protobuf", source="x")
    graded = grade_traces(decoded.spans, decoded.logs, Reading(load_policy(policy)))
    tid = decoded.spans[0].trace_id
    with open_store(url) as store:
        assert isinstance(store, PostgresStore)
        store.put_trace(
            tid,
            data,
            len(decoded.spans),
            [
                StoredGrade(
                    tid, one.run.span_id or "", one.run.agent, time.time_ns(), one.result.to_dict()
                )
                for g in graded
                for one in g.runs
            ],
        )
    runner = CliRunner()
    result = runner.invoke(main, ["grade", "--json", "--trace-id", tid, "--store", url])
    assert result.exit_code in (0, 1), result.output
    assert len(json.loads(result.stdout)["traces"][0]["runs"]) == 2
    result = runner.invoke(main, ["grade", "--json", "--since", "1h", "--from", f"store:{url}"])
    assert result.exit_code in (0, 1), result.output
    result = runner.invoke(
        main, ["report", "--json", "--from", f"store:{url}", "--html", str(tmp_path / "r.html")]
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["runs"]["total"] == 2
    assert "support_agent" in (tmp_path / "r.html").read_text()
    result = runner.invoke(main, ["inspect", "--trace-id", tid, "--from", f"store:{url}"])
    assert result.exit_code == 0, result.output


def test_the_writer_waits_out_the_database_then_refuses_when_full(
    postgres: Postgres, tmp_path: Path
) -> None:
    store = _store(postgres)
    writer = open_writer(store, spool_dir=tmp_path / "q", max_queue_bytes=64 * 1024)
    assert isinstance(writer, SharedStoreWriter)
    writer.start()
    writer.put("aa" * 16, b"\x0a\x01a", 1, [_grade("aa" * 16, "01" * 8)])
    assert writer.flush(10)
    postgres.stop()
    try:
        for i in range(200):  # ~1.5 KiB each: the queue fills, the rest are refused
            writer.put(f"{i:032x}", b"\x0a\x01b" * 300, 1, [_grade(f"{i:032x}", "01" * 8)])
        assert writer.dropped > 0 and writer.backlog() is not None
        assert writer.pending > 10
        writer.close(timeout_s=0.5)  # still down: what waits stays on disk
        assert list((tmp_path / "q").glob("q-*.log"))
    finally:
        postgres.start()
    waited = 200 - writer.dropped
    again = open_writer(open_store(store.url), spool_dir=tmp_path / "q")
    assert isinstance(again, SharedStoreWriter) and again.replayed == waited
    again.start()
    assert again.flush(20)
    assert len(again.store.grades_since()) == 1 + waited
    again.close()
    assert not [p for p in (tmp_path / "q").glob("q-*.log") if p.stat().st_size]
