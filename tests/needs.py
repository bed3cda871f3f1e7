"""Tests that run a Debian program as a real peer (Prometheus, Chromium) ask for it here.

On a machine without the program such a test is skipped, not failed: `make test` must pass
on a fresh machine that cannot install packages, and the skip is named again in one line at
the end of the run (`conftest.pytest_terminal_summary`) so it is not missed. Under CI=true a
missing program fails the test instead, because there `tools/test-deps.sh` installs it and a
skip would hide that it did not.
"""

from __future__ import annotations

import os
import shutil

import pytest

__all__ = ["MISSING", "program"]

MISSING: dict[str, set[str]] = {}
"""Debian package -> node ids of the tests skipped for want of it, for the closing line."""


def program(name: str, package: str | None = None) -> str:
    """The path of `name` on PATH; else skip (fail under CI=true) naming the package."""
    found = shutil.which(name)
    if found is not None:
        return found
    package = package or name
    reason = (
        f"needs Debian's {package} ({name} is not on PATH): "
        f"`sudo apt-get install {package}`, or run `make test` as root"
    )
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason}; CI=true, so this is a failure, not a skip")
    test = os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" ", 1)[0]
    MISSING.setdefault(package, set()).add(test)
    pytest.skip(reason)
