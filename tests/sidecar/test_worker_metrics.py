"""Runs graded in a grading process reach the grade metrics too (the receiving process
records them after the worker answers: `ToolUseMetrics.record_many`)."""

from __future__ import annotations

import re
import time
import urllib.request

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

from tests.sidecar.downstream import Downstream
from tests.sidecar.helpers import Sidecar, agent_run, free_port, provider

pytestmark = pytest.mark.timeout(120)


def _runs_total(port: int) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    return sum(
        float(m.group(1))
        for m in re.finditer(r"^attest_tool_use_runs_total\{[^}]*\} (\S+)$", text, re.M)
    )


def test_runs_graded_in_a_grading_process_are_counted(
    sidecar: Sidecar, downstream: Downstream
) -> None:
    prom = free_port()
    sidecar.config = {"grading": {"processes": 1}}
    sidecar.extra_args = ["--prometheus", f"127.0.0.1:{prom}"]
    sidecar.start()
    tp = provider(OTLPSpanExporter(endpoint=sidecar.grpc_endpoint, insecure=True))
    tracer = tp.get_tracer("tests.sidecar")
    ids: list[str] = []
    for _ in range(3):
        ids += agent_run(tracer)[1]
    tp.force_flush()
    assert downstream.wait_spans(set(ids), timeout=60), sidecar.log()
    deadline = time.monotonic() + 20
    while _runs_total(prom) < 3 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _runs_total(prom) == 3, sidecar.log()
    tp.shutdown()
