"""Grading throughput: decode + adapt + grade over every fixture trace, spans/s on one core.

Issue 3 ("Speed"): the peer converts about 6,600 spans/s on this kind of machine; we aim for
at least ten times that, for the whole path. Every row runs in this process, pinned to one
CPU when the OS allows it; the rows take turns within each round, so a shared machine that
gets busier or quieter during the run affects all of them alike. spans/s is the median over
the rounds (`best` is the fastest round); "vs base" divides a row's median by the median of
the baseline row of the same workload, measured in the same run. "x peer" divides by the
6,600 spans/s the issue states for the peer: context only, that figure is not measured here.

Workloads:
- fixtures: every `tests/fixtures/traces/*.json` (real framework traces, OTLP/JSON lines, one
  span or log record per line, as the SDK's simple processor exported them). As JSON: the file
  bytes as they are. As protobuf (the sidecar's wire format): per fixture, one
  ExportTraceServiceRequest holding all its spans grouped by resource and scope as a batching
  exporter sends them, plus one ExportLogsServiceRequest when it has log records.
- mixed: the same traces as protobuf, plus 9 plain HTTP/DB spans (10 attributes each) per
  GenAI span, children of the GenAI spans in the same trace, from a second service in the
  same request: 10 % GenAI, the realistic sidecar load.

Rows:
- baseline: the peer's approach, decode only: `json_format.Parse` of each request into an
  ExportTraceServiceRequest (or logs request), `MessageToDict`, and a walk of the dicts into
  one plain dict per span (attributes flattened). It reads protobuf's JSON mapping of the
  same requests (base64 ids): given OTLP/JSON, `Parse` silently takes hex ids for base64.
  The walk is written here, not borrowed from attest_otel, so the baseline never moves when
  our decoders do.
- full path: `decode_bytes` + `runs_from_spans` + `grader.grade(run, judge=None)` per fixture,
  on the JSON bytes and on the protobuf bytes.
- adapt+grade: `runs_from_spans` + `grade` on spans decoded beforehand.
- decode only: `decode_bytes` alone, to show where the full path's time goes.
- parse only: `json.loads` of every line (issue 12's yardstick), upb's parse, and, last, orjson
  (what `decode_bytes` parses OTLP/JSON with), for reference.

Run: `.venv/bin/python bench/bench_grade.py` (`--help`: `--quick`, `--rounds`, `--profile`).
Not a test; `make bench` runs it.
"""

from __future__ import annotations

import argparse
import base64
import cProfile
import gc
import json
import os
import platform
import pstats
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from google.protobuf import json_format
from google.protobuf.internal import api_implementation
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from attest_otel.adapt import runs_from_spans  # noqa: E402
from attest_otel.grade.grader import grade  # noqa: E402
from attest_otel.ingest.decode import decode_bytes  # noqa: E402
from attest_otel.model import LogRecord  # noqa: E402
from attest_otel.model import Span as OurSpan  # noqa: E402
from attest_otel.policy import ANY_AGENT, AgentPolicy, Policy  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "traces"
PEER_SPANS_PER_S = 6_600
FILLER_PER_GENAI = 9

# The fixtures' billing policy (tests/fixtures/traces/README.md), for every agent: grading
# then exercises the allowed-tool and fallback rules. Traces that carry their own policy in
# span attributes are graded with this one instead, which costs the same.
POLICY = Policy(
    {
        ANY_AGENT: AgentPolicy(
            ["lookup_order", "charge_card", "charge_card_backup", "send_receipt"],
            {"charge_card": ["charge_card_backup"]},
            ANY_AGENT,
        )
    }
)


# -- workloads ---------------------------------------------------------------------------------


@dataclass
class Fixture:
    name: str
    json_body: bytes
    """The file as it is: OTLP/JSON lines."""
    proto_bodies: list[bytes]
    """One traces request, and one logs request when the trace has log records."""
    pjson_lines: list[tuple[bool, bytes]]
    """(is traces, protobuf JSON mapping) per line: the baseline's input."""
    spans: int
    genai_spans: int
    trace: ExportTraceServiceRequest


def _hex_ids_to_base64(node: Any) -> Any:
    """OTLP/JSON (hex ids) -> protobuf's JSON mapping (base64 ids), everything else kept."""
    if isinstance(node, dict):
        return {
            k: base64.b64encode(bytes.fromhex(v)).decode()
            if k in ("traceId", "spanId", "parentSpanId") and isinstance(v, str)
            else _hex_ids_to_base64(v)
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_hex_ids_to_base64(item) for item in node]
    return node


