"""The wire core's OTLP/JSON reader (`otlp_json`, `json.rs`/`json_walk.rs`) must read (and
refuse) what `json.loads` does, and give the spans, log records and errors the Python walker
gave on `json`'s reading (`json_reference`, kept as the oracle; issues 12 and 30)."""

from __future__ import annotations

import json
import math
import pickle
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attest_otel.errors import InputError
from attest_otel.ingest import decode, otlp_json
from attest_otel.ingest.decode import decode_bytes
from attest_otel.ingest.otlp_json import JsonReadError
from tests.ingest import json_reference
from tests.ingest.json_reference import mend_surrogates

T = "0af7651916cd43dd8448eb211c80319c"


def outcome(parse: Any, text: str) -> tuple[str, str]:
    """What a parser makes of `text`: ("ok", repr of the value with its types) or "error"."""
    try:
        value = parse(text)
    except (ValueError, RecursionError):  # JSONDecodeError, int's 4300 digits, JsonReadError
        return ("error", "")
    return ("ok", typed_repr(value))


def ours(text: str) -> Any:
    return otlp_json.loads(text.encode())


def json_loads(text: str) -> Any:
    """`json.loads` with unpaired surrogates mended, as the reader reads them."""
    return mend_surrogates(json.loads(text))[0]


def typed_repr(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {typed_repr(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(typed_repr(v) for v in value) + "]"
    if isinstance(value, float) and math.isnan(value):
        return "float(nan)"
    return f"{type(value).__name__}({value!r})"


EDGE_CASES = [
    '{"a": 1, "a": 2}',  # duplicate keys: the last wins, at the first one's place
    '{"a": 1, "b": 2, "a": 3}',
    '{"a": NaN}',
    '{"a": Infinity}',
    '{"a": -Infinity}',
    '{"a": 1e400}',
    '{"a": -1e400}',
    '{"a": 1.5e-400}',
    "18446744073709551615",  # 2**64-1: orjson's largest integer
    "18446744073709551616",  # 2**64: orjson would make it a float
    "-9223372036854775808",
    "-9223372036854775809",
    "123456789012345678901234567890",
    "1" + "0" * 5000,  # json: beyond int's 4300-digit limit
    "1." + "0" * 5000,
    '"\\ud800"',
    '"\\udc00"',
    '"x\\ud800\\ud800\\udc00"',
    '"\\ud83d\\ude00"',
    '{"\\ud800": 1}',
    '"\\u0000"',
    '"\x7f"',
    '"\x01"',  # control characters must be escaped
    '"\u2028"',
    "-0",
    "-0.0",
    "1E2",
    "0.1000000000000000055511151231257827",
    "5e-324",
    "2.2250738585072011e-308",
    "01",
    "1.",
    ".5",
    "+1",
    "[1,2,]",
    '{"a":1,}',
    "  {}  ",
    "",
    " ",
    "\ufeff{}",
    "{} {}",
    "{}\n{}",
    "true",
    "True",
    "null",
    '"\\x"',
    '"\\/"',
    "[" * 100 + "]" * 100,
    "[" * 5000 + "]" * 5000,
]


@pytest.mark.parametrize("text", EDGE_CASES)
def test_the_parser_reads_and_refuses_what_json_does(text: str) -> None:
    assert outcome(ours, text) == outcome(json_loads, text)


def test_integers_of_any_size_read_as_json_reads_them() -> None:
    assert ours("[18446744073709551616, -9223372036854775809]") == [2**64, -(2**63) - 1]
    assert ours("1" + "0" * 400) == 10**400


def test_nesting_is_refused_past_1024_levels() -> None:
    deep = "[" * 1024 + "]" * 1024
    assert ours(deep) is not None
    with pytest.raises(JsonReadError) as refused:
        ours("[" * 1025 + "]" * 1025)
    assert refused.value.args[3][2] is True  # too deep
    body = ('{"resourceSpans": ' + "[" * 1100 + "]" * 1100 + "}").encode()
    with pytest.raises(InputError, match="nested too deeply"):
        decode_bytes(body)


def test_refused_json_is_told_in_json_s_own_words() -> None:
    for text in ('{"resourceSpans": [}', '{"a": 1', "[1, 2", '{"a": "\x01"}'):
        with pytest.raises(json.JSONDecodeError) as theirs:
            json.loads(text)
        with pytest.raises(InputError) as refused:
            decode_bytes(text.encode(), "application/json")
        assert f"column {theirs.value.colno}: {theirs.value.msg}" in str(refused.value)


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.sampled_from([2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63), -(2**63) - 1])
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(JSON_VALUES, st.booleans())
def test_any_json_text_reads_as_json_reads_it(value: Any, compact: bool) -> None:
    text = json.dumps(value, separators=(",", ":") if compact else None, ensure_ascii=compact)
    if not compact:  # raw characters, unpaired surrogates aside (UTF-8 cannot carry them)
        text = json.dumps(json_loads(text), ensure_ascii=False)
    assert outcome(ours, text) == outcome(json_loads, text)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet='{}[]:,"\\ud8c0aeEINfinityNul0123456789.-+ \n\t', max_size=30))
