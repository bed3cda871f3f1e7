"""End to end through collector-config/otelcol.yaml with the real Collector, Jaeger v2 and
Prometheus 3 (built by tools/build-peers.sh): what a user who deploys the shipped configs
gets. The agent app sends traces and log records with the OTel SDK's exporters.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from google.protobuf.json_format import Parse
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from attest_otel import semconv
from attest_otel.cli import main
from tests.dashboards.dashboard import load_dashboard, prometheus_targets
from tests.dashboards.grafana import windows
from tests.peers.pipeline import SHIPPED_PUSH_S, TEST_PUSH_S, Pipeline, wait

RUNS = 64
PACE_S = 0.5
SCALE = TEST_PUSH_S / SHIPPED_PUSH_S


@pytest.fixture(scope="module")
def sent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Pipeline, Path, dict]]:
    pipeline = Pipeline(tmp_path_factory.mktemp("pipeline"))
    try:
        pipeline.start()
        spans_file, logs_file = pipeline.run_app(RUNS, PACE_S)
        pipeline.app_logs = Parse(logs_file.read_text(), ExportLogsServiceRequest())
        request = Parse(spans_file.read_text(), ExportTraceServiceRequest())
        traces: dict[str, list[Any]] = {}
        for rs in request.resource_spans:
            for ss in rs.scope_spans:
                for span in ss.spans:
                    traces.setdefault(span.trace_id.hex(), []).append(span)
        assert len(traces) == 2 * RUNS
        wait(
            lambda: all(
                (t := pipeline.jaeger.trace(tid)) is not None and len(t["spans"]) >= len(spans)
                for tid, spans in traces.items()
            ),
            60,
            lambda: "not every trace whole in Jaeger:\n" + pipeline.logs(),
        )
        time.sleep(2 * TEST_PUSH_S)  # the last grade metrics pushed and stored
        yield pipeline, spans_file, traces
    finally:
        pipeline.stop()


def _agent_traces(traces: dict[str, list[Any]]) -> set[str]:
    return {
        tid
        for tid, spans in traces.items()
        if any(s.name.startswith("invoke_agent") for s in spans)
    }


def test_every_span_reaches_jaeger_once(sent: tuple[Pipeline, Path, dict]) -> None:
    pipeline, _, traces = sent
    for tid, spans in traces.items():
        stored = pipeline.jaeger.trace(tid)
        assert stored is not None
        got = [s["spanID"] for s in stored["spans"]]
        assert sorted(got) == sorted(s.span_id.hex() for s in spans), tid
    # The Tempo stand-in on the same pipeline got every span too, once.
    tempo = pipeline.tempo.span_ids()
    assert sorted(tempo) == sorted(s.span_id.hex() for ss in traces.values() for s in ss)


def _grade(args: list[str]) -> dict[str, Any]:
    result = CliRunner().invoke(main, ["grade", "--json", *args])
    assert result.exit_code in (0, 1), result.output
    return dict(json.loads(result.stdout))


def _runs(graded: dict[str, Any]) -> dict[str, list[tuple[Any, ...]]]:
    return {
        t["trace_id"]: sorted(
            (r["agent"], r["span_id"], json.dumps(r["result"], sort_keys=True)) for r in t["runs"]
        )
        for t in graded["traces"]
        if t["runs"]
    }


def test_grade_from_jaeger_equals_grade_from_the_file(sent: tuple[Pipeline, Path, dict]) -> None:
    pipeline, spans_file, traces = sent
    from_file = _runs(_grade(["--file", str(spans_file)]))
    agents = _agent_traces(traces)
    assert set(from_file) == agents
    verdicts = set()
    for tid in sorted(agents):
        from_jaeger = _runs(_grade(["--trace-id", tid, "--from", f"jaeger:{pipeline.jaeger.url}"]))
        assert from_jaeger == {tid: from_file[tid]}
        verdicts.update(json.loads(r[2])["verdict"] for r in from_file[tid])
    assert len(verdicts) > 1  # the app's scenarios pass and fail: the comparison can tell


def _tags(span: dict[str, Any]) -> dict[str, Any]:
    return {t["key"]: t["value"] for t in span.get("tags", [])}


def _events(span: dict[str, Any]) -> list[dict[str, Any]]:
    return [{f["key"]: f["value"] for f in log["fields"]} for log in span.get("logs", [])]


def test_graded_spans_in_jaeger_carry_their_evaluation(sent: tuple[Pipeline, Path, dict]) -> None:
    pipeline, _, traces = sent
    agents = _agent_traces(traces)
    graded = 0
    for tid in traces:
        stored = pipeline.jaeger.trace(tid)
        assert stored is not None
        for span in stored["spans"]:
            op = _tags(span).get("gen_ai.operation.name")
            evaluations = [
                e for e in _events(span) if e.get("event") == semconv.GEN_AI_EVALUATION_RESULT
            ]
            attest = {k for k in _tags(span) if k.startswith("attest.")}
            if tid in agents and op in ("invoke_agent", "execute_tool"):
                assert len(evaluations) == 1, (tid, span["operationName"])
                assert evaluations[0][semconv.GEN_AI_EVALUATION_NAME] == "attest.tool_use"
                assert attest, (tid, span["operationName"])
                graded += 1
            else:
                assert not evaluations and not attest, (tid, span["operationName"])
    assert graded == sum(1 + len(tools) for i in range(RUNS) for tools in [_scenario_tools(i)])


def _scenario_tools(i: int) -> list[Any]:
    from tests.peers.agent_app import SCENARIOS

    return SCENARIOS[i % len(SCENARIOS)][1]


def test_grade_log_events_reach_the_logs_pipeline(sent: tuple[Pipeline, Path, dict]) -> None:
    pipeline, _, traces = sent
    agents = _agent_traces(traces)

    def event_traces(records: list[Any]) -> set[str]:
        return {
            r.trace_id.hex()
            for r in records
            if r.event_name == semconv.GEN_AI_EVALUATION_RESULT
            or any(
                kv.key == "event.name" and kv.value.string_value == semconv.GEN_AI_EVALUATION_RESULT
                for kv in r.attributes
            )
        }

    def seen() -> str:
        records = pipeline.loki.records()
        names = sorted(
            {
                (r.event_name, r.trace_id.hex()[:6], r.span_id.hex()[:4])
                for r in records
                if "evaluation" in r.event_name
                or any(kv.key == "event.name" for kv in r.attributes)
            }
        )[:12]
        return f"{len(records)} records, {len(event_traces(records))} of {len(agents)}: {names}"

    assert pipeline.loki.wait_for(lambda rs: event_traces(rs) >= agents), seen()
    assert event_traces(pipeline.loki.records()) == agents


def test_the_apps_log_records_reach_the_logs_backend_once(
    sent: tuple[Pipeline, Path, dict],
) -> None:
    """The app's log records (a run's content) go through the sidecar with their trace and
    on to the logs pipeline, each once."""
    pipeline, _, _ = sent

    def app_records(records: list[Any]) -> list[tuple[str, str, str]]:
        return sorted(
            (r.trace_id.hex(), r.span_id.hex(), r.event_name)
            for r in records
            if r.event_name == "gen_ai.client.inference.operation.details"
        )

    want = app_records(
        [
            r
            for rl in pipeline.app_logs.resource_logs
            for sl in rl.scope_logs
            for r in sl.log_records
        ]
    )
    assert len(want) == RUNS
    assert pipeline.loki.wait_for(lambda rs: len(app_records(rs)) >= len(want)), pipeline.logs()
    time.sleep(0.5)
    assert app_records(pipeline.loki.records()) == want


QUERIES = sorted(
    {
        (title, t["refId"], t["expr"], bool(t.get("instant")))
        for title, t in prometheus_targets(load_dashboard())
    }
)


def _grafana(expr: str) -> str:
    """The expression as Grafana sends it for the dashboard's default range, with every
    window scaled by the test's push interval over the shipped one."""
    w = windows(SCALE)
    return (
        expr.replace("$__rate_interval", f"{round(w['rate_interval'] * 1000)}ms")
        .replace("$__range", f"{round(w['range'] * 1000)}ms")
        .replace("$__interval", f"{round(w['interval'] * 1000)}ms")
        .replace("$agent", ".*")
        .replace("$tool", ".*")
    )


