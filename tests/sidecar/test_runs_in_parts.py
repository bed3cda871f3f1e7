"""Multi-agent traces arrive in parts: every run is still graded whole, as `grade --file` does.

An outer agent calls a sub-agent as a tool. The sub-agent finishes, its spans (and the outer
agent's first model call) are exported; the outer agent thinks on, and its remaining spans
(the tool span that wrapped the sub-agent, the final model call, the outer agent span) come
seconds later. Replayed here with a real 4 s gap into a sidecar with the default grace (1 s)
and idle timeout (10 s): the verdicts written onto the forwarded spans (or, for a run graded
again, its `attest.grade` span) must equal `grade --file` on the same spans, every span that
`grade --file` judges must carry its verdict, and every span must arrive exactly once.
"""

from __future__ import annotations

import collections
import json
import time
from pathlib import Path
from typing import Any

import grpc
import pytest
from click.testing import CliRunner
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from attest_otel import semconv
from attest_otel.adapt import Role, detect
from attest_otel.cli import main
from attest_otel.ingest.decode import decode_request
from tests.sidecar.downstream import Downstream
from tests.sidecar.helpers import Sidecar, attr
from tests.sidecar.test_wire import _fixture_requests

TRACES = Path(__file__).parent.parent / "fixtures" / "traces"
EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
FRAMEWORKS = ["pydantic_ai_v5", "strands_latest", "adk", "crewai_openinference"]
"""Four frameworks whose nested run ends well before its outer run (3 to 5 spans later)."""
GAP_S = 4.0
DEFAULT_TIMERS = {"buffer": {"grace_s": 1.0, "idle_timeout_s": 10.0, "tick_s": 0.02}}

Runs = dict[str, tuple[str, float, dict[str, str]]]
"""Agent span id -> (verdict, score, {tool span id: call verdict})."""


def split_at_nested_run(requests: list[bytes]) -> tuple[bytes, bytes, int]:
    """(the spans that ended by the end of the innermost agent span, the rest, how many are
    in the rest), as two requests with the same resources and scopes."""
    spans = [
        s
        for data in requests
        for s in decode_request(ExportTraceServiceRequest.FromString(data)).spans
    ]
    parent = {s.span_id: s.parent_id for s in spans}
    agents = {
        s.span_id: s
        for s in spans
        if s.attributes and (hit := detect(s)) is not None and hit[1] is Role.AGENT
    }

    def depth(span_id: str) -> int:
        n, node = 0, parent.get(span_id)
        while node:
            n += node in agents
            node = parent.get(node)
        return n

    inner = max(agents.values(), key=lambda s: (depth(s.span_id), -s.end_ns))
    first, rest = ExportTraceServiceRequest(), ExportTraceServiceRequest()
    later = 0
    for data in requests:
        for rs in ExportTraceServiceRequest.FromString(data).resource_spans:
            for part, keep in ((first, True), (rest, False)):
                out = part.resource_spans.add()
                out.resource.CopyFrom(rs.resource)
                for ss in rs.scope_spans:
                    oss = out.scope_spans.add()
                    oss.scope.CopyFrom(ss.scope)
                    for span in ss.spans:
                        if (span.end_time_unix_nano <= inner.end_ns) == keep:
                            oss.spans.append(span)
                            later += not keep
    return first.SerializeToString(), rest.SerializeToString(), later


def _by_file(path: Path) -> Runs:
    result = CliRunner().invoke(main, ["grade", "--json", "--file", str(path)])
    assert result.exit_code in (0, 1), result.output
    runs: Runs = {}
    for trace in json.loads(result.stdout)["traces"]:
        for run in trace["runs"]:
            res = run["result"]
            calls = {
                f["metadata"]["span_id"]: f["verdict"]
                for f in res["findings"]
                if f["metadata"].get("span_id")
            }
            runs[run["span_id"]] = (res["verdict"], res["score"], calls)
    return runs


