"""The Collector is the anchor: what adding attest-otel costs a user's pipeline, in one run.

    .venv/bin/python bench/bench_pipeline.py [--quick]

Needs the Collector built from collector-config/builder-config.yaml (tools/build-peers.sh).
The same pre-serialised OTLP load (bench/sidecar_workload.py: requests of 24 traces of 21
spans) goes through

  (A) collector   the Collector alone: otelcol.yaml's first pipeline straight to the backend;
  (B) sidecar     otelcol.yaml as shipped: out to `attest-otel serve` and back through the
                  Collector's second pipeline to the backend;
  (C) routing     genai-routing.yaml: GenAI spans out and back through the sidecar, the rest
                  straight to the backend (otelcol-contrib's filter processor);
  (D) connector   genai-routing-attest.yaml: the same routing by attest-otel's own connector
                  (collector/attestroutingconnector), one pass, no copy per pipeline.

The backend is a parse-only OTLP/gRPC server (a process that parses each request with upb
and counts its spans) standing for Tempo/Jaeger; the parse-only row sends the load to it
directly, the ceiling of the rig. Rates are end to end: spans / (first send -> last span
at the backend). Workloads: agent-heavy (every trace an agent's) and mixed (10 % of the
traces in every request GenAI).

Plain-span latency: under the mixed load offered at half of (A)'s mixed rate (capped by
what (B) could clear: the sidecar's admission would refuse more), 10-span plain probe
traces every 20 ms, timed from send to first arrival at the backend (its own process notes when);
the p50 and p99 *added* are each configuration's minus (A)'s. For these rows every batch
processor's timeout is 1 ms in all three configurations (the shipped 200 ms spreads every
probe over 0-200 ms, which would hide what the routing adds).

The sidecar runs with its shipped defaults except a 0.2 s grace (the runs are whole when
sent), and with its grade log events and metrics off: the backend here takes traces only.
The Collector's self-metrics are off. The Collector's exporter to the sidecar honours the
sidecar's "retry later" with its sending queue, as deployed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import grpc
import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

from bench_sidecar import (  # noqa: E402
    EXPORT,
    InProcessSink,
    SidecarRun,
    _spans,
    free_port,
    send_all,
)
from sidecar_workload import build_requests, plain_trace  # noqa: E402

COLLECTOR_CONFIG = ROOT / "collector-config"
SIDECAR_CONFIG = (
    "buffer: {grace_s: 0.2, idle_timeout_s: 2}\n"
    "forward: {retry_after_s: 0.05}\n"
    "telemetry: {metrics: false, logs: false}\n"
)
PROBE_MARK = b"\xfe\xed\xfa\xce"
"""First bytes of a probe's trace id: the backend times those traces (and looks for them
only in requests whose bytes hold the mark, so counting stays the backend's only work)."""
_extra_sidecar_config = ""
"""`--grading-nice`: what main() adds to SIDECAR_CONFIG for this run."""
_sidecar_nice = 0
"""`--sidecar-nice`: the whole sidecar's niceness for this run."""
LATENCY_BATCH_TIMEOUT = "1ms"
SIDECAR_CPU = "1"
"""With --pin: the sidecar and its grading processes on this CPU, the rest on CPU 0."""


def _peer_collector() -> str:
    cache = os.environ.get("ATTEST_OTEL_PEERS") or str(
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "attest-otel" / "peers"
    )
    path = Path(cache) / "otelcol-attest" / "otelcol-attest"
    if not os.access(path, os.X_OK):
        raise SystemExit(f"{path} is missing: run tools/build-peers.sh collector")
    return str(path)


# --- the backend: parse-only, counting, timing probe traces --------------------------------------


