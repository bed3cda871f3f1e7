"""Coverage-guided fuzzing (atheris / libFuzzer) of decode -> adapt -> grade.

Not a test (pytest collects only `test_*.py`): a harness to run by hand or from a script.
atheris is a dev-only dependency: `uv pip install --python .venv atheris` (a wheel, no
compiler needed on CPython 3.11 x86-64).

Targets (first argument before the libFuzzer flags, default `otlp`):

    otlp   the bytes as an OTLP body: `decode_bytes` (content type and laziness picked from
           the input's length, so every path is reached) -> `hydrate` -> `runs_from_spans`
           -> `grade(run, judge=None)` -> UTF-8 JSON of runs and results (`oracle`)
    runs   the bytes as an attest run file, `.json` or `.jsonl` by the input's length:
           `read_runs` -> `grade` (`oracle.exercise_run_file`)

Run, from the repository root (new inputs go to the first directory; the saved seed corpus
is only read):

    mkdir -p /tmp/fuzz-otlp
    .venv/bin/python tests/fuzz/atheris_decode.py otlp /tmp/fuzz-otlp tests/fuzz/corpus/decode \\
        -runs=1000000 -timeout=10 -rss_limit_mb=3072 -max_len=65536 -print_final_stats=1
    .venv/bin/python tests/fuzz/atheris_decode.py runs /tmp/fuzz-runs tests/fuzz/corpus/runs \\
        -runs=500000 -timeout=10

A crash writes `crash-<sha1>` (or `timeout-`/`oom-`) in the working directory and stops;
copy it to `tests/fuzz/crashes/` and add it to `test_regressions.py`.

Besides libFuzzer's byte mutations, a custom mutator makes structured changes a third of the
time: for JSON, a wrong-typed value, a deleted key or a duplicated item at a random path; for
protobuf requests, shared or malformed ids (parents, cycles, duplicates), extreme times and
nested attribute values; and now and then a gzip wrapper.

`--make-corpus` rewrites the seed corpora from the framework trace fixtures.
"""

from __future__ import annotations

import base64
import gzip
import json
import random
import sys
import tempfile
from pathlib import Path
from typing import Any

import atheris  # type: ignore[import-not-found]

with atheris.instrument_imports(include=["attest_otel"]):
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )
    from opentelemetry.proto.common.v1.common_pb2 import (
        AnyValue,
        ArrayValue,
        KeyValue,
        KeyValueList,
    )

    from tests.fuzz import oracle

ROOT = Path(__file__).resolve().parents[2]
CORPUS = Path(__file__).resolve().parent / "corpus"
_CONTENT_TYPES = (None, None, "application/json", "application/x-protobuf")
_RUN_DIR = Path(
    tempfile.mkdtemp(prefix="atheris-runs-", dir="/dev/shm" if Path("/dev/shm").is_dir() else None)
)


def test_otlp(data: bytes) -> None:
    content_type = _CONTENT_TYPES[len(data) % 4]
    oracle.exercise_otlp(data, content_type, lazy=bool(len(data) & 4))


def test_runs(data: bytes) -> None:
    suffix = ".jsonl" if len(data) % 2 else ".json"
    path = _RUN_DIR / f"run{suffix}"
    path.write_bytes(data)
    oracle.exercise_run_file(path)


# -- structured mutations ------------------------------------------------------------------------

_NASTY: list[Any] = [
    None,
    True,
    0,
    -1,
    2**64,
    -(2**63) - 1,
    1e308,
    0.5,
    "",
    "x",
    "NaN",
    "ffffffffffffffffffffffffffffffff",
    "AAAAAAAAAAAAAAAAAAAAAA==",
    "0000000000000001",
    "\ud800",
    "é" * 50,
    [],
    {},
    [[[[[]]]]],
    {"stringValue": 5},
    {"arrayValue": {"values": [{"kvlistValue": {"values": [{"key": "k"}]}}]}},
    {"intValue": "99999999999999999999"},
    {"doubleValue": "Infinity"},
    {"bytesValue": "!!"},
    {"bytesValue": "RXJyb3I6IP8="},
    {"kvlistValue": {"values": [{"key": "k", "value": {"bytesValue": "/w=="}}]}},
    "SPAN_KIND_SERVER",
    "STATUS_CODE_ERROR",
    '[{"role": "assistant", "parts": [{"type": "tool_call", "id": "c", "name": "t"}]}]',
]


