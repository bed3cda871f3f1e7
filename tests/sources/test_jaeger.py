"""Jaeger: api_v3 (OTLP JSON, wrapped or bare, streamed) and the classic JSON fallback.

What a real Jaeger serves is read from a real one: Jaeger v2 v1.75.0 (v2.12.0) built by
tools/build-peers.sh, memory storage, fed the fixtures by the OTel SDK's OTLP exporter
(tests/sources/real_jaeger.py): api_v3, the classic API (reached by hiding api_v3 behind a
relay that passes Jaeger's own answers through), 64-bit trace ids, an unknown trace. Those
tests skip where the peer is not built (fail under CI=true).

A fake server (tests/sources/fake_http.py) stays for what this Jaeger cannot be made to
answer: the shapes of other builds (bare TracesData, a streamed answer in chunks, the UI's
HTML on the api_v3 path, the in-band not-found of api_v3), errors (HTTP 500, 401), hostile
or broken bodies (truncated, cut short, dribbled, never sent), and what only the server
sees (the headers it was sent).
"""

from __future__ import annotations

import dataclasses
import json
import time

import pytest

from attest_otel.adapt import runs_from_spans
from attest_otel.errors import SourceError
from attest_otel.grade.grader import grade
from attest_otel.ingest.decode import hydrate
from attest_otel.model import Span
from attest_otel.sources import HttpOptions, TraceNotFoundError, parse_source
from attest_otel.sources.jaeger import JaegerSource, spans_from_classic
from tests.peers.servers import Jaeger
from tests.sources import shapes
from tests.sources.fake_http import FakeBackend, Reply, refused_url
from tests.sources.real_jaeger import SHORT_ID_OF, relay, short_id_spans

FIXTURES = [
    "vercel__fallback",
    "vercel__retry",
    "strands__multi_agent",
    "anthropic_openinference__retry",
]


def _classic_only(backend: FakeBackend, jaeger: Jaeger, trace_id: str) -> None:
    """`backend` answers the classic path with the real Jaeger's answer, and api_v3 with a
    404 (a Jaeger that has no api_v3)."""
    backend.routes[f"/api/traces/{trace_id}"] = relay(jaeger)


def _fetch(backend: FakeBackend | Jaeger, trace_id: str, **options: object) -> list[Span]:
    source = JaegerSource(backend.url, HttpOptions(**options))  # type: ignore[arg-type]
    try:
        return [hydrate(s) for s in source.fetch(trace_id).spans]
    finally:
        source.close()


def _by_id(spans: list[Span]) -> dict[str, Span]:
    """Spans by id, each one's events in time order. Jaeger v2 gives a trace's spans back
    grouped its own way, and, from the second read of a trace on, each span's events
    sorted by name (its memory store keeps what its query adjusters did to the trace):
    every event comes back, not in the order recorded (docs/peers.md)."""
    out = {
        s.span_id: dataclasses.replace(s, events=sorted(s.events, key=lambda e: e.time_ns))
        for s in spans
    }
    assert len(out) == len(spans), "a span id twice"
    return out


def _grades(spans: list[Span]) -> list[dict[str, object]]:
    return [
        grade(run, judge=None).to_dict() for trace in runs_from_spans(spans) for run in trace.runs
    ]


@pytest.mark.parametrize("name", FIXTURES)
def test_api_v3_of_a_real_jaeger_gives_back_every_span_of_the_trace(
    backend: FakeBackend, jaeger: Jaeger, name: str
) -> None:
    tid = shapes.trace_id_of(name)
    assert _by_id(_fetch(jaeger, tid)) == _by_id(shapes.original_spans(name))
    # One request, to api_v3 (seen through a relay to the same Jaeger), though Jaeger
    # labels its JSON there text/plain.
    backend.routes[f"/api/v3/traces/{tid}"] = relay(jaeger)
    assert _by_id(_fetch(backend, tid)) == _by_id(shapes.original_spans(name))
    assert [r.path for r in backend.requests] == [f"/api/v3/traces/{tid}"]


def test_api_v3_bare_traces_data_from_older_builds_is_accepted(backend: FakeBackend) -> None:
    name = "vercel__fallback"
    tid = shapes.trace_id_of(name)
    backend.routes[f"/api/v3/traces/{tid}"] = Reply(body=shapes.jaeger_v3(name, wrapped=False))

    assert _fetch(backend, tid) == shapes.original_spans(name)


