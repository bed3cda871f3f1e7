"""`grade --trace-id` reuses the sidecar's stored grade only when nothing that changes a grade
differs, and says which it did (issue 24, item 4).

The store is a real SQLite store holding a real fixture trace and, for its run, a grade
marked so it can be told from a fresh one (its summary), as the sidecar leaves them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from attest_otel.adapt import runs_from_spans
from attest_otel.cli import main
from attest_otel.grade.grader import grade
from attest_otel.ingest.decode import decode_file
from attest_otel.store import StoredGrade, TraceStore
from tests.fakes.messages_server import MessagesServer
from tests.sources import shapes

NAME = "vercel__fallback"
MARK = "the grade the sidecar made"


@pytest.fixture(autouse=True)
def _no_model(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "ATTEST_OTEL_MODEL"):
        monkeypatch.delenv(name, raising=False)


def _store(path: Path, *, gaps: list[str] | None = None, name: str = NAME) -> str:
    decoded = decode_file(shapes.fixture(name))
    grades = []
    for trace in runs_from_spans(decoded.spans):
        for run in trace.runs:
            result = grade(run, judge=None).to_dict()
            result["summary"] = MARK
            if gaps is not None:  # the stored grade names these gaps, and no other
                result["metadata"]["gaps"] = gaps
                result["verdict"] = "review" if gaps else "pass"
            grades.append(StoredGrade(trace.trace_id, run.span_id or "", run.agent, 1, result))
    tid = shapes.trace_id_of(name)
    with TraceStore(path) as store:
        store.put_trace(tid, shapes.tempo_protobuf(name), len(decoded.spans), grades, now_ns=1)
    return tid


def _grade(path: Path, tid: str, *args: str) -> dict[str, Any]:
    out = CliRunner().invoke(
        main, ["grade", "--trace-id", tid, "--from", f"store:{path}", "--json", *args]
    )
    assert out.exit_code in (0, 1), out.output  # graded (a policy may fail the run)
    (run,) = json.loads(out.stdout)["traces"][0]["runs"]
    return dict(run)


def _text(path: Path, tid: str, *args: str) -> str:
    out = CliRunner().invoke(main, ["grade", "--trace-id", tid, "--from", f"store:{path}", *args])
    assert out.exit_code in (0, 1), out.output
    return out.stdout


def test_with_nothing_changed_the_stored_grade_is_reused_and_says_so(tmp_path: Path) -> None:
    tid = _store(tmp_path / "s.db")
    run = _grade(tmp_path / "s.db", tid)
    assert (run["stored_grade"], run["regraded"], run["result"]["summary"]) == (True, None, MARK)
    assert "(the grade the sidecar stored)" in _text(tmp_path / "s.db", tid)


def _policy(tmp: Path) -> Path:
    path = tmp / "policy.yaml"
    path.write_text("agents:\n  '*':\n    allowed_tools: null\n", encoding="utf-8")
    return path


def _dialects(tmp: Path) -> Path:
    path = tmp / "dialects.yaml"
    src = Path(__file__).resolve().parent.parent / "fixtures" / "dialects" / "handmade.yaml"
    path.write_text(src.read_text(encoding="utf-8"), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--policy", _policy),
        ("--dialects", _dialects),
        ("--allowed-tools", lambda _: "lookup_order,charge_card,charge_card_backup"),
        ("--fallback", lambda _: "charge_card=charge_card_backup"),
    ],
)
def test_a_reading_option_grades_again_and_says_which(
    tmp_path: Path, flag: str, value: Any
) -> None:
    tid = _store(tmp_path / "s.db")
    run = _grade(tmp_path / "s.db", tid, flag, str(value(tmp_path)))
    assert run["stored_grade"] is False
    assert run["regraded"] == f"{flag} given"
    assert run["result"]["summary"] != MARK
    text = _text(tmp_path / "s.db", tid, flag, str(value(tmp_path)))
    assert f"(graded again: {flag} given)" in text


@pytest.mark.parametrize("flag", ["--check-answer", "--appropriate"])
def test_a_model_check_asked_for_grades_again(
    tmp_path: Path, flag: str, monkeypatch: pytest.MonkeyPatch, messages_server: MessagesServer
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", messages_server.url)
    tid = _store(tmp_path / "s.db")
    run = _grade(tmp_path / "s.db", tid, flag)
    assert run["stored_grade"] is False
    assert run["regraded"] == f"{flag} given"
    assert run["result"]["metadata"]["model"] is not None
    if flag == "--appropriate":  # the tool-choice check ran: one answer per call
        assert all(f["metadata"]["appropriate"] is not None for f in run["result"]["findings"])


def test_a_model_that_became_available_grades_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, messages_server: MessagesServer
) -> None:
    tid = _store(tmp_path / "s.db")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", messages_server.url)
    run = _grade(tmp_path / "s.db", tid)
    assert run["stored_grade"] is False
    assert run["regraded"] == "a model is available now and the stored grade had none"


REFUSED = "A request of this trace was refused (5 MiB over the 4 MiB limit): spans are missing."


def test_a_gap_only_the_sidecar_knew_keeps_the_stored_review_and_survives_a_regrade(
    tmp_path: Path,
) -> None:
    tid = _store(tmp_path / "s.db", gaps=[REFUSED])
    run = _grade(tmp_path / "s.db", tid)
    assert (run["stored_grade"], run["result"]["verdict"]) == (True, "review")
    again = _grade(tmp_path / "s.db", tid, "--dialects", str(_dialects(tmp_path)))
    assert again["regraded"] == "--dialects given"
    assert again["result"]["verdict"] == "review"  # not a blind pass
    assert again["result"]["metadata"]["gaps"] == [REFUSED]


def test_a_run_that_reads_with_gaps_the_stored_grade_does_not_name_grades_again(
    tmp_path: Path,
) -> None:
    """A grade stored before gaps were found (a blind pass) is not reused."""
    tid = _store(tmp_path / "s.db", gaps=[], name="../gaps/asked_no_span")
    run = _grade(tmp_path / "s.db", tid)
    assert run["regraded"] == "the run reads with gaps the stored grade does not name"
    assert run["result"]["verdict"] == "review"
