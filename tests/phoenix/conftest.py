"""A real Phoenix server on loopback for `make test-phoenix`.

Phoenix lives in its own virtualenv (tests/phoenix/requirements.txt) and runs as a
subprocess, so its pins never meet the project's. `make test-phoenix` sets
`ATTEST_OTEL_PHOENIX` to its `phoenix` executable; without it `tests/conftest.py` leaves this
folder out of collection, so plain `make test` neither runs nor skips these tests.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

PHOENIX_START_S = 240.0
"""Phoenix imports pandas, SQLAlchemy, strawberry and more: about a minute on this 2-core
machine with warm caches, several on a cold one. Every other wait is bounded at 40 s."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=2) as r:
            return bool(r.status == 200)
    except OSError:
        return False


@pytest.fixture(scope="session")
def phoenix_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    executable = os.environ.get("ATTEST_OTEL_PHOENIX")
    if not executable:
        pytest.fail("set ATTEST_OTEL_PHOENIX to a phoenix executable (make test-phoenix does)")
    if not Path(executable).exists():
        pytest.fail(f"ATTEST_OTEL_PHOENIX={executable}: no such file (run make test-phoenix)")
    workdir = tmp_path_factory.mktemp("phoenix")
    port, grpc_port = _free_port(), _free_port()
    env = {
        **os.environ,
        "PHOENIX_WORKING_DIR": str(workdir),
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(grpc_port),
        "PHOENIX_TELEMETRY_ENABLED": "false",
    }
    log_path = workdir / "phoenix.log"
    log = log_path.open("w")
    process = subprocess.Popen([executable, "serve"], env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + PHOENIX_START_S
        while not _healthy(url):
            if process.poll() is not None:
                pytest.fail(
                    f"Phoenix exited ({process.returncode}):\n{log_path.read_text()[-3000:]}"
                )
            if time.monotonic() > deadline:
                pytest.fail(
                    f"Phoenix not up within {PHOENIX_START_S:g}s:\n{log_path.read_text()[-3000:]}"
                )
            time.sleep(0.5)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        log.close()
