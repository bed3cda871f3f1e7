"""Tests that run a real peer ask for it here: a Debian program (Chromium, PostgreSQL) by
`program`, or one built from source by `tools/build-peers.sh` (the Collector, Jaeger v2,
Prometheus 3) by `peer`, found in the peer cache (~/.cache/attest-otel/peers).

On a machine without the program such a test is skipped, not failed: `make test` must pass
on a fresh machine that cannot install packages, and the skip is named again in one line at
the end of the run (`conftest.pytest_terminal_summary`) so it is not missed. Under CI=true a
missing program fails the test instead, because there `tools/test-deps.sh` installs it and a
skip would hide that it did not.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

__all__ = ["MISSING", "PEERS", "peer", "peer_cache", "program"]

MISSING: dict[str, set[str]] = {}
"""Debian package -> node ids of the tests skipped for want of it, for the closing line."""

PEERS = {
    "otelcol": "otelcol-attest/otelcol-attest",
    "jaeger": "jaeger",
    "prometheus": "prometheus",
}
"""Peer -> its path in the cache, as tools/build-peers.sh writes it."""
PEER_MISSING: dict[str, set[str]] = {}
"""Peer -> node ids of the tests skipped for want of it, for the closing line."""


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


def peer_cache() -> Path:
    """Where tools/build-peers.sh keeps the peers (the same variables, the same default)."""
    if os.environ.get("ATTEST_OTEL_PEERS"):
        return Path(os.environ["ATTEST_OTEL_PEERS"])
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "attest-otel" / "peers"


def peer(name: str) -> str:
    """The path of a peer built from source; else skip (fail under CI=true) saying how to
    build it."""
    path = peer_cache() / PEERS[name]
    if os.access(path, os.X_OK):
        return str(path)
    reason = (
        f"needs {name} built from source ({path} is missing): "
        f"`tools/build-peers.sh` builds it (make test does)"
    )
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason}; CI=true, so this is a failure, not a skip")
    test = os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" ", 1)[0]
    PEER_MISSING.setdefault(name, set()).add(test)
    pytest.skip(reason)
