"""Faults under `--buffer-dir` and downstream: a corrupt buffer file on restart, a disk that
fills, a next hop that flaps. Nothing acknowledged may be lost, nothing corrupt may stop the
replay, and a request that cannot be persisted is refused with "retry later", not acked."""

from __future__ import annotations

import collections
import errno
import logging
import os
import random
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
    OTLPSpanExporter as GrpcSpanExporter,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, Span

from attest_otel.sidecar import wal as wal_module
from attest_otel.sidecar.wal import BufferDirError, DurableLog
from tests.sidecar.downstream import Downstream
from tests.sidecar.helpers import REPO, Sidecar, agent_run, plain_request, provider

pytestmark = pytest.mark.timeout(60)

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


def plain_pb(seed: int, n: int = 5, pad: int = 0) -> bytes:
    rng = random.Random(seed)
    rs = ResourceSpans()
    rs.resource.attributes.append(
        KeyValue(key="service.name", value=AnyValue(string_value="orders"))
    )
    ss = rs.scope_spans.add()
    ss.scope.name = "opentelemetry.instrumentation.flask"
    trace_id = rng.randbytes(16)
    for i in range(n):
        span = Span(
            trace_id=trace_id,
            span_id=rng.randbytes(8),
            name=f"GET /orders/{i}",
            kind=Span.SPAN_KIND_SERVER,
            start_time_unix_nano=1_700_000_000_000_000_000,
            end_time_unix_nano=1_700_000_000_100_000_000,
        )
        if pad:
            span.attributes.append(
                KeyValue(key="http.request.body", value=AnyValue(string_value="x" * pad))
            )
        ss.spans.append(span)
    data: bytes = ExportTraceServiceRequest(resource_spans=[rs]).SerializeToString()
    return data


def span_ids(data: bytes) -> set[str]:
    req = ExportTraceServiceRequest.FromString(data)
    return {s.span_id.hex() for rs in req.resource_spans for ss in rs.scope_spans for s in ss.spans}


def segment_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("wal-*.log"))


# --- a corrupt buffer file on restart ---------------------------------------------------------


def _write_segments(directory: Path, per_segment: list[list[bytes]]) -> None:
    """Segments of undone records, as a crashed sidecar leaves them."""
    log = DurableLog(directory, segment_bytes=1 << 30)
    log.open()
    for i, records in enumerate(per_segment):
        if i:
            with log._lock:  # a new segment per group, as a rotation makes
                assert log._active is not None
                log._rotate(log._active.seq + 1)
        for data in records:
            log.append(data)
    os.close(log._fd)  # a crash: nothing marked done, nothing closed cleanly
    os.close(log._ack_fd)


