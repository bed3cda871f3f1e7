"""Every crash, hang or wrong refusal the fuzzers found, as the smallest input that showed it.

Inputs are inline bytes, or files under `tests/fuzz/crashes/` when they are binary. Found by:
P = the hypothesis property tests, A = atheris (`atheris_decode.py`), H = the hostile-payload
probes. Each test names what escaped before the fix.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attest_otel.adapt import guard, runs_from_spans
from attest_otel.errors import InputError
from attest_otel.grade.grader import grade
from attest_otel.grade.rules import assess, find_recovery
from attest_otel.ingest.decode import decode_bytes
from attest_otel.model import STATUS_ERROR, Run, Span, Step, ToolCall, read_runs
from tests.fuzz import oracle

CRASHES = Path(__file__).parent / "crashes"
T = "0af7651916cd43dd8448eb211c80319c"


def otlp(spans: str, scope: str = '{"name": "shop.app"}') -> bytes:
    return (
        '{"resourceSpans": [{"scopeSpans": [{"scope": ' + scope + ', "spans": [' + spans + "]}]}]}"
    ).encode()


def one_span(extra: str = "", name: str = '"chat"') -> str:
    return f'{{"traceId": "{T}", "spanId": "00f067aa0ba902b7", "name": {name}{extra}}}'


# -- decoder ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        b'{"resourceSpans": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        b'{"resourceSpans": []}\n{"resourceSpans": ' + b"[" * 5000 + b"]" * 5000 + b"}",
    ],
    ids=["one document", "JSON lines"],
)
def test_H_deeply_nested_json_was_a_recursion_error(data: bytes) -> None:
    with pytest.raises(InputError, match="nested too deeply"):
        decode_bytes(data)


@pytest.mark.parametrize(
    "data",
    [
        b'{"resourceSpans": [], "x": 1' + b"0" * 5000 + b"}",
        b'{"resourceSpans": []}\n{"x": 1' + b"0" * 5000 + b"}",
    ],
    ids=["one document", "JSON lines"],
)
def test_H_a_number_of_5000_digits_was_a_value_error(data: bytes) -> None:
    with pytest.raises(InputError, match=r"invalid JSON: Exceeds the limit \(4300 digits\)"):
        decode_bytes(data)


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (otlp(one_span(), scope='{"name": 5}'), "scope name and version must be strings"),
        (otlp(one_span(), scope='{"version": 1.5}'), "scope name and version must be strings"),
        (otlp(one_span(name="5")), "name must be a string"),
        (otlp(one_span(', "status": {"message": 7}')), "bad status message: 7"),
        (otlp(one_span(', "events": [{"name": 5}]')), "event name must be a string"),
        (
            otlp(one_span(', "startTimeUnixNano": -5')),
            "start time out of the unsigned 64-bit range",
        ),
        (otlp(one_span(', "endTimeUnixNano": 1e300')), "end time out of the unsigned 64-bit range"),
        (
            b'{"resourceLogs": [{"scopeLogs": [{"scope": {"name": 5}, "logRecords": [{}]}]}]}',
            "scope name must be a string",
        ),
        (
            b'{"resourceLogs": [{"scopeLogs": [{"scope": {"name": "openai"}, "logRecords": [{"eventName": 5}]}]}]}',
            "event name must be a string",
        ),
    ],
)
def test_H_wrong_types_in_json_were_attribute_errors_or_passed_through(
    data: bytes, problem: str
) -> None:
    """A scope name of 5 raised AttributeError; a span name of 5 (in a GenAI scope) or a
    negative time reached the adapters as-is."""
    with oracle.no_walker_bugs(), pytest.raises(InputError, match=problem):
        decode_bytes(data, lazy=False)


def test_P_an_attribute_with_an_empty_key_was_refused_in_the_json_mapping() -> None:
    """protobuf's JSON mapping leaves out a default field: an empty key has no "key" at all."""
    data = otlp(one_span(', "attributes": [{"value": {"stringValue": "v"}}]'))
    decoded = decode_bytes(data, lazy=False)
    assert decoded.spans[0].attributes == {"": "v"}


def test_P_a_logs_request_whose_record_has_only_a_body_was_read_as_traces() -> None:
    data = (CRASHES / "logs_request_read_as_traces.pb").read_bytes()
    decoded = decode_bytes(data, lazy=False)
    assert [(r.event_name, r.body) for r in decoded.logs] == [("exception", "")]


def test_P_protobuf_that_is_valid_utf8_after_a_newline_was_refused_as_json() -> None:
    """Tag 0x0A, then a length of 91 (`[`): a request with no random ids is all text."""
    data = (CRASHES / "protobuf_that_is_utf8_after_a_newline.pb").read_bytes()
    assert data[:2] == b"\n[" and data.decode("utf-8")
    decoded = decode_bytes(data)
    assert decoded.spans == [] and decoded.log_count == 0
    with pytest.raises(InputError, match="invalid JSON"):  # real JSON errors still say so
        decode_bytes(b'\n[{"resourceSpans": [}]')


