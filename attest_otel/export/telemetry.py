"""Wiring: SDK providers and exporters for the grade outputs, from arguments and OTEL_* env.

    build_telemetry(...) -> Telemetry
        .emit_grade(run, result, grade_span=...)   grade span / log events / metrics
        .flush(timeout_s) -> ExportReport           what was sent where, and failures
        .shutdown()

Configuration follows OpenTelemetry's own: an argument wins, else the standard
`OTEL_EXPORTER_OTLP_*` variables (per signal first, then the general one), else the
SDK's defaults. The providers are ours alone, never the global ones, so grading inside an
instrumented application does not send the grades through the application's pipeline
(or the application's spans through ours).

Two promises the SDK does not make on its own: failures are reported (the exporters are
wrapped, see `tally.py`), and nothing waits much longer than `timeout_s` (each exporter
gets that timeout, which also bounds its retries; the flushes of the three signals run in
parallel and are joined against one deadline).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import metadata
from typing import Any, Literal
from urllib.parse import unquote

from opentelemetry._logs import Logger
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor, LogRecordExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    MetricExporter,
    MetricReader,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_ON
from opentelemetry.trace import Tracer

from attest_otel import semconv
from attest_otel.content import KEEP, ContentPolicy
from attest_otel.errors import UsageError
from attest_otel.export.delivery import ENCODE_SIGNAL, ExportReport, SignalReport
from attest_otel.export.grade_span import emit_grade_span
from attest_otel.export.log_events import emit_log_events
from attest_otel.export.metrics import (
    DEFAULT_LABEL_CAP,
    DEFAULT_LABEL_MAX_CHARS,
    DEFAULT_LABEL_TTL_S,
    ToolUseMetrics,
    metric_views,
)
from attest_otel.export.prometheus import PrometheusEndpoint, start_prometheus
from attest_otel.export.tally import (
    CountingLogExporter,
    CountingMetricExporter,
    CountingSpanExporter,
    Tally,
    endpoint_probe,
    install_log_capture,
)
from attest_otel.model import CheckResult, Run
from attest_otel.yamlcheck import header_problem

__all__ = ["ExportTls", "Telemetry", "build_telemetry", "default_resource", "resolve_endpoint"]

_log = logging.getLogger(__name__)

Signal = Literal["traces", "logs", "metrics"]
OtlpProtocol = Literal["grpc", "http/protobuf"]

DEFAULT_PROTOCOL: OtlpProtocol = "grpc"
"""Python's OTLP exporters and `opentelemetry-instrument` default to gRPC (the spec says
http/protobuf); we follow the Python SDK, whose users we meet."""

_DEFAULT_GRPC = "http://localhost:4317"
_DEFAULT_HTTP = "http://localhost:4318"
_SPAN_LIMIT_DEFAULT = 1024
"""Events and links per grade span, unless OTEL_SPAN_*_COUNT_LIMIT says otherwise: one of
each per tool call, and the SDK's 128 would silently cut long runs short."""
_JOIN_GRACE_S = 0.5


def _env(name: str) -> str | None:
    value = os.environ.get(name, "").strip()
    return value or None


def resolve_protocol(signal: Signal, protocol: str | None) -> OtlpProtocol:
    chosen = (
        (
            protocol
            or _env(f"OTEL_EXPORTER_OTLP_{signal.upper()}_PROTOCOL")
            or _env("OTEL_EXPORTER_OTLP_PROTOCOL")
            or DEFAULT_PROTOCOL
        )
        .strip()
        .lower()
    )
    if chosen == "grpc":
        return "grpc"
    if chosen == "http/protobuf":
        return "http/protobuf"
    if chosen == "http/json":
        raise UsageError(
            "OTLP protocol http/json is not supported by the OpenTelemetry Python exporters; "
            "use grpc or http/protobuf"
        )
    raise UsageError(f"unknown OTLP protocol {chosen!r}: use grpc or http/protobuf")


def _with_scheme(url: str) -> str:
    """A bare host:port means plaintext: the gRPC exporter would otherwise pick TLS."""
    return url if "://" in url else f"http://{url}"


