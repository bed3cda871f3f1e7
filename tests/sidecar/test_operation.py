"""The sidecar as an operator meets it: `/readyz` while the next hop is down, SIGTERM with the
next hop down (with and without `--buffer-dir`), retry warnings that do not flood the log, a
start-up line without `None`, and a taken port as one line and exit 5."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.sidecar.downstream import Downstream
from tests.sidecar.helpers import REPO, Sidecar, free_port
from tests.sidecar.test_faults import _post, plain_pb, span_ids

pytestmark = pytest.mark.timeout(90)


def _readyz(sidecar: Sidecar) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"{sidecar.http_url}/readyz", timeout=2) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def _wait(predicate: object, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.1)
    return False


def test_readyz_says_not_ready_with_the_reason_once_forwarding_failed_long_enough(
    sidecar: Sidecar, downstream: Downstream
) -> None:
    sidecar.config = {"forward": {"unready_after_s": 1.0}}
    sidecar.start()
    downstream.down = True
    assert _readyz(sidecar)[0] == 200
    assert _post(f"{sidecar.http_url}/v1/traces", plain_pb(1)) == 200
    assert _wait(lambda: downstream.refused >= 1)
    assert _readyz(sidecar)[0] == 200  # one failure is not an outage
    assert _wait(lambda: _readyz(sidecar)[0] == 503), sidecar.log()
    _, why = _readyz(sidecar)
    assert f"forwarding to {downstream.endpoint} has failed for" in why
    assert "UNAVAILABLE" in why

    downstream.down = False
    assert _wait(lambda: _readyz(sidecar)[0] == 200), sidecar.log()
    assert "takes requests again" in sidecar.log()
    assert sidecar.terminate() == 0
    log = sidecar.log()
    retry_lines = [line for line in log.splitlines() if "; retry " in line]
    assert len(retry_lines) <= 2, retry_lines  # rate-limited: not one per attempt per worker
    assert downstream.refused > len(retry_lines)


def test_sigterm_with_the_next_hop_down_keeps_the_spans_in_the_buffer_dir_for_the_next_start(
    tmp_path: Path, downstream: Downstream
) -> None:
    buffer_dir = tmp_path / "buffer"
    downstream.down = True
    first = Sidecar(tmp_path, downstream.endpoint, extra_args=["--buffer-dir", str(buffer_dir)])
    try:
        first.start()
        sent = plain_pb(7, n=4)
        assert _post(f"{first.http_url}/v1/traces", sent) == 200
        assert _wait(lambda: downstream.refused >= 2)
        started = time.monotonic()
        assert first.terminate() == 0
        assert time.monotonic() - started < 8  # not the whole 10 s deadline: the spans are safe
        log = first.log()
        line = next(x for x in log.splitlines() if "not delivered" in x)
        assert "level=warning" in line and "4 span(s)" in line and "kept in the buffer dir" in line
    finally:
        first.stop_quietly()

    downstream.down = False
    again = Sidecar(tmp_path, downstream.endpoint, extra_args=["--buffer-dir", str(buffer_dir)])
    try:
        again.start()
        assert downstream.wait_spans(span_ids(sent)), again.log()
        assert again.terminate() == 0
    finally:
        again.stop_quietly()


def test_sigterm_with_the_next_hop_down_and_no_buffer_dir_warns_of_the_lost_spans(
    sidecar: Sidecar, downstream: Downstream
) -> None:
    sidecar.config = {"shutdown": {"deadline_s": 2.0}}
    downstream.down = True
    sidecar.start()
    assert _post(f"{sidecar.http_url}/v1/traces", plain_pb(9, n=3)) == 200
    assert _wait(lambda: downstream.refused >= 1)
    assert sidecar.terminate() == 0
    line = next(x for x in sidecar.log().splitlines() if "LOST" in x)
    assert "level=warning" in line and "3 span(s)" in line and "--buffer-dir" in line


def test_the_start_up_line_names_every_output_without_none(
    sidecar: Sidecar, downstream: Downstream
) -> None:
    sidecar.start()
    assert sidecar.terminate() == 0
    started = next(x for x in sidecar.log().splitlines() if "sidecar started" in x)
    assert "prometheus=off" in started and "None" not in started


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


@pytest.mark.parametrize("which", ["--grpc-endpoint", "--http-endpoint", "--prometheus"])
def test_a_taken_port_is_one_line_and_exit_5_on_each_listener(
    tmp_path: Path, taken_port: int, which: str
) -> None:
    ports = {
        "--grpc-endpoint": free_port(),
        "--http-endpoint": free_port(),
        "--prometheus": free_port(),
    }
    ports[which] = taken_port
    args = [
        sys.executable,
        "-m",
        "attest_otel.cli",
        "serve",
        "--forward-endpoint",
        f"127.0.0.1:{free_port()}",
        "--store",
        str(tmp_path / "s.db"),
        *[x for flag, port in ports.items() for x in (flag, f"127.0.0.1:{port}")],
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "ANTHROPIC"))}
    done = subprocess.run(
        args, cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 5, done.stderr
    errors = [x for x in done.stderr.splitlines() if x.startswith("attest-otel: error:")]
    assert len(errors) == 1 and f"127.0.0.1:{taken_port}" in errors[0]
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr
