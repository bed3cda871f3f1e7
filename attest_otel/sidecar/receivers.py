"""The OTLP receivers: gRPC `TraceService/Export` and HTTP `POST /v1/traces`.

Both hand the request's protobuf bytes to one `accept` callable and turn its `Outcome`
into the protocol's answer (pipeline.md c.):

    outcome     gRPC                                  HTTP
    ok          OK, empty ExportTraceServiceResponse  200, same content type as the request
    malformed   INVALID_ARGUMENT                      400 + google.rpc.Status body
    full        UNAVAILABLE + RetryInfo               503 + Retry-After
    closing     UNAVAILABLE + RetryInfo               503 + Retry-After

and the HTTP-only ones: body over the limit (before or after gzip) 413, a content type
other than protobuf/JSON 415, a content encoding other than gzip/identity 415, no
Content-Length 411, other paths 404. gRPC's size limit is grpcio's own
(`max_receive_message_length`, RESOURCE_EXHAUSTED), checked after decompression.

The gRPC receiver takes the request as raw bytes (no deserializer), so a request that
holds no GenAI span can be forwarded as exactly the bytes it came in. OTLP/JSON is turned
into protobuf here, once, and follows the same path. Each request is handled on its own
thread and any error in one is answered on that request alone.

RetryInfo is sent twice on purpose: in `grpc-status-details-bin` (the standard place, read
by the Collector's exporter) and in `google.rpc.retryinfo-bin`, which is where the
OpenTelemetry Python exporter (1.45) looks.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import ipaddress
import json
import logging
import socket
import ssl
from collections.abc import Callable, Sequence
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import grpc
from google.protobuf import json_format  # type: ignore[import-untyped]
from google.rpc import error_details_pb2, status_pb2  # type: ignore[import-untyped]
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)

from attest_otel.errors import ListenError
from attest_otel.sidecar.api import MAX_REPLY_BYTES
from attest_otel.sidecar.config import parse_host_port
from attest_otel.sidecar.forward import EXPORT_METHOD, RETRY_INFO_KEY, STATUS_DETAILS_KEY

__all__ = [
    "Accept",
    "GrpcReceiver",
    "Outcome",
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
"""Takes an ExportTraceServiceRequest encoding; never raises."""


# --- OTLP/JSON -> protobuf -----------------------------------------------------------------


def _fix_id(value: Any, nbytes: int) -> Any:
    """OTLP/JSON ids are hex; protobuf's JSON mapping (what ParseDict reads) wants base64."""
    if isinstance(value, str) and len(value) == 2 * nbytes:
        try:
            return base64.b64encode(bytes.fromhex(value)).decode("ascii")
        except ValueError:
            return value
    return value


def _fix_ids(obj: dict[str, Any], keys: Sequence[tuple[str, int]]) -> None:
    for key, nbytes in keys:
        if key in obj:
            obj[key] = _fix_id(obj[key], nbytes)


_SPAN_IDS = (
    ("traceId", 16),
    ("trace_id", 16),
    ("spanId", 8),
    ("span_id", 8),
    ("parentSpanId", 8),
    ("parent_span_id", 8),
)
_LINK_IDS = (("traceId", 16), ("trace_id", 16), ("spanId", 8), ("span_id", 8))


def _dicts(value: Any) -> list[dict[str, Any]]:
    """The objects of a JSON array; anything else is left for ParseDict to refuse."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def otlp_json_to_protobuf(body: bytes) -> bytes:
    """An OTLP/JSON ExportTraceServiceRequest as protobuf bytes; ValueError if it is not one."""

    try:
        document = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"invalid JSON: {e}") from None
    except RecursionError:
        raise ValueError("invalid JSON: nested too deeply") from None
    if not isinstance(document, dict):
        raise ValueError("invalid OTLP/JSON: the body must be a JSON object")
    for rs_key in ("resourceSpans", "resource_spans"):
        for rs in _dicts(document.get(rs_key)):
            for ss in _dicts(rs.get("scopeSpans") or rs.get("scope_spans")):
                for span in _dicts(ss.get("spans")):
                    _fix_ids(span, _SPAN_IDS)
                    for link in _dicts(span.get("links")):
                        _fix_ids(link, _LINK_IDS)
    try:
        request = json_format.ParseDict(
            document, ExportTraceServiceRequest(), ignore_unknown_fields=True
        )
    except (json_format.ParseError, ValueError, TypeError, AttributeError, binascii.Error) as e:
        raise ValueError(f"invalid OTLP/JSON: {e}") from None
    except RecursionError:
        raise ValueError("invalid OTLP/JSON: nested too deeply") from None
    data: bytes = request.SerializeToString()
    return data


# --- status bodies -------------------------------------------------------------------------


def _status_bytes(code: int, message: str, retry_after_s: float | None = None) -> bytes:

    status = status_pb2.Status(code=code, message=message)
    if retry_after_s is not None:
        info = error_details_pb2.RetryInfo()
        info.retry_delay.FromNanoseconds(int(retry_after_s * 1e9))
        status.details.add().Pack(info)
    data: bytes = status.SerializeToString()
    return data


def _retry_info_bytes(retry_after_s: float) -> bytes:

    info = error_details_pb2.RetryInfo()
    info.retry_delay.FromNanoseconds(int(retry_after_s * 1e9))
    data: bytes = info.SerializeToString()
    return data


def _status_json(code: int, message: str) -> bytes:
    return json.dumps({"code": code, "message": message}).encode()


# --- gRPC ----------------------------------------------------------------------------------


class GrpcReceiver:
    """OTLP/gRPC on `endpoint`, plus any extra services (the Grader API) on the same port."""

    def __init__(
        self,
        endpoint: str,
        accept: Accept,
        *,
        max_recv_bytes: int = 4 * 1024 * 1024,
        workers: int = 8,
        add_services: Sequence[Callable[[Any], None]] = (),
        tls: TlsFiles | None = None,
        token: TokenCheck | None = None,
        grader_token: TokenCheck | None = None,
        on_rejection: Callable[[str], None] = lambda reason: None,
    ) -> None:
        self.endpoint = endpoint
        self._grader_token = grader_token
        self._accept = accept
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
                ("grpc.max_receive_message_length", self._max_recv_bytes),
                ("grpc.max_send_message_length", MAX_REPLY_BYTES),
                ("grpc.so_reuseport", 0),
            ],
        )
        handler = grpc.method_handlers_generic_handler(
            "opentelemetry.proto.collector.trace.v1.TraceService",
            {
                "Export": grpc.unary_unary_rpc_method_handler(
                    self._export, request_deserializer=None, response_serializer=None
                )
            },
        )
        server.add_generic_rpc_handlers((handler,))
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

    def _export(self, request: bytes, context: Any) -> bytes:

        try:
            outcome = self._accept(request)
        except Exception:
            log.exception("gRPC receiver: accept failed")
            outcome = Outcome("full", "internal error; try again")
        if outcome.ok:
            return b""
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

    def stop(self, grace_s: float | None = 1.0) -> None:
        """Stops accepting; calls in flight get `grace_s` to finish."""
        server = self._server
        if server is not None:
            server.stop(grace_s).wait((grace_s or 0) + 5)
            self._server = None


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

        def deny(request: Any, context: Any) -> Any:
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