def _signal_url(base: str, signal: Signal) -> str:
    base = base.rstrip("/")
    suffix = f"/v1/{signal}"
    return base if base.endswith(suffix) else base + suffix


def resolve_endpoint(signal: Signal, protocol: OtlpProtocol, endpoint: str | None) -> str:
    """Where one signal goes, as the OTLP exporter spec reads endpoints.

    An explicit endpoint and OTEL_EXPORTER_OTLP_ENDPOINT are base URLs (OTLP/HTTP appends
    /v1/<signal>); OTEL_EXPORTER_OTLP_<SIGNAL>_ENDPOINT is used as it is.
    """
    if endpoint:
        base = _with_scheme(endpoint.strip())
        return base if protocol == "grpc" else _signal_url(base, signal)
    per_signal = _env(f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT")
    if per_signal:
        return _with_scheme(per_signal)
    general = _env("OTEL_EXPORTER_OTLP_ENDPOINT")
    if general:
        base = _with_scheme(general)
        return base if protocol == "grpc" else _signal_url(base, signal)
    if protocol == "grpc":
        return _DEFAULT_GRPC
    return _signal_url(_DEFAULT_HTTP, signal)


@cache
def package_version() -> str:
    try:
        return metadata.version("attest-otel")
    except metadata.PackageNotFoundError:
        return "0.0.0"


def default_resource() -> Resource:
    """`service.name = attest-otel` unless OTEL_SERVICE_NAME / OTEL_RESOURCE_ATTRIBUTES say
    otherwise. (Passing it to `Resource.create` would override the environment, since the
    SDK merges explicit attributes last.)"""
    detected = Resource.create({})
    extra: dict[str, str] = {}
    name = str(detected.attributes.get("service.name", ""))
    if not name or name.startswith("unknown_service"):
        extra["service.name"] = semconv.DEFAULT_SERVICE_NAME
    if "service.version" not in detected.attributes:
        extra["service.version"] = package_version()
    return detected.merge(Resource(extra))


def _span_limit(env_name: str) -> int | None:
    return None if _env(env_name) else _SPAN_LIMIT_DEFAULT


@dataclass(frozen=True, slots=True)
class ExportTls:
    """TLS material of the OTLP exporters (PEM paths): the CA to trust instead of the
    system's, and a client certificate for mTLS. The sidecar hands its forward TLS here when
    the grade outputs go to the forward host, so they never go there in cleartext."""

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None

    def grpc_credentials(self) -> Any:
        import grpc

        def read(path: str | None) -> bytes | None:
            if path is None:
                return None
            with open(path, "rb") as f:
                return f.read()

        return grpc.ssl_channel_credentials(
            root_certificates=read(self.ca_file),
            private_key=read(self.key_file),
            certificate_chain=read(self.cert_file),
        )

    def http_kwargs(self) -> dict[str, Any]:
        return {
            "certificate_file": self.ca_file,
            "client_certificate_file": self.cert_file,
            "client_key_file": self.key_file,
        }


def _https(url: str) -> str:
    return "https://" + url.split("://", 1)[1] if "://" in url else f"https://{url}"


def _grpc_headers(headers: Mapping[str, str] | None) -> dict[str, str] | None:
    # None, not {}: the gRPC exporter reads OTEL_EXPORTER_OTLP_HEADERS only when given None.
    return dict(headers) if headers else None


def _span_exporter(
    protocol: OtlpProtocol,
    url: str,
    headers: Mapping[str, str] | None,
    timeout_s: float,
    tls: ExportTls | None = None,
) -> SpanExporter:
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
            OTLPSpanExporter as GrpcSpanExporter,
        )

        if tls is not None:
            return GrpcSpanExporter(
                endpoint=url,
                headers=_grpc_headers(headers),
                timeout=timeout_s,
                insecure=False,
                credentials=tls.grpc_credentials(),
            )
        return GrpcSpanExporter(endpoint=url, headers=_grpc_headers(headers), timeout=timeout_s)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
        OTLPSpanExporter as HttpSpanExporter,
    )

    return HttpSpanExporter(
        endpoint=url,
        headers=headers,
        timeout=timeout_s,
        **(tls.http_kwargs() if tls is not None else {}),
    )


