"""Fixtures shared across the test tree."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from tests.fakes.messages_server import MessagesServer

if TYPE_CHECKING:
    from tests.pg import Postgres

# The live Phoenix group needs its own large venv: it is `make test-phoenix`, not `make test`,
# and is left out of collection (not skipped) unless that target points at Phoenix.
collect_ignore = [] if os.environ.get("ATTEST_OTEL_PHOENIX") else ["phoenix"]


@pytest.fixture
def messages_server() -> Iterator[MessagesServer]:
    """A fake Anthropic Messages API on a free loopback port, stopped after the test."""
    server = MessagesServer().start()
    try:
        yield server
    finally:
        server.stop()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """One line naming the tests skipped for want of a Debian program, and how to get it."""
    from tests.needs import MISSING, PEER_MISSING

    if PEER_MISSING:
        count = len(set().union(*PEER_MISSING.values()))
        names = " ".join(sorted(PEER_MISSING))
        terminalreporter.write_line(
            f"{count} test(s) skipped: they need {names} built from source; "
            "`tools/build-peers.sh` (or `make test`) builds them",
            yellow=True,
        )
    if not MISSING:
        return
    count = len(set().union(*MISSING.values()))
    packages = " ".join(sorted(MISSING))
    terminalreporter.write_line(
        f"{count} test(s) skipped: they need Debian's {packages}; "
        f"`sudo apt-get install {packages}` (or `make test` as root) runs them",
        yellow=True,
    )


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    """A real PostgreSQL server (Debian's package) for the whole session; `.database()`
    gives each test a database of its own. Skipped (one-line summary) without the package."""
    from tests.pg import start_postgres, stop_postgres

    server = start_postgres()
    try:
        yield server
    finally:
        stop_postgres(server)
