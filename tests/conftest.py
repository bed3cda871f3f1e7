"""Fixtures shared across the test tree."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fakes.messages_server import MessagesServer


@pytest.fixture
def messages_server() -> Iterator[MessagesServer]:
    """A fake Anthropic Messages API on a free loopback port, stopped after the test."""
    server = MessagesServer().start()
    try:
        yield server
    finally:
        server.stop()
