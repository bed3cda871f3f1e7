"""The pipeline of collector-config/otelcol.yaml, for real: the agent app -> the Collector ->
`attest-otel serve` -> the Collector's second pipeline -> Jaeger v2 and Prometheus 3.

Tempo and Loki are AGPL and are not built here: the Collector's exporters to them point at
stand-ins that keep what they get (an OTLP/gRPC server for Tempo, an OTLP/HTTP one for Loki).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.peers.otlp_http_sink import OtlpHttpSink
from tests.peers.servers import Collector, Jaeger, Prometheus, localize
from tests.sidecar.downstream import Downstream
from tests.sidecar.helpers import REPO, Sidecar, free_port

OTELCOL = REPO / "collector-config" / "otelcol.yaml"
TEST_PUSH_S = 2.0
"""The sidecar's metric export interval in the tests (OTEL_METRIC_EXPORT_INTERVAL); the
shipped one is the SDK's default, 60 s. Grafana's windows are scaled by the same ratio."""
SHIPPED_PUSH_S = 60.0


def wait(ok: Callable[[], bool], timeout: float, what: Callable[[], str]) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        if time.monotonic() > deadline:
            raise AssertionError(what())
        time.sleep(0.25)


@dataclass
class Pipeline:
    tmp: Path
    jaeger: Jaeger = field(init=False)
    prometheus: Prometheus = field(init=False)
    tempo: Downstream = field(init=False)
    loki: OtlpHttpSink = field(init=False)
    sidecar: Sidecar = field(init=False)
    collector: Collector = field(init=False)
    mapping: dict[str, str] = field(default_factory=dict)
    load_start: float = 0.0
    load_end: float = 0.0
    app_logs: Any = None
    """The app's log records as sent (an ExportLogsServiceRequest)."""
    app_stderr: str = ""

    def start(self) -> Pipeline:
        self.jaeger = Jaeger(self.tmp).start()
        self.prometheus = Prometheus(self.tmp).start()
        self.tempo = Downstream().start()
        self.loki = OtlpHttpSink().start()
        graded = f"127.0.0.1:{free_port()}"
        home = self.tmp / "sidecar"
        home.mkdir()
        self.sidecar = Sidecar(
            home,
            graded,
            config={"telemetry": {"metrics": True, "logs": True}},
            env={"OTEL_METRIC_EXPORT_INTERVAL": str(int(TEST_PUSH_S * 1000))},
        ).start()
        text, self.mapping = localize(
            OTELCOL.read_text(),
            {
                "attest-otel:24317": self.sidecar.grpc_endpoint,
                "jaeger:4317": self.jaeger.otlp_endpoint,
                "tempo:4317": self.tempo.endpoint,
                "loki:3100": self.loki.host_port,
                "prometheus:9090": f"127.0.0.1:{self.prometheus.port}",
                "0.0.0.0:14317": graded,
            },
        )
        self.collector = Collector(self.tmp, text).start()
        return self

    @property
    def otlp_in(self) -> str:
        return f"http://{self.mapping['0.0.0.0:4317']}"

    def run_app(self, runs: int, pace_s: float) -> tuple[Path, Path]:
        """The agent app, to the Collector's OTLP/gRPC port; returns its (spans, logs) files."""
        spans, logs = self.tmp / "app-spans.jsonl", self.tmp / "app-logs.jsonl"
        env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = self.otlp_in
        self.load_start = time.time()
        done = subprocess.run(
            [sys.executable, "-m", "tests.peers.agent_app", str(runs), str(pace_s), spans, logs],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        self.load_end = time.time()
        assert done.returncode == 0, done.stderr
        self.app_stderr = done.stderr
        return spans, logs

    def logs(self) -> str:
        return "\n".join(
            f"--- {name}\n{text[-3000:]}"
            for name, text in (
                ("collector", self.collector.log()),
                ("sidecar", self.sidecar.log()),
                ("jaeger", self.jaeger.process.log() if self.jaeger.process else ""),
            )
        )

    def stop(self) -> None:
        for stop in (
            getattr(self, "collector", None),
            getattr(self, "sidecar", None),
            getattr(self, "jaeger", None),
            getattr(self, "prometheus", None),
            getattr(self, "tempo", None),
            getattr(self, "loki", None),
        ):
            if stop is None:
                continue
            with contextlib.suppress(Exception):  # stop the rest whatever one did
                (stop.stop_quietly if isinstance(stop, Sidecar) else stop.stop)()


def spans_by_trace(jaeger_trace: dict[str, Any]) -> list[str]:
    return [s["spanID"] for s in jaeger_trace["spans"]]
