"""The grade as a new `attest.grade` span in the graded trace, for spans already stored.

When the original spans sit in a backend (`grade --trace-id`), they cannot be changed;
a new span can join their trace. It is a child of the agent span, so trace views draw it
under the run it judged, and it links to every graded tool span. Its events are the same
`gen_ai.evaluation.result` events the sidecar adds to held spans, each naming the span it
is about in `attest.span_id`.

It is built with the OTel SDK tracer rather than as raw protobuf so that whatever exporter
the user configured (gRPC, HTTP, their headers and TLS) sends it.
"""

from __future__ import annotations

import logging
import time

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, SpanKind, TraceFlags

from attest_otel import semconv
from attest_otel.content import KEEP, ContentPolicy
from attest_otel.export.results import Attributes, evaluations, run_attributes
from attest_otel.model import CheckResult, Run

__all__ = ["emit_grade_span", "remote_span_context"]

_log = logging.getLogger(__name__)


def remote_span_context(trace_id: str | None, span_id: str | None) -> SpanContext | None:
    """A sampled, remote SpanContext from hex ids; None when either is missing or not hex.

    Marked sampled because the span it stands for was recorded (we are reading it), and the
    SDK's ParentBased sampler and trace-based exemplar filter both look at that flag.
    """
    if not trace_id or not span_id:
        return None
    try:
        context = SpanContext(
            trace_id=int(trace_id, 16),
            span_id=int(span_id, 16),
            is_remote=True,
            trace_flags=TraceFlags(TraceFlags.SAMPLED),
        )
    except ValueError:
        return None
    return context if context.is_valid else None


def _parent(run: Run) -> Context:
    """The agent span as parent; else an empty context (not None: None would mean "the
    caller's current span", and a grade must not hang under whatever span is active)."""
    parent = remote_span_context(run.trace_id, run.span_id)
    if parent is None:
        if run.trace_id:
            _log.warning(
                "run in trace %s has no usable agent span id; the grade span starts a new trace",
                run.trace_id,
            )
        return Context()
    return trace.set_span_in_context(NonRecordingSpan(parent))


def _link_attributes(call: Attributes) -> Attributes:
    """Verdict and step on each link, so a link list alone says which call failed."""
    keys = (semconv.ATTEST_VERDICT, semconv.ATTEST_STEP)
    return {k: call[k] for k in keys if k in call}


def emit_grade_span(
    tracer: trace.Tracer,
    run: Run,
    result: CheckResult,
    *,
    now_ns: int | None = None,
    content: ContentPolicy = KEEP,
) -> SpanContext:
    """Starts and ends the `attest.grade` span of one graded run; returns its context.

    A run that did not come from spans (no trace id) gets a grade span of its own, as the
    root of a new trace, so a graded run file can still be looked at in a trace UI.
    """
    now = time.time_ns() if now_ns is None else now_ns
    graded = evaluations(run, result, content)
    links: list[Link] = []
    linked: set[str] = set()
    for evaluation in graded:
        if evaluation.about != "call" or evaluation.span_id is None:
            continue
        target = remote_span_context(run.trace_id, evaluation.span_id)
        if target is None or evaluation.span_id in linked:
            continue
        linked.add(evaluation.span_id)
        links.append(Link(target, attributes=_link_attributes(evaluation.span_attributes)))
    attributes: Attributes = dict(run_attributes(result))
    if run.agent:
        attributes[semconv.GEN_AI_AGENT_NAME] = run.agent
    span = tracer.start_span(
        semconv.GRADE_SPAN_NAME,
        context=_parent(run),
        kind=SpanKind.INTERNAL,
        attributes=attributes,
        links=links,
        start_time=now,
    )
    for evaluation in graded:
        event: Attributes = dict(evaluation.event_attributes)
        if evaluation.span_id is not None:
            event[semconv.ATTEST_SPAN_ID] = evaluation.span_id
        span.add_event(semconv.GEN_AI_EVALUATION_RESULT, attributes=event, timestamp=now)
    span.end(end_time=now)
    return span.get_span_context()
