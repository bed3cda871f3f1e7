"""A dialect declared in one module reaches every part that must know its markers.

The toy dialect below is the whole of a new framework: its reader and its `DialectSpec`,
registered once. Without the registration (and before this issue, without editing four
other modules) its spans are skeletons, no sidecar test holds them and `inspect` has no
hint for them; with it, each of those parts knows them, and unregistering takes it back.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from attest_otel.adapt import Role, detect, registry
from attest_otel.adapt.base import ALL, Exchange, ToolInfo, Want, attr_str
from attest_otel.adapt.detect import claimed
from attest_otel.adapt.explain import capture_hints
from attest_otel.adapt.spec import DialectSpec
from attest_otel.cli import main
from attest_otel.ingest.candidate import is_genai_candidate, is_genai_log
from attest_otel.ingest.decode import decode_bytes, decode_request, is_skeleton
from attest_otel.model import LogRecord, Span
from attest_otel.sidecar import probe, wire
from attest_otel.sidecar.buffer import HeldTrace
from attest_otel.sidecar.shape import read_shape
from tests.otlp_encodings import to_otlp_json

REPO = Path(__file__).resolve().parents[2]
TRACE = bytes.fromhex("0af7651916cd43dd8448eb211c80319c")
AGENT = bytes.fromhex("b7ad6b7169203331")
TOOL = bytes.fromhex("00f067aa0ba902b7")


class Toy:
    """A framework nobody has seen: `toy.kind` says the role, `toy.name` the name, and no
    content is ever recorded."""

    name = "toy"

    def detect(self, span: Span) -> Role | None:
        kind = span.attributes.get("toy.kind")
        if kind is None:
            return Role.AGENT if span.scope_name == "toy.tracer" else None
        return {"agent": Role.AGENT, "tool": Role.TOOL}.get(str(kind), Role.OTHER)

    def agent_name(self, span: Span) -> str | None:
        return attr_str(span.attributes, "toy.name")

    def tool(self, span: Span) -> ToolInfo:
        return ToolInfo(name=attr_str(span.attributes, "toy.name"))

    def exchange(self, span: Span, logs: Sequence[LogRecord], want: Want = ALL) -> Exchange:
        return Exchange()

    def policy_values(self, span: Span) -> tuple[Any, Any]:
        return None, None


SPEC = DialectSpec(
    "toy",
    Toy(),
    scopes=("toy.tracer",),
    key_prefixes=("toy.",),
    name_prefixes=("toy ",),
    event_prefixes=("toy.",),
    capture="TOY_RECORD_CONTENT=1",
    agent_attributes=(("toy.kind", "agent"),),
)


@pytest.fixture
def toy() -> Iterator[DialectSpec]:
    registry.register(SPEC)
    try:
        yield SPEC
    finally:
        registry.unregister(SPEC.name)


def _request(scope: str = "acme.app") -> ExportTraceServiceRequest:
    """An agent span and its tool span, in a scope no built-in marker knows."""
    req = ExportTraceServiceRequest()
    scope_spans = req.resource_spans.add().scope_spans.add()
    scope_spans.scope.name = scope
    for span_id, parent, name, kind, what in (
        (AGENT, b"", "run billing", "agent", "billing_agent"),
        (TOOL, AGENT, "do lookup", "tool", "lookup_order"),
    ):
        span = scope_spans.spans.add(
            trace_id=TRACE,
            span_id=span_id,
            parent_span_id=parent,
            name=name,
            start_time_unix_nano=1_000 + len(parent),
            end_time_unix_nano=2_000,
        )
        span.attributes.add(key="toy.kind").value.string_value = kind
        span.attributes.add(key="toy.name").value.string_value = what
    return req


def _routing() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_routing", REPO / "tools" / "gen_routing.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["gen_routing"] = module
    spec.loader.exec_module(module)
    return module


def _decoded_in_full(req: ExportTraceServiceRequest) -> list[bool]:
    data = req.SerializeToString()
    proto = decode_request(ExportTraceServiceRequest.FromString(data), data=data).spans
    json_spans = decode_bytes(to_otlp_json(req), content_type="application/json").spans
    full = [not is_skeleton(s) for s in proto]
    assert full == [not is_skeleton(s) for s in json_spans]
    return full


def test_an_unregistered_framework_is_unknown_everywhere() -> None:
    req = _request()
    data = req.SerializeToString()
    assert _decoded_in_full(req) == [False, False]
    assert wire.GENAI_KEY_BYTES.search(data) is None
    assert [f.genai for f in read_shape(data)] == [False, False]
    assert capture_hints(["toy"]) == []


def test_a_dialect_declared_in_one_module_is_decoded_detected_held_probed_and_hinted(
    toy: DialectSpec, tmp_path: Path
) -> None:
    req = _request()
    data = req.SerializeToString()

    # the candidate filter and the protobuf key scan (and the JSON walker) decode it in full
    assert _decoded_in_full(req) == [True, True]
    assert is_genai_candidate("anything", ["toy.kind"], "acme.app")
    assert is_genai_candidate("toy thing", [], "acme.app")
    assert is_genai_candidate("x", [], "toy.tracer")
    assert is_genai_log("toy.message", [], "acme.app")

    # detect claims it, by its keys, and by its own scope for a span with no attributes
    spans = decode_request(ExportTraceServiceRequest.FromString(data), data=data).spans
    assert [(hit[0].name, hit[1]) for s in spans if (hit := detect(s))] == [
        ("toy", Role.AGENT),
        ("toy", Role.TOOL),
    ]
    assert all(claimed(s) for s in spans)
    bare = Span("t", "s", None, "toy run", scope_name="toy.tracer")
    hit = detect(bare)
    assert hit is not None and hit[0].name == "toy" and hit[1] is Role.AGENT

    # the sidecar holds its traces and finds its agent span from the bytes alone
    assert wire.GENAI_KEY_BYTES.search(data) is not None
    shape = read_shape(data)
    assert [f.genai for f in shape] == [True, True]
    assert [probe._is_agent_record(f.record) for f in shape] == [True, False]
    held = HeldTrace(TRACE, bytearray(data), 1, 0, 0, 0, 0)
    assert probe.agent_probe(held, data, True, shape) == {AGENT}
    assert wire.EVENT_PREFIXES and any(p == b"toy." for p in wire.EVENT_PREFIXES)
    assert any(b"toy." in m for m in probe.AGENT_MARKS)
    # ... and by its exact scope alone, in the wire core's one-walk plain test as well
    lone = ExportTraceServiceRequest()
    scope_spans = lone.resource_spans.add().scope_spans.add()
    scope_spans.scope.name = "toy.tracer"
    step = scope_spans.spans.add(trace_id=TRACE, span_id=AGENT, name="step")
    assert not step.attributes
    lone_data = lone.SerializeToString()
    assert wire.check_traces(lone_data) == (None, None)
    assert wire.plain_request(lone_data) is None
    assert [f.genai for f in read_shape(lone_data)] == [True]

    # the Collector's routing file would send it to the sidecar
    routing = _routing()
    assert any('span.attributes["toy.kind"] != nil' in m for m in routing.markers())
    assert any("toy " in m for m in routing.markers())
    assert "      - 'toy.kind'\n" in routing.render_attest()  # the connector's keys too

    # inspect reads it as `toy` and says how to turn its content capture on
    path = tmp_path / "toy.pb"
    path.write_bytes(data)
    result = CliRunner().invoke(main, ["inspect", "--file", str(path), "--json"])
    assert result.exit_code == 0, result.output
    (trace,) = json.loads(result.stdout)["traces"]
    assert {s["dialect"] for s in trace["spans"]} == {"toy"}
    (run,) = trace["runs"]
    assert run["agent"] == "billing_agent"
    assert [c["name"] for c in run["calls"]] == ["lookup_order"]
    assert run["capture"] == ["toy: TOY_RECORD_CONTENT=1"]


def test_unregistering_takes_it_back_everywhere(toy: DialectSpec) -> None:
    registry.unregister(toy.name)
    try:
        test_an_unregistered_framework_is_unknown_everywhere()
        assert detect(Span("t", "s", None, "x", attributes={"toy.kind": "agent"})) is None
    finally:
        registry.register(toy)


def test_a_registered_dialect_is_asked_after_the_built_ins_unless_placed() -> None:
    gen_ai_agent = Span("t", "s", None, "x", attributes={"gen_ai.operation.name": "invoke_agent"})
    built_in = detect(gen_ai_agent)
    assert built_in is not None
    greedy = DialectSpec("greedy", _Greedy(), key_prefixes=("gen_ai.",))
    registry.register(greedy)
    try:
        assert detect(gen_ai_agent) == built_in
    finally:
        registry.unregister("greedy")
    registry.register(greedy, before=built_in[0].name)
    try:
        hit = detect(gen_ai_agent)
        assert hit is not None and hit[0].name == "greedy"
    finally:
        registry.unregister("greedy")
    assert detect(gen_ai_agent) == built_in


class _Greedy(Toy):
    name = "greedy"

    def detect(self, span: Span) -> Role | None:
        return Role.AGENT


def test_a_spec_that_would_match_everything_or_misnames_its_reader_is_refused() -> None:
    with pytest.raises(ValueError, match="empty marker"):
        DialectSpec("x", key_prefixes=("",))
    with pytest.raises(ValueError, match="names a reader"):
        DialectSpec("x", Toy())
    with pytest.raises(ValueError, match=r"`\.word`"):
        DialectSpec("x", name_suffixes=("tool",))
    with pytest.raises(ValueError, match="already registered"):
        registry.register(DialectSpec("genai"))
    with pytest.raises(ValueError, match="built in"):
        registry.unregister("genai")


def test_every_built_in_reader_is_declared_once_in_detection_order() -> None:
    names = [s.name for s in registry.BUILTIN]
    assert len(set(names)) == len(names)
    assert [d.name for d in registry.readers()] == names
    assert names[0] == "openinference" and names[-2:] == ["genai", "genai-old"]
    assert all(s.capture for s in registry.BUILTIN), "each built-in says how to capture content"


TRACES = REPO / "tests" / "fixtures" / "traces"


def test_each_built_in_declaration_covers_every_span_its_reader_claims_in_the_fixtures() -> None:
    """Per dialect, not just the union: a marker removed from one declaration because some
    other dialect's happens to cover it today would break when that one changes."""
    by_name = {s.name: s for s in registry.specs()}
    claimed_by: dict[str, int] = {}
    for path in sorted(TRACES.glob("*.json")):
        if path.name.endswith(".labels.json"):
            continue
        for span in decode_bytes(path.read_bytes(), lazy=False).spans:
            hit = detect(span)
            if hit is None:
                continue
            spec = by_name[hit[0].name]
            claimed_by[spec.name] = claimed_by.get(spec.name, 0) + 1
            assert spec.covers(span.name, span.attributes, span.scope_name), (
                f"{path.name}: {spec.name} claims {span.name!r} but does not declare it"
            )
    # the fixtures exercise the built-ins (the assertion above is not vacuous)
    assert {"openinference", "openllmetry", "vercel", "adk", "pydantic-ai", "strands"} <= set(
        claimed_by
    ), claimed_by


_M = registry.markers()
_MARKERS = sorted(
    {*_M.key_prefixes, *_M.name_prefixes, *_M.name_suffixes, *_M.scopes, *_M.scope_markers}
)
_text = st.text(alphabet="abcdefghilmnoprstuvwxyz_.:/ ATF", max_size=12)
_words = st.one_of(
    _text,
    st.builds(lambda a, m, b: a + m + b, _text, st.sampled_from(_MARKERS), _text),
    st.sampled_from(_MARKERS).map(str.upper),
)
"""Text around the markers themselves, so both answers come up often."""


@settings(max_examples=300, deadline=None)
@given(name=_words, keys=st.lists(_words, max_size=4), scope=_words)
def test_the_fast_candidate_test_is_the_union_of_the_declarations(
    name: str, keys: list[str], scope: str
) -> None:
    expected = any(s.covers(name, keys, scope) for s in registry.specs())
    assert is_genai_candidate(name, keys, scope) == expected