def test_H_a_too_deep_trace_request_was_silently_read_as_an_empty_logs_request() -> None:
    """upb refused the depth; the logs fallback parsed the same bytes as one empty record."""
    value = b"\x0a\x01x"  # AnyValue{string_value: "x"}
    for _ in range(200):  # AnyValue{array_value: ArrayValue{values: [value]}}
        array = b"\x0a" + _varint(len(value)) + value
        value = b"\x2a" + _varint(len(array)) + array
    kv = b"\x0a\x01k\x12" + _varint(len(value)) + value
    span = b"\x0a\x10" + bytes(16) + b"\x12\x08" + bytes(8) + b"\x4a" + _varint(len(kv)) + kv
    scope = b"\x12" + _varint(len(span)) + span
    rs = b"\x12" + _varint(len(scope)) + scope
    data = b"\x0a" + _varint(len(rs)) + rs
    with pytest.raises(InputError, match="invalid protobuf: messages nested too deeply"):
        decode_bytes(data)


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def test_H_many_gzip_members_took_quadratic_time() -> None:
    """zlib copied the rest of the body after each member: 40 000 empty members took 0.7 s,
    4 000 000 would have taken hours."""
    import gzip
    import time

    data = gzip.compress(b"") * 200_000
    start = time.perf_counter()
    assert decode_bytes(data).spans == []
    assert time.perf_counter() - start < 10


def test_H_an_unpaired_surrogate_escape_reached_the_utf8_writers() -> None:
    data = otlp(
        one_span(
            ', "attributes": [{"key": "gen_ai.tool.call.result", "value": {"stringValue": "\\ud800"}}]'
        )
    )
    decoded = decode_bytes(data)
    assert decoded.spans[0].attributes["gen_ai.tool.call.result"] == "\ufffd"
    assert decoded.invalid_unicode == 1


# -- adapters and grader ---------------------------------------------------------------------


def test_P_an_array_operation_name_was_a_type_error_in_detect() -> None:
    """`OP_ROLES.get(["..."])`: unhashable. Now the span is left to no dialect, counted."""
    data = otlp(
        one_span(
            ', "attributes": [{"key": "gen_ai.operation.name", "value": {"arrayValue": {}}}]',
            name='"invoke_agent shop"',
        )
    )
    decoded = decode_bytes(data)
    traces = runs_from_spans(decoded.spans)
    assert traces[0].runs == []


def test_H_a_trace_that_is_all_one_parent_cycle_had_no_root() -> None:
    """`min(roots)` of an empty list: ValueError."""
    spans = [
        Span(
            T,
            f"{i + 1:016x}",
            f"{(i + 1) % 3 + 1:016x}",
            "execute_tool t",
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "t",
                "gen_ai.provider.name": "x",
            },
        )
        for i in range(3)
    ]
    traces = runs_from_spans(spans)
    assert traces[0].anomalies == {"parent_cycles": 1}
    assert len(traces[0].runs) == 1


def test_H_deeply_nested_json_in_allowed_tools_was_a_recursion_error() -> None:
    deep = "[" * 100_000 + "]" * 100_000
    span = Span(
        T,
        "0000000000000001",
        None,
        "invoke_agent a",
        attributes={
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.provider.name": "x",
            "attest.allowed_tools": deep,
            "attest.tool_fallbacks": deep,
        },
    )
    tool = Span(
        T,
        "0000000000000002",
        "0000000000000001",
        "execute_tool t",
        attributes={
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "t",
            "gen_ai.tool.call.result": deep,
            "gen_ai.provider.name": "x",
        },
    )
    traces = runs_from_spans([span, tool])
    run = traces[0].runs[0]
    assert run.allowed_tools is None  # ignored, as any bad attribute
    assert run.steps[0].tool_call is not None and run.steps[0].tool_call.output == deep


@pytest.mark.parametrize("n", [20_000])
def test_H_many_failing_calls_were_quadratic_in_the_rules(n: int) -> None:
    import time

    run = Run(
        steps=[
            Step(tool_call=ToolCall(name=f"t{i}", output="Error: x", is_error=True))
            for i in range(n)
        ]
    )
    run.steps.append(Step(tool_call=ToolCall(name="t0", output="ok")))
    run.tool_fallbacks = {"t1": ["t0"]}
    start = time.perf_counter()
    result = grade(run, judge=None)
    assert time.perf_counter() - start < 10
    verdicts = {f.step: (f.verdict, f.metadata) for f in result.findings}
    assert verdicts[0][0] == "correct"  # retried later (step n)
    assert verdicts[2][0] != "correct"


def test_H_recovery_is_found_exactly_as_before() -> None:
    """The backward pass gives the first later success that is the tool or a fallback."""
    steps = [
        ToolCall(name="a", output="Error: x"),
        ToolCall(name="b", output="Error: y"),
        ToolCall(name="c", output="ok"),
        ToolCall(name="a", output="ok"),
    ]
    run = Run(steps=[Step(tool_call=c) for c in steps], tool_fallbacks={"a": ["c"], "b": ["a"]})
    facts = {f.step: (f.recovery, f.recovered_at, f.recovered_by) for f in assess(run)}
    assert facts[0] == ("fallback", 2, "c")
    assert facts[1] == ("fallback", 3, "a")
    assert facts[2] == (None, None, None)


