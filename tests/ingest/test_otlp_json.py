"""`otlp_json.loads` reads JSON with orjson but must read (and refuse) what `json.loads` does,
and the JSON walkers must give the same spans and errors whichever parser read the text
(issue 12). Where the two parsers differ (NaN, Infinity, huge numbers, unpaired surrogates,
errors), `loads` gives `json`'s outcome; integers beyond 64 bits, which orjson reads as floats,
are made up for by the walkers, so decoded spans and errors are `json`'s there too."""

from __future__ import annotations

import json
import math
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attest_otel.ingest import otlp_json
from attest_otel.ingest.otlp_common import MalformedOTLP
from attest_otel.ingest.sanitize import may_hold_lone_surrogates
from attest_otel.model import LogRecord, Span

T = "0af7651916cd43dd8448eb211c80319c"


def outcome(parse: Any, text: str) -> tuple[str, str]:
    """What a parser makes of `text`: ("ok", repr of the value with its types) or the error."""
    try:
        value = parse(text)
    except RecursionError:
        return ("error", "RecursionError")
    except ValueError as exc:  # JSONDecodeError, or int's 4300-digit limit
        return ("error", f"{type(exc).__name__}: {exc}")
    return ("ok", typed_repr(value))


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


def _int_as_orjson_reads_it(digits: str) -> int | float:
    """orjson reads an integer beyond 64 bits as a float (if a double holds it: if not, it
    refuses the text and `loads` leaves it to `json`): never valid OTLP, so not made up for."""
    number = int(digits)
    if -(2**63) <= number <= 2**64 - 1:
        return number
    approximate = float(digits)
    return approximate if math.isfinite(approximate) else number


def json_loads(text: str) -> Any:
    """What `loads` promises: `json.loads`, but for integers beyond 64 bits in a text orjson
    reads (a text it refuses is all `json`'s)."""
    try:
        orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)
    return json.loads(text, parse_int=_int_as_orjson_reads_it)


@pytest.mark.parametrize("text", EDGE_CASES)
def test_loads_reads_and_refuses_what_json_does(text: str) -> None:
    assert outcome(otlp_json.loads, text) == outcome(json_loads, text)


def test_loads_reads_integers_beyond_64_bits_as_floats_and_no_other_number() -> None:
    assert otlp_json.loads("[18446744073709551615, -9223372036854775808]") == [2**64 - 1, -(2**63)]
    found = otlp_json.loads("[18446744073709551616, -9223372036854775809]")
    assert [type(x) for x in found] == [float, float]
    assert otlp_json.loads("1" + "0" * 400) == 10**400  # no double holds it: json reads it


def test_loads_gives_json_s_own_error_messages() -> None:
    for text in ('{"resourceSpans": [}', '{"a": 1', "[1, 2", '{"a": "\x01"}'):
        with pytest.raises(json.JSONDecodeError) as ours:
            otlp_json.loads(text)
        with pytest.raises(json.JSONDecodeError) as theirs:
            json.loads(text)
        assert (ours.value.msg, ours.value.pos) == (theirs.value.msg, theirs.value.pos)


def test_nesting_is_refused_past_orjson_s_1024_levels_as_json_refuses_it() -> None:
    """The one documented change: orjson reads up to 1024 levels wherever it is called from;
    `json` stopped at the interpreter's recursion limit (986 levels from the command line).
    Deeper documents are refused the same way as before."""
    deep = "[" * 1024 + "]" * 1024
    assert otlp_json.loads(deep) is not None
    with pytest.raises(RecursionError):
        otlp_json.loads("[" * 1025 + "]" * 1025)


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
    assert outcome(otlp_json.loads, text) == outcome(json_loads, text)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet='{}[]:,"\\ud800aeE0123456789.-+ \n', max_size=30))
def test_any_json_like_text_reads_or_fails_as_json_does(text: str) -> None:
    assert outcome(otlp_json.loads, text)[0] == outcome(json.loads, text)[0]


def test_loads_one_reads_one_document_and_leaves_the_rest_to_json() -> None:
    assert otlp_json.loads_one('\n {"a": [1, 2]} \n') == {"a": [1, 2]}
    for text in ("{} {}", "{}\n{}", '{"a": NaN}', '"\\ud800"', "{", "[" * 2000 + "]" * 2000):
        assert otlp_json.loads_one(text) is otlp_json.NOT_ONE_DOCUMENT


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('"plain"', False),
        ('"\\u00e9"', False),
        ('"\\ud83d\\ude00"', False),
        ('"\\uD83D\\uDE00"', False),
        ('"\\ud800"', True),
        ('"\\uDBFF x"', True),
        ('"\\udc00"', True),
        ('"\\uDFFF"', True),
        ('"\\ud800\\ud800\\udc00"', True),
        ('"\\ud83d\\ude00\\ude00"', True),
        ('"\\ud7ff\\ue000"', False),
    ],
)
def test_may_hold_lone_surrogates(text: str, expected: bool) -> None:
    assert may_hold_lone_surrogates(text) is expected


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


