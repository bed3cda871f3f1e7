"""The sidecar config's load and an idle sidecar's start and shutdown (docs/measurements.md,
"The sidecar config's load and an idle start").

    .venv/bin/python tools/measure_serve_start.py
"""

import statistics
import tempfile
import time
from pathlib import Path

from attest_otel.sidecar.config import load_service_config
from attest_otel.sidecar.service import build_service


def main() -> None:
    full = (
        Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "sidecar" / "valid_full.yaml"
    )
    t0 = time.perf_counter()
    load_service_config(full, environ={})
    first = time.perf_counter() - t0
    runs = []
    for _ in range(200):
        t0 = time.perf_counter()
        load_service_config(full, environ={})
        runs.append(time.perf_counter() - t0)
    print(
        f"config load: first {first * 1e3:.1f} ms, "
        f"then median {statistics.median(runs) * 1e3:.2f} ms"
    )
    starts, stops = [], []
    for _ in range(5):
        with tempfile.TemporaryDirectory() as tmp:
            cfg = load_service_config(
                None,
                {
                    "forward_endpoint": "127.0.0.1:9",
                    "grpc_endpoint": "127.0.0.1:0",
                    "http_endpoint": "127.0.0.1:0",
                    "store": f"{tmp}/store.db",
                    "buffer_dir": f"{tmp}/buf",
                },
                environ={},
            )
            t0 = time.perf_counter()
            s = build_service(cfg)
            s.start()
            t1 = time.perf_counter()
            assert s.shutdown(5.0)
            t2 = time.perf_counter()
            starts.append(t1 - t0)
            stops.append(t2 - t1)
    print(
        f"idle sidecar: start median {statistics.median(starts):.3f} s, "
        f"shutdown median {statistics.median(stops):.3f} s (5 runs)"
    )


if __name__ == "__main__":
    main()
