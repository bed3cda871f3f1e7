"""The sidecar against a baseline OTLP/gRPC server that only parses, in one run.

    .venv/bin/python bench/bench_sidecar.py [--quick]

(Where the time goes, stage by stage: `bench/bench_stages.py`, which also profiles.)

Throughput: the same pre-serialized requests (pipeline.md's agent workload, 504 spans and
~1 MB each) are sent with 4 requests in flight, honouring "retry later" answers, to

  parse-only  a separate process that parses each request (upb) and counts its spans;
  null proxy  a process that takes the raw bytes over gRPC and sends the same bytes over
              gRPC to a sink before it answers, nothing parsed: what any forwarding hop
              costs, and the yardstick of issue 12's goals;
  sidecar     `attest-otel serve` (defaults, store on, log events on) forwarding to a sink
              process that answers at once; done when the sidecar reports every span
              forwarded (its own `attest_sidecar_spans_forwarded_total`).

Rates are end to end: spans / (first send -> last span acknowledged or forwarded).
Workloads: agent-heavy (every span GenAI), mixed with 10 % GenAI spans in every request,
and mixed by request (10 % of the requests are agent requests, the rest plain).

Latency: plain 10-span probe requests every 20 ms under mixed-by-request load at half the
sidecar's mixed rate (at most a fifth of the baseline rate), timed from send to arrival at
an in-process sink (sidecar) or to the answer (baseline); the added latency is the
difference of the percentiles. The load's agent requests are sent with new trace ids when
the list comes round again, and the sidecar is measured with its defaults and with
`grading.nice: 19` (NICE_ON).

Delay: agent requests offered at 50 %, 100 % and 200 % of the agent-heavy rate just measured
(and at 100 % with `grading.nice: 19`),
each retried after a refusal; for every trace, the time from the answer that accepted it to
its first span at the downstream (a sink in this process that parses what arrives), against
the grace (`GRACE_S`). Issue 12: graded spans leave within the grace after their run arrives,
at any load up to capacity, because admission refuses what grading cannot clear in time.

Memory: traces routed into a `TraceBuffer` in this process, RSS growth against the OTLP
bytes held. Goals (issue 12): agent-heavy >= 25 % of the null proxy, mixed >= 80 %, p99
added latency < 5 ms at half the sidecar's capacity, held memory <= 2x the OTLP bytes.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import hashlib
import os
import random
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable
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
IN_FLIGHT = 4
RETRYABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED)
"""The answers a sender retries after a delay (OTLP's retryable codes that a sidecar sends)."""
GRACE_S = 0.2
BENCH_CONFIG = (
    f"buffer: {{grace_s: {GRACE_S}, idle_timeout_s: 2}}\n"
    "forward: {retry_after_s: 0.05}\n"
    "telemetry: {metrics: false}\n"
)
"""Defaults but a short grace (the runs are complete when sent) and a short retry delay for
the benchmark's own client; log events and the store stay on, as in a deployment."""
NICE_ON = "grading: {nice: 19}\n"
"""The trade `grading.nice` makes (default 0): the latency row and the delay row at full load
are also run with the grading processes behind the receivers."""
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "268435456", "MALLOC_TRIM_THRESHOLD_": "268435456"}
"""pipeline.md note 6: large-buffer allocation dominates serialize on this VM; the same
setting is given to both servers."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


# --- servers (run as subprocesses of this script) -------------------------------------------


def serve(kind: str, port: int, downstream: str | None = None) -> None:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    count = [0]
    lock = threading.Lock()

    def parse(request: bytes, context: Any) -> bytes:
        req = ExportTraceServiceRequest.FromString(request)
        n = sum(len(ss.spans) for rs in req.resource_spans for ss in rs.scope_spans)
        with lock:
            count[0] += n
        return b""

    def sink(request: bytes, context: Any) -> bytes:
        return b""

    forward: Any = None
    if kind == "proxy":  # the null proxy: raw bytes in, the same bytes out, nothing parsed
        channel = grpc.insecure_channel(
            downstream or "", options=[("grpc.max_send_message_length", -1)]
        )
        forward = channel.unary_unary(EXPORT, request_serializer=None, response_deserializer=None)

    def proxy(request: bytes, context: Any) -> bytes:
        forward(request, timeout=60)
        return b""

    handler = {"baseline": parse, "proxy": proxy}.get(kind, sink)
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=4),
        options=[("grpc.max_receive_message_length", 64 << 20)],
    )
    server.add_generic_rpc_handlers(
        [
            grpc.method_handlers_generic_handler(
                service,
                {
                    "Export": grpc.unary_unary_rpc_method_handler(
                        handler if "Trace" in service else sink,
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
    print("ready", flush=True)
    server.wait_for_termination()


def _spawn(args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    full_env = {**os.environ, **MALLOC_ENV, **(env or {})}
    return subprocess.Popen(
        [sys.executable, *args],
        cwd=ROOT,
        env=full_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )


def _wait_ready(proc: subprocess.Popen[bytes]) -> None:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if b"ready" not in line:
        raise SystemExit(f"server did not start: {line!r}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()


# --- the client --------------------------------------------------------------------------------


def send_all(endpoint: str, requests: list[bytes]) -> tuple[float, int]:
    """Sends every request (4 in flight), retrying refused ones; (seconds, retries)."""
    channel = grpc.insecure_channel(endpoint, options=[("grpc.max_send_message_length", -1)])
    call = channel.unary_unary(EXPORT, request_serializer=None, response_deserializer=None)
    grpc.channel_ready_future(channel).result(timeout=10)
    pending = list(reversed(requests))
    retries = 0
    lock = threading.Lock()
    start = time.perf_counter()

    def worker() -> None:
        nonlocal retries
        while True:
            with lock:
                if not pending:
                    return
                body = pending.pop()
            while True:
                try:
                    call(body, timeout=60)
                    break
                except grpc.RpcError as e:
                    if e.code() not in RETRYABLE:
                        raise
                    with lock:
                        retries += 1
                    time.sleep(0.05)

    threads = [threading.Thread(target=worker) for _ in range(IN_FLIGHT)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    channel.close()
    return elapsed, retries


def _forwarded(prom_url: str) -> int:
    try:
        with urllib.request.urlopen(prom_url, timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return -1
    m = re.search(
        r"^attest_sidecar_spans_forwarded_total(?:\{[^}]*\})? ([0-9.e+]+)$", text, re.MULTILINE
    )
    return int(float(m.group(1))) if m else 0


def run_baseline(requests: list[bytes]) -> float:
    port = free_port()
    proc = _spawn([str(Path(__file__)), "--serve", "baseline", str(port)])
    try:
        _wait_ready(proc)
        send_all(f"127.0.0.1:{port}", requests[:4])  # warm up
        elapsed, _ = send_all(f"127.0.0.1:{port}", requests)
    finally:
        _stop(proc)
    return _spans(requests) / elapsed


def run_proxy(requests: list[bytes]) -> float:
    """The null proxy's rate: every request forwarded to a sink before it is answered."""
    sink_port, port = free_port(), free_port()
    sink = _spawn([str(Path(__file__)), "--serve", "sink", str(sink_port)])
    proc = _spawn([str(Path(__file__)), "--serve", "proxy", str(port), f"127.0.0.1:{sink_port}"])
    try:
        _wait_ready(sink)
        _wait_ready(proc)
        send_all(f"127.0.0.1:{port}", requests[:4])  # warm up
        elapsed, _ = send_all(f"127.0.0.1:{port}", requests)
    finally:
        _stop(proc)
        _stop(sink)
    return _spans(requests) / elapsed


