"""One pipeline: every fixture grades the same through a file, the sidecar and its store.

The same spans reach the grader three ways: `grade --file`, `attest-otel serve` (grades
written onto the forwarded spans), and the sidecar's store read back with `grade --trace-id`
(the stored grades) and with the pipeline grading the stored spans afresh. Every run must
come out with the same agent, verdict, score and per-call verdicts on all of them.

The sidecar receives traces, not logs, so every path reads the spans only: the file is a
copy of the fixture without its log-record lines (frameworks that put content in log events
grade worse in the sidecar than from a file with both signals; the README says so).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from click.testing import CliRunner
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from attest_otel import semconv
from attest_otel.cli import main
from attest_otel.pipeline import Reading, grade_traces
from attest_otel.policy import load_policy
from attest_otel.sources.store_source import StoreSource
from tests.sidecar.downstream import Downstream
from tests.sidecar.helpers import Sidecar, attr
from tests.sidecar.test_wire import _fixture_requests

TRACES = Path(__file__).parent.parent / "fixtures" / "traces"
EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"

Runs = dict[str, tuple[str | None, str, float, dict[str, str]]]
"""Agent span id -> (agent, verdict, score, {tool span id: call verdict})."""


def _fixtures(tmp: Path) -> list[Path]:
    """Every labelled fixture, as a copy holding only its trace requests."""
    out = []
    for label in sorted(TRACES.glob("*.labels.json")):
        trace = label.with_name(label.name.replace(".labels.json", ".json"))
        lines = [
            line
            for line in trace.read_text(encoding="utf-8").splitlines()
            if '"resourceSpans"' in line
        ]
        copy = tmp / trace.name
        copy.write_text("\n".join(lines) + "\n", encoding="utf-8")
        out.append(copy)
    return out


def _policy(tmp: Path) -> Path:
    """One policy for every fixture: per agent, the union of what the labels allow."""
    agents: dict[str, dict[str, Any]] = {}
    for label in TRACES.glob("*.labels.json"):
        for run in json.loads(label.read_text(encoding="utf-8"))["runs"]:
            policy = run.get("policy") or {}
            entry = agents.setdefault(run["agent"], {"allowed_tools": [], "tool_fallbacks": {}})
            for tool in policy.get("allowed_tools") or []:
                if tool not in entry["allowed_tools"]:
                    entry["allowed_tools"].append(tool)
            for tool, alts in (policy.get("tool_fallbacks") or {}).items():
                have = entry["tool_fallbacks"].setdefault(tool, [])
                have.extend(a for a in alts if a not in have)
    # A hand-instrumented agent's own attribute names reach the sidecar only through a
    # declared dialect: the policy carries the one its fixtures are read with.
    declared = yaml.safe_load((TRACES.parent / "dialects" / "handmade.yaml").read_text())
    path = tmp / "policy.yaml"
    path.write_text(yaml.safe_dump({"agents": agents, "dialects": declared["dialects"]}))
    return path


def _from_json(out: str) -> Runs:
    runs: Runs = {}
    for trace in json.loads(out)["traces"]:
        for run in trace["runs"]:
            result = run["result"]
            calls = {
                f["metadata"]["span_id"]: f["verdict"]
                for f in result["findings"]
                if f["metadata"].get("span_id")
            }
            runs[run["span_id"]] = (run["agent"], result["verdict"], result["score"], calls)
    return runs


def _grade(*args: str) -> Runs:
    result = CliRunner().invoke(main, ["grade", "--json", *args])
    assert result.exit_code in (0, 1), result.output
    return _from_json(result.stdout)


def _from_spans(spans: list[Any], runs: Runs) -> Runs:
    """What the sidecar wrote onto the forwarded spans, for the runs `runs` names."""
    by_id = {s.span_id.hex(): s for s in spans}
    out: Runs = {}
    for span_id, (agent, _, _, calls) in runs.items():
        span = by_id[span_id]
        verdict = attr(span.attributes, semconv.ATTEST_TOOL_USE_VERDICT)
        score = attr(span.attributes, semconv.ATTEST_TOOL_USE_SCORE)
        tool_verdicts = {sid: attr(by_id[sid].attributes, semconv.ATTEST_VERDICT) for sid in calls}
        out[span_id] = (agent, verdict, score, tool_verdicts)
    return out


@pytest.mark.timeout(300)
def test_every_fixture_grades_the_same_from_a_file_the_sidecar_and_its_store(
    tmp_path: Path, downstream: Downstream, sidecar: Sidecar
) -> None:
    policy = _policy(tmp_path)
    fixtures = _fixtures(tmp_path)
    assert len(fixtures) >= 270

    by_file: dict[str, Runs] = {}
    for path in fixtures:
        by_file[path.name] = _grade("--file", str(path), "--policy", str(policy))
    assert sum(len(r) for r in by_file.values()) >= 300

    sidecar.extra_args = ["--policy", str(policy)]
    sidecar.start()
    channel = grpc.insecure_channel(sidecar.grpc_endpoint)
    export = channel.unary_unary(EXPORT, request_serializer=None, response_deserializer=None)
    sent: set[str] = set()
    trace_of: dict[str, str] = {}
    for path in fixtures:
        for body in _fixture_requests(path):
            export(body, timeout=10)
            for rs in ExportTraceServiceRequest.FromString(body).resource_spans:
                for ss in rs.scope_spans:
                    for span in ss.spans:
                        sent.add(span.span_id.hex())
                        trace_of[path.name] = span.trace_id.hex()
    channel.close()
    assert downstream.wait_spans(sent, timeout=120), sidecar.log()
    forwarded = downstream.spans()

    store = StoreSource(tmp_path / "store.db")
    reading = Reading(load_policy(policy))
    for path in fixtures:
        want = by_file[path.name]
        assert _from_spans(forwarded, want) == want, f"sidecar, {path.name}"
        trace_id = trace_of[path.name]
        # No --policy: given, it would grade again (the stored grade is the sidecar's, made
        # with the same policy), and this is the path that reads the stored grades.
        stored = _grade("--trace-id", trace_id, "--from", f"store:{store.path}")
        assert stored == want, f"store (stored grades), {path.name}"
        decoded = store.fetch(trace_id)
        fresh: Runs = {}
        for graded in grade_traces(decoded.spans, decoded.logs, reading):
            for one in graded.runs:
                calls = {
                    f.metadata["span_id"]: f.verdict
                    for f in one.result.findings
                    if f.metadata.get("span_id")
                }
                fresh[one.run.span_id or ""] = (
                    one.run.agent,
                    one.result.verdict,
                    one.result.score,
                    calls,
                )
        assert fresh == want, f"store (graded again from the stored spans), {path.name}"
    assert sidecar.terminate() == 0
