"""The grading process's parse and decode, CPU per span: the wire core's decoder against the
upb parse + Python walk it replaced (issue 30), in the same run on the same requests.

    .venv/bin/python bench/bench_grading_decode.py [--rounds 5]

Baseline: `ingest/otlp_proto.py` and `ingest/otlp_keyscan.py` as they were before the core
decoded (commit `BASELINE`, read from git): `ExportTraceServiceRequest.FromString` and
`walk_traces(req, lazy=True, data=data)`, what `grading.grade_in_worker` ran. Now:
`decode_request(data)`, which validates the bytes (upb's verdict, `check`) and decodes them.
Rows per workload (bench/sidecar_workload.py, the sidecar bench's traces of 21 spans):

  agent    every trace an agent trace: every span GenAI, decoded in full (1.6 KB a span);
  plain    HTTP/DB traces: every span a skeleton (about 1 KB a span);

and for each: upb's parse alone (the floor under the baseline), the baseline, the core's
decode with its validation, the validation alone, and the decode of bytes validated before
(`checked=True`, the grading process's: the sidecar validated them on receipt).
Figures: docs/measurements.md ("Decoding in the wire core").
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (  # noqa: E402
    ExportTraceServiceRequest,
)
from sidecar_workload import build_requests  # noqa: E402

from attest_otel.ingest import otlp_proto  # noqa: E402
from attest_otel.ingest.decode import decode_request  # noqa: E402

BASELINE = "b93dfdf"
"""The last commit whose grading process parsed with upb and walked the message in Python."""


def _module(name: str, path: str) -> Any:
    source = subprocess.run(
        ["git", "show", f"{BASELINE}:{path}"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    module = types.ModuleType(name)
    sys.modules[name] = module
    exec(compile(source, path, "exec"), module.__dict__)
    return module


def baseline_walk() -> Callable[[bytes], int]:
    _module("attest_otel.ingest.otlp_keyscan", "attest_otel/ingest/otlp_keyscan.py")
    old = _module("baseline_otlp_proto", "attest_otel/ingest/otlp_proto.py")

    def decode(data: bytes) -> int:
        req = ExportTraceServiceRequest.FromString(data)
        spans: list[Any] = []
        seen, _ = old.walk_traces(req, spans, lazy=True, data=data)
        return int(seen)

    return decode


def upb_parse(data: bytes) -> int:
    req = ExportTraceServiceRequest.FromString(data)
    return sum(len(ss.spans) for rs in req.resource_spans for ss in rs.scope_spans)


def core_decode(data: bytes) -> int:
    return decode_request(data).span_count


def core_decode_checked(data: bytes) -> int:
    return decode_request(data, checked=True).span_count


def core_check(data: bytes) -> int:
    assert otlp_proto.check_traces(data) is None
    return 0


def cpu_per_span(fn: Callable[[bytes], int], requests: list[bytes], spans: int) -> float:
    start = time.process_time()
    for _ in range(3):
        for data in requests:
            fn(data)
    return (time.process_time() - start) / (3 * spans) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    before = baseline_walk()
    workloads = {
        "agent": build_requests(4, 24, 1.0, seed=3),
        "plain": build_requests(4, 24, 0.0, seed=3),
    }
    rows: list[tuple[str, Callable[[bytes], int]]] = [
        ("upb parse alone", upb_parse),
        ("before: upb parse + Python walk", before),
        ("now: core check + decode", core_decode),
        ("  of which the check", core_check),
        ("now, checked before (grading)", core_decode_checked),
    ]
    for name, requests in workloads.items():
        spans = sum(core_decode(data) for data in requests)
        walked = sum(before(data) for data in requests)
        assert spans == walked and spans > 0
        size = sum(map(len, requests)) / spans
        results: dict[str, list[float]] = {row: [] for row, _ in rows}
        for _ in range(args.rounds):
            for row, fn in rows:  # the rows take turns, so a busier moment hits all alike
                results[row].append(cpu_per_span(fn, requests, spans))
        print(f"{name}: {spans} spans in {len(requests)} requests, {size:,.0f} bytes a span")
        for row, _ in rows:
            values = results[row]
            print(
                f"  {row:34} {statistics.median(values):6.2f} us/span"
                f"  (min {min(values):.2f}, max {max(values):.2f})"
            )


if __name__ == "__main__":
    main()
