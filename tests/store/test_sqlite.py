"""The embedded trace and grade store."""

from __future__ import annotations

from pathlib import Path

import pytest

from attest_otel.errors import SourceError
from attest_otel.store import StoredGrade, StoreWriter, TraceStore

NS = 1_000_000_000


def _grade(trace_id: str, span_id: str, verdict: str = "pass") -> StoredGrade:
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
        },
    )


def test_a_trace_and_its_grades_come_back_and_late_spans_are_appended(tmp_path: Path) -> None:
    with TraceStore(tmp_path / "s.db") as store:
        store.put_trace("ab" * 16, b"\x0a\x01x", 1, [_grade("ab" * 16, "01" * 8)], now_ns=NS)
        store.put_trace("ab" * 16, b"\x0a\x01y", 2, now_ns=2 * NS)
        got = store.get_trace("AB" * 16)
        assert got is not None
        assert (got.data, got.span_count, got.first_ns, got.updated_ns) == (
            b"\x0a\x01x\x0a\x01y",
            3,
            NS,
            2 * NS,
        )
        assert [g.result["verdict"] for g in got.grades] == ["pass"]
        store.put_trace("ab" * 16, b"", 0, [_grade("ab" * 16, "01" * 8, "fail")], now_ns=3 * NS)
        regraded = store.get_trace("ab" * 16)
        assert regraded is not None and [g.result["verdict"] for g in regraded.grades] == ["fail"]
        assert store.get_trace("cd" * 16) is None


def test_retention_by_age_oldest_first(tmp_path: Path) -> None:
    # by size: tests/store/test_disk_cap.py (the cap counts the store's size on disk)
    with TraceStore(tmp_path / "s.db", max_age_s=125) as store:
        for i in range(5):
            store.put_trace(f"{i:032x}", b"x" * 100, 1, now_ns=(1000 + i * 10) * NS)
        assert store.prune(now_ns=1155 * NS) == 3  # age removes traces 0, 1 and 2
        assert sorted(store.trace_ids()) == [f"{3:032x}", f"{4:032x}"]


def test_the_writer_thread_writes_and_closes(tmp_path: Path) -> None:
    store = TraceStore(tmp_path / "s.db")
    writer = StoreWriter(store)
    writer.start()
    for i in range(20):
        writer.put(f"{i:032x}", b"data", 1)
    writer.close()
    with TraceStore(tmp_path / "s.db", readonly=True) as again:
        assert again.stats() == (20, 80)


def test_reading_a_store_that_does_not_exist_is_a_source_error(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="no trace store"):
        TraceStore(tmp_path / "missing.db", readonly=True)


def test_a_grade_comes_back_as_it_was_stored_even_with_what_orjson_refuses(
    tmp_path: Path,
) -> None:
    plain = _grade("ab" * 16, "01" * 8)
    plain.result["summary"] = "Ünïcode, kept as text"
    huge = _grade("cd" * 16, "02" * 8)
    huge.result["metadata"] = {"order": 2**70, 3: "an integer key"}
    with TraceStore(tmp_path / "s.db") as store:
        store.put_trace("ab" * 16, b"\x0a\x01x", 1, [plain], now_ns=NS)
        store.put_trace("cd" * 16, b"\x0a\x01y", 1, [huge], now_ns=NS)
        first, second = store.get_trace("ab" * 16), store.get_trace("cd" * 16)
    assert first is not None and first.grades[0].result == plain.result
    assert second is not None
    assert second.grades[0].result["metadata"] == {"order": 2**70, "3": "an integer key"}
