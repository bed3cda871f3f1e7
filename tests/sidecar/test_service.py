"""The service in-process: lifecycle, the model gate, and grading failures."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from attest_otel.grade.questions import AnswerQuestion, AnswerVerdict, ChoiceVerdict
from attest_otel.model import Run, Step, ToolCall
from attest_otel.sidecar.config import load_service_config
from attest_otel.sidecar.gate import ModelGate
from attest_otel.sidecar.service import build_service
from tests.sidecar.downstream import Downstream


def _config(tmp_path: Path, downstream: Downstream, **extra: Any) -> Any:
    import yaml

    tree = {
        "buffer": {"grace_s": 0.1, "idle_timeout_s": 0.5, "tick_s": 0.02},
        "telemetry": {"logs": False, "metrics": False},
        "grading": {"processes": 0},
        "store": {"path": str(tmp_path / "store.db")},
        **extra,
    }
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(tree))
    return load_service_config(
        path,
        {
            "forward_endpoint": downstream.endpoint,
            # Port 0: the OS picks, the receivers read the port back (no pick-close-reuse race).
            "grpc_endpoint": "127.0.0.1:0",
            "http_endpoint": "localhost:0",
        },
        environ={},
    )


def _agent_request() -> tuple[bytes, str]:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from attest_otel.export.otlp_config import otlp_exporter  # noqa: F401 - SDK import check
    from tests.sidecar.helpers import agent_run

    memory = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(memory))
    tid, _ = agent_run(tp.get_tracer("t"), tools=[("lookup_invoice", None)], answer="It is paid.")
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    data: bytes = encode_spans(memory.get_finished_spans()).SerializeToString()
    return data, tid


def _non_daemon_threads() -> list[str]:
    return sorted(
        t.name for t in threading.enumerate() if not t.daemon and t is not threading.main_thread()
    )


def test_shutdown_without_start_and_twice_is_harmless(
    tmp_path: Path, downstream: Downstream
) -> None:
    service = build_service(_config(tmp_path, downstream))
    assert service.shutdown(1.0)
    assert service.shutdown(1.0)


def test_start_feed_one_trace_shutdown_leaves_no_threads(
    tmp_path: Path, downstream: Downstream
) -> None:
    before = _non_daemon_threads()
    service = build_service(_config(tmp_path, downstream))
    service.start()
    data, _tid = _agent_request()
    assert service.requests.accept(data).ok
    assert service.shutdown(5.0)
    assert service.shutdown(5.0)  # a second time is a no-op
    assert downstream.wait_for(lambda d: len(d.spans()) == 2)
    assert sum(service.stats.traces_graded.values()) == 1
    # The non-daemon threads grpcio leaves behind are its own, shared and bounded.
    left = [t for t in _non_daemon_threads() if t not in before]
    assert [t for t in left if t.startswith("attest-otel")] == []
    assert service.store is not None


def test_a_trace_that_cannot_be_graded_is_forwarded_whole_and_flagged(
    tmp_path: Path, downstream: Downstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every span as it came; the agent span also says it was not graded and why (never
    a blind pass: docs/hostile-input.md, "Grading budget")."""
    import attest_otel.pipeline

    def broken(*_a: Any, **_k: Any) -> Any:
        raise RuntimeError("adapter bug")

    monkeypatch.setattr(attest_otel.pipeline, "runs_from_spans", broken)
    service = build_service(_config(tmp_path, downstream))
    service.start()
    data, _ = _agent_request()
    assert service.requests.accept(data).ok
    assert downstream.wait_for(lambda d: len(d.spans()) == 2, 5)
    service.shutdown(5.0)
    assert service.stats.grade_failures == 1
    forwarded = ExportTraceServiceRequest.FromString(downstream.trace_requests()[0])
    flagged = {}
    for span in forwarded.resource_spans[0].scope_spans[0].spans:
        keys = [kv.key for kv in span.attributes]
        if "attest.tool_use.ungraded" in keys:
            flagged[span.name] = {kv.key: kv.value.string_value for kv in span.attributes[-2:]}
            del span.attributes[-2:]
    assert forwarded == ExportTraceServiceRequest.FromString(data)
    (only,) = flagged.values()
    assert only == {
        "attest.tool_use.verdict": "review",
        "attest.tool_use.ungraded": "RuntimeError: adapter bug",
    }
    assert service.stats.traces_ungraded == {"error": 1}


# --- the model gate ----------------------------------------------------------------------------


