"""A next hop that does not resolve or does not listen is said at start, once, by name."""

from __future__ import annotations

import socket
import time
from pathlib import Path

from attest_otel.sidecar.config import load_service_config
from attest_otel.sidecar.preflight import forward_problem
from tests.sidecar.helpers import Sidecar

REPO = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_unresolvable_host_is_named() -> None:
    problem = forward_problem("http://otelcol.invalid:14317", "grpc")
    assert problem is not None and "'otelcol.invalid' does not resolve" in problem


def test_a_port_nobody_listens_on_is_named() -> None:
    port = _free_port()
    problem = forward_problem(f"127.0.0.1:{port}", "grpc")
    assert problem is not None and f"127.0.0.1:{port}" in problem


def test_a_listening_next_hop_is_no_problem() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        assert forward_problem(f"http://127.0.0.1:{server.getsockname()[1]}", "grpc") is None


def test_serve_warns_at_start_about_a_forward_host_that_does_not_resolve(tmp_path: Path) -> None:
    sidecar = Sidecar(tmp_path, "otelcol.invalid:14317").start()
    try:
        deadline = time.monotonic() + 5
        while "does not resolve" not in sidecar.log() and time.monotonic() < deadline:
            time.sleep(0.05)
        warned = [line for line in sidecar.log().splitlines() if "does not resolve" in line]
        assert len(warned) == 1 and "WARNING" in warned[0].upper(), sidecar.log()
        assert "otelcol.invalid" in warned[0]
    finally:
        sidecar.terminate()


def test_the_local_config_is_loopback_only_and_writes_in_the_users_home(
    tmp_path: Path,
) -> None:
    config = load_service_config(
        REPO / "collector-config" / "attest-otel.local.yaml",
        environ={"HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path / "data")},
    )
    assert config.forward.endpoint == "127.0.0.1:14317"
    hosts = [config.receivers.grpc_endpoint, config.receivers.http_endpoint]
    assert all(h.startswith("127.0.0.1:") for h in hosts)
    assert config.telemetry.prometheus is not None
    assert config.telemetry.prometheus.startswith("127.0.0.1:")
    assert config.buffer.dir is None and config.grading.policy is None
    assert not str(config.store.path).startswith("/var/")


def test_a_second_start_on_taken_ports_is_one_line_and_exit_5(tmp_path: Path) -> None:
    import subprocess
    import sys

    first = Sidecar(tmp_path, "127.0.0.1:1").start()
    try:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "attest_otel.cli",
                "serve",
                "--grpc-endpoint",
                first.grpc_endpoint,
                "--http-endpoint",
                f"127.0.0.1:{first.http_port}",
                "--forward-endpoint",
                "127.0.0.1:1",
                "--store",
                str(tmp_path / "second.db"),
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 5
        lines = done.stdout.splitlines() + done.stderr.splitlines()
        assert len(lines) == 1 and "cannot listen" in lines[0], lines
    finally:
        first.terminate()
