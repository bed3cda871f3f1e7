"""Fixtures for the trace-source tests: a fake backend per test, stopped afterwards."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.sources.fake_http import FakeBackend


@pytest.fixture
def backend() -> Iterator[FakeBackend]:
    server = FakeBackend().start()
    try:
        yield server
    finally:
        server.stop()
