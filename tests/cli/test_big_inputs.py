"""Big inputs (issue 27): `--json` written by orjson only where it writes what `json` did,
and the collector's thresholds raised for the one-shot commands."""

from __future__ import annotations

import gc
import json
import random
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from attest_otel.cli import common, main
from bench.big_file import many_lines

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


_PEAK = """
import resource, sys
from attest_otel.cli import main
try:
    main(sys.argv[1:])
finally:
    sys.stderr.write(f"\\npeak_kib={resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}\\n")
"""


def _peak_mib(*argv: str) -> float:
    """Peak RSS of `attest-otel ARGV` in a process of its own, as it measures itself."""
    done = subprocess.run(
        [sys.executable, "-c", _PEAK, *argv], capture_output=True, text=True, check=False
    )
    assert done.returncode in (0, 1), done.stderr
    return int(done.stderr.rsplit("peak_kib=", 1)[1]) / 1024


def _big_file(path: Path, mib: int) -> None:
    """JSON lines of 24 traces each (bench/big_file.py), copied with new trace ids."""
    line = next(many_lines(random.Random(1), 1))
    ids = sorted(set(re.findall(rb'"traceId":"([0-9a-f]{32})"', line)))
    with path.open("wb") as f:
        for n in range(mib * 2**20 // len(line) + 1):
            copy = line
            for tid in ids:
                copy = copy.replace(tid, b"%08x" % n + tid[8:])
            f.write(copy + b"\n")


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("big") / "big.jsonl"
    _big_file(path, 50)
    return path


@pytest.mark.parametrize(
    "argv",
    [
        ["grade", "--file"],
        ["inspect", "--file"],
        ["grade", "--since", "10000w", "--from"],  # the file: source, one trace at a time
    ],
    ids=["grade", "inspect", "grade-since"],
)
def test_reading_a_big_file_holds_a_bounded_part_of_it(argv: list[str], big: Path) -> None:
    # Decoding the whole file at once held about 6 times its size (docs/measurements.md,
    # "Big files"); a trace at a time, what it holds does not grow with the file.
    size_mib = big.stat().st_size / 2**20
    prefix = "file:" if argv[-1] == "--from" else ""
    small = _peak_mib(*argv, prefix + str(TRACES / "strands__fallback.json"))
    peak = _peak_mib(*argv, prefix + str(big))
    assert peak - small < 2 * size_mib, (peak, small, size_mib)