_TEXT_KEYS = (
    "gen_ai.tool.call.result",
    "gen_ai.tool.call.arguments",
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.tool.name",
    "gen_ai.agent.name",
    "input.value",
    "output.value",
    "tool.name",
    "attest.allowed_tools",
    "attest.tool_fallbacks",
    "gen_ai.response.id",
)


def _paths(node: Any, prefix: tuple[Any, ...], out: list[tuple[Any, ...]]) -> None:
    out.append(prefix)
    if len(out) > 2000:
        return
    if isinstance(node, dict):
        for key, value in node.items():
            _paths(value, (*prefix, key), out)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            _paths(value, (*prefix, i), out)


def _mutate_json(data: bytes, rng: random.Random) -> bytes | None:
    try:
        lines = data.decode("utf-8").splitlines()
        documents = [json.loads(line) for line in lines if line.strip()]
    except (ValueError, RecursionError):
        try:
            documents = [json.loads(data)]
        except (ValueError, RecursionError):
            return None
    if not documents:
        return None
    index = rng.randrange(len(documents))
    paths: list[tuple[Any, ...]] = []
    _paths(documents[index], (), paths)
    path = rng.choice(paths[1:] or paths)
    if not path:
        documents[index] = rng.choice(_NASTY)
    else:
        parent = documents[index]
        for step in path[:-1]:
            parent = parent[step]
        op = rng.randrange(4)
        if op == 0:
            parent[path[-1]] = rng.choice(_NASTY)
        elif op == 1:
            del parent[path[-1]]
        elif op == 2 and isinstance(parent, list):
            parent.insert(path[-1], json.loads(json.dumps(parent[path[-1]])))
        else:
            parent[path[-1]] = {"arrayValue": {"values": [parent[path[-1]]]}}
    return "\n".join(json.dumps(d) for d in documents).encode()


def _mutate_proto(data: bytes, rng: random.Random) -> bytes | None:
    try:
        req = ExportTraceServiceRequest.FromString(data)
    except Exception:
        return None
    spans = [ps for rs in req.resource_spans for ss in rs.scope_spans for ps in ss.spans]
    if not spans:
        return None
    span = rng.choice(spans)
    other = rng.choice(spans)
    op = rng.randrange(10)
    if op == 0:
        span.parent_span_id = other.span_id  # maybe itself, maybe a cycle
    elif op == 1:
        span.span_id = other.span_id  # duplicate id
    elif op == 2:
        span.parent_span_id = rng.randbytes(8)  # a parent that never arrives
    elif op == 3:
        span.start_time_unix_nano = rng.choice((0, 1, 2**64 - 1, span.end_time_unix_nano + 1))
    elif op == 4:
        value = AnyValue(string_value="x")
        for _ in range(rng.randrange(1, 45)):  # upb refuses to copy more than 100 levels
            value = AnyValue(array_value=ArrayValue(values=[value]))
        key = rng.choice(("gen_ai.tool.call.result", "k"))
        span.attributes.append(KeyValue(key=key, value=value))
    elif op == 5:
        kv = rng.choice(list(span.attributes) or [KeyValue(key="gen_ai.operation.name")])
        span.attributes.append(KeyValue(key=kv.key, value=AnyValue(int_value=rng.randrange(-9, 9))))
    elif op == 6:
        span.trace_id = rng.randbytes(rng.choice((0, 15, 16, 17)))
    elif op in (8, 9):  # a bytes or map value where the adapters read text
        raw = AnyValue(bytes_value=rng.randbytes(rng.randrange(12)))
        if op == 9:
            raw = AnyValue(kvlist_value=KeyValueList(values=[KeyValue(key="k", value=raw)]))
        span.attributes.append(KeyValue(key=rng.choice(_TEXT_KEYS), value=raw))
    else:
        span.CopyFrom(other)
    try:
        return req.SerializeToString()
    except Exception:  # too deep for upb to write
        return None