class Backend:
    """Parse-only OTLP/gRPC in a process of its own; its count and probe times over HTTP."""

    def __init__(self) -> None:
        self.port, self.http = free_port(), free_port()
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__)), "--backend", str(self.port), str(self.http)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
        )
        assert self.proc.stdout is not None
        if b"ready" not in self.proc.stdout.readline():
            raise SystemExit("backend did not start")

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def state(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.http}/", timeout=5) as r:
            return dict(json.load(r))

    def wait_count(self, total: int, timeout: float = 600) -> float:
        """Waits until `total` spans arrived; returns the wall time of the last arrival."""
        deadline = time.monotonic() + timeout
        while True:
            state = self.state()
            if state["count"] >= total:
                return float(state["last"])
            if time.monotonic() > deadline:
                raise SystemExit(f"only {state['count']} of {total} spans reached the backend")
            time.sleep(0.05)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


def serve_backend(port: int, http_port: int) -> None:
    from concurrent import futures
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    lock = threading.Lock()
    state: dict[str, Any] = {"count": 0, "last": 0.0, "probes": {}}

    def export(request: bytes, context: Any) -> bytes:
        req = ExportTraceServiceRequest.FromString(request)
        now = time.time()
        n = sum(len(ss.spans) for rs in req.resource_spans for ss in rs.scope_spans)
        if PROBE_MARK in request:
            for rs in req.resource_spans:
                for ss in rs.scope_spans:
                    for span in ss.spans:
                        if span.trace_id.startswith(PROBE_MARK):
                            with lock:
                                state["probes"].setdefault(span.trace_id.hex(), now)
        with lock:
            state["count"] += n
            state["last"] = now
        return b""

    def nothing(request: bytes, context: Any) -> bytes:
        return b""

    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=4),
        options=[("grpc.max_receive_message_length", 64 << 20)],
    )
    server.add_generic_rpc_handlers(
        [
            grpc.method_handlers_generic_handler(
                f"opentelemetry.proto.collector.{signal}.v1.{service}",
                {
                    "Export": grpc.unary_unary_rpc_method_handler(
                        export if signal == "trace" else nothing,
                        request_deserializer=None,
                        response_serializer=None,
                    )
                },
            )
            for signal, service in (
                ("trace", "TraceService"),
                ("logs", "LogsService"),
                ("metrics", "MetricsService"),
            )
        ]
    )
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            with lock:
                body = json.dumps(state).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    http = ThreadingHTTPServer(("127.0.0.1", http_port), Handler)
    print("ready", flush=True)
    http.serve_forever()


# --- the Collector in its three configurations ----------------------------------------------------


def _collector_config(
    kind: str, backend: str, sidecar: str, ports: dict[str, int], batch_timeout: str | None = None
) -> str:
    """otelcol.yaml or a routing config with every endpoint on loopback: Tempo -> the
    backend, Jaeger's exporter left out (one backend), the sidecar where it runs; with
    `batch_timeout`, every batch processor's timeout set to it."""
    source = {"routing": "genai-routing.yaml", "connector": "genai-routing-attest.yaml"}.get(
        kind, "otelcol.yaml"
    )
    data: dict[str, Any] = yaml.safe_load((COLLECTOR_CONFIG / source).read_text())
    data["receivers"]["otlp"]["protocols"] = {"grpc": {"endpoint": f"127.0.0.1:{ports['in']}"}}
    data["receivers"]["otlp/graded"]["protocols"]["grpc"]["endpoint"] = (
        f"127.0.0.1:{ports['graded']}"
    )
    exporters = data["exporters"]
    exporters["otlp_grpc/tempo"]["endpoint"] = backend
    exporters["otlp_grpc/attest"]["endpoint"] = sidecar
    for name in ("otlp_grpc/jaeger", "otlp_http/loki", "otlp_http/prometheus"):
        exporters.pop(name)
    pipelines = data["service"]["pipelines"]
    for name in [n for n in pipelines if not n.startswith("traces/")]:
        pipelines.pop(name)  # the load is traces only
    connectors = data.get("connectors") or {}
    for pipeline in pipelines.values():
        pipeline["exporters"] = [
            e for e in pipeline["exporters"] if e in exporters or e in connectors
        ]
    if kind == "collector":  # the first pipeline straight to the backend
        pipelines.pop("traces/out")
        pipelines["traces/in"]["exporters"] = ["otlp_grpc/tempo"]
        exporters.pop("otlp_grpc/attest")
        data["receivers"].pop("otlp/graded")
    if batch_timeout is not None:
        data["processors"]["batch"]["timeout"] = batch_timeout
    data["service"]["telemetry"] = {"metrics": {"level": "none"}, "logs": {"level": "warn"}}
    return yaml.safe_dump(data, sort_keys=False)