def _log_exporter(
    protocol: OtlpProtocol,
    url: str,
    headers: Mapping[str, str] | None,
    timeout_s: float,
    tls: ExportTls | None = None,
) -> LogRecordExporter:
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc._log_exporter import (
            OTLPLogExporter as GrpcLogExporter,
        )

        if tls is not None:
            return GrpcLogExporter(
                endpoint=url,
                headers=_grpc_headers(headers),
                timeout=timeout_s,
                insecure=False,
                credentials=tls.grpc_credentials(),
            )
        return GrpcLogExporter(endpoint=url, headers=_grpc_headers(headers), timeout=timeout_s)
    from opentelemetry.exporter.otlp.proto.http._log_exporter import (
        OTLPLogExporter as HttpLogExporter,
    )

    return HttpLogExporter(
        endpoint=url,
        headers=headers,
        timeout=timeout_s,
        **(tls.http_kwargs() if tls is not None else {}),
    )


def _metric_exporter(
    protocol: OtlpProtocol,
    url: str,
    headers: Mapping[str, str] | None,
    timeout_s: float,
    tls: ExportTls | None = None,
) -> MetricExporter:
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
            OTLPMetricExporter as GrpcMetricExporter,
        )

        if tls is not None:
            return GrpcMetricExporter(
                endpoint=url,
                headers=_grpc_headers(headers),
                timeout=timeout_s,
                insecure=False,
                credentials=tls.grpc_credentials(),
            )
        return GrpcMetricExporter(endpoint=url, headers=_grpc_headers(headers), timeout=timeout_s)
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
        OTLPMetricExporter as HttpMetricExporter,
    )

    return HttpMetricExporter(
        endpoint=url,
        headers=headers,
        timeout=timeout_s,
        **(tls.http_kwargs() if tls is not None else {}),
    )


def _tls_url(url: str, tls: ExportTls | None) -> str:
    return _https(url) if tls is not None else url


def _destination(url: str, protocol: OtlpProtocol) -> str:
    return f"{url} ({protocol})"


