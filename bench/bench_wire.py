"""The receiving process's CPU per span with the wire core against the Python walks it
replaced (issue 30), measured in the same run on the same requests.

    .venv/bin/python bench/bench_wire.py [--rounds 5]

Baseline: `attest_otel/sidecar/wire.py` as it was before the core (commit `BASELINE`, read
from git), patched into every sidecar module in place of the core's functions; the rest of
the sidecar is the same code in both runs. Stages, as the sidecar runs them in its receiving
process (no WAL, a forwarder that only queues):

  genai    `RequestPath.accept` on the agent workload (bench_sidecar's: 24 agent traces of 21
           spans a request, every span GenAI), then the buffer's ticks that read each held
           trace's shape and release it (`TraceBuffer.tick`): us of CPU per GenAI span;
  plain    `accept` on requests with no GenAI span (the workload's HTTP/DB spans, 504 a
           request) while agent traces are held: us per plain span;
  check    `check_message` alone on those plain requests (upb's parse in the baseline);
  logs     `log_wire.split_logs`, the cut of a logs request, against its Python walk (commit
           `LOGS_BASELINE`) on requests of 64 GenAI event records: us per log record.

Figures: docs/measurements.md ("The wire core").
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

from bench_stages import _buffer, _NullForwarder  # noqa: E402
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (  # noqa: E402
    ExportLogsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (  # noqa: E402
    ExportTraceServiceRequest,
)
from sidecar_workload import build_requests  # noqa: E402

from attest_otel.sidecar import probe, wire  # noqa: E402
from attest_otel.sidecar.log_wire import split_logs  # noqa: E402
from attest_otel.sidecar.requests import RequestPath  # noqa: E402
from attest_otel.sidecar.stats import SidecarStats  # noqa: E402

AGENT_MARKS = probe.AGENT_MARKS
CORE_AGENT_PROBE = probe._is_agent_record
BASELINE = "594a08c"
"""The last commit whose sidecar/wire.py walks the bytes in Python."""


def baseline_wire() -> types.ModuleType:
    source = subprocess.run(
        ["git", "show", f"{BASELINE}:attest_otel/sidecar/wire.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    module = types.ModuleType("baseline_wire")
    module.__dict__["__name__"] = "baseline_wire"
    sys.modules["baseline_wire"] = module
    exec(compile(source, "baseline_wire.py", "exec"), module.__dict__)
    old: Any = module

    # What the sidecar asked of the baseline in place of the core's one-walk functions.
    def check_traces(data: bytes) -> tuple[str | None, tuple[int, set[bytes]] | None]:
        problem = old.check_message(data, ExportTraceServiceRequest)
        if problem is not None or old.GENAI_KEY_BYTES.search(data) is not None:
            return problem, None
        return None, old.plain_request(data)

    def span_shapes(data: bytes) -> list[tuple[bytes, bytes, bool, bytes]]:
        out = []
        for group in old.split_request(data):
            scope = group.is_genai_scope()
            for _trace_id, name, record in group.spans:
                span_id, parent_id = old.span_links(record)
                genai = (
                    scope
                    or old.is_genai_name(name)
                    or old.GENAI_KEY_BYTES.search(record) is not None
                )
                out.append((span_id, parent_id, genai, record))
        return out

    def is_agent_record(record: bytes) -> bool:
        return AGENT_MARKS[0] in record or AGENT_MARKS[1] in record

    module.check_traces = check_traces
    module.span_shapes = span_shapes
    module.is_agent_record = is_agent_record
    return module


def use(impl: types.ModuleType, current: dict[str, Any]) -> None:
    """Point every sidecar module's names from `wire` at `impl`'s."""
    for name, module in list(sys.modules.items()):
        if not name.startswith("attest_otel.sidecar.") or module is wire:
            continue
        for attr, value in list(vars(module).items()):
            for wname, wvalue in current.items():
                if value is wvalue and hasattr(impl, wname):
                    setattr(module, attr, getattr(impl, wname))
    current.clear()
    current.update({k: v for k, v in vars(impl).items() if not k.startswith("__")})
    probe._is_agent_record = getattr(impl, "is_agent_record", CORE_AGENT_PROBE)


def path_for(buffer: Any) -> RequestPath:
    return RequestPath(
        buffer=buffer,
        forwarder=_NullForwarder(),  # type: ignore[arg-type]
        stats=SidecarStats(),
        wal=None,
        submit=lambda ts: None,
        retry_after_s=1,
        max_backlog_spans=10**9,
    )


def genai_cpu(requests: list[bytes], spans: int) -> float:
    released: list[Any] = []
    buffer = _buffer(released.extend)
    path = path_for(buffer)
    start = time.process_time()
    for data in requests:
        assert path.accept(data).ok
    buffer.tick()
    buffer.tick()
    cpu = time.process_time() - start
    assert released, "the agent traces were not released"
    return cpu / spans * 1e6


def plain_cpu(agent: list[bytes], plain: list[bytes], spans: int) -> float:
    path = path_for(_buffer(lambda ts: None))
    for data in agent:
        path.accept(data)
    start = time.process_time()
    for _ in range(3):
        for data in plain:
            assert path.accept(data).ok
    return (time.process_time() - start) / (3 * spans) * 1e6


LOGS_BASELINE = "b93dfdf"
"""The last commit whose sidecar/log_wire.py cuts logs requests in Python."""


def baseline_split_logs() -> Callable[[bytes], Any]:
    source = subprocess.run(
        ["git", "show", f"{LOGS_BASELINE}:attest_otel/sidecar/log_wire.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    module: dict[str, Any] = {"__name__": "baseline_log_wire"}
    exec(compile(source, "baseline_log_wire.py", "exec"), module)
    split: Callable[[bytes], Any] = module["split_logs"]
    return split


def log_requests(count: int) -> list[bytes]:
    """Requests of 64 log records each, as a GenAI instrumentation emits its events."""
    out = []
    for r in range(count):
        request = ExportLogsServiceRequest()
        scope = request.resource_logs.add().scope_logs.add()
        scope.scope.name = "opentelemetry.instrumentation.openai"
        for i in range(64):
            record = scope.log_records.add(
                time_unix_nano=i,
                trace_id=bytes([r % 256, i]) * 8,
                span_id=bytes([i]) * 8,
                event_name="gen_ai.user.message",
            )
            record.body.string_value = "x" * 200
            record.attributes.add(key="gen_ai.system").value.string_value = "openai"
        out.append(request.SerializeToString())
    return out


def logs_cpu(requests: list[bytes], split: Callable[[bytes], Any]) -> float:
    start = time.process_time()
    for _ in range(3):
        for data in requests:
            split(data)
    return (time.process_time() - start) / (3 * 64 * len(requests)) * 1e6


def check_cpu(plain: list[bytes], spans: int, check: Callable[..., Any]) -> float:
    start = time.process_time()
    for _ in range(3):
        for data in plain:
            assert check(data, ExportTraceServiceRequest) is None
    return (time.process_time() - start) / (3 * spans) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    agent = build_requests(6, 24, 1.0, seed=1)
    agent_spans = sum(len(g.spans) for r in agent for g in wire.split_request(r))
    plain = build_requests(20, 24, 0.0, seed=3)
    plain_spans = sum(len(g.spans) for r in plain for g in wire.split_request(r))
    held = build_requests(2, 24, 1.0, seed=5)
    impls = {"python": baseline_wire(), "core": wire}
    logs = log_requests(40)
    splits = {"python": baseline_split_logs(), "core": split_logs}
    current = {k: v for k, v in vars(wire).items() if not k.startswith("__")}
    results: dict[str, dict[str, list[float]]] = {}
    for _ in range(args.rounds):
        for label, impl in impls.items():
            use(impl, current)
            row = results.setdefault(label, {})
            row.setdefault("genai", []).append(genai_cpu(agent, agent_spans))
            row.setdefault("plain", []).append(plain_cpu(held, plain, plain_spans))
            row.setdefault("check", []).append(check_cpu(plain, plain_spans, impl.check_message))
            row.setdefault("logs", []).append(logs_cpu(logs, splits[label]))
    use(wire, current)
    print(
        f"receiving-process CPU, us per span, median of {args.rounds} rounds "
        f"({agent_spans} GenAI spans in {len(agent)} requests; {plain_spans} plain spans "
        f"in {len(plain)} requests)"
    )
    print(f"  {'':8s} {'python':>8s} {'core':>8s} {'ratio':>7s}")
    for stage in ("genai", "plain", "check", "logs"):
        py = statistics.median(results["python"][stage])
        core = statistics.median(results["core"][stage])
        print(f"  {stage:8s} {py:8.2f} {core:8.2f} {py / core:6.1f}x")


if __name__ == "__main__":
    main()
