"""What a grading process sends back when the store keeps its results: each result encoded
as the store writes it, and the run and result light (`grading_worker.Light`). The store must hold
the same text, the metrics and the log line read the same values, as when the whole run and
result came back and the result was encoded in the receiving process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attest_otel.export.results import finding_span_id
from attest_otel.sidecar import grading_worker as grading
from attest_otel.store import StoredGrade, TraceStore
from attest_otel.store.records import encode_result
from tests.sidecar.test_annotation_bytes import _requests


@pytest.fixture(scope="module")
def answers() -> list[tuple[tuple, tuple]]:  # type: ignore[type-arg]
    grading.init_worker(None, grading.KEEP)
    out = []
    clock = pytest.MonkeyPatch()
    clock.setattr(grading.time, "time_ns", lambda: 1_700_000_000 * 10**9)  # the records' time
    for data in _requests():
        whole = grading.grade_in_worker(data, "trace", True, b"", ["a gap"])
        light = grading.grade_in_worker(data, "trace", True, b"", ["a gap"], True)
        out.append((whole, light))
    clock.undo()
    assert any(whole[1] for whole, _ in out), "no run graded: the test would prove nothing"
    return out


def test_the_encoded_answer_forwards_and_logs_the_same_bytes(answers: list) -> None:  # type: ignore[type-arg]
    for whole, light in answers:
        assert light[0] == whole[0]  # the annotated trace
        assert light[2] == whole[2]  # its evaluation log records
        assert whole[3] is None and light[1] == []


def test_each_result_is_encoded_as_the_store_would_and_light_keeps_what_is_read(
    answers: list,  # type: ignore[type-arg]
) -> None:
    for whole, light in answers:
        texts = [text for text, _ in light[3]]
        assert texts == [encode_result(result.to_dict()) for _, result in whole[1]]
        rebuilt = [grading.from_light(one) for _, one in light[3]]
        for (run, result), (lrun, lresult) in zip(whole[1], rebuilt, strict=True):
            assert (lrun.trace_id, lrun.span_id, lrun.agent, lrun.gaps) == (
                run.trace_id,
                run.span_id,
                run.agent,
                run.gaps,
            )
            assert (
                lresult.check,
                lresult.passed,
                lresult.verdict,
                lresult.score,
                len(lresult.findings),
            ) == (result.check, result.passed, result.verdict, result.score, len(result.findings))
            for finding, lfinding in zip(result.findings, lresult.findings, strict=True):
                assert (lfinding.subject, lfinding.verdict, lfinding.severity) == (
                    finding.subject,
                    finding.verdict,
                    finding.severity,
                )
                assert lfinding.metadata.get("recovery") == finding.metadata.get("recovery")
                assert finding_span_id(lrun, lfinding) == finding_span_id(run, finding)


def test_a_grade_given_as_text_is_stored_and_read_as_one_given_as_its_dict(
    answers: list,  # type: ignore[type-arg]
    tmp_path: Path,
) -> None:
    with TraceStore(tmp_path / "a.db") as a, TraceStore(tmp_path / "b.db") as b:
        for i, (whole, light) in enumerate(answers):
            tid = f"{i:032x}"
            by_dict = [
                StoredGrade(tid, run.span_id or "", run.agent, 7, result.to_dict())
                for run, result in whole[1]
            ]
            by_text = [
                StoredGrade(
                    tid,
                    run.span_id or "",
                    run.agent,
                    7,
                    encoded=text,
                    verdict=result.verdict,
                    score=result.score,
                )
                for text, (run, result) in (
                    (text, grading.from_light(one)) for text, one in light[3]
                )
            ]
            assert [(g.verdict, g.score) for g in by_text] == [
                (g.verdict, g.score) for g in by_dict
            ]
            a.put_trace(tid, whole[0], 1, by_dict, now_ns=5)
            b.put_trace(tid, whole[0], 1, by_text, now_ns=5)
        query = "SELECT trace_id, span_id, agent, graded_ns, verdict, score, result FROM grades"
        assert sorted(b._db.execute(query)) == sorted(a._db.execute(query))
        for tid in a.trace_ids(1000):
            assert b.get_trace(tid) == a.get_trace(tid)


def test_a_text_grade_decodes_its_result_only_when_asked() -> None:
    result = {"verdict": "fail", "score": 0.25, "findings": [{"subject": "t"}], "metadata": {}}
    text = encode_result(result)
    grade = StoredGrade("t" * 32, "s" * 16, None, 1, encoded=text, verdict="fail", score=0.25)
    assert grade.result_json() is text
    assert grade.result == json.loads(text) == result
    assert grade == StoredGrade("t" * 32, "s" * 16, None, 1, result)
    with pytest.raises(AttributeError):
        grade.agent = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        StoredGrade("t" * 32, "s" * 16, None, 1)
