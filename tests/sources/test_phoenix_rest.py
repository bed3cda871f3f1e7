"""Phoenix's REST spans API, answered by a local server in Phoenix's own span shape (the
live Phoenix test is in tests/phoenix, run by `make test-phoenix`)."""

from __future__ import annotations

import json

import pytest

from attest_otel.errors import SourceError
from attest_otel.model import Span
from attest_otel.sources import HttpOptions, TraceNotFoundError, parse_source
from tests.sources import shapes
from tests.sources.fake_http import FakeBackend, Reply, Seen

NAME = "anthropic_openinference__retry"


def _fetch(backend: FakeBackend, trace_id: str, fragment: str = "") -> list[Span]:
    source = parse_source(f"phoenix:{backend.url}{fragment}", http=HttpOptions(timeout_s=5))
    try:
        return source.fetch(trace_id).spans
    finally:
        source.close()


def _spans_body(spans: list[Span]) -> bytes:
    return json.dumps(shapes.phoenix_spans(spans)).encode()


def test_named_project_spans_come_back_with_their_openinference_kind_restored(
    backend: FakeBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PHOENIX_API_KEY", raising=False)
    original = shapes.original_spans(NAME)
    tid = original[0].trace_id
    backend.routes["/v1/projects/agents/spans"] = Reply(body=_spans_body(original))

    assert _fetch(backend, tid, "#agents") == shapes.expected_from_phoenix(original, "agents")
    (request,) = backend.requests
    assert request.query["trace_id"] == [tid]
    assert "authorization" not in request.headers


def test_without_a_project_every_project_is_searched_until_the_trace_is_found(
    backend: FakeBackend,
) -> None:
    original = shapes.original_spans(NAME)
    tid = original[0].trace_id
    backend.routes["/v1/projects"] = Reply(
        body=json.dumps(
            {
                "data": [
                    {"id": "UHJvamVjdDox", "name": "default"},
                    {"id": "UHJvamVjdDoy", "name": "billing agents"},
                ],
                "next_cursor": None,
            }
        ).encode()
    )
    backend.routes["/v1/projects/default/spans"] = Reply(body=b'{"data": [], "next_cursor": null}')
    backend.routes["/v1/projects/billing agents/spans"] = Reply(body=_spans_body(original))

    assert _fetch(backend, tid) == shapes.expected_from_phoenix(original, "billing agents")


def test_pages_are_followed_by_cursor(backend: FakeBackend) -> None:
    original = shapes.original_spans(NAME)
    tid = original[0].trace_id

    def page(seen: Seen) -> Reply:
        body = shapes.phoenix_spans(original)
        if "cursor" not in seen.query:
            body["data"], body["next_cursor"] = body["data"][:5], "U3Bhbjo2"
        else:
            body["data"] = body["data"][5:]
        return Reply(body=json.dumps(body).encode())

    backend.routes["/v1/projects/default/spans"] = page
    assert _fetch(backend, tid, "#default") == shapes.expected_from_phoenix(original, "default")
    assert [r.query.get("cursor") for r in backend.requests] == [None, ["U3Bhbjo2"]]


def test_spans_of_other_traces_from_a_server_ignoring_the_filter_are_dropped(
    backend: FakeBackend,
) -> None:
    original = shapes.original_spans(NAME)
    other = shapes.original_spans("anthropic_openinference__all_ok")
    tid = original[0].trace_id
    backend.routes["/v1/projects/default/spans"] = Reply(body=_spans_body(other + original))

    assert _fetch(backend, tid, "#default") == shapes.expected_from_phoenix(original, "default")


def test_phoenix_api_key_from_the_environment_is_sent_as_a_bearer_token(
    backend: FakeBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PHOENIX_API_KEY", "px-key")
    original = shapes.original_spans(NAME)
    backend.routes["/v1/projects/default/spans"] = Reply(body=_spans_body(original))
    _fetch(backend, original[0].trace_id, "#default")
    assert backend.requests[0].headers["authorization"] == "Bearer px-key"


def test_unknown_trace_names_phoenix_and_the_project(backend: FakeBackend) -> None:
    tid = "0af7651916cd43dd8448eb211c80319c"
    backend.routes["/v1/projects/default/spans"] = Reply(body=b'{"data": [], "next_cursor": null}')
    with pytest.raises(TraceNotFoundError) as caught:
        _fetch(backend, tid, "#default")
    assert str(caught.value) == (
        f"trace ID {tid} not found in phoenix at {backend.url} (project default)"
    )


def test_unknown_project_is_one_line(backend: FakeBackend) -> None:
    backend.routes["/v1/projects/nope/spans"] = Reply(
        404, b'{"detail": "Project with name nope not found"}'
    )
    with pytest.raises(
        SourceError, match=f"^project 'nope' not found in phoenix at {backend.url}$"
    ):
        _fetch(backend, "0af7651916cd43dd8448eb211c80319c", "#nope")


def test_a_phoenix_too_old_for_the_spans_route_is_named(backend: FakeBackend) -> None:
    backend.routes["/v1/projects/default/spans"] = Reply(404, b'{"detail": "Not Found"}')
    with pytest.raises(SourceError, match=r"needs Phoenix 13\.9 or newer"):
        _fetch(backend, "0af7651916cd43dd8448eb211c80319c", "#default")


def test_json_string_attributes_phoenix_flattened_are_put_back_as_json() -> None:
    from attest_otel.sources.phoenix import restore_json_attributes

    restored = restore_json_attributes(
        {
            "tool.name": "lookup",
            "tool.parameters.type": "object",
            "tool.parameters.required": ["order_id"],
            "metadata.attest.allowed_tools": ["lookup", "charge"],
            "metadata.attest.tool_fallbacks": '{"charge": ["charge_backup"]}',
            "metadata.langgraph_step": 2,
            "metadata.items.0.name": "a",
            "metadata.items.1.name": "b",
            "llm.input_messages.0.message.role": "user",
        }
    )
    assert restored["tool.name"] == "lookup"
    assert restored["llm.input_messages.0.message.role"] == "user"  # not a JSON attribute
    assert json.loads(restored["tool.parameters"]) == {"type": "object", "required": ["order_id"]}
    assert json.loads(restored["metadata"]) == {
        "langgraph_step": 2,
        "items": [{"name": "a"}, {"name": "b"}],
        # attest's policy keys come back flat, the form the adapters read
        "attest.allowed_tools": ["lookup", "charge"],
        "attest.tool_fallbacks": '{"charge": ["charge_backup"]}',
    }
    assert set(restored) == {
        "tool.name",
        "tool.parameters",
        "metadata",
        "llm.input_messages.0.message.role",
    }


def test_a_genai_span_does_not_get_phoenixs_openinference_kind() -> None:
    from attest_otel.sources.phoenix import span_from_phoenix

    raw = {
        "name": "execute_tool lookup",
        "context": {"trace_id": "ab" * 16, "span_id": "cd" * 8},
        "span_kind": "TOOL",
        "start_time": "2026-11-30T04:38:36.357296+00:00",
        "end_time": "2026-11-30T04:38:36.957296+00:00",
        "status_code": "ERROR",
        "attributes": {"gen_ai.operation.name": "execute_tool", "tool.name": "lookup"},
    }
    span = span_from_phoenix(raw)
    assert "openinference.span.kind" not in span.attributes
    assert span.status_code == 2
    assert span.end_ns - span.start_ns == 600_000_000
    raw["attributes"] = {"tool.name": "lookup"}
    assert span_from_phoenix(raw).attributes["openinference.span.kind"] == "TOOL"
