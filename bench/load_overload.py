"""Overload: the sidecar driven at ten times what it can pass on, for a minute.

    .venv/bin/python bench/load_overload.py [--seconds 60] [--capacity 2000] [--factor 10]

What "capacity" is here: the next hop (a sink process) takes at most `--capacity` spans/s,
so that is all the sidecar can deliver, whatever its own CPU. Raw gRPC clients (many at
once, each with one request in hand) send at `--factor` times that rate, honouring the
RetryInfo delay of every "retry later" answer, for `--seconds`; then they stop taking new
requests, finish the ones in hand, and the sink is read.

Requests are the benchmark workload (sidecar_workload.py: 5 traces of 21 spans, 10 % agent
traces, graded and annotated on the way) with every trace and span id rewritten per request
(`<request seq><index>`), so each span id sent is unique and can be looked for downstream.

Reported: the attempted and delivered rates (their ratio is the overload), requests
refused with RetryInfo, the sidecar's RSS sampled every second (start, peak, the peak of each
half), and the spans lost: acknowledged by the sidecar but never seen by the sink (must be 0).
Spans never acknowledged stay with their sender, as OTLP intends (its exporter retries them),
and are counted apart. Exit status 1 when a span is lost or RSS grows in the second half by
more than 25 % over the first.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

from sidecar_workload import build_requests  # noqa: E402

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
SERVICES = (
    "opentelemetry.proto.collector.trace.v1.TraceService",
    "opentelemetry.proto.collector.logs.v1.LogsService",
    "opentelemetry.proto.collector.metrics.v1.MetricsService",
)
RETRY_INFO_KEY = "google.rpc.retryinfo-bin"
CONFIG = (
    "buffer: {grace_s: 0.2, idle_timeout_s: 2}\n"
    "forward: {retry_after_s: 0.1, max_queue_spans: 20000, max_queue_size_mib: 64}\n"
    "telemetry: {metrics: false}\n"
)
"""The forward queue is the bound that turns overload into "retry later"; 0.1 s is the delay
asked of the senders, so they come back often (the overload is in the attempts)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


# --- the sink: a next hop that takes `capacity` spans/s at most ---------------------------------


def serve_sink(port: int, capacity: float, out: str) -> None:
    import signal

    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    ids: list[bytes] = []
    lock = threading.Lock()
    budget = {"next": time.monotonic()}

    def traces(request: bytes, context: Any) -> bytes:
        req = ExportTraceServiceRequest.FromString(request)
        got = [s.span_id for rs in req.resource_spans for ss in rs.scope_spans for s in ss.spans]
        with lock:  # a token bucket: the request's spans cost 1/capacity s each
            now = time.monotonic()
            start = max(now, budget["next"])
            budget["next"] = start + len(got) / capacity
        time.sleep(max(0.0, start - now))
        with lock:
            ids.extend(got)
        return b""

    def other(request: bytes, context: Any) -> bytes:
        return b""

    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=8),
        options=[("grpc.max_receive_message_length", 64 << 20)],
    )
    server.add_generic_rpc_handlers(
        [
            grpc.method_handlers_generic_handler(
                service,
                {
                    "Export": grpc.unary_unary_rpc_method_handler(
                        traces if "Trace" in service else other,
                        request_deserializer=None,
                        response_serializer=None,
                    )
                },
            )
            for service in SERVICES
        ]
    )
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    print("ready", flush=True)
    done.wait()
    server.stop(2).wait(5)
    with lock:
        Path(out).write_bytes(b"".join(ids))
    print("written", flush=True)


# --- requests with unique ids -------------------------------------------------------------------


class Template:
    """One workload request, with where each of its ids sits, so a copy with fresh ids is a
    few slice writes instead of a protobuf build."""

    def __init__(self, data: bytes) -> None:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )

        req = ExportTraceServiceRequest.FromString(data)
        spans = [s for rs in req.resource_spans for ss in rs.scope_spans for s in ss.spans]
        self.data = data
        self.spans = len(spans)
        self.trace_ids = sorted({s.trace_id for s in spans})
        self.span_ids = [s.span_id for s in spans]
        self.where: list[tuple[int, int, int]] = []  # (offset, width, index)
        for index, tid in enumerate(self.trace_ids):
            self.where += [(at, 16, index) for at in _all(data, tid)]
        for index, sid in enumerate(self.span_ids):
            self.where += [(at, 8, index) for at in _all(data, sid)]

    def make(self, seq: int) -> bytes:
        out = bytearray(self.data)
        for at, width, index in self.where:
            if width == 16:
                out[at : at + 16] = struct.pack(">QQ", seq, index)
            else:
                out[at : at + 8] = struct.pack(">II", seq, index)
        return bytes(out)

    def ids(self, seq: int) -> list[bytes]:
        return [struct.pack(">II", seq, i) for i in range(len(self.span_ids))]


