"""The real Jaeger v2 (built by tools/build-peers.sh, memory storage) as a trace source, fed
the fixture traces by the OTel SDK's own OTLP/gRPC exporter, as an instrumented app would.

The fixture spans are turned into the SDK's `ReadableSpan`s with their own ids, times,
attributes, events, status, scope and resource, so what Jaeger serves back can be compared
with the file the fixture is.
"""

from __future__ import annotations

import dataclasses
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable

from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event as SdkEvent
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from attest_otel.model import Span
from tests.peers.servers import Jaeger
from tests.sources.fake_http import Reply, Seen

_SDK_KIND = {1: SpanKind.INTERNAL, 2: SpanKind.SERVER, 3: SpanKind.CLIENT}
_SDK_KIND |= {4: SpanKind.PRODUCER, 5: SpanKind.CONSUMER}
_SDK_STATUS = {0: StatusCode.UNSET, 1: StatusCode.OK, 2: StatusCode.ERROR}


def sdk_span(span: Span) -> ReadableSpan:
    """One fixture span as the SDK hands it to its exporter. The SDK has no "unspecified"
    kind: a fixture span of kind 0 is refused rather than silently sent as internal."""
    assert span.kind in _SDK_KIND, f"{span.name}: kind {span.kind} has no SDK SpanKind"
    trace_id = int(span.trace_id, 16)

    def context(span_id: str) -> SpanContext:
        return SpanContext(trace_id, int(span_id, 16), False, TraceFlags(TraceFlags.SAMPLED))

    return ReadableSpan(
        name=span.name,
        context=context(span.span_id),
        parent=context(span.parent_id) if span.parent_id else None,
        resource=Resource(span.resource),
        attributes=span.attributes,
        events=[SdkEvent(e.name, e.attributes, e.time_ns) for e in span.events],
        kind=_SDK_KIND[span.kind],
        status=Status(_SDK_STATUS[span.status_code], span.status_message or None),
        start_time=span.start_ns,
        end_time=span.end_ns,
        instrumentation_scope=InstrumentationScope(span.scope_name, span.scope_version or None),
    )


def feed(jaeger: Jaeger, spans: Iterable[Span]) -> None:
    """Exports the spans to Jaeger's OTLP/gRPC receiver and waits until each of their traces
    is served whole by the query API."""
    spans = list(spans)
    exporter = OTLPSpanExporter(endpoint=jaeger.otlp_endpoint, insecure=True, timeout=10)
    try:
        assert exporter.export([sdk_span(s) for s in spans]) is SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()
    want: dict[str, set[str]] = {}
    for s in spans:
        want.setdefault(s.trace_id, set()).add(s.span_id)
    deadline = time.monotonic() + 30
    for trace_id, span_ids in want.items():
        while True:
            trace = jaeger.trace(trace_id)
            if trace is not None and {s["spanID"] for s in trace["spans"]} >= span_ids:
                break
            assert time.monotonic() < deadline, f"Jaeger does not serve trace {trace_id} whole"
            time.sleep(0.1)


FED = [
    "vercel__fallback",
    "vercel__retry",
    "vercel__unrecovered_ignores",
    "strands__multi_agent",
    "anthropic_openinference__retry",
]
"""The fixtures the session's Jaeger holds (tests/sources/conftest.py feeds them)."""

SHORT_ID_OF = "vercel__fallback"
"""Fed a second time under a trace id whose high 64 bits are zero (`short_id_spans`)."""


def short_id_spans(spans: list[Span]) -> list[Span]:
    """The spans under a 64-bit trace id (the high half zero), as Jaeger v1 clients made."""
    padded = "0" * 16 + spans[0].trace_id[16:]
    return [dataclasses.replace(s, trace_id=padded) for s in spans]


def relay(jaeger: Jaeger) -> Callable[[Seen], Reply]:
    """A route of a `FakeBackend` that passes the request on to the real Jaeger and its
    answer back unchanged: the body is Jaeger's own; the fake only decides which paths
    exist (say, no api_v3, as a Jaeger without it) and records the requests."""

    def route(seen: Seen) -> Reply:
        query = urllib.parse.urlencode(seen.query, doseq=True)
        url = f"{jaeger.url}{seen.path}" + (f"?{query}" if query else "")
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                return Reply(response.status, response.read(), response.headers.get_content_type())
        except urllib.error.HTTPError as e:
            return Reply(e.code, e.read(), e.headers.get_content_type())

    return route
