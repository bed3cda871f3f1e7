"""A real Prometheus (Debian's 2.42) scrapes our endpoint; we read the series back over its
HTTP API. This is the test that pins the metric names as Prometheus shows them."""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from attest_otel.errors import UsageError
from attest_otel.export.prometheus import parse_address
from attest_otel.export.telemetry import Telemetry, build_telemetry
from tests.needs import peer

from .sample import graded_run, passing_run

WAIT_S = 30.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Prometheus:
    def __init__(self, base_url: str) -> None:
        self.base_url = base_url

    def _get(self, path: str, **params: str) -> Any:
        url = f"{self.base_url}{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=5) as response:
            body = json.load(response)
        assert body["status"] == "success", body
        return body["data"]

    def query(self, promql: str) -> list[dict[str, Any]]:
        return list(self._get("/api/v1/query", query=promql)["result"])

    def wait_for(self, promql: str, *, deadline: float) -> list[dict[str, Any]]:
        """The query's result once it is not empty; fails the test at the deadline."""
        while True:
            try:
                result = self.query(promql)
            except OSError:  # not listening yet
                result = []
            if result:
                return result
            if time.monotonic() > deadline:
                pytest.fail(f"Prometheus had no data for {promql!r} within {WAIT_S:g}s")
            time.sleep(0.25)

    def metric_names(self) -> set[str]:
        return set(self._get("/api/v1/label/__name__/values"))


@pytest.fixture
def graded_telemetry() -> Iterator[Telemetry]:
    telemetry = build_telemetry(
        endpoint=None,
        protocol=None,
        spans=False,
        logs=False,
        metrics=False,
        prometheus="127.0.0.1:0",
    )
    try:
        telemetry.emit_grade(*graded_run(), grade_span=False)
        telemetry.emit_grade(*passing_run(), grade_span=False)
        yield telemetry
    finally:
        telemetry.shutdown()


@pytest.fixture
def prometheus(graded_telemetry: Telemetry, tmp_path: Path) -> Iterator[Prometheus]:
    prometheus_bin = peer("prometheus")  # Prometheus 3 built from source (tools/build-peers.sh)
    endpoint = graded_telemetry.prometheus
    assert endpoint is not None
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n"
        "  scrape_interval: 1s\n"
        "  scrape_timeout: 1s\n"
        "scrape_configs:\n"
        "  - job_name: attest-otel\n"
        "    static_configs:\n"
        f"      - targets: ['127.0.0.1:{endpoint.port}']\n"
    )
    port = _free_port()
    log = (tmp_path / "prometheus.log").open("w")
    process = subprocess.Popen(
        [
            prometheus_bin,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        yield Prometheus(f"http://127.0.0.1:{port}")
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)
        log.close()


def test_prometheus_scrapes_calls_runs_errors_and_score_buckets_by_their_exporter_names(
    prometheus: Prometheus,
) -> None:
    deadline = time.monotonic() + WAIT_S
    calls = prometheus.wait_for("attest_tool_use_calls_total", deadline=deadline)
    prometheus.wait_for("attest_tool_use_score_bucket", deadline=deadline)

    names = {n for n in prometheus.metric_names() if n.startswith("attest_")}
    assert names == {
        "attest_tool_use_calls_total",
        "attest_tool_use_errors_total",
        "attest_tool_use_runs_total",
        "attest_tool_use_score_bucket",
        "attest_tool_use_score_count",
        "attest_tool_use_score_sum",
    }

    labels = calls[0]["metric"]
    assert {"attest_verdict", "attest_severity", "gen_ai_tool_name", "gen_ai_agent_name"} <= set(
        labels
    )
    assert labels["job"] == "attest-otel"
    assert labels["otel_scope_name"] == "attest_otel"
    assert sum(float(s["value"][1]) for s in calls) == 13

    silent = prometheus.query(
        'sum by (gen_ai_tool_name) (attest_tool_use_calls_total{attest_verdict="error_silent"})'
    )
    assert {s["metric"]["gen_ai_tool_name"] for s in silent} == {"search_kb", "audit_log"}

    runs = prometheus.query("sum by (attest_tool_use_verdict) (attest_tool_use_runs_total)")
    assert {s["metric"]["attest_tool_use_verdict"]: float(s["value"][1]) for s in runs} == {
        "fail": 1.0,
        "pass": 1.0,
    }

    errors = prometheus.query("sum by (attest_recovery) (attest_tool_use_errors_total)")
    assert {s["metric"]["attest_recovery"] for s in errors} == {
        "retried",
        "fallback",
        "acknowledged",
        "silent",
        "claimed_success",
        "unchecked",
    }

    buckets = prometheus.query("attest_tool_use_score_bucket")
    # Prometheus 3 writes `le` in float form when it scrapes ("1" is stored as "1.0").
    by_le = {float(s["metric"]["le"]): float(s["value"][1]) for s in buckets}
    inf = float("inf")
    assert by_le == {0: 0, 0.25: 0, 0.5: 1, 0.75: 1, 0.9: 1, 1: 2, inf: 2}
    (median,) = prometheus.query(
        "histogram_quantile(0.5, sum by (le) (attest_tool_use_score_bucket))"
    )
    assert 0.25 <= float(median["value"][1]) <= 1.0


def test_the_endpoint_serves_the_exporters_text_format_without_a_prometheus(
    graded_telemetry: Telemetry,
) -> None:
    url = graded_telemetry.prometheus_url
    assert url is not None and url.endswith("/metrics")
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    assert "# TYPE attest_tool_use_calls_total counter" in text
    assert 'attest_tool_use_score_bucket{gen_ai_agent_name="refund-agent",le="0.5"' in text
    report = graded_telemetry.report()
    served = report.get("prometheus")
    assert served is not None and served.sent > 0


def test_prometheus_addresses_read_like_go_listen_addresses() -> None:
    assert parse_address("127.0.0.1:9464") == ("127.0.0.1", 9464)
    assert parse_address(":9464") == ("0.0.0.0", 9464)
    assert parse_address("[::1]:9464") == ("::1", 9464)
    for bad in ("9464", "host:", "host:99999", "host:port"):
        with pytest.raises(UsageError):
            parse_address(bad)
