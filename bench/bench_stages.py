"""Where a GenAI span's time goes in the sidecar: the per-stage cost, in us per GenAI span.

    .venv/bin/python bench/bench_stages.py [--requests 6] [--rounds 3] [--profile STAGE]

Runs every stage of the sidecar's path in this process, one after the other, on the agent
workload of `bench_sidecar.py` (every span GenAI, 504 spans per request), and prints the
median over rounds of each stage's time divided by the GenAI spans it handled. The stages
are the ones the sidecar runs, called as the sidecar calls them:

  receiving process   split (wire), route (classify + buffer), release (shape + agent
                      probe), forward (offer + the store's queue + metrics)
  grading process     grade: parse + decode + adapt + rules + annotate + serialize, and the
                      evaluation log records encoded for sending

`--profile STAGE` runs cProfile over one stage instead (receive, grade, logs).
Not a test; `make bench` runs it.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

from sidecar_workload import build_requests  # noqa: E402

from attest_otel.content import KEEP  # noqa: E402
from attest_otel.sidecar.buffer import HeldTrace, TraceBuffer  # noqa: E402
from attest_otel.sidecar.config import BufferConfig  # noqa: E402
from attest_otel.sidecar.forward import ForwardItem  # noqa: E402
from attest_otel.sidecar.probe import agent_probe  # noqa: E402
from attest_otel.sidecar.requests import RequestPath  # noqa: E402
from attest_otel.sidecar.stats import SidecarStats  # noqa: E402
from attest_otel.sidecar.wire import split_request  # noqa: E402


class _NullForwarder:
    def __init__(self) -> None:
        self.items: list[ForwardItem] = []

    def offer(self, item: ForwardItem) -> None:
        self.items.append(item)

    def has_room(self, spans: int = 0, size: int = 0) -> bool:
        return True


def _buffer(release: Callable[[list[HeldTrace]], None]) -> TraceBuffer:
    return TraceBuffer(
        BufferConfig(
            grace_s=0.0, idle_timeout_s=7200, max_traces=10**7, max_spans=10**9, max_bytes=1 << 40
        ),
        probe=lambda t, c, w, s: agent_probe(t, c, w, s, keep=False),
        release=release,
        clock=lambda: 1e9,
    )


def receive(requests: list[bytes]) -> tuple[dict[str, float], list[HeldTrace]]:
    """The receiving process up to the hand-over to grading; seconds per stage."""
    released: list[HeldTrace] = []
    buf = _buffer(released.extend)
    path = RequestPath(
        buffer=buf,
        forwarder=_NullForwarder(),  # type: ignore[arg-type]
        stats=SidecarStats(),
        wal=None,
        submit=released.extend,
        retry_after_s=1,
        max_backlog_spans=10**9,
    )
    t = {"split": 0.0, "route": 0.0, "release": 0.0}
    for data in requests:
        t0 = time.perf_counter()
        groups = split_request(data)
        t1 = time.perf_counter()
        path.route(data, groups, sum(len(g.spans) for g in groups), None)
        t2 = time.perf_counter()
        t["split"] += t1 - t0
        t["route"] += t2 - t1
    t0 = time.perf_counter()
    buf.tick()  # reads the shape and probes for agent spans
    buf.tick()  # releases the complete traces
    t["release"] = time.perf_counter() - t0
    return t, released


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", choices=("receive", "grade", "logs"))
    args = parser.parse_args()
    requests = build_requests(args.requests, 24, 1.0, seed=1)
    genai = sum(len(g.spans) for r in requests for g in split_request(r))
    stages = _stages()
    if args.profile:
        profile = cProfile.Profile()
        _, held = receive(requests)
        if args.profile == "receive":
            profile.runcall(receive, requests)
        else:
            profile.runcall(stages[args.profile], held)
        pstats.Stats(profile).sort_stats("cumulative").print_stats(40)
        return
    samples: dict[str, list[float]] = {}
    for _ in range(args.rounds):
        times, held = receive(requests)
        for name, fn in stages.items():
            t0 = time.perf_counter()
            fn(held)
            times[name] = time.perf_counter() - t0
        for name, seconds in times.items():
            samples.setdefault(name, []).append(seconds * 1e6 / genai)
    print(
        f"{genai} GenAI spans ({len(requests)} requests of 24 agent traces, 21 spans each); "
        f"median of {args.rounds} rounds, us per GenAI span"
    )
    total = 0.0
    for name, values in samples.items():
        median = statistics.median(values)
        total += median
        print(f"  {name:10s} {median:7.1f}")
    print(f"  {'total':10s} {total:7.1f}")
    cut, whole = _plain_accept(args.rounds)
    print(
        f"plain requests (no GenAI span, none of a held trace), accept in us per span: "
        f"cut into spans and routed {cut:.1f}, forwarded whole after a request-wide test "
        f"{whole:.1f}"
    )


def _plain_accept(rounds: int) -> tuple[float, float]:
    """`RequestPath.accept` on plain requests while agent traces are held, with the
    whole-request test (`RequestPath.plain`) off and on: medians, us per span."""
    plain = build_requests(20, 24, 0.0, seed=3)
    agent = build_requests(4, 24, 1.0, seed=1)

    def run(whole: bool) -> float:
        path = RequestPath(
            buffer=_buffer(lambda ts: None),
            forwarder=_NullForwarder(),  # type: ignore[arg-type]
            stats=SidecarStats(),
            wal=None,
            submit=lambda ts: None,
            retry_after_s=1,
            max_backlog_spans=10**9,
        )
        for data in agent:
            path.accept(data)
        if not whole:
            path.plain = lambda data, scanned: None  # type: ignore[method-assign]
        start = time.perf_counter()
        for data in plain:
            path.accept(data)
        return (time.perf_counter() - start) / (len(plain) * 504) * 1e6

    run(True), run(False)
    cut = [run(False) for _ in range(max(rounds, 3))]
    whole = [run(True) for _ in range(max(rounds, 3))]
    return statistics.median(cut), statistics.median(whole)


def _stages() -> dict[str, Callable[[list[HeldTrace]], Any]]:
    """The grading-side stages, as the sidecar runs them (see the module docstring)."""
    from attest_otel.sidecar import grading

    stages: dict[str, Callable[[list[HeldTrace]], Any]] = {}
    graded: list[Any] = []

    def grade(held: list[HeldTrace]) -> None:
        graded.clear()
        for trace in held:
            graded.append(grading.grade_in_worker(bytes(trace.data), "bench"))

    stages["grade"] = grade
    logs = _log_stage(graded)
    if logs is not None:
        stages["logs"] = logs
    return stages


def _log_stage(graded: list[Any]) -> Callable[[list[HeldTrace]], Any] | None:
    """The evaluation log records of every graded run, encoded as they are sent."""
    try:
        from attest_otel.export.log_records import logs_request
        from attest_otel.sidecar.grading_worker import encode_logs
    except ImportError:
        return _sdk_log_stage(graded)

    def logs(held: list[HeldTrace]) -> None:
        for graded_trace in graded:
            logs_request(encode_logs(graded_trace[1], time.time_ns(), KEEP))

    return logs


def _sdk_log_stage(graded: list[Any]) -> Callable[[list[HeldTrace]], Any]:
    """Before `export.log_records`: the SDK's per-record path and its OTLP encoder."""
    from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
    from opentelemetry.sdk._logs import LoggerProvider, LogRecordProcessor

    from attest_otel.export.log_events import emit_log_events

    class Collect(LogRecordProcessor):  # type: ignore[misc]
        """What BatchLogRecordProcessor does, minus its thread: keep, then encode at once."""

        def __init__(self) -> None:
            self.batch: list[Any] = []

        def on_emit(self, record: Any) -> None:
            self.batch.append(record)

        emit = on_emit

        def shutdown(self) -> None:
            pass

        def force_flush(self, timeout_millis: int = 0) -> bool:
            return True

    provider = LoggerProvider()
    collect = Collect()
    provider.add_log_record_processor(collect)
    logger = provider.get_logger("bench")

    def logs(held: list[HeldTrace]) -> None:
        collect.batch.clear()
        for graded_trace in graded:
            for run, result in graded_trace[1]:
                emit_log_events(logger, run, result)
        encode_logs(collect.batch).SerializeToString()

    return logs


if __name__ == "__main__":
    main()
