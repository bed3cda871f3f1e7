"""Decode throughput: `attest_otel.ingest.decode` against a json_format baseline, same run.

Workload: agent traces as a busy service emits them. Each trace has 25 spans: 5 GenAI spans
(1 `invoke_agent`, 2 `chat`, 2 `execute_tool`, with 6-10 attributes including JSON message,
argument and result strings of 200-2000 bytes; 1 in 10 tool spans has status ERROR and an
`exception` event) and 20 HTTP/DB spans with 10 attributes each, so 20 % of spans are GenAI.
Requests of 20 traces (500 spans), 2 resources each.

The same requests are encoded as binary protobuf, as OTLP/JSON (hex ids, integer enums) and as
protobuf's JSON mapping (base64 ids, enum names). Every row decodes the same requests into
`Span`s; spans/s is the median over repetitions of at least `--min-seconds` each, the rows
taking turns within each repetition (`best` is the fastest repetition). The ratio is the
median against the median of the baseline row.

Baselines (the obvious way with the protobuf library):
- protobuf: `FromString` + `json_format.MessageToDict` + a full walk of the dicts into `Span`s;
- JSON: `json_format.Parse` + the message decoded into `Span`s in full (serialised and read
  by the wire core's decoder), on the protobuf-JSON-mapping text (given OTLP/JSON, `Parse`
  would silently read the hex ids as base64).

Run: `.venv/bin/python bench/bench_decode.py` (`--help` for sizes). Not a test.
"""

from __future__ import annotations

import argparse
import base64
import gzip
import json
import os
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from google.protobuf import json_format  # type: ignore[import-untyped]
from google.protobuf.internal import api_implementation  # type: ignore[import-untyped]
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status

from attest_otel.ingest import otlp_json
from attest_otel.ingest.decode import decode_bytes, decode_request

SPANS_PER_TRACE = 25


def _kv(key: str, value: str | int | float | bool) -> KeyValue:
    if isinstance(value, bool):
        return KeyValue(key=key, value=AnyValue(bool_value=value))
    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    if isinstance(value, float):
        return KeyValue(key=key, value=AnyValue(double_value=value))
    return KeyValue(key=key, value=AnyValue(string_value=value))


def _text(rng: random.Random, low: int, high: int) -> str:
    words = ("weather", "forecast", "Oslo", "tomorrow", "rain", "order", "stock", "the", "a")
    out: list[str] = []
    size, target = 0, rng.randint(low, high)
    while size < target:
        word = rng.choice(words)
        out.append(word)
        size += len(word) + 1
    return " ".join(out)


def _genai_attributes(rng: random.Random, role: str) -> list[KeyValue]:
    common = [
        _kv("gen_ai.operation.name", role),
        _kv("gen_ai.provider.name", "openai"),
        _kv("gen_ai.request.model", "gpt-5"),
    ]
    if role == "invoke_agent":
        return [
            *common,
            _kv("gen_ai.agent.name", "shop"),
            _kv("gen_ai.conversation.id", f"conv-{rng.randrange(10**6)}"),
            _kv(
                "gen_ai.input.messages",
                json.dumps(
                    [{"role": "user", "parts": [{"type": "text", "content": _text(rng, 200, 600)}]}]
                ),
            ),
            _kv(
                "gen_ai.output.messages",
                json.dumps(
                    [
                        {
                            "role": "assistant",
                            "parts": [{"type": "text", "content": _text(rng, 200, 800)}],
                        }
                    ]
                ),
            ),
            _kv("gen_ai.system_instructions", _text(rng, 200, 400)),
        ]
    if role == "chat":
        return [
            *common,
            _kv("gen_ai.usage.input_tokens", rng.randrange(100, 4000)),
            _kv("gen_ai.usage.output_tokens", rng.randrange(10, 800)),
            _kv("gen_ai.request.temperature", 0.2),
            _kv("gen_ai.response.id", f"chatcmpl-{rng.randrange(10**9)}"),
            _kv("gen_ai.input.messages", _text(rng, 800, 2000)),
            _kv("gen_ai.output.messages", _text(rng, 200, 800)),
            _kv("server.address", "api.openai.com"),
        ]
    return [
        _kv("gen_ai.operation.name", "execute_tool"),
        _kv("gen_ai.tool.name", "lookup"),
        _kv("gen_ai.tool.call.id", f"call_{rng.randrange(10**9)}"),
        _kv("gen_ai.tool.type", "function"),
        _kv("gen_ai.tool.call.arguments", json.dumps({"sku": f"A-{rng.randrange(1000)}"})),
        _kv("gen_ai.tool.call.result", _text(rng, 200, 1500)),
    ]


