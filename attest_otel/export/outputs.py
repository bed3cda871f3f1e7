"""The grade outputs: one `GradeOutput` per signal, each owning its SDK provider.

`Telemetry` knows outputs only through the protocol below, and `telemetry.OUTPUTS` is the
one place they are registered (docs/architecture.md, "Adding a telemetry exporter"). An
output is built from `OutputSettings` and returns None when its switch is off, so adding
one never touches the others.

Two promises the SDK does not make on its own hold for every output: failures are
reported (its exporter is wrapped in a counting one, see `tally.py`), and nothing waits much
longer than the timeout (each exporter gets it, which also bounds its retries).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import ALWAYS_ON

from attest_otel import semconv
from attest_otel.content import KEEP, ContentPolicy
from attest_otel.export.delivery import SignalReport
from attest_otel.export.grade_span import emit_grade_span
from attest_otel.export.log_events import emit_log_events
from attest_otel.export.metrics import (
    DEFAULT_LABEL_CAP,
    DEFAULT_LABEL_MAX_CHARS,
    DEFAULT_LABEL_TTL_S,
    ToolUseMetrics,
    metric_views,
)
from attest_otel.export.otlp_config import (
    ExportTls,
    Signal,
    destination,
    env,
    otlp_exporter,
    package_version,
    resolve_endpoint,
    resolve_protocol,
    tls_url,
)
from attest_otel.export.prometheus import PrometheusEndpoint, start_prometheus
from attest_otel.export.tally import (
    CountingLogExporter,
    CountingMetricExporter,
    CountingSpanExporter,
    Tally,
    endpoint_probe,
)
from attest_otel.model import CheckResult, Run

__all__ = [
    "GradeOutput",
    "LogOutput",
    "MetricOutput",
    "OutputSettings",
    "SpanOutput",
    "build_log_output",
    "build_metric_output",
    "build_span_output",
]

_SPAN_LIMIT_DEFAULT = 1024
"""Events and links per grade span, unless OTEL_SPAN_*_COUNT_LIMIT says otherwise: one of
each per tool call, and the SDK's 128 would silently cut long runs short."""


@dataclass(frozen=True, slots=True)
class OutputSettings:
    """Everything an output may be built from; each reads the fields it needs."""

    resource: Resource
    timeout_s: float
    endpoint: str | None = None
    protocol: str | None = None
    headers: dict[str, str] | None = None
    tls: ExportTls | None = None
    content: ContentPolicy = KEEP
    spans: bool = False
    logs: bool = False
    metrics: bool = False
    prometheus: str | None = None
    label_cap: int = DEFAULT_LABEL_CAP
    label_max_chars: int = DEFAULT_LABEL_MAX_CHARS
    label_ttl_s: float = DEFAULT_LABEL_TTL_S


class GradeOutput(Protocol):
    """One place graded runs go. `emit` queues (the SDK sends in the background); `flush`
    and `shutdown` block for at most about `millis`, and `Telemetry` runs them in parallel
    across outputs against one deadline."""

    @property
    def signal(self) -> Signal:
        """The key of its flush job and of its failures in the report."""
        ...

    @property
    def what(self) -> str:
        """How an emit failure names it ("grade span", "log events", "metrics")."""
        ...

    @property
    def tally(self) -> Tally | None:
        """What was pushed and what failed; None when it pushes nothing (Prometheus only)."""
        ...

    def emit(self, run: Run, result: CheckResult, *, now_ns: int, grade_span: bool) -> None:
        """Queues one graded run; may raise (the caller counts and logs it)."""
        ...

    def flush(self, millis: int) -> None: ...

    def shutdown(self, millis: int) -> None: ...

    def reports(self) -> list[SignalReport]:
        """What it sent so far, beyond its tally (a served endpoint's points)."""
        ...


def _otlp_target(signal: Signal, settings: OutputSettings, unit: str) -> tuple[str, Tally]:
    protocol = resolve_protocol(signal, settings.protocol)
    url = tls_url(resolve_endpoint(signal, protocol, settings.endpoint), settings.tls)
    return url, Tally(signal, destination(url, protocol), unit, endpoint_probe(url))


def _exporter(signal: Signal, url: str, settings: OutputSettings) -> object:
    protocol = resolve_protocol(signal, settings.protocol)
    return otlp_exporter(signal, protocol, url, settings.headers, settings.timeout_s, settings.tls)


def _span_limit(env_name: str) -> int | None:
    return None if env(env_name) else _SPAN_LIMIT_DEFAULT


class _Provider(Protocol):
    def force_flush(self, timeout_millis: int = ...) -> bool: ...

    def shutdown(self) -> None: ...


class _BatchedOutput:
    """What the span and log outputs share: one SDK provider whose batch processor sends,
    flushed and shut down as the provider says."""

    provider: _Provider

    def flush(self, millis: int) -> None:
        self.provider.force_flush(millis)

    def shutdown(self, millis: int) -> None:
        self.provider.shutdown()

    def reports(self) -> list[SignalReport]:
        return []


