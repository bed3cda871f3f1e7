"""A small fake OpenAI Chat Completions API on a free loopback port.

`POST /v1/chat/completions` answers by the turn the conversation is at (the tool messages
already in it): first it asks for `lookup_order`, then for `charge_card`, then gives the
final answer. The answer claims success whatever the tools returned, so a run whose
charge_card returned an error is one the grader must fail (`unrecovered`), and one where it
worked passes. `delay_s` makes the final answer slow (a model that thinks).
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ANSWER = "Done! I charged 19.50 EUR to the customer's card for order 42."
TURNS: list[tuple[str, dict[str, Any]]] = [
    ("lookup_order", {"order_id": 42}),
    ("charge_card", {"order_id": 42, "amount": 19.5}),
]


class FakeChat:
    def __init__(self) -> None:
        self.delay_s = 0.0
        self.calls = 0
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                request = json.loads(self.rfile.read(length))
                body = json.dumps(fake.answer(request)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def start(self) -> FakeChat:
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        self.calls += 1
        done = sum(1 for m in request.get("messages", []) if m.get("role") == "tool")
        message: dict[str, Any] = {"role": "assistant", "content": None}
        finish = "tool_calls"
        if done < len(TURNS):
            name, args = TURNS[done]
            message["tool_calls"] = [
                {
                    "id": f"call_{done + 1}",
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(args)},
                }
            ]
        else:
            if self.delay_s:
                time.sleep(self.delay_s)
            message["content"] = ANSWER
            finish = "stop"
        return {
            "id": f"chatcmpl-{self.calls}",
            "object": "chat.completion",
            "created": 1767225600,
            "model": request.get("model", "gpt-4o-mini"),
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 20, "completion_tokens": 10, "total_tokens": 30},
        }
