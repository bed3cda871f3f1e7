"""Tempo: protobuf from `/api/traces/{id}`, else JSON (`batches`, base64 ids, enum names)
from either route, against a local server answering in Tempo's documented shapes.

A fake, not the real Tempo, for every case here: Tempo is AGPL, and the project builds no
AGPL program (docs/peers.md; Jaeger, Apache-2.0, is the real backend of
tests/sources/test_jaeger.py). The shapes follow docs/jaeger-tempo-grafana.md."""

from __future__ import annotations

import logging

import pytest

from attest_otel.errors import SourceError
from attest_otel.ingest.decode import hydrate
from attest_otel.model import Span
from attest_otel.sources import HttpOptions, TraceNotFoundError
from attest_otel.sources.tempo import TempoSource
from tests.sources import shapes
from tests.sources.fake_http import FakeBackend, Reply

FIXTURES = ["vercel__fallback", "vercel__retry", "strands__multi_agent"]


def _fetch(backend: FakeBackend, trace_id: str) -> list[Span]:
    source = TempoSource(backend.url, HttpOptions(timeout_s=5))
    try:
        return [hydrate(s) for s in source.fetch(trace_id).spans]
    finally:
        source.close()


@pytest.mark.parametrize("name", FIXTURES)
def test_protobuf_answer_gives_back_every_span_exactly(backend: FakeBackend, name: str) -> None:
    tid = shapes.trace_id_of(name)
    backend.routes[f"/api/traces/{tid}"] = Reply(
        body=shapes.tempo_protobuf(name), content_type="application/protobuf"
    )

    assert _fetch(backend, tid) == shapes.original_spans(name)
    (request,) = backend.requests
    assert request.headers["accept"] == "application/protobuf"


@pytest.mark.parametrize("name", FIXTURES)
def test_json_answer_with_batches_base64_ids_and_enum_names_is_read_like_otlp(
    backend: FakeBackend, name: str
) -> None:
    tid = shapes.trace_id_of(name)
    backend.routes[f"/api/traces/{tid}"] = Reply(body=shapes.tempo_v1_json(name))

    assert _fetch(backend, tid) == shapes.original_spans(name)


def test_json_answer_from_old_tempo_with_instrumentation_library_spans_is_read(
    backend: FakeBackend,
) -> None:
    name = "vercel__retry"
    tid = shapes.trace_id_of(name)
    backend.routes[f"/api/traces/{tid}"] = Reply(
        body=shapes.tempo_v1_json(name, old_scope_key=True)
    )

    assert _fetch(backend, tid) == shapes.original_spans(name)


def test_v2_route_is_asked_when_the_v1_route_is_missing(backend: FakeBackend) -> None:
    name = "strands__multi_agent"
    tid = shapes.trace_id_of(name)
    backend.routes[f"/api/v2/traces/{tid}"] = Reply(body=shapes.tempo_v2_json(name))

    assert _fetch(backend, tid) == shapes.original_spans(name)
    assert [r.path for r in backend.requests] == [f"/api/traces/{tid}", f"/api/v2/traces/{tid}"]


def test_partial_v2_answer_is_graded_with_a_warning(
    backend: FakeBackend, caplog: pytest.LogCaptureFixture
) -> None:
    name = "vercel__fallback"
    tid = shapes.trace_id_of(name)
    backend.routes[f"/api/v2/traces/{tid}"] = Reply(
        body=shapes.tempo_v2_json(name, status="PARTIAL")
    )
    with caplog.at_level(logging.WARNING):
        assert _fetch(backend, tid) == shapes.original_spans(name)
    assert "partial trace" in caplog.text


def test_unknown_trace_is_one_line_naming_tempo_and_its_url(backend: FakeBackend) -> None:
    tid = "0af7651916cd43dd8448eb211c80319c"
    backend.routes[f"/api/traces/{tid}"] = Reply(404, b"trace not found", "text/plain")
    backend.routes[f"/api/v2/traces/{tid}"] = Reply(404, b"trace not found", "text/plain")
    with pytest.raises(TraceNotFoundError) as caught:
        _fetch(backend, tid)
    assert str(caught.value) == f"trace ID {tid} not found in tempo at {backend.url}"


def test_server_error_is_reported_with_its_status_and_body(backend: FakeBackend) -> None:
    tid = "0af7651916cd43dd8448eb211c80319c"
    backend.routes[f"/api/traces/{tid}"] = Reply(
        500, b"error querying ingesters: context deadline exceeded", "text/plain"
    )
    with pytest.raises(SourceError) as caught:
        _fetch(backend, tid)
    assert str(caught.value) == (
        f"tempo at {backend.url} answered HTTP 500: "
        "error querying ingesters: context deadline exceeded"
    )


def test_truncated_protobuf_is_an_unexpected_body_not_a_crash(backend: FakeBackend) -> None:
    name = "vercel__fallback"
    tid = shapes.trace_id_of(name)
    body = shapes.tempo_protobuf(name)
    backend.routes[f"/api/traces/{tid}"] = Reply(
        body=body[: len(body) - 7], content_type="application/protobuf"
    )
    with pytest.raises(SourceError, match=f"^unexpected body from tempo at {backend.url}"):
        _fetch(backend, tid)


def test_a_missing_tenant_header_is_explained(backend: FakeBackend) -> None:
    tid = "0af7651916cd43dd8448eb211c80319c"
    backend.routes[f"/api/traces/{tid}"] = Reply(401, b"no org id", "text/plain")
    with pytest.raises(SourceError, match="X-Scope-OrgID"):
        _fetch(backend, tid)