def _batch(
    into: Any, parts: Any, groups: dict[tuple[bytes, bytes], Any], scopes: str, items: str
) -> None:
    """Add one exported request's spans (or log records) to a batch, one entry per resource and
    scope, as a batching exporter sends them (the fixtures hold one span per request)."""
    for part in parts:
        resource = part.resource.SerializeToString() + part.schema_url.encode()
        for scoped in getattr(part, scopes):
            key = (resource, scoped.scope.SerializeToString() + scoped.schema_url.encode())
            target = groups.get(key)
            if target is None:
                entry = into.add()
                entry.resource.CopyFrom(part.resource)
                entry.schema_url = part.schema_url
                target = getattr(entry, scopes).add()
                target.scope.CopyFrom(scoped.scope)
                target.schema_url = scoped.schema_url
                groups[key] = target
            getattr(target, items).extend(getattr(scoped, items))


def load_fixtures() -> list[Fixture]:
    out = []
    for path in sorted(FIXTURES.glob("*.json")):
        if path.name.endswith(".labels.json"):
            continue
        body = path.read_bytes()
        trace, logs = ExportTraceServiceRequest(), ExportLogsServiceRequest()
        span_groups: dict[tuple[bytes, bytes], Any] = {}
        log_groups: dict[tuple[bytes, bytes], Any] = {}
        pjson: list[tuple[bool, bytes]] = []
        for line in body.splitlines():
            if not line.strip():
                continue
            doc = _hex_ids_to_base64(json.loads(line))
            is_trace = "resourceSpans" in doc
            if is_trace:
                part = json_format.ParseDict(doc, ExportTraceServiceRequest())
                _batch(
                    trace.resource_spans, part.resource_spans, span_groups, "scope_spans", "spans"
                )
            else:
                part = json_format.ParseDict(doc, ExportLogsServiceRequest())
                _batch(
                    logs.resource_logs, part.resource_logs, log_groups, "scope_logs", "log_records"
                )
            pjson.append((is_trace, json.dumps(doc, separators=(",", ":")).encode()))
        bodies = [trace.SerializeToString()]
        if logs.resource_logs:
            bodies.append(logs.SerializeToString())
        decoded = decode_bytes(body)
        out.append(
            Fixture(
                path.stem,
                body,
                bodies,
                pjson,
                decoded.span_count,
                decoded.genai_span_count,
                trace,
            )
        )
    return out


def _kv(key: str, value: str | int) -> KeyValue:
    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    return KeyValue(key=key, value=AnyValue(string_value=value))


def _filler(rng: random.Random, trace_id: bytes, parent: Span, n: int) -> Span:
    """One plain HTTP client or DB span below `parent`, 10 attributes, inside its time."""
    start = parent.start_time_unix_nano + n * 1_000
    if n % 2:
        name = "SELECT orders"
        attrs = [
            _kv("db.system.name", "postgresql"),
            _kv("db.namespace", "billing"),
            _kv("db.collection.name", "orders"),
            _kv("db.operation.name", "SELECT"),
            _kv("db.query.text", "SELECT id, sku, qty FROM orders WHERE sku = $1 LIMIT 50"),
            _kv("server.address", "db.internal"),
            _kv("server.port", 5432),
            _kv("db.response.returned_rows", rng.randrange(50)),
            _kv("network.peer.address", "10.0.0.12"),
            _kv("db.client.connection.pool.name", "main"),
        ]
    else:
        name = "GET /v1/orders/{id}"
        attrs = [
            _kv("http.request.method", "GET"),
            _kv("url.full", f"https://orders.internal/v1/orders/{rng.randrange(10**6)}"),
            _kv("url.scheme", "https"),
            _kv("server.address", "orders.internal"),
            _kv("server.port", 443),
            _kv("http.response.status_code", 200),
            _kv("network.protocol.version", "1.1"),
            _kv("user_agent.original", "python-httpx/0.28.1"),
            _kv("http.request.body.size", rng.randrange(2000)),
            _kv("http.response.body.size", rng.randrange(20000)),
        ]
    return Span(
        trace_id=trace_id,
        span_id=rng.randbytes(8),
        parent_span_id=parent.span_id,
        name=name,
        kind=Span.SPAN_KIND_CLIENT,
        start_time_unix_nano=start,
        end_time_unix_nano=start + 500,
        attributes=attrs,
    )