def _spans(requests: list[bytes]) -> int:
    from attest_otel.sidecar.wire import split_request

    return sum(len(g.spans) for r in requests for g in split_request(r))


class SidecarRun:
    def __init__(
        self,
        tmp: Path,
        sink_endpoint: str,
        extra: list[str] | None = None,
        config_text: str = "",
        cpus: str | None = None,
        nice: int = 0,
    ) -> None:
        self.grpc_port = free_port()
        self.http_port = free_port()
        self.prom_port = free_port()
        tmp.mkdir(parents=True, exist_ok=True)
        config = tmp / "bench.yaml"
        config.write_text(config_text or BENCH_CONFIG)
        self.proc = subprocess.Popen(
            [
                *(["taskset", "-c", cpus] if cpus else []),  # its grading processes inherit
                *(["nice", "-n", str(nice)] if nice else []),  # and its priority
                sys.executable,
                "-m",
                "attest_otel.cli",
                "serve",
                "--config",
                str(config),
                "--grpc-endpoint",
                f"127.0.0.1:{self.grpc_port}",
                "--http-endpoint",
                f"127.0.0.1:{self.http_port}",
                "--forward-endpoint",
                sink_endpoint,
                "--store",
                str(tmp / "store.db"),
                "--prometheus",
                f"127.0.0.1:{self.prom_port}",
                "--log-level",
                "warning",
                *(extra or []),
            ],
            cwd=ROOT,
            env={**os.environ, **MALLOC_ENV},
            stdout=subprocess.DEVNULL,
            stderr=open(tmp / "sidecar.log", "ab"),  # noqa: SIM115 - lives as long as the proc
        )
        self.prom = f"http://127.0.0.1:{self.prom_port}/metrics"
        deadline = time.monotonic() + 60
        while True:  # /readyz answers only once every part, receivers last, is up
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}/readyz", timeout=1):
                    break
            except OSError:
                pass
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise SystemExit(f"sidecar did not start; see {tmp / 'sidecar.log'}")
            time.sleep(0.1)

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def wait_forwarded(self, total: int, timeout: float = 600) -> None:
        deadline = time.monotonic() + timeout
        while _forwarded(self.prom) < total:
            if time.monotonic() > deadline:
                raise SystemExit(f"only {_forwarded(self.prom)} of {total} spans forwarded")
            time.sleep(0.1)  # each scrape costs the sidecar ~2 ms of its interpreter

    def rss_mib(self) -> float:
        try:
            statm = Path(f"/proc/{self.proc.pid}/statm").read_text().split()
            return int(statm[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
        except OSError:
            return 0.0

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of one process (/proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError):
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
    return found


def run_sidecar(requests: list[bytes], tmp: Path) -> tuple[float, int, float, float, float]:
    """(spans/s, refusals retried, RSS MiB, CPU us per span of the receiving process, and
    of the grading processes together) over the measured requests."""
    sink_port = free_port()
    sink = _spawn([str(Path(__file__)), "--serve", "sink", str(sink_port)])
    _wait_ready(sink)
    sidecar = SidecarRun(tmp, f"127.0.0.1:{sink_port}")
    try:
        # Warm up with traces not sent again: a trace sent twice is late the second time,
        # and regraded with what the store kept (another path, measured apart).
        warm, measured = requests[-4:], requests[:-4]
        send_all(sidecar.endpoint, warm)
        sidecar.wait_forwarded(_spans(warm))
        total = _spans(warm) + _spans(measured)
        workers = _children(sidecar.proc.pid)
        cpu_before = [_cpu_s(p) for p in [sidecar.proc.pid, *workers]]
        start = time.perf_counter()
        _, retries = send_all(sidecar.endpoint, measured)
        sidecar.wait_forwarded(total)
        elapsed = time.perf_counter() - start
        cpu = [_cpu_s(p) - b for p, b in zip([sidecar.proc.pid, *workers], cpu_before, strict=True)]
        rss = sidecar.rss_mib()
    finally:
        sidecar.stop()
        _stop(sink)
    spans = _spans(measured)
    return spans / elapsed, retries, rss, 1e6 * cpu[0] / spans, 1e6 * sum(cpu[1:]) / spans


# --- latency ------------------------------------------------------------------------------------


class InProcessSink:
    """A downstream in this process that records when each key of what arrives first came:
    by default the hash of each small request (the latency probes)."""

    def __init__(self, keys: Callable[[bytes], Iterable[bytes]] | None = None) -> None:
        self.arrived: dict[bytes, float] = {}
        self.server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=4),
            options=[("grpc.max_receive_message_length", 64 << 20)],
        )
        keys_of = keys or _probe_key

        def export(request: bytes, context: Any) -> bytes:
            now = time.perf_counter()
            for key in keys_of(request):
                self.arrived.setdefault(key, now)
            return b""

        def nothing(request: bytes, context: Any) -> bytes:
            return b""

        self.server.add_generic_rpc_handlers(
            [
                grpc.method_handlers_generic_handler(
                    service,
                    {
                        "Export": grpc.unary_unary_rpc_method_handler(
                            export if "Trace" in service else nothing,
                            request_deserializer=None,
                            response_serializer=None,
                        )
                    },
                )
                for service in SERVICES
            ]
        )
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()