@dataclass
class Telemetry:
    """The grade outputs of one process. Build it with `build_telemetry`.

    `emit_grade` never raises: a sidecar must keep grading when an export or an encoding
    breaks. What went wrong shows up in the next `flush` report instead.
    """

    timeout_s: float
    resource: Resource
    tracer_provider: TracerProvider | None = None
    tracer: Tracer | None = None
    logger_provider: LoggerProvider | None = None
    logger: Logger | None = None
    meter_provider: MeterProvider | None = None
    metrics: ToolUseMetrics | None = None
    prometheus: PrometheusEndpoint | None = None
    tallies: dict[str, Tally] = field(default_factory=dict)
    content: ContentPolicy = KEEP
    """What of a run's content the grade span and log events carry."""
    _emit_errors: Tally = field(
        init=False, default_factory=lambda: Tally(ENCODE_SIGNAL, "", "graded run")
    )
    _closed: bool = field(init=False, default=False)

    @property
    def prometheus_url(self) -> str | None:
        return self.prometheus.url if self.prometheus else None

    def _guard(self, what: str, action: Callable[[], None]) -> None:
        try:
            action()
        except Exception as e:  # counted and logged: never raised into a receiver
            _log.exception("could not emit the %s of a graded run", what)
            self._emit_errors.note_failure(1, f"{what}: {type(e).__name__}: {e}")

    def emit_grade(self, run: Run, result: CheckResult, *, grade_span: bool) -> None:
        """Hands one graded run to every configured output (the grade span only when
        asked and spans are on); sending happens in the background until `flush`."""
        if self._closed:
            _log.warning("telemetry is shut down; the grade of this run is not exported")
            return
        now = time.time_ns()
        if grade_span and self.tracer is not None:
            tracer = self.tracer
            tally = self.tallies["traces"]

            def span() -> None:
                emit_grade_span(tracer, run, result, now_ns=now, content=self.content)
                tally.add_emitted(1)

            self._guard("grade span", span)
        if self.logger is not None:
            logger = self.logger
            log_tally = self.tallies["logs"]

            def logs() -> None:
                log_tally.add_emitted(
                    emit_log_events(logger, run, result, now_ns=now, content=self.content)
                )

            self._guard("log events", logs)
        if self.metrics is not None:
            recorder = self.metrics
            self._guard("metrics", lambda: recorder.record(run, result))

    def report(self) -> ExportReport:
        """The counts so far; items still queued show as pending."""
        signals: list[SignalReport] = [t.snapshot() for t in self.tallies.values()]
        if self.prometheus is not None:
            signals.append(
                SignalReport(
                    signal="prometheus",
                    destination=self.prometheus.url,
                    unit="metric point",
                    sent=self.prometheus.points_served,
                )
            )
        if self._emit_errors.failed:
            signals.append(self._emit_errors.snapshot(count_pending=False))
        return ExportReport(tuple(signals))

    def _run_bounded(self, jobs: dict[str, Callable[[], object]], timeout_s: float) -> None:
        """Runs the jobs in parallel and waits at most `timeout_s` (plus a little) for all.

        A job still running at the deadline is reported as a failure of its signal and left
        to finish on its daemon thread; the exporters' own timeouts end it soon after.
        """
        threads: dict[str, threading.Thread] = {}

        def guarded(name: str, job: Callable[[], object]) -> None:
            try:
                job()
            except Exception as e:  # an SDK that raises on shutdown: a failure, not a traceback
                logging.getLogger(__name__).debug("%s: %s", name, e, exc_info=True)
                if name in self.tallies:
                    self.tallies[name].note_failure(0, f"{type(e).__name__}: {e}")

        for name, job in jobs.items():
            thread = threading.Thread(
                target=guarded, args=(name, job), name=f"attest-otel-{name}", daemon=True
            )
            thread.start()
            threads[name] = thread
        deadline = time.monotonic() + timeout_s + _JOIN_GRACE_S
        for name, thread in threads.items():
            thread.join(max(0.0, deadline - time.monotonic()))
            if thread.is_alive() and name in self.tallies:
                self.tallies[name].note_failure(0, f"no answer within {timeout_s:g}s")

    def flush(self, timeout_s: float | None = None) -> ExportReport:
        """Sends everything queued, waits at most about `timeout_s`, and reports."""
        timeout = self.timeout_s if timeout_s is None else timeout_s
        millis = int(timeout * 1000)
        jobs: dict[str, Callable[[], object]] = {}
        tracer_provider, logger_provider = self.tracer_provider, self.logger_provider
        meter_provider = self.meter_provider
        if tracer_provider is not None:
            jobs["traces"] = lambda: tracer_provider.force_flush(millis)
        if logger_provider is not None:
            jobs["logs"] = lambda: logger_provider.force_flush(millis)
        # Only OTLP metrics are pushed; a Prometheus-only provider has nothing to flush.
        if meter_provider is not None and "metrics" in self.tallies:
            jobs["metrics"] = lambda: meter_provider.force_flush(millis)
        self._run_bounded(jobs, timeout)
        return self.report()

    def shutdown(self, timeout_s: float | None = None) -> ExportReport:
        """Flushes what is left, stops the exporters and the Prometheus server. Idempotent.

        An output whose last export failed is not retried here: its exporter is abandoned,
        so a dead endpoint costs one timeout (the flush's), not two.
        """
        if self._closed:
            return self.report()
        self._closed = True
        timeout = self.timeout_s if timeout_s is None else timeout_s
        millis = int(timeout * 1000)
        for tally in self.tallies.values():
            if tally.last_failed:
                tally.abandoned = True
        jobs: dict[str, Callable[[], object]] = {}
        if self.tracer_provider is not None:
            jobs["traces"] = self.tracer_provider.shutdown
        if self.logger_provider is not None:
            jobs["logs"] = self.logger_provider.shutdown
        meter_provider = self.meter_provider
        if meter_provider is not None:
            jobs["metrics"] = lambda: meter_provider.shutdown(millis)
        self._run_bounded(jobs, timeout)
        if self.prometheus is not None:
            self.prometheus.close()
        return self.report()

    def __enter__(self) -> Telemetry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