def custom_mutator(data: bytes, max_size: int, seed: int) -> bytes:
    rng = random.Random(seed)
    if rng.random() < 0.33:
        try:
            mutated = _mutate_json(data, rng)
            if mutated is None:
                mutated = _mutate_proto(data, rng)
        except Exception:  # the mutator's own limits (upb depth): fall back to bytes
            mutated = None
        if mutated is not None and len(mutated) <= max_size:
            if rng.random() < 0.05:
                mutated = gzip.compress(mutated)
            if len(mutated) <= max_size:
                return mutated
    out: bytes = atheris.Mutate(data, max_size)
    return out


# -- the seed corpora ----------------------------------------------------------------------------

_SEED_TRACES = (
    "anthropic_openinference__retry.json",
    "anthropic_openllmetry_events__fallback.json",
    "openai_agents_openinference__multi_agent.json",
    "pydantic_ai_v5__unrecovered_claims.json",
    "strands__disallowed.json",
    "vercel7genai__all_ok.json",
    "langgraph_openinference__unrecovered_ignores.json",
)


def _hex_ids_to_base64(node: Any) -> Any:
    if isinstance(node, dict):
        return {
            k: base64.b64encode(bytes.fromhex(v)).decode()
            if k in ("traceId", "spanId", "parentSpanId") and isinstance(v, str)
            else _hex_ids_to_base64(v)
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_hex_ids_to_base64(v) for v in node]
    return node


_SEED_BYTES = 12_000


def make_corpus() -> None:
    from google.protobuf import json_format  # type: ignore[import-untyped]

    decode_dir = CORPUS / "decode"
    decode_dir.mkdir(parents=True, exist_ok=True)
    for name in _SEED_TRACES:
        lines = (ROOT / "tests/fixtures/traces" / name).read_text().splitlines()
        stem = name.removesuffix(".json")
        req = ExportTraceServiceRequest()
        for line in lines:
            document = json.loads(line)
            if "resourceSpans" in document:
                part = ExportTraceServiceRequest()
                json_format.ParseDict(_hex_ids_to_base64(document), part)
                req.resource_spans.extend(part.resource_spans)
        while len(req.resource_spans) > 1 and req.ByteSize() > _SEED_BYTES:
            del req.resource_spans[-1]  # small seeds fuzz faster
        (decode_dir / f"{stem}.pb").write_bytes(req.SerializeToString())
        head: list[str] = []
        for line in lines:
            if head and sum(len(h) for h in head) + len(line) > _SEED_BYTES:
                break
            head.append(line)
        (decode_dir / f"{stem}.head.jsonl").write_text("\n".join(head) + "\n")
    first = ExportTraceServiceRequest()
    first.resource_spans.extend(req.resource_spans[:2])
    (decode_dir / "protobuf_json_mapping.json").write_text(json_format.MessageToJson(first))
    (decode_dir / "gzip.pb.gz").write_bytes(gzip.compress(first.SerializeToString()))
    runs_dir = CORPUS / "runs"
    runs_dir.mkdir(parents=True, exist_ok=True)
    for path in sorted((ROOT / "examples/runs").glob("*.json")):
        (runs_dir / path.name).write_bytes(path.read_bytes())
    (runs_dir / "runs.jsonl").write_text(
        "\n".join((ROOT / "examples/runs.jsonl").read_text().splitlines()[:3]) + "\n"
    )


def main() -> None:
    argv = sys.argv[:]
    if "--make-corpus" in argv:
        make_corpus()
        return
    target = "otlp"
    if len(argv) > 1 and argv[1] in ("otlp", "runs"):
        target = argv.pop(1)
    run = test_otlp if target == "otlp" else test_runs
    atheris.Setup(argv, run, custom_mutator=custom_mutator if target == "otlp" else None)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