def written(spans: list[Any], want: Runs) -> Runs:
    """What the sidecar says of each run of `want`: on the spans, or on the run's latest
    `attest.grade` span when it graded the run again."""
    by_id = {s.span_id.hex(): s for s in spans}
    regrades = {s.parent_span_id.hex(): s for s in spans if s.name == semconv.GRADE_SPAN_NAME}
    out: Runs = {}
    for span_id, (_, _, calls) in want.items():
        grade = regrades.get(span_id)
        if grade is not None:
            call_verdicts = {
                attr(e.attributes, semconv.ATTEST_SPAN_ID): attr(
                    e.attributes, semconv.ATTEST_VERDICT
                )
                for e in grade.events
                if attr(e.attributes, semconv.ATTEST_SPAN_ID)
            }
            out[span_id] = (
                attr(grade.attributes, semconv.ATTEST_TOOL_USE_VERDICT),
                attr(grade.attributes, semconv.ATTEST_TOOL_USE_SCORE),
                {sid: call_verdicts.get(sid) for sid in calls},
            )
            continue
        agent = by_id[span_id]
        out[span_id] = (
            attr(agent.attributes, semconv.ATTEST_TOOL_USE_VERDICT),
            attr(agent.attributes, semconv.ATTEST_TOOL_USE_SCORE),
            {sid: attr(by_id[sid].attributes, semconv.ATTEST_VERDICT) for sid in calls},
        )
    return out


PROCESSES = pytest.mark.parametrize("processes", [0, 1], ids=["in-process", "grading-process"])
"""Late spans are graded again where the sidecar grades: in its own process, or in a grading
process (`grading.processes`), whose slimmed runs must still say everything written."""


@pytest.mark.timeout(120)
@PROCESSES
def test_multi_agent_traces_sent_in_parts_grade_as_from_a_file(
    tmp_path: Path, downstream: Downstream, sidecar: Sidecar, processes: int
) -> None:
    parts: dict[str, tuple[bytes, bytes, int]] = {}
    want: dict[str, Runs] = {}
    for name in FRAMEWORKS:
        fixture = TRACES / f"{name}__multi_agent.json"
        parts[name] = split_at_nested_run(_fixture_requests(fixture))
        lines = [
            line
            for line in fixture.read_text(encoding="utf-8").splitlines()
            if '"resourceSpans"' in line
        ]
        copy = tmp_path / fixture.name
        copy.write_text("\n".join(lines) + "\n", encoding="utf-8")
        want[name] = _by_file(copy)
        assert len(want[name]) == 2, name  # the outer run and the nested one
    assert sum(p[2] for p in parts.values()) == 17  # the spans that come later

    sidecar.config = {**DEFAULT_TIMERS, "grading": {"processes": processes}}
    sidecar.start()
    channel = grpc.insecure_channel(sidecar.grpc_endpoint)
    export = channel.unary_unary(EXPORT, request_serializer=None, response_deserializer=None)
    sent: set[str] = set()
    for first, _, _ in parts.values():
        export(first, timeout=10)
    time.sleep(GAP_S)  # the outer agents think on
    for _, rest, _ in parts.values():
        export(rest, timeout=10)
    channel.close()
    for first, rest, _ in parts.values():
        for data in (first, rest):
            req = ExportTraceServiceRequest.FromString(data)
            sent |= {
                s.span_id.hex()
                for rs in req.resource_spans
                for ss in rs.scope_spans
                for s in ss.spans
            }
    assert downstream.wait_spans(sent, timeout=30), sidecar.log()
    time.sleep(0.5)  # anything sent twice, or a grade span, would come now
    spans = downstream.spans()
    counts = collections.Counter(
        s.span_id.hex() for s in spans if s.name != semconv.GRADE_SPAN_NAME
    )
    assert {i for i, c in counts.items() if c != 1} == set()
    for name in FRAMEWORKS:
        assert written(spans, want[name]) == want[name], name
    assert sidecar.terminate() == 0
    log = sidecar.log()
    # CrewAI's outer run has no span in the first part (no model spans, and the nested run
    # hangs under a kickoff span still running), so nothing says a run is still open: the
    # nested run is graded on its own, and the outer run's 4 spans, graded again with it,
    # carry their grade written in place (they had not gone out): no grade span is needed.
    assert "spans_late=4 late_ungraded=0" in log and "traces_regraded=1" in log, log
    assert not [s for s in spans if s.name == semconv.GRADE_SPAN_NAME]


