"""Hostile payloads on the decode -> adapt -> grade path: each one gets a decision that is
asserted here (an `InputError` naming the problem, or a counted and logged handling), within a
stated bound of memory (tracemalloc peak) and time, never a crash or a hang.

| payload                                  | decision                                             |
| ---------------------------------------- | ---------------------------------------------------- |
| gzip bomb (one member, or many)          | InputError past `max_inflated_bytes`; peak ~ limit   |
| 1 000 000 empty gzip members             | inflated in linear time (was quadratic)              |
| 100 000 nested arrays (JSON, lines)      | InputError "nested too deeply", no RecursionError    |
| deeply nested AnyValue (protobuf)        | InputError (upb's depth limit / recursion caught)    |
| deeply nested JSON inside a string value | kept as text by the adapters                         |
| 50 MB attribute string                   | cut to `max_attribute_chars` + `…[truncated N chars]`|
| invalid UTF-8 (protobuf / JSON bytes)    | InputError naming it                                 |
| unpaired surrogate escape in JSON        | U+FFFD, counted (`Decoded.invalid_unicode`), logged  |
| numbers of 5000 digits, NaN/Inf times    | InputError                                           |
| times outside the fixed64 range (JSON)   | InputError "out of the unsigned 64-bit range"        |
| clocks far in the future/past, end<start | kept, counted (`clock_skew`), logged                 |
| duplicate span ids                       | first kept, counted (`duplicate_span_ids`), logged   |
| parent cycles (A->B->A, 10 000 long)     | cut at the earliest span, counted, logged            |
| self-parent                              | made a root, counted, logged                         |
| parent never arrives                     | made a root, counted, logged                         |
| a trace of 100 000 spans (several shapes)| graded in bounded time, no recursion error           |
| a value of an unexpected type in a span  | span ignored by the dialects, counted, logged        |
"""

from __future__ import annotations

import gzip
import json
import logging
import time
import tracemalloc
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans
from opentelemetry.proto.trace.v1.trace_pb2 import Span as PbSpan

from attest_otel.adapt import TraceRuns, runs_from_spans
from attest_otel.errors import InputError
from attest_otel.grade.grader import grade
from attest_otel.ingest.decode import (
    DEFAULT_MAX_ATTRIBUTE_CHARS,
    Decoded,
    decode_bytes,
    decode_request,
)
from attest_otel.model import STATUS_ERROR, Run, Span
from tests.fuzz import oracle

MiB = 1024 * 1024
TRACE = "0af7651916cd43dd8448eb211c80319c"
T0 = 1_700_000_000_000_000_000
MS = 1_000_000


# -- helpers ---------------------------------------------------------------------------------


@contextmanager
def peak_memory(limit_bytes: int) -> Iterator[None]:
    """Fail if the block's Python allocations peak above `limit_bytes` (tracemalloc)."""
    tracemalloc.start()
    try:
        yield
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < limit_bytes, f"peak {peak / MiB:.1f} MiB >= {limit_bytes / MiB:.1f} MiB"


@contextmanager
def within(seconds: float) -> Iterator[None]:
    start = time.perf_counter()
    yield
    took = time.perf_counter() - start
    assert took < seconds, f"took {took:.1f} s, bound {seconds} s"


def sid(i: int) -> str:
    return f"{i + 1:016x}"


def kv(key: str, value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return {"key": key, "value": value}
    return {"key": key, "value": {"stringValue": value}}


def span(
    i: int,
    name: str,
    attrs: dict[str, Any],
    *,
    parent: int | None = None,
    start: int = T0,
    end: int | None = None,
    status: int = 0,
    span_id: str | None = None,
    parent_id: str | None = None,
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "traceId": TRACE,
        "spanId": span_id or sid(i),
        "name": name,
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(start + MS if end is None else end),
        "attributes": [kv(k, v) for k, v in attrs.items()],
    }
    if parent_id is not None or parent is not None:
        out["parentSpanId"] = parent_id or sid(parent or 0)
    if status:
        out["status"] = {"code": status, "message": "boom"}
    return out


def body(spans: list[dict[str, Any]]) -> bytes:
    return json.dumps(
        {
            "resourceSpans": [
                {
                    "resource": {"attributes": [kv("service.name", "shop")]},
                    "scopeSpans": [{"scope": {"name": "shop.app"}, "spans": spans}],
                }
            ]
        }
    ).encode()


def agent(i: int = 0, **kw: Any) -> dict[str, Any]:
    attrs = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "shop",
        "gen_ai.provider.name": "anthropic",
    }
    return span(i, "invoke_agent shop", attrs, **kw)


