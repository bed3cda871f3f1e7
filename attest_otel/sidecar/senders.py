"""The transports of forwarding: one request's bytes to the next hop, and what came back.

A sender sends the bytes it is given as they are (no parse, no re-encode) and says whether
the next hop took them, and if not whether a retry may succeed and when (the OTLP rules,
pipeline.md c.: gRPC CANCELLED, DEADLINE_EXCEEDED, ABORTED, OUT_OF_RANGE, UNAVAILABLE,
DATA_LOSS, and RESOURCE_EXHAUSTED with RetryInfo; HTTP 429, 502, 503, 504 and connection
failures). The queue, the retries and their backoff are `forward.Forwarder`'s.
"""

from __future__ import annotations

import gzip
import http.client
import logging
import ssl
import time
from collections.abc import Sequence
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

import grpc
from google.rpc import error_details_pb2, status_pb2  # type: ignore[import-untyped]
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceResponse,
)

from attest_otel.sidecar.config import ForwardConfig

__all__ = [
    "EXPORT_METHOD",
    "LOGS_METHOD",
    "METRICS_METHOD",
    "RETRY_INFO_KEY",
    "STATUS_DETAILS_KEY",
    "GrpcSender",
    "HttpSender",
    "SendResult",
    "Sender",
    "grpc_retry_delay",
    "make_log_sender",
    "make_metrics_sender",
    "make_sender",
    "parse_retry_after",
]

log = logging.getLogger(__name__)

EXPORT_METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
LOGS_METHOD = "/opentelemetry.proto.collector.logs.v1.LogsService/Export"
METRICS_METHOD = "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export"
RETRY_INFO_KEY = "google.rpc.retryinfo-bin"
"""Trailing metadata key the OpenTelemetry Python exporters read RetryInfo from."""
STATUS_DETAILS_KEY = "grpc-status-details-bin"
"""The standard place of a `google.rpc.Status` (with RetryInfo in its details)."""
_RETRYABLE_HTTP = frozenset({429, 502, 503, 504})


@dataclass(frozen=True, slots=True)
class SendResult:
    ok: bool
    retryable: bool = False
    retry_after_s: float | None = None
    too_large: bool = False
    rejected_spans: int = 0
    error: str = ""
    maybe_delivered: bool = False
    """The request went out and no answer came in time: the next hop may have it."""


class Sender(Protocol):
    def send(self, data: bytes, timeout_s: float) -> SendResult: ...

    def close(self) -> None: ...


# --- gRPC ------------------------------------------------------------------------------------


def grpc_retry_delay(metadata: Sequence[tuple[str, Any]] | None) -> float | None:
    """The server's RetryInfo delay in seconds, from either place it may be put."""
    if not metadata:
        return None

    for key, value in metadata:
        try:
            if key == RETRY_INFO_KEY:
                info = error_details_pb2.RetryInfo.FromString(value)
                return float(info.retry_delay.seconds + info.retry_delay.nanos / 1e9)
            if key == STATUS_DETAILS_KEY:
                status = status_pb2.Status.FromString(value)
                for detail in status.details:
                    info = error_details_pb2.RetryInfo()
                    if detail.Unpack(info):
                        return float(info.retry_delay.seconds + info.retry_delay.nanos / 1e9)
        except Exception:
            log.debug("unreadable %s in a gRPC error", key)
    return None


def _rejected(body: bytes) -> tuple[int, str]:
    if not body:
        return 0, ""

    try:
        response = ExportTraceServiceResponse.FromString(body)
    except Exception:
        return 0, ""
    partial = response.partial_success
    return int(partial.rejected_spans), str(partial.error_message)


class GrpcSender:
    """Sends request bytes as they are (no parse, no re-encode) with a raw unary call."""

    def __init__(self, settings: ForwardConfig, method: str = EXPORT_METHOD) -> None:

        self._grpc = grpc
        parts = urlsplit(
            settings.endpoint if "://" in settings.endpoint else f"http://{settings.endpoint}"
        )
        target = parts.netloc or parts.path
        options = [
            ("grpc.max_send_message_length", -1),
            ("grpc.max_receive_message_length", 4 * 1024 * 1024),
        ]
        if parts.scheme == "https" or settings.tls_files:
            credentials = grpc.ssl_channel_credentials(
                root_certificates=_read(settings.tls_ca_file),
                private_key=_read(settings.tls_key_file),
                certificate_chain=_read(settings.tls_cert_file),
            )
            self._channel = grpc.secure_channel(target, credentials, options)
        else:
            self._channel = grpc.insecure_channel(target, options)
        self._call = self._channel.unary_unary(
            method, request_serializer=None, response_deserializer=None
        )
        self._metadata = tuple((k.lower(), v) for k, v in settings.headers.items()) or None
        self._compression = (
            grpc.Compression.Gzip
            if settings.compression == "gzip"
            else grpc.Compression.NoCompression
        )

    def send(self, data: bytes, timeout_s: float) -> SendResult:
        grpc = self._grpc
        try:
            body = self._call(
                data, timeout=timeout_s, metadata=self._metadata, compression=self._compression
            )
        except grpc.RpcError as e:
            code = e.code()
            delay = grpc_retry_delay(e.trailing_metadata())
            detail = f"gRPC {code.name}: {e.details()}"
            if code == grpc.StatusCode.RESOURCE_EXHAUSTED and delay is None:
                return SendResult(False, too_large=True, error=detail)
            if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                return SendResult(
                    False, retryable=True, retry_after_s=delay, error=detail, maybe_delivered=True
                )
            retryable = code in (
                grpc.StatusCode.CANCELLED,
                grpc.StatusCode.DEADLINE_EXCEEDED,
                grpc.StatusCode.ABORTED,
                grpc.StatusCode.OUT_OF_RANGE,
                grpc.StatusCode.UNAVAILABLE,
                grpc.StatusCode.DATA_LOSS,
                grpc.StatusCode.RESOURCE_EXHAUSTED,
            )
            return SendResult(False, retryable=retryable, retry_after_s=delay, error=detail)
        rejected, message = _rejected(body)
        return SendResult(True, rejected_spans=rejected, error=message)

    def close(self) -> None:
        self._channel.close()