def _all(data: bytes, needle: bytes) -> list[int]:
    out: list[int] = []
    at = data.find(needle)
    while at >= 0:
        out.append(at)
        at = data.find(needle, at + 1)
    return out


# --- the run ---------------------------------------------------------------------------------


def rss_mib(pid: int) -> float:
    try:
        statm = Path(f"/proc/{pid}/statm").read_text().split()
    except OSError:
        return 0.0
    return int(statm[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def retry_delay(error: grpc.RpcError) -> float:
    from google.rpc import error_details_pb2  # type: ignore[import-untyped]

    for key, value in error.trailing_metadata() or ():
        if key == RETRY_INFO_KEY:
            info = error_details_pb2.RetryInfo.FromString(value)
            return float(info.retry_delay.seconds + info.retry_delay.nanos / 1e9)
    return 0.5


def start_serve(
    tmp: Path, config_text: str, forward: str, *extra: str
) -> tuple[subprocess.Popen[bytes], int, int]:
    """`attest-otel serve` with `config_text` on free loopback ports, its output in
    tmp/sidecar.log, returned once /readyz answers: (process, gRPC port, HTTP port)."""
    grpc_port, http_port = free_port(), free_port()
    (tmp / "sidecar.yaml").write_text(config_text)
    log_file = open(tmp / "sidecar.log", "wb")  # noqa: SIM115 - the process keeps it
    sidecar = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "attest_otel.cli",
            "serve",
            "--config",
            str(tmp / "sidecar.yaml"),
            "--grpc-endpoint",
            f"127.0.0.1:{grpc_port}",
            "--http-endpoint",
            f"127.0.0.1:{http_port}",
            "--forward-endpoint",
            forward,
            "--store",
            str(tmp / "store.db"),
            "--log-level",
            "warning",
            *extra,
        ],
        cwd=ROOT,
        stdout=log_file,
        stderr=log_file,
    )
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/readyz", timeout=1):
                return sidecar, grpc_port, http_port
        except OSError:
            if time.monotonic() > deadline or sidecar.poll() is not None:
                raise SystemExit(f"sidecar did not start; see {tmp / 'sidecar.log'}") from None
            time.sleep(0.1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--capacity", type=float, default=2000.0, help="sink spans/s")
    parser.add_argument("--factor", type=float, default=10.0)
    parser.add_argument("--senders", type=int, default=48)
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="attest-overload-"))
    templates = [Template(r) for r in build_requests(8, traces=5, genai_share=0.1, seed=11)]
    target = args.capacity * args.factor  # attempted spans/s
    sink_port = free_port()
    sink_out = tmp / "sink-ids.bin"
    sink = subprocess.Popen(
        [
            sys.executable,
            str(Path(__file__)),
            "--sink",
            str(sink_port),
            str(args.capacity),
            str(sink_out),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
    )
    assert sink.stdout is not None
    assert b"ready" in sink.stdout.readline()
    sidecar, grpc_port, _ = start_serve(tmp, CONFIG, f"127.0.0.1:{sink_port}")

    channel = grpc.insecure_channel(
        f"127.0.0.1:{grpc_port}", options=[("grpc.max_send_message_length", -1)]
    )
    call = channel.unary_unary(EXPORT, request_serializer=None, response_deserializer=None)
    lock = threading.Lock()
    counts = {"attempted_spans": 0, "attempts": 0, "refused": 0, "acked_spans": 0, "errors": 0}
    acked: list[tuple[int, int]] = []  # (seq, template)
    next_seq = [0]
    stop_new = threading.Event()
    spans_per = templates[0].spans
    # Pacing: all senders together attempt `target` spans/s at most.
    pace = {"next": time.monotonic()}

    def paced() -> None:
        with lock:
            now = time.monotonic()
            at = max(now, pace["next"])
            pace["next"] = at + spans_per / target
        time.sleep(max(0.0, at - now))

    def sender() -> None:
        while not stop_new.is_set():
            with lock:
                seq = next_seq[0]
                next_seq[0] += 1
            which = seq % len(templates)
            body = templates[which].make(seq)
            while True:
                paced()
                with lock:
                    counts["attempts"] += 1
                    counts["attempted_spans"] += templates[which].spans
                try:
                    call(body, timeout=30)
                except grpc.RpcError as e:
                    code = e.code()
                    with lock:
                        if code == grpc.StatusCode.UNAVAILABLE:
                            counts["refused"] += 1
                        else:
                            counts["errors"] += 1
                    time.sleep(retry_delay(e) if code == grpc.StatusCode.UNAVAILABLE else 0.5)
                    continue  # the request stays in hand until it is acknowledged
                with lock:
                    counts["acked_spans"] += templates[which].spans
                    acked.append((seq, which))
                break

    samples: list[tuple[float, float]] = []
    start = time.monotonic()
    threads = [threading.Thread(target=sender, daemon=True) for _ in range(args.senders)]
    for t in threads:
        t.start()
    last = start
    while time.monotonic() - start < args.seconds:
        time.sleep(1.0)
        now = time.monotonic()
        samples.append((now - start, rss_mib(sidecar.pid)))
        with lock:
            line = (
                f"t={now - start:5.1f}s attempted={counts['attempted_spans']} "
                f"acked={counts['acked_spans']} refused={counts['refused']} "
                f"rss={samples[-1][1]:.0f}MiB"
            )
        if now - last >= 10:
            print(line, flush=True)
            last = now
    load_s = time.monotonic() - start
    with lock:
        attempted_in_load = counts["attempted_spans"]
        acked_in_load = counts["acked_spans"]
    stop_new.set()
    for t in threads:
        t.join(120)
    # Every acknowledged span should now reach the sink: wait until it has them all.
    expected = {sid for seq, which in acked for sid in templates[which].ids(seq)}
    drain_start = time.monotonic()
    time.sleep(2.0)
    sidecar.terminate()
    try:
        sidecar.wait(120)
    except subprocess.TimeoutExpired:
        sidecar.kill()
    drain_s = time.monotonic() - drain_start
    sink.terminate()
    sink.wait(30)
    raw = sink_out.read_bytes()
    got = [raw[i : i + 8] for i in range(0, len(raw), 8)]
    seen = set(got)
    lost = expected - seen
    duplicates = len(got) - len(seen)
    channel.close()

    rss = [r for _, r in samples]
    half = len(rss) // 2
    first_peak, second_peak = max(rss[:half] or [0]), max(rss[half:] or [0])
    delivered_rate = acked_in_load / load_s
    print()
    print(
        f"load: {load_s:.0f} s, {args.senders} raw gRPC senders honouring RetryInfo, "
        f"sink capacity {args.capacity:.0f} spans/s"
    )
    print(
        f"attempted  {attempted_in_load / load_s:10.0f} spans/s  "
        f"({attempted_in_load / load_s / args.capacity:.1f}x the capacity)"
    )
    print(f"accepted   {delivered_rate:10.0f} spans/s  (acked by the sidecar during the load)")
    print(
        f"refused    {counts['refused']:10d} requests with UNAVAILABLE + RetryInfo; "
        f"other errors {counts['errors']}"
    )
    print(
        f"RSS        start {rss[0] if rss else 0:.0f} MiB, peak {max(rss or [0]):.0f} MiB, "
        f"first-half peak {first_peak:.0f}, second-half peak {second_peak:.0f} MiB"
    )
    print(
        f"spans      acked {len(expected)}, arrived {len(seen & expected)}, "
        f"lost {len(lost)}, duplicates {duplicates}; drain after the load {drain_s:.1f} s"
    )
    print(f"sidecar log: {tmp / 'sidecar.log'}")
    bad = bool(lost) or (first_peak and second_peak > 1.25 * first_peak)
    raise SystemExit(1 if bad else 0)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--sink":
        serve_sink(int(sys.argv[2]), float(sys.argv[3]), sys.argv[4])
    else:
        random.seed(0)
        with contextlib.suppress(KeyboardInterrupt):
            main()
