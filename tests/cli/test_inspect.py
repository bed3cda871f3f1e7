"""`attest-otel inspect`: a user can tell from its output alone why a run came out as it did."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from attest_otel.cli import main

TRACES = Path(__file__).parents[1] / "fixtures" / "traces"


def _inspect(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["inspect", *args])
    return result.exit_code, result.stdout, result.stderr


def test_every_span_says_what_it_became_and_a_run_without_content_says_how_to_capture_it() -> None:
    code, out, _ = _inspect("--file", str(TRACES / "adk__unrecovered_claims.json"), "--json")
    assert code == 0
    (trace,) = json.loads(out)["traces"]
    became = {s["name"]: s["became"] for s in trace["spans"]}
    assert became["invoke_agent billing_agent"] == "run 0 (billing_agent)"
    assert became["execute_tool charge_card"] == "call 1 of run 0 (charge_card)"
    assert became["invoke_workflow billing_agent"].startswith("not a run")
    assert all(s["dialect"] == "adk" for s in trace["spans"])
    (run,) = trace["runs"]
    assert run["missing"][:2] == ["task", "final answer"]
    assert any("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT" in c for c in run["capture"])
    assert run["unread"] is False


def test_a_run_with_content_misses_only_the_result_of_the_call_that_raised() -> None:
    code, out, _ = _inspect("--file", str(TRACES / "crewai_openinference__retry.json"), "--json")
    assert code == 0
    (trace,) = json.loads(out)["traces"]
    (run,) = trace["runs"]
    assert run["agent"] == "billing_agent"
    # the raised charge_card never returned: its result is the only thing not there
    assert run["missing"] == ["tool results (1 of 3 calls)"]
    # content was recorded, so capture is on: no hint to turn it on
    assert run["capture"] == [] and run["unread"] is True
    assert [c["name"] for c in run["calls"]] == ["lookup_order", "charge_card", "charge_card"]


def test_spans_read_by_the_generic_reader_are_marked_as_a_guess() -> None:
    code, out, _ = _inspect("--file", str(TRACES / "haystack__retry.json"))
    assert code == 0
    assert "read as: generic" in out
    assert "the generic reader guessed" in out
    assert "(generic/tool) -> call 1 of run 0 (charge_card)" in out
    assert "haystack.pipeline.run  (-) -> not read: no dialect claims it" in out


def test_file_and_trace_id_exclude_each_other() -> None:
    code, _, err = _inspect("--file", "x.json", "--trace-id", "ab" * 16)
    assert code == 2
    assert err.strip().splitlines() == [
        "attest-otel: error: inspect takes --file PATH or --trace-id ID (they exclude each other)"
    ]


def test_json_over_a_file_of_many_traces_is_one_document(tmp_path: Path) -> None:
    both = tmp_path / "two.json"
    both.write_text(
        (TRACES / "adk__unrecovered_claims.json").read_text()
        + (TRACES / "crewai_openinference__retry.json").read_text()
    )
    code, out, _ = _inspect("--file", str(both), "--json")
    assert code == 0
    document = json.loads(out)  # one document, not a line per trace
    assert len(document["traces"]) == 2
    assert len({t["trace_id"] for t in document["traces"]}) == 2


def test_a_declared_dialect_says_how_to_turn_its_capture_on(tmp_path: Path) -> None:
    """A dialect file is a declaration like a built-in's: its `capture:` is the hint."""
    from tests.adapt.test_registry import _request

    trace = tmp_path / "toy.pb"
    trace.write_bytes(_request().SerializeToString())
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "dialects:\n"
        "  toyfile:\n"
        "    match: {attribute: toy.kind}\n"
        "    capture: TOY_RECORD_CONTENT=1\n"
        "    agent:\n"
        "      when: {attribute: {toy.kind: agent}}\n"
        "      name: toy.name\n"
        "    tool:\n"
        "      when: {attribute: {toy.kind: tool}}\n"
        "      name: toy.name\n"
    )
    code, out, err = _inspect("--policy", str(policy), "--file", str(trace), "--json")
    assert code == 0, err
    (found,) = json.loads(out)["traces"]
    (run,) = found["runs"]
    assert run["agent"] == "billing_agent"
    assert run["capture"] == ["toyfile: TOY_RECORD_CONTENT=1"]
    code, out, _ = _inspect("--policy", str(policy), "--file", str(trace))
    assert "turn capture on: toyfile: TOY_RECORD_CONTENT=1" in out
    graded = CliRunner().invoke(main, ["grade", "--policy", str(policy), "--file", str(trace)])
    assert "turn capture on: toyfile: TOY_RECORD_CONTENT=1" in graded.stdout, graded.output