class SpanOutput(_BatchedOutput):
    """`attest.grade` spans, for traces whose own spans are stored and cannot change."""

    signal: Signal = "traces"
    what = "grade span"

    def __init__(self, settings: OutputSettings) -> None:
        url, self.tally = _otlp_target("traces", settings, "span")
        self.provider = TracerProvider(
            sampler=ALWAYS_ON,
            resource=settings.resource,
            shutdown_on_exit=False,
            span_limits=SpanLimits(
                max_events=_span_limit("OTEL_SPAN_EVENT_COUNT_LIMIT"),
                max_links=_span_limit("OTEL_SPAN_LINK_COUNT_LIMIT"),
            ),
        )
        exporter = CountingSpanExporter(_exporter("traces", url, settings), self.tally)  # type: ignore[arg-type]
        self.provider.add_span_processor(BatchSpanProcessor(exporter))
        self.tracer = self.provider.get_tracer(semconv.INSTRUMENTATION_SCOPE, package_version())
        self.content = settings.content

    def emit(self, run: Run, result: CheckResult, *, now_ns: int, grade_span: bool) -> None:
        if grade_span:
            emit_grade_span(self.tracer, run, result, now_ns=now_ns, content=self.content)
            self.tally.add_emitted(1)


class LogOutput(_BatchedOutput):
    """`gen_ai.evaluation.result` log events, where log backends index them."""

    signal: Signal = "logs"
    what = "log events"

    def __init__(self, settings: OutputSettings) -> None:
        url, self.tally = _otlp_target("logs", settings, "log record")
        self.provider = LoggerProvider(resource=settings.resource, shutdown_on_exit=False)
        exporter = CountingLogExporter(_exporter("logs", url, settings), self.tally)  # type: ignore[arg-type]
        self.provider.add_log_record_processor(BatchLogRecordProcessor(exporter))
        self.logger = self.provider.get_logger(semconv.INSTRUMENTATION_SCOPE, package_version())
        self.content = settings.content

    def emit(self, run: Run, result: CheckResult, *, now_ns: int, grade_span: bool) -> None:
        sent = emit_log_events(self.logger, run, result, now_ns=now_ns, content=self.content)
        self.tally.add_emitted(sent)


class MetricOutput:
    """The tool-use metrics, pushed over OTLP, served to Prometheus, or both: one meter
    provider with a reader per way out, so both see the same series."""

    signal: Signal = "metrics"
    what = "metrics"

    def __init__(self, settings: OutputSettings) -> None:
        readers: list[MetricReader] = []
        self.tally: Tally | None = None
        if settings.metrics:
            url, self.tally = _otlp_target("metrics", settings, "metric point")
            exporter = CountingMetricExporter(_exporter("metrics", url, settings), self.tally)  # type: ignore[arg-type]
            readers.append(
                PeriodicExportingMetricReader(
                    exporter, export_timeout_millis=settings.timeout_s * 1000
                )
            )
        self.prometheus: PrometheusEndpoint | None = None
        if settings.prometheus is not None:
            self.prometheus = start_prometheus(settings.prometheus)
            readers.append(self.prometheus.reader)
        self.provider = MeterProvider(
            metric_readers=readers,
            resource=settings.resource,
            views=metric_views(),
            shutdown_on_exit=False,
        )
        meter = self.provider.get_meter(semconv.INSTRUMENTATION_SCOPE, package_version())
        self.recorder = ToolUseMetrics(
            meter,
            label_cap=settings.label_cap,
            label_max_chars=settings.label_max_chars,
            label_ttl_s=settings.label_ttl_s,
        )

    def emit(self, run: Run, result: CheckResult, *, now_ns: int, grade_span: bool) -> None:
        self.recorder.record(run, result)

    def flush(self, millis: int) -> None:
        # Only OTLP metrics are pushed; a Prometheus-only provider has nothing to flush.
        if self.tally is not None:
            self.provider.force_flush(millis)

    def shutdown(self, millis: int) -> None:
        try:
            self.provider.shutdown(millis)
        finally:
            if self.prometheus is not None:
                self.prometheus.close()

    def reports(self) -> list[SignalReport]:
        if self.prometheus is None:
            return []
        return [
            SignalReport(
                signal="prometheus",
                destination=self.prometheus.url,
                unit="metric point",
                sent=self.prometheus.points_served,
            )
        ]


def build_span_output(settings: OutputSettings) -> SpanOutput | None:
    return SpanOutput(settings) if settings.spans else None


def build_log_output(settings: OutputSettings) -> LogOutput | None:
    return LogOutput(settings) if settings.logs else None


def build_metric_output(settings: OutputSettings) -> MetricOutput | None:
    return MetricOutput(settings) if settings.metrics or settings.prometheus is not None else None