def _finite(values: list[Any]) -> bool:
    return any(math.isfinite(float(v[1])) for v in values)


@pytest.mark.parametrize(
    ("title", "ref", "expr", "instant"), QUERIES, ids=[f"{t} {r}" for t, r, _, _ in QUERIES]
)
def test_every_dashboard_query_returns_data(
    sent: tuple[Pipeline, Path, dict], title: str, ref: str, expr: str, instant: bool
) -> None:
    """Instant panels are asked at the end of the load, time series over the load with
    Grafana's step: what the OTLP receiver stored must answer both."""
    pipeline, _, _ = sent
    promql = _grafana(expr)
    end = pipeline.load_end + 2 * TEST_PUSH_S
    if instant:
        result = pipeline.prometheus.get("/api/v1/query", query=promql, time=f"{end:.3f}")
        ok = any(math.isfinite(float(s["value"][1])) for s in result["result"])
        assert ok, f"{title} ({ref}) returns nothing: {promql}"
        return
    # A time series panel draws a line through the load: a point at (nearly) every step
    # once the first rate window is full. A window holding one push has no rate, so a data
    # source interval below the push interval leaves gaps, or nothing at all.
    w = windows(SCALE)
    first = pipeline.load_start + w["rate_interval"] + 2 * TEST_PUSH_S
    last = pipeline.load_end
    result = pipeline.prometheus.get(
        "/api/v1/query_range",
        query=promql,
        start=f"{first:.3f}",
        end=f"{last:.3f}",
        step=f"{w['interval']:.3f}",  # seconds
    )
    steps = math.floor((last - first) / w["interval"]) + 1
    drawn = {
        t for series in result["result"] for t, v in series["values"] if math.isfinite(float(v))
    }
    assert steps >= 5
    assert len(drawn) >= 0.9 * steps, f"{title} ({ref}): {len(drawn)} of {steps} points: {promql}"


def test_exemplars_point_at_graded_traces(sent: tuple[Pipeline, Path, dict]) -> None:
    pipeline, _, traces = sent
    agents = _agent_traces(traces)
    found = pipeline.prometheus.get(
        "/api/v1/query_exemplars",
        query=semconv.PROMETHEUS_RUNS,
        start=f"{pipeline.load_start - 5:.3f}",
        end=f"{time.time():.3f}",
    )
    ids = {e["labels"].get("trace_id") for series in found for e in series["exemplars"]}
    assert ids, "no exemplars stored"
    assert ids <= agents
