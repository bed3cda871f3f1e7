"""A local stand-in for Anthropic's Messages API, so tests drive the real SDK over real HTTP.

The server answers `POST /v1/messages` in the API's response shape. By default it returns a
verdict through the tool the request forced; a test scripts anything else by setting
`responder`, a function from the request JSON to a `Reply` (status, body, delay, headers).
Every request is recorded with its arrival and finish times, so tests can assert on what the
SDK sent, how often, and how many calls overlapped.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = [
    "Exchange",
    "MessagesServer",
    "Reply",
    "Responder",
    "api_error",
    "default_responder",
    "message",
    "verdict",
]

_ids = itertools.count(1)


@dataclass(frozen=True)
class Reply:
    status: int = 200
    body: Any = None
    delay_s: float = 0.0
    headers: Mapping[str, str] = field(default_factory=dict)


Responder = Callable[[dict[str, Any]], Reply]


@dataclass
class Exchange:
    request: dict[str, Any]
    arrived_s: float
    finished_s: float | None = None


def forced_tool(request: Mapping[str, Any]) -> str:
    choice = request.get("tool_choice") or {}
    return str(choice.get("name", "unknown_tool"))


def message(
    request: Mapping[str, Any],
    *,
    tool_input: Mapping[str, Any] | None = None,
    content: list[dict[str, Any]] | None = None,
    stop_reason: str = "tool_use",
) -> dict[str, Any]:
    """A Messages API response: a tool_use block for the forced tool, unless `content` is given."""
    if content is None:
        content = [
            {
                "type": "tool_use",
                "id": f"toolu_fake_{next(_ids)}",
                "name": forced_tool(request),
                "input": dict(tool_input or {}),
            }
        ]
    return {
        "id": f"msg_fake_{next(_ids)}",
        "type": "message",
        "role": "assistant",
        "model": request.get("model", "unknown"),
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {
            "input_tokens": 100,
            "output_tokens": 20,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    }


def api_error(status: int, message_text: str, error_type: str = "api_error") -> Reply:
    body = {"type": "error", "error": {"type": error_type, "message": message_text}}
    return Reply(status=status, body=body)


def verdict(tool_input: Mapping[str, Any], *, delay_s: float = 0.0) -> Responder:
    """A responder that answers every request with this tool input."""

    def respond(request: dict[str, Any]) -> Reply:
        return Reply(body=message(request, tool_input=tool_input), delay_s=delay_s)

    return respond


def default_responder(request: dict[str, Any]) -> Reply:
    if forced_tool(request) == "record_choice_verdict":
        tool_input = {"appropriate": True, "reason": "The tool fits the task."}
    else:
        tool_input = {"outcome": "acknowledged", "reason": "The answer says the call failed."}
    return Reply(body=message(request, tool_input=tool_input))


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length)
        if self.path.split("?")[0] != "/v1/messages":
            self._send(api_error(404, f"no route {self.path}", "not_found_error"))
            return
        request = json.loads(raw or b"{}")
        owner = self.server.owner
        exchange = owner._arrive(request)
        try:
            reply = owner.responder(request)
            if reply.delay_s:
                owner._stopping.wait(reply.delay_s)
            self._send(reply)
        finally:
            owner._finish(exchange)

    def _send(self, reply: Reply) -> None:
        payload = json.dumps(reply.body).encode() if reply.body is not None else b""
        try:
            self.send_response(reply.status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(payload)))
            self.send_header("request-id", f"req_fake_{next(_ids)}")
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(payload)
        except OSError:
            pass  # the client gave up (a timeout test); nothing to tell it

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: MessagesServer


class MessagesServer:
    """Start with `start()` (binds 127.0.0.1 on a free port), stop with `stop()`."""

    def __init__(self) -> None:
        self.responder: Responder = default_responder
        self.exchanges: list[Exchange] = []
        self.max_in_flight = 0
        self._in_flight = 0
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        if self._httpd is None:
            raise RuntimeError("the fake Messages server is not started")
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def requests(self) -> list[dict[str, Any]]:
        with self._lock:
            return [exchange.request for exchange in self.exchanges]

    @property
    def calls(self) -> int:
        with self._lock:
            return len(self.exchanges)

    def start(self) -> MessagesServer:
        self._httpd = _Server(("127.0.0.1", 0), _Handler)
        self._httpd.owner = self
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.01},
            name="fake-messages-server",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # releases handlers sleeping in a delayed reply
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _arrive(self, request: dict[str, Any]) -> Exchange:
        exchange = Exchange(request=request, arrived_s=time.monotonic())
        with self._lock:
            self.exchanges.append(exchange)
            self._in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self._in_flight)
        return exchange

    def _finish(self, exchange: Exchange) -> None:
        with self._lock:
            self._in_flight -= 1
            exchange.finished_s = time.monotonic()