def tool(i: int, name: str = "lookup", result: Any = '{"ok": true}', **kw: Any) -> dict[str, Any]:
    attrs = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": name,
        "gen_ai.tool.call.id": f"call_{i}",
        "gen_ai.tool.call.arguments": '{"sku": "A-1"}',
        "gen_ai.tool.call.result": result,
    }
    return span(i, f"execute_tool {name}", attrs, **kw)


def graded(decoded: Decoded) -> list[TraceRuns]:
    traces = runs_from_spans(decoded.spans, decoded.logs)
    for trace in traces:
        for run in trace.runs:
            oracle.grade_run(run)
    return traces


def only_run(traces: list[TraceRuns]) -> Run:
    runs = [run for trace in traces for run in trace.runs]
    assert len(runs) == 1, runs
    return runs[0]


# -- gzip ------------------------------------------------------------------------------------


def gzip_of_zeros(size: int, chunk: int = 4 * MiB) -> bytes:
    """One gzip member that inflates to `size` zero bytes, built without holding them."""
    deflate = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    zeros = bytes(chunk)
    parts = [deflate.compress(zeros) for _ in range(size // chunk)]
    parts.append(deflate.flush())
    return b"".join(parts)


def test_a_gzip_bomb_is_refused_at_the_inflate_limit_with_memory_near_the_limit() -> None:
    bomb = gzip_of_zeros(256 * MiB)  # ~250 KiB on the wire: a 1000:1 bomb
    assert len(bomb) < MiB
    with peak_memory(2 * 8 * MiB), within(10), pytest.raises(InputError) as err:
        decode_bytes(bomb, max_inflated_bytes=8 * MiB)
    assert "inflates to more than 8388608 bytes (max_inflated_bytes)" in str(err.value)


def test_a_one_gib_gzip_bomb_stays_under_the_default_limit_in_memory() -> None:
    """1 GiB of zeros in 1024 gzip members (~1 MiB on the wire) against the default 256 MiB
    limit: refused, with a peak of the limit plus change (stated bound: 300 MiB)."""
    member = gzip.compress(bytes(MiB), 1)
    bomb = member * 1024
    with peak_memory(300 * MiB), within(30), pytest.raises(InputError) as err:
        decode_bytes(bomb)
    assert "max_inflated_bytes" in str(err.value)


def test_a_million_empty_gzip_members_inflate_in_linear_time() -> None:
    members = gzip.compress(b"", 1) * 1_000_000  # 20 MB of nothing
    with within(30):
        decoded = decode_bytes(members)
    assert decoded.spans == []


def test_a_truncated_gzip_member_is_an_input_error() -> None:
    data = gzip.compress(body([agent()]))
    with pytest.raises(InputError, match="truncated gzip data"):
        decode_bytes(data[:-12])


# -- nesting ---------------------------------------------------------------------------------


def deep_json_value(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize("lines", [False, True], ids=["one document", "JSON lines"])
def test_100k_nested_arrays_in_an_attribute_are_an_input_error(lines: bool) -> None:
    doc = body([agent()]).decode()
    nested = doc.replace('"stringValue": "shop"', '"arrayValue": ' + deep_json_value(100_000), 1)
    text = (doc + "\n" + nested) if lines else nested
    with within(10), pytest.raises(InputError) as err:
        decode_bytes(text.encode())
    assert "nested too deeply" in str(err.value)
    assert err.value.line == (2 if lines else 1)


def test_nested_anyvalues_beyond_upbs_depth_limit_are_an_input_error() -> None:
    value = b"\x0a\x01x"  # AnyValue{string_value: "x"}
    for _ in range(200):  # AnyValue{array_value: ArrayValue{values: [value]}}
        array = b"\x0a" + _varint(len(value)) + value
        value = b"\x2a" + _varint(len(array)) + array
    kv_bytes = b"\x0a\x01k\x12" + _varint(len(value)) + value
    span_bytes = (
        b"\x0a\x10"
        + bytes(16)
        + b"\x12\x08"
        + bytes(8)
        + b"\x4a"
        + _varint(len(kv_bytes))
        + kv_bytes
    )
    scope = b"\x12" + _varint(len(span_bytes)) + span_bytes
    rs = b"\x12" + _varint(len(scope)) + scope
    data = b"\x0a" + _varint(len(rs)) + rs
    for content_type in (None, "application/x-protobuf"):
        with pytest.raises(InputError) as err:
            decode_bytes(data, content_type)
        assert "invalid protobuf: messages nested too deeply" in str(err.value)


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def test_a_deep_anyvalue_built_in_python_is_an_input_error_not_a_recursion_error() -> None:
    """A request built in-process (not parsed, so upb's depth limit never applied)."""
    value = AnyValue(string_value="x")
    for _ in range(45):  # upb copies at most 100 levels; each level here is two
        value = AnyValue(array_value=ArrayValue(values=[value]))
    ps = PbSpan(trace_id=bytes(range(16)), span_id=bytes(range(8)), name="chat")
    ps.attributes.append(KeyValue(key="gen_ai.input.messages", value=value))
    req = ExportTraceServiceRequest(
        resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=[ps])])]
    )
    decoded = decode_request(req, lazy=False)  # 45 levels: fine
    graded(decoded)
    # Deeper than the interpreter's recursion limit allows, as any_value walks it.
    import sys

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(120)
    try:
        with pytest.raises(InputError, match="nested too deeply"):
            decode_request(req, lazy=False)
    finally:
        sys.setrecursionlimit(limit)


