"""Tool-use metrics read back from the real SDK's in-memory reader."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from attest_otel import semconv
from attest_otel.export.metrics import LabelCap, ToolUseMetrics, metric_views

from .sample import AGENT_SPAN_ID, TRACE_ID, graded_run, passing_run, tool_span_id


@pytest.fixture
def reader() -> Iterator[InMemoryMetricReader]:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader], views=metric_views(), shutdown_on_exit=False)
    reader.provider = provider  # type: ignore[attr-defined]
    yield reader
    provider.shutdown()


def _metrics(reader: InMemoryMetricReader, label_cap: int = 100) -> ToolUseMetrics:
    provider: MeterProvider = reader.provider  # type: ignore[attr-defined]
    return ToolUseMetrics(provider.get_meter("test"), label_cap=label_cap)


def _points(reader: InMemoryMetricReader, name: str, data: Any = None) -> list[Any]:
    """Points of one metric from `data`, else from a fresh collection (exemplars belong to
    one collection: the next one starts without them)."""
    data = data or reader.get_metrics_data()
    assert data is not None
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                if metric.name == name:
                    return list(metric.data.data_points)
    return []


def test_calls_are_counted_by_verdict_severity_tool_and_agent(reader: InMemoryMetricReader) -> None:
    run, result = graded_run()
    _metrics(reader).record(run, result)
    points = _points(reader, semconv.METRIC_CALLS)
    assert sum(p.value for p in points) == 12
    silent = [p for p in points if p.attributes[semconv.ATTEST_VERDICT] == "error_silent"]
    assert {p.attributes[semconv.GEN_AI_TOOL_NAME] for p in silent} == {"search_kb", "audit_log"}
    assert {p.attributes[semconv.GEN_AI_AGENT_NAME] for p in points} == {"refund-agent"}
    assert {p.attributes[semconv.ATTEST_SEVERITY] for p in silent} == {"fail"}


def test_errors_are_counted_by_recovery_and_tool(reader: InMemoryMetricReader) -> None:
    run, result = graded_run()
    _metrics(reader).record(run, result)
    by_recovery = {
        p.attributes[semconv.ATTEST_RECOVERY]: p.value
        for p in _points(reader, semconv.METRIC_ERRORS)
    }
    assert by_recovery == {
        "retried": 1,
        "fallback": 1,
        "claimed_success": 1,
        "unchecked": 1,
        "acknowledged": 1,
        "silent": 1,
    }


def test_runs_are_counted_by_run_verdict_and_the_score_lands_in_ratio_buckets(
    reader: InMemoryMetricReader,
) -> None:
    metrics = _metrics(reader)
    metrics.record(*graded_run())
    metrics.record(*passing_run())
    runs = {
        p.attributes[semconv.ATTEST_TOOL_USE_VERDICT]: p.value
        for p in _points(reader, semconv.METRIC_RUNS)
    }
    assert runs == {"fail": 1, "pass": 1}
    (score,) = _points(reader, semconv.METRIC_SCORE)
    assert tuple(score.explicit_bounds) == (0, 0.25, 0.5, 0.75, 0.9, 1)
    assert score.count == 2
    assert score.sum == pytest.approx(6 / 12 + 1.0)
    # 0.5 falls in (0.25, 0.5], 1.0 in (0.9, 1]
    assert list(score.bucket_counts) == [0, 0, 1, 0, 0, 1, 0]


def test_exemplars_carry_the_trace_id_of_the_graded_run(reader: InMemoryMetricReader) -> None:
    run, result = graded_run()
    _metrics(reader).record(run, result)
    data = reader.get_metrics_data()
    (score,) = _points(reader, semconv.METRIC_SCORE, data)
    assert [f"{e.trace_id:032x}" for e in score.exemplars] == [TRACE_ID]
    assert [f"{e.span_id:016x}" for e in score.exemplars] == [AGENT_SPAN_ID]
    call = next(
        p
        for p in _points(reader, semconv.METRIC_CALLS, data)
        if p.attributes[semconv.GEN_AI_TOOL_NAME] == "get_weather"
    )
    assert [f"{e.span_id:016x}" for e in call.exemplars] == [tool_span_id(9)]


def test_a_run_without_a_trace_is_counted_but_has_no_exemplar(reader: InMemoryMetricReader) -> None:
    run, result = passing_run(trace_id=None)
    _metrics(reader).record(run, result)
    (score,) = _points(reader, semconv.METRIC_SCORE)
    assert score.count == 1
    assert not score.exemplars


def test_150_distinct_tool_names_with_a_cap_of_100_give_100_names_and_other(
    reader: InMemoryMetricReader,
) -> None:
    metrics = _metrics(reader, label_cap=100)
    for i in range(150):
        metrics.record(*passing_run(tool=f"tool_{i:03d}"))
    points = _points(reader, semconv.METRIC_CALLS)
    tools = {p.attributes[semconv.GEN_AI_TOOL_NAME]: p.value for p in points}
    assert len(tools) == 101
    assert tools.pop("other") == 50
    assert set(tools) == {f"tool_{i:03d}" for i in range(100)}


def test_the_cap_applies_to_agent_names_too_and_a_run_without_an_agent_has_no_agent_label(
    reader: InMemoryMetricReader,
) -> None:
    metrics = _metrics(reader, label_cap=2)
    for agent in ("a", "b", "c", None):
        metrics.record(*passing_run(agent=agent))
    runs = _points(reader, semconv.METRIC_RUNS)
    agents = sorted(str(p.attributes.get(semconv.GEN_AI_AGENT_NAME)) for p in runs)
    assert agents == ["None", "a", "b", "other"]


def test_an_admitted_value_keeps_its_name_after_the_cap_is_reached() -> None:
    cap = LabelCap(1)
    assert cap("tool", "first") == "first"
    assert cap("tool", "second") == "other"
    assert cap("tool", "first") == "first"
    assert cap("agent", "x") == "x"
    with pytest.raises(ValueError, match="at least 1"):
        LabelCap(0)


def _values(reader: InMemoryMetricReader) -> dict[str, Any]:
    data = reader.get_metrics_data()
    out: dict[str, Any] = {}
    for name in (semconv.METRIC_CALLS, semconv.METRIC_ERRORS, semconv.METRIC_RUNS):
        out[name] = {frozenset(p.attributes.items()): p.value for p in _points(reader, name, data)}
    out[semconv.METRIC_SCORE] = {
        frozenset(p.attributes.items()): (p.count, p.sum, list(p.bucket_counts))
        for p in _points(reader, semconv.METRIC_SCORE, data)
    }
    return out


def test_a_batch_recorded_at_once_counts_what_its_runs_recorded_one_by_one() -> None:
    batch = [graded_run(), passing_run(), graded_run(), passing_run(agent="billing")]
    seen = []
    for record in ("one by one", "at once"):
        reader = InMemoryMetricReader()
        provider = MeterProvider(
            metric_readers=[reader], views=metric_views(), shutdown_on_exit=False
        )
        metrics = ToolUseMetrics(provider.get_meter("test"))
        if record == "at once":
            metrics.record_many(batch)
        else:
            for run, result in batch:
                metrics.record(run, result)
        seen.append(_values(reader))
        provider.shutdown()
    assert seen[0] == seen[1]
    calls = seen[1][semconv.METRIC_CALLS]
    assert sum(calls.values()) == 2 * 12 + 2
    runs = seen[1][semconv.METRIC_RUNS]
    assert sorted(runs.values()) == [1, 1, 2]  # two graded runs share one series


def test_a_batched_series_keeps_the_last_call_of_the_batch_as_its_exemplar(
    reader: InMemoryMetricReader,
) -> None:
    first, result = passing_run()
    second, _ = passing_run()
    second.trace_id = "f" * 32
    _metrics(reader).record_many([(first, result), (second, result)])
    (call,) = _points(reader, semconv.METRIC_CALLS)
    assert call.value == 2
    assert [f"{e.trace_id:032x}" for e in call.exemplars] == ["f" * 32]
