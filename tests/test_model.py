"""attest's run files in, finding JSON out; bad files name the file, the line and the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attest_otel.errors import InputError
from attest_otel.model import output_text, read_runs, run_from_dict, run_to_dict, unknown_keys

EXAMPLES = Path(__file__).parents[1] / "examples" / "runs"


def test_a_json_file_holds_one_run_read_field_by_field() -> None:
    [run] = read_runs(EXAMPLES / "fallback.json")
    assert run.task == "Refund order 42 to the customer's card."
    assert run.allowed_tools == ["lookup_order", "charge_card", "charge_card_backup"]
    assert run.tool_fallbacks == {"charge_card": ["charge_card_backup"]}
    assert [s.thought for s in run.steps] == ["Find the order first.", None, None]
    call = run.steps[1].tool_call
    assert call is not None
    assert (call.name, call.arguments, call.output, call.is_error) == (
        "charge_card",
        {"order": 42},
        "status 402",
        True,
    )
    assert run.final_answer == "Refunded 19.50 to the customer's card."


def test_a_jsonl_file_holds_one_run_per_line_and_skips_blank_lines(tmp_path: Path) -> None:
    p = tmp_path / "runs.jsonl"
    p.write_text('{"task": "a"}\n\n{"task": "b", "allowed_tools": []}\n')
    runs = read_runs(p)
    assert [r.task for r in runs] == ["a", "b"]
    assert [r.allowed_tools for r in runs] == [None, []]


def test_absent_and_null_allowed_tools_both_allow_everything() -> None:
    assert run_from_dict({}).allowed_tools is None
    assert run_from_dict({"allowed_tools": None}).allowed_tools is None


def test_unknown_keys_are_ignored_so_attest_files_with_more_fields_still_read() -> None:
    assert run_from_dict({"task": "x", "trace": {"id": 1}}).task == "x"


def test_a_run_written_back_reads_the_same() -> None:
    for path in sorted(EXAMPLES.glob("*.json")):
        data = json.loads(path.read_text())
        [run] = read_runs(path)
        assert run_from_dict(run_to_dict(run)) == run, path.name
        assert run_to_dict(run)["steps"] == data["steps"], path.name


def test_content_captured_is_written_only_when_false_and_reads_back() -> None:
    captured = run_from_dict({"task": "t"})
    assert captured.content_captured is True
    assert "content_captured" not in run_to_dict(captured)  # attest's run files stay as they were
    blind = run_from_dict({"task": "", "content_captured": False})
    assert blind.content_captured is False
    assert run_to_dict(blind)["content_captured"] is False
    assert run_from_dict(run_to_dict(blind)) == blind
    assert unknown_keys({"content_captured": False}) == []
    with pytest.raises(InputError, match="content_captured"):
        run_from_dict({"content_captured": "no"})


def test_non_string_outputs_are_compact_json() -> None:
    assert output_text({"a": [1, 2]}) == '{"a":[1,2]}'
    assert output_text("as is ") == "as is "
    assert output_text(None) == ""


BAD = [
    ("bad.json", "{not json", "bad.json:1: not valid JSON"),
    ("list.json", "[1, 2]", "list.json: a run must be a JSON object, got a list"),
    ("type.json", '{"task": 3}', "type.json: task: expected a string, got a number"),
    (
        "call.json",
        '{"steps": [{"tool_call": {"arguments": {}}}]}',
        "call.json: steps[0].tool_call.name: required string is missing",
    ),
    (
        "flag.json",
        '{"steps": [{"tool_call": {"name": "a", "is_error": "yes"}}]}',
        "flag.json: steps[0].tool_call.is_error: expected true, false or null, got a string",
    ),
    (
        "allowed.json",
        '{"allowed_tools": "a,b"}',
        "allowed.json: allowed_tools: expected a list of strings",
    ),
    (
        "fallbacks.json",
        '{"tool_fallbacks": {"a": "b"}}',
        "fallbacks.json: tool_fallbacks.a: expected a list of strings, got a string",
    ),
    ("runs.jsonl", '{"task": "ok"}\n{"task": "ok"}\n{broken\n', "runs.jsonl:3: not valid JSON"),
    (
        "typed.jsonl",
        '{"task": "ok"}\n{"steps": 5}\n',
        "typed.jsonl:2: steps: expected a list, got a number",
    ),
]


@pytest.mark.parametrize(
    ("name", "text", "message"),
    BAD,
    ids=[
        "a file that is not JSON names the file and line",
        "a run that is not an object says what it is",
        "a field of the wrong type names the field",
        "a tool call without a name names the missing field",
        "is_error must be a boolean",
        "allowed_tools must be a list of strings",
        "each fallback list must be a list of strings",
        "a bad line of a jsonl names its line",
        "a wrongly typed field of a jsonl names its line",
    ],
)
def test_bad_files_get_one_line_naming_file_line_and_problem(
    tmp_path: Path, name: str, text: str, message: str
) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(InputError) as e:
        read_runs(path)
    assert str(e.value).startswith(str(tmp_path / message.split(":")[0]))
    assert message.split(":", 1)[1] in str(e.value)
    assert "\n" not in str(e.value)


def test_a_missing_file_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        read_runs(tmp_path / "nope.json")


def test_a_failing_run_never_shows_a_perfect_score() -> None:
    from attest_otel.model import shown_score

    assert shown_score(29_999 / 30_000) == 0.99
    assert shown_score(29_999 / 30_000, 3) == 0.999
    assert shown_score(1.0) == 1.0
    assert shown_score(0.5) == 0.5
    assert shown_score(2 / 3) == 0.66
    assert shown_score(0.29) == 0.29  # 0.29 * 100 is 28.999...: not cut to 0.28


def test_the_headline_of_a_failing_run_shows_the_cut_score() -> None:
    from attest_otel.cli.render import headline
    from attest_otel.model import CheckResult, Finding

    findings = [Finding("pass", "correct", f"t{i}", "", None, i, {}) for i in range(9_999)] + [
        Finding("fail", "disallowed", "x", "not allowed", None, 9_999, {})
    ]
    result = CheckResult(
        check="tool_use",
        passed=False,
        verdict="fail",
        score=9_999 / 10_000,
        summary="",
        findings=findings,
        metadata={},
    )
    line = headline(result)
    assert "score 0.99 (9999/10000 calls correct)" in line
