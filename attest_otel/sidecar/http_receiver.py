"""The OTLP/HTTP receiver: `POST /v1/traces`, `/v1/logs`, `/v1/metrics`, `/healthz` and
`/readyz`.

What it answers is in `receivers` (the table of outcomes). What a connection may cost is
bounded by the server (`attest_otel.plumbing.httpserver`: an event loop holds idle and slow
connections, a pool of `workers` threads sees only whole requests). What a request may cost
is bounded here:

- size: a body over `max_body_bytes` (or, for OTLP/JSON, the lower `max_json_bytes`:
  converting it costs far more, docs/measurements.md) is refused with 413 from its Content-Length
  (read, up to `_DISCARD_LIMIT`, only to name its traces as a gap, `on_oversize`; past
  that the connection is closed unread), and a gzip body that inflates past the limit is
  cut off while inflating;
- decoding: gunzip and OTLP/JSON conversion are budgeted by kind and by sender
  (`DecodeBudget`): JSON and gzip-protobuf have `max_concurrent_decodes` slots each, and one
  sender (its address) holds at most half of a kind's slots, so neither one kind of body nor
  one client turns away the others. A request that finds no slot within `decode_wait_s`
  gets 503 + Retry-After (`decode_busy`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from attest_otel.errors import InputError, ListenError
from attest_otel.ingest.gzip import InflatesTooFar, gunzip
from attest_otel.plumbing.httpserver import HttpServer, Request, Response
from attest_otel.sidecar.config import parse_host_port
from attest_otel.sidecar.receivers import (
    _CODE_INVALID_ARGUMENT,
    _CODE_RESOURCE_EXHAUSTED,
    _CODE_UNAUTHENTICATED,
    _CODE_UNAVAILABLE,
    _DISCARD_LIMIT,
    _JSON_TYPE,
    _PROTOBUF_TYPES,
    Accept,
    Outcome,
    Oversize,
    RefusalLog,
    TlsFiles,
    TokenCheck,
    _status_bytes,
    _status_json,
    mib,
    otlp_json_to_protobuf,
)

__all__ = ["DecodeBudget", "HttpReceiver"]

log = logging.getLogger(__name__)

_SIGNAL_PATHS = {"/v1/traces": "traces", "/v1/logs": "logs", "/v1/metrics": "metrics"}


def limit_key(is_json: bool) -> str:
    """The setting that raises the limit a body was refused over."""
    return (
        "receivers.http.max_json_body_size_mib"
        if is_json
        else "receivers.http.max_request_body_size_mib"
    )


class DecodeBudget:
    """Decode slots per kind of body, of which one sender holds at most half (at least one).

    One shared pool let two JSON senders turn away the Collector's gzip-protobuf: each kind
    now has its own slots, and within a kind a single client cannot take them all.
    """

    def __init__(self, slots: int) -> None:
        self.slots = max(1, slots)
        self.per_sender = max(1, self.slots // 2)
        self._cond = threading.Condition()
        self._kinds: dict[str, int] = {}
        self._senders: dict[tuple[str, str], int] = {}

    def acquire(self, kind: str, sender: str, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        key = (kind, sender)
        with self._cond:
            while (
                self._kinds.get(kind, 0) >= self.slots
                or self._senders.get(key, 0) >= self.per_sender
            ):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            self._kinds[kind] = self._kinds.get(kind, 0) + 1
            self._senders[key] = self._senders.get(key, 0) + 1
            return True

    def release(self, kind: str, sender: str) -> None:
        key = (kind, sender)
        with self._cond:
            self._kinds[kind] -= 1
            self._senders[key] -= 1
            if not self._senders[key]:
                del self._senders[key]
            self._cond.notify_all()


def _media(request: Request) -> str:
    return request.headers.get("content-type", "").split(";", 1)[0].strip().lower()


class _OtlpApp:
    """The OTLP/HTTP answers (`httpserver.App`)."""

    def __init__(self, receiver: HttpReceiver) -> None:
        self.receiver = receiver

    def head(self, request: Request) -> Response | int:
        receiver = self.receiver
        if request.method == "GET":
            return 0
        if request.method != "POST":
            return Response(405, b"method not allowed\n", headers=(("Allow", "GET, POST"),))
        is_json = _media(request) == _JSON_TYPE
        if receiver.token is not None and not receiver.token.check(
            request.headers.get("authorization")
        ):
            return self._status(
                request,
                "unauthenticated",
                401,
                _CODE_UNAUTHENTICATED,
                "missing or wrong bearer token",
                is_json,
                close=True,
                extra=(("WWW-Authenticate", "Bearer"),),
            )
        length_header = request.headers.get("content-length")
        if (
            request.headers.get("transfer-encoding", "").lower() == "chunked"
            or length_header is None
        ):
            return self._status(
                request,
                "length_required",
                411,
                _CODE_INVALID_ARGUMENT,
                "Content-Length is required",
                is_json,
                close=True,
            )
        try:
            length = int(length_header)
            if length < 0:
                raise ValueError
        except ValueError:
            return self._status(
                request,
                "malformed",
                400,
                _CODE_INVALID_ARGUMENT,
                "bad Content-Length",
                is_json,
                close=True,
            )
        limit = receiver.max_json_bytes if is_json else receiver.max_body_bytes
        if length > limit and length > _DISCARD_LIMIT:
            return self._status(
                request,
                "too_large",
                413,
                _CODE_RESOURCE_EXHAUSTED,
                _over(length, limit, is_json),
                is_json,
                close=True,
            )
        # A body over the limit but under _DISCARD_LIMIT is read too: the answer then
        # reaches the client on a healthy kept-alive connection, and `handle` names the
        # traces it held (`on_oversize`).
        return length

    def handle(self, request: Request) -> Response:
        receiver = self.receiver
        if request.method == "GET":
            if request.path == "/healthz":
                return Response(200, b"ok\n")
            if request.path == "/readyz":
                ready, why = receiver.ready()
                return Response(200 if ready else 503, (why or "ready").encode() + b"\n")
            return Response(404, b"not found\n")
        media = _media(request)
        is_json = media == _JSON_TYPE
        signal = _SIGNAL_PATHS.get(request.path.rstrip("/"), "")
        limit = receiver.max_json_bytes if is_json else receiver.max_body_bytes
        encoding = (request.headers.get("content-encoding") or "identity").strip().lower()
        if len(request.body) > limit:
            message = _over(len(request.body), limit, is_json)
            self._oversize(signal, request.body, encoding == "gzip", is_json, message)
            return self._status(
                request, "too_large", 413, _CODE_RESOURCE_EXHAUSTED, message, is_json
            )
        accept = receiver.accepts.get(signal)
        if accept is None:
            return _status(
                404, _CODE_INVALID_ARGUMENT, f"no OTLP signal at {request.path}", is_json
            )
        if media not in _PROTOBUF_TYPES and not is_json:
            return self._status(
                request,
                "unsupported_media_type",
                415,
                _CODE_INVALID_ARGUMENT,
                f"unsupported content type {media or '(none)'!r}; use "
                "application/x-protobuf or application/json",
                False,
            )
        if encoding not in ("gzip", "identity"):
            return self._status(
                request,
                "unsupported_media_type",
                415,
                _CODE_INVALID_ARGUMENT,
                f"unsupported content encoding {encoding!r}; use gzip",
                is_json,
            )
        body = request.body
        if encoding == "gzip" or is_json:
            decoded = self._decode(request, signal, encoding == "gzip", is_json, limit)
            if isinstance(decoded, Response):
                return decoded
            body = decoded
        try:
            outcome = accept(body)
        except Exception:
            log.exception("HTTP receiver: accept failed")
            outcome = Outcome("full", "internal error; try again")
        if outcome.ok:
            return Response(
                200, b"{}" if is_json else b"", _JSON_TYPE if is_json else _PROTOBUF_TYPES[0]
            )
        if outcome.kind == "malformed":
            return self._status(
                request,
                outcome.kind,
                400,
                _CODE_INVALID_ARGUMENT,
                outcome.message,
                is_json,
                count=False,  # counted by the request path
            )
        return self._status(
            request,
            outcome.kind,
            503,
            _CODE_UNAVAILABLE,
            outcome.message,
            is_json,
            retry_after_s=outcome.retry_after_s,
            count=False,
        )

    def _decode(
        self, request: Request, signal: str, gzipped: bool, is_json: bool, limit: int
    ) -> bytes | Response:
        """Gunzip and OTLP/JSON conversion within the decode budget: each costs a multiple
        of the body in memory and CPU, so concurrent large bodies would otherwise add up
        without bound."""
        receiver = self.receiver
        kind = "json" if is_json else "gzip"
        if not receiver.decodes.acquire(kind, request.peer, receiver.decode_wait_s):
            return self._status(
                request,
                "decode_busy",
                503,
                _CODE_UNAVAILABLE,
                "busy decoding other requests; try again",
                is_json,
                retry_after_s=1.0,
            )
        body = request.body
        try:
            if gzipped:
                try:
                    body = gunzip(body, "request body", limit)
                except InflatesTooFar:
                    message = (
                        f"a body inflating to over the {mib(limit)} limit ({limit_key(is_json)})"
                    )
                    self._oversize(signal, body, True, is_json, message)
                    return self._status(
                        request, "too_large", 413, _CODE_RESOURCE_EXHAUSTED, message, is_json
                    )
                except InputError as e:
                    return self._status(
                        request, "malformed", 400, _CODE_INVALID_ARGUMENT, e.problem, is_json
                    )
            if is_json:
                try:
                    body = otlp_json_to_protobuf(body, signal)
                except ValueError as e:
                    return self._status(
                        request, "malformed", 400, _CODE_INVALID_ARGUMENT, str(e), True
                    )
            return body
        finally:
            receiver.decodes.release(kind, request.peer)

    def _oversize(
        self, signal: str, body: bytes, gzipped: bool, is_json: bool, message: str
    ) -> None:
        """Tells the service which traces a body refused for its size names (read up to
        `_DISCARD_LIMIT` inflated; past it, none)."""
        tell = self.receiver.on_oversize
        if tell is None or not signal:
            return
        try:
            if gzipped:
                body = gunzip(body, "request body", _DISCARD_LIMIT)
            tell(signal, body, is_json, message)
        except (InflatesTooFar, InputError):
            return
        except Exception:
            log.exception("HTTP receiver: noting the traces of a refused request failed")

    def _status(
        self,
        request: Request,
        reason: str,
        http_status: int,
        code: int,
        message: str,
        is_json: bool,
        *,
        count: bool = True,
        retry_after_s: float | None = None,
        close: bool = False,
        extra: Sequence[tuple[str, str]] = (),
    ) -> Response:
        """A refusal: counted (unless the request path counted it), said at WARNING with
        the sender (`RefusalLog`), answered as `_status`."""
        if count:
            self.receiver.count_rejection(reason)
        signal = _SIGNAL_PATHS.get(request.path.rstrip("/"), "") or "OTLP"
        self.receiver.refusals.warn(reason, request.peer, signal, message)
        return _status(
            http_status,
            code,
            message,
            is_json,
            retry_after_s=retry_after_s,
            close=close,
            extra=extra,
        )


def _over(length: int, limit: int, is_json: bool) -> str:
    return f"a body of {mib(length)} is over the {mib(limit)} limit ({limit_key(is_json)})"


def _status(
    http_status: int,
    code: int,
    message: str,
    is_json: bool,
    *,
    retry_after_s: float | None = None,
    close: bool = False,
    extra: Sequence[tuple[str, str]] = (),
) -> Response:
    """A google.rpc.Status answer in the request's encoding (the OTLP/HTTP failure body)."""
    bad = http_status == 400  # the OTLP specification's "Bad Data" (`_status_json`)
    if is_json:
        body, ctype = _status_json(code, message, bad_request=bad), _JSON_TYPE
    else:
        body, ctype = _status_bytes(code, message, bad_request=bad), _PROTOBUF_TYPES[0]
    headers = list(extra)
    if retry_after_s is not None:
        headers.append(("Retry-After", str(max(1, round(retry_after_s)))))
    return Response(http_status, body, ctype, tuple(headers), close=close)


