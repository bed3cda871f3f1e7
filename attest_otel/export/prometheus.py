"""A Prometheus scrape endpoint for the tool-use metrics.

Debian's Prometheus (2.42) has no OTLP receiver, so it has to scrape us. The OpenTelemetry
Prometheus exporter turns the SDK's metrics into prometheus_client families on every
scrape, and prometheus_client renders them; both are the maintained standard, so nothing
here hand-writes the exposition format. The page is served by our own HTTP server
(`attest_otel.plumbing.httpserver`), not prometheus_client's, which takes a thread per connection
with no timeout: a thousand idle sockets were a thousand threads. Each endpoint gets its own
registry: the global one would collide when a process builds telemetry twice (tests, a
sidecar reloading its config) and would add process metrics nobody asked for.

Both packages are imported only when an endpoint is asked for, so the rest of attest-otel
works without them.
"""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.metrics.export import MetricReader, MetricsData

from attest_otel.errors import ListenError, UsageError
from attest_otel.plumbing.httpserver import HttpServer, Request, Response

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


class _MetricsApp:
    """GET `/metrics` (any other path: 404), rendered on a pool thread in the format the
    scraper's Accept header asks for, as prometheus_client's own server chooses it."""

    def __init__(self, render: Any) -> None:
        self._render = render

    def head(self, request: Request) -> Response | int:
        if request.method != "GET":
            return Response(405, b"method not allowed\n", headers=(("Allow", "GET"),))
        if request.headers.get("content-length", "0") != "0":
            return Response(400, b"a scrape has no body\n", close=True)
        return 0

    def handle(self, request: Request) -> Response:
        if request.path not in ("/metrics", "/"):
            return Response(404, b"not found\n")
        body, content_type = self._render(request.headers.get("accept", ""))
        return Response(200, body, content_type)


def _render(registry: Any, chosen: tuple[Any, str]) -> tuple[bytes, str]:
    encoder, content_type = chosen
    return encoder(registry), content_type


class PrometheusEndpoint:
    """The reader to give the MeterProvider, the server serving it, and what it served."""

    def __init__(self, reader: MetricReader, server: HttpServer) -> None:
        self.reader = reader
        self._server = server
        self._closed = False

    @property
    def host(self) -> str:
        return self._server.host

    @property
    def port(self) -> int:
        return self._server.port

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
        self._server.stop()


def start_prometheus(address: str) -> PrometheusEndpoint:
    """Serves `/metrics` on `address` (port 0 picks a free port; see `.port`)."""
    host, port = parse_address(address)
    try:
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
        from prometheus_client import CollectorRegistry
        from prometheus_client.exposition import choose_encoder
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
    server = HttpServer(
        host,
        port,
        _MetricsApp(lambda accept: _render(registry, choose_encoder(accept))),
        name="metrics",
        workers=2,
        max_connections=1024,
        max_per_peer=256,
        header_timeout_s=5.0,
        body_timeout_s=10.0,
    )
    try:
        server.start()
    except ListenError as e:
        reader.shutdown()
        raise ListenError(f"cannot serve Prometheus metrics on {address}: {e}") from None
    return PrometheusEndpoint(reader, server)