def build_telemetry(
    *,
    endpoint: str | None,
    protocol: str | None,
    spans: bool,
    logs: bool,
    metrics: bool,
    prometheus: str | None,
    label_cap: int = DEFAULT_LABEL_CAP,
    label_max_chars: int = DEFAULT_LABEL_MAX_CHARS,
    label_ttl_s: float = DEFAULT_LABEL_TTL_S,
    timeout_s: float = 5.0,
    headers: Mapping[str, str] | None = None,
    content: ContentPolicy = KEEP,
    tls: ExportTls | None = None,
) -> Telemetry:
    """Builds the outputs that are turned on.

    Args:
        endpoint: OTLP base URL (`http://collector:4317`, `collector:4318`, ...); None
            reads OTEL_EXPORTER_OTLP_<SIGNAL>_ENDPOINT / OTEL_EXPORTER_OTLP_ENDPOINT.
        protocol: `grpc` or `http/protobuf`; None reads OTEL_EXPORTER_OTLP_<SIGNAL>_PROTOCOL
            / OTEL_EXPORTER_OTLP_PROTOCOL, else gRPC.
        spans: export `attest.grade` spans (each `emit_grade` still chooses).
        logs: export log-based `gen_ai.evaluation.result` events.
        metrics: export the metrics over OTLP.
        prometheus: HOST:PORT to serve `/metrics` on (port 0: any free port).
        label_cap: distinct tool / agent names kept per metric label.
        label_max_chars: a label value is cut to this many characters.
        label_ttl_s: a label value unseen this long gives its place to a new one.
        timeout_s: per export request, retries included; also bounds flush and shutdown.
        headers: OTLP headers; None reads OTEL_EXPORTER_OTLP_<SIGNAL>_HEADERS / _HEADERS.
        content: what of a run's content the grade span and log events carry.
        tls: TLS material for the OTLP exporters; given, the endpoint is spoken to over
            TLS whatever its scheme.
    """
    if timeout_s <= 0:
        raise UsageError(f"export timeout must be positive, got {timeout_s}")
    if label_cap < 1:
        raise UsageError(f"metric label cap must be at least 1, got {label_cap}")
    if headers is None:
        _check_env_headers(spans=spans, logs=logs, metrics=metrics)
    resource = default_resource()
    telemetry = Telemetry(timeout_s=timeout_s, resource=resource, content=content)
    if (_env("OTEL_SDK_DISABLED") or "").lower() == "true":
        # The SDK would accept our grades and silently drop them, which a flush would then
        # report as lost; say once that nothing goes out, and build nothing.
        _log.warning("OTEL_SDK_DISABLED=true: grades are not exported")
        return telemetry
    try:
        _configure(
            telemetry,
            endpoint=endpoint,
            protocol=protocol,
            spans=spans,
            logs=logs,
            metrics=metrics,
            prometheus=prometheus,
            label_cap=label_cap,
            label_max_chars=label_max_chars,
            label_ttl_s=label_ttl_s,
            headers=headers,
            tls=tls,
        )
    except BaseException:
        # Half-built outputs own threads and sockets; do not leak them with the error.
        telemetry.shutdown(timeout_s=0.1)
        raise
    install_log_capture()  # after the exporters are imported: it hooks their loggers
    return telemetry