def test_deeply_nested_json_inside_a_string_value_is_kept_as_text() -> None:
    deep = deep_json_value(100_000)
    decoded = decode_bytes(body([agent(), tool(1, parent=0, result=deep)]))
    run = only_run(graded(decoded))
    call = run.steps[0].tool_call
    assert call is not None and call.output == deep  # not parsed, not lost


# -- huge strings ------------------------------------------------------------------------------


def test_a_50_mb_tool_output_is_truncated_with_a_marker_counted_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    huge = "x" * (50 * 1000 * 1000)
    data = body([agent(), tool(1, parent=0, result=huge)])
    caplog.set_level(logging.WARNING, logger="attest_otel.ingest.decode")
    with peak_memory(4 * len(data)), within(20):
        decoded = decode_bytes(data)
    assert decoded.truncated_values == 1
    assert any("truncated (max_attribute_chars)" in r.getMessage() for r in caplog.records)
    output = decoded.spans[1].attributes["gen_ai.tool.call.result"]
    cut = len(huge) - DEFAULT_MAX_ATTRIBUTE_CHARS
    assert output == "x" * DEFAULT_MAX_ATTRIBUTE_CHARS + f"…[truncated {cut} chars]"
    run = only_run(graded(decoded))
    assert run.steps[0].tool_call is not None
    assert str(run.steps[0].tool_call.output).endswith(f"…[truncated {cut} chars]")


def test_the_attribute_limit_is_configurable_and_can_be_lifted() -> None:
    data = body([agent(), tool(1, parent=0, result="é" * 5000)])
    decoded = decode_bytes(data, max_attribute_chars=100)
    assert (
        decoded.spans[1].attributes["gen_ai.tool.call.result"]
        == "é" * 100 + "…[truncated 4900 chars]"
    )
    assert decoded.truncated_values == 1
    lifted = decode_bytes(data, max_attribute_chars=None)
    assert lifted.spans[1].attributes["gen_ai.tool.call.result"] == "é" * 5000
    assert lifted.truncated_values == 0


def test_huge_names_status_messages_and_nested_values_are_cut_in_protobuf_too() -> None:
    ps = PbSpan(trace_id=bytes(range(16)), span_id=bytes(range(8)), name="chat " + "n" * 300)
    ps.status.message = "s" * 300
    ps.attributes.append(
        KeyValue(
            key="gen_ai.input.messages",
            value=AnyValue(array_value=ArrayValue(values=[AnyValue(string_value="v" * 300)])),
        )
    )
    ps.attributes.append(KeyValue(key="blob", value=AnyValue(bytes_value=b"b" * 300)))
    req = ExportTraceServiceRequest(
        resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=[ps])])]
    )
    decoded = decode_bytes(req.SerializeToString(), max_attribute_chars=200)
    s = decoded.spans[0]
    assert decoded.truncated_values == 4
    assert s.name.endswith("…[truncated 105 chars]") and len(s.name) < 230
    assert s.status_message.endswith("…[truncated 100 chars]")
    assert s.attributes["gen_ai.input.messages"][0].endswith("…[truncated 100 chars]")
    assert s.attributes["blob"] == b"b" * 200 + b"...[truncated 100 bytes]"


