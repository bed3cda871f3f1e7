"""Issue 16's bounds, in process: each test fails without the fix it names.

- the durable log: compaction, its cap, and one replay per record after a crash between a
  compaction's copy and its delete;
- the buffer: `max_hold_s` (a trace kept alive by a span a second), and fairness between
  senders at the limits;
- metric labels: cut to `label_max_chars`, and values unseen for `label_ttl_s` give their
  place;
- headers: checked at load (file, OTEL_EXPORTER_OTLP_HEADERS, `--header`);
- the store: retention by size alone, private files, the content policy on what it keeps.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest
from opentelemetry.proto.trace.v1.trace_pb2 import TracesData

from attest_otel.content import ContentPolicy
from attest_otel.errors import PolicyError, UsageError
from attest_otel.export.metrics import LabelCap
from attest_otel.sidecar.buffer import TraceBuffer, service_name
from attest_otel.sidecar.config import BufferConfig, load_service_config
from attest_otel.sidecar.wal import BufferDirError, DurableLog
from attest_otel.sidecar.wire import split_request
from attest_otel.sources.http import parse_headers
from attest_otel.store import StoredGrade, StoreWriter, TraceStore

NS = 1_000_000_000


# --- the durable log -------------------------------------------------------------------------


def _held(log: DurableLog, data: bytes) -> int:
    rid = log.append(data)
    log.hold(rid)
    log.unpin(rid)
    return rid


def test_one_long_held_record_no_longer_pins_every_segment(tmp_path: Path) -> None:
    log = DurableLog(tmp_path, segment_bytes=1000)
    log.open()
    pinned = _held(log, b"p" * 100)  # a trace kept alive holds its first request
    for _ in range(60):  # 60 KB of requests that are forwarded at once
        log.release([_held(log, b"x" * 900)])
    # Without compaction every segment since the pinned record stays: about 60 files.
    assert len(list(tmp_path.glob("wal-*.log"))) <= 2
    assert log.compactions >= 1
    assert log.disk_bytes <= 3 * 4096  # whole blocks: two segments and one .ack at most
    # A crash now (the directory as it is, opened elsewhere): the pinned record comes back.
    crashed = tmp_path.parent / f"{tmp_path.name}-crashed"
    shutil.copytree(tmp_path, crashed)
    assert [d for _, d in DurableLog(crashed).open()] == [b"p" * 100]
    log.release([pinned])
    log.close()
    assert DurableLog(tmp_path).open() == []


def test_a_crash_between_copy_and_delete_replays_each_record_once(tmp_path: Path) -> None:
    log = DurableLog(tmp_path, segment_bytes=500)
    log.open()
    _held(log, b"keep-me")
    log.release([_held(log, b"x" * 600)])  # seals segment 1 (mostly done)
    first = sorted(tmp_path.glob("wal-*.log"))[0]
    saved = {p: p.read_bytes() for p in (first, first.with_suffix(".ack"))}
    log.release([_held(log, b"y" * 600)])  # rotation: segment 1 compacted and deleted
    assert not first.exists()
    for path, data in saved.items():  # as if the delete never happened
        path.write_bytes(data)
    assert [d for _, d in DurableLog(tmp_path).open()] == [b"keep-me"]


def test_the_buffer_dir_cap_refuses_instead_of_filling_the_disk(tmp_path: Path) -> None:
    log = DurableLog(tmp_path, segment_bytes=10_000, max_bytes=60_000)
    log.open()
    for _ in range(3):
        _held(log, b"z" * 9000)  # held, never released: the cap must hold them all
    with pytest.raises(BufferDirError, match="max_dir_size_mib"):
        for _ in range(10):
            _held(log, b"z" * 9000)
    assert log.refused_full == 1
    assert log.disk_bytes <= 60_000


# --- the trace buffer ------------------------------------------------------------------------


def _request(trace_id: bytes, span_id: bytes, service: str) -> bytes:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    request = ExportTraceServiceRequest()
    rs = request.resource_spans.add()
    kv = rs.resource.attributes.add()
    kv.key, kv.value.string_value = "service.name", service
    span = rs.scope_spans.add().spans.add()
    span.trace_id, span.span_id, span.name = trace_id, span_id, "invoke_agent a"
    data: bytes = request.SerializeToString()
    return data


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _buffer(released: list[tuple[bytes, str]], clock: _Clock, **limits: float) -> TraceBuffer:
    config = BufferConfig(grace_s=1.0, idle_timeout_s=10.0, **limits)  # type: ignore[arg-type]
    return TraceBuffer(
        config,
        probe=lambda *a: set(),
        clock=clock,
        release=lambda ts: released.extend((t.trace_id, t.reason) for t in ts),
    )


def test_a_trace_fed_a_span_a_second_is_released_at_max_hold(tmp_path: Path) -> None:
    released: list[tuple[bytes, str]] = []
    clock = _Clock()
    buffer = _buffer(released, clock, max_hold_s=30.0)
    tid = b"\x01" * 16
    for second in range(45):
        clock.now = float(second)
        groups = split_request(_request(tid, second.to_bytes(8, "big") or b"\x09" * 8, "a"))
        buffer.route(groups, {tid}, None)
        buffer.tick()
        if released:
            break
    # Without max_hold_s the quiet period never comes: nothing is ever released.
    assert released == [(tid, "max_hold")]
    assert 30 <= clock.now <= 31


def test_a_noisy_sender_pushes_out_its_own_traces_not_the_others(tmp_path: Path) -> None:
    released: list[tuple[bytes, str]] = []
    buffer = _buffer(released, _Clock(), max_traces=10)
    quiet = [bytes([1, i]) * 8 for i in range(3)]
    for tid in quiet:  # the oldest traces are the quiet sender's
        buffer.route(split_request(_request(tid, b"\x02" * 8, "quiet")), {tid}, None)
    noisy = [bytes([2, i]) * 8 for i in range(40)]
    early: list[bytes] = []
    for tid in noisy:
        routed = buffer.route(split_request(_request(tid, b"\x02" * 8, "noisy")), {tid}, None)
        early += [t.trace_id for t in routed.released]
    # Globally-oldest-first would have released the three quiet traces first.
    assert not set(early) & set(quiet)
    assert len(early) == 33 and set(early) <= set(noisy)
    assert (
        service_name(split_request(_request(quiet[0], b"\x02" * 8, "quiet"))[0].resource_fields)
        == "quiet"
    )


# --- metric labels ---------------------------------------------------------------------------


def test_label_values_are_cut_and_old_ones_age_out() -> None:
    clock = _Clock()
    cap = LabelCap(2, max_chars=32, ttl_s=60.0, clock=clock)
    long = cap("gen_ai.tool.name", "t" * 1_000_000)
    assert len(long) == 32  # a 1 MiB tool name was a 176 MiB scrape
    assert cap("k", "search") == "search" and cap("k", "pay") == "pay"
    assert cap("k", "junk-1") == "other"
    clock.now = 30.0
    assert cap("k", "pay") == "pay"  # in use: keeps its place
    clock.now = 70.0
    # "search" unseen for 70 s: it gives its place (first-come-forever kept it for ever)...
    assert cap("k", "new") == "new"
    # ...while "pay", seen 40 s ago, is still there and the cap is still 2.
    assert cap("k", "pay") == "pay" and cap("k", "junk-2") == "other"


# --- headers ---------------------------------------------------------------------------------


def test_header_names_and_values_are_checked_when_the_config_loads(tmp_path: Path) -> None:
    import yaml

    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "forward": {
                    "endpoint": "collector:4317",
                    "headers": {"x-tenant": "a\r\nx-evil: 1", "bad name": "v", "ok": "fine"},
                }
            }
        )
    )
    with pytest.raises(PolicyError) as e:
        load_service_config(cfg, environ={})
    assert "forward.headers.x-tenant" in str(e.value) and "'\\r'" in str(e.value)
    assert "forward.headers.bad name" in str(e.value)
    with pytest.raises(PolicyError, match="OTEL_EXPORTER_OTLP_HEADERS"):
        load_service_config(
            None,
            {"forward_endpoint": "c:4317"},
            environ={"OTEL_EXPORTER_OTLP_HEADERS": "api-key=a%0Ab"},
        )
    good = load_service_config(
        None,
        {"forward_endpoint": "c:4317"},
        environ={"OTEL_EXPORTER_OTLP_HEADERS": "api-key=a%20b"},
    )
    assert good.forward.headers == {"api-key": "a b"}
    with pytest.raises(UsageError, match="--header X-Key"):
        parse_headers(["X-Key=a\nb"])


# --- the store -------------------------------------------------------------------------------


def test_retention_by_size_alone_deletes_the_oldest_until_under_the_cap(tmp_path: Path) -> None:
    # The cap counts the disk (docs/sizing.md): 40 traces of 64 KiB do not fit in 1 MiB.
    with TraceStore(tmp_path / "s.db", max_bytes=2**20) as store:
        for i in range(40):
            store.put_trace(f"{i:032x}", os.urandom(64 * 1024), 1, now_ns=(1000 + i) * NS)
        kept = sorted(int(t, 16) for t in store.trace_ids(100))
        assert store.disk_bytes() <= 2**20
        # no age limit: only size removed them, the oldest first, the newest kept
        assert 4 <= len(kept) < 16 and kept == list(range(40 - len(kept), 40)), kept
        assert store.prune(now_ns=1040 * NS) == 0  # under the cap: nothing more to remove


def test_the_store_is_private_wal_and_shm_included(tmp_path: Path) -> None:
    path = tmp_path / "new-dir" / "store.db"
    store = TraceStore(path)
    store.put_trace("ab" * 16, b"\x0a\x00", 1)
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    for name in ("store.db", "store.db-wal", "store.db-shm"):
        assert stat.S_IMODE((path.parent / name).stat().st_mode) == 0o600, name
    store.close()
    (path.parent / "store.db").chmod(0o644)  # a store made by an older version
    TraceStore(path).close()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


SECRET = "card 4111 1111 1111 1111 " * 20


def _traces_with_secret() -> bytes:
    data = TracesData()
    span = data.resource_spans.add().scope_spans.add().spans.add()
    span.trace_id, span.span_id, span.name = b"\x01" * 16, b"\x02" * 8, "execute_tool pay"
    kv = span.attributes.add()
    kv.key, kv.value.string_value = "gen_ai.tool.call.result", SECRET
    out: bytes = data.SerializeToString()
    return out


@pytest.mark.parametrize("mode", ["truncate", "drop"])
def test_the_content_policy_applies_to_what_the_store_keeps(tmp_path: Path, mode: str) -> None:
    store = TraceStore(tmp_path / "s.db")
    writer = StoreWriter(store, content=ContentPolicy(mode, 32))  # type: ignore[arg-type]
    writer.start()
    result = {
        "check": "tool_use",
        "passed": False,
        "verdict": "fail",
        "score": 0.0,
        "summary": SECRET,
        "metadata": {},
        "findings": [
            {
                "severity": "error",
                "verdict": "fail",
                "subject": "pay",
                "reason": SECRET,
                "evidence": SECRET,
                "step": 0,
                "metadata": {},
            }
        ],
    }
    writer.put(
        "01" * 16, _traces_with_secret(), 1, [StoredGrade("01" * 16, "02" * 8, "a", 1, result)]
    )
    writer.close()
    raw = b"".join(p.read_bytes() for p in tmp_path.glob("s.db*"))
    assert SECRET[:40].encode() not in raw  # nor in the -wal file
    with TraceStore(tmp_path / "s.db", readonly=True) as again:
        stored = again.get_trace("01" * 16)
    assert stored is not None
    finding = stored.grades[0].result["findings"][0]
    if mode == "drop":
        assert stored.data == b"" and finding["reason"] == "" and finding["evidence"] is None
    else:
        span = TracesData.FromString(stored.data).resource_spans[0].scope_spans[0].spans[0]
        assert len(span.attributes[0].value.string_value) == 32
        assert len(finding["reason"]) == 32 and span.name == "execute_tool pay"
    assert stored.grades[0].result["verdict"] == "fail"


def test_keep_stores_what_arrived(tmp_path: Path) -> None:
    store = TraceStore(tmp_path / "s.db")
    writer = StoreWriter(store)
    writer.start()
    writer.put("01" * 16, _traces_with_secret(), 1)
    assert writer.flush()
    stored = store.get_trace("01" * 16)
    assert stored is not None and stored.data == _traces_with_secret()
    writer.close()


def test_with_an_ingest_token_the_fairness_key_is_the_token_not_the_declared_name() -> None:
    """Issue 26, item 6: a sender that writes a new `service.name` on every trace is a new
    "sender" each time, so the quiet sender holding three traces looked like the noisiest
    and was pushed out first. With a token, the sender is what authenticated."""
    rotating = [bytes([2, i]) * 8 for i in range(12)]
    quiet = [bytes([1, i]) * 8 for i in range(3)]

    def early(fair_key: str | None) -> list[bytes]:
        released: list[tuple[bytes, str]] = []
        buffer = _buffer(released, _Clock(), max_traces=10)
        buffer.fair_key = fair_key
        out: list[bytes] = []
        for i, tid in enumerate(rotating[:6]):
            buffer.route(split_request(_request(tid, b"\x02" * 8, f"svc-{i}")), {tid}, None)
        for tid in quiet:
            buffer.route(split_request(_request(tid, b"\x02" * 8, "quiet")), {tid}, None)
        for i, tid in enumerate(rotating[6:]):
            routed = buffer.route(
                split_request(_request(tid, b"\x02" * 8, f"svc-{i + 6}")), {tid}, None
            )
            out += [t.trace_id for t in routed.released]
        return out

    # By declared name the quiet sender "holds the most" and loses its traces first.
    assert len(set(quiet) & set(early(None))) >= 2
    # By token every trace is the same sender's: the oldest go first, whatever they claim.
    assert early("ingest-token") == rotating[:5]