def _check_env_headers(*, spans: bool, logs: bool, metrics: bool) -> None:
    """OTEL_EXPORTER_OTLP_(<SIGNAL>_)HEADERS as the exporters will read them, checked first.

    The exporters skip an entry they cannot parse and gRPC drops a value it cannot send,
    and the export still reports success: the collector then refuses the grades for want
    of the header (an API key, a tenant). One line and exit 2 instead."""
    names = ["OTEL_EXPORTER_OTLP_HEADERS"]
    names += [
        f"OTEL_EXPORTER_OTLP_{signal}_HEADERS"
        for signal, on in (("TRACES", spans), ("LOGS", logs), ("METRICS", metrics))
        if on
    ]
    for name in names:
        text = _env(name)
        if text is None:
            continue
        for item in text.split(","):
            key, sep, value = item.partition("=")
            if not item.strip():
                continue
            problem = (
                header_problem(unquote(key.strip()), unquote(value.strip()))
                if sep and key.strip()
                else f"{item.strip()[:40]!r} is not NAME=VALUE"
            )
            if problem:
                raise UsageError(f"{name}: {problem}")


def _configure(
    telemetry: Telemetry,
    *,
    endpoint: str | None,
    protocol: str | None,
    spans: bool,
    logs: bool,
    metrics: bool,
    prometheus: str | None,
    label_cap: int,
    headers: Mapping[str, str] | None,
    label_max_chars: int = DEFAULT_LABEL_MAX_CHARS,
    label_ttl_s: float = DEFAULT_LABEL_TTL_S,
    tls: ExportTls | None = None,
) -> None:
    resource = telemetry.resource
    timeout_s = telemetry.timeout_s
    if spans:
        proto = resolve_protocol("traces", protocol)
        url = _tls_url(resolve_endpoint("traces", proto, endpoint), tls)
        tally = Tally("traces", _destination(url, proto), "span", endpoint_probe(url))
        provider = TracerProvider(
            sampler=ALWAYS_ON,
            resource=resource,
            shutdown_on_exit=False,
            span_limits=SpanLimits(
                max_events=_span_limit("OTEL_SPAN_EVENT_COUNT_LIMIT"),
                max_links=_span_limit("OTEL_SPAN_LINK_COUNT_LIMIT"),
            ),
        )
        exporter = CountingSpanExporter(_span_exporter(proto, url, headers, timeout_s, tls), tally)
        provider.add_span_processor(BatchSpanProcessor(exporter))
        telemetry.tracer_provider = provider
        telemetry.tracer = provider.get_tracer(semconv.INSTRUMENTATION_SCOPE, package_version())
        telemetry.tallies["traces"] = tally

    if logs:
        proto = resolve_protocol("logs", protocol)
        url = _tls_url(resolve_endpoint("logs", proto, endpoint), tls)
        tally = Tally("logs", _destination(url, proto), "log record", endpoint_probe(url))
        log_provider = LoggerProvider(resource=resource, shutdown_on_exit=False)
        log_exporter = CountingLogExporter(
            _log_exporter(proto, url, headers, timeout_s, tls), tally
        )
        log_provider.add_log_record_processor(BatchLogRecordProcessor(log_exporter))
        telemetry.logger_provider = log_provider
        telemetry.logger = log_provider.get_logger(semconv.INSTRUMENTATION_SCOPE, package_version())
        telemetry.tallies["logs"] = tally

    readers: list[MetricReader] = []
    if metrics:
        proto = resolve_protocol("metrics", protocol)
        url = _tls_url(resolve_endpoint("metrics", proto, endpoint), tls)
        tally = Tally("metrics", _destination(url, proto), "metric point", endpoint_probe(url))
        metric_exporter = CountingMetricExporter(
            _metric_exporter(proto, url, headers, timeout_s, tls), tally
        )
        readers.append(
            PeriodicExportingMetricReader(metric_exporter, export_timeout_millis=timeout_s * 1000)
        )
        telemetry.tallies["metrics"] = tally
    if prometheus is not None:
        telemetry.prometheus = start_prometheus(prometheus)
        readers.append(telemetry.prometheus.reader)
    if readers:
        meter_provider = MeterProvider(
            metric_readers=readers,
            resource=resource,
            views=metric_views(),
            shutdown_on_exit=False,
        )
        telemetry.meter_provider = meter_provider
        meter = meter_provider.get_meter(semconv.INSTRUMENTATION_SCOPE, package_version())
        telemetry.metrics = ToolUseMetrics(
            meter, label_cap=label_cap, label_max_chars=label_max_chars, label_ttl_s=label_ttl_s
        )