# -- text encoding -----------------------------------------------------------------------------


def test_invalid_utf8_in_a_protobuf_string_field_is_an_input_error() -> None:
    ps = PbSpan(trace_id=bytes(range(16)), span_id=bytes(range(8)), name="chat-XY")
    req = ExportTraceServiceRequest(
        resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=[ps])])]
    )
    data = req.SerializeToString().replace(b"chat-XY", b"chat-\xff\xfe")
    with pytest.raises(InputError) as err:
        decode_bytes(data)
    assert "a string field holds invalid UTF-8" in str(err.value)


def test_invalid_utf8_in_json_is_an_input_error_naming_the_byte() -> None:
    data = body([agent()]).replace(b'"shop"', b'"sh\xc3op"', 1)
    with pytest.raises(InputError, match=r"not UTF-8 text \(byte \d+\)"):
        decode_bytes(data)


def test_unpaired_surrogates_in_json_become_replacement_characters_counted_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    data = body([agent(), tool(1, parent=0, result="ok \ud800 then \udc00")])  # json escapes
    assert b"\\ud800" in data
    caplog.set_level(logging.WARNING, logger="attest_otel.ingest.decode")
    decoded = decode_bytes(data)
    assert decoded.invalid_unicode == 1
    assert decoded.spans[1].attributes["gen_ai.tool.call.result"] == "ok \ufffd then \ufffd"
    assert any("unpaired UTF-16 surrogates" in r.getMessage() for r in caplog.records)
    run = only_run(graded(decoded))
    json.dumps(run.steps[0].tool_call.output if run.steps[0].tool_call else None).encode("utf-8")


def test_a_surrogate_pair_escape_is_left_alone() -> None:
    data = body([agent(), tool(1, parent=0, result="\U0001f600")])
    assert b"\\ud83d\\ude00" in data
    decoded = decode_bytes(data)
    assert decoded.invalid_unicode == 0
    assert decoded.spans[1].attributes["gen_ai.tool.call.result"] == "\U0001f600"


@pytest.mark.parametrize(
    ("start", "problem"),
    [
        ("1" + "0" * 5000, "invalid JSON: Exceeds the limit (4300 digits)"),
        ("NaN", "start time must be an integer"),
        ("1e400", "start time must be an integer"),
        ("-1", "start time out of the unsigned 64-bit range"),
        (str(2**64), "start time out of the unsigned 64-bit range"),
        ('"-5"', "start time out of the unsigned 64-bit range"),
    ],
)
def test_numbers_json_cannot_hold_as_times_are_input_errors(start: str, problem: str) -> None:
    data = body([agent()]).replace(
        f'"startTimeUnixNano": "{T0}"'.encode(), f'"startTimeUnixNano": {start}'.encode()
    )
    with pytest.raises(InputError, match=problem.replace("(", r"\(").replace(")", r"\)")):
        decode_bytes(data)


# -- broken trees ------------------------------------------------------------------------------


def anomalies(data: bytes, caplog: pytest.LogCaptureFixture) -> tuple[TraceRuns, list[str]]:
    caplog.set_level(logging.INFO, logger="attest_otel.adapt.runs")
    traces = graded(decode_bytes(data))
    assert len(traces) == 1
    return traces[0], [r.getMessage() for r in caplog.records if r.name == "attest_otel.adapt.runs"]


def test_duplicate_span_ids_keep_the_first_span_counted_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    data = body([agent(), tool(1, parent=0), tool(1, "order", parent=0), tool(1, parent=0)])
    trace, logged = anomalies(data, caplog)
    assert trace.anomalies == {"duplicate_span_ids": 2}
    assert [s.tool_call.name for s in trace.runs[0].steps if s.tool_call] == ["lookup"]
    assert logged == [f"trace {TRACE}: 2 duplicate span ids (first kept)"]
    assert caplog.records[-1].levelno == logging.INFO


def test_a_parent_cycle_is_cut_at_its_earliest_span_counted_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    a = agent(0, parent=1, start=T0)  # agent's parent is the tool, the tool's the agent
    b = tool(1, parent=0, start=T0 + MS)
    trace, logged = anomalies(body([b, a]), caplog)
    assert trace.anomalies == {"parent_cycles": 1}
    run = only_run([trace])
    assert run.agent == "shop" and [s.tool_call.name for s in run.steps if s.tool_call] == [
        "lookup"
    ]
    assert logged == [f"trace {TRACE}: 1 parent cycles (cut at the earliest span)"]
    assert caplog.records[-1].levelno == logging.WARNING


def test_a_long_parent_cycle_terminates(caplog: pytest.LogCaptureFixture) -> None:
    n = 10_000
    spans = [tool(i, parent=(i + 1) % n, start=T0 + i * MS) for i in range(n)]
    with within(30):
        trace, _ = anomalies(body(spans), caplog)
    assert trace.anomalies == {"parent_cycles": 1}
    assert len(trace.runs) == 1


def test_a_self_parent_becomes_a_root_counted_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    trace, logged = anomalies(body([agent(0, parent=0), tool(1, parent=0)]), caplog)
    assert trace.anomalies == {"self_parents": 1}
    assert only_run([trace]).agent == "shop"
    assert logged == [f"trace {TRACE}: 1 spans their own parent (made roots)"]


def test_a_span_whose_parent_never_arrives_is_a_root_counted_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    spans = [agent(0), tool(1, parent=0), tool(2, "order", parent_id="ffffffffffffffff")]
    trace, logged = anomalies(body(spans), caplog)
    assert trace.anomalies == {"missing_parents": 1}
    names = sorted(s.tool_call.name for r in trace.runs for s in r.steps if s.tool_call)
    assert names == ["lookup", "order"]  # the orphan is still graded
    assert logged == [f"trace {TRACE}: 1 spans whose parent never arrived (made roots)"]
    assert caplog.records[-1].levelno == logging.INFO


def test_clocks_far_in_the_future_or_past_are_kept_counted_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    spans = [
        agent(0),
        tool(1, parent=0, start=T0 + MS),
        tool(2, "order", parent=0, start=2**64 - 2, end=2**64 - 1),  # year 2554
        tool(3, "search", parent=0, start=0, end=1),  # 1970
        tool(4, "refund", parent=0, start=T0 + 5 * MS, end=T0),  # ends before it starts
    ]
    trace, logged = anomalies(body(spans), caplog)
    assert trace.anomalies == {"clock_skew": 3}
    names = [s.tool_call.name for s in only_run([trace]).steps if s.tool_call]
    assert names == ["search", "lookup", "refund", "order"]  # each by its own clock
    assert logged == [
        f"trace {TRACE}: 3 spans with a clock far off or ending before they start (kept)"
    ]


def test_a_value_of_an_unexpected_type_costs_only_its_span(
    caplog: pytest.LogCaptureFixture,
) -> None:
    odd = span(
        2,
        "chat",
        {"gen_ai.operation.name": {"arrayValue": {"values": [{"intValue": "1"}]}}},
        parent=0,
    )
    trace, logged = anomalies(body([agent(), tool(1, parent=0), odd]), caplog)
    assert trace.anomalies == {"unreadable_spans": 1}
    assert [s.tool_call.name for s in only_run([trace]).steps if s.tool_call] == ["lookup"]
    assert logged == [f"trace {TRACE}: 1 spans no dialect could read (ignored)"]


# -- 100 000 spans -----------------------------------------------------------------------------

N = 100_000


