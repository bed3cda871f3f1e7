"""The sidecar's own telemetry as one component: the grade metrics (OTLP and the Prometheus
`/metrics` endpoint) and the sidecar's self-metrics over its counters.

Built at start (`export.telemetry.build_telemetry` opens the exporters and the `/metrics`
port), shut down after the forwarders, with at least a second to flush. The grade log
events are not sent from here but by `evaluation_logs` (OTLP bytes made where the grade
is made). `emit` and `record_many` are what the grader is handed when it is built; they
do nothing until the outputs exist.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from attest_otel import semconv
from attest_otel.content import ContentPolicy
from attest_otel.export.otlp_config import package_version
from attest_otel.export.telemetry import Telemetry, build_telemetry
from attest_otel.model import CheckResult, Run
from attest_otel.sidecar.config import TelemetryConfig

__all__ = ["TelemetryPart"]

log = logging.getLogger(__name__)

MIN_SHUTDOWN_S = 1.0
"""The telemetry's flush gets this even when the shutdown deadline has passed."""


class TelemetryPart:
    """See the module docstring; a lifecycle component."""

    def __init__(
        self,
        config: TelemetryConfig,
        *,
        content: ContentPolicy,
        target: dict[str, Any],
        self_metrics: Callable[[Any], None],
    ) -> None:
        """`target`: where it goes (`targets.telemetry_target`); `self_metrics`: registers
        the sidecar's own instruments on the grade metrics' meter (`stats.register_metrics`)."""
        self.config = config
        self.content = content
        self.target = target
        self.self_metrics = self_metrics
        self.telemetry: Telemetry | None = None

    @property
    def enabled(self) -> bool:
        return self.config.metrics or self.config.prometheus is not None

    def start(self) -> None:
        tel = self.config
        if not self.enabled:
            return
        telemetry = build_telemetry(
            spans=False,
            logs=False,  # sent as OTLP bytes by `evaluation_logs`, not the SDK
            metrics=tel.metrics,
            prometheus=tel.prometheus,
            label_cap=tel.label_cap,
            label_max_chars=tel.label_max_chars,
            label_ttl_s=tel.label_ttl_s,
            content=self.content,
            **self.target,
        )
        self.telemetry = telemetry
        if telemetry.meter_provider is not None:
            meter = telemetry.meter_provider.get_meter(  # the grade metrics' scope
                semconv.INSTRUMENTATION_SCOPE, package_version()
            )
            self.self_metrics(meter)

    @property
    def prometheus_url(self) -> str | None:
        return getattr(self.telemetry, "prometheus_url", None)

    def emit(self, run: Run, result: CheckResult) -> None:
        """A run graded in this process, to the grade metrics."""
        if self.telemetry is not None:
            self.telemetry.emit_grade(run, result, grade_span=False)

    def record_many(self, runs: list[tuple[Run, CheckResult]]) -> None:
        """Runs a grading process graded (and logged), to the metrics, once per batch."""
        metrics = self.telemetry.metrics if self.telemetry is not None else None
        if metrics is not None:
            metrics.record_many(runs)

    def shutdown(self, timeout_s: float) -> bool:
        telemetry, self.telemetry = self.telemetry, None
        if telemetry is None:
            return True
        try:
            telemetry.shutdown(timeout_s=max(MIN_SHUTDOWN_S, timeout_s))
        except Exception:
            log.exception("telemetry shutdown failed")
        return True
