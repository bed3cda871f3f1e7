"""Where the sidecar's own telemetry (grade log events, metrics) goes, and with what
credentials: the forward host's, or the telemetry section's own."""

from __future__ import annotations

from typing import Any

from attest_otel.export.otlp_config import ExportTls
from attest_otel.sidecar.config import ServiceConfig, parse_host_port

__all__ = ["telemetry_target"]


def telemetry_target(config: ServiceConfig) -> dict[str, Any]:
    """Where the grade log events and metrics go, and with what credentials.

    To the forward host (no `telemetry.endpoint`, or the same host:port): with the forward
    TLS material and, unless `telemetry.headers` is set, the forward headers. Anywhere else:
    with `telemetry.headers` only, never the forward ones. The headers are always given
    (empty: none), so the exporters never add OTEL_EXPORTER_OTLP_HEADERS, which was read
    once, as the forward headers (the OTLP/HTTP exporters add it whatever they are given:
    `serve` takes it out of its environment once the config is loaded).
    """
    tel, fwd = config.telemetry, config.forward
    endpoint = tel.endpoint or fwd.endpoint
    same = tel.endpoint is None
    if not same and endpoint is not None and fwd.endpoint is not None:
        try:
            same = parse_host_port(endpoint) == parse_host_port(fwd.endpoint)
        except ValueError:
            same = False
    tls = None
    if same and endpoint is not None and (fwd.tls_files or fwd.endpoint.startswith("https://")):
        tls = ExportTls(
            str(fwd.tls_ca_file) if fwd.tls_ca_file else None,
            str(fwd.tls_cert_file) if fwd.tls_cert_file else None,
            str(fwd.tls_key_file) if fwd.tls_key_file else None,
        )
    headers = dict(tel.headers) or (dict(fwd.headers) if same else {})
    return {
        "endpoint": endpoint,
        "protocol": tel.protocol or fwd.protocol,
        "timeout_s": tel.timeout_s,
        "headers": headers,
        "tls": tls,
    }
