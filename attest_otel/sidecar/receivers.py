"""The OTLP receivers: gRPC `TraceService`, `LogsService` and `MetricsService` `/Export`, and
HTTP `POST /v1/traces`, `/v1/logs`, `/v1/metrics` (apps send all three to one endpoint).

Both hand the request's protobuf bytes to the signal's `accept` callable and turn its `Outcome`
into the protocol's answer (pipeline.md c.):

    outcome     gRPC                                  HTTP
    ok          OK, empty ExportTraceServiceResponse  200, same content type as the request
    malformed   INVALID_ARGUMENT                      400 + google.rpc.Status body
    full        UNAVAILABLE + RetryInfo               503 + Retry-After
    closing     UNAVAILABLE + RetryInfo               503 + Retry-After

and the HTTP-only ones: body over the limit (before or after gzip) 413, a content type
other than protobuf/JSON 415, a content encoding other than gzip/identity 415, no
Content-Length 411, other paths 404. gRPC's size limit is checked here, after
decompression: grpcio reads up to a higher cap, so a request over the limit is refused with
RESOURCE_EXHAUSTED (no RetryInfo: not to be retried) after it is counted, logged with its
sender, and the traces it names are told (`Oversize`); past the cap grpcio refuses alone.
Every refusal is counted (`requests_rejected{reason}`) and said at WARNING with the
sender (`RefusalLog`).

The gRPC receiver takes the request as raw bytes (no deserializer), so a request that
holds no GenAI span can be forwarded as exactly the bytes it came in. OTLP/JSON is turned
into protobuf here, once, and follows the same path. Each request is handled on its own
thread and any error in one is answered on that request alone.

RetryInfo is sent twice on purpose: in `grpc-status-details-bin` (the standard place, read
by the Collector's exporter) and in `google.rpc.retryinfo-bin`, which is where the
OpenTelemetry Python exporter (1.45) looks.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable, Sequence
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import grpc
from google.rpc import error_details_pb2, status_pb2  # type: ignore[import-untyped]

from attest_otel.errors import ListenError
from attest_otel.sidecar.api import MAX_REPLY_BYTES
from attest_otel.sidecar.config import parse_host_port
from attest_otel.sidecar.forward import EXPORT_METHOD, RETRY_INFO_KEY, STATUS_DETAILS_KEY
from attest_otel.sidecar.json_in import otlp_json_to_protobuf

__all__ = [
    "SERVICES",
    "Accept",
    "GrpcReceiver",
    "Outcome",
    "Oversize",
    "RefusalLog",
    "TlsFiles",
    "TokenCheck",
    "exposure_warning",
    "metrics_exposure_warning",
    "otlp_json_to_protobuf",
]

log = logging.getLogger(__name__)

OutcomeKind = Literal["ok", "malformed", "full", "closing"]

# google.rpc.Code values used in Status bodies.
_CODE_INVALID_ARGUMENT = 3
_CODE_RESOURCE_EXHAUSTED = 8
_CODE_UNAVAILABLE = 14
_CODE_UNAUTHENTICATED = 16

_PROTOBUF_TYPES = ("application/x-protobuf", "application/protobuf")
_JSON_TYPE = "application/json"
_DISCARD_LIMIT = 64 * 1024 * 1024
"""An oversize body up to this size is read and thrown away so the answer (413) reaches the
client on a healthy keep-alive connection; beyond it the connection is closed instead."""


@dataclass(frozen=True, slots=True)
class Outcome:
    kind: OutcomeKind
    message: str = ""
    retry_after_s: float = 1.0

    @property
    def ok(self) -> bool:
        return self.kind == "ok"


OK = Outcome("ok")


# --- exposure: TLS and the bearer token ----------------------------------------------------


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """PEM files of a receiver's TLS; with `client_ca_file`, clients must present a
    certificate it signed (mTLS)."""

    cert_file: Path
    key_file: Path
    client_ca_file: Path | None = None

    def grpc_credentials(self) -> Any:

        client_ca = self.client_ca_file.read_bytes() if self.client_ca_file else None
        return grpc.ssl_server_credentials(
            [(self.key_file.read_bytes(), self.cert_file.read_bytes())],
            root_certificates=client_ca,
            require_client_auth=client_ca is not None,
        )

    def ssl_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(str(self.cert_file), str(self.key_file))
        if self.client_ca_file is not None:
            context.load_verify_locations(str(self.client_ca_file))
            context.verify_mode = ssl.CERT_REQUIRED
        return context


class TokenCheck:
    """`Authorization: Bearer <token>`, compared in constant time."""

    def __init__(self, token: str) -> None:
        if not token:
            raise ValueError("empty bearer token")
        self._expected = f"Bearer {token}".encode()

    def check(self, header: str | None) -> bool:
        given = (header or "").strip().encode("utf-8", "replace")
        return hmac.compare_digest(given, self._expected)


def _is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def metrics_exposure_warning(address: str | None) -> str | None:
    """The start-up warning when `/metrics` (tool and agent names, volumes) is served
    beyond loopback: it has no TLS or token of its own."""
    if not address:
        return None
    host = address.strip().rpartition(":")[0].strip("[]") or "0.0.0.0"
    if _is_loopback(host):
        return None
    return (
        f"Prometheus metrics are served on non-loopback {address} without TLS or a token: "
        "anyone who can reach it reads tool and agent names (bind telemetry.prometheus "
        "to 127.0.0.1 or put it behind a proxy)"
    )


def exposure_warning(endpoints: Sequence[str], *, tls: bool, token: bool) -> str | None:
    """The start-up warning when a receiver listens beyond loopback without TLS or a token
    (None when there is nothing to warn about)."""
    if tls and token:
        return None
    exposed = [e for e in endpoints if not _is_loopback(parse_host_port(e)[0])]
    if not exposed:
        return None
    missing = " and ".join(
        w
        for w, on in (
            ("TLS (receivers.tls)", tls),
            ("a bearer token (receivers.auth_token_file)", token),
        )
        if not on
    )
    return (
        f"receivers listen on non-loopback {', '.join(exposed)} without {missing}: "
        "anyone who can reach them can send spans"
    )


Accept = Callable[[bytes], Outcome]
"""Takes an export request's protobuf encoding (traces, logs or metrics); never raises."""

