"""Builders for the sidecar tests: the sidecar as a subprocess, and spans from the real SDK.

Agent runs follow the current GenAI conventions (docs/dialects.md): an `invoke_agent` span
with `gen_ai.operation.name=invoke_agent` and `gen_ai.agent.name`, and child `execute_tool`
spans with `gen_ai.tool.name` and `gen_ai.tool.call.result`, or status ERROR when the tool
failed. Plain spans are an HTTP server span with a DB child.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode, Tracer

REPO = Path(__file__).resolve().parents[2]

FAST_CONFIG: dict[str, Any] = {
    "buffer": {"grace_s": 0.3, "idle_timeout_s": 1.5, "tick_s": 0.02},
    "forward": {
        "initial_backoff_s": 0.1,
        "max_backoff_s": 0.5,
        "retry_after_s": 1.0,
        "timeout_s": 3.0,
    },
    "telemetry": {"metrics": False, "timeout_s": 2.0},
    "grading": {"processes": 0},
    "shutdown": {"deadline_s": 10.0},
}
"""Short timers so the whole module stays fast; the defaults are exercised in the config
tests instead."""


_RESERVED = (20000, 32000)
"""Ports the sidecar tests hand out, below the kernel's ephemeral range (32768-60999 by
default): a port the kernel picked can be taken, between a `kill -9` and the restart that
reuses it, by any process's outgoing connection, and was (`test_kill_9_with_buffer_dir_loses_
no_acknowledged_span`, 'Address already in use'). Each pytest-xdist worker takes its own
slice, in order, so no two tests of a run are given one port."""


def _slice() -> range:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:]) if worker[2:].isdigit() else 0
    count = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    width = (_RESERVED[1] - _RESERVED[0]) // count
    start = _RESERVED[0] + index * width
    return range(start, start + width)


_NEXT = iter(_slice())


def free_port() -> int:
    """A port free now, of this worker's slice (`_RESERVED`), never handed out before."""
    for port in _NEXT:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError(f"no free port left in {_slice()}")


def merged(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = json.loads(json.dumps(base))
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = value
    return out


@dataclass
class Sidecar:
    """`python -m attest_otel.cli serve ...` on free loopback ports."""

    tmp: Path
    forward: str
    config: dict[str, Any] = field(default_factory=dict)
    extra_args: Sequence[str] = ()
    grpc_port: int = 0
    http_port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None
    ca_file: Path | None = None
    """Set when the receivers speak TLS: the CA their certificate chains to."""
    client_cert: tuple[Path, Path] | None = None
    """(cert, key) to present when the receivers require client certificates."""
    env: dict[str, str] = field(default_factory=dict)
    """Extra environment (e.g. ANTHROPIC_BASE_URL of the fake Messages API)."""

    def start(self, *, wait: bool = True) -> Sidecar:
        # Ports of this worker's own slice, below the kernel's ephemeral range (`free_port`):
        # nothing else picks them, so a restart can reuse them.
        if not self.grpc_port:
            self.grpc_port, self.http_port = free_port(), free_port()
        cfg = self.tmp / "sidecar.yaml"
        cfg.write_text(yaml.safe_dump(merged(FAST_CONFIG, self.config)))
        self.log_path = self.tmp / f"sidecar-{int(time.time() * 1000)}.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "ANTHROPIC"))}
        env["PYTHONUNBUFFERED"] = "1"
        env.update(self.env)
        args = [
            sys.executable,
            "-m",
            "attest_otel.cli",
            "serve",
            "--config",
            str(cfg),
            "--grpc-endpoint",
            f"127.0.0.1:{self.grpc_port}",
            "--http-endpoint",
            f"127.0.0.1:{self.http_port}",
            "--forward-endpoint",
            self.forward,
            "--store",
            str(self.tmp / "store.db"),
            *self.extra_args,
        ]
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(args, cwd=REPO, env=env, stdout=log, stderr=log)
        if wait:
            self.wait_ready()
        return self

    @property
    def grpc_endpoint(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def http_url(self) -> str:
        scheme = "https" if self.ca_file else "http"
        return f"{scheme}://127.0.0.1:{self.http_port}"

    def ssl_context(self) -> ssl.SSLContext | None:
        if self.ca_file is None:
            return None
        context = ssl.create_default_context(cafile=str(self.ca_file))
        if self.client_cert is not None:
            context.load_cert_chain(str(self.client_cert[0]), str(self.client_cert[1]))
        return context

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path and self.log_path.exists() else ""

    def wait_ready(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"sidecar exited {self.proc.returncode}:\n{self.log()}")
            try:
                with urllib.request.urlopen(
                    f"{self.http_url}/readyz", timeout=1, context=self.ssl_context()
                ) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.05)
        raise AssertionError(f"sidecar not ready after {timeout}s:\n{self.log()}")

    def terminate(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait; returns the exit code."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
            raise AssertionError(f"sidecar did not stop on SIGTERM:\n{self.log()}") from None

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(5)

    def stop_quietly(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)


# --- spans from the OTel SDK -----------------------------------------------------------------


def provider(exporter: SpanExporter, service: str = "agent-service") -> TracerProvider:
    tp = TracerProvider(resource=Resource.create({"service.name": service}))
    tp.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=50))
    return tp


def agent_run(
    tracer: Tracer,
    *,
    agent: str = "billing_agent",
    tools: Sequence[tuple[str, str | None]] = (("lookup_invoice", "invoice 42: paid"),),
    answer: str = "Your invoice is paid.",
) -> tuple[str, list[str]]:
    """One run: `tools` are (name, result); a None result is a tool that failed.

    Returns (trace id hex, span ids hex of every span made)."""
    ids: list[str] = []
    with tracer.start_as_current_span(
        f"invoke_agent {agent}",
        kind=SpanKind.INTERNAL,
        attributes={
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": agent,
            "gen_ai.provider.name": "anthropic",
            "gen_ai.input.messages": json.dumps(
                [{"role": "user", "parts": [{"type": "text", "content": "Is invoice 42 paid?"}]}]
            ),
            "gen_ai.output.messages": json.dumps(
                [{"role": "assistant", "parts": [{"type": "text", "content": answer}]}]
            ),
        },
    ) as root:
        ctx = root.get_span_context()
        for i, (tool, result) in enumerate(tools):
            attrs: dict[str, Any] = {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": tool,
                "gen_ai.tool.call.id": f"call_{i}",
                "gen_ai.tool.call.arguments": json.dumps({"invoice": 42}),
            }
            if result is not None:
                attrs["gen_ai.tool.call.result"] = result
            with tracer.start_as_current_span(f"execute_tool {tool}", attributes=attrs) as span:
                if result is None:
                    span.set_status(Status(StatusCode.ERROR, f"{tool} failed: timeout"))
                ids.append(format(span.get_span_context().span_id, "016x"))
        ids.append(format(ctx.span_id, "016x"))
    return format(ctx.trace_id, "032x"), ids


def plain_request(tracer: Tracer, n_db: int = 2) -> tuple[str, list[str]]:
    ids: list[str] = []
    with tracer.start_as_current_span(
        "GET /orders/{id}",
        kind=SpanKind.SERVER,
        attributes={
            "http.request.method": "GET",
            "http.route": "/orders/{id}",
            "user_agent.original": "curl/8.5",
        },
    ) as root:
        for _ in range(n_db):
            with tracer.start_as_current_span(
                "SELECT orders",
                kind=SpanKind.CLIENT,
                attributes={"db.system.name": "postgresql", "db.query.text": "SELECT 1"},
            ) as span:
                ids.append(format(span.get_span_context().span_id, "016x"))
        ids.append(format(root.get_span_context().span_id, "016x"))
    return format(root.get_span_context().trace_id, "032x"), ids


def events_by_span(spans: Sequence[Any]) -> dict[str, list[Any]]:
    return {s.span_id.hex(): list(s.events) for s in spans}


def attr(kvs: Sequence[Any], key: str) -> Any:
    for kv in kvs:
        if kv.key == key:
            which = kv.value.WhichOneof("value")
            return getattr(kv.value, which) if which else None
    return None
