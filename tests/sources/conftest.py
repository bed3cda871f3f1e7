"""Fixtures for the trace-source tests: a fake backend per test, stopped afterwards; the
real Jaeger v2 once for the session, holding the fixtures of `real_jaeger.FED`."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.peers.servers import Jaeger
from tests.sources import shapes
from tests.sources.fake_http import FakeBackend
from tests.sources.real_jaeger import FED, SHORT_ID_OF, feed, short_id_spans


@pytest.fixture
def backend() -> Iterator[FakeBackend]:
    server = FakeBackend().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def jaeger(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Jaeger]:
    """Skipped (failed under CI=true) where tools/build-peers.sh has not built Jaeger."""
    server = Jaeger(tmp_path_factory.mktemp("jaeger")).start()
    try:
        spans = [s for name in FED for s in shapes.original_spans(name)]
        feed(server, spans + short_id_spans(shapes.original_spans(SHORT_ID_OF)))
        yield server
    finally:
        server.stop()
