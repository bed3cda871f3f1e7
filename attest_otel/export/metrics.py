"""Tool-use metrics: run scores, runs, calls and errors, with a cap on data-driven labels.

Tool and agent names come from the traces we grade, i.e. from someone else's code: an
agent that invents tool names (or a prompt injection that does it for it) must not be
able to create unbounded time series, or one enormous one. Each value is cut to
`max_chars` characters; each such label keeps at most `limit` distinct values, and a new
value beyond them is counted under `other` (a warning says so once) unless the least
recently seen value has not been seen for `ttl_s`: that one gives its place. So a burst of
invented names cannot push the real ones into `other` for longer than the burst plus
`ttl_s`, and a name still in use never loses its series.

Measurements are recorded inside a context whose current span is the graded span (marked
sampled), so the SDK's default `trace_based` exemplar filter keeps them as exemplars and
the OTLP exporter sends the trace id along: a dashboard can jump from a bad bucket to a
trace. (`OTEL_METRICS_EXEMPLAR_FILTER=always_off` turns that off; the Prometheus exporter
never emits exemplars.)
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.metrics import Meter
from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View
from opentelemetry.trace import INVALID_SPAN, NonRecordingSpan

from attest_otel import semconv
from attest_otel.content import truncate
from attest_otel.export.grade_span import remote_span_context
from attest_otel.export.results import finding_span_id
from attest_otel.model import CheckResult, Finding, Run

__all__ = [
    "DEFAULT_LABEL_CAP",
    "DEFAULT_LABEL_MAX_CHARS",
    "DEFAULT_LABEL_TTL_S",
    "LabelCap",
    "ToolUseMetrics",
    "metric_views",
]

_log = logging.getLogger(__name__)

DEFAULT_LABEL_CAP = 100
DEFAULT_LABEL_MAX_CHARS = 128
DEFAULT_LABEL_TTL_S = 3600.0


class LabelCap:
    """At most `limit` distinct values per label key, each cut to `max_chars`; the rest
    become `other` until an admitted value goes unseen for `ttl_s`.

    A value in use keeps its series (its last use is refreshed on every call); one unseen
    for `ttl_s` is forgotten when a new value needs its place. Thread-safe, since the
    sidecar grades on several threads.
    """

    def __init__(
        self,
        limit: int = DEFAULT_LABEL_CAP,
        *,
        max_chars: int = DEFAULT_LABEL_MAX_CHARS,
        ttl_s: float = DEFAULT_LABEL_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if limit < 1:
            raise ValueError(f"label cap must be at least 1, got {limit}")
        self.limit = limit
        self.max_chars = max_chars
        self.ttl_s = ttl_s
        self._clock = clock
        self._seen: dict[str, OrderedDict[str, float]] = {}
        self._warned: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, key: str, value: str) -> str:
        value = truncate(value, self.max_chars)
        now = self._clock()
        with self._lock:
            seen = self._seen.setdefault(key, OrderedDict())
            if value in seen:
                seen[value] = now
                seen.move_to_end(value)
                return value
            if len(seen) >= self.limit:
                oldest, last = next(iter(seen.items()))
                if now - last >= self.ttl_s:
                    del seen[oldest]
            if len(seen) < self.limit:
                seen[value] = now
                return value
            if key not in self._warned:
                self._warned.add(key)
                _log.warning(
                    "more than %d distinct values of metric label %s; further values are "
                    "counted as %r (raise the label cap to keep more)",
                    self.limit,
                    key,
                    semconv.OTHER_LABEL_VALUE,
                )
        return semconv.OTHER_LABEL_VALUE

    def values(self, key: str) -> frozenset[str]:
        with self._lock:
            return frozenset(self._seen.get(key, ()))


def metric_views() -> list[View]:
    """The views our MeterProvider needs: score buckets that fit a 0..1 ratio."""
    return [
        View(
            instrument_name=semconv.METRIC_SCORE,
            aggregation=ExplicitBucketHistogramAggregation(boundaries=semconv.METRIC_SCORE_BUCKETS),
        )
    ]


def _span_context(trace_id: str | None, span_id: str | None) -> Context:
    target = remote_span_context(trace_id, span_id)
    return trace.set_span_in_context(NonRecordingSpan(target) if target else INVALID_SPAN)


class ToolUseMetrics:
    """The four instruments, and how one graded run is recorded on them."""

    def __init__(
        self,
        meter: Meter,
        *,
        label_cap: int = DEFAULT_LABEL_CAP,
        label_max_chars: int = DEFAULT_LABEL_MAX_CHARS,
        label_ttl_s: float = DEFAULT_LABEL_TTL_S,
    ) -> None:
        self.cap = LabelCap(label_cap, max_chars=label_max_chars, ttl_s=label_ttl_s)
        self._score = meter.create_histogram(
            semconv.METRIC_SCORE,
            unit=semconv.METRIC_SCORE_UNIT,
            description="Tool-use score of a graded run: correct calls / all calls.",
            explicit_bucket_boundaries_advisory=list(semconv.METRIC_SCORE_BUCKETS),
        )
        self._runs = meter.create_counter(
            semconv.METRIC_RUNS,
            unit=semconv.METRIC_RUNS_UNIT,
            description="Graded runs, by run verdict and agent.",
        )
        self._calls = meter.create_counter(
            semconv.METRIC_CALLS,
            unit=semconv.METRIC_CALLS_UNIT,
            description="Graded tool calls, by verdict, severity, tool and agent.",
        )
        self._errors = meter.create_counter(
            semconv.METRIC_ERRORS,
            unit=semconv.METRIC_ERRORS_UNIT,
            description="Tool calls that returned an error, by how the agent handled it.",
        )

    def _agent(self, run: Run) -> dict[str, str]:
        if not run.agent:
            return {}
        return {semconv.GEN_AI_AGENT_NAME: self.cap(semconv.GEN_AI_AGENT_NAME, run.agent)}

    def record(self, run: Run, result: CheckResult) -> None:
        self.record_many(((run, result),))

    def record_many(self, graded: Iterable[tuple[Run, CheckResult]]) -> None:
        """Records graded runs, each counter once per distinct label set of the batch.

        The SDK's per-measurement path (attribute hashing, the exemplar reservoir, a context
        per call) cost about 30 us a tool call, as much as grading its span; a batch of
        traces has a few label sets, so counting them here first keeps metrics off the hot
        path (about 2.5 us a call). Each
        series' exemplar is its last measurement of the batch; scores are still recorded one
        per run, since a histogram needs each value.
        """
        runs: dict[tuple[str, ...], _Series] = {}
        calls: dict[tuple[str, ...], _Series] = {}
        errors: dict[tuple[str, ...], _Series] = {}
        tools: dict[str, str] = {}  # each name capped once a batch: the cap takes a lock
        for run, result in graded:
            agent = self._agent(run)
            agent_name = agent.get(semconv.GEN_AI_AGENT_NAME, "")
            self._score.record(
                float(result.score),
                attributes=agent,
                context=_span_context(run.trace_id, run.span_id),
            )
            _tally(runs, (result.verdict, agent_name), run, None)
            for finding in result.findings:
                tool = tools.get(finding.subject)
                if tool is None:
                    tool = tools[finding.subject] = self.cap(
                        semconv.GEN_AI_TOOL_NAME, finding.subject
                    )
                _tally(calls, (finding.verdict, finding.severity, tool, agent_name), run, finding)
                recovery = finding.metadata.get("recovery")
                if isinstance(recovery, str):
                    _tally(errors, (recovery, tool), run, finding)
        for (verdict, agent_name), one in runs.items():
            self._runs.add(
                one.count,
                context=one.exemplar(),
                attributes=_labels(
                    (semconv.ATTEST_TOOL_USE_VERDICT, verdict), agent_name=agent_name
                ),
            )
        for (verdict, severity, tool, agent_name), one in calls.items():
            self._calls.add(
                one.count,
                context=one.exemplar(),
                attributes=_labels(
                    (semconv.ATTEST_VERDICT, verdict),
                    (semconv.ATTEST_SEVERITY, severity),
                    (semconv.GEN_AI_TOOL_NAME, tool),
                    agent_name=agent_name,
                ),
            )
        for (recovery, tool), one in errors.items():
            self._errors.add(
                one.count,
                context=one.exemplar(),
                attributes=_labels(
                    (semconv.ATTEST_RECOVERY, recovery), (semconv.GEN_AI_TOOL_NAME, tool)
                ),
            )


@dataclass(slots=True)
class _Series:
    """One label set's count in a batch, and its last measurement (the exemplar)."""

    count: int
    run: Run
    finding: Finding | None

    def exemplar(self) -> Context:
        run, finding = self.run, self.finding
        span_id = (finding_span_id(run, finding) if finding is not None else None) or run.span_id
        return _span_context(run.trace_id, span_id)


def _tally(
    series: dict[tuple[str, ...], _Series], key: tuple[str, ...], run: Run, finding: Finding | None
) -> None:
    one = series.get(key)
    if one is None:
        series[key] = _Series(1, run, finding)
    else:
        one.count += 1
        one.run, one.finding = run, finding


def _labels(*pairs: tuple[str, str], agent_name: str = "") -> dict[str, str]:
    labels = dict(pairs)
    if agent_name:
        labels[semconv.GEN_AI_AGENT_NAME] = agent_name
    return labels
