"""The real app (`openai_app.py`) run into a sidecar, and what came out the other side.

`run_app` starts the app as its own process (its exporters, env and instrumentation are its
own, as in a user's service) pointed at a sidecar, and returns what the app says it did; the
downstream then holds what the sidecar forwarded. `grades_on_spans` reads the grade the
sidecar wrote on each agent span, `file_grades` what `grade --file` says over the same
traces and logs, as the app captured them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)

from tests.sidecar.downstream import Downstream
from tests.sidecar.helpers import REPO, attr

APP = Path(__file__).with_name("openai_app.py")


def run_app(config: dict[str, Any], timeout: float = 120.0) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, str(APP), json.dumps(config)],
        cwd=REPO,
        env=env,
        capture_output=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        raise AssertionError(f"the app failed ({done.returncode}):\n{done.stderr.decode()}")
    result: dict[str, Any] = json.loads(done.stdout.decode().strip().splitlines()[-1])
    result["stderr"] = done.stderr.decode()
    return result


def grades_on_spans(downstream: Downstream) -> dict[str, tuple[str, float, int]]:
    """trace id -> (verdict, score, calls) written on its agent span."""
    out: dict[str, tuple[str, float, int]] = {}
    for span in downstream.spans():
        verdict = attr(span.attributes, "attest.tool_use.verdict")
        if verdict is not None:
            out[span.trace_id.hex()] = (
                str(verdict),
                round(float(attr(span.attributes, "attest.tool_use.score")), 3),
                int(attr(span.attributes, "attest.tool_use.calls")),
            )
    return out


def file_grades(capture: Path) -> dict[str, tuple[str, float, int]]:
    """trace id -> (verdict, score, calls) of `grade --file` over the app's own export."""
    done = subprocess.run(
        [sys.executable, "-m", "attest_otel.cli", "grade", "--file", str(capture), "--json"],
        cwd=REPO,
        capture_output=True,
        check=False,
    )
    assert done.returncode in (0, 1), done.stderr.decode()
    out: dict[str, tuple[str, float, int]] = {}
    for one in json.loads(done.stdout)["traces"]:
        for run in one["runs"]:
            result = run["result"]
            out[one["trace_id"]] = (
                str(result["verdict"]),
                round(float(result["score"]), 3),
                len(result.get("findings") or []),
            )
    return out


def store_grades(store: Path, trace_ids: set[str]) -> dict[str, tuple[str, float, int]]:
    """`grade --trace-id` from the sidecar's store, graded again (an override), not reused:
    what it reads of each trace is what the sidecar stored."""
    out: dict[str, tuple[str, float, int]] = {}
    for trace_id in sorted(trace_ids):
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "attest_otel.cli",
                "grade",
                "--trace-id",
                trace_id,
                "--store",
                str(store),
                "--allowed-tools",
                "lookup_order,charge_card",
                "--json",
            ],
            cwd=REPO,
            capture_output=True,
            check=False,
        )
        assert done.returncode in (0, 1), done.stderr.decode()
        for one in json.loads(done.stdout)["traces"]:
            for run in one["runs"]:
                assert not run.get("stored_grade")
                result = run["result"]
                out[one["trace_id"]] = (
                    str(result["verdict"]),
                    round(float(result["score"]), 3),
                    len(result.get("findings") or []),
                )
    return out


def app_log_records(downstream: Downstream) -> list[tuple[str, str, str]]:
    """(trace id, span id, event name) of every log record downstream that the app sent
    (not the sidecar's own evaluation records)."""
    out: list[tuple[str, str, str]] = []
    for raw in list(downstream.requests["logs"]):
        request = ExportLogsServiceRequest.FromString(raw)
        for rl in request.resource_logs:
            service = attr(rl.resource.attributes, "service.name")
            if service != "billing-app":
                continue
            for sl in rl.scope_logs:
                for record in sl.log_records:
                    out.append((record.trace_id.hex(), record.span_id.hex(), record.event_name))
    return out


def app_metric_requests(downstream: Downstream) -> list[ExportMetricsServiceRequest]:
    return [ExportMetricsServiceRequest.FromString(raw) for raw in downstream.requests["metrics"]]


def captured_log_records(capture: Path) -> list[tuple[str, str, str]]:
    out: list[tuple[str, str, str]] = []
    for line in capture.read_text().splitlines():
        document = json.loads(line)
        for rl in document.get("resourceLogs", []):
            for sl in rl.get("scopeLogs", []):
                for record in sl.get("logRecords", []):
                    out.append(
                        (
                            record.get("traceId", ""),
                            record.get("spanId", ""),
                            record.get("eventName", ""),
                        )
                    )
    return out