def _probe_key(request: bytes) -> list[bytes]:
    return [hashlib.blake2b(request, digest_size=8).digest()] if len(request) < 65536 else []


def _arrived_trace_ids(request: bytes) -> set[bytes]:
    """Trace ids of a request, by a real parse (in this process)."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    req = ExportTraceServiceRequest.FromString(request)
    return {
        span.trace_id for rs in req.resource_spans for ss in rs.scope_spans for span in ss.spans
    }


def _probe_requests(count: int) -> list[bytes]:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )
    from sidecar_workload import plain_trace

    rng = random.Random(99)
    out = []
    for i in range(count):
        req = ExportTraceServiceRequest()
        rs = req.resource_spans.add()
        rs.resource.attributes.add(key="service.name").value.string_value = "probe"
        ss = rs.scope_spans.add()
        ss.spans.extend(plain_trace(rng, 1_700_000_000_000_000_000 + i)[:10])
        out.append(req.SerializeToString())
    return out


def _load(endpoint: str, requests: list[bytes], rate_spans: float, stop: threading.Event) -> None:
    channel = grpc.insecure_channel(endpoint)
    call = channel.unary_unary(EXPORT, request_serializer=None, response_deserializer=None)
    per_request = _spans(requests[:1])
    interval = per_request / rate_spans
    i = 0
    nxt = time.perf_counter()
    while not stop.is_set():
        with contextlib.suppress(grpc.RpcError):
            call.future(requests[i % len(requests)], timeout=30)
        i += 1
        nxt += interval
        delay = nxt - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
    channel.close()


def _percentiles(values: list[float]) -> tuple[float, float]:
    values = sorted(values)
    p50 = statistics.median(values)
    p99 = values[min(len(values) - 1, int(len(values) * 0.99))]
    return p50 * 1000, p99 * 1000


def _renamed(request: bytes, salt: int) -> bytes:
    """`request` with every trace id replaced, so that sending it again starts new traces."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    req = ExportTraceServiceRequest.FromString(request)
    for rs in req.resource_spans:
        for ss in rs.scope_spans:
            for span in ss.spans:
                span.trace_id = hashlib.blake2b(
                    span.trace_id, digest_size=16, salt=salt.to_bytes(8, "little")
                ).digest()
    return req.SerializeToString()