def _http_attributes(rng: random.Random, n: int) -> list[KeyValue]:
    if n % 2:
        return [
            _kv("db.system.name", "postgresql"),
            _kv("db.namespace", "shop"),
            _kv("db.collection.name", "orders"),
            _kv("db.operation.name", "SELECT"),
            _kv("db.query.text", "SELECT id, sku, qty FROM orders WHERE sku = $1 LIMIT 50"),
            _kv("server.address", "db.internal"),
            _kv("server.port", 5432),
            _kv("db.response.returned_rows", rng.randrange(50)),
            _kv("network.peer.address", "10.0.0.12"),
            _kv("db.client.connection.pool.name", "main"),
        ]
    return [
        _kv("http.request.method", "GET"),
        _kv("url.full", f"https://inventory.internal/v1/items/{rng.randrange(10**6)}"),
        _kv("url.scheme", "https"),
        _kv("server.address", "inventory.internal"),
        _kv("server.port", 443),
        _kv("http.response.status_code", 200),
        _kv("network.protocol.version", "1.1"),
        _kv("user_agent.original", "python-httpx/0.28.1"),
        _kv("http.request.body.size", rng.randrange(2000)),
        _kv("http.response.body.size", rng.randrange(20000)),
    ]


def make_request(rng: random.Random, traces: int) -> ExportTraceServiceRequest:
    """One request of `traces` traces, split over 2 resources (services)."""
    resources = []
    for service in ("shop-agent", "inventory"):
        resource = Resource(
            attributes=[
                _kv("service.name", service),
                _kv("service.version", "1.4.2"),
                _kv("deployment.environment.name", "prod"),
                _kv("telemetry.sdk.language", "python"),
            ]
        )
        resources.append(
            ResourceSpans(
                resource=resource,
                scope_spans=[
                    ScopeSpans(scope=InstrumentationScope(name=f"{service}.app", version="1")),
                    ScopeSpans(scope=InstrumentationScope(name="opentelemetry.instrumentation")),
                ],
            )
        )
    for t in range(traces):
        trace_id = rng.randbytes(16)
        start = 1_700_000_000_000_000_000 + t * 10_000_000_000
        agent_id = rng.randbytes(8)
        target = resources[t % 2]
        genai, other = target.scope_spans[0].spans, target.scope_spans[1].spans
        genai.append(
            Span(
                trace_id=trace_id,
                span_id=agent_id,
                name="invoke_agent shop",
                kind=Span.SPAN_KIND_INTERNAL,
                start_time_unix_nano=start,
                end_time_unix_nano=start + 9_000_000_000,
                attributes=_genai_attributes(rng, "invoke_agent"),
            )
        )
        for step in range(4):
            role = "chat" if step % 2 == 0 else "execute_tool"
            step_id = rng.randbytes(8)
            error = role == "execute_tool" and rng.random() < 0.1
            genai.append(
                Span(
                    trace_id=trace_id,
                    span_id=step_id,
                    parent_span_id=agent_id,
                    name="chat gpt-5" if role == "chat" else "execute_tool lookup",
                    kind=Span.SPAN_KIND_CLIENT if role == "chat" else Span.SPAN_KIND_INTERNAL,
                    start_time_unix_nano=start + step * 2_000_000_000,
                    end_time_unix_nano=start + step * 2_000_000_000 + 1_500_000_000,
                    attributes=_genai_attributes(rng, role),
                    status=Status(code=Status.STATUS_CODE_ERROR, message="timeout")
                    if error
                    else Status(),
                    events=[
                        Span.Event(
                            name="exception",
                            time_unix_nano=start + step * 2_000_000_000 + 1_000_000_000,
                            attributes=[
                                _kv("exception.type", "TimeoutError"),
                                _kv("exception.message", "inventory timed out"),
                            ],
                        )
                    ]
                    if error
                    else [],
                )
            )
            for n in range(5):  # 5 HTTP/DB spans below each step: 20 per trace
                other.append(
                    Span(
                        trace_id=trace_id,
                        span_id=rng.randbytes(8),
                        parent_span_id=step_id,
                        name="SELECT orders" if n % 2 else "GET /v1/items/{id}",
                        kind=Span.SPAN_KIND_CLIENT,
                        start_time_unix_nano=start + step * 2_000_000_000 + n * 1_000_000,
                        end_time_unix_nano=start + step * 2_000_000_000 + n * 1_000_000 + 900_000,
                        attributes=_http_attributes(rng, n),
                    )
                )
    return ExportTraceServiceRequest(resource_spans=resources)


