"""One HTTP/1.1 server for every port we serve (OTLP/HTTP, `/metrics`): an event loop that
holds idle connections cheaply, and a bounded pool for the work.

Every connection reaches the server before any authentication, so what one may cost is
bounded here, for every path alike:

- a connection is a coroutine and a socket buffer, not a thread: slow or half-open clients
  cost memory in the kilobytes each, and the pool threads only ever see whole requests.
  So a few hundred slow sockets do not delay a sender whose request is complete;
- time: the request line and headers must arrive within `header_timeout_s` (counted from
  the connection, or from the last answer on a kept-alive one), the body within
  `body_timeout_s`, and a client must read our answer within `body_timeout_s`; past that
  the connection is closed (counted as `timeout`);
- connections: `max_connections` open at once in all, `max_per_peer` from one address.
  At either cap the connection that has waited longest for its headers (of that peer, at
  the peer's cap) is closed to make room (`idle_evicted`): a flood of idle sockets pushes
  out idle sockets, not senders. Only when every candidate is busy with a request is the
  new connection closed at once (`too_many_connections`);
- size: request line and headers at most `max_head_bytes` (431 past it); the body's limit
  is the application's (`App.head` says how much to read before anything is read).

The application is two calls: `head` on the loop (cheap checks from the headers: token,
length, type), `handle` on a pool thread with the whole body.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import resource
import ssl
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol

from attest_otel.errors import ListenError

__all__ = ["App", "HttpServer", "Request", "Response"]

log = logging.getLogger(__name__)

_REASONS = {
    100: "Continue",
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    411: "Length Required",
    413: "Content Too Large",
    415: "Unsupported Media Type",
    429: "Too Many Requests",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


@dataclass(slots=True)
class Request:
    method: str
    path: str
    """Without the query string."""
    headers: Mapping[str, str]
    """Lower-case names; a repeated header keeps its last value."""
    peer: str
    """The client's address (no port): the key of per-peer limits."""
    body: bytes = b""


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    body: bytes = b""
    content_type: str = "text/plain; charset=utf-8"
    headers: Sequence[tuple[str, str]] = ()
    close: bool = False
    discard: int = 0
    """Answered from the headers alone: read and drop this many body bytes first, so the
    answer reaches the client on a healthy kept-alive connection."""


class App(Protocol):
    def head(self, request: Request) -> Response | int:
        """On the event loop, from the headers alone: an answer, or how many body bytes
        to read before `handle` is called. Must not block."""

    def handle(self, request: Request) -> Response:
        """On a pool thread, with the whole body."""


@dataclass(eq=False)
class _Conn:
    peer: str
    writer: asyncio.StreamWriter
    waiting_since: float | None = field(default_factory=time.monotonic)
    """When it began waiting for a request's headers; None while a request is worked on."""
    evicted: bool = False


