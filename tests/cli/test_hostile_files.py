"""A hostile policy file and a garbage model reply (issue 26, item 9;
docs/hostile-input-network.md): one line each, a documented exit, never a hang or a
traceback. Run as the user runs them: the real command in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TRACES = REPO / "tests" / "fixtures" / "traces"


def _grade(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "ANTHROPIC"))}
    return subprocess.run(
        [sys.executable, "-m", "attest_otel.cli", "grade", *args],
        cwd=REPO,
        env={**clean, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
    )


def _laughs(levels: int) -> str:
    lines = ['l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for n in range(1, levels):
        lines.append(f"l{n}: &l{n} [" + ",".join([f"*l{n - 1}"] * 9) + "]")
    lines.append(f'agents:\n  "*":\n    allowed_tools: *l{levels - 1}')
    return "\n".join(lines) + "\n"


def test_a_billion_laughs_policy_is_refused_in_a_second_with_one_line(tmp_path: Path) -> None:
    policy = tmp_path / "laughs.yaml"
    policy.write_text(_laughs(9))  # 9^9 = 387 million values once the aliases are followed
    started = time.monotonic()
    result = _grade("--file", str(TRACES / "strands__fallback.json"), "--policy", str(policy))
    took = time.monotonic() - started
    print(f"billion-laughs policy refused in {took:.2f}s")
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert "expands to more than 100000 values through its aliases" in line
    assert took < 10


def test_a_few_aliases_in_a_policy_are_still_fine(tmp_path: Path) -> None:
    policy = tmp_path / "aliases.yaml"
    policy.write_text(
        'agents:\n  billing:\n    allowed_tools: &tools ["lookup_invoice", "charge_card"]\n'
        '  "*":\n    allowed_tools: *tools\n'
    )
    result = _grade("--file", str(TRACES / "strands__fallback.json"), "--policy", str(policy))
    assert result.returncode in (0, 1) and "Traceback" not in result.stderr, result.stderr


@pytest.fixture
def garbage_model() -> Iterator[str]:
    """A Messages API that answers 200 with a body that is neither UTF-8 nor JSON."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["content-length"]))
            body = b"\x00garbage{"
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_garbage_model_reply_is_one_warning_line_and_the_grade_stands(
    garbage_model: str,
) -> None:
    env = {"ANTHROPIC_API_KEY": "test", "ANTHROPIC_BASE_URL": garbage_model}
    args = ("--file", str(TRACES / "vercel__unrecovered_ignores.json"), "--check-answer")
    result = _grade(*args, env=env)
    assert result.returncode == 1, result.stderr  # the unrecovered error still fails the run
    assert "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert "model reply could not be read" in line
    assert "FAIL" in result.stdout