def agent_loop_body(n: int) -> bytes:
    """An agent loop as instrumentation writes it: per turn a model span, a tool span (every
    tenth fails, then is retried) and an HTTP span under the tool; 100 000 spans in all."""
    spans = [agent(0, end=T0 + n * MS)]
    i = 1
    while i < n:
        turn = T0 + i * MS
        spans.append(
            span(
                i,
                "chat claude",
                {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "anthropic"},
                parent=0,
                start=turn,
            )
        )
        if i + 1 < n:
            failed = (i // 3) % 10 == 0
            spans.append(
                tool(
                    i + 1,
                    f"tool{i % 7}",
                    result="Error: timeout" if failed else "ok",
                    parent=0,
                    start=turn + 1,
                    status=STATUS_ERROR if failed else 0,
                )
            )
        if i + 2 < n:
            spans.append(
                span(
                    i + 2,
                    "GET /inventory",
                    {"http.request.method": "GET"},
                    parent=i + 1,
                    start=turn + 2,
                )
            )
        i += 3
    assert len(spans) == n
    return body(spans)


def test_a_100k_span_agent_trace_decodes_adapts_and_grades_in_bounded_time() -> None:
    data = agent_loop_body(N)
    with within(30):
        decoded = decode_bytes(data)
    with within(30):
        traces = runs_from_spans(decoded.spans, decoded.logs)
        run = only_run(traces)
        result = grade(run, judge=None)
    assert decoded.span_count == N
    assert len(run.steps) == N // 3
    assert result.findings and not result.passed


def _shape(name: str) -> list[Span]:
    def s(
        i: int,
        parent: int | None,
        op: str,
        start: int = 0,
        end: int = 0,
        status: int = 0,
        **attrs: Any,
    ) -> Span:
        a = {"gen_ai.operation.name": op, "gen_ai.provider.name": "x", **attrs}
        pid = sid(parent) if parent is not None else None
        return Span(TRACE, sid(i), pid, f"{op} t", start, end, status_code=status, attributes=a)

    if name == "chain of 100k tool spans":
        return [
            s(i, i - 1 if i else None, "execute_tool", i, 2 * N - i, **{"gen_ai.tool.name": "t"})
            for i in range(N)
        ]
    if name == "chain of 100k agents":
        return [
            s(
                i,
                i - 1 if i else None,
                "invoke_agent" if i % 2 == 0 else "execute_tool",
                i,
                2 * N - i,
            )
            for i in range(N)
        ]
    if name == "100k-span parent cycle":
        return [s(i, (i + 1) % N, "execute_tool", **{"gen_ai.tool.name": "t"}) for i in range(N)]
    if name == "100k failing calls of distinct tools":
        return [s(0, None, "invoke_agent")] + [
            s(i, 0, "execute_tool", status=STATUS_ERROR, **{"gen_ai.tool.name": f"t{i}"})
            for i in range(1, N)
        ]
    if name == "100k parallel calls of one tool":
        return [s(0, None, "invoke_agent")] + [
            s(i, 0, "execute_tool", i, 2 * N, **{"gen_ai.tool.name": "t"}) for i in range(1, N)
        ]
    if name == "100k model calls asking for tools without spans":
        out = [s(0, None, "invoke_agent")]
        for i in range(1, N):
            msg = json.dumps(
                [
                    {
                        "role": "assistant",
                        "parts": [
                            {"type": "tool_call", "id": f"c{i}", "name": "t", "arguments": {}}
                        ],
                    }
                ]
            )
            out.append(s(i, 0, "chat", i * 10, i * 10 + 5, **{"gen_ai.output.messages": msg}))
        return out
    raise LookupError(name)


SHAPES = [
    "chain of 100k tool spans",
    "chain of 100k agents",
    "100k-span parent cycle",
    "100k failing calls of distinct tools",
    "100k parallel calls of one tool",
    "100k model calls asking for tools without spans",
]


@pytest.mark.parametrize("shape", SHAPES)
def test_adversarial_100k_span_traces_grade_in_bounded_time(shape: str) -> None:
    spans = _shape(shape)
    with within(60):  # 3-10 s on an idle 2-core box; generous for a loaded CI one
        traces = runs_from_spans(spans)
        for trace in traces:
            assert guard_ok(trace)
            for run in trace.runs:
                grade(run, judge=None)
    assert traces and traces[0].runs


def guard_ok(trace: TraceRuns) -> bool:
    return "adapter_errors" not in trace.anomalies


def test_every_hostile_body_passes_the_fuzz_oracle() -> None:
    """The same payloads through the oracle the fuzzers use (no crash, UTF-8 output)."""
    cases: list[Callable[[], bytes]] = [
        lambda: body([agent(0, parent=0), tool(1, parent=1)]),
        lambda: body([agent(), tool(1, parent=0, result=deep_json_value(50_000))]),
        lambda: body([agent(), tool(1, parent=0, result="\ud800")]),
        lambda: gzip.compress(body([agent(), tool(1, parent=0)])) * 3,
    ]
    for case in cases:
        oracle.exercise_otlp(case())
