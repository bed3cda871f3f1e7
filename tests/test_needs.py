"""A test that needs a missing Debian program is skipped and named in the run's last line on
a developer's machine, and fails under CI=true, where a skip would hide a broken install."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]


def _run(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess[str]:
    test = tmp_path / "test_wants.py"
    test.write_text(
        "from tests.needs import program\n\n"
        "def test_wants_it() -> None:\n"
        "    program('attest-otel-no-such-program', 'no-such-package')\n\n"
        "def test_other() -> None:\n"
        "    assert True\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci is not None:
        env["CI"] = ci
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "tests.conftest",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(tmp_path),
            str(test),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_missing_program_is_a_skip_named_in_the_last_line(tmp_path: Path) -> None:
    done = _run(tmp_path, None)
    assert done.returncode == 0, done.stdout
    lines = done.stdout.strip().splitlines()
    assert "1 passed, 1 skipped" in lines[-1]
    assert lines[-2] == (
        "1 test(s) skipped: they need Debian's no-such-package; "
        "`sudo apt-get install no-such-package` (or `make test` as root) runs them"
    )


@pytest.mark.parametrize("ci", ["true"])
def test_under_ci_a_missing_program_is_a_failure(tmp_path: Path, ci: str) -> None:
    done = _run(tmp_path, ci)
    assert done.returncode == 1
    assert "1 failed, 1 passed" in done.stdout
    assert "CI=true, so this is a failure, not a skip" in done.stdout
