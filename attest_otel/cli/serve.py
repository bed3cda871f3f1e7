"""`attest-otel serve`: the sidecar's command, its flags and its logging.

Kept apart from `cli.py`, which registers it, because the sidecar's start-up and shutdown
(signals, deadlines) are a job of their own. `grade --trace-id` reads the sidecar's store
through `sources.store_source`, like every other trace source.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import click

from attest_otel.content import CONTENT_MODES
from attest_otel.sidecar.config import PROTOCOLS, default

__all__ = ["LogfmtFormatter", "serve", "setup_logging"]

SWITCH_INTERVAL_S = 0.001
"""How long a thread of `serve` keeps the interpreter before another may take it (Python's
default is 5 ms). The receivers' threads answer small requests between the long runs of
Python that cutting an agent request or finishing a graded batch takes; a shorter interval
lowers a plain request's p99 at no cost in agent throughput (docs/measurements.md, "Thread
switch interval of `serve`")."""

_STANDARD_RECORD_KEYS = frozenset(
    vars(logging.LogRecord("", 0, "", 0, "", None, None)).keys() | {"message", "asctime"}
)


class LogfmtFormatter(logging.Formatter):
    """`ts=... level=... logger=... msg="..." key=value ...`: one line per record, with the
    `extra={...}` fields a log pipeline can index, and the traceback on the next lines."""

    def format(self, record: logging.LogRecord) -> str:
        parts = [
            f"ts={time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(record.created))}"
            f".{int(record.msecs):03d}Z",
            f"level={record.levelname.lower()}",
            f"logger={record.name}",
            f"msg={_quote(record.getMessage())}",
        ]
        for key, value in vars(record).items():
            if key not in _STANDARD_RECORD_KEYS and not key.startswith("_"):
                parts.append(f"{key}={_quote(value)}")
        line = " ".join(parts)
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def _quote(value: Any) -> str:
    text = str(value)
    if text and all(c.isalnum() or c in "._-:/@+" for c in text):
        return text
    return json.dumps(text, ensure_ascii=False)


def _text(path: Path | None) -> str | None:
    return str(path) if path else None


