"""`file:` and `store:` sources: one trace out of many, and the store's read-only queries."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from attest_otel.errors import SourceError
from attest_otel.ingest.decode import hydrate
from attest_otel.sources import TraceNotFoundError, fetch, parse_source
from attest_otel.sources.file import FileSource
from attest_otel.sources.store_source import StoreSource
from attest_otel.store import StoredGrade, TraceStore
from tests.sources import shapes

A, B = "vercel__fallback", "strands__multi_agent"
HOUR_NS = 3600 * 10**9


def test_a_file_holding_several_traces_gives_only_the_one_asked_for(tmp_path: Path) -> None:
    both = tmp_path / "export.jsonl"
    both.write_text(shapes.fixture(A).read_text() + "\n" + shapes.fixture(B).read_text())
    source = FileSource(both)

    got = [hydrate(s) for s in source.fetch(shapes.trace_id_of(B)).spans]
    assert got == shapes.original_spans(B)
    assert source.trace_ids() == [shapes.trace_id_of(A), shapes.trace_id_of(B)]


def test_a_trace_missing_from_the_file_is_one_line_naming_the_file(tmp_path: Path) -> None:
    path = shapes.fixture(A)
    with pytest.raises(TraceNotFoundError) as caught:
        fetch("0af7651916cd43dd8448eb211c80319c", f"file:{path}")
    assert (
        str(caught.value) == f"trace ID 0af7651916cd43dd8448eb211c80319c not found in file {path}"
    )


def _store(tmp_path: Path) -> Path:
    path = tmp_path / "store.db"
    with TraceStore(path) as store:
        for i, name in enumerate((A, B)):
            tid = shapes.trace_id_of(name)
            result = {
                "check": "tool_use",
                "passed": i == 0,
                "verdict": "pass" if i == 0 else "fail",
                "score": 1.0 - i / 2,
                "summary": "",
                "findings": [],
                "metadata": {},
            }
            store.put_trace(
                tid,
                shapes.tempo_protobuf(name),
                1,
                [StoredGrade(tid, "a" * 16, "agent", (10 + i) * HOUR_NS, result)],
                now_ns=(10 + i) * HOUR_NS,
            )
    return path


def test_the_store_gives_back_a_trace_by_id_as_it_was_received(tmp_path: Path) -> None:
    source = parse_source(f"store:{_store(tmp_path)}")
    got = [hydrate(s) for s in source.fetch(shapes.trace_id_of(B)).spans]
    assert got == shapes.original_spans(B)


def test_a_trace_missing_from_the_store_is_not_found(tmp_path: Path) -> None:
    path = _store(tmp_path)
    with pytest.raises(TraceNotFoundError, match=f"not found in the store {path}$"):
        fetch("0af7651916cd43dd8448eb211c80319c", f"store:{path}")


def test_a_store_path_with_no_store_says_so(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="no trace store here"):
        StoreSource(tmp_path / "nothing.db").trace_ids_since(0)


def test_traces_received_since_a_moment_are_listed_oldest_first(tmp_path: Path) -> None:
    source = StoreSource(_store(tmp_path))
    assert source.trace_ids_since(0) == [shapes.trace_id_of(A), shapes.trace_id_of(B)]
    assert source.trace_ids_since(11 * HOUR_NS) == [shapes.trace_id_of(B)]
    assert source.trace_ids_since(12 * HOUR_NS) == []


def test_grades_since_a_moment_come_with_agent_trace_and_time(tmp_path: Path) -> None:
    source = StoreSource(_store(tmp_path))
    rows = source.grades_since(11 * HOUR_NS)
    assert [(r.trace_id, r.agent, r.graded_ns, r.result["verdict"]) for r in rows] == [
        (shapes.trace_id_of(B), "agent", 11 * HOUR_NS, "fail")
    ]
    assert len(source.grades_since(None)) == 2


def test_reading_the_store_never_writes_to_it(tmp_path: Path) -> None:
    path = _store(tmp_path)
    path.chmod(0o444)
    try:
        source = StoreSource(path)
        assert len(source.grades_since(None)) == 2
        db = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            db.execute("DELETE FROM grades")
        db.close()
    finally:
        path.chmod(0o644)
