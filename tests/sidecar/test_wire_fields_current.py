"""The wire core's field table (rust/attest_wire/src/fields.rs) is generated from the OTLP
descriptors protobuf parses with; a stale one would validate against the wrong schema."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import attest_otel_wire

ROOT = Path(__file__).resolve().parents[2]


def test_fields_rs_is_what_the_generator_writes_now() -> None:
    done = subprocess.run(
        [sys.executable, "tools/gen_wire_fields.py", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_the_core_knows_every_root_the_sidecar_checks() -> None:
    for name in (
        "opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest",
        "opentelemetry.proto.collector.logs.v1.ExportLogsServiceRequest",
        "opentelemetry.proto.collector.metrics.v1.ExportMetricsServiceRequest",
        "opentelemetry.proto.trace.v1.TracesData",
    ):
        assert attest_otel_wire.check(b"", name) is None
