"""The wire core's OTLP/JSON reader (`otlp_json`, issue 30) against the Python walker it
replaced (`tests/ingest/json_reference.py`, over `json.loads`): the same spans, log records,
counts and errors on generated OTLP/JSON, valid and mutated, in both JSON dialects."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tests.fuzz.strategies import (
    byte_mutations,
    json_mutations,
    json_values,
    log_requests,
    otlp_json_dict,
    to_protobuf_json,
    trace_requests,
)
from tests.fuzz.test_decode_properties import fuzz as _fuzz
from tests.ingest import json_reference


def _same(text: str, lazy: bool = True) -> None:
    expected = json_reference.read(text, lazy)
    assert json_reference.decoded(text.encode(), lazy) == expected, text[:2000]


def _document(req: Any, dialect: str) -> Any:
    if dialect == "otlp":
        return otlp_json_dict(req)
    if dialect == "otlp, int64 as numbers, upper-case hex":
        return otlp_json_dict(req, int64_as_numbers=True, upper_hex=True)
    return json.loads(to_protobuf_json(req))


fuzz = settings(_fuzz, max_examples=60 if _fuzz.max_examples <= 150 else _fuzz.max_examples)
"""Fewer examples than the other fuzz tests: the suite's time is nearly spent, and
`HYPOTHESIS_PROFILE_FUZZ=fuzz-long` still runs 4000."""

DIALECTS = st.sampled_from(("otlp", "otlp, int64 as numbers, upper-case hex", "protobuf"))


@fuzz
@given(req=trace_requests(), dialect=DIALECTS, lazy=st.booleans())
def test_valid_traces_read_as_the_python_walker_read_them(
    req: ExportTraceServiceRequest, dialect: str, lazy: bool
) -> None:
    _same(json.dumps(_document(req, dialect)), lazy)


@fuzz
@given(req=trace_requests(max_spans=4), dialect=DIALECTS, lazy=st.booleans(), data=st.data())
def test_mutated_traces_read_or_are_refused_as_the_python_walker_did(
    req: ExportTraceServiceRequest, dialect: str, lazy: bool, data: st.DataObject
) -> None:
    _same(json.dumps(data.draw(json_mutations(_document(req, dialect)))), lazy)


@fuzz
@given(req=log_requests(), lazy=st.booleans(), data=st.data())
def test_logs_valid_or_mutated_read_as_the_python_walker_read_them(
    req: ExportLogsServiceRequest, lazy: bool, data: st.DataObject
) -> None:
    document = otlp_json_dict(req)
    if data.draw(st.booleans()):
        document = data.draw(json_mutations(document))
    _same(json.dumps(document), lazy)


@fuzz
@given(value=json_values, key=st.sampled_from(("resourceSpans", "resourceLogs", "other")))
def test_any_json_value_in_a_request_reads_as_the_python_walker_read_it(
    value: Any, key: str
) -> None:
    _same(json.dumps({key: value}))
    _same(json.dumps(value))


@fuzz
@given(req=trace_requests(max_spans=3), data=st.data())
def test_broken_json_text_is_refused_as_json_refuses_it(
    req: ExportTraceServiceRequest, data: st.DataObject
) -> None:
    body = data.draw(byte_mutations(json.dumps(otlp_json_dict(req)).encode()))
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        assert json_reference.decoded(body)[1].startswith("not UTF-8 text (byte ")
        return
    if "\n" in text or text.startswith("\ufeff"):
        return  # JSON lines, a byte order mark: not one document
    got, expected = json_reference.decoded(body), json_reference.read(text)
    rest = text.strip(" \t\r")
    if expected == ("error", "json") and not rest:
        assert got[0] == "ok"  # no document at all: nothing to read
        return
    if expected == ("error", "json"):
        try:
            _, end = json.JSONDecoder().raw_decode(rest)
        except (ValueError, RecursionError):
            pass  # the first document is broken: refused as `json` refuses it, below
        else:
            assert rest[end:].strip(" \t\r")  # several documents: `decode`'s to read
            return
    assert got == expected, text