def to_otlp_json(req: ExportTraceServiceRequest) -> bytes:
    """OTLP/JSON as the spec writes it (hex ids, integer enums, int64 as strings)."""

    def fix(node: Any) -> Any:
        if isinstance(node, dict):
            return {
                k: base64.b64decode(v).hex()
                if k in ("traceId", "spanId", "parentSpanId")
                else fix(v)
                for k, v in node.items()
            }
        if isinstance(node, list):
            return [fix(item) for item in node]
        return node

    return json.dumps(fix(json_format.MessageToDict(req, use_integers_for_enums=True))).encode()


# -- baselines --------------------------------------------------------------------------------


def baseline_protobuf(data: bytes) -> int:
    """FromString + MessageToDict + its JSON text read whole by the JSON reader."""
    as_dict = json_format.MessageToDict(ExportTraceServiceRequest.FromString(data))
    spans = otlp_json.read_text(json.dumps(as_dict).encode(), lazy=False)[0]
    return len(spans)


def baseline_json(data: bytes) -> int:
    """json_format.Parse + the message decoded in full."""
    req = json_format.Parse(data, ExportTraceServiceRequest())
    return decode_request(req, lazy=False).span_count


# -- timing -----------------------------------------------------------------------------------


def measure(
    rows: list[tuple[str, Callable[[bytes], int], list[bytes]]], reps: int, min_seconds: float
) -> dict[str, list[float]]:
    """spans/s of every row, `reps` times. The rows take turns within each repetition, so a
    machine that gets busier or quieter during the run affects all rows alike."""
    rates: dict[str, list[float]] = {name: [] for name, _, _ in rows}
    for rep in range(reps):
        for name, fn, bodies in rows:
            spans = 0
            start = time.perf_counter()
            while True:
                for body in bodies:
                    spans += fn(body)
                elapsed = time.perf_counter() - start
                if elapsed >= min_seconds:
                    break
            rates[name].append(spans / elapsed)
        print(f"  repetition {rep + 1}/{reps} done", file=sys.stderr, flush=True)
    return rates


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--requests", type=int, default=8, help="requests (default 8)")
    parser.add_argument("--traces", type=int, default=20, help="traces per request (default 20)")
    parser.add_argument("--reps", type=int, default=5, help="repetitions per row (default 5)")
    parser.add_argument("--min-seconds", type=float, default=1.0, help="per repetition")
    args = parser.parse_args(argv)

    rng = random.Random(7)
    requests = [make_request(rng, args.traces) for _ in range(args.requests)]
    proto = [r.SerializeToString() for r in requests]
    proto_gz = [gzip.compress(b, 6) for b in proto]
    otlp = [to_otlp_json(r) for r in requests]
    pjson = [json_format.MessageToJson(r, indent=None).encode() for r in requests]
    spans = args.requests * args.traces * SPANS_PER_TRACE
    check = decode_bytes(proto[0])
    assert check.genai_span_count * 5 == check.span_count, "workload must be 20 % GenAI"

    def ours(**kwargs: Any) -> Callable[[bytes], int]:
        return lambda body: decode_bytes(body, **kwargs).span_count

    def parse_only(body: bytes) -> int:
        req = ExportTraceServiceRequest.FromString(body)
        return sum(len(ss.spans) for rs in req.resource_spans for ss in rs.scope_spans)

    def loads_only(body: bytes) -> int:
        doc = json.loads(body)
        return sum(len(ss["spans"]) for rs in doc["resourceSpans"] for ss in rs["scopeSpans"])

    rows: list[tuple[str, Callable[[bytes], int], list[bytes], str | None]] = [
        ("protobuf: decode_bytes (lazy)", ours(), proto, "protobuf baseline"),
        ("protobuf: decode_bytes lazy=False", ours(lazy=False), proto, "protobuf baseline"),
        ("protobuf+gzip: decode_bytes (lazy)", ours(), proto_gz, "protobuf baseline"),
        ("protobuf baseline: FromString+MessageToDict+walk", baseline_protobuf, proto, None),
        ("protobuf floor: FromString + count only", parse_only, proto, "protobuf baseline"),
        ("OTLP/JSON: decode_bytes (lazy)", ours(), otlp, "JSON baseline"),
        ("OTLP/JSON: decode_bytes lazy=False", ours(lazy=False), otlp, "JSON baseline"),
        ("protobuf JSON mapping: decode_bytes (lazy)", ours(), pjson, "JSON baseline"),
        ("JSON baseline: json_format.Parse+decode", baseline_json, pjson, None),
        ("JSON floor: json.loads + count only", loads_only, otlp, "JSON baseline"),
    ]
    sizes = {
        "protobuf": sum(map(len, proto)) / spans,
        "protobuf+gzip": sum(map(len, proto_gz)) / spans,
        "OTLP/JSON": sum(map(len, otlp)) / spans,
        "protobuf JSON": sum(map(len, pjson)) / spans,
    }
    print(
        f"python {platform.python_version()}, protobuf {api_implementation.Type()}, "
        f"{spans} spans in {args.requests} requests (20 % GenAI), "
        f"{args.reps} reps x >={args.min_seconds}s, median"
    )
    print("bytes/span: " + ", ".join(f"{k} {v:,.0f}" for k, v in sizes.items()))
    print()
    load_before = os.getloadavg()[0]
    rates = measure(
        [(name, fn, bodies) for name, fn, bodies, _ in rows], args.reps, args.min_seconds
    )
    load_after = os.getloadavg()[0]
    results = {name: statistics.median(values) for name, values in rates.items()}
    baselines = {"protobuf baseline": results[rows[3][0]], "JSON baseline": results[rows[8][0]]}
    print(f"load average {load_before:.1f} before, {load_after:.1f} after ({os.cpu_count()} CPUs)")
    print()
    print(f"{'row':52} {'spans/s':>10} {'best':>10} {'ratio':>7}  vs")
    for name, _, _, against in rows:
        best = max(rates[name])
        if against is None:
            print(f"{name:52} {results[name]:>10,.0f} {best:>10,.0f} {'1.0x':>7}  (baseline)")
        else:
            ratio = results[name] / baselines[against]
            print(f"{name:52} {results[name]:>10,.0f} {best:>10,.0f} {ratio:>6.1f}x  {against}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