def test_api_v3_streamed_result_chunks_are_joined_into_one_trace(backend: FakeBackend) -> None:
    name = "strands__multi_agent"
    tid = shapes.trace_id_of(name)
    batches = shapes.otlp_document(name)["resourceSpans"]
    half = len(batches) // 2
    first, second = {"resourceSpans": batches[:half]}, {"resourceSpans": batches[half:]}
    body = (json.dumps({"result": first}) + "\n" + json.dumps({"result": second}) + "\n").encode()
    backend.routes[f"/api/v3/traces/{tid}"] = Reply(body=body)

    assert _fetch(backend, tid) == shapes.original_spans(name)


@pytest.mark.parametrize("name", FIXTURES)
def test_classic_api_is_read_when_api_v3_is_absent_undoing_microseconds_tags_logs_and_references(
    backend: FakeBackend, jaeger: Jaeger, name: str
) -> None:
    tid = shapes.trace_id_of(name)
    original = shapes.original_spans(name)
    _classic_only(backend, jaeger, tid)

    assert _by_id(_fetch(backend, tid)) == _by_id(shapes.expected_from_jaeger_classic(original))
    assert [r.path for r in backend.requests] == [f"/api/v3/traces/{tid}", f"/api/traces/{tid}"]


@pytest.mark.parametrize("name", FIXTURES)
def test_grading_a_trace_read_from_jaeger_equals_grading_the_original_file(
    backend: FakeBackend, jaeger: Jaeger, name: str
) -> None:
    tid = shapes.trace_id_of(name)
    original = shapes.original_spans(name)
    _classic_only(backend, jaeger, tid)
    from_classic = _grades(_fetch(backend, tid))
    from_v3 = _grades(_fetch(jaeger, tid))

    assert from_v3 == _grades(original)
    assert from_classic == _grades(original)
    assert from_v3  # the fixture has runs to grade


def test_classic_api_is_read_when_the_ui_answers_the_v3_path_with_its_html_page(
    backend: FakeBackend,
) -> None:
    name = "vercel__retry"
    tid = shapes.trace_id_of(name)
    original = shapes.original_spans(name)
    backend.routes[f"/api/v3/traces/{tid}"] = Reply(
        body=b"<!doctype html><html>Jaeger UI</html>", content_type="text/html"
    )
    backend.routes[f"/api/traces/{tid}"] = Reply(
        body=json.dumps(shapes.jaeger_classic(original)).encode()
    )

    assert _fetch(backend, tid) == shapes.expected_from_jaeger_classic(original)


def test_classic_64_bit_trace_ids_printed_as_16_digits_are_padded_to_32(
    backend: FakeBackend, jaeger: Jaeger
) -> None:
    original = short_id_spans(shapes.original_spans(SHORT_ID_OF))
    padded = original[0].trace_id
    short = padded[16:]
    _classic_only(backend, jaeger, padded)
    served = jaeger.trace(padded)
    assert served is not None and served["spans"][0]["traceID"] == short  # Jaeger prints 16

    assert _by_id(_fetch(backend, short)) == _by_id(shapes.expected_from_jaeger_classic(original))
    assert _by_id(_fetch(jaeger, short)) == _by_id(original)  # api_v3 of the same trace


def _classic_span(**overrides: object) -> dict[str, object]:
    span: dict[str, object] = {
        "traceID": "0af7651916cd43dd8448eb211c80319c",
        "spanID": "b7ad6b7169203331",
        "operationName": "execute_tool lookup",
        "references": [],
        "startTime": 1_700_000_000_000_001,
        "duration": 2500,
        "tags": [],
        "logs": [],
        "processID": "p1",
    }
    span.update(overrides)
    return span


def _classic(span: dict[str, object]) -> dict[str, object]:
    return {
        "data": [
            {
                "traceID": span["traceID"],
                "spans": [span],
                "processes": {
                    "p1": {
                        "serviceName": "agent",
                        "tags": [{"key": "host.name", "type": "string", "value": "h"}],
                    }
                },
            }
        ]
    }


