"""Big inputs (issue 27): `--json` written by orjson only where it writes what `json` did,
and the collector's thresholds raised for the one-shot commands."""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from attest_otel.cli import common, main

TRACES = Path(__file__).parents[1] / "fixtures" / "traces"


def _stdlib(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


PLAIN = [
    {},
    [],
    {"a": {}, "b": [], "c": [{}], "d": [[[]]]},
    {"s": "".join(chr(i) for i in range(0x30)) + "\x7f\u2028é😀", "n": None, "t": True},
    {"f": [0.0, -0.0, 1.0, 0.5, 1e-4, 0.1, 123456789.123, 1e16, 1e21, 1e22, 1.5e300]},
    {"i": [0, -1, 2**63 - 1, -(2**63)], "tuple": (1, "x")},
]
ODD = [
    {"small": 1e-05},
    {"smaller": [0.5, {"x": 9.9e-05}]},
    {"nan": float("nan"), "inf": float("inf")},
    {1: "int key"},
    {"big": 2**70},
    {"lone": "\ud800"},
]


@pytest.mark.parametrize("value", PLAIN + ODD)
def test_json_document_is_the_text_json_writes(value: Any) -> None:
    assert common.json_document(value) == _stdlib(value)


@pytest.mark.parametrize("value", PLAIN)
def test_plain_values_are_written_without_the_slow_encoder(
    value: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = _stdlib(value)

    def refuse(*_a: Any, **_k: Any) -> str:
        raise AssertionError("json.dumps used for a plain value")

    monkeypatch.setattr(common.json, "dumps", refuse)
    assert common.json_document(value) == expected


@pytest.fixture
def threshold() -> Iterator[None]:
    saved = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    try:
        yield
    finally:
        gc.set_threshold(*saved)


@pytest.mark.parametrize("command", ["grade", "inspect"])
def test_grade_and_inspect_collect_garbage_less_often(command: str, threshold: None) -> None:
    result = CliRunner().invoke(main, [command, "--file", str(TRACES / "strands__fallback.json")])
    assert result.exit_code == 0, result.output
    assert gc.get_threshold()[0] == common.GC_THRESHOLD0 > 700