# --- HTTP ------------------------------------------------------------------------------------


def parse_retry_after(value: str | None) -> float | None:
    """`Retry-After` as seconds: a number, or an HTTP date."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _read(path: Path | None) -> bytes | None:
    return path.read_bytes() if path is not None else None


def client_ssl_context(settings: ForwardConfig) -> ssl.SSLContext:
    """TLS to the next hop: its CA file (else the system's), and our certificate for mTLS."""
    context = ssl.create_default_context(
        cafile=str(settings.tls_ca_file) if settings.tls_ca_file else None
    )
    if settings.tls_cert_file is not None:
        context.load_cert_chain(
            str(settings.tls_cert_file),
            str(settings.tls_key_file) if settings.tls_key_file else None,
        )
    return context


class HttpSender:
    """OTLP/HTTP protobuf over one keep-alive connection (one sender per worker)."""

    def __init__(self, settings: ForwardConfig, default_path: str = "/v1/traces") -> None:
        url = settings.endpoint if "://" in settings.endpoint else f"http://{settings.endpoint}"
        parts = urlsplit(url)
        self._https = parts.scheme == "https" or settings.tls_files
        self._ssl = client_ssl_context(settings) if self._https else None
        self._host = parts.hostname or "localhost"
        self._port = parts.port or (443 if self._https else 80)
        path = parts.path or ""
        if path.endswith("/v1/traces") and default_path != "/v1/traces":  # a signal's own
            path = path[: -len("/v1/traces")] + default_path
        self._path = path if path not in ("", "/") else default_path
        self._headers = {"Content-Type": "application/x-protobuf", **dict(settings.headers)}
        self._gzip = settings.compression == "gzip"
        if self._gzip:
            self._headers["Content-Encoding"] = "gzip"
        self._conn: http.client.HTTPConnection | None = None

    def _connection(self, timeout_s: float) -> http.client.HTTPConnection:
        if self._conn is None:
            if self._ssl is not None:
                self._conn = http.client.HTTPSConnection(
                    self._host, self._port, timeout=timeout_s, context=self._ssl
                )
            else:
                self._conn = http.client.HTTPConnection(self._host, self._port, timeout=timeout_s)
        else:
            self._conn.timeout = timeout_s
            if self._conn.sock is not None:
                self._conn.sock.settimeout(timeout_s)
        return self._conn

    def send(self, data: bytes, timeout_s: float) -> SendResult:
        body = gzip.compress(data, compresslevel=5) if self._gzip else data
        try:
            conn = self._connection(timeout_s)
            conn.request("POST", self._path, body=body, headers=self._headers)
            response = conn.getresponse()
            payload = response.read()
        except (OSError, http.client.HTTPException) as e:
            self.close()
            return SendResult(
                False,
                retryable=True,
                error=f"HTTP: {type(e).__name__}: {e}",
                maybe_delivered=isinstance(e, TimeoutError),
            )
        status = response.status
        if response.getheader("Connection", "").lower() == "close":
            self.close()
        if 200 <= status < 300:
            rejected, message = _rejected(payload)
            return SendResult(True, rejected_spans=rejected, error=message)
        detail = f"HTTP {status}"
        if status == 413:
            return SendResult(False, too_large=True, error=detail)
        return SendResult(
            False,
            retryable=status in _RETRYABLE_HTTP,
            retry_after_s=parse_retry_after(response.getheader("Retry-After")),
            error=detail,
        )

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def make_sender(settings: ForwardConfig) -> Sender:
    if settings.protocol == "grpc":
        return GrpcSender(settings)
    return HttpSender(settings)


def make_log_sender(settings: ForwardConfig) -> Sender:
    """The same transport for OTLP logs (`LogsService/Export`, `/v1/logs`): the sidecar
    sends its evaluation log records as it sends spans (`export.log_records`)."""
    if settings.protocol == "grpc":
        return GrpcSender(settings, LOGS_METHOD)
    return HttpSender(settings, "/v1/logs")


def make_metrics_sender(settings: ForwardConfig) -> Sender:
    """The same transport for the app's metrics, passed through untouched."""
    if settings.protocol == "grpc":
        return GrpcSender(settings, METRICS_METHOD)
    return HttpSender(settings, "/v1/metrics")
