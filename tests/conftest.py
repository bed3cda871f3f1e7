"""Fixtures shared across the test tree."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.fakes.messages_server import MessagesServer

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
