"""Grades appended to the spans' bytes read back as the grades written through messages.

The sidecar writes a grade by appending its attributes and events to each span's encoding
(`annotate.annotation_bytes`, `wire.append_to_spans`); the message path (`annotate_spans`
then a serialise) stays for spans that carry an earlier grade. Both must give the same
spans, for every fixture and for the benchmark's agent and plain traces.
"""

from __future__ import annotations

import sys
from pathlib import Path

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from attest_otel.content import KEEP, ContentPolicy
from attest_otel.grade.grader import grade
from attest_otel.ingest.decode import decode_request
from attest_otel.sidecar.grading_worker import grade_decoded
from tests.sidecar.test_wire import _fixture_requests

TRACES = Path(__file__).parent.parent / "fixtures" / "traces"
BENCH = Path(__file__).parent.parent.parent / "bench"


def _graded(data: bytes, by_bytes: bool, content: ContentPolicy = KEEP) -> bytes:
    request = ExportTraceServiceRequest.FromString(data)
    decoded = decode_request(request, data=data)
    out, _ = grade_decoded(
        request,
        decoded,
        None,
        lambda run: grade(run, judge=None),
        content,
        data=data if by_bytes else None,
        now_ns=123,
    )
    return out


def _requests() -> list[bytes]:
    out: list[bytes] = []
    for path in sorted(TRACES.glob("*.json")):
        if not path.name.endswith(".labels.json"):
            out += _fixture_requests(path)
    sys.path.insert(0, str(BENCH))
    from sidecar_workload import build_requests

    return out + build_requests(2, 24, 0.5, seed=3)


def test_appended_grades_equal_the_grades_written_through_messages() -> None:
    annotated = 0
    for data in _requests():
        by_bytes = _graded(data, True)
        by_messages = _graded(data, False)
        assert ExportTraceServiceRequest.FromString(
            by_bytes
        ) == ExportTraceServiceRequest.FromString(by_messages)
        annotated += by_bytes != data
    assert annotated > 1000


def test_a_span_graded_before_is_rewritten_not_appended_to() -> None:
    data = next(d for d in _requests() if _graded(d, True) != d)
    once = _graded(data, True)
    twice = _graded(once, True, ContentPolicy("drop"))
    assert ExportTraceServiceRequest.FromString(twice) == ExportTraceServiceRequest.FromString(
        _graded(data, False, ContentPolicy("drop"))
    )