def test_replay_skips_garbage_a_torn_tail_a_damaged_record_and_a_wholly_corrupt_segment(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    d = tmp_path / "buf"
    records = [[plain_pb(s) for s in range(10 * g, 10 * g + 4)] for g in range(4)]
    _write_segments(d, records)
    segs = segment_files(d)
    assert len(segs) >= 4
    segs = [p for p in segs if p.stat().st_size > 0]
    assert len(segs) == 4
    # 0: garbage appended; 1: its last record torn; 2: its second record damaged in the
    # middle (the ones after it must still come back); 3: nothing but noise.
    with open(segs[0], "ab") as f:
        f.write(os.urandom(300))
    size = segs[1].stat().st_size
    with open(segs[1], "r+b") as f:
        f.truncate(size - 17)
    raw = bytearray(segs[2].read_bytes())
    second = 16 + len(records[2][0])
    raw[second + 40 : second + 60] = os.urandom(20)
    segs[2].write_bytes(bytes(raw))
    segs[3].write_bytes(os.urandom(segs[3].stat().st_size))
    # And an unreadable one: skipped with an error, not a crash.
    (d / "wal-000000000999.log").mkdir()

    with caplog.at_level(logging.WARNING, logger="attest_otel.sidecar.wal"):
        replayed = [data for _rid, data in DurableLog(d).open()]

    expected = records[0] + records[1][:-1] + records[2][:1] + records[2][2:]
    assert replayed == expected
    text = caplog.text
    assert f"{segs[0].name}: 300 damaged or torn byte(s) at the end" in text
    assert f"{segs[1].name}" in text and "torn" in text
    assert f"{segs[2].name}" in text and "replay goes on with the next intact record" in text
    assert f"{segs[3].name}" in text
    assert "wal-000000000999.log cannot be read" in text


def test_sidecar_restarted_on_a_corrupt_buffer_dir_replays_the_rest(
    sidecar: Sidecar, downstream: Downstream, tmp_path: Path
) -> None:
    d = tmp_path / "buffer"
    good = [plain_pb(1000 + s) for s in range(6)]
    _write_segments(d, [good[:3], good[3:]])
    first, second = [p for p in segment_files(d) if p.stat().st_size]
    with open(first, "ab") as f:
        f.write(b"\x00garbage\xff" * 40)
    raw = bytearray(second.read_bytes())
    raw[-5:] = b"XXXXX"  # the last record of the second segment is damaged
    second.write_bytes(bytes(raw))

    sidecar.extra_args = ["--buffer-dir", str(d)]
    sidecar.start()
    wanted = set().union(*(span_ids(g) for g in good[:5]))
    assert downstream.wait_spans(wanted), sidecar.log()
    assert sidecar.terminate() == 0
    log = sidecar.log()
    assert "level=warning" in log and "damaged or torn" in log and "replaying 5 request" in log
    lost = span_ids(good[5]) - set(downstream.span_ids())
    assert lost == span_ids(good[5])  # the damaged one, and only it, is not replayed
    assert collections.Counter(downstream.span_ids()).most_common(1)[0][1] == 1


def test_a_retry_of_a_request_the_crash_left_unanswered_is_routed_once(
    sidecar: Sidecar, downstream: Downstream, tmp_path: Path
) -> None:
    """`kill -9` after the fsync, before the "OK": the request is replayed at the restart and
    its sender, which never heard "OK", sends it again. The sidecar knows the retry by its
    bytes (wal.replayed_copy), answers "OK", and each span reaches the next hop once: a
    GenAI trace's spans are not forwarded again as late spans after its grade, nor a plain
    request's twice; a metrics request (kept tagged with its signal) is passed on once."""
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
        ExportMetricsServiceRequest,
    )

    from attest_otel.sidecar.log_wire import METRICS, tag
    from tests.sidecar.test_wire import _fixture_requests

    d = tmp_path / "buffer"
    genai = _fixture_requests(REPO / "tests" / "fixtures" / "traces" / "vercel__fallback.json")
    sent = [*genai, plain_pb(77)]
    metrics = ExportMetricsServiceRequest()
    metrics.resource_metrics.add().scope_metrics.add().metrics.add(name="queue.depth")
    metric_bytes = metrics.SerializeToString()
    _write_segments(d, [[*sent, tag(METRICS, metric_bytes)]])
    sidecar.extra_args = ["--buffer-dir", str(d)]
    sidecar.start()
    wanted = set().union(*(span_ids(r) for r in sent))
    assert downstream.wait_spans(wanted), sidecar.log()
    assert downstream.wait_for(lambda ds: len(ds.requests["metrics"]) == 1), sidecar.log()
    other = plain_pb(78)
    with grpc.insecure_channel(sidecar.grpc_endpoint) as channel:
        export = channel.unary_unary(EXPORT, request_serializer=None, response_deserializer=None)
        for body in sent:  # the sender's retries, after the replay has forwarded them
            export(body, timeout=10)
        channel.unary_unary(
            "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export",
            request_serializer=None,
            response_deserializer=None,
        )(metric_bytes, timeout=10)
        export(other, timeout=10)  # a new request still goes through
    assert downstream.wait_spans(span_ids(other)), sidecar.log()
    time.sleep(1.0)  # a span routed twice would arrive by now (grace 0.3 s)
    counts = collections.Counter(downstream.span_ids())
    assert {s: counts[s] for s in wanted} == dict.fromkeys(wanted, 1)
    assert downstream.requests["metrics"] == [metric_bytes]
    assert sidecar.terminate() == 0
    assert "acknowledged without routing it again" in sidecar.log()


# --- a disk that fills --------------------------------------------------------------------------