@pytest.mark.parametrize(
    ("refs", "parent"),
    [
        pytest.param(
            [
                {
                    "refType": "FOLLOWS_FROM",
                    "traceID": "0af7651916cd43dd8448eb211c80319c",
                    "spanID": "00f067aa0ba902b7",
                },
                {
                    "refType": "CHILD_OF",
                    "traceID": "0af7651916cd43dd8448eb211c80319c",
                    "spanID": "1111111111111111",
                },
            ],
            "1111111111111111",
            id="a CHILD_OF reference wins over an earlier FOLLOWS_FROM",
        ),
        pytest.param(
            [
                {
                    "refType": "FOLLOWS_FROM",
                    "traceID": "0af7651916cd43dd8448eb211c80319c",
                    "spanID": "00f067aa0ba902b7",
                }
            ],
            "00f067aa0ba902b7",
            id="a FOLLOWS_FROM reference is the parent when there is no CHILD_OF",
        ),
        pytest.param(
            [
                {
                    "refType": "CHILD_OF",
                    "traceID": "ffffffffffffffffffffffffffffffff",
                    "spanID": "00f067aa0ba902b7",
                }
            ],
            None,
            id="a reference into another trace is no parent",
        ),
        pytest.param([], None, id="no reference means a root span"),
    ],
)
def test_classic_parent_follows_jaegers_own_rule(refs: list[object], parent: str | None) -> None:
    (span,) = spans_from_classic(_classic(_classic_span(references=refs)))
    assert span.parent_id == parent


def test_classic_error_tag_alone_means_status_error_and_is_not_kept_as_an_attribute() -> None:
    (span,) = spans_from_classic(
        _classic(
            _classic_span(
                tags=[
                    {"key": "error", "type": "bool", "value": True},
                    {
                        "key": "otel.library.name",
                        "type": "string",
                        "value": "openinference.instrumentation",
                    },
                    {"key": "tool.name", "type": "string", "value": "lookup"},
                    {"key": "retries", "type": "int64", "value": 2},
                    {"key": "cost", "type": "float64", "value": 0.25},
                ]
            )
        )
    )
    assert span.status_code == 2
    assert span.kind == 0  # no span.kind tag: unspecified, as the Collector's receiver reads it
    assert span.scope_name == "openinference.instrumentation"
    assert span.attributes == {"tool.name": "lookup", "retries": 2, "cost": 0.25}
    assert span.resource == {"host.name": "h", "service.name": "agent"}
    assert (span.start_ns, span.end_ns) == (1_700_000_000_000_001_000, 1_700_000_000_002_501_000)


def test_classic_log_without_an_event_field_becomes_an_unnamed_event_with_its_fields() -> None:
    (span,) = spans_from_classic(
        _classic(
            _classic_span(
                logs=[
                    {
                        "timestamp": 1_700_000_000_000_500,
                        "fields": [{"key": "message", "type": "string", "value": "retrying"}],
                    },
                ]
            )
        )
    )
    assert [(e.name, e.time_ns, e.attributes) for e in span.events] == [
        ("", 1_700_000_000_000_500_000, {"message": "retrying"})
    ]


def test_unknown_trace_is_one_line_naming_jaeger_and_its_url(
    backend: FakeBackend, jaeger: Jaeger
) -> None:
    tid = "0af7651916cd43dd8448eb211c80319c"
    with pytest.raises(TraceNotFoundError) as caught:
        _fetch(jaeger, tid)
    assert str(caught.value) == f"trace ID {tid} not found in jaeger at {jaeger.url}"
    # api_v3's own not-found (JSON labelled text/plain) is the last word: no second request.
    backend.routes[f"/api/v3/traces/{tid}"] = relay(jaeger)
    with pytest.raises(TraceNotFoundError):
        _fetch(backend, tid)
    assert [r.path for r in backend.requests] == [f"/api/v3/traces/{tid}"]
    del backend.routes[f"/api/v3/traces/{tid}"]
    _classic_only(backend, jaeger, tid)  # the classic API's own not-found answer
    with pytest.raises(TraceNotFoundError) as caught:
        _fetch(backend, tid)
    assert str(caught.value) == f"trace ID {tid} not found in jaeger at {backend.url}"