def _distinct_load(load: list[bytes], rate_spans: float, seconds: float) -> list[bytes]:
    """`load`, repeated for as many requests as `seconds` of it take, its agent requests
    with new trace ids.

    An agent request sent again is a trace the sidecar already graded: its spans are late
    and the trace is graded again in the receiving process (`sidecar.regrade`), which is not
    the workload whose latency this measures. Plain requests are sent again as they are.
    """
    count = int(rate_spans / _spans(load[:1]) * seconds) + 1
    out = []
    for i in range(max(count, len(load))):
        request = load[i % len(load)]
        again = i >= len(load) and b"gen_ai." in request
        out.append(_renamed(request, i // len(load)) if again else request)
    return out


def run_latency(
    load: list[bytes], rate_spans: float, tmp: Path, probes: int, configs: Iterable[str] = ("",)
) -> list[tuple[float, float]]:
    """(p50 ms, p99 ms) of the baseline, then of a sidecar run with each of `configs` (extra
    lines of the sidecar's config file)."""
    probe_bodies = _probe_requests(probes)
    # Every request distinct for the whole load (1 s before the probes, 1 s after, and the
    # probes 20 ms apart, with room for slower answers).
    load = _distinct_load(load, rate_spans, 3.0 + probes * 0.03)
    # Baseline: send -> answer of a parse-only server, under the same load.
    port = free_port()
    proc = _spawn([str(Path(__file__)), "--serve", "baseline", str(port)])
    _wait_ready(proc)
    base = _probe_latency(f"127.0.0.1:{port}", load, rate_spans, probe_bodies, None)
    _stop(proc)
    out = [_percentiles(base)]
    for n, extra in enumerate(configs):
        sink = InProcessSink()
        sidecar = SidecarRun(
            tmp / str(n), f"127.0.0.1:{sink.port}", config_text=BENCH_CONFIG + extra
        )
        try:
            out.append(
                _percentiles(_probe_latency(sidecar.endpoint, load, rate_spans, probe_bodies, sink))
            )
        finally:
            sidecar.stop()
            sink.server.stop(None)
    return out


def _probe_latency(
    endpoint: str,
    load: list[bytes],
    rate_spans: float,
    probes: list[bytes],
    sink: InProcessSink | None,
) -> list[float]:
    stop = threading.Event()
    loader = threading.Thread(target=_load, args=(endpoint, load, rate_spans, stop))
    loader.start()
    time.sleep(1.0)
    channel = grpc.insecure_channel(endpoint)
    call = channel.unary_unary(EXPORT, request_serializer=None, response_deserializer=None)
    sent: dict[bytes, float] = {}
    answered: list[float] = []
    for body in probes:
        t0 = time.perf_counter()
        call(body, timeout=30)
        t1 = time.perf_counter()
        sent[hashlib.blake2b(body, digest_size=8).digest()] = t0
        answered.append(t1 - t0)
        time.sleep(0.02)
    time.sleep(1.0)
    stop.set()
    loader.join()
    channel.close()
    if sink is None:
        return answered
    return [sink.arrived[k] - t0 for k, t0 in sent.items() if k in sink.arrived]


# --- how long graded spans wait -----------------------------------------------------------------


def run_agent_delay(
    requests: list[bytes], rate_spans: float, tmp: Path, seconds: float, config: str = ""
) -> tuple[float, float, int, int]:
    """Agent requests offered at `rate_spans` for `seconds`, each retried after a refusal as
    the Collector's exporter does; for every trace, the time from the answer that accepted
    its request to its first span reaching the downstream. (p50 ms, p99 ms, refusals,
    traces)."""
    sink = InProcessSink(_arrived_trace_ids)
    sidecar = SidecarRun(tmp, f"127.0.0.1:{sink.port}", config_text=BENCH_CONFIG + config)
    channel = grpc.insecure_channel(
        sidecar.endpoint, options=[("grpc.max_send_message_length", -1)]
    )
    call = channel.unary_unary(EXPORT, request_serializer=None, response_deserializer=None)
    accepted: dict[bytes, float] = {}
    refusals = [0]
    lock = threading.Lock()
    ids = [_arrived_trace_ids(r) for r in requests]

    def send(i: int) -> None:
        while True:
            try:
                call(requests[i], timeout=60)
                break
            except grpc.RpcError as e:
                if e.code() not in RETRYABLE:
                    raise
                with lock:
                    refusals[0] += 1
                time.sleep(0.05)
        now = time.perf_counter()
        with lock:
            for tid in ids[i]:
                accepted[tid] = now

    try:
        interval = _spans(requests[:1]) / rate_spans
        count = min(len(requests), max(1, int(seconds / interval)))
        with futures.ThreadPoolExecutor(max_workers=IN_FLIGHT) as pool:
            start = time.perf_counter()
            sent = []
            for i in range(count):
                delay = start + i * interval - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                sent.append(pool.submit(send, i))
        for one in sent:
            one.result()  # an answer no sender retries ends the benchmark here
        deadline = time.monotonic() + 60
        while len([t for t in accepted if t in sink.arrived]) < len(accepted):
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
    finally:
        channel.close()
        sidecar.stop()
        sink.server.stop(None)
    delays = [sink.arrived[t] - at for t, at in accepted.items() if t in sink.arrived]
    p50, p99 = _percentiles(delays)
    return p50, p99, refusals[0], len(delays)


# --- memory --------------------------------------------------------------------------------------


def _rss() -> int:
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def run_memory(requests: list[bytes]) -> tuple[int, int, int]:
    """(OTLP bytes of the held spans, buffer's own byte count, RSS growth)."""
    from attest_otel.sidecar.buffer import TraceBuffer
    from attest_otel.sidecar.config import BufferConfig
    from attest_otel.sidecar.wire import split_request

    buf = TraceBuffer(
        BufferConfig(
            grace_s=3600, idle_timeout_s=7200, max_traces=10**7, max_spans=10**9, max_bytes=1 << 40
        ),
        probe=lambda t, c, w: False,
        release=lambda ts: None,
    )
    gc.collect()
    before = _rss()
    for data in requests:
        groups = split_request(data)
        genai = {tid for g in groups for tid, _, _ in g.spans}
        buf.route(groups, genai, None)
        del groups
    gc.collect()
    grown = _rss() - before
    return sum(len(r) for r in requests), buf.held_bytes, grown


# --- main ----------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer requests")
    parser.add_argument(
        "--latency-only",
        type=float,
        metavar="SPANS_PER_S",
        help="only the latency and memory rows, at this offered load",
    )
    parser.add_argument("--serve", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve[0], int(args.serve[1]), *args.serve[2:3])
        return
    # Enough requests for a few seconds of each workload: admission (issue 12) paces a
    # sidecar to its grading rate, which it measures in its first quarter second of grading.
    scale = 1 if args.quick else 2
    agent = build_requests(120 * scale, 24, 1.0, seed=1)
    mixed_in = [] if args.latency_only else build_requests(300 * scale, 24, 0.1, seed=2)
    plain = build_requests(90 * scale, 24, 0.0, seed=3)
    by_request = []
    for i in range(300 * scale):
        # distinct agent requests: a trace sent twice is late, and regraded (another path)
        by_request.append(agent[(i // 10) % len(agent)] if i % 10 == 0 else plain[i % len(plain)])
    print(
        f"machine: {os.cpu_count()} CPUs; python {sys.version.split()[0]}; "
        f"requests of 504 spans, ~{len(agent[0]) / 504:.0f} B/span (agent), "
        f"~{len(plain[0]) / 504:.0f} B/span (plain)"
    )
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        rows: list[tuple[str, float, float, int, float]] = []
        cpu_rows: list[tuple[str, float, float]] = []
        if args.latency_only:
            rows = [("", 0.0, 0.0, 0, 0.0)] * 2 + [
                ("", 5 * args.latency_only, 2 * args.latency_only, 0, 0.0)
            ]
        else:
            print(
                f"{'workload':36s} {'parse-only':>10s} {'null proxy':>10s} "
                f"{'sidecar':>8s} {'/ proxy':>7s}  (spans/s, end to end)"
            )
        for name, reqs, goal in (
            ()
            if args.latency_only
            else (
                ("agent-heavy (100% GenAI)", agent, 0.25),
                ("mixed, 10% GenAI in every request", mixed_in, 0.80),
                ("mixed, 10% of requests GenAI", by_request, 0.80),
            )
        ):
            base = run_baseline(reqs)
            proxy = run_proxy(reqs)
            side, retries, rss, receiving, grading = run_sidecar(reqs, tmp / name[:5].strip())
            rows.append((name, base, side, retries, rss))
            print(
                f"{name:36s} {base:10,.0f} {proxy:10,.0f} {side:8,.0f} {side / proxy:7.1%}  "
                f"(goal {goal:.0%}; retries {retries}, sidecar RSS {rss:.0f} MiB)",
                flush=True,
            )
            cpu_rows.append((name, receiving, grading))
        for name, receiving, grading in cpu_rows:  # the per-core figures of the sizing notes
            print(
                f"CPU per span, {name}: receiving process {receiving:.1f} us, grading "
                f"process {grading:.1f} us",
                flush=True,
            )
        # Plain-span latency at a load the sidecar sustains (half its measured mixed rate,
        # at most a fifth of the baseline's): queueing under overload is not added latency.
        rate = min(rows[2][1] / 5, rows[2][2] / 2)
        # 1000 probes: a p99 of 300 is its third-largest value, and moved by 3 ms run to run.
        (b50, b99), *sides = run_latency(
            by_request, rate, tmp / "lat", probes=300 if args.quick else 1000, configs=("", NICE_ON)
        )
        print(
            f"non-GenAI latency under {rate:,.0f} spans/s of mixed load: "
            f"baseline p50 {b50:.2f} ms p99 {b99:.2f} ms",
            flush=True,
        )
        for label, (s50, s99) in zip(("defaults", "grading.nice 19"), sides, strict=True):
            print(
                f"  sidecar, {label} (to downstream): p50 {s50:.2f} ms p99 {s99:.2f} ms; "
                f"added p99 {s99 - b99:.2f} ms (goal < 5 ms)",
                flush=True,
            )
    if not args.latency_only:
        # Graded spans leave within the grace after their run arrives, up to capacity (and
        # past it: the sidecar refuses what it cannot grade in time, and the sender retries).
        grace_ms = 1000 * GRACE_S
        capacity = rows[0][2]
        fresh = build_requests(60 * scale, 24, 1.0, seed=4)
        for share, extra in ((0.5, ""), (1.0, ""), (2.0, ""), (1.0, NICE_ON)):
            p50, p99, refused, traces = run_agent_delay(
                fresh,
                share * capacity,
                tmp / f"delay{share}{len(extra)}",
                seconds=3.0 * scale,
                config=extra,
            )
            label = ", grading.nice 19" if extra else ""
            print(
                f"agent spans at {share:.0%} of the agent-heavy rate ({share * capacity:,.0f} "
                f"spans/s offered{label}): accepted -> downstream p50 {p50:.0f} ms p99 "
                f"{p99:.0f} ms (grace {grace_ms:.0f} ms; {traces} traces, {refused} refusals "
                "retried)",
                flush=True,
            )
    otlp, held, grown = run_memory(agent)
    print(
        f"held memory: {otlp / 2**20:.1f} MiB of OTLP bytes held as "
        f"{held / 2**20:.1f} MiB in the buffer; RSS grew {grown / 2**20:.1f} MiB "
        f"= {grown / otlp:.2f}x the OTLP bytes"
    )


if __name__ == "__main__":
    main()
