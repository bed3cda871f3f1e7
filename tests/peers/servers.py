"""The peers built from source (tools/build-peers.sh) as processes on free loopback ports.

The shipped Collector configs name the hosts of deploy/compose.yaml (attest-otel, jaeger,
tempo, loki, prometheus) and listen on 0.0.0.0. `localize` rewrites every `host:port` of a
config to a loopback address: the ones a test points somewhere (the sidecar, Jaeger), and a
free port for the rest, so the config under test is the shipped file, not a copy of it.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.needs import peer
from tests.sidecar.helpers import free_port

_HOST_PORT = re.compile(r"(?P<scheme>https?://)?(?P<host>[A-Za-z0-9][A-Za-z0-9.-]*):(?P<port>\d+)")
_READY = "Everything is ready"
WAIT_S = 60.0


def localize(
    text: str,
    targets: Mapping[str, str] | None = None,
    *,
    grpc_default: str | None = None,
    http_default: str | None = None,
) -> tuple[str, dict[str, str]]:
    """Every `host:port` in a Collector config -> `127.0.0.1:PORT`. `targets` maps a
    `host:port` of the file to the address to use; the listening ones (`0.0.0.0:...`) and
    any other get a free port, or, for a peer's address, `http_default` (an `http://` URL's)
    or `grpc_default` when given. Returns the new text and the whole mapping (so a test can
    find where, say, `0.0.0.0:4317` went)."""
    targets = dict(targets or {})
    mapping: dict[str, str] = {}

    def swap(match: re.Match[str]) -> str:
        key = f"{match['host']}:{match['port']}"
        if key not in mapping:
            default = None
            if match["host"] != "0.0.0.0":
                default = http_default if match["scheme"] else grpc_default
            mapping[key] = targets.get(key) or default or f"127.0.0.1:{free_port()}"
        return (match["scheme"] or "") + mapping[key]

    out = []
    for line in text.splitlines(keepends=True):
        code, hash_, comment = line.partition("#")
        out.append(_HOST_PORT.sub(swap, code) + hash_ + comment)
    text = "".join(out)
    # The Collector's own metrics: a `host:` and `port:` pair, not one string.
    data = yaml.safe_load(text)
    for reader in (
        data.get("service", {}).get("telemetry", {}).get("metrics", {}).get("readers", [])
    ):
        prom = reader.get("pull", {}).get("exporter", {}).get("prometheus")
        if prom is not None:
            prom["host"], prom["port"] = "127.0.0.1", free_port()
            text = yaml.safe_dump(data, sort_keys=False)
    return text, mapping


def _quiet_telemetry(text: str) -> str:
    """No Collector self-metrics server unless the config asks for one: the default binds
    :8888, which two Collectors (or another test) on one machine would fight over."""
    data = yaml.safe_load(text)
    telemetry = data.setdefault("service", {}).setdefault("telemetry", {})
    telemetry.setdefault("metrics", {"level": "none"})
    return yaml.safe_dump(data, sort_keys=False)


@dataclass
class Process:
    """A peer process writing to a log file, stopped with SIGTERM (then SIGKILL)."""

    args: list[str]
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Process:
        env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")} | self.env
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT, env=env)
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_log(self, needle: str, timeout: float = WAIT_S) -> None:
        deadline = time.monotonic() + timeout
        while needle not in self.log():
            if not self.alive():
                raise AssertionError(f"{self.args[0]} exited:\n{self.log()[-4000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no {needle!r} in {timeout:g}s:\n{self.log()[-4000:]}")
            time.sleep(0.1)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


def validate(config: Path) -> subprocess.CompletedProcess[str]:
    """`otelcol validate`: the Collector's own check of a config (components, types, keys)."""
    return subprocess.run(
        [peer("otelcol"), "validate", f"--config={config}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@dataclass
class Collector:
    """The Collector of collector-config/builder-config.yaml running one config."""

    tmp: Path
    text: str
    name: str = "otelcol"
    process: Process | None = None

    def start(self) -> Collector:
        config = self.tmp / f"{self.name}.yaml"
        config.write_text(_quiet_telemetry(self.text))
        self.process = Process(
            [peer("otelcol"), f"--config={config}"], self.tmp / f"{self.name}.log"
        ).start()
        self.process.wait_log(_READY)
        return self

    def log(self) -> str:
        return self.process.log() if self.process else ""

    def stop(self) -> None:
        if self.process:
            self.process.stop()


def _get_json(url: str, timeout: float = 5.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.load(response)


@dataclass
class Jaeger:
    """Jaeger v2 with memory storage: OTLP/gRPC in, the query API out."""

    tmp: Path
    otlp_port: int = field(default_factory=free_port)
    query_port: int = field(default_factory=free_port)
    process: Process | None = None

    @property
    def otlp_endpoint(self) -> str:
        return f"127.0.0.1:{self.otlp_port}"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.query_port}"

    def start(self) -> Jaeger:
        config = {
            "service": {
                "extensions": ["jaeger_storage", "jaeger_query"],
                "pipelines": {
                    "traces": {
                        "receivers": ["otlp"],
                        "processors": ["batch"],
                        "exporters": ["jaeger_storage_exporter"],
                    }
                },
                "telemetry": {"metrics": {"level": "none"}},
            },
            "extensions": {
                "jaeger_query": {
                    "storage": {"traces": "memstore"},
                    "http": {"endpoint": f"127.0.0.1:{self.query_port}"},
                    "grpc": {"endpoint": f"127.0.0.1:{free_port()}"},
                },
                "jaeger_storage": {"backends": {"memstore": {"memory": {"max_traces": 100000}}}},
            },
            "receivers": {
                "otlp": {"protocols": {"grpc": {"endpoint": self.otlp_endpoint}}},
            },
            "processors": {"batch": {"timeout": "100ms"}},
            "exporters": {"jaeger_storage_exporter": {"trace_storage": "memstore"}},
        }
        path = self.tmp / "jaeger.yaml"
        path.write_text(yaml.safe_dump(config))
        self.process = Process(
            [peer("jaeger"), f"--config={path}"],
            self.tmp / "jaeger.log",
            env={"OTEL_TRACES_EXPORTER": "none"},  # not its own traces to localhost:4317
        )
        self.process.start()
        self.process.wait_log(_READY)
        return self

    def trace(self, trace_id: str) -> dict[str, Any] | None:
        """The classic JSON of one trace, or None while Jaeger does not have it."""
        try:
            body = _get_json(f"{self.url}/api/traces/{trace_id}")
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return None
            raise
        data = body.get("data") or []
        return dict(data[0]) if data else None

    def stop(self) -> None:
        if self.process:
            self.process.stop()


@dataclass
class Prometheus:
    """Prometheus 3 with its OTLP receiver and exemplar storage, as otelcol.yaml expects."""

    tmp: Path
    port: int = field(default_factory=free_port)
    process: Process | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def otlp_metrics_url(self) -> str:
        return f"{self.url}/api/v1/otlp/v1/metrics"

    def start(self, scrape_config: str = "") -> Prometheus:
        config = self.tmp / "prometheus.yml"
        config.write_text("global:\n  scrape_interval: 1s\n" + scrape_config)
        self.process = Process(
            [
                peer("prometheus"),
                f"--config.file={config}",
                f"--storage.tsdb.path={self.tmp / 'prometheus-data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--web.enable-otlp-receiver",
                "--enable-feature=exemplar-storage",
                "--log.level=warn",
            ],
            self.tmp / "prometheus.log",
        ).start()
        deadline = time.monotonic() + WAIT_S
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as r:
                    if r.status == 200:
                        return self
            except (urllib.error.URLError, OSError):
                pass
            if not self.process.alive() or time.monotonic() > deadline:
                raise AssertionError(f"Prometheus not ready:\n{self.process.log()[-4000:]}")
            time.sleep(0.2)

    def get(self, path: str, **params: str) -> Any:
        body = _get_json(f"{self.url}{path}?{urllib.parse.urlencode(params)}")
        assert body["status"] == "success", body
        return body["data"]

    def query(self, promql: str) -> list[dict[str, Any]]:
        return list(self.get("/api/v1/query", query=promql)["result"])

    def stop(self) -> None:
        if self.process:
            self.process.stop()
