"""collector-config/genai-routing.yaml (the filter processor) and genai-routing-attest.yaml
(attest-otel's routing connector): generated from the dialects' markers, and the real
Collector routes with each exactly the spans `Markers.routes` names (GenAI candidates all)
to the sidecar, the rest straight on, while the sidecar is down too."""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from pathlib import Path
from types import ModuleType

import grpc
import pytest
import yaml
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord

from attest_otel.adapt import runs_from_spans
from attest_otel.adapt.registry import markers
from attest_otel.adapt.spec import DialectSpec
from attest_otel.grade.grader import grade
from attest_otel.ingest.decode import decode_file, is_skeleton
from attest_otel.model import Span
from attest_otel.sidecar.json_in import otlp_json_to_protobuf
from tests.peers.otlp_http_sink import OtlpHttpSink
from tests.peers.servers import Collector, localize, validate
from tests.sidecar.downstream import Downstream
from tests.sidecar.helpers import REPO
from tests.sidecar.test_wire import _fixture_requests

ROUTING = REPO / "collector-config" / "genai-routing.yaml"
ROUTING_ATTEST = REPO / "collector-config" / "genai-routing-attest.yaml"
TRACES = REPO / "tests" / "fixtures" / "traces"
EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
LOGS_EXPORT = "/opentelemetry.proto.collector.logs.v1.LogsService/Export"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_routing", REPO / "tools" / "gen_routing.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["gen_routing"] = module
    spec.loader.exec_module(module)
    return module


def test_the_routing_configs_are_generated_from_the_candidate_markers() -> None:
    generator = _generator()
    assert ROUTING.read_text() == generator.render(), "run tools/gen_routing.py"
    assert ROUTING_ATTEST.read_text() == generator.render_attest(), "run tools/gen_routing.py"


def _fixture_files() -> list[Path]:
    return sorted(p for p in TRACES.glob("*.json") if not p.name.endswith(".labels.json"))


def _routed(span: Span) -> bool:
    """Whether the routing file sends `span` to the sidecar (`Markers.routes`); a skeleton
    is no candidate, and a routed span always is one (its keys are candidate keys)."""
    return not is_skeleton(span) and markers().routes(span.name, span.attributes, span.scope_name)


def test_a_routing_key_outside_the_dialects_key_prefixes_is_refused() -> None:
    with pytest.raises(ValueError, match="routing keys outside"):
        DialectSpec("x", key_prefixes=("x.",), routing_keys=("x.kind", "y.kind"))


def test_grading_only_the_spans_routed_to_the_sidecar_gives_the_same_grades() -> None:
    """What a span not recognised at the Collector would cost: on every recorded stack, the
    runs graded from the spans the routing file sends to the sidecar alone equal the runs
    graded from whole traces."""
    runs = 0
    for path in _fixture_files():
        decoded = decode_file(path)
        marked = [s for s in decoded.spans if _routed(s)]

        def graded(spans: list, logs: list = decoded.logs) -> dict:
            return {
                (r.trace_id, r.span_id): (r.agent, grade(r, judge=None).to_dict())
                for t in runs_from_spans(spans, logs)
                for r in t.runs
            }

        whole = graded(decoded.spans)
        assert graded(marked) == whole, path.name
        runs += len(whole)
    assert runs >= 300


def _send(endpoint: str, method: str, requests: list[bytes]) -> None:
    """Each request to the Collector's OTLP/gRPC receiver, as an app's SDK sends it."""
    with grpc.insecure_channel(endpoint) as channel:
        export = channel.unary_unary(method, request_serializer=None, response_deserializer=None)
        for body in requests:
            export(body, timeout=10)


def _span_ids(requests: list[bytes]) -> set[str]:
    return {
        s.span_id.hex()
        for body in requests
        for rs in ExportTraceServiceRequest.FromString(body).resource_spans
        for ss in rs.scope_spans
        for s in ss.spans
    }