@pytest.mark.parametrize("name", sorted(p.name for p in CRASHES.iterdir()))
def test_every_saved_crash_passes_the_oracle(name: str) -> None:
    data = (CRASHES / name).read_bytes()
    for content_type in (None, "application/json", "application/x-protobuf"):
        for lazy in (True, False):
            oracle.exercise_otlp(data, content_type, lazy=lazy)


def test_error_status_is_still_an_error_after_the_assembler_changes() -> None:
    spans = [
        Span(
            T,
            "0000000000000001",
            None,
            "invoke_agent a",
            attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.provider.name": "x"},
        ),
        Span(
            T,
            "0000000000000002",
            "0000000000000001",
            "execute_tool t",
            status_code=STATUS_ERROR,
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "t",
                "gen_ai.provider.name": "x",
            },
        ),
    ]
    run = runs_from_spans(spans)[0].runs[0]
    assert run.steps[0].tool_call is not None and run.steps[0].tool_call.is_error is True
    assert json.dumps(grade(run, judge=None).to_dict())


# -- the indexes that replaced quadratic scans give the same answers as the scans ---------------


@dataclass
class _FakeCall:
    name: str | None
    start: int
    call_id: str | None = None
    claimed: bool = False


def _scan(calls: list[_FakeCall], name: str, since: int) -> _FakeCall | None:
    """The scan `runs._claim_by_name` did before `guard.Claimable`."""
    for call in calls:
        if call.claimed or call.call_id is not None:
            continue
        if call.name == name and call.start >= since:
            return call
    return None


@settings(max_examples=150, deadline=None)
@given(
    steps=st.lists(
        st.tuples(
            st.sampled_from(("add", "claim", "id")),
            st.sampled_from(("a", "b", None)),
            st.integers(0, 20),
        ),
        max_size=60,
    )
)
def test_claimable_finds_what_the_scan_found(steps: list[tuple[str, str | None, int]]) -> None:
    calls: list[_FakeCall] = []
    index = guard.Claimable(lambda c: not c.claimed and c.call_id is None)
    for op, name, t in steps:
        if op == "add":
            calls.append(_FakeCall(name, t))
            index.add(calls[-1])
        elif op == "id" and calls:
            calls[t % len(calls)].call_id = "x"
        elif name is not None:
            expected = _scan(calls, name, t)
            assert index.first(name, t) is expected
            if expected is not None:
                expected.claimed = True


@settings(max_examples=150, deadline=None)
@given(
    calls=st.lists(st.tuples(st.sampled_from("abcd"), st.booleans()), max_size=30),
    fallbacks=st.dictionaries(
        st.sampled_from("abcd"), st.lists(st.sampled_from("abcd"), max_size=3)
    ),
)
def test_recoveries_in_one_pass_match_find_recovery(
    calls: list[tuple[str, bool]], fallbacks: dict[str, list[str]]
) -> None:
    run = Run(
        steps=[
            Step(tool_call=ToolCall(name=n, output="Error: x" if bad else "ok")) for n, bad in calls
        ],
        tool_fallbacks=fallbacks,
    )
    tool_calls = run.tool_calls
    errored = [bad for _, bad in calls]
    for i, fact in enumerate(assess(run)):
        found = find_recovery(i, tool_calls, errored, fallbacks) if errored[i] else None
        assert (fact.recovery, fact.recovered_at, fact.recovered_by) == (
            found or (None, None, None)
        )


def test_P_a_bytes_tool_output_was_a_type_error_in_the_assembler_and_the_rules() -> None:
    """`json.dumps(b"...")` in `output_text`: an OTLP bytesValue as a tool result."""
    spans = [
        Span(
            T,
            "0000000000000001",
            None,
            "invoke_agent a",
            attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.provider.name": "x"},
        ),
        Span(
            T,
            "0000000000000002",
            "0000000000000001",
            "execute_tool t",
            status_code=STATUS_ERROR,
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "t",
                "gen_ai.provider.name": "x",
                "gen_ai.tool.call.result": {"blob": [b"Error: \xff"]},
            },
        ),
    ]
    run = runs_from_spans(spans)[0].runs[0]
    call = run.steps[0].tool_call
    assert call is not None and call.output == {"blob": ["Error: \ufffd"]}
    oracle.grade_run(run)
    assert grade(
        Run(steps=[Step(tool_call=ToolCall(name="t", output=[b"x"]))]), judge=None
    ).findings


def test_P_a_newline_in_a_run_file_key_made_a_two_line_input_error(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"tool_fallbacks": {"\n": False}}))
    with pytest.raises(InputError) as err:
        read_runs(path)
    assert "\n" not in str(err.value) and "tool_fallbacks.\\n: expected" in str(err.value)