def setup_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(LogfmtFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # The SDK exporters log every transient failure at WARNING; ours already say it once.
    logging.getLogger("opentelemetry").setLevel(max(logging.ERROR, root.level))
    # The connection pool logs each failed reconnect; the store's writer says it once.
    logging.getLogger("psycopg.pool").setLevel(max(logging.ERROR, root.level))


@click.command()
@click.option(
    "--config",
    "config_path",
    type=click.Path(path_type=Path),
    help="Sidecar YAML config (flags override it; it overrides the defaults).",
)
@click.option(
    "--grpc-endpoint", help=f"OTLP/gRPC listen address [{default('receivers.grpc.endpoint')}]."
)
@click.option(
    "--http-endpoint", help=f"OTLP/HTTP listen address [{default('receivers.http.endpoint')}]."
)
@click.option(
    "--forward-endpoint",
    help="Where spans go next (default: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT / "
    "OTEL_EXPORTER_OTLP_ENDPOINT).",
)
@click.option(
    "--forward-protocol",
    type=click.Choice(PROTOCOLS),
    help="OTLP protocol of the next hop (default: OTEL_EXPORTER_OTLP_PROTOCOL, "
    f"else {default('forward.protocol')}).",
)
@click.option(
    "--store",
    "store",
    metavar="PATH|URL",
    help="Trace and grade store: a SQLite file [$XDG_DATA_HOME/attest-otel/store.db], "
    "or a fleet's shared postgresql://USER:PASSWORD@HOST/DB.",
)
@click.option(
    "--policy",
    type=click.Path(path_type=Path),
    help="Tool-use policy file (allowed tools and fallbacks per agent).",
)
@click.option("--prometheus", help="Serve /metrics on HOST:PORT.")
@click.option(
    "--buffer-dir",
    type=click.Path(path_type=Path),
    help="Write held and queued spans here before answering; replayed on start.",
)
@click.option(
    "--tls-cert-file",
    type=click.Path(path_type=Path),
    help="Receivers' TLS certificate (PEM); with --tls-key-file turns TLS on.",
)
@click.option(
    "--tls-key-file", type=click.Path(path_type=Path), help="Receivers' TLS private key (PEM)."
)
@click.option(
    "--tls-client-ca-file",
    type=click.Path(path_type=Path),
    help="Require client certificates signed by this CA (mTLS).",
)
@click.option(
    "--auth-token-file",
    type=click.Path(path_type=Path),
    help="File holding the bearer token senders must give (Authorization: Bearer <token>).",
)
@click.option(
    "--forward-ca-file",
    type=click.Path(path_type=Path),
    help="CA (PEM) the next hop's certificate is checked against; turns TLS on.",
)
@click.option(
    "--forward-cert-file",
    type=click.Path(path_type=Path),
    help="Client certificate (PEM) for mTLS to the next hop.",
)
@click.option(
    "--forward-key-file",
    type=click.Path(path_type=Path),
    help="Client private key (PEM) for mTLS to the next hop.",
)
@click.option(
    "--content",
    type=click.Choice(CONTENT_MODES),
    help="Run content (tool outputs, answers, evidence) in events, logs and model "
    f"prompts [{default('content.mode')}].",
)
@click.option(
    "--log-level",
    default="info",
    show_default=True,
    type=click.Choice(["debug", "info", "warning", "error"]),
)
def serve(
    config_path: Path | None,
    grpc_endpoint: str | None,
    http_endpoint: str | None,
    forward_endpoint: str | None,
    forward_protocol: str | None,
    store: str | None,
    policy: Path | None,
    prometheus: str | None,
    buffer_dir: Path | None,
    tls_cert_file: Path | None,
    tls_key_file: Path | None,
    tls_client_ca_file: Path | None,
    auth_token_file: Path | None,
    forward_ca_file: Path | None,
    forward_cert_file: Path | None,
    forward_key_file: Path | None,
    content: str | None,
    log_level: str,
) -> None:
    """Grade agent runs in an OTLP pipeline: receive, hold per trace, grade, annotate, forward.

    The config, the policy file it names and the model settings are all checked before
    anything listens: a problem in any of them is one line and exit 2. Values in the files
    may be ${env:NAME} or ${env:NAME:-default}. SIGTERM or Ctrl-C stops accepting, grades
    and forwards what is held (within shutdown.deadline_s), flushes and exits 0.
    """
    from attest_otel.sidecar.config import config_lines, load_service_config
    from attest_otel.sidecar.preflight import forward_problem
    from attest_otel.sidecar.service import build_service  # the grading stack: serve only

    setup_logging(log_level)
    config = load_service_config(
        config_path,
        {
            "grpc_endpoint": grpc_endpoint,
            "http_endpoint": http_endpoint,
            "forward_endpoint": forward_endpoint,
            "forward_protocol": forward_protocol,
            "store": store,
            "policy": str(policy) if policy else None,
            "prometheus": prometheus,
            "buffer_dir": str(buffer_dir) if buffer_dir else None,
            "tls_cert_file": _text(tls_cert_file),
            "tls_key_file": _text(tls_key_file),
            "tls_client_ca_file": _text(tls_client_ca_file),
            "auth_token_file": _text(auth_token_file),
            "forward_ca_file": _text(forward_ca_file),
            "forward_cert_file": _text(forward_cert_file),
            "forward_key_file": _text(forward_key_file),
            "content": content,
        },
    )
    # Read once, as the forward headers: the SDK's OTLP/HTTP exporters would add it to every
    # request of the sidecar's telemetry, wherever it goes (`sidecar.targets`).
    os.environ.pop("OTEL_EXPORTER_OTLP_HEADERS", None)
    log = logging.getLogger("attest_otel.serve")
    for line in config_lines(config):
        log.debug("config %s", line)
    service = build_service(config)
    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        log.info("signal received", extra={"signal": signal.Signals(signum).name})
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        service.start()
        # After every check that can refuse the start: a failed start stays one line.
        problem = forward_problem(config.forward.endpoint, config.forward.protocol)
        if problem is not None:
            log.warning(problem)
        while not stop.wait(0.5):
            pass
    finally:
        service.shutdown(config.shutdown_deadline_s)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