def test_api_v3_in_band_not_found_error_is_the_same_one_line(backend: FakeBackend) -> None:
    tid = "0af7651916cd43dd8448eb211c80319c"
    backend.routes[f"/api/v3/traces/{tid}"] = Reply(
        200,
        json.dumps(
            {"error": {"grpcCode": 5, "httpCode": 404, "message": "trace not found"}}
        ).encode(),
    )
    with pytest.raises(TraceNotFoundError, match=f"^trace ID {tid} not found in jaeger at "):
        _fetch(backend, tid)


def test_server_error_is_reported_with_its_status_and_the_start_of_its_body(
    backend: FakeBackend,
) -> None:
    tid = "0af7651916cd43dd8448eb211c80319c"
    backend.routes[f"/api/v3/traces/{tid}"] = Reply(
        500, b"storage backend unavailable\n", "text/plain"
    )
    with pytest.raises(SourceError) as caught:
        _fetch(backend, tid)
    assert str(caught.value) == (
        f"jaeger at {backend.url} answered HTTP 500: storage backend unavailable"
    )


def test_refused_access_says_to_pass_a_header(backend: FakeBackend) -> None:
    tid = "0af7651916cd43dd8448eb211c80319c"
    backend.routes[f"/api/v3/traces/{tid}"] = Reply(401, b"unauthorized", "text/plain")
    with pytest.raises(SourceError, match=r"refused access \(HTTP 401\).*--header"):
        _fetch(backend, tid)


def test_headers_given_with_header_reach_the_backend(backend: FakeBackend) -> None:
    name = "vercel__fallback"
    tid = shapes.trace_id_of(name)
    backend.routes[f"/api/v3/traces/{tid}"] = Reply(body=shapes.jaeger_v3(name))
    _fetch(backend, tid, headers=(("Authorization", "Bearer s3cret"), ("X-Tenant", "a")))
    assert backend.requests[0].headers["authorization"] == "Bearer s3cret"
    assert backend.requests[0].headers["x-tenant"] == "a"


def test_truncated_body_is_one_line_not_a_json_traceback(backend: FakeBackend) -> None:
    name = "vercel__fallback"
    tid = shapes.trace_id_of(name)
    body = shapes.jaeger_v3(name)
    backend.routes[f"/api/v3/traces/{tid}"] = Reply(body=body, truncate_to=len(body) // 2)
    with pytest.raises(SourceError, match="truncated body") as caught:
        _fetch(backend, tid)
    assert "\n" not in str(caught.value)


def test_body_cut_without_a_length_is_an_unexpected_body(backend: FakeBackend) -> None:
    name = "vercel__fallback"
    tid = shapes.trace_id_of(name)
    body = shapes.jaeger_v3(name)
    backend.routes[f"/api/v3/traces/{tid}"] = Reply(body=body[: len(body) // 2])
    with pytest.raises(SourceError, match=f"^unexpected body from jaeger at {backend.url}"):
        _fetch(backend, tid)


def test_a_backend_that_never_answers_is_given_up_on_after_the_timeout(
    backend: FakeBackend,
) -> None:
    tid = "0af7651916cd43dd8448eb211c80319c"
    backend.routes[f"/api/v3/traces/{tid}"] = Reply(delay_s=10)
    started = time.monotonic()
    with pytest.raises(SourceError, match=r"no answer within 0\.5s \(--timeout\)"):
        _fetch(backend, tid, timeout_s=0.5)
    assert time.monotonic() - started < 3


def test_a_backend_dribbling_its_body_is_cut_off_at_the_deadline(backend: FakeBackend) -> None:
    name = "vercel__fallback"
    tid = shapes.trace_id_of(name)
    backend.routes[f"/api/v3/traces/{tid}"] = Reply(body=shapes.jaeger_v3(name), drip_s=0.05)
    started = time.monotonic()
    with pytest.raises(SourceError, match=r"did not finish within 0\.5s"):
        _fetch(backend, tid, timeout_s=0.5)
    assert time.monotonic() - started < 3


def test_refused_connection_is_one_line_naming_the_url() -> None:
    url = refused_url()
    source = parse_source(f"jaeger:{url}", http=HttpOptions(timeout_s=2))
    with pytest.raises(SourceError) as caught:
        source.fetch("0af7651916cd43dd8448eb211c80319c")
    assert str(caught.value).startswith(f"cannot connect to jaeger at {url}/api/v3/traces/")
    assert "connection refused" in str(caught.value)