def test_any_json_like_text_reads_or_fails_as_json_does(text: str) -> None:
    assert outcome(ours, text) == outcome(json_loads, text)


# -- the walkers: the same spans and errors as on `json`'s reading, but for the integers ----------


def request(*spans: str, resource: str = "[]", scope: str = '{"name": "shop"}') -> str:
    return (
        '{"resourceSpans": [{"resource": {"attributes": ' + resource + '}, "scopeSpans": '
        '[{"scope": ' + scope + ', "spans": [' + ", ".join(spans) + "]}]}]}"
    )


def span(n: int, extra: str = "", attributes: str = "[]", name: str = "chat m") -> str:
    return (
        f'{{"traceId": "{T}", "spanId": "00f067aa0ba902b{n}", "name": "{name}", '
        f'"startTimeUnixNano": "1", "endTimeUnixNano": "2", "attributes": {attributes}{extra}}}'
    )


def attrs(value: str, key: str = "gen_ai.x") -> str:
    return (
        f'[{{"key": "{key}", "value": {value}}}, {{"key": "k", "value": {{"stringValue": "v"}}}}]'
    )


def walked(text: str, lazy: bool = True) -> tuple[Any, ...]:
    return json_reference.decoded(text.encode(), lazy)


BIG = "18446744073709551617"  # 2**64 + 1: beyond 64 bits
WALKED = [
    request(span(1)),
    request(span(1, extra=f', "kind": {BIG}')),  # json: an int kind, kept
    request(span(1, extra=f', "status": {{"code": {BIG}}}')),
    request(span(1, extra=f', "status": {{"code": -{BIG}}}')),
    request(span(1, extra=f', "startTimeUnixNano": {BIG}')),  # refused, naming the number
    request(span(1, extra=f', "startTimeUnixNano": -{BIG}')),
    request(span(1, attributes=attrs(f'{{"intValue": {BIG}}}'))),  # a GenAI span
    request(span(1, attributes=attrs(f'{{"intValue": -{BIG}}}'))),
    request(span(1, attributes=attrs(f'{{"doubleValue": {BIG}}}'))),
    request(span(1, attributes=attrs(f'{{"stringValue": {BIG}}}'))),  # refused
    request(span(1, attributes=attrs(f'{{"arrayValue": {{"values": [{{"intValue": {BIG}}}]}}}}'))),
    request(span(1, attributes=attrs('{"intValue": 1e19}'))),  # a float: the same either way
    request(span(1, attributes=attrs('{"doubleValue": 1e300}'))),
    request(span(1, name="GET /x", attributes=attrs(f'{{"intValue": {BIG}}}', key="http.x"))),
    request(span(1, name="GET /x", attributes=attrs(f'{{"boolValue": {BIG}}}', key="http.x"))),
    request(  # a skeleton's event, read by hydrate
        span(1, name="GET /x", extra=f', "events": [{{"name": "e", "timeUnixNano": {BIG}}}]')
    ),
    request(span(1, name="GET /x", extra=', "x": ' + BIG)),  # never read: the same either way
    request(span(1), span(2, extra=f', "kind": {BIG}'), resource=attrs(f'{{"intValue": {BIG}}}')),
    request(span(1), resource=attrs('{"intValue": ' + "9" * 30 + "}")),
    request(span(1, extra=', "kind": "SPAN_KIND_SERVER", "status": {"code": "STATUS_CODE_ERROR"}')),
    request(span(1, extra=', "kind": true')),  # refused, by both
    request(span(1, extra=', "spanId": 5')),
    request(span(1, extra=', "name": 5')),
    "[" + request(span(1)) + ", " + request(span(2, extra=f', "kind": {BIG}')) + "]",
    '{"resourceLogs": [{"scopeLogs": [{"logRecords": [{"eventName": "gen_ai.x", '
    f'"timeUnixNano": "1", "body": {{"intValue": {BIG}}}}}]}}]}}]}}',
    '{"resourceLogs": [{"scopeLogs": [{"logRecords": [{"eventName": "gen_ai.x", '
    f'"timeUnixNano": {BIG}}}]}}]}}]}}',
    '{"resourceLogs": [{"scopeLogs": [{"logRecords": [{"eventName": "other", '
    f'"timeUnixNano": {BIG}}}]}}]}}]}}',  # not kept, never read
]