class HttpServer:
    """`app` on `host:port` (port 0: the kernel picks; see `.port` after `start`)."""

    def __init__(
        self,
        host: str,
        port: int,
        app: App,
        *,
        name: str = "http",
        workers: int = 8,
        max_connections: int = 4096,
        max_per_peer: int = 1024,
        header_timeout_s: float = 5.0,
        body_timeout_s: float = 30.0,
        max_head_bytes: int = 64 * 1024,
        ssl_context: ssl.SSLContext | None = None,
        on_rejection: Callable[[str], None] = lambda reason: None,
    ) -> None:
        self.host = host
        self.port = port
        self.app = app
        self.name = name
        self.workers = workers
        self.max_connections = max_connections
        self.max_per_peer = max_per_peer
        self.header_timeout_s = header_timeout_s
        self.body_timeout_s = body_timeout_s
        self.max_head_bytes = max_head_bytes
        self.ssl_context = ssl_context
        self.count_rejection = on_rejection
        self._conns: set[_Conn] = set()
        self._busy = 0
        """Requests handed to the pool and not answered yet."""
        self._per_peer: dict[str, int] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.base_events.Server | None = None
        self._thread: threading.Thread | None = None
        self._pool: ThreadPoolExecutor | None = None

    @property
    def open_connections(self) -> int:
        return len(self._conns)

    def start(self) -> int:
        self.max_connections = _room_for(self.max_connections)
        loop = asyncio.new_event_loop()
        # A client that goes away mid-handshake or mid-answer is routine here, not an error
        # for the operator's log: asyncio's default handler would print each one.
        loop.set_exception_handler(
            lambda _loop, context: log.debug("%s: %s", self.name, context.get("message"))
        )
        self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix=f"attest-otel-{self.name}")
        try:
            self._server = loop.run_until_complete(
                asyncio.start_server(
                    self._connection,
                    self.host,
                    self.port,
                    limit=self.max_head_bytes,
                    backlog=1024,
                    reuse_address=True,
                )
            )
        except OSError as e:
            loop.close()
            self._pool.shutdown(wait=False)
            raise ListenError(
                f"cannot listen on {self.host}:{self.port}: {e.strerror or e}"
            ) from None
        self.port = int(self._server.sockets[0].getsockname()[1])
        self._loop = loop
        self._thread = threading.Thread(
            target=loop.run_forever, name=f"attest-otel-{self.name}-loop", daemon=True
        )
        self._thread.start()
        return self.port

    def stop(self, grace_s: float = 5.0) -> None:
        """Stops accepting, lets requests being worked on send their answer (up to
        `grace_s`: an accepted request that is not answered is sent again), then closes
        every connection."""
        loop, server = self._loop, self._server
        if loop is None or server is None:
            return

        async def close() -> None:
            server.close()
            deadline = loop.time() + grace_s
            while self._busy and loop.time() < deadline:
                await asyncio.sleep(0.02)
            for conn in list(self._conns):
                conn.writer.close()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(server.wait_closed(), 2)

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(close(), loop).result(grace_s + 5)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(5)
        if not loop.is_running():
            loop.close()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        self._loop = self._server = self._thread = self._pool = None

    # --- one connection ------------------------------------------------------------------------

    def _admit(self, conn: _Conn) -> bool:
        """Room for `conn`, made by closing the connection idle longest (of its own peer
        when that peer is at its cap); False when every candidate is busy."""
        at_peer_cap = self._per_peer.get(conn.peer, 0) >= self.max_per_peer
        if at_peer_cap and not self._evict_idle(lambda c: c.peer == conn.peer):
            return False
        if len(self._conns) >= self.max_connections and not self._evict_idle(lambda c: True):
            return False
        self._conns.add(conn)
        self._per_peer[conn.peer] = self._per_peer.get(conn.peer, 0) + 1
        return True

    def _evict_idle(self, among: Callable[[_Conn], bool]) -> bool:
        idle = [c for c in self._conns if c.waiting_since is not None and among(c)]
        if not idle:
            return False
        oldest = min(idle, key=lambda c: c.waiting_since or 0.0)
        self.count_rejection("idle_evicted")
        oldest.evicted = True
        oldest.writer.close()
        self._forget(oldest)
        return True

    def _forget(self, conn: _Conn) -> None:
        if conn in self._conns:
            self._conns.discard(conn)
            left = self._per_peer.get(conn.peer, 1) - 1
            if left > 0:
                self._per_peer[conn.peer] = left
            else:
                self._per_peer.pop(conn.peer, None)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peername = writer.get_extra_info("peername")
        peer = str(peername[0]) if isinstance(peername, tuple) and peername else "?"
        conn = _Conn(peer, writer)
        if not self._admit(conn):
            self.count_rejection("too_many_connections")
            writer.close()
            return
        try:
            if self.ssl_context is not None:
                # Here rather than in start_server, so a failed handshake is counted (and
                # not logged by asyncio as an error) and bounded by the header deadline.
                try:
                    await writer.start_tls(
                        self.ssl_context, ssl_handshake_timeout=self.header_timeout_s
                    )
                except (OSError, ssl.SSLError, TimeoutError, ConnectionError) as e:
                    self.count_rejection("tls_handshake")
                    log.debug("%s: TLS handshake with %s failed: %s", self.name, peer, e)
                    return
            while await self._one_request(conn, reader, writer):
                conn.waiting_since = time.monotonic()
        except (ConnectionError, OSError, asyncio.IncompleteReadError):
            pass
        except Exception:
            log.debug("%s: connection from %s failed", self.name, peer, exc_info=True)
        finally:
            self._forget(conn)
            writer.close()

    async def _one_request(
        self, conn: _Conn, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        """Serves one request; False when the connection is done."""
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.header_timeout_s)
        except TimeoutError:
            if not conn.evicted:  # counted once: as evicted, or here
                self.count_rejection("timeout")
            return False
        except asyncio.IncompleteReadError as e:
            if e.partial.strip() and not conn.evicted:
                self.count_rejection("malformed")
            return False
        except asyncio.LimitOverrunError:
            self.count_rejection("malformed")
            await self._write(writer, Response(431, b"request head too large\n", close=True))
            return False
        conn.waiting_since = None
        request, keep_alive = _parse_head(head, conn.peer)
        if request is None:
            self.count_rejection("malformed")
            await self._write(writer, Response(400, b"malformed request\n", close=True))
            return False
        decision = self.app.head(request)
        if isinstance(decision, Response):
            if decision.discard and not await self._read_body(reader, decision.discard):
                return False
            await self._write(writer, decision)
            return keep_alive and not decision.close
        if decision:
            if request.headers.get("expect", "").lower() == "100-continue":
                writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            body = await self._read_body(reader, decision)
            if body is None:
                return False
            request.body = body
        loop = asyncio.get_running_loop()
        self._busy += 1
        try:
            response = await loop.run_in_executor(self._pool, self.app.handle, request)
            await self._write(writer, response)
        finally:
            self._busy -= 1
        return keep_alive and not response.close

    async def _read_body(self, reader: asyncio.StreamReader, length: int) -> bytes | None:
        try:
            return await asyncio.wait_for(reader.readexactly(length), self.body_timeout_s)
        except TimeoutError:
            self.count_rejection("timeout")
        except asyncio.IncompleteReadError:
            self.count_rejection("malformed")
        return None

    async def _write(self, writer: asyncio.StreamWriter, response: Response) -> None:
        lines = [
            f"HTTP/1.1 {response.status} {_REASONS.get(response.status, 'Status')}",
            "Server: attest-otel",
            f"Content-Type: {response.content_type}",
            f"Content-Length: {len(response.body)}",
            *(f"{k}: {v}" for k, v in response.headers),
        ]
        if response.close:
            lines.append("Connection: close")
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + response.body)
        try:
            await asyncio.wait_for(writer.drain(), self.body_timeout_s)
        except TimeoutError:
            self.count_rejection("timeout")
            raise ConnectionError("client does not read its answer") from None


