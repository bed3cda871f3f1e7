"""Findings written into the protobuf spans the sidecar still holds, before it forwards them.

The sidecar keeps received `opentelemetry.proto.trace.v1.trace_pb2.Span` messages as its
buffer and re-serialises them (re-encoding through the SDK is slower: docs/pipeline.md,
"Measured limits"), so the grade is added by mutating those messages in place: one
`gen_ai.evaluation.result` event per graded span, and the same `attest.*` values as span
attributes, because Jaeger's tag search and TraceQL's `span.` scope only see attributes.

Annotating twice (a late span re-graded the trace) replaces the previous grade instead
of piling up events and stale attributes.

`annotation_bytes` is the same grade as the bytes to append to each span's encoding
(`export.otlp_bytes`): the sidecar's path for spans that carry no grade yet, which skips
building messages and re-serialising the whole trace (about 25 us a GenAI span).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from attest_otel import semconv
from attest_otel.content import KEEP, ContentPolicy
from attest_otel.export.otlp_bytes import fixed64, key_values, length_delimited
from attest_otel.export.results import AttrValue, evaluations
from attest_otel.model import CheckResult, Run

__all__ = ["GRADE_MARKS", "annotate_graded", "annotate_spans", "annotation_bytes", "any_value"]

_OWNED_KEYS = frozenset(
    {
        semconv.ATTEST_VERDICT,
        semconv.ATTEST_SEVERITY,
        semconv.ATTEST_STEP,
        semconv.ATTEST_RECOVERY,
        semconv.ATTEST_RECOVERED_AT,
        semconv.ATTEST_ALLOWED,
        semconv.ATTEST_APPROPRIATE,
        semconv.ATTEST_TOOL_USE_SCORE,
        semconv.ATTEST_TOOL_USE_VERDICT,
        semconv.ATTEST_TOOL_USE_CALLS,
        semconv.ATTEST_TOOL_USE_FAILED_CALLS,
    }
)
"""Span attributes a grade owns: removed before a new grade writes its own, so a value that
became null (say, a recovery) does not survive from the previous grade."""

GRADE_MARKS = (b"attest.", semconv.GEN_AI_EVALUATION_RESULT.encode())
"""Bytes every previous grade leaves in a span (its attribute keys, its event's name):
spans without them can take `annotation_bytes`; the others need `annotate_spans`, which
removes the old grade first."""


def any_value(value: AttrValue) -> AnyValue:
    """An OTLP AnyValue; bool is tested before int because bool is an int in Python."""
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    return AnyValue(string_value=str(value))


def _key_values(attributes: Mapping[str, AttrValue]) -> list[KeyValue]:
    return [KeyValue(key=k, value=any_value(v)) for k, v in attributes.items()]


def _is_our_event(event: Any) -> bool:
    if event.name != semconv.GEN_AI_EVALUATION_RESULT:
        return False
    return any(
        kv.key == semconv.GEN_AI_EVALUATION_NAME
        and kv.value.string_value == semconv.EVALUATION_NAME_TOOL_USE
        for kv in event.attributes
    )


def _clear_previous_grade(span: Any) -> None:
    # Deleting by index, from the back, keeps the other messages in place: no copies, and
    # no references into a container that has been cleared.
    for i in reversed(range(len(span.attributes))):
        if span.attributes[i].key in _OWNED_KEYS:
            del span.attributes[i]
    for i in reversed(range(len(span.events))):
        if _is_our_event(span.events[i]):
            del span.events[i]


def annotate_spans(
    spans_by_id: Mapping[str, Any],
    run: Run,
    result: CheckResult,
    *,
    now_ns: int,
    content: ContentPolicy = KEEP,
    cleared: set[str] | None = None,
) -> int:
    """Adds the grade of `run` to its spans in place; returns how many spans were changed.

    Args:
        spans_by_id: protobuf `Span` messages by lowercase hex span id (the parsed
            request's, `sidecar.grading_worker.grade_decoded`). Spans not named by the
            run are left alone; findings whose span is not in the mapping are skipped.
        run: the run, for its agent span id and, as a fallback, its steps' span ids.
        result: the graded result of `run`.
        now_ns: event timestamp (Unix ns); passed in so tests and replays are stable.
        content: what of the run's content the events may carry (`attest_otel.content`).
        cleared: span ids whose previous grade was already removed in this pass: the
            runs of one trace share it (`annotate_graded`), so a span that is both a call
            of one run and the agent span of another keeps both evaluations.
    """
    touched: set[str] = set()
    done = cleared if cleared is not None else set()
    for evaluation in evaluations(run, result, content):
        if evaluation.span_id is None:
            continue
        span = spans_by_id.get(evaluation.span_id)
        if span is None:
            continue
        if evaluation.span_id not in done:
            _clear_previous_grade(span)
            done.add(evaluation.span_id)
        touched.add(evaluation.span_id)
        existing = {kv.key: kv for kv in span.attributes}
        for key, value in evaluation.span_attributes.items():
            if key in existing:
                existing[key].value.CopyFrom(any_value(value))
            else:
                span.attributes.add(key=key, value=any_value(value))
        span.events.add(
            time_unix_nano=now_ns,
            name=semconv.GEN_AI_EVALUATION_RESULT,
            attributes=_key_values(evaluation.event_attributes),
        )
    return len(touched)


def annotate_graded(
    spans_by_id: Mapping[str, Any],
    graded: Iterable[tuple[Run, CheckResult]],
    *,
    now_ns: int,
    content: ContentPolicy = KEEP,
) -> int:
    """`annotate_spans` for every graded run of one trace: an earlier grade of a span is
    removed once, before the first run writes on it, and what each run writes is kept (a
    sub-agent's span is a call of its parent's run and the agent span of its own: it gets
    both evaluations). Returns how many spans were changed."""
    cleared: set[str] = set()
    for run, result in graded:
        annotate_spans(spans_by_id, run, result, now_ns=now_ns, content=content, cleared=cleared)
    return len(cleared)


_EVENT_NAME = length_delimited(0x12, semconv.GEN_AI_EVALUATION_RESULT.encode())


def annotation_bytes(
    graded: Iterable[tuple[Run, CheckResult]],
    *,
    now_ns: int,
    content: ContentPolicy = KEEP,
) -> dict[str, bytes]:
    """What `annotate_spans` adds, run after run, as bytes: lowercase hex span id -> the
    attributes (field 9) and `gen_ai.evaluation.result` events (field 11) to append to that
    span's encoding. Only for spans that hold no grade yet (`GRADE_MARKS`).

    As in `annotate_graded`, every run's evaluations of a span are kept (a span that is a
    call of one run and the agent span of another gets both), and a key written twice keeps
    its first place with the last value.
    """
    per_span: dict[str, tuple[Mapping[str, AttrValue], list[bytes]]] = {}
    head = fixed64(0x09, now_ns) + _EVENT_NAME
    for run, result in graded:
        for evaluation in evaluations(run, result, content):
            span_id = evaluation.span_id
            if span_id is None:
                continue
            event = length_delimited(0x5A, head + key_values(0x1A, evaluation.event_attributes))
            if span_id not in per_span:
                # Most spans get one evaluation: its attributes are used as they are, and
                # copied only when a second evaluation writes on the same span.
                per_span[span_id] = (evaluation.span_attributes, [event])
                continue
            attributes, events = per_span[span_id]
            merged = dict(attributes)
            merged.update(evaluation.span_attributes)
            per_span[span_id] = (merged, events)
            events.append(event)
    return {
        span_id: key_values(0x4A, attributes) + b"".join(events)
        for span_id, (attributes, events) in per_span.items()
    }
