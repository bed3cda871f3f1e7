"""The OTLP/HTTP receiver: `POST /v1/traces`, `/v1/logs`, `/v1/metrics`, `/healthz` and
`/readyz` (stdlib server).

What it answers is in `receivers` (the table of outcomes). What it spends is bounded here,
because every connection reaches it before any authentication:

- threads: connections are served by a pool of `workers` threads; one accepted while all
  are busy waits in the pool's queue, holding a socket but no thread;
- connections: past `max_connections` open ones, a new connection is closed at once
  (counted as `too_many_connections`);
- time: a request line and its headers must arrive within `header_timeout_s` (counted
  from the connection, or from the last answer on a kept-alive one) and the body within
  `body_timeout_s`; a reaper thread shuts the socket of a connection past its deadline
  (counted as `timeout`), which wakes the worker blocked on it. A client sending half a
  request line therefore holds a pool thread for `header_timeout_s` at most, and 500 of
  them hold `workers` threads, not 500;
- decoding: gunzip and OTLP/JSON conversion run at most `max_concurrent_decodes` at once
  (others wait up to `decode_wait_s`, then get 503 + Retry-After: `decode_busy`), and an
  OTLP/JSON body has its own, lower size cap (`max_json_bytes`), since converting it costs
  about 50x its size.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

from attest_otel.errors import InputError, ListenError
from attest_otel.ingest.gzip import InflatesTooFar, gunzip
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

__all__ = ["HttpReceiver"]

log = logging.getLogger(__name__)

_REAP_EVERY_S = 0.1
_SIGNAL_PATHS = {"/v1/traces": "traces", "/v1/logs": "logs", "/v1/metrics": "metrics"}


def limit_key(is_json: bool) -> str:
    """The setting that raises the limit a body was refused over."""
    return (
        "receivers.http.max_json_body_size_mib"
        if is_json
        else "receivers.http.max_request_body_size_mib"
    )


class _HttpServer(HTTPServer):
    """Accepts on one thread, serves on a bounded pool, reaps connections past deadline."""

    request_queue_size = 128
    receiver: HttpReceiver
    ssl_context: ssl.SSLContext | None = None

    def __init__(self, address: tuple[str, int], workers: int, max_connections: int) -> None:
        super().__init__(address, _Handler)
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="attest-otel-http")
        self.max_connections = max_connections
        self._lock = threading.Lock()
        self._deadlines: dict[Any, float | None] = {}
        self._timed_out: set[int] = set()
        self._stop = threading.Event()
        self._reaper = threading.Thread(
            target=self._reap, name="attest-otel-http-reaper", daemon=True
        )
        self._reaper.start()

    @property
    def open_connections(self) -> int:
        with self._lock:
            return len(self._deadlines)

    def get_request(self) -> tuple[Any, Any]:
        sock, address = super().get_request()
        if self.ssl_context is not None:
            # The handshake happens on a pool thread (see _Handler.setup), so a slow or
            # plaintext client never holds up the accept loop.
            sock = self.ssl_context.wrap_socket(
                sock, server_side=True, do_handshake_on_connect=False
            )
        return sock, address

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._lock:
            full = len(self._deadlines) >= self.max_connections
            if not full:
                self._deadlines[request] = time.monotonic() + self.receiver.header_timeout_s
        if full:
            self.receiver.count_rejection("too_many_connections")
            self.shutdown_request(request)
            return
        try:
            self._pool.submit(self._serve, request, client_address)
        except RuntimeError:  # shutting down
            self._forget(request)
            self.shutdown_request(request)

    def _serve(self, request: Any, client_address: Any) -> None:
        try:
            if not self.timed_out(request):
                self.finish_request(request, client_address)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            self._forget(request)
            self.shutdown_request(request)

    def _forget(self, request: Any) -> None:
        with self._lock:
            self._deadlines.pop(request, None)
            self._timed_out.discard(id(request))

    def deadline(self, request: Any, after_s: float | None) -> None:
        """The connection is closed unless its current phase ends within `after_s` (None:
        no deadline, while we work on a request or write the answer)."""
        with self._lock:
            if request in self._deadlines:
                self._deadlines[request] = None if after_s is None else time.monotonic() + after_s

    def timed_out(self, request: Any) -> bool:
        with self._lock:
            return id(request) in self._timed_out

    def _reap(self) -> None:
        while not self._stop.wait(_REAP_EVERY_S):
            now = time.monotonic()
            with self._lock:
                late = [
                    r
                    for r, d in self._deadlines.items()
                    if d is not None and d <= now and id(r) not in self._timed_out
                ]
                for request in late:
                    self._timed_out.add(id(request))
            for request in late:
                self.receiver.count_rejection("timeout")
                with contextlib.suppress(OSError):  # wakes a thread blocked reading it
                    socket.socket.shutdown(request, socket.SHUT_RDWR)

    def close_all(self) -> None:
        self._stop.set()
        self._reaper.join(2)
        self._pool.shutdown(wait=False, cancel_futures=True)

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("http connection from %s failed", client_address, exc_info=True)


class _Handler(BaseHTTPRequestHandler):
    server: _HttpServer
    protocol_version = "HTTP/1.1"
    server_version = "attest-otel"
    sys_version = ""

    def setup(self) -> None:
        # The handshake is bounded by the header deadline set when the connection came in.
        if isinstance(self.request, ssl.SSLSocket):
            try:
                self.request.do_handshake()
            except (OSError, ssl.SSLError) as e:
                self.server.receiver.count_rejection("tls_handshake")
                log.debug("http: TLS handshake failed: %s", e)
                raise
        super().setup()

    def handle_one_request(self) -> None:
        """Each request line and its headers must arrive within the header timeout (the
        first one counted from the connection, the next from the last answer)."""
        self.server.deadline(self.request, self.server.receiver.header_timeout_s)
        super().handle_one_request()
        if self.server.timed_out(self.request):
            self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("http %s - %s", self.address_string(), format % args)

    def do_GET(self) -> None:
        receiver = self.server.receiver
        path = self.path.split("?", 1)[0]
        if path == "/healthz":
            self._plain(200, b"ok\n")
        elif path == "/readyz":
            ready, why = receiver.ready()
            self._plain(200 if ready else 503, (why or "ready").encode() + b"\n")
        else:
            self._plain(404, b"not found\n")

    def _reject(self, reason: str) -> None:
        """Counted now, said at WARNING with the sender when the answer goes out."""
        self._reason = reason
        self.server.receiver.count_rejection(reason)

    def do_POST(self) -> None:
        receiver = self.server.receiver
        self._reason = ""
        self._signal = _SIGNAL_PATHS.get(self.path.split("?", 1)[0].rstrip("/"), "")
        media = (self.headers.get("Content-Type") or "").split(";", 1)[0].strip().lower()
        is_json = media == _JSON_TYPE
        if receiver.token is not None and not receiver.token.check(
            self.headers.get("Authorization")
        ):
            self._reject("unauthenticated")
            self._status(
                401,
                _CODE_UNAUTHENTICATED,
                "missing or wrong bearer token",
                is_json,
                close=True,
                extra=(("WWW-Authenticate", "Bearer"),),
            )
            return
        length_header = self.headers.get("Content-Length")
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked" or length_header is None:
            self._reject("length_required")
            self._status(
                411, _CODE_INVALID_ARGUMENT, "Content-Length is required", is_json, close=True
            )
            return
        try:
            length = int(length_header)
            if length < 0:
                raise ValueError
        except ValueError:
            self._reject("malformed")
            self._status(400, _CODE_INVALID_ARGUMENT, "bad Content-Length", is_json, close=True)
            return
        limit = receiver.max_json_bytes if is_json else receiver.max_body_bytes
        if length > limit:
            self._reject("too_large")
            close = length > _DISCARD_LIMIT
            message = (
                f"a body of {mib(length)} is over the {mib(limit)} limit ({limit_key(is_json)})"
            )
            if not close:
                self.server.deadline(self.request, receiver.body_timeout_s)
                body = self.rfile.read(length)  # read, not parsed: which traces it names
                self.server.deadline(self.request, None)
                if len(body) == length:
                    gzipped = (self.headers.get("Content-Encoding") or "").strip().lower()
                    self._oversize(body, gzipped == "gzip", is_json, message)
            self._status(413, _CODE_RESOURCE_EXHAUSTED, message, is_json, close=close)
            return
        self.server.deadline(self.request, receiver.body_timeout_s)
        body = self.rfile.read(length)
        self.server.deadline(self.request, None)
        if len(body) < length:  # the body timed out (counted) or the client went away
            if not self.server.timed_out(self.request):
                self._reject("malformed")
            self.close_connection = True
            return
        accept = receiver.accepts.get(self._signal)
        if accept is None:
            self._status(404, _CODE_INVALID_ARGUMENT, f"no OTLP signal at {self.path}", is_json)
            return
        if media not in _PROTOBUF_TYPES and not is_json:
            self._reject("unsupported_media_type")
            self._status(
                415,
                _CODE_INVALID_ARGUMENT,
                f"unsupported content type {media or '(none)'!r}; use "
                "application/x-protobuf or application/json",
                False,
            )
            return
        encoding = (self.headers.get("Content-Encoding") or "identity").strip().lower()
        if encoding not in ("gzip", "identity"):
            self._reject("unsupported_media_type")
            self._status(
                415,
                _CODE_INVALID_ARGUMENT,
                f"unsupported content encoding {encoding!r}; use gzip",
                is_json,
            )
            return
        if encoding == "gzip" or is_json:
            decoded = self._decode(body, encoding == "gzip", is_json, limit)
            if decoded is None:
                return
            body = decoded
        try:
            outcome = accept(body)
        except Exception:
            log.exception("HTTP receiver: accept failed")
            outcome = Outcome("full", "internal error; try again")
        self._reason = outcome.kind
        if outcome.ok:
            payload = b"{}" if is_json else b""
            self._send(200, _JSON_TYPE if is_json else _PROTOBUF_TYPES[0], payload)
        elif outcome.kind == "malformed":
            self._status(400, _CODE_INVALID_ARGUMENT, outcome.message, is_json)
        else:
            self._status(
                503,
                _CODE_UNAVAILABLE,
                outcome.message,
                is_json,
                retry_after_s=outcome.retry_after_s,
            )

    def _decode(self, body: bytes, gzipped: bool, is_json: bool, limit: int) -> bytes | None:
        """Gunzip and OTLP/JSON conversion, at most `max_concurrent_decodes` at once: each
        costs a multiple of the body in memory and CPU, so concurrent large bodies would
        otherwise add up without bound. None: the answer is sent already."""
        receiver = self.server.receiver
        if not receiver.decodes.acquire(timeout=receiver.decode_wait_s):
            self._reject("decode_busy")
            self._status(
                503,
                _CODE_UNAVAILABLE,
                "busy decoding other requests; try again",
                is_json,
                retry_after_s=1.0,
            )
            return None
        try:
            if gzipped:
                try:
                    body = gunzip(body, "request body", limit)
                except InflatesTooFar:
                    self._reject("too_large")
                    message = (
                        f"a body inflating to over the {mib(limit)} limit ({limit_key(is_json)})"
                    )
                    self._oversize(body, True, is_json, message)
                    self._status(413, _CODE_RESOURCE_EXHAUSTED, message, is_json)
                    return None
                except InputError as e:
                    self._reject("malformed")
                    self._status(400, _CODE_INVALID_ARGUMENT, e.problem, is_json)
                    return None
            if is_json:
                try:
                    body = otlp_json_to_protobuf(body, self._signal)
                except ValueError as e:
                    self._reject("malformed")
                    self._status(400, _CODE_INVALID_ARGUMENT, str(e), True)
                    return None
            return body
        finally:
            receiver.decodes.release()

    def _oversize(self, body: bytes, gzipped: bool, is_json: bool, message: str) -> None:
        """Tells the service which traces a body refused for its size names (read up to
        `_DISCARD_LIMIT` inflated; past it, none)."""
        tell = self.server.receiver.on_oversize
        if tell is None or not self._signal:
            return
        try:
            if gzipped:
                body = gunzip(body, "request body", _DISCARD_LIMIT)
            tell(self._signal, body, is_json, message)
        except (InflatesTooFar, InputError):
            return
        except Exception:
            log.exception("HTTP receiver: noting the traces of a refused request failed")

    def _status(
        self,
        http_status: int,
        code: int,
        message: str,
        is_json: bool,
        *,
        retry_after_s: float | None = None,
        close: bool = False,
        extra: Sequence[tuple[str, str]] = (),
    ) -> None:
        if http_status >= 400 and http_status != 404:
            self.server.receiver.refusals.warn(
                getattr(self, "_reason", "") or str(http_status),
                self.address_string(),
                getattr(self, "_signal", "") or "OTLP",
                message,
            )
        if is_json:
            body, ctype = _status_json(code, message), _JSON_TYPE
        else:
            body, ctype = _status_bytes(code, message), _PROTOBUF_TYPES[0]
        headers = list(extra)
        if retry_after_s is not None:
            headers.append(("Retry-After", str(max(1, round(retry_after_s)))))
        self._send(http_status, ctype, body, headers, close=close)

    def _plain(self, status: int, body: bytes) -> None:
        self._send(status, "text/plain; charset=utf-8", body)

    def _send(
        self,
        status: int,
        ctype: str,
        body: bytes,
        extra: Sequence[tuple[str, str]] = (),
        *,
        close: bool = False,
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for key, value in extra:
            self.send_header(key, value)
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(body)


class HttpReceiver:
    """OTLP/HTTP + `/healthz` + `/readyz` on `endpoint` (see the module docstring for what a
    connection may cost)."""

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
        max_connections: int = 256,
        header_timeout_s: float = 10.0,
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
        self.header_timeout_s = header_timeout_s
        self.body_timeout_s = body_timeout_s
        self.decodes = threading.BoundedSemaphore(max_concurrent_decodes)
        self.decode_wait_s = decode_wait_s
        self._server: _HttpServer | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    @property
    def open_connections(self) -> int:
        return self._server.open_connections if self._server is not None else 0

    def start(self) -> int:
        host, port = parse_host_port(self.endpoint)
        try:
            server = _HttpServer((host, port), self.workers, self.max_connections)
        except OSError as e:
            raise ListenError(
                f"OTLP/HTTP receiver: cannot listen on {self.endpoint}: {e.strerror or e}"
            ) from None
        server.receiver = self
        if self.tls is not None:
            server.ssl_context = self.tls.ssl_context()
        self.port = int(server.server_address[1])
        thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.2},
            name="attest-otel-http",
            daemon=True,
        )
        thread.start()
        self._server = server
        self._thread = thread
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

    def stop(self) -> None:
        """Stops accepting connections (requests already being read still get an answer)."""
        server = self._server
        if server is not None:
            server.shutdown()
            server.server_close()
            server.close_all()
            self._server = None
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None