def test_enospc_mid_write_is_refused_cut_off_and_leaves_no_corruption(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = DurableLog(tmp_path, segment_bytes=1 << 20)
    log.open()
    kept = [plain_pb(s) for s in range(3)]
    log.append(kept[0])
    real_write = wal_module._write_all

    def half_then_enospc(fd: int, data: bytes) -> None:
        real_write(fd, data[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(wal_module, "_write_all", half_then_enospc)
    with pytest.raises(BufferDirError) as e:
        log.append(plain_pb(99))
    assert e.value.errno == errno.ENOSPC and "No space left" in str(e.value)
    monkeypatch.setattr(wal_module, "_write_all", real_write)
    log.append(kept[1])

    # An fsync that fails: refused too, and the next request goes to a fresh segment.
    real_fsync = os.fsync
    calls = {"n": 0}

    def failing_fsync(fd: int) -> None:
        calls["n"] += 1
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(wal_module.os, "fsync", failing_fsync)
    with pytest.raises(BufferDirError):
        log.append(plain_pb(98))
    monkeypatch.setattr(wal_module.os, "fsync", real_fsync)
    log.append(kept[2])
    assert log.write_errors == 2
    os.close(log._fd)
    os.close(log._ack_fd)

    replayed = [data for _rid, data in DurableLog(tmp_path).open()]
    # Everything acknowledged comes back; the half-written record left no trace; the one
    # whose fsync failed may come back (a duplicate at worst: it was never acknowledged).
    assert [r for r in replayed if r != plain_pb(98)] == kept
    assert plain_pb(99) not in replayed


def _mount_tmpfs(path: Path, size: str) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    try:
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
            capture_output=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    where = tmp_path / "tiny"
    if not _mount_tmpfs(where, "1m"):
        pytest.fail(
            "cannot mount a 1 MiB tmpfs (CI and sessions here run as root, so this should work)"
        )
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True, timeout=10)


def _post(url: str, body: bytes) -> int:
    request = urllib.request.Request(
        url, data=body, method="POST", headers={"Content-Type": "application/x-protobuf"}
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as r:
            status: int = r.status
            return status
    except urllib.error.HTTPError as e:
        return e.code


def test_a_full_disk_under_buffer_dir_means_retry_later_then_nothing_lost(
    sidecar: Sidecar, downstream: Downstream, tiny_disk: Path
) -> None:
    sidecar.config = {"buffer": {"segment_size_mib": 0.125}}
    sidecar.extra_args = ["--buffer-dir", str(tiny_disk / "buffer")]
    sidecar.start()
    downstream.down = True  # nothing leaves, so nothing on disk is freed
    channel = grpc.insecure_channel(sidecar.grpc_endpoint)
    export = channel.unary_unary(EXPORT, request_serializer=None, response_deserializer=None)
    acked: list[bytes] = []
    refused: grpc.RpcError | None = None
    for seed in range(200):
        body = plain_pb(5000 + seed, n=4, pad=4000)
        try:
            export(body, timeout=5)
            acked.append(body)
        except grpc.RpcError as e:
            refused = e
            break
    assert refused is not None, "the disk never filled"
    assert refused.code() == grpc.StatusCode.UNAVAILABLE
    assert "buffer-dir" in (refused.details() or "")
    assert _post(f"{sidecar.http_url}/v1/traces", plain_pb(7777, n=4, pad=4000)) == 503
    log = sidecar.log()
    errors = [
        line
        for line in log.splitlines()
        if "level=error" in line and "cannot persist a request" in line
    ]
    assert len(errors) == 1 and "No space left on device" in errors[0], log
    assert "Traceback" not in log

    # The downstream comes back: the held requests drain, space frees, the sender's retry
    # is accepted, and every acknowledged span arrives exactly once.
    downstream.down = False
    retried = plain_pb(8888, n=4, pad=4000)
    deadline = time.monotonic() + 20
    while True:
        try:
            export(retried, timeout=5)
            acked.append(retried)
            break
        except grpc.RpcError:
            assert time.monotonic() < deadline, sidecar.log()
            time.sleep(0.2)
    channel.close()
    wanted = set().union(*(span_ids(b) for b in acked))
    assert downstream.wait_spans(wanted, timeout=20), sidecar.log()
    assert sidecar.terminate() == 0
    counts = collections.Counter(downstream.span_ids())
    assert max(counts[i] for i in wanted) == 1
    # No corruption: the restart finds nothing damaged and nothing left to replay.
    downstream.requests["traces"].clear()
    sidecar.start()
    assert sidecar.terminate() == 0
    assert "damaged" not in sidecar.log() and "torn" not in sidecar.log()
    assert "replaying" not in sidecar.log()


# --- a downstream that flaps ----------------------------------------------------------------------


def test_a_downstream_that_flaps_during_a_send_loses_nothing(
    sidecar: Sidecar, downstream: Downstream
) -> None:
    sidecar.start()
    stop = threading.Event()

    def flap() -> None:  # down, up, down, ... every 0.3 s while spans flow
        while not stop.wait(0.3):
            downstream.down = not downstream.down
        downstream.down = False

    flapper = threading.Thread(target=flap, daemon=True)
    flapper.start()
    tp = provider(GrpcSpanExporter(endpoint=sidecar.grpc_endpoint, insecure=True))
    tracer = tp.get_tracer("tests.sidecar.flap")
    ids: set[str] = set()
    try:
        for _ in range(12):
            ids.update(agent_run(tracer)[1])
            ids.update(plain_request(tracer)[1])
            time.sleep(0.15)
        assert tp.force_flush()
        time.sleep(1.0)  # at least a few more flaps while graded traces are forwarded
    finally:
        stop.set()
        flapper.join(5)
    assert downstream.refused >= 1, "the downstream never refused anything"
    assert downstream.wait_spans(ids, timeout=20), sidecar.log()
    assert collections.Counter(downstream.span_ids()).most_common(1)[0][1] == 1
    tp.shutdown()
    assert sidecar.terminate() == 0
