"""Big OTLP/JSON-lines files for issue 27's "big inputs": many traces, or one huge trace.

    .venv/bin/python bench/big_file.py many OUT.jsonl --mib 200 [--spread 2]
    .venv/bin/python bench/big_file.py calls OUT.jsonl --calls 30000

`many`: JSON lines as the Collector's file exporter writes them, one ExportTraceServiceRequest
per line, each of 24 traces: agent traces (1 `invoke_agent`, 10 `chat`, 10 `execute_tool`
spans with JSON content, GenAI semconv as bench/sidecar_workload.py) and plain HTTP/DB traces
in between (one in four traces an agent's), until the file reaches `--mib`. With `--spread
N` every trace's spans are dealt over N consecutive lines (a batch processor that flushed in
the middle of a trace), so a trace is complete only some lines after it started.

`calls`: one trace whose one agent makes `--calls` tool calls (an `execute_tool` span each,
under the agent span; the model's `chat` spans every 10 calls), the shape of the 30,000-call
trace of issue 27.

Also a measuring harness for the `grade --file` figures in docs/measurements.md:

    .venv/bin/python bench/big_file.py measure -- grade --file OUT.jsonl --json

runs the CLI in a child process and prints its wall time and peak RSS (`ru_maxrss`).
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

TRACES_PER_LINE = 24
AGENT_SHARE = 4  # one trace in this many is an agent's
_WORDS = ["alpha", "beta", "gamma", "delta", "order", "invoice", "weather", "paris", "ok"]


def _text(rng: random.Random, lo: int, hi: int) -> str:
    size = rng.randint(lo, hi)
    out: list[str] = []
    length = 0
    while length < size:
        word = rng.choice(_WORDS)
        out.append(word)
        length += len(word) + 1
    return " ".join(out)


def _kv(key: str, value: str | int) -> dict[str, Any]:
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    return {"key": key, "value": {"stringValue": value}}


def _span(
    tid: str,
    sid: str,
    parent: str,
    name: str,
    start: int,
    attrs: list[dict[str, Any]],
    *,
    kind: int = 1,
    error: bool = False,
) -> dict[str, Any]:
    span: dict[str, Any] = {
        "traceId": tid,
        "spanId": sid,
        "name": name,
        "kind": kind,
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(start + 1_000_000),
        "attributes": attrs,
        "status": {"code": 2, "message": "tool failed"} if error else {},
    }
    if parent:
        span["parentSpanId"] = parent
    return span


def _messages(role: str, part: dict[str, Any]) -> str:
    return json.dumps([{"role": role, "parts": [part]}])


def _chat(rng: random.Random, tid: str, agent: str, start: int, call: str, tool: str) -> Any:
    attrs = [
        _kv("gen_ai.operation.name", "chat"),
        _kv("gen_ai.provider.name", "anthropic"),
        _kv("gen_ai.request.model", "claude-haiku-4-5"),
        _kv("gen_ai.usage.input_tokens", rng.randint(100, 4000)),
        _kv("gen_ai.usage.output_tokens", rng.randint(10, 400)),
        _kv(
            "gen_ai.input.messages",
            _messages("user", {"type": "text", "content": _text(rng, 300, 1500)}),
        ),
        _kv(
            "gen_ai.output.messages",
            _messages(
                "assistant",
                {"type": "tool_call", "id": call, "name": tool, "arguments": {"q": "x"}},
            ),
        ),
    ]
    return _span(tid, rng.randbytes(8).hex(), agent, "chat claude-haiku-4-5", start, attrs, kind=3)


def _tool(rng: random.Random, tid: str, agent: str, start: int, call: str, tool: str) -> Any:
    attrs = [
        _kv("gen_ai.operation.name", "execute_tool"),
        _kv("gen_ai.tool.name", tool),
        _kv("gen_ai.tool.call.id", call),
        _kv("gen_ai.tool.type", "function"),
        _kv("gen_ai.tool.call.arguments", json.dumps({"q": _text(rng, 20, 200)})),
        _kv("gen_ai.tool.call.result", _text(rng, 50, 1000)),
    ]
    error = rng.random() < 0.05
    return _span(
        tid, rng.randbytes(8).hex(), agent, f"execute_tool {tool}", start, attrs, error=error
    )


def _agent(rng: random.Random, tid: str, sid: str, start: int) -> dict[str, Any]:
    attrs = [
        _kv("gen_ai.operation.name", "invoke_agent"),
        _kv("gen_ai.agent.name", "bench_agent"),
        _kv("gen_ai.provider.name", "anthropic"),
        _kv(
            "gen_ai.input.messages",
            _messages("user", {"type": "text", "content": _text(rng, 200, 600)}),
        ),
        _kv(
            "gen_ai.output.messages",
            _messages("assistant", {"type": "text", "content": _text(rng, 200, 800)}),
        ),
    ]
    return _span(tid, sid, "", "invoke_agent bench_agent", start, attrs)


def agent_trace(rng: random.Random, start: int, calls: int = 10) -> list[dict[str, Any]]:
    tid, agent = rng.randbytes(16).hex(), rng.randbytes(8).hex()
    spans = [_agent(rng, tid, agent, start)]
    for i in range(calls):
        tool, call = f"tool_{i % 3}", f"call_{i}"
        at = start + (i + 1) * 2_000_000
        if calls <= 10 or i % 10 == 0:
            spans.append(_chat(rng, tid, agent, at, call, tool))
        spans.append(_tool(rng, tid, agent, at + 1_000_000, call, tool))
    return spans


def plain_trace(rng: random.Random, start: int) -> list[dict[str, Any]]:
    tid, root = rng.randbytes(16).hex(), rng.randbytes(8).hex()
    spans = [
        _span(
            tid,
            root,
            "",
            "GET /api/orders/{id}",
            start,
            [_kv("http.request.method", "GET"), _kv("http.route", "/api/orders/{id}")],
            kind=2,
        )
    ]
    for i in range(20):
        attrs = [
            _kv("db.system.name", "postgresql"),
            _kv("db.query.text", "SELECT * FROM order_items WHERE " + _text(rng, 100, 600)),
        ]
        spans.append(
            _span(tid, rng.randbytes(8).hex(), root, "SELECT", start + i * 100_000, attrs, kind=3)
        )
    return spans


def _request(spans: list[dict[str, Any]]) -> bytes:
    return json.dumps(
        {
            "resourceSpans": [
                {
                    "resource": {"attributes": [_kv("service.name", "bench")]},
                    "scopeSpans": [{"scope": {"name": "bench"}, "spans": spans}],
                }
            ]
        },
        separators=(",", ":"),
    ).encode()


def many_lines(rng: random.Random, spread: int) -> Iterator[bytes]:
    """Lines of 24 traces each, each trace dealt over `spread` consecutive lines."""
    pending: list[list[dict[str, Any]]] = [[] for _ in range(spread)]
    n = 0
    while True:
        batch: list[list[dict[str, Any]]] = []
        for _ in range(TRACES_PER_LINE):
            start = 1_700_000_000_000_000_000 + n * 10**8
            make = agent_trace if n % AGENT_SHARE == 0 else plain_trace
            batch.append(make(rng, start))
            n += 1
        for trace in batch:
            for i, span in enumerate(trace):
                pending[i % spread].append(span)
        yield _request(pending.pop(0))
        pending.append([])


def write_many(out: Path, mib: float, spread: int, seed: int = 7) -> int:
    rng = random.Random(seed)
    limit = int(mib * 1024 * 1024)
    size = lines = 0
    with out.open("wb") as f:
        for line in many_lines(rng, spread):
            f.write(line + b"\n")
            size += len(line) + 1
            lines += 1
            if size >= limit:
                break
    return lines


def write_calls(out: Path, calls: int, seed: int = 7) -> None:
    rng = random.Random(seed)
    spans = agent_trace(rng, 1_700_000_000_000_000_000, calls)
    out.write_bytes(_request(spans) + b"\n")


def measure(argv: list[str]) -> dict[str, float]:
    """Wall and CPU seconds and peak RSS (MiB) of `attest-otel ARGV` in a child process.

    CPU seconds are the steadier figure on a shared machine. To measure another checkout,
    put it first on PYTHONPATH (`PYTHONPATH=/tmp/old python bench/big_file.py measure ...`)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "attest_otel.cli", *argv],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        check=False,
    )
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    if done.returncode not in (0, 1):
        sys.stderr.write(done.stderr.decode(errors="replace"))
    return {
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
        "peak_rss_mib": round(after.ru_maxrss / 1024, 1),
        "exit": done.returncode,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    many = sub.add_parser("many", help="many traces, JSON lines")
    many.add_argument("out", type=Path)
    many.add_argument("--mib", type=float, default=200.0)
    many.add_argument("--spread", type=int, default=2)
    many.add_argument("--seed", type=int, default=7)
    calls = sub.add_parser("calls", help="one trace of many tool calls")
    calls.add_argument("out", type=Path)
    calls.add_argument("--calls", type=int, default=30_000)
    run = sub.add_parser("measure", help="time and peak RSS of one attest-otel command")
    run.add_argument("argv", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    if args.what == "many":
        lines = write_many(args.out, args.mib, args.spread, args.seed)
        print(f"{args.out}: {lines} lines, {args.out.stat().st_size / 2**20:.1f} MiB")
    elif args.what == "calls":
        write_calls(args.out, args.calls)
        print(f"{args.out}: 1 trace, {args.calls} calls, {args.out.stat().st_size / 2**20:.1f} MiB")
    else:
        argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
        print(json.dumps(measure(argv)))


if __name__ == "__main__":
    main()
