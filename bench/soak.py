"""Soak: `attest-otel serve` under sustained load, with small caps, watched from outside.

    .venv/bin/python bench/soak.py [--seconds 240] [--rate 20] [--store-mib 16]
                                   [--buffer-mib 4] [--out bench/results/soak]

Two phases of `--seconds / 2` each: *mixed* (24 traces per request, 2 of them agent
traces: about 8 % GenAI spans, the issue's load) and *agent-heavy* (4 agent traces per
request). Raw gRPC senders send `--rate` requests/s with fresh trace and span ids each,
retrying "retry later" answers as an exporter does, to the sidecar (`--buffer-dir`, the
SQLite store), which forwards to a sink process that records every span id it gets.

Every second it samples what a user would look at: the RSS of the sidecar and of each
grading process (/proc), `du` of the buffer dir and of the store (database, -wal, -shm),
and the latency of the export calls made in that second. Reported: spans sent, acknowledged
and arrived (acknowledged but never arrived must be 0), p50/p99 export latency, a table
every `--every` seconds, the peaks against each cap, how long the store's traces reach
back at the end, and from that how many minutes of traces a store size keeps at a given
GenAI span rate. `OUT.svg` plots the samples, `OUT.csv` holds them. Exit status 1 when a
span is lost or a cap is passed by more than the README's margin.

The defaults pass the store cap and the buffer-dir cap in the first phase and prune the
store many times over; `--store-mib 512 --buffer-mib 2048 --seconds 1200` is the issue's
twenty-minute run.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import itertools
import os
import random
import sqlite3
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

from load_overload import (  # noqa: E402
    EXPORT,
    Template,
    free_port,
    retry_delay,
    serve_sink,
    start_serve,
)
from sidecar_workload import build_request  # noqa: E402

MIB = 2**20
STORE_MARGIN = 0.05  # README, "Sizing the disk"
BUFFER_MARGIN = 0.01
PHASES = (("mixed", 24, 2 / 24), ("agent-heavy", 4, 1.0))


def du(*paths: Path) -> int:
    """Bytes allocated on disk, as `du` counts them."""
    total = 0
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            if path.is_dir():
                for one in path.rglob("*"):
                    with contextlib.suppress(FileNotFoundError):
                        if one.is_file():
                            total += one.stat().st_blocks * 512
            else:
                total += path.stat().st_blocks * 512
    return total


def rss_mib(pid: int) -> float:
    try:
        return (
            int(Path(f"/proc/{pid}/statm").read_text().split()[1])
            * os.sysconf("SC_PAGE_SIZE")
            / MIB
        )
    except (OSError, IndexError, ValueError):
        return 0.0


def children(pid: int) -> list[int]:
    out: list[int] = []
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError):
                out += [int(c) for c in (task / "children").read_text().split()]
    return out


@dataclass
class Sample:
    t: float
    phase: str
    sent_spans: int
    acked_spans: int
    refused: int
    rss_sidecar: float
    rss_grading: list[float]
    buffer_bytes: int
    store_bytes: int
    p50_ms: float
    p99_ms: float
    stored_spans: int


@dataclass
class Load:
    """The senders' shared counts (under `lock`)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    sent_spans: int = 0
    acked_spans: int = 0
    refused: int = 0
    errors: int = 0
    seq: int = 0
    latencies: list[float] = field(default_factory=list)
    acked: list[tuple[int, int]] = field(default_factory=list)  # (seq, spans)


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _start_sidecar(
    tmp: Path, args: argparse.Namespace, sink_port: int
) -> tuple[subprocess.Popen[bytes], int, int]:
    config = (
        "buffer: {grace_s: 0.5, idle_timeout_s: 2, segment_size_mib: 1,"
        f" max_dir_size_mib: {args.buffer_mib}}}\n"
        f"store: {{max_size_mib: {args.store_mib}}}\n"
        "forward: {retry_after_s: 0.1}\n"
        "telemetry: {metrics: false}\n"
    )
    return start_serve(tmp, config, f"127.0.0.1:{sink_port}", "--buffer-dir", str(tmp / "buffer"))


def _sender(
    call: grpc.UnaryUnaryMultiCallable,
    templates: list[Template],
    load: Load,
    pace: dict[str, float],
    rate: float,
    stop: threading.Event,
) -> None:
    while not stop.is_set():
        with load.lock:
            seq = load.seq
            load.seq += 1
            now = time.monotonic()
            at = max(now, pace["next"])
            pace["next"] = at + 1 / rate
        time.sleep(max(0.0, at - now))
        which = seq % len(templates)
        body = templates[which].make(seq)
        while True:
            began = time.perf_counter()
            try:
                call(body, timeout=30)
            except grpc.RpcError as e:
                unavailable = e.code() == grpc.StatusCode.UNAVAILABLE
                with load.lock:
                    load.refused += unavailable
                    load.errors += not unavailable
                time.sleep(retry_delay(e) if unavailable else 0.5)
                continue  # in hand until acknowledged, as an exporter's retry
            spent = time.perf_counter() - began
            with load.lock:
                load.latencies.append(spent)
                load.sent_spans += templates[which].spans
                load.acked_spans += templates[which].spans
                load.acked.append((seq, templates[which].spans))
            break