def mixed_request(fixture: Fixture, rng: random.Random) -> ExportTraceServiceRequest:
    """The fixture's traces request plus `FILLER_PER_GENAI` plain spans per GenAI span."""
    req = ExportTraceServiceRequest()
    req.CopyFrom(fixture.trace)
    http = ScopeSpans(scope=InstrumentationScope(name="opentelemetry.instrumentation.httpx"))
    db = ScopeSpans(scope=InstrumentationScope(name="opentelemetry.instrumentation.psycopg"))
    for rs in fixture.trace.resource_spans:
        for ss in rs.scope_spans:
            for span in ss.spans:
                for n in range(FILLER_PER_GENAI):
                    (db if n % 2 else http).spans.append(_filler(rng, span.trace_id, span, n))
    resource = Resource(
        attributes=[
            _kv("service.name", "billing-backend"),
            _kv("service.version", "1.4.2"),
            _kv("deployment.environment.name", "prod"),
            _kv("telemetry.sdk.language", "python"),
        ]
    )
    req.resource_spans.append(ResourceSpans(resource=resource, scope_spans=[http, db]))
    return req


# -- what each row does --------------------------------------------------------------------


def grade_all(spans: list[OurSpan], logs: list[LogRecord]) -> int:
    """Adapt and grade; returns the number of runs (so nothing is optimised away)."""
    runs = 0
    for trace in runs_from_spans(spans, logs, policy=POLICY):
        for run in trace.runs:
            grade(run, judge=None)
            runs += 1
    return runs


def full_path(bodies: list[bytes]) -> int:
    spans: list[OurSpan] = []
    logs: list[LogRecord] = []
    for body in bodies:
        decoded = decode_bytes(body)
        spans += decoded.spans
        logs += decoded.logs
    return grade_all(spans, logs)


def _adapt_row(decoded: tuple[list[OurSpan], list[LogRecord]]) -> int:
    return grade_all(*decoded)


def decode_only(bodies: list[bytes]) -> int:
    return sum(decode_bytes(body).span_count for body in bodies)


def parse_json(bodies: list[bytes]) -> int:
    """`json.loads` of every line: the floor any JSON reader pays (issue 12's yardstick)."""
    return sum(
        len(json.loads(line)) for body in bodies for line in body.splitlines() if line.strip()
    )


def parse_orjson(bodies: list[bytes]) -> int:
    """orjson's parse of every line: what `decode_bytes` reads OTLP/JSON with (`otlp_json.loads`)
    since issue 12. For reference only: the goal stays measured against `json.loads`."""
    return sum(
        len(orjson.loads(line)) for body in bodies for line in body.splitlines() if line.strip()
    )


def parse_proto(bodies: list[bytes]) -> int:
    """upb's parse of every request, nothing read from it."""
    found = len(ExportTraceServiceRequest.FromString(bodies[0]).resource_spans)
    for body in bodies[1:]:  # the fixture's log records, as the full path reads them
        found += len(ExportLogsServiceRequest.FromString(body).resource_logs)
    return found


def _peer_value(value: dict[str, Any]) -> Any:
    for key, item in value.items():
        if key == "arrayValue":
            return [_peer_value(v) for v in item.get("values", ())]
        if key == "kvlistValue":
            return {kv["key"]: _peer_value(kv.get("value", {})) for kv in item.get("values", ())}
        if key == "intValue":
            return int(item)
        return item
    return None


def _peer_attributes(kvs: list[dict[str, Any]]) -> dict[str, Any]:
    return {kv["key"]: _peer_value(kv.get("value", {})) for kv in kvs}