@pytest.mark.parametrize("routing", [ROUTING, ROUTING_ATTEST], ids=lambda p: p.stem)
def test_the_real_collector_routes_what_the_decoders_call_genai(
    tmp_path: Path, routing: Path
) -> None:
    assert validate(routing).returncode == 0
    genai: list[str] = []
    plain: list[str] = []
    requests: list[bytes] = []
    for path in _fixture_files():
        decoded = decode_file(path)
        for span in decoded.spans:
            (genai if _routed(span) else plain).append(span.span_id)
        requests.extend(_fixture_requests(path))
    assert _span_ids(requests) == set(genai) | set(plain) and len(plain) > 50
    sidecar, tempo, jaeger = Downstream().start(), Downstream().start(), Downstream().start()
    sidecar.down = True  # the sidecar is down: plain spans must flow all the same
    text, mapping = localize(
        routing.read_text(),
        {
            "attest-otel:24317": sidecar.endpoint,
            "tempo:4317": tempo.endpoint,
            "jaeger:4317": jaeger.endpoint,
        },
    )
    # The shipped backoff grows to 30 s; a test that brings the sidecar back waits 1 s at most.
    config = yaml.safe_load(text)
    config["exporters"]["otlp_grpc/attest"]["retry_on_failure"]["max_interval"] = "1s"
    collector = Collector(tmp_path, yaml.safe_dump(config), name=routing.stem).start()
    try:
        _send(mapping["0.0.0.0:4317"], EXPORT, requests)
        assert tempo.wait_for(lambda d: len(d.span_ids()) >= len(plain), 30), collector.log()
        time.sleep(0.5)
        assert sorted(tempo.span_ids()) == sorted(plain)
        assert sidecar.span_ids() == []
        sidecar.down = False  # back: the exporter's queue delivers the GenAI part
        assert sidecar.wait_for(lambda d: len(d.span_ids()) >= len(genai), 60), collector.log()
        time.sleep(0.5)
        assert sorted(sidecar.span_ids()) == sorted(genai)
    finally:
        collector.stop()
        for server in (sidecar, tempo, jaeger):
            server.stop()


def _log_requests() -> list[bytes]:
    """Every fixture's log records, as the apps' SDKs sent them."""
    out = []
    for path in _fixture_files():
        text = path.read_text()
        try:
            docs = [json.loads(text)]
        except json.JSONDecodeError:
            docs = [json.loads(line) for line in text.splitlines() if line.strip()]
        out += [
            otlp_json_to_protobuf(json.dumps(d).encode(), "logs")
            for d in docs
            if "resourceLogs" in d
        ]
    return [*out, _app_logs()]


def _app_logs() -> bytes:
    """The recorded stacks log only GenAI content; an app logs its own lines too, in scopes
    of their own and beside GenAI records in one scope."""
    req = ExportLogsServiceRequest()
    rl = req.resource_logs.add()
    rl.resource.attributes.add(key="service.name").value.string_value = "billing-app"
    plain = rl.scope_logs.add()
    plain.scope.name = "billing.http"
    for i in range(3):
        plain.log_records.add(time_unix_nano=1 + i).body.string_value = f"GET /orders/{i} 200"
    mixed = rl.scope_logs.add()
    mixed.scope.name = "billing.worker"
    mixed.log_records.add(time_unix_nano=10, event_name="gen_ai.user.message")
    mixed.log_records.add(time_unix_nano=11).body.string_value = "retrying payment"
    keyed = mixed.log_records.add(time_unix_nano=12)
    keyed.attributes.add(key="gen_ai.operation.name").value.string_value = "execute_tool"
    return req.SerializeToString()


def _key(record: LogRecord) -> str:
    """A log record as bytes, so equal records stay apart by count; an empty body as none
    (the Collector writes an empty body where the SDK wrote none)."""
    if record.body.ByteSize() == 0:
        record = LogRecord.FromString(record.SerializeToString())
        record.ClearField("body")
    return record.SerializeToString().hex()


def _records(requests: list[bytes]) -> list[str]:
    return [
        _key(r)
        for body in requests
        for rl in ExportLogsServiceRequest.FromString(body).resource_logs
        for sl in rl.scope_logs
        for r in sl.log_records
    ]


@pytest.mark.parametrize("routing", [ROUTING, ROUTING_ATTEST], ids=lambda p: p.stem)
def test_the_real_collector_routes_the_genai_log_records_to_the_sidecar(
    tmp_path: Path, routing: Path
) -> None:
    requests = _log_requests()
    expected: dict[bool, list[str]] = {True: [], False: []}
    for body in requests:
        for rl in ExportLogsServiceRequest.FromString(body).resource_logs:
            for sl in rl.scope_logs:
                for r in sl.log_records:
                    keys = {a.key for a in r.attributes}
                    genai = markers().routes_record(r.event_name, keys, sl.scope.name)
                    expected[genai].append(_key(r))
    assert len(expected[True]) > 50 and len(expected[False]) == 4
    sidecar, loki = Downstream().start(), OtlpHttpSink().start()
    text, mapping = localize(
        routing.read_text(),
        {"attest-otel:24317": sidecar.endpoint},
        http_default=loki.host_port,
    )
    collector = Collector(tmp_path, text, name=routing.stem).start()
    try:
        _send(mapping["0.0.0.0:4317"], LOGS_EXPORT, requests)
        total = len(expected[True])
        assert sidecar.wait_for(lambda d: len(_records(d.requests["logs"])) >= total, 30), (
            collector.log()
        )
        assert loki.wait_for(lambda got: len(got) >= len(expected[False]), 30), collector.log()
        time.sleep(0.5)
        assert sorted(_records(sidecar.requests["logs"])) == sorted(expected[True])
        assert sorted(_key(r) for r in loki.records()) == sorted(expected[False])
    finally:
        collector.stop()
        sidecar.stop()
        loki.stop()