def _room_for(connections: int) -> int:
    """`connections`, or fewer when the process may not open that many files: the soft
    limit is raised to the hard one first. Past the limit `accept` fails and the loop stops
    accepting for a second, which would shut out everyone, not only the newest."""
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard == resource.RLIM_INFINITY or hard > soft:
            wanted = connections + 1024 if hard == resource.RLIM_INFINITY else hard
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(wanted, hard), hard))
            soft = min(wanted, hard)
    except (OSError, ValueError):
        return connections
    return max(16, min(connections, soft // 2))


def _parse_head(head: bytes, peer: str) -> tuple[Request | None, bool]:
    """(the request, whether the connection may be kept alive); None: not HTTP/1.x."""
    try:
        text = head.decode("latin-1")
        request_line, *header_lines = text[:-4].split("\r\n")
        method, target, version = request_line.split(" ")
    except ValueError:
        return None, False
    if not version.startswith("HTTP/1.") or not method.isalpha():
        return None, False
    headers: dict[str, str] = {}
    for line in header_lines:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            return None, False
        headers[name.lower()] = value.strip()
    connection = headers.get("connection", "").lower()
    keep_alive = connection != "close" if version == "HTTP/1.1" else connection == "keep-alive"
    path = target.split("?", 1)[0]
    return Request(method.upper(), path, headers, peer), keep_alive