def walked(parse: Any, text: str, lazy: bool = True) -> tuple[str, str]:
    """The spans (skeletons hydrated, as `decode.hydrate` does) and log records walked from
    `text` read by `parse`, or the walker's error."""
    spans: list[Span] = []
    logs: list[LogRecord] = []
    try:
        document = parse(text)
        items = document if type(document) is list else [document]
        for item in items:
            if "resourceLogs" in item:
                otlp_json.walk_logs(item, logs, lazy=lazy)
            else:
                otlp_json.walk_traces(item, spans, lazy=lazy)
        for one in spans:
            if not one.attributes and not one.events and isinstance(one.source, dict):
                one.attributes = otlp_json.attributes(one.source.get("attributes"))
                one.events = otlp_json.events(one.source)
    except MalformedOTLP as exc:
        return ("error", str(exc))
    except (RecursionError, ValueError, TypeError, AttributeError) as exc:
        return ("error", type(exc).__name__)
    return ("ok", typed_repr([(repr(s), s.attributes, s.events) for s in spans] + logs))


BIG = "18446744073709551617"  # 2**64 + 1: orjson reads it as 1.8446744073709552e+19
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
def test_walks_give_json_s_spans_and_errors_but_for_integers_past_64_bits(
    text: str,
    lazy: bool,
) -> None:
    json.loads(text)  # every case is valid JSON
    assert walked(otlp_json.loads, text, lazy) == walked(json_loads, text, lazy)


def test_an_int_value_past_64_bits_reads_as_the_integer_of_its_nearest_float() -> None:
    spans: list[Span] = []
    otlp_json.walk_traces(
        otlp_json.loads(request(span(1, attributes=attrs(f'{{"intValue": {BIG}}}')))),
        spans,
        lazy=True,
    )
    assert spans[0].attributes["gen_ai.x"] == int(float(BIG)) != int(BIG)


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
def test_random_attribute_values_walk_the_same_whichever_parser_read_them(
    values: list[str], key: str, name: str, extra: str
) -> None:
    kvs = (
        "[" + ", ".join(f'{{"key": "{key}{i}", "value": {v}}}' for i, v in enumerate(values)) + "]"
    )
    text = request(span(1, extra=extra, attributes=kvs, name=name))
    assert walked(otlp_json.loads, text) == walked(json_loads, text)


def test_texts_over_the_orjson_limit_are_read_by_json_which_holds_less_memory() -> None:
    long = '{"a": "' + "x" * otlp_json.ORJSON_MAX_CHARS + '"}'
    assert otlp_json.loads(long) == {"a": "x" * otlp_json.ORJSON_MAX_CHARS}
    assert otlp_json.loads_one(long) is otlp_json.NOT_ONE_DOCUMENT


def test_a_repeated_resource_is_a_fresh_equal_dict_for_every_request() -> None:
    """Resources seen before are answered from a small cache: never the same dict (the string
    limit cuts dicts in place), never for lists that only compare equal in part."""
    resource = '[{"key": "service.name", "value": {"stringValue": "shop"}}]'
    first: list[Span] = []
    second: list[Span] = []
    otlp_json.walk_traces(json.loads(request(span(1), resource=resource)), first, lazy=True)
    first[0].resource["service.name"] = "cut"
    otlp_json.walk_traces(json.loads(request(span(2), resource=resource)), second, lazy=True)
    assert second[0].resource == {"service.name": "shop"}
    for other, expected in [
        (
            '[{"key": "service.name", "value": {"stringValue": "shop", "x": 1}}]',
            {"service.name": "shop"},
        ),
        ('[{"key": "service.name", "value": {"intValue": "5"}}]', {"service.name": 5}),
        (resource[:-1] + ", " + resource[1:], {"service.name": "shop"}),
        (
            '[{"key": "service.name", "value": {"stringValue": "' + "x" * 300 + '"}}]',
            {"service.name": "x" * 300},
        ),
    ]:
        for _ in range(2):
            found: list[Span] = []
            otlp_json.walk_traces(json.loads(request(span(3), resource=other)), found, lazy=True)
            assert found[0].resource == expected
