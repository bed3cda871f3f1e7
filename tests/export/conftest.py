"""Fixtures for the export tests: test OTLP receivers and a clean OTEL_* environment."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.fakes.otlp_server import OtlpGrpcReceiver, OtlpHttpReceiver


@pytest.fixture(autouse=True)
def clean_otel_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No OTEL_* variable from the developer's shell or CI may steer these tests."""
    for name in list(os.environ):
        if name.startswith("OTEL_"):
            monkeypatch.delenv(name)


@pytest.fixture
def otlp_receiver() -> Iterator[OtlpGrpcReceiver]:
    with OtlpGrpcReceiver() as receiver:
        yield receiver


@pytest.fixture
def otlp_http_receiver() -> Iterator[OtlpHttpReceiver]:
    with OtlpHttpReceiver() as receiver:
        yield receiver