def _peer_walk(doc: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for rs in doc.get("resourceSpans", ()):
        resource = _peer_attributes(rs.get("resource", {}).get("attributes", ()))
        for ss in rs.get("scopeSpans", ()):
            scope = ss.get("scope", {})
            for s in ss.get("spans", ()):
                yield {
                    "trace_id": base64.b64decode(s["traceId"]).hex(),
                    "span_id": base64.b64decode(s["spanId"]).hex(),
                    "parent_id": base64.b64decode(s["parentSpanId"]).hex()
                    if "parentSpanId" in s
                    else None,
                    "name": s.get("name", ""),
                    "kind": s.get("kind", "SPAN_KIND_UNSPECIFIED"),
                    "start_ns": int(s.get("startTimeUnixNano", 0)),
                    "end_ns": int(s.get("endTimeUnixNano", 0)),
                    "status": s.get("status", {}),
                    "attributes": _peer_attributes(s.get("attributes", ())),
                    "events": [
                        {
                            "name": e.get("name", ""),
                            "time_ns": int(e.get("timeUnixNano", 0)),
                            "attributes": _peer_attributes(e.get("attributes", ())),
                        }
                        for e in s.get("events", ())
                    ],
                    "resource": resource,
                    "scope": scope.get("name", ""),
                }
    for rl in doc.get("resourceLogs", ()):
        for sl in rl.get("scopeLogs", ()):
            for r in sl.get("logRecords", ()):
                yield {
                    "attributes": _peer_attributes(r.get("attributes", ())),
                    "body": _peer_value(r.get("body", {})),
                }


def baseline(lines: list[tuple[bool, bytes]]) -> int:
    """The peer: json_format.Parse + MessageToDict + a walk into one dict per span."""
    found = 0
    for is_trace, line in lines:
        message = json_format.Parse(
            line, ExportTraceServiceRequest() if is_trace else ExportLogsServiceRequest()
        )
        for _ in _peer_walk(json_format.MessageToDict(message)):
            found += 1
    return found


# -- timing ------------------------------------------------------------------------------------


@dataclass
class Row:
    name: str
    fn: Callable[[Any], int]
    inputs: list[Any]
    spans: int
    """Spans in one pass over `inputs`."""
    against: str | None
    """The baseline row this row is compared with; None for a baseline."""


def measure(rows: list[Row], rounds: int, min_seconds: float) -> dict[str, list[float]]:
    """spans/s of every row, once per round; the rows take turns within each round."""
    rates: dict[str, list[float]] = {row.name: [] for row in rows}
    for n in range(rounds):
        for row in rows:
            gc.collect()
            passes = 0
            start = time.perf_counter()
            while True:
                for item in row.inputs:
                    row.fn(item)
                passes += 1
                elapsed = time.perf_counter() - start
                if elapsed >= min_seconds:
                    break
            rates[row.name].append(passes * row.spans / elapsed)
        print(f"  round {n + 1}/{rounds} done", file=sys.stderr, flush=True)
    return rates


def pin_to_one_core() -> str:
    """Run on one CPU (the last one this process may use), so every row gets the same core."""
    if not hasattr(os, "sched_setaffinity"):
        return "not pinned (no sched_setaffinity)"
    cpu = max(os.sched_getaffinity(0))
    try:
        os.sched_setaffinity(0, {cpu})
    except OSError as exc:
        return f"not pinned ({exc})"
    return f"pinned to CPU {cpu}"


def profile(row: Row, seconds: float, limit: int) -> None:
    profiler = cProfile.Profile()
    start = time.perf_counter()
    passes = 0
    profiler.enable()
    while time.perf_counter() - start < seconds:
        for item in row.inputs:
            row.fn(item)
        passes += 1
    profiler.disable()
    print(f"profile of {row.name!r}: {passes} passes of {row.spans} spans")
    stats = pstats.Stats(profiler)
    stats.sort_stats("tottime").print_stats(limit)
    stats.sort_stats("cumulative").print_stats(limit)


def _json_mapping(body: bytes) -> bytes:
    """A protobuf traces request as protobuf's JSON mapping, compact (the peer's input)."""
    req = ExportTraceServiceRequest.FromString(body)
    return json_format.MessageToJson(req, indent=None).encode()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=5, help="rounds (default 5)")
    parser.add_argument("--min-seconds", type=float, default=1.0, help="per row and round")
    parser.add_argument("--quick", action="store_true", help="3 rounds of 0.3 s")
    parser.add_argument(
        "--profile",
        choices=("json", "protobuf", "adapt", "mixed"),
        help="cProfile one row (no timing table)",
    )
    parser.add_argument("--profile-lines", type=int, default=30)
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.min_seconds = 3, 0.3

    pinned = pin_to_one_core()
    fixtures = load_fixtures()
    rng = random.Random(7)
    mixed = [[mixed_request(f, rng).SerializeToString(), *f.proto_bodies[1:]] for f in fixtures]
    mixed_pjson = [
        [(True, _json_mapping(m[0]))] + [line for line in f.pjson_lines if not line[0]]
        for f, m in zip(fixtures, mixed, strict=True)
    ]
    predecoded = []
    for f in fixtures:
        decoded = decode_bytes(f.json_body)
        predecoded.append((decoded.spans, decoded.logs))

    spans = sum(f.spans for f in fixtures)
    genai = sum(f.genai_spans for f in fixtures)
    mixed_spans = spans + FILLER_PER_GENAI * genai
    _check(fixtures, mixed)

    as_json = [[f.json_body] for f in fixtures]
    as_proto = [f.proto_bodies for f in fixtures]
    peer_lines = [f.pjson_lines for f in fixtures]
    rows = [
        Row("baseline: peer Parse+MessageToDict+walk, JSON", baseline, peer_lines, spans, None),
        Row("(a) full path, OTLP/JSON", full_path, as_json, spans, "baseline"),
        Row("(b) full path, protobuf", full_path, as_proto, spans, "baseline"),
        Row("(c) adapt+grade on decoded spans", _adapt_row, predecoded, spans, "baseline"),
        Row("    decode only, OTLP/JSON", decode_only, as_json, spans, "baseline"),
        Row("    decode only, protobuf", decode_only, as_proto, spans, "baseline"),
        Row("    parse only, json.loads", parse_json, as_json, spans, "baseline"),
        Row("    parse only, protobuf (upb)", parse_proto, as_proto, spans, "baseline"),
        Row("mixed baseline: peer on its JSON mapping", baseline, mixed_pjson, mixed_spans, None),
        Row("(m) mixed full path, protobuf", full_path, mixed, mixed_spans, "mixed baseline"),
        Row("    mixed decode only, protobuf", decode_only, mixed, mixed_spans, "mixed baseline"),
        Row("    parse only, orjson (decode's parser)", parse_orjson, as_json, spans, "baseline"),
    ]
    if args.profile:
        wanted = {"json": 1, "protobuf": 2, "adapt": 3, "mixed": 9}[args.profile]
        profile(rows[wanted], max(args.min_seconds, 3.0), args.profile_lines)
        return 0

    print(
        f"python {platform.python_version()}, protobuf {api_implementation.Type()}, "
        f"{pinned}, {len(fixtures)} fixtures"
    )
    print(
        f"fixtures: {spans} spans ({genai} GenAI), {len(fixtures)} traces, "
        f"{sum(len(f.json_body) for f in fixtures) / spans:,.0f} JSON bytes/span, "
        f"{sum(map(len, (b for f in fixtures for b in f.proto_bodies))) / spans:,.0f} "
        "protobuf bytes/span"
    )
    print(f"mixed: {mixed_spans} spans ({100 * genai / mixed_spans:.0f} % GenAI)")
    print(f"{args.rounds} rounds x >= {args.min_seconds} s per row, rows interleaved; median")
    print()
    load_before = os.getloadavg()[0]
    rates = measure(rows, args.rounds, args.min_seconds)
    load_after = os.getloadavg()[0]
    print(f"load average {load_before:.1f} before, {load_after:.1f} after ({os.cpu_count()} CPUs)")
    print()
    medians = {name: statistics.median(values) for name, values in rates.items()}
    bases = {"baseline": medians[rows[0].name], "mixed baseline": medians[rows[8].name]}
    print(f"{'row':48} {'spans/s':>9} {'best':>9} {'vs base':>8} {'x peer':>7}")
    for row in rows:
        median = medians[row.name]
        ratio = "1.0x" if row.against is None else f"{median / bases[row.against]:.1f}x"
        print(
            f"{row.name:48} {median:>9,.0f} {max(rates[row.name]):>9,.0f} {ratio:>8} "
            f"{median / PEER_SPANS_PER_S:>6.1f}x"
        )
    print()
    for full, parse, what in (
        (rows[1], rows[6], "OTLP/JSON, json.loads"),
        (rows[2], rows[7], "protobuf, upb parse"),
    ):
        share = medians[full.name] / medians[parse.name]
        print(
            f"grade --file on the fixtures, {what}: {share:.0%} of the parse-only rate "
            "(goal >= 50 %)"
        )
    from bench_agentevals import summary_line  # bench/.venv-agentevals, if made

    print(summary_line(args.rounds, args.min_seconds))
    print()
    print(
        "'vs base': against the baseline row of the same workload, this run; 'x peer': "
        f"against the peer's stated {PEER_SPANS_PER_S:,} spans/s (not measured here)."
    )
    return 0


def _check(fixtures: list[Fixture], mixed: list[list[bytes]]) -> None:
    """Every encoding of a fixture must grade the same, or the rows measure different work."""
    for f, m in zip(fixtures, mixed, strict=True):
        results = []
        for bodies in ([f.json_body], f.proto_bodies, m):
            spans: list[OurSpan] = []
            logs: list[LogRecord] = []
            for body in bodies:
                decoded = decode_bytes(body)
                spans += decoded.spans
                logs += decoded.logs
            results.append(
                [
                    grade(run, judge=None).summary
                    for trace in runs_from_spans(spans, logs, policy=POLICY)
                    for run in trace.runs
                ]
            )
        if not results[0] or results.count(results[0]) != len(results):
            raise SystemExit(f"{f.name}: the encodings grade differently: {results}")
        if baseline(f.pjson_lines) < f.spans:
            raise SystemExit(f"{f.name}: the baseline walk missed spans")


if __name__ == "__main__":
    sys.exit(main())