class HttpReceiver:
    """OTLP/HTTP + `/healthz` + `/readyz` on `endpoint` (see the module docstring for what a
    request may cost, `httpserver` for what a connection may)."""

    def __init__(
        self,
        endpoint: str,
        accept: Accept,
        *,
        accept_logs: Accept | None = None,
        accept_metrics: Accept | None = None,
        on_oversize: Oversize | None = None,
        max_body_bytes: int = 20 * 1024 * 1024,
        max_json_bytes: int = 4 * 1024 * 1024,
        ready: Callable[[], tuple[bool, str]] = lambda: (True, ""),
        on_rejection: Callable[[str], None] = lambda reason: None,
        tls: TlsFiles | None = None,
        token: TokenCheck | None = None,
        workers: int = 32,
        max_connections: int = 4096,
        max_per_peer: int = 1024,
        header_timeout_s: float = 5.0,
        body_timeout_s: float = 30.0,
        max_concurrent_decodes: int = 2,
        decode_wait_s: float = 5.0,
    ) -> None:
        self.endpoint = endpoint
        self.accept = accept
        self.accepts: dict[str, Accept | None] = {
            "traces": accept,
            "logs": accept_logs,
            "metrics": accept_metrics,
        }
        self.on_oversize = on_oversize
        self.refusals = RefusalLog()
        self.max_body_bytes = max_body_bytes
        self.max_json_bytes = min(max_json_bytes, max_body_bytes)
        self.ready = ready
        self.count_rejection = on_rejection
        self.tls = tls
        self.token = token
        self.workers = workers
        self.max_connections = max_connections
        self.max_per_peer = max_per_peer
        self.header_timeout_s = header_timeout_s
        self.body_timeout_s = body_timeout_s
        self.decodes = DecodeBudget(max_concurrent_decodes)
        self.decode_wait_s = decode_wait_s
        self._server: HttpServer | None = None
        self.port = 0

    @property
    def open_connections(self) -> int:
        return self._server.open_connections if self._server is not None else 0

    def start(self) -> int:
        host, port = parse_host_port(self.endpoint)
        server = HttpServer(
            host,
            port,
            _OtlpApp(self),
            name="http",
            workers=self.workers,
            max_connections=self.max_connections,
            max_per_peer=self.max_per_peer,
            header_timeout_s=self.header_timeout_s,
            body_timeout_s=self.body_timeout_s,
            ssl_context=self.tls.ssl_context() if self.tls is not None else None,
            on_rejection=self.count_rejection,
        )
        try:
            self.port = server.start()
        except ListenError as e:
            raise ListenError(f"OTLP/HTTP receiver: {e}") from None
        self._server = server
        log.info(
            "OTLP/HTTP receiver listening",
            extra={
                "endpoint": f"{host}:{self.port}",
                "paths": "/v1/traces /v1/logs /v1/metrics",
                "tls": "mtls"
                if self.tls and self.tls.client_ca_file
                else "on"
                if self.tls
                else "off",
                "auth": "bearer" if self.token else "off",
                "workers": self.workers,
                "max_connections": self.max_connections,
            },
        )
        return self.port

    def shutdown(self, timeout_s: float) -> bool:
        """Stops accepting connections and closes the open ones (at once: a request in
        flight was held or refused already, so `timeout_s` is not needed)."""
        if self._server is not None:
            self._server.stop()
            self._server = None
        return True
