"""Fixtures of the sidecar tests: a downstream OTLP server and a sidecar subprocess."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.sidecar.downstream import Downstream
from tests.sidecar.helpers import Sidecar


@pytest.fixture
def downstream() -> Iterator[Downstream]:
    server = Downstream().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def sidecar(tmp_path: Path, downstream: Downstream) -> Iterator[Sidecar]:
    """A sidecar forwarding to `downstream`, with the short test timers (not started)."""
    made = Sidecar(tmp_path, downstream.endpoint)
    try:
        yield made
    finally:
        made.stop_quietly()