@pytest.mark.parametrize("text", WALKED)
@pytest.mark.parametrize("lazy", [True, False], ids=["lazy", "whole"])
def test_the_reader_gives_the_python_walker_s_spans_and_errors(text: str, lazy: bool) -> None:
    json.loads(text)  # every case is valid JSON
    assert walked(text, lazy) == json_reference.read(text, lazy)


def test_an_int_value_past_64_bits_reads_as_json_reads_it() -> None:
    decoded = decode_bytes(request(span(1, attributes=attrs(f'{{"intValue": {BIG}}}'))).encode())
    assert decoded.spans[0].attributes["gen_ai.x"] == int(BIG)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [
                '{"stringValue": "s"}',
                '{"intValue": "12"}',
                '{"intValue": 12}',
                f'{{"intValue": {BIG}}}',
                f'{{"intValue": -{BIG}}}',
                '{"intValue": 1.5}',
                '{"doubleValue": 2.5}',
                f'{{"doubleValue": {BIG}}}',
                '{"doubleValue": "NaN"}',
                '{"boolValue": true}',
                '{"boolValue": 1}',
                '{"bytesValue": "AAE="}',
                '{"arrayValue": {"values": [{"intValue": 3}, {"stringValue": "x"}]}}',
                '{"kvlistValue": {"values": [{"key": "a", "value": {"intValue": 4}}]}}',
                "{}",
                "null",
                "5",
            ]
        ),
        min_size=1,
        max_size=4,
    ),
    st.sampled_from(["gen_ai.x", "http.x"]),
    st.sampled_from(["chat m", "GET /x"]),
    st.sampled_from(["", ', "kind": 2', f', "kind": {BIG}', ', "startTimeUnixNano": 7']),
)
def test_random_attribute_values_read_as_the_python_walker_read_them(
    values: list[str], key: str, name: str, extra: str
) -> None:
    kvs = (
        "[" + ", ".join(f'{{"key": "{key}{i}", "value": {v}}}' for i, v in enumerate(values)) + "]"
    )
    text = request(span(1, extra=extra, attributes=kvs, name=name))
    assert walked(text) == json_reference.read(text)


