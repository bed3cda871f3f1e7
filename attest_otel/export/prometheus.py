"""A Prometheus scrape endpoint for the tool-use metrics.

Debian's Prometheus (2.42) has no OTLP receiver, so it has to scrape us. The OpenTelemetry
Prometheus exporter turns the SDK's metrics into prometheus_client families on every
scrape, and prometheus_client's own HTTP server serves them; both are the maintained
standard, so nothing here hand-writes the exposition format. Each endpoint gets its own
registry: the global one would collide when a process builds telemetry twice (tests, a
sidecar reloading its config) and would add process metrics nobody asked for.

Both packages are imported only when an endpoint is asked for, so the rest of attest-otel
works without them.
"""

from __future__ import annotations

import threading
from typing import Any

from opentelemetry.sdk.metrics.export import MetricReader, MetricsData

from attest_otel.errors import ListenError, UsageError

__all__ = ["PrometheusEndpoint", "count_points", "parse_address", "start_prometheus"]

_INSTALL_HINT = (
    "the Prometheus endpoint needs opentelemetry-exporter-prometheus and prometheus-client "
    "(pip install opentelemetry-exporter-prometheus prometheus-client)"
)


def parse_address(address: str) -> tuple[str, int]:
    """HOST:PORT, [IPv6]:PORT or :PORT (all interfaces, as Go servers read it)."""
    text = address.strip()
    host, sep, port_text = text.rpartition(":")
    if not sep or not port_text.isdigit():
        raise UsageError(f"--prometheus {address!r}: expected HOST:PORT, e.g. 127.0.0.1:9464")
    port = int(port_text)
    if port > 65535:
        raise UsageError(f"--prometheus {address!r}: port {port} is out of range")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host or "0.0.0.0", port


def count_points(metrics_data: MetricsData | None) -> int:
    """Data points in one collection: what a report counts as "metric points"."""
    if metrics_data is None:
        return 0
    return sum(
        len(metric.data.data_points)
        for rm in metrics_data.resource_metrics
        for sm in rm.scope_metrics
        for metric in sm.metrics
    )


class PrometheusEndpoint:
    """The reader to give the MeterProvider, the server serving it, and what it served."""

    def __init__(self, reader: MetricReader, server: Any, thread: threading.Thread) -> None:
        self.reader = reader
        self._server = server
        self._thread = thread
        self._closed = False

    @property
    def host(self) -> str:
        return str(self._server.server_address[0])

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    @property
    def points_served(self) -> int:
        return int(getattr(self.reader, "points_served", 0))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def start_prometheus(address: str) -> PrometheusEndpoint:
    """Serves `/metrics` on `address` (port 0 picks a free port; see `.port`)."""
    host, port = parse_address(address)
    try:
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
        from prometheus_client import CollectorRegistry, start_http_server
    except ImportError as e:
        raise UsageError(f"{_INSTALL_HINT}; missing: {e.name}") from None

    class _CountingReader(PrometheusMetricReader):
        """Counts the points each scrape collected, for the export report."""

        points_served = 0

        def _receive_metrics(
            self,
            metrics_data: MetricsData,
            timeout_millis: float = 10_000,
            **kwargs: Any,
        ) -> None:
            self.points_served += count_points(metrics_data)
            super()._receive_metrics(metrics_data, timeout_millis, **kwargs)

    registry = CollectorRegistry(auto_describe=False)
    reader = _CountingReader(registry=registry)
    try:
        server, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as e:
        reader.shutdown()
        raise ListenError(
            f"cannot serve Prometheus metrics on {address}: {e.strerror or e}"
        ) from None
    return PrometheusEndpoint(reader, server, thread)