class FakeJudge:
    model = "fake-model"

    def __init__(self) -> None:
        self.asked = 0

    def answer(self, questions: Sequence[AnswerQuestion]) -> list[Any]:
        self.asked += len(questions)
        return [AnswerVerdict("acknowledged", "says it failed") for _ in questions]

    def choose(self, questions: Sequence[Any]) -> list[Any]:
        self.asked += len(questions)
        return [ChoiceVerdict(True, "fine") for _ in questions]


def _failing_run(trace_id: str) -> Run:
    call = ToolCall(name="pay", output="Error: declined", is_error=True, span_id="01" * 8)
    return Run(
        task="pay",
        steps=[Step(tool_call=call)],
        final_answer="Payment failed, sorry.",
        trace_id=trace_id,
    )


def test_sampling_is_by_trace_id_so_every_run_of_a_trace_is_treated_alike() -> None:
    gate = ModelGate(
        FakeJudge(), sample_rate=0.5, calls_per_minute=10_000, max_concurrency=2, appropriate=False
    )
    import random

    rng = random.Random(5)
    ids = [rng.randbytes(16).hex() for _ in range(400)]
    first = [gate.sampled(t) for t in ids]
    assert first == [gate.sampled(t) for t in ids]
    assert 120 < sum(first) < 280
    assert gate.sampled("0" * 32) and not gate.sampled("f" * 32)


def test_runs_over_the_budget_are_graded_offline(tmp_path: Path, downstream: Downstream) -> None:
    clock = [0.0]
    judge = FakeJudge()
    gate = ModelGate(
        judge,
        sample_rate=1.0,
        calls_per_minute=2,
        max_concurrency=1,
        appropriate=False,
        clock=lambda: clock[0],
    )
    service = build_service(_config(tmp_path, downstream))
    from attest_otel.sidecar.grading import TraceGrader

    grader = TraceGrader(policy=None, gate=gate, forwarder=service.forwarder, stats=service.stats)
    results = [grader.grade_run(_failing_run("a" * 32)) for _ in range(3)]
    assert [r.metadata["model"] for r in results] == ["fake-model", "fake-model", None]
    assert judge.asked == 2 and gate.over_budget == 1
    clock[0] += 61
    assert grader.grade_run(_failing_run("a" * 32)).metadata["model"] == "fake-model"


def test_model_checks_are_off_unless_the_config_turns_them_on(
    tmp_path: Path, downstream: Downstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    service = build_service(_config(tmp_path, downstream))
    service.start()
    try:
        assert service.gate is None
    finally:
        service.shutdown(2.0)


# --- the agent probe ---------------------------------------------------------------------------


from tests.sidecar.test_wire import TRACES  # noqa: E402 - fixtures shared with test_wire


@pytest.mark.parametrize("path", TRACES, ids=[p.stem for p in TRACES])
def test_the_byte_probe_only_says_agent_where_the_adapters_see_one(path: Path) -> None:
    """Span by span: the buffer's idea of which runs are complete rests on it."""
    from attest_otel.adapt import Role, detect
    from attest_otel.ingest.decode import decode_request
    from attest_otel.sidecar.buffer import HeldTrace, read_shape
    from attest_otel.sidecar.probe import AGENT_BYTES, agent_probe
    from tests.sidecar.test_wire import _fixture_requests

    for data in _fixture_requests(path):
        decoded = decode_request(ExportTraceServiceRequest.FromString(data))
        agents = {
            bytes.fromhex(s.span_id)
            for s in decoded.spans
            if s.attributes and (hit := detect(s)) is not None and hit[1] is Role.AGENT
        }
        if AGENT_BYTES.search(data):
            assert agents, path.name
        trace = HeldTrace(b"t" * 16, bytearray(data), 1, 0, 0, 0, 0)
        assert agent_probe(trace, data, True, read_shape(data)) == agents, path.name


def test_a_trace_over_the_grading_size_cap_is_forwarded_ungraded(
    tmp_path: Path, downstream: Downstream
) -> None:
    data, _tid = _agent_request()
    assert len(data) > 512
    config = _config(
        tmp_path, downstream, grading={"processes": 0, "max_trace_size_mib": 0.5 / 1024}
    )
    service = build_service(config)
    service.start()
    try:
        assert service.requests.accept(data).ok
        assert downstream.wait_for(lambda d: bool(d.spans()))
        # Forwarded as it came: grading (about 40x a trace's bytes) never saw it.
        assert downstream.trace_requests() == [data] or all(
            not s.events for s in downstream.spans()
        )
        assert service.stats.traces_graded["too_large"] == 1
        assert service.stats.runs_graded == 0
    finally:
        service.shutdown(5)