Oversize = Callable[[str, bytes, bool, str], None]
"""(signal, body as received, whether it is OTLP/JSON, the refusal's message): told of a
request refused for its size, so the traces it names carry the refusal as a gap."""

SERVICES = {
    "traces": "opentelemetry.proto.collector.trace.v1.TraceService",
    "logs": "opentelemetry.proto.collector.logs.v1.LogsService",
    "metrics": "opentelemetry.proto.collector.metrics.v1.MetricsService",
}

REFUSAL_LOG_EVERY_S = 10.0


class RefusalLog:
    """Every refused request said at WARNING with its sender: the first of a (reason,
    sender) at once, then one line per `REFUSAL_LOG_EVERY_S` with how many came since, so a
    sender retrying in a loop is visible without being the whole log."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: dict[tuple[str, str], tuple[float, int]] = {}

    def warn(self, reason: str, sender: str, signal: str, message: str) -> None:
        if sender.startswith(("ipv4:", "ipv6:")):  # a gRPC peer: the host, not each port
            sender = sender.rsplit(":", 1)[0]
        now = time.monotonic()
        key = (reason, sender)
        with self._lock:
            last, unlogged = self._last.get(key, (-REFUSAL_LOG_EVERY_S, 0))
            if now - last < REFUSAL_LOG_EVERY_S:
                self._last[key] = (last, unlogged + 1)
                return
            if len(self._last) > 4096:
                self._last.clear()
            self._last[key] = (now, 0)
        more = f" ({unlogged} more since the last line)" if unlogged else ""
        log.warning(
            "refused a %s request from %s (%s): %s%s",
            signal,
            sender or "unknown",
            reason,
            message,
            more,
            extra={"reason": reason, "sender": sender, "signal": signal},
        )


def mib(size: int) -> str:
    """A size as the limits are configured: in MiB, one decimal when not whole."""
    value = size / (1024 * 1024)
    return f"{value:.0f} MiB" if value == int(value) else f"{value:.1f} MiB"


# --- status bodies -------------------------------------------------------------------------


_BAD_REQUEST_TYPE = "type.googleapis.com/google.rpc.BadRequest"


def _status_bytes(
    code: int, message: str, retry_after_s: float | None = None, *, bad_request: bool = False
) -> bytes:
    """A google.rpc.Status; `bad_request`: with the BadRequest detail (`_status_json`)."""
    status = status_pb2.Status(code=code, message=message)
    if retry_after_s is not None:
        info = error_details_pb2.RetryInfo()
        info.retry_delay.FromNanoseconds(int(retry_after_s * 1e9))
        status.details.add().Pack(info)
    if bad_request:
        violation = error_details_pb2.BadRequest.FieldViolation(description=message)
        status.details.add().Pack(error_details_pb2.BadRequest(field_violations=[violation]))
    data: bytes = status.SerializeToString()
    return data


def _retry_info_bytes(retry_after_s: float) -> bytes:

    info = error_details_pb2.RetryInfo()
    info.retry_delay.FromNanoseconds(int(retry_after_s * 1e9))
    data: bytes = info.SerializeToString()
    return data


def _status_json(code: int, message: str, *, bad_request: bool = False) -> bytes:
    """The Status in protobuf's JSON mapping, as the Collector writes it (protojson).

    A 400 (bad data) carries a `google.rpc.BadRequest` detail, which the OTLP specification
    asks for ("Bad Data": Status.details SHOULD contain a BadRequest) and the Collector's
    receiver leaves out: code and message are the Collector's, the detail is extra and
    ignored by a client that does not look. Its one violation names no field (the problem
    is the request's, wherever the decoder stopped) and repeats the message.
    """
    status: dict[str, Any] = {"code": code, "message": message}
    if bad_request:
        status["details"] = [
            {"@type": _BAD_REQUEST_TYPE, "fieldViolations": [{"description": message}]}
        ]
    return json.dumps(status).encode()


# --- gRPC ----------------------------------------------------------------------------------


class GrpcReceiver:
    """OTLP/gRPC on `endpoint`, plus any extra services (the Grader API) on the same port."""

    def __init__(
        self,
        endpoint: str,
        accept: Accept,
        *,
        max_recv_bytes: int = 4 * 1024 * 1024,
        read_cap_bytes: int = 0,
        workers: int = 8,
        add_services: Sequence[Callable[[Any], None]] = (),
        tls: TlsFiles | None = None,
        token: TokenCheck | None = None,
        grader_token: TokenCheck | None = None,
        on_rejection: Callable[[str], None] = lambda reason: None,
        accept_logs: Accept | None = None,
        accept_metrics: Accept | None = None,
        on_oversize: Oversize | None = None,
    ) -> None:
        """`max_recv_bytes` is the limit a request is refused over; grpcio reads requests
        up to `read_cap_bytes` (at least the limit) so that one over the limit is counted,
        logged with its sender and its traces told, where grpcio alone would refuse it
        before any of that (past the cap it still does)."""
        self.endpoint = endpoint
        self._accepts = {"traces": accept, "logs": accept_logs, "metrics": accept_metrics}
        self._read_cap = max(read_cap_bytes, max_recv_bytes)
        self._on_oversize = on_oversize
        self.refusals = RefusalLog()
        self._grader_token = grader_token
        self._max_recv_bytes = max_recv_bytes
        self._workers = workers
        self._add_services = add_services
        self._tls = tls
        self._token = token
        self._on_rejection = on_rejection
        self._server: Any = None
        self.port = 0

    def start(self) -> int:

        host, port = parse_host_port(self.endpoint)
        _check_free(host, port, f"OTLP/gRPC receiver: cannot listen on {self.endpoint}")
        interceptors = (
            [_TokenInterceptor(self._token, self._grader_token, self._on_rejection)]
            if self._token or self._grader_token
            else []
        )
        server = grpc.server(
            futures.ThreadPoolExecutor(
                max_workers=self._workers, thread_name_prefix="attest-otel-grpc"
            ),
            interceptors=interceptors,
            options=[
                ("grpc.max_receive_message_length", self._read_cap),
                ("grpc.max_send_message_length", MAX_REPLY_BYTES),
                ("grpc.so_reuseport", 0),
            ],
        )
        handlers = tuple(
            grpc.method_handlers_generic_handler(
                SERVICES[signal],
                {
                    "Export": grpc.unary_unary_rpc_method_handler(
                        self._exporter(signal, accept),
                        request_deserializer=None,
                        response_serializer=None,
                    )
                },
            )
            for signal, accept in self._accepts.items()
            if accept is not None
        )
        server.add_generic_rpc_handlers(handlers)
        for add in self._add_services:
            add(server)
        address = f"{_bracket(host)}:{port}"
        try:
            bound: int = (
                server.add_secure_port(address, self._tls.grpc_credentials())
                if self._tls is not None
                else server.add_insecure_port(address)
            )
        except RuntimeError:  # newer grpcio raises where older ones return 0
            bound = 0
        if bound == 0:
            server.stop(None)
            raise ListenError(
                f"OTLP/gRPC receiver: cannot listen on {self.endpoint} "
                "(address in use or not permitted)"
            )
        server.start()
        self._server = server
        self.port = bound
        log.info(
            "OTLP/gRPC receiver listening",
            extra={
                "endpoint": f"{host}:{bound}",
                "method": EXPORT_METHOD,
                "tls": "mtls"
                if self._tls and self._tls.client_ca_file
                else "on"
                if self._tls
                else "off",
                "auth": "bearer" if self._token else "off",
            },
        )
        return bound

    def _exporter(self, signal: str, accept: Accept) -> Callable[[bytes, Any], bytes]:
        def export(request: bytes, context: Any) -> bytes:
            return self._export(request, context, signal, accept)

        return export

    def _export(self, request: bytes, context: Any, signal: str, accept: Accept) -> bytes:
        if len(request) > self._max_recv_bytes:
            self._refuse_oversize(request, context, signal)
        try:
            outcome = accept(request)
        except Exception:
            log.exception("gRPC receiver: accept failed")
            outcome = Outcome("full", "internal error; try again")
        if outcome.ok:
            return b""
        self.refusals.warn(outcome.kind, context.peer(), signal, outcome.message)
        if outcome.kind == "malformed":
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, outcome.message)
        context.set_trailing_metadata(
            (
                (RETRY_INFO_KEY, _retry_info_bytes(outcome.retry_after_s)),
                (
                    STATUS_DETAILS_KEY,
                    _status_bytes(_CODE_UNAVAILABLE, outcome.message, outcome.retry_after_s),
                ),
            )
        )
        context.abort(grpc.StatusCode.UNAVAILABLE, outcome.message)
        return b""  # not reached: abort raises

    def _refuse_oversize(self, request: bytes, context: Any, signal: str) -> None:
        """RESOURCE_EXHAUSTED without RetryInfo (OTLP: do not retry), counted, logged with
        the sender, and the traces the request names told; aborts the call."""
        message = (
            f"a request of {mib(len(request))} is over the "
            f"{mib(self._max_recv_bytes)} limit (receivers.grpc.max_recv_msg_size_mib)"
        )
        self._on_rejection("too_large")
        self.refusals.warn("too_large", context.peer(), signal, message)
        if self._on_oversize is not None:
            try:
                self._on_oversize(signal, request, False, message)
            except Exception:
                log.exception("gRPC receiver: noting the traces of a refused request failed")
        context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, message)

    def shutdown(self, timeout_s: float) -> bool:
        """Stops accepting; calls in flight get up to a second of `timeout_s` to finish."""
        server = self._server
        if server is not None:
            grace = min(1.0, max(0.0, timeout_s))
            server.stop(grace).wait(grace + 5)
            self._server = None
        return True


GRADER_PREFIX = "/attest_otel.v1.Grader/"


class _TokenInterceptor:
    """Two tokens on one port: OTLP `Export` takes the ingest token, the Grader API (which
    returns stored content and spends the model budget) its own read token. With only an
    ingest token the Grader API is closed: a sender's token must not read prompts."""

    def __init__(
        self,
        token: TokenCheck | None,
        grader_token: TokenCheck | None,
        on_rejection: Callable[[str], None],
    ) -> None:

        self._token = token
        self._grader_token = grader_token
        self._on_rejection = on_rejection

        self.refusals = RefusalLog()

        def deny(request: Any, context: Any) -> Any:
            self.refusals.warn(
                "unauthenticated", context.peer(), "OTLP", "missing or wrong bearer token"
            )
            context.abort(
                grpc.StatusCode.UNAUTHENTICATED,
                "missing or wrong bearer token (authorization metadata)",
            )

        def closed(request: Any, context: Any) -> Any:
            context.abort(
                grpc.StatusCode.PERMISSION_DENIED,
                "the Grader API needs its own token (receivers.grader_token_file)",
            )

        self._deny = grpc.unary_unary_rpc_method_handler(
            deny, request_deserializer=None, response_serializer=None
        )
        self._closed = grpc.unary_unary_rpc_method_handler(
            closed, request_deserializer=None, response_serializer=None
        )

    def intercept_service(self, continuation: Callable[[Any], Any], details: Any) -> Any:
        header = None
        for key, value in details.invocation_metadata or ():
            if key == "authorization":
                header = value if isinstance(value, str) else None
                break
        if str(details.method).startswith(GRADER_PREFIX):
            if self._grader_token is None:
                if self._token is None:
                    return continuation(details)
                self._on_rejection("unauthenticated")
                return self._closed
            wanted = self._grader_token
        elif self._token is None:
            return continuation(details)
        else:
            wanted = self._token
        if wanted.check(header):
            return continuation(details)
        self._on_rejection("unauthenticated")
        return self._deny


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


# --- HTTP ----------------------------------------------------------------------------------


def _check_free(host: str, port: int, what: str) -> None:
    """A taken port as a ListenError before gRPC tries it: grpc-core would first print its
    own multi-line error on stderr, and the operator needs one line."""
    if port == 0:
        return
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((host, port))
        except OSError as e:
            raise ListenError(f"{what}: {e.strerror or e}") from None