@pytest.mark.timeout(60)
@PROCESSES
def test_a_late_span_is_graded_with_its_run_and_the_new_grade_replaces_the_old(
    tmp_path: Path, downstream: Downstream, sidecar: Sidecar, processes: int
) -> None:
    """A tool call that failed reaches the sidecar after its run was graded clean: the run is
    graded again, the late span goes out annotated, the run's new grade as an `attest.grade`
    span under the agent span, and the store holds the new grade instead of the old one."""
    from opentelemetry import trace as otel
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.trace import NonRecordingSpan, Status, StatusCode

    from attest_otel.store import TraceStore
    from tests.sidecar.helpers import agent_run, provider

    sidecar.config = {"grading": {"processes": processes}}
    sidecar.start()
    tp = provider(OTLPSpanExporter(endpoint=sidecar.grpc_endpoint, insecure=True))
    tracer = tp.get_tracer("tests.sidecar")
    trace_id, ids = agent_run(tracer, answer="Your card was charged.")
    agent_id = ids[-1]
    tp.force_flush()
    assert downstream.wait_spans(set(ids)), sidecar.log()
    by_id = {s.span_id.hex(): s for s in downstream.spans()}
    assert attr(by_id[agent_id].attributes, semconv.ATTEST_TOOL_USE_VERDICT) == "pass"
    store = TraceStore(tmp_path / "store.db", readonly=True)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        stored = store.get_trace(trace_id)
        if stored is not None and stored.grades:
            break
        time.sleep(0.1)
    assert stored is not None and [g.result["verdict"] for g in stored.grades] == ["pass"]

    agent = otel.SpanContext(
        int(trace_id, 16),
        int(agent_id, 16),
        is_remote=True,
        trace_flags=otel.TraceFlags(otel.TraceFlags.SAMPLED),
    )
    with tracer.start_as_current_span(
        "execute_tool charge_card",
        context=otel.set_span_in_context(NonRecordingSpan(agent)),
        attributes={
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "charge_card",
            "gen_ai.tool.call.id": "call_late",
            "gen_ai.tool.call.arguments": json.dumps({"invoice": 42}),
        },
    ) as late:
        late.set_status(Status(StatusCode.ERROR, "charge_card failed: card declined"))
    late_id = format(late.get_span_context().span_id, "016x")
    tp.force_flush()

    def regraded(d: Downstream) -> bool:
        return any(s.name == semconv.GRADE_SPAN_NAME for s in d.spans())

    assert downstream.wait_for(regraded, timeout=15), sidecar.log()
    spans = downstream.spans()
    [grade] = [s for s in spans if s.name == semconv.GRADE_SPAN_NAME]
    assert grade.trace_id.hex() == trace_id and grade.parent_span_id.hex() == agent_id
    late_out = next(s for s in spans if s.span_id.hex() == late_id)
    new_verdict = attr(grade.attributes, semconv.ATTEST_TOOL_USE_VERDICT)
    assert new_verdict != "pass"
    assert attr(late_out.attributes, semconv.ATTEST_VERDICT) is not None  # annotated in place

    # The same as `grade --file` on every span of the trace.
    every = tmp_path / "trace.pb"
    request = ExportTraceServiceRequest()
    for s in spans:
        if s.name != semconv.GRADE_SPAN_NAME:
            rs = request.resource_spans.add()
            rs.scope_spans.add().spans.append(s)
    every.write_bytes(request.SerializeToString())
    want = _by_file(every)
    assert want[agent_id][0] == new_verdict
    assert written(spans, {agent_id: want[agent_id]}) == {agent_id: want[agent_id]}

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        stored = store.get_trace(trace_id)
        if stored is not None and stored.grades and stored.grades[0].result["verdict"] != "pass":
            break
        time.sleep(0.1)
    assert stored is not None
    assert [(g.span_id, g.result["verdict"]) for g in stored.grades] == [(agent_id, new_verdict)]
    store.close()
    tp.shutdown()
    assert sidecar.terminate() == 0
    assert "traces_regraded=1" in sidecar.log()
