"""Every PromQL expression of the dashboard, run against Debian's real Prometheus while it
scrapes attest-otel's metrics endpoint during a graded load, must return data.

The load grades the committed fixture traces (offline) in a loop and hands each grade to
`Telemetry.emit_grade`, exactly as `grade --export` and the sidecar do. Grafana's macros
and the dashboard's variables are replaced by concrete values (`$__range` by 5m, the
variables by their "All" value), as Grafana itself would before sending the query.
"""

from __future__ import annotations

import json
import math
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from attest_otel.adapt import runs_from_spans
from attest_otel.export.telemetry import Telemetry, build_telemetry
from attest_otel.grade.grader import grade
from attest_otel.ingest.decode import decode_file
from attest_otel.model import CheckResult, Run
from tests.dashboards.dashboard import load_dashboard, prometheus_targets
from tests.dashboards.promql import substitute
from tests.needs import peer

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "traces"
WAIT_S = 40.0
"""Bound on every wait in this module (start, scrapes, queries)."""
MIN_SCRAPES = 6


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _graded_fixtures() -> list[tuple[Run, CheckResult]]:
    pairs = []
    for path in sorted(FIXTURES.glob("*.json")):
        if path.name.endswith(".labels.json"):
            continue
        decoded = decode_file(path)
        for trace in runs_from_spans(decoded.spans, decoded.logs):
            pairs.extend((run, grade(run, judge=None)) for run in trace.runs)
    return pairs


class _Load:
    """Emits the graded fixtures again and again until stopped (or WAIT_S runs out)."""

    def __init__(self, telemetry: Telemetry, pairs: list[tuple[Run, CheckResult]]) -> None:
        self.telemetry = telemetry
        self.pairs = pairs
        self.rounds = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="graded-load", daemon=True)

    def _run(self) -> None:
        deadline = time.monotonic() + 3 * WAIT_S
        while not self._stop.is_set() and time.monotonic() < deadline:
            for run, result in self.pairs:
                self.telemetry.emit_grade(run, result, grade_span=False)
            self.rounds += 1
            self._stop.wait(0.2)

    def __enter__(self) -> _Load:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


class _Prometheus:
    def __init__(self, url: str) -> None:
        self.url = url

    def get(self, path: str, **params: str) -> Any:
        query = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}{path}?{query}", timeout=5) as response:
            body = json.load(response)
        assert body["status"] == "success", body
        return body["data"]

    def query(self, promql: str) -> list[dict[str, Any]]:
        return list(self.get("/api/v1/query", query=promql)["result"])

    def wait_until(self, promql: str, ok: Any, deadline: float) -> list[dict[str, Any]]:
        while True:
            try:
                result = self.query(promql)
            except OSError:
                result = []
            if result and ok(result):
                return result
            if time.monotonic() > deadline:
                pytest.fail(f"Prometheus: no satisfying answer to {promql!r} in {WAIT_S:g}s")
            time.sleep(0.25)


@pytest.fixture(scope="module")
def scraped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Prometheus]:
    prometheus_bin = peer("prometheus")  # Prometheus 3 built from source (tools/build-peers.sh)
    tmp = tmp_path_factory.mktemp("prometheus")
    telemetry = build_telemetry(
        endpoint=None,
        protocol=None,
        spans=False,
        logs=False,
        metrics=False,
        prometheus="127.0.0.1:0",
    )
    endpoint = telemetry.prometheus
    assert endpoint is not None
    config = tmp / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
        "scrape_configs:\n  - job_name: attest-otel\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{endpoint.port}']\n"
    )
    port = _free_port()
    log = (tmp / "prometheus.log").open("w")
    process = subprocess.Popen(
        [
            prometheus_bin,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        with _Load(telemetry, _graded_fixtures()):
            prom = _Prometheus(f"http://127.0.0.1:{port}")
            prom.wait_until(
                "count_over_time(attest_tool_use_runs_total[1m])",
                lambda r: max(float(s["value"][1]) for s in r) >= MIN_SCRAPES,
                time.monotonic() + WAIT_S,
            )
            yield prom
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)
        log.close()
        telemetry.shutdown()


QUERIES = sorted(
    {
        (title, target["refId"], target["expr"])
        for title, target in prometheus_targets(load_dashboard())
    }
)


@pytest.mark.parametrize(("title", "ref", "expr"), QUERIES, ids=[f"{t} {r}" for t, r, _ in QUERIES])
def test_every_dashboard_query_returns_data_from_prometheus_during_a_graded_load(
    scraped: _Prometheus, title: str, ref: str, expr: str
) -> None:
    promql = substitute(expr)
    result = scraped.wait_until(
        promql,
        lambda r: any(math.isfinite(float(s["value"][1])) for s in r),
        time.monotonic() + WAIT_S,
    )
    assert result, f"{title} ({ref}): {promql}"


def test_variable_queries_find_agents_and_tools(scraped: _Prometheus) -> None:
    for variable in load_dashboard()["templating"]["list"]:
        if variable["type"] != "query":
            continue
        metric, label = variable["query"].removeprefix("label_values(").rstrip(")").split(", ")
        values = scraped.get(f"/api/v1/label/{label}/values", **{"match[]": metric})
        assert values, variable["query"]


def test_the_pass_rate_panel_agrees_with_the_graded_load(scraped: _Prometheus) -> None:
    pairs = _graded_fixtures()
    expected = sum(r.passed for _, r in pairs) / len(pairs)
    (rate,) = scraped.query(
        substitute(
            next(
                t["expr"]
                for title, t in prometheus_targets(load_dashboard())
                if title == "Pass rate" and t.get("instant")
            )
        )
    )
    # Every round emits the same runs, so the ratio of increases is the ratio of one round.
    assert float(rate["value"][1]) == pytest.approx(expected, abs=0.02)