class Rig:
    """Backend, sidecar (for B and C) and the Collector, started together."""

    def __init__(
        self,
        kind: str,
        tmp: Path,
        probe_sink: InProcessSink | None = None,
        pin: bool = False,
        batch_timeout: str | None = None,
    ) -> None:
        self.kind = kind
        self.backend = Backend()
        target = self.backend.endpoint
        ports = {"in": free_port(), "graded": free_port()}
        self.sidecar: SidecarRun | None = None
        if kind != "collector":
            self.sidecar = SidecarRun(
                tmp / f"sidecar-{kind}",
                f"127.0.0.1:{ports['graded']}",
                config_text=SIDECAR_CONFIG + _extra_sidecar_config,
                cpus=SIDECAR_CPU if pin else None,
                nice=_sidecar_nice,
            )
        config = tmp / f"otelcol-{kind}.yaml"
        config.write_text(
            _collector_config(
                kind,
                target,
                self.sidecar.endpoint if self.sidecar else "127.0.0.1:1",
                ports,
                batch_timeout,
            )
        )
        self.log = tmp / f"otelcol-{kind}.log"
        with open(self.log, "ab") as log:
            self.collector = subprocess.Popen(
                [_peer_collector(), f"--config={config}"], stdout=log, stderr=log
            )
        self.endpoint = f"127.0.0.1:{ports['in']}"
        channel = grpc.insecure_channel(self.endpoint)
        grpc.channel_ready_future(channel).result(timeout=60)
        channel.close()

    def cpu(self) -> tuple[float, float]:
        """CPU seconds used so far by the Collector and by the sidecar with its children."""
        return cpu_seconds(self.collector.pid), (
            cpu_seconds(self.sidecar.proc.pid) if self.sidecar else 0.0
        )

    def stop(self) -> None:
        self.collector.terminate()
        self.collector.wait(60)
        if self.sidecar:
            self.sidecar.stop()
        self.backend.stop()


def cpu_seconds(pid: int) -> float:
    """User + system CPU of `pid` and every descendant alive or reaped (from /proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    times: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # after the name: state ppid ... utime(12) stime(13) cutime(14) cstime(15), 0-based
        parents[int(entry)] = int(fields[1])
        times[int(entry)] = sum(int(x) for x in fields[11:15])
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        total += times.get(current, 0)
        todo.extend(child for child, parent in parents.items() if parent == current)
    return total / tick


class Rate:
    """One configuration's end-to-end rate and the CPU it cost per span."""

    def __init__(self, spans: int, seconds: float, collector_s: float, sidecar_s: float) -> None:
        self.per_s = spans / seconds
        self.collector_us = 1e6 * collector_s / spans
        self.sidecar_us = 1e6 * sidecar_s / spans


def throughput(kind: str, requests: list[bytes], tmp: Path, pin: bool) -> Rate:
    if kind == "parse-only":
        backend = Backend()
        try:
            send_all(backend.endpoint, requests[:4])
            total = _spans(requests) + backend.state()["count"]
            start = time.time()
            send_all(backend.endpoint, requests)
            last = backend.wait_count(total)
        finally:
            backend.stop()
        return Rate(_spans(requests), last - start, 0.0, 0.0)
    rig = Rig(kind, tmp, pin=pin)
    try:
        warm, measured = requests[-4:], requests[:-4]
        send_all(rig.endpoint, warm)
        rig.backend.wait_count(_spans(warm))
        collector0, sidecar0 = rig.cpu()
        start = time.time()
        send_all(rig.endpoint, measured)
        last = rig.backend.wait_count(_spans(requests))
        collector1, sidecar1 = rig.cpu()
    finally:
        rig.stop()
    return Rate(_spans(measured), last - start, collector1 - collector0, sidecar1 - sidecar0)


