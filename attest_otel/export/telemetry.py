"""Wiring: the grade outputs of one process, from arguments and OTEL_* env.

    build_telemetry(...) -> Telemetry
        .emit_grade(run, result, grade_span=...)   to every output (`outputs.py`)
        .flush(timeout_s) -> ExportReport           what was sent where, and failures
        .shutdown()

The providers are ours alone, never the global ones, so grading inside an instrumented
application does not send the grades through the application's pipeline (or the
application's spans through ours). Where each signal goes is `otlp_config.py`'s job.

`OUTPUTS` is the one place an output is registered. Nothing here waits much longer than
`timeout_s`: the flushes of the outputs run in parallel and are joined against one deadline.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from urllib.parse import unquote

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.resources import Resource

from attest_otel.content import KEEP, ContentPolicy
from attest_otel.errors import UsageError
from attest_otel.export.delivery import ENCODE_SIGNAL, ExportReport, SignalReport
from attest_otel.export.metrics import (
    DEFAULT_LABEL_CAP,
    DEFAULT_LABEL_MAX_CHARS,
    DEFAULT_LABEL_TTL_S,
    ToolUseMetrics,
)
from attest_otel.export.otlp_config import ExportTls, default_resource, env
from attest_otel.export.outputs import (
    GradeOutput,
    MetricOutput,
    OutputSettings,
    build_log_output,
    build_metric_output,
    build_span_output,
)
from attest_otel.export.prometheus import PrometheusEndpoint
from attest_otel.export.tally import Tally, install_log_capture
from attest_otel.model import CheckResult, Run
from attest_otel.yamlfile.read import header_problem

__all__ = ["OUTPUTS", "Telemetry", "build_telemetry"]

_log = logging.getLogger(__name__)

_JOIN_GRACE_S = 0.5

OUTPUTS: tuple[Callable[[OutputSettings], GradeOutput | None], ...] = (
    build_span_output,
    build_log_output,
    build_metric_output,
)
"""Every kind of grade output, in the order they are built and emitted to."""


@dataclass
class Telemetry:
    """The grade outputs of one process. Build it with `build_telemetry`.

    `emit_grade` never raises: a sidecar must keep grading when an export or an encoding
    breaks. What went wrong shows up in the next `flush` report instead.
    """

    timeout_s: float
    resource: Resource
    outputs: list[GradeOutput] = field(default_factory=list)
    _emit_errors: Tally = field(
        init=False, default_factory=lambda: Tally(ENCODE_SIGNAL, "", "graded run")
    )
    _closed: bool = field(init=False, default=False)

    @property
    def tallies(self) -> dict[str, Tally]:
        return {o.signal: o.tally for o in self.outputs if o.tally is not None}

    @property
    def meter_provider(self) -> MeterProvider | None:
        """The grade metrics' provider, which the sidecar's own metrics join."""
        for output in self.outputs:
            if isinstance(output, MetricOutput):
                return output.provider
        return None

    @property
    def metrics(self) -> ToolUseMetrics | None:
        """The grade metrics' recorder, which the sidecar also feeds with the runs its
        grading processes graded (`ToolUseMetrics.record_many`)."""
        for output in self.outputs:
            if isinstance(output, MetricOutput):
                return output.recorder
        return None

    @property
    def prometheus(self) -> PrometheusEndpoint | None:
        for output in self.outputs:
            if isinstance(output, MetricOutput):
                return output.prometheus
        return None

    @property
    def prometheus_url(self) -> str | None:
        return self.prometheus.url if self.prometheus else None

    def emit_grade(self, run: Run, result: CheckResult, *, grade_span: bool) -> None:
        """Hands one graded run to every configured output (the grade span only when
        asked and spans are on); sending happens in the background until `flush`."""
        if self._closed:
            _log.warning("telemetry is shut down; the grade of this run is not exported")
            return
        now = time.time_ns()
        for output in self.outputs:
            try:
                output.emit(run, result, now_ns=now, grade_span=grade_span)
            except Exception as e:  # counted and logged: never raised into a receiver
                _log.exception("could not emit the %s of a graded run", output.what)
                self._emit_errors.note_failure(1, f"{output.what}: {type(e).__name__}: {e}")

    def report(self) -> ExportReport:
        """The counts so far; items still queued show as pending."""
        signals: list[SignalReport] = [t.snapshot() for t in self.tallies.values()]
        for output in self.outputs:
            signals.extend(output.reports())
        if self._emit_errors.failed:
            signals.append(self._emit_errors.snapshot(count_pending=False))
        return ExportReport(tuple(signals))

    def _run_bounded(self, job: Callable[[GradeOutput, int], None], timeout_s: float) -> None:
        """Runs `job` on every output in parallel and waits at most `timeout_s` (plus a
        little) for all.

        A job still running at the deadline is reported as a failure of its signal and left
        to finish on its daemon thread; the exporters' own timeouts end it soon after.
        """
        millis = int(timeout_s * 1000)
        threads: dict[str, tuple[GradeOutput, threading.Thread]] = {}

        def guarded(output: GradeOutput) -> None:
            try:
                job(output, millis)
            except Exception as e:  # an SDK that raises on shutdown: a failure, not a traceback
                _log.debug("%s: %s", output.signal, e, exc_info=True)
                if output.tally is not None:
                    output.tally.note_failure(0, f"{type(e).__name__}: {e}")

        for output in self.outputs:
            thread = threading.Thread(
                target=guarded, args=(output,), name=f"attest-otel-{output.signal}", daemon=True
            )
            thread.start()
            threads[output.signal] = (output, thread)
        deadline = time.monotonic() + timeout_s + _JOIN_GRACE_S
        for output, thread in threads.values():
            thread.join(max(0.0, deadline - time.monotonic()))
            if thread.is_alive() and output.tally is not None:
                output.tally.note_failure(0, f"no answer within {timeout_s:g}s")

    def flush(self, timeout_s: float | None = None) -> ExportReport:
        """Sends everything queued, waits at most about `timeout_s`, and reports."""
        timeout = self.timeout_s if timeout_s is None else timeout_s
        self._run_bounded(lambda output, millis: output.flush(millis), timeout)
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
        for tally in self.tallies.values():
            if tally.last_failed:
                tally.abandoned = True
        self._run_bounded(lambda output, millis: output.shutdown(millis), timeout)
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
    telemetry = Telemetry(timeout_s=timeout_s, resource=resource)
    if (env("OTEL_SDK_DISABLED") or "").lower() == "true":
        # The SDK would accept our grades and silently drop them, which a flush would then
        # report as lost; say once that nothing goes out, and build nothing.
        _log.warning("OTEL_SDK_DISABLED=true: grades are not exported")
        return telemetry
    settings = OutputSettings(
        resource=resource,
        timeout_s=timeout_s,
        endpoint=endpoint,
        protocol=protocol,
        headers=dict(headers) if headers is not None else None,
        tls=tls,
        content=content,
        spans=spans,
        logs=logs,
        metrics=metrics,
        prometheus=prometheus,
        label_cap=label_cap,
        label_max_chars=label_max_chars,
        label_ttl_s=label_ttl_s,
    )
    try:
        for build in OUTPUTS:
            output = build(settings)
            if output is not None:
                telemetry.outputs.append(output)
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
        text = env(name)
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