def test_the_spans_of_a_resource_share_its_dict_and_each_request_has_its_own() -> None:
    """The string limit cuts a resource's dict in place (`sanitize.truncate_decoded`)."""
    resource = '[{"key": "service.name", "value": {"stringValue": "shop"}}]'
    first = decode_bytes(request(span(1), span(2), resource=resource).encode()).spans
    assert first[0].resource is first[1].resource
    first[0].resource["service.name"] = "cut"
    second = decode_bytes(request(span(3), resource=resource).encode()).spans
    assert second[0].resource == {"service.name": "shop"}


# -- the span source (`JsonSpan`) -----------------------------------------------------------------


def test_a_skeleton_keeps_its_text_and_comes_back_from_pickle_without_a_parse() -> None:
    text = request(span(1, name="GET /x", attributes=attrs('{"intValue": "7"}', key="http.x")))
    skeleton = decode_bytes(text.encode()).spans[0]
    source = skeleton.source
    assert isinstance(source, otlp_json.JsonSpan) and source.has_content
    assert json.loads(source.text)["name"] == "GET /x"
    again = pickle.loads(pickle.dumps(source))
    assert again == source and again.has_content
    assert otlp_json.hydrate(again)[0] == {"http.x": 7, "k": "v"}
    assert not otlp_json.JsonSpan('{"name": "x", "attributes": []}').has_content
    with pytest.raises(ValueError):
        otlp_json.JsonSpan("[1]")


def test_a_skeleton_notes_a_transport_key_and_keeps_the_note_through_pickle() -> None:
    text = request(
        span(1, name="GET /x", attributes=attrs('{"intValue": "7"}', key="\\u0068ttp.x")),
        span(2, name="work", attributes=attrs('{"intValue": "7"}', key="acme.kind")),
        span(3, name="chat m", attributes=attrs('{"intValue": "7"}', key="gen_ai.x")),
    )
    transport, plain, full = decode_bytes(text.encode()).spans
    assert [decode.transport_skeleton(s) for s in (transport, plain, full)] == [True, False, False]
    again = pickle.loads(pickle.dumps(transport.source))
    assert (
        again.has_transport_key and not pickle.loads(pickle.dumps(plain.source)).has_transport_key
    )
    assert not decode.transport_skeleton(decode.hydrate(transport))  # read now: no skeleton
    assert not any(
        decode.transport_skeleton(s) for s in decode_bytes(text.encode(), lazy=False).spans
    )
    assert not otlp_json.JsonSpan('{"attributes": [{"key": "http.x"}]}').has_transport_key


def test_lines_blank_to_python_are_skipped_and_others_refused_with_json_s_words() -> None:
    good = request(span(1)).encode()
    assert otlp_json.read_line(b" \xc2\xa0\x1c\t\n", True, False) is None  # NBSP, FS: blank
    assert otlp_json.read_line(b"\xef\xbb\xbf" + good + b"\n", True, True)[2] == 1
    refused = otlp_json.read_line(b"\xef\xbb\xbf" + good, True, False)[6]
    assert refused is not None and refused[0] == "json"  # a BOM only opens the first line
    with pytest.raises(JsonReadError) as bad:
        otlp_json.read_line(b'{"a": "\xff"}', True, False)
    assert bad.value.args[:1] == ("utf8",) and bad.value.args[3] == 7


def test_hydrate_cuts_long_strings_and_skips_the_cut_walk_for_a_short_span(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    value = '{"stringValue": "' + "x" * 50 + '"}'
    text = request(span(1, name="GET /x", attributes=attrs(value, key="http.x")))
    skeleton = decode_bytes(text.encode()).spans[0]
    long = decode_bytes(text.encode()).spans[0]
    assert decode.hydrate(long, max_attribute_chars=10).attributes["http.x"].startswith("x" * 10)
    assert len(long.attributes["http.x"]) < 50

    def walked(*_: Any) -> int:
        raise AssertionError("a span text no longer than the limit holds nothing to cut")

    monkeypatch.setattr(decode, "truncate_span", walked)
    assert decode.hydrate(skeleton, max_attribute_chars=len(text)).attributes["http.x"] == "x" * 50