def _probes(count: int) -> list[tuple[str, bytes]]:
    import random

    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    rng = random.Random(5)
    out = []
    for i in range(count):
        spans = plain_trace(rng, 1_700_000_000_000_000_000 + i)[:10]
        trace_id = PROBE_MARK + rng.randbytes(16 - len(PROBE_MARK))
        for span in spans:
            span.trace_id = trace_id
        req = ExportTraceServiceRequest()
        rs = req.resource_spans.add()
        rs.resource.attributes.add(key="service.name").value.string_value = "probe"
        rs.scope_spans.add().spans.extend(spans)
        out.append((trace_id.hex(), req.SerializeToString()))
    return out


def _offer(endpoint: str, load: list[bytes], rate_spans: float, stop: threading.Event) -> None:
    channel = grpc.insecure_channel(endpoint)
    call = channel.unary_unary(EXPORT, request_serializer=None, response_deserializer=None)
    interval = _spans(load[:1]) / rate_spans
    i, nxt = 0, time.perf_counter()
    while not stop.is_set():
        call.future(load[i % len(load)], timeout=30)
        i += 1
        nxt += interval
        delay = nxt - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
    channel.close()


def plain_latency(
    kind: str, load: list[bytes], rate: float, probes: int, tmp: Path, pin: bool
) -> tuple[float, float]:
    """(p50, p99) in ms of a plain probe trace from send to the backend, under `rate`
    spans/s. Every batch processor waits LATENCY_BATCH_TIMEOUT here, in every configuration:
    at the shipped 200 ms a probe waits anywhere in 0-200 ms for its batch whatever the
    config, and that spread, not the routing, would set the p99 of a few hundred probes."""
    rig = Rig(kind, tmp, pin=pin, batch_timeout=LATENCY_BATCH_TIMEOUT)
    try:
        stop = threading.Event()
        loader = threading.Thread(target=_offer, args=(rig.endpoint, load, rate, stop))
        loader.start()
        time.sleep(1.0)
        channel = grpc.insecure_channel(rig.endpoint)
        call = channel.unary_unary(EXPORT, request_serializer=None, response_deserializer=None)
        sent: dict[str, float] = {}
        for trace_id, body in _probes(probes):
            sent[trace_id] = time.time()
            call(body, timeout=30)
            time.sleep(0.02)
        time.sleep(1.5)
        stop.set()
        loader.join()
        channel.close()
        arrived = rig.backend.state()["probes"]
    finally:
        rig.stop()
    waits = sorted(arrived[t] - t0 for t, t0 in sent.items() if t in arrived)
    if len(waits) < len(sent):
        print(f"  ({kind}: {len(sent) - len(waits)} of {len(sent)} probes did not arrive)")
    return 1000 * waits[len(waits) // 2], 1000 * waits[min(len(waits) - 1, int(len(waits) * 0.99))]


KINDS = ("collector", "sidecar", "routing", "connector")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer requests")
    parser.add_argument(
        "--pin",
        action="store_true",
        help="the sidecar on CPU 1, the sender, the Collector and the backend on CPU 0",
    )
    parser.add_argument(
        "--latency-only",
        type=float,
        metavar="SPANS_PER_S",
        help="only the plain-span latency rows, under this mixed load",
    )
    parser.add_argument(
        "--grading-nice",
        type=int,
        metavar="N",
        help="the sidecar's grading.nice (default: the shipped default)",
    )
    parser.add_argument(
        "--sidecar-nice",
        type=int,
        default=0,
        metavar="N",
        help="start the whole sidecar (receiving and grading processes) at this niceness",
    )
    parser.add_argument("--backend", nargs=2, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    global _extra_sidecar_config, _sidecar_nice
    _sidecar_nice = args.sidecar_nice
    if args.grading_nice is not None:
        _extra_sidecar_config = f"grading: {{nice: {args.grading_nice}}}\n"
    if args.backend:
        serve_backend(*args.backend)
        return
    if args.pin:
        os.sched_setaffinity(0, {0})  # the backend and the Collector inherit it
    scale = 1 if args.quick else 2
    agent = build_requests(60 * scale, 24, 1.0, seed=1)
    mixed = build_requests(200 * scale, 24, 0.1, seed=2)
    manifest = yaml.safe_load((COLLECTOR_CONFIG / "builder-config.yaml").read_text())
    print(
        f"machine: {os.cpu_count()} CPUs; python {sys.version.split()[0]}; Collector "
        f"{manifest['dist']['version']}; requests of 504 spans; "
        + ("pinned: sidecar on CPU 1, the rest on CPU 0" if args.pin else "nothing pinned")
    )
    rates: dict[str, dict[str, Rate]] = {}
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        if args.latency_only:
            latency(mixed, args.latency_only, 250 if args.quick else 1000, tmp, args.pin)
            return
        print(
            f"{'workload':28s} {'parse-only':>10s} {'(A) alone':>10s} {'(B) sidecar':>11s} "
            f"{'B/A':>5s} {'(C) routing':>11s} {'C/A':>5s} {'(D) connector':>13s} {'D/A':>5s}"
            "   spans/s, end to end"
        )
        for name, reqs in (("agent-heavy (100% GenAI)", agent), ("mixed (10% GenAI)", mixed)):
            row = {k: throughput(k, reqs, tmp, args.pin) for k in ("parse-only", *KINDS)}
            rates[name] = row
            a, b, c, d = (row[k] for k in KINDS)
            print(
                f"{name:28s} {row['parse-only'].per_s:10,.0f} {a.per_s:10,.0f} "
                f"{b.per_s:11,.0f} {b.per_s / a.per_s:5.2f} {c.per_s:11,.0f} "
                f"{c.per_s / a.per_s:5.2f} {d.per_s:13,.0f} {d.per_s / a.per_s:5.2f}",
                flush=True,
            )
            share = 1.0 if "agent" in name else 0.1
            print(
                f"{'':28s} Collector CPU per span: (A) {a.collector_us:.1f} us, "
                f"(B) {b.collector_us:.1f} us, (C) {c.collector_us:.1f} us, "
                f"(D) {d.collector_us:.1f} us [capacity A/C {a.collector_us / c.collector_us:.2f}, "
                f"A/D {a.collector_us / d.collector_us:.2f}]; sidecar CPU per span it saw: "
                f"(B) {b.sidecar_us:.1f} us, (C) {c.sidecar_us / share:.1f} us, "
                f"(D) {d.sidecar_us / share:.1f} us",
                flush=True,
            )
        mixed_rates = rates["mixed (10% GenAI)"]
        offered = min(mixed_rates["collector"].per_s / 2, mixed_rates["sidecar"].per_s * 0.8)
        latency(mixed, offered, 250 if args.quick else 1000, tmp, args.pin)


def latency(mixed: list[bytes], offered: float, probes: int, tmp: Path, pin: bool) -> None:
    """The plain-span latency rows: every configuration one after another, same load."""
    lat = {k: plain_latency(k, mixed, offered, probes, tmp, pin) for k in KINDS}
    a50, a99 = lat["collector"]
    rows = [f"(A) {a50:.1f} / {a99:.1f} ms"]
    for label, kind in zip("BCD", KINDS[1:], strict=True):
        p50, p99 = lat[kind]
        added = f"added {p50 - a50:+.1f} / {p99 - a99:+.1f}"
        rows.append(f"({label}) {p50:.1f} / {p99:.1f} ms ({added})")
    print(
        f"plain spans, mixed load at {offered:,.0f} spans/s, {probes} probes, p50 / p99: "
        + "; ".join(rows)
    )


if __name__ == "__main__":
    main()