def _stored_spans(db: Path) -> int:
    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1)) as c:
            return int(c.execute("SELECT COALESCE(sum(span_count), 0) FROM traces").fetchone()[0])
    except sqlite3.Error:
        return 0


def _store_reach(db: Path) -> tuple[int, int, float]:
    """(traces, spans, seconds from the oldest stored trace's last write to the newest)."""
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        n, spans, lo, hi = conn.execute(
            "SELECT count(*), COALESCE(sum(span_count), 0), min(updated_ns), max(updated_ns)"
            " FROM traces"
        ).fetchone()
    return int(n), int(spans), ((hi or 0) - (lo or 0)) / 1e9


def svg(samples: list[Sample], args: argparse.Namespace, path: Path) -> None:
    """Three panels over time: disk (store, buffer dir, their caps), RSS, export latency."""
    width, panel, pad = 900, 200, 50
    end = max(s.t for s in samples) or 1.0
    panels = [
        (
            "on disk (MiB, du)",
            [
                ("store", "#1f77b4", [s.store_bytes / MIB for s in samples]),
                ("buffer dir", "#ff7f0e", [s.buffer_bytes / MIB for s in samples]),
            ],
            [("store cap", args.store_mib), ("buffer cap", args.buffer_mib)],
        ),
        (
            "RSS (MiB)",
            [("sidecar", "#2ca02c", [s.rss_sidecar for s in samples])]
            + [
                (f"grading {i + 1}", c, [(s.rss_grading + [0.0] * 4)[i] for s in samples])
                for i, c in enumerate(("#9467bd", "#8c564b"))
                if any(len(s.rss_grading) > i for s in samples)
            ],
            [],
        ),
        (
            "export latency (ms, each second)",
            [
                ("p50", "#17becf", [s.p50_ms for s in samples]),
                ("p99", "#d62728", [s.p99_ms for s in samples]),
            ],
            [],
        ),
    ]
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" '
        f'height="{len(panels) * (panel + pad) + pad}" font-family="sans-serif" font-size="11">',
        '<rect width="100%" height="100%" fill="white"/>',
    ]
    plot_w = width - 2 * pad
    for k, (title, series, caps) in enumerate(panels):
        top = pad + k * (panel + pad)
        top_value = max([max(v or [0.0]) for _, _, v in series] + [c for _, c in caps] + [1.0])
        top_value *= 1.1

        def y(v: float, top: int = top, scale: float = top_value) -> float:
            return top + panel - v / scale * panel

        out.append(f'<text x="{pad}" y="{top - 8}" font-size="13">{title}</text>')
        out.append(
            f'<rect x="{pad}" y="{top}" width="{plot_w}" height="{panel}" '
            'fill="none" stroke="#999"/>'
        )
        out.append(f'<text x="{pad - 4}" y="{top + 10}" text-anchor="end">{top_value:.0f}</text>')
        out.append(f'<text x="{pad - 4}" y="{top + panel}" text-anchor="end">0</text>')
        for name, value in caps:
            out.append(
                f'<line x1="{pad}" x2="{width - pad}" y1="{y(value):.1f}" y2="{y(value):.1f}" '
                'stroke="#444" stroke-dasharray="4 3"/>'
                f'<text x="{width - pad - 4}" y="{y(value) - 3:.1f}" text-anchor="end">'
                f"{name} {value}</text>"
            )
        for i, (name, color, values) in enumerate(series):
            points = " ".join(
                f"{pad + s.t / end * plot_w:.1f},{y(v):.1f}"
                for s, v in zip(samples, values, strict=True)
            )
            out.append(f'<polyline fill="none" stroke="{color}" points="{points}"/>')
            out.append(f'<text x="{pad + 8 + i * 110}" y="{top + 14}" fill="{color}">{name}</text>')
        out.append(
            f'<text x="{width - pad}" y="{top + panel + 14}" text-anchor="end">{end:.0f} s</text>'
        )
    out.append("</svg>")
    path.write_text("\n".join(out))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=240.0, help="both phases together")
    parser.add_argument("--rate", type=float, default=20.0, help="requests/s")
    parser.add_argument("--store-mib", type=int, default=16)
    parser.add_argument("--buffer-mib", type=int, default=4)
    parser.add_argument("--senders", type=int, default=16)
    parser.add_argument("--every", type=float, default=10.0, help="table row every N s")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "soak")
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="attest-soak-"))
    sink_port = free_port()
    sink_out = tmp / "sink-ids.bin"
    sink = subprocess.Popen(
        [sys.executable, str(Path(__file__)), "--sink", str(sink_port), str(sink_out)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
    )
    assert sink.stdout is not None
    assert b"ready" in sink.stdout.readline()
    sidecar, grpc_port, _ = _start_sidecar(tmp, args, sink_port)
    channel = grpc.insecure_channel(
        f"127.0.0.1:{grpc_port}", options=[("grpc.max_send_message_length", -1)]
    )
    call = channel.unary_unary(EXPORT, request_serializer=None, response_deserializer=None)
    load = Load()
    samples: list[Sample] = []
    all_latencies: list[float] = []
    genai_spans = 0
    print(
        f"{'t (s)':>6} {'phase':<11} {'sent':>9} {'acked':>9} {'refused':>7} "
        f"{'RSS sidecar':>11} {'RSS grading':>13} {'buffer du':>9} {'store du':>9} "
        f"{'p50 ms':>7} {'p99 ms':>7}",
        flush=True,
    )
    templates_by_phase: dict[str, list[Template]] = {}
    for name, traces, share in PHASES:
        rng = random.Random(len(name))
        templates_by_phase[name] = [Template(build_request(rng, traces, share)) for _ in range(8)]
    start = time.monotonic()
    pace = {"next": start}
    last_row = -args.every
    for name, _, _share in PHASES:
        templates = templates_by_phase[name]
        per_request_genai = _genai_spans(templates)
        stop = threading.Event()
        seq_before = load.seq
        threads = [
            threading.Thread(
                target=_sender,
                args=(call, templates, load, pace, args.rate, stop),
                daemon=True,
            )
            for _ in range(args.senders)
        ]
        for t in threads:
            t.start()
        phase_end = time.monotonic() + args.seconds / len(PHASES)
        while time.monotonic() < phase_end:
            time.sleep(1.0)
            with load.lock:
                window, load.latencies = load.latencies, []
                sent, acked, refused = load.sent_spans, load.acked_spans, load.refused
            all_latencies += window
            kids = children(sidecar.pid)
            sample = Sample(
                time.monotonic() - start,
                name,
                sent,
                acked,
                refused,
                rss_mib(sidecar.pid),
                [rss_mib(k) for k in kids],
                du(tmp / "buffer"),
                du(tmp / "store.db", tmp / "store.db-wal", tmp / "store.db-shm"),
                _percentile(window, 0.5) * 1e3,
                _percentile(window, 0.99) * 1e3,
                _stored_spans(tmp / "store.db"),
            )
            samples.append(sample)
            if sample.t - last_row >= args.every:
                last_row = sample.t
                print(_row(sample), flush=True)
        stop.set()
        for t in threads:
            t.join(60)
        genai_spans += (load.seq - seq_before) * per_request_genai
    load_s = time.monotonic() - start
    # Every acknowledged span should reach the sink: give the sidecar its grace, then stop it.
    time.sleep(3.0)
    sidecar.terminate()
    try:
        sidecar.wait(120)
    except subprocess.TimeoutExpired:
        sidecar.kill()
    sink.terminate()
    sink.wait(30)
    raw = sink_out.read_bytes()
    arrived = {raw[i : i + 8] for i in range(0, len(raw), 8)}
    # `Template.make(seq)` gives span i of request seq the id <seq><i>.
    acked_ids = {struct.pack(">II", seq, i) for seq, n in load.acked for i in range(n)}
    lost = len(acked_ids - arrived)
    channel.close()

    store_peak = max(s.store_bytes for s in samples)
    buffer_peak = max(s.buffer_bytes for s in samples)
    traces, spans, reach_s = _store_reach(tmp / "store.db")
    store_now = du(tmp / "store.db", tmp / "store.db-wal", tmp / "store.db-shm")
    rss_side = [s.rss_sidecar for s in samples]
    rss_grading = [max(s.rss_grading or [0.0]) for s in samples]
    third = max(1, len(samples) // 3)
    print()
    print(
        f"load: {load_s:.0f} s at {args.rate:g} requests/s ({len(PHASES)} phases), "
        f"store cap {args.store_mib} MiB, buffer-dir cap {args.buffer_mib} MiB"
    )
    print(
        f"spans      sent {load.sent_spans}, acknowledged {load.acked_spans}, arrived "
        f"{len(arrived & acked_ids)}, lost {lost}; refused requests (retried) {load.refused}, "
        f"other errors {load.errors}"
    )
    print(
        f"latency    export calls p50 {_percentile(all_latencies, 0.5) * 1e3:.1f} ms, "
        f"p99 {_percentile(all_latencies, 0.99) * 1e3:.1f} ms ({len(all_latencies)} calls)"
    )
    print(
        f"RSS        sidecar {rss_side[third]:.0f} -> {max(rss_side):.0f} MiB peak "
        f"(last third peak {max(rss_side[-third:]):.0f}); grading peak "
        f"{max(rss_grading):.0f} MiB"
    )
    print(
        f"disk       store peak {store_peak / MIB:.2f} MiB of {args.store_mib} "
        f"({store_peak / (args.store_mib * MIB):.1%}), buffer dir peak "
        f"{buffer_peak / MIB:.2f} MiB of {args.buffer_mib} "
        f"({buffer_peak / (args.buffer_mib * MIB):.1%})"
    )
    prunes = sum(1 for a, b in itertools.pairwise(samples) if b.store_bytes < a.store_bytes)
    print(f"store      {prunes} drops in size on disk (prunes seen from outside)")
    if spans and reach_s > 0:
        genai_rate = genai_spans / load_s
        # The store keeps spans in proportion to its cap (it prunes to below it): each
        # GenAI span kept costs `per_span` bytes of the cap, grades and slack included,
        # averaged over the agent-heavy phase's second half (every stored span is GenAI).
        last = [s.stored_spans for s in samples if s.phase == PHASES[-1][0]]
        kept = last[len(last) // 2 :] or [spans]
        per_span = args.store_mib * MIB / (sum(kept) / len(kept))
        print(
            f"reach      the store holds {traces} traces, {spans} spans in "
            f"{store_now / MIB:.1f} MiB: {per_span:.0f} bytes of the cap per GenAI span kept; "
            f"its traces reach back {reach_s:.0f} s at {genai_rate:.0f} GenAI spans/s"
        )
        for size in (512, 2048, 10240):
            for rate in (100, 1000, 10000):
                minutes = size * MIB / per_span / rate / 60
                print(f"  {size:>6} MiB at {rate:>5} GenAI spans/s keeps {_span_of(minutes)}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out.with_suffix(".csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(
            [
                "t_s",
                "phase",
                "sent_spans",
                "acked_spans",
                "refused",
                "rss_sidecar_mib",
                "rss_grading_mib",
                "buffer_du_bytes",
                "store_du_bytes",
                "p50_ms",
                "p99_ms",
                "stored_spans",
            ]
        )
        for s in samples:
            w.writerow(
                [
                    f"{s.t:.1f}",
                    s.phase,
                    s.sent_spans,
                    s.acked_spans,
                    s.refused,
                    f"{s.rss_sidecar:.1f}",
                    "/".join(f"{r:.1f}" for r in s.rss_grading),
                    s.buffer_bytes,
                    s.store_bytes,
                    f"{s.p50_ms:.2f}",
                    f"{s.p99_ms:.2f}",
                    s.stored_spans,
                ]
            )
    svg(samples, args, args.out.with_suffix(".svg"))
    print(f"samples: {args.out.with_suffix('.csv')}, plot: {args.out.with_suffix('.svg')}")
    print(f"sidecar log: {tmp / 'sidecar.log'}")
    over = store_peak > args.store_mib * MIB * (1 + STORE_MARGIN) or buffer_peak > (
        args.buffer_mib * MIB * (1 + BUFFER_MARGIN)
    )
    raise SystemExit(1 if lost or over else 0)


def _genai_spans(templates: list[Template]) -> int:
    """GenAI spans per request (the agent traces' spans), averaged over the templates."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    total = 0
    for t in templates:
        req = ExportTraceServiceRequest.FromString(t.data)
        for rs in req.resource_spans:
            service = next(
                (a.value.string_value for a in rs.resource.attributes if a.key == "service.name"),
                "",
            )
            if service == "agent-service":
                total += sum(len(ss.spans) for ss in rs.scope_spans)
    return round(total / len(templates))


def _row(s: Sample) -> str:
    grading = "/".join(f"{r:.0f}" for r in s.rss_grading) or "-"
    return (
        f"{s.t:6.0f} {s.phase:<11} {s.sent_spans:9d} {s.acked_spans:9d} {s.refused:7d} "
        f"{s.rss_sidecar:9.0f} M {grading:>11} M {s.buffer_bytes / MIB:7.2f} M "
        f"{s.store_bytes / MIB:7.2f} M {s.p50_ms:7.1f} {s.p99_ms:7.1f}"
    )


def _span_of(minutes: float) -> str:
    if minutes < 120:
        return f"{minutes:.0f} minutes"
    if minutes < 48 * 60:
        return f"{minutes / 60:.1f} hours"
    return f"{minutes / 1440:.1f} days"


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--sink":
        serve_sink(int(sys.argv[2]), 1e9, sys.argv[3])
    else:
        with contextlib.suppress(KeyboardInterrupt):
            main()
