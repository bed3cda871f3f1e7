"""The paths fed by the dialects' declared markers, each timed alone: us per span.

    .venv/bin/python bench/bench_markers.py [--root DIR] [--repeat 7]

The decoders' candidate test, the sidecar's wire tests (`read_shape`) and agent byte probe,
and `detect`, on the workload of `bench_sidecar.py` (agent traces, and a mix with 80 % plain
HTTP/DB traces). Each row is the fastest of `--repeat` runs: on a shared machine the fastest
run is the one least disturbed, which is what a before/after comparison needs. `--root`
imports `attest_otel` from another checkout (say, `git archive` of an older commit with
`attest_otel/_proto` copied in), to time the code as it was with this same script.
Not a test.
"""

from __future__ import annotations

import argparse
import sys
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=HERE.parent)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(args.root.resolve()))

    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )
    from sidecar_workload import build_requests

    from attest_otel.adapt import detect
    from attest_otel.ingest.candidate import is_genai_candidate
    from attest_otel.ingest.decode import decode_request
    from attest_otel.sidecar import probe
    from attest_otel.sidecar.shape import read_shape

    def parse(data: bytes, lazy: bool = True) -> list[Any]:
        req = ExportTraceServiceRequest.FromString(data)
        return list(decode_request(req, data=data, lazy=lazy).spans)

    mixed = build_requests(4, 24, 0.2)
    genai = build_requests(4, 24, 1.0)
    n_mixed = sum(len(parse(d)) for d in mixed)
    n_genai = sum(len(parse(d)) for d in genai)
    spans = [s for d in genai for s in parse(d, lazy=False)]
    shapes = [f for d in genai for f in read_shape(d)]
    keys = ["http.request.method", "url.full", "server.address", "http.response.status_code"]
    scope = "opentelemetry.instrumentation.httpx"

    rows: dict[str, tuple[Callable[[], object], int]] = {
        "decode, mixed": (lambda: [parse(d) for d in mixed], n_mixed),
        "decode, agent": (lambda: [parse(d) for d in genai], n_genai),
        "candidate, HTTP span": (
            lambda: [is_genai_candidate("GET /x", keys, scope) for _ in range(1000)],
            1000,
        ),
        "read_shape, mixed": (lambda: [read_shape(d) for d in mixed], n_mixed),
        "agent byte probe": (
            lambda: [probe._is_agent_record(f.record) for f in shapes],
            len(shapes),
        ),
        "detect, agent spans": (lambda: [detect(s) for s in spans], len(spans)),
    }
    print(f"attest_otel from {args.root}; fastest of {args.repeat}, us per span")
    for name, (run, count) in rows.items():
        best = min(timeit.repeat(run, number=3, repeat=args.repeat)) / 3
        print(f"  {name:22s} {best / count * 1e6:8.3f}")


if __name__ == "__main__":
    main()
