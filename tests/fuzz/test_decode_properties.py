"""Property tests for decode -> adapt -> grade, on generated OTLP requests and run files.

- A valid request decodes to the same spans in every encoding (protobuf, length-prefixed,
  both JSON mappings, JSON lines, gzip) as the parsed request does, lazily or not.
- Anything else (mutated encodings, wrong types at random paths, random bytes) either decodes
  or raises `InputError`; never another exception (`oracle.decode_or_refuse`).
- Whatever decodes adapts and grades offline without raising (`oracle.grade_decoded`).
- Run files (`.json`, `.jsonl`) with random JSON in every field: runs that grade, or an
  `InputError`.

The `fuzz` hypothesis profile (the default here) keeps `make test` fast: 150 examples per
test, no deadline (a loaded CI box is slow; the hostile tests bound
time themselves). `HYPOTHESIS_PROFILE_FUZZ=fuzz-long pytest tests/fuzz/test_decode_properties.py
--timeout=0` runs 4000 per test; `atheris_decode.py` runs millions, coverage-guided.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from attest_otel.errors import InputError
from attest_otel.ingest.decode import decode_bytes, decode_request, hydrate
from tests.fuzz import oracle
from tests.fuzz.strategies import (
    ENCODINGS,
    byte_mutations,
    comparable,
    json_mutations,
    json_values,
    log_requests,
    otlp_json_dict,
    run_dicts,
    to_protobuf_json,
    trace_requests,
)

_COMMON: dict[str, Any] = {
    "deadline": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
    # CI runs the same examples every time (a red CI must mean a change broke something);
    # a developer's run explores new ones.
    "derandomize": bool(os.environ.get("CI")),
}
settings.register_profile("fuzz", max_examples=150, **_COMMON)
settings.register_profile("fuzz-long", max_examples=4000, **_COMMON)
fuzz = settings.get_profile(os.environ.get("HYPOTHESIS_PROFILE_FUZZ", "fuzz"))


def _spans(data: bytes, *, lazy: bool) -> list[str]:
    with oracle.no_walker_bugs():
        decoded = decode_bytes(data, lazy=lazy)  # a valid request: an InputError fails
    spans = [hydrate(s) for s in decoded.spans] if lazy else decoded.spans
    return [comparable(s) for s in spans]


# -- valid input: the same spans in every encoding ----------------------------------------------


@fuzz
@given(req=trace_requests(), lazy=st.booleans())
def test_a_valid_request_decodes_to_the_same_spans_in_every_encoding(
    req: ExportTraceServiceRequest, lazy: bool
) -> None:
    expected = [comparable(s) for s in decode_request(req, lazy=False).spans]
    for name, encode in ENCODINGS.items():
        body = encode(req)
        try:
            got = _spans(body, lazy=lazy)
        except InputError as exc:
            raise AssertionError(f"{name} refused: {exc}\n{body[:2000]!r}") from exc
        assert got == expected, name


@fuzz
@given(req=trace_requests())
def test_a_valid_request_adapts_and_grades(req: ExportTraceServiceRequest) -> None:
    decoded = decode_request(req)
    oracle.grade_decoded(decoded)


@fuzz
@given(req=log_requests())
def test_a_logs_request_decodes_the_same_in_protobuf_and_json(
    req: ExportLogsServiceRequest,
) -> None:
    def records(data: bytes) -> list[str]:
        decoded = decode_bytes(data, lazy=False)
        return [
            repr((r.trace_id, r.span_id, r.event_name, r.time_ns, r.body, r.attributes))
            for r in decoded.logs
        ]

    expected = records(req.SerializeToString())
    assert records(json.dumps(otlp_json_dict(req)).encode()) == expected
    assert records(to_protobuf_json(req)) == expected


# -- invalid input: decoded or refused, never a crash -------------------------------------------


@fuzz
@given(req=trace_requests(max_spans=4), encoding=st.sampled_from(sorted(ENCODINGS)), data=st.data())
def test_a_mutated_encoding_decodes_or_is_refused(
    req: ExportTraceServiceRequest, encoding: str, data: st.DataObject
) -> None:
    body = data.draw(byte_mutations(ENCODINGS[encoding](req)))
    content_type = data.draw(st.sampled_from((None, "application/json", "application/x-protobuf")))
    oracle.exercise_otlp(body, content_type)


@fuzz
@given(req=trace_requests(max_spans=4), lazy=st.booleans(), data=st.data())
def test_wrong_types_at_random_paths_decode_or_are_refused(
    req: ExportTraceServiceRequest, lazy: bool, data: st.DataObject
) -> None:
    dialect = data.draw(st.sampled_from(("otlp", "protobuf")))
    document = otlp_json_dict(req) if dialect == "otlp" else json.loads(to_protobuf_json(req))
    mutated = data.draw(json_mutations(document))
    oracle.exercise_otlp(json.dumps(mutated).encode(), lazy=lazy)


@fuzz
@given(req=log_requests(), data=st.data())
def test_a_mutated_logs_request_decodes_or_is_refused(
    req: ExportLogsServiceRequest, data: st.DataObject
) -> None:
    mutated = data.draw(json_mutations(otlp_json_dict(req)))
    oracle.exercise_otlp(json.dumps(mutated).encode())
    oracle.exercise_otlp(data.draw(byte_mutations(req.SerializeToString())))


@fuzz
@given(
    body=st.one_of(
        st.binary(max_size=200),
        st.text(max_size=200).map(str.encode),
        json_values.map(lambda v: json.dumps(v).encode()),
        st.builds(lambda v: json.dumps({"resourceSpans": v}).encode(), json_values),
    ),
    content_type=st.sampled_from((None, "application/json", "application/x-protobuf")),
)
def test_any_bytes_decode_or_are_refused(body: bytes, content_type: str | None) -> None:
    oracle.exercise_otlp(body, content_type)


# -- run files -----------------------------------------------------------------------------------


@fuzz
@given(run=st.one_of(run_dicts(), json_values))
def test_any_run_object_reads_as_a_run_that_grades_or_is_refused(run: Any) -> None:
    oracle.exercise_run_value(run)


@fuzz
@given(
    runs=st.lists(st.one_of(run_dicts(), json_values), min_size=1, max_size=3),
    suffix=st.sampled_from((".json", ".jsonl")),
    data=st.data(),
)
def test_any_run_file_reads_or_is_refused(
    runs: list[Any], suffix: str, data: st.DataObject, tmp_path_factory: Any
) -> None:
    if suffix == ".json":
        text = json.dumps(runs[0]).encode()
    else:
        text = "\n".join(json.dumps(r) for r in runs).encode()
    if data.draw(st.booleans()):
        text = data.draw(byte_mutations(text))
    directory: Path = tmp_path_factory.getbasetemp()
    oracle.exercise_run_text(text, suffix, directory)


def test_decode_bytes_accepts_what_the_receivers_pass() -> None:
    """bytearray and memoryview bodies (receivers) decode like bytes."""
    body = ENCODINGS["protobuf"](ExportTraceServiceRequest())
    assert decode_bytes(bytearray(body)).spans == []
    assert decode_bytes(memoryview(b'{"resourceSpans": []}')).spans == []
