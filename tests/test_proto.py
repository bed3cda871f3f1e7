"""The JSON we write is the proto schema's JSON mapping: every example parses into the generated
classes with no unknown field, and comes back the same (nulls are absent in proto3 JSON)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format

from attest_otel._proto.attest_otel.v1 import result_pb2
from attest_otel.grade.grader import grade
from attest_otel.model import read_runs, run_to_dict

EXAMPLES = sorted((Path(__file__).parents[1] / "examples" / "runs").glob("*.json"))


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def _round_trip(data: dict[str, Any], message: Any) -> Any:
    parsed = json_format.ParseDict(data, message, ignore_unknown_fields=False)
    back = json_format.MessageToDict(
        parsed, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    return _without_nulls(back)


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_every_example_run_and_its_result_round_trip_through_the_schema(path: Path) -> None:
    [run] = read_runs(path)
    run_json = run_to_dict(run)
    assert _round_trip(run_json, result_pb2.Run()) == _without_nulls(run_json)
    result_json = grade(run, judge=None).to_dict()
    assert _round_trip(result_json, result_pb2.CheckResult()) == _without_nulls(result_json)


def test_an_empty_allowed_list_survives_as_empty_not_absent() -> None:
    back = _round_trip({"task": "t", "allowed_tools": []}, result_pb2.Run())
    assert back["allowed_tools"] == []
