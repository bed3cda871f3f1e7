"""Where the grade outputs go and how they are spoken to: endpoints, protocol, TLS, resource.

Configuration follows OpenTelemetry's own: an argument wins, else the standard
`OTEL_EXPORTER_OTLP_*` variables (per signal first, then the general one), else the SDK's
defaults. Every output (grade spans, log events, metrics) and the sidecar's own evaluation
logs resolve their destination here, so the rules are read one way only.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from typing import Any, Literal

from opentelemetry.sdk.resources import Resource

from attest_otel import semconv
from attest_otel.errors import UsageError

__all__ = [
    "DEFAULT_PROTOCOL",
    "ExportTls",
    "OtlpProtocol",
    "Signal",
    "default_resource",
    "destination",
    "env",
    "otlp_exporter",
    "package_version",
    "resolve_endpoint",
    "resolve_protocol",
    "tls_url",
]

Signal = Literal["traces", "logs", "metrics"]
OtlpProtocol = Literal["grpc", "http/protobuf"]

DEFAULT_PROTOCOL: OtlpProtocol = "grpc"
"""Python's OTLP exporters and `opentelemetry-instrument` default to gRPC (the spec says
http/protobuf); we follow the Python SDK, whose users we meet."""

_DEFAULT_GRPC = "http://localhost:4317"
_DEFAULT_HTTP = "http://localhost:4318"

# The SDK's exporter class of each signal, by protocol: one table instead of three builders.
_EXPORTERS: dict[Signal, tuple[str, str, str]] = {
    "traces": (
        "opentelemetry.exporter.otlp.proto.grpc.trace_exporter",
        "opentelemetry.exporter.otlp.proto.http.trace_exporter",
        "OTLPSpanExporter",
    ),
    "logs": (
        "opentelemetry.exporter.otlp.proto.grpc._log_exporter",
        "opentelemetry.exporter.otlp.proto.http._log_exporter",
        "OTLPLogExporter",
    ),
    "metrics": (
        "opentelemetry.exporter.otlp.proto.grpc.metric_exporter",
        "opentelemetry.exporter.otlp.proto.http.metric_exporter",
        "OTLPMetricExporter",
    ),
}


def env(name: str) -> str | None:
    """An environment variable, None when unset or blank (as the SDK reads them)."""
    value = os.environ.get(name, "").strip()
    return value or None


def resolve_protocol(signal: Signal, protocol: str | None) -> OtlpProtocol:
    chosen = (
        (
            protocol
            or env(f"OTEL_EXPORTER_OTLP_{signal.upper()}_PROTOCOL")
            or env("OTEL_EXPORTER_OTLP_PROTOCOL")
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
    per_signal = env(f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT")
    if per_signal:
        return _with_scheme(per_signal)
    general = env("OTEL_EXPORTER_OTLP_ENDPOINT")
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


def tls_url(url: str, tls: ExportTls | None) -> str:
    """The URL spoken to over TLS whatever its scheme when TLS material is given."""
    if tls is None:
        return url
    return "https://" + url.split("://", 1)[1] if "://" in url else f"https://{url}"


def destination(url: str, protocol: OtlpProtocol) -> str:
    """How a report names where a signal went."""
    return f"{url} ({protocol})"


class _NoHeaders(dict[str, str]):
    """No headers, said so: true as a value, so an exporter's `headers or <env>` keeps it."""

    def __bool__(self) -> bool:
        return True


def otlp_exporter(
    signal: Signal,
    protocol: OtlpProtocol,
    url: str,
    headers: Mapping[str, str] | None,
    timeout_s: float,
    tls: ExportTls | None = None,
) -> Any:
    """The SDK's own OTLP exporter of `signal` (imported only when asked for: each pulls in
    gRPC or requests)."""
    grpc_module, http_module, name = _EXPORTERS[signal]
    if protocol == "grpc":
        exporter = getattr(importlib.import_module(grpc_module), name)
        # The gRPC exporter reads OTEL_EXPORTER_OTLP_HEADERS whenever the headers it is given
        # are falsy: None asks for that, an empty mapping ("none") must not.
        given: Any = None
        if headers is not None:
            given = dict(headers) if headers else _NoHeaders()
        kwargs: dict[str, Any] = {"endpoint": url, "headers": given, "timeout": timeout_s}
        if tls is not None:
            kwargs.update(insecure=False, credentials=tls.grpc_credentials())
        return exporter(**kwargs)
    exporter = getattr(importlib.import_module(http_module), name)
    return exporter(
        endpoint=url,
        headers=headers,
        timeout=timeout_s,
        **(tls.http_kwargs() if tls is not None else {}),
    )
