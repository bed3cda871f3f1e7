"""A hostile trace, a careless operator: driven from outside against a real `serve`
(docs/hostile-input.md, "Grading budget" and "The buffer dir and the store")."""

from __future__ import annotations

import os
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from attest_otel.store.sqlite import TraceStore
from tests.sidecar.downstream import Downstream
from tests.sidecar.helpers import Sidecar, attr, free_port
from tests.sidecar.hostile_traces import agent_trace
from tests.sidecar.test_faults import _write_segments, plain_pb, span_ids
from tests.sidecar.test_orphans import _alive, _children, _reap

pytestmark = pytest.mark.timeout(120)

GRACE_S = 0.3  # FAST_CONFIG's buffer.grace_s


def post(sidecar: Sidecar, data: bytes) -> None:
    request = urllib.request.Request(
        f"{sidecar.http_url}/v1/traces",
        data=data,
        headers={"Content-Type": "application/x-protobuf"},
    )
    with urllib.request.urlopen(request, timeout=30) as r:
        assert r.status == 200


def agent_span(downstream: Downstream, span_id: str) -> object | None:
    for span in downstream.spans():
        if span.span_id.hex() == span_id:
            return span
    return None


def verdict(downstream: Downstream, span_id: str) -> str | None:
    span = agent_span(downstream, span_id)
    return None if span is None else attr(span.attributes, "attest.tool_use.verdict")


def within(usual: float) -> float:
    """The bound on an ordinary run's time to come out graded: the grace plus a second, or
    what this machine took just before plus a second when it is loaded more than that."""
    return max(GRACE_S, usual) + 1.0


def graded_in_time(sidecar: Sidecar, downstream: Downstream, runs: int = 5) -> list[float]:
    """Ordinary runs sent one by one: how long each took to come out graded."""
    took = []
    for _ in range(runs):
        data, _, agent = agent_trace()
        sent = time.monotonic()
        post(sidecar, data)
        assert downstream.wait_for(lambda d, a=agent: verdict(d, a) is not None, 20), sidecar.log()
        took.append(time.monotonic() - sent)
    return took


# --- hostile content ------------------------------------------------------------------------


def test_a_300_kb_react_answer_does_not_stop_ordinary_traffic(
    sidecar: Sidecar, downstream: Downstream
) -> None:
    sidecar.config = {"grading": {"processes": 1}}
    sidecar.start()
    usual = max(graded_in_time(sidecar, downstream, 3))  # this machine, now
    hostile, _, hostile_agent = agent_trace(answer="Thought:" + "\n" * 300_000 + "x")
    post(sidecar, hostile)
    took = graded_in_time(sidecar, downstream)
    assert max(took) < within(usual), took
    assert downstream.wait_for(lambda d: verdict(d, hostile_agent) is not None, 10)
    assert sidecar.terminate() == 0


def test_a_hostile_dialect_regex_does_not_stop_ordinary_traffic(
    sidecar: Sidecar, downstream: Downstream, tmp_path: Path
) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        yaml.safe_dump(
            {
                "dialects": {
                    "acme": {
                        "agent": {"when": {"name_regex": "(x+x+)+y"}, "name": "acme.agent.name"}
                    }
                }
            }
        )
    )
    sidecar.config = {"grading": {"processes": 1, "policy": str(policy)}}
    sidecar.start()
    usual = max(graded_in_time(sidecar, downstream, 3))  # this machine, now
    hostile, _, _ = agent_trace(name="x" * 1_000_000)  # exponential for Python's re
    post(sidecar, hostile)
    took = graded_in_time(sidecar, downstream)
    assert max(took) < within(usual), took
    assert sidecar.terminate() == 0


# --- the grading budget ---------------------------------------------------------------------


def test_a_trace_past_the_budget_goes_on_ungraded_and_flagged(
    sidecar: Sidecar, downstream: Downstream
) -> None:
    # 16,000 calls take about 2 s to grade: four times this budget. Two processes: with one,
    # the first trace after the kill waits for its replacement to start (about 1.3 s).
    sidecar.config = {"grading": {"processes": 2, "budget_s": 0.5}}
    sidecar.start()
    usual = max(graded_in_time(sidecar, downstream, 3))  # this machine, now
    slow, trace_id, slow_agent = agent_trace(tools=16_000)
    post(sidecar, slow)
    assert downstream.wait_for(lambda d: verdict(d, slow_agent) is not None, 20), sidecar.log()
    span = agent_span(downstream, slow_agent)
    assert verdict(downstream, slow_agent) == "review"
    assert "budget (0.5s)" in attr(span.attributes, "attest.tool_use.ungraded")
    # Sent after the kill: while the trace's 16,001 spans are in grading, admission answers
    # "retry later" to more (flow control, `requests.GradingCapacity`).
    took = graded_in_time(sidecar, downstream)
    assert max(took) < within(usual), took
    assert sidecar.terminate() == 0
    log = sidecar.log()
    assert log.count(f"trace {trace_id} forwarded ungraded") == 1, log
    store = TraceStore(sidecar.tmp / "store.db", readonly=True)  # the stored grade says why
    try:
        stored = store.get_trace(trace_id)
    finally:
        store.close()
    assert stored is not None and [g.span_id for g in stored.grades] == [slow_agent]
    result = stored.grades[0].result
    assert result["verdict"] == "review" and not result["passed"]
    assert "budget (0.5s)" in result["summary"] and result["metadata"]["ungraded"] == "time"


def _readyz(sidecar: Sidecar) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"{sidecar.http_url}/readyz", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_readyz_reports_grading_that_makes_no_progress(
    sidecar: Sidecar, downstream: Downstream
) -> None:
    # In this process (`processes: 0`) a trace cannot be killed: /readyz must say so.
    sidecar.config = {"grading": {"processes": 0, "budget_s": 0.5}}
    sidecar.start()
    slow, _, agent = agent_trace(tools=40_000)
    post(sidecar, slow)
    seen: list[tuple[int, str]] = []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        seen.append(_readyz(sidecar))
        if seen[-1][0] == 503:
            break
        time.sleep(0.1)
    assert seen[-1][0] == 503 and "grading has made no progress" in seen[-1][1], seen[-3:]
    # Forwarded at its budget, flagged (tests/sidecar/test_grading_here.py); its abandoned
    # grading runs on here, and /readyz says so until it ends.
    assert downstream.wait_for(lambda d: verdict(d, agent) is not None, 60)
    assert verdict(downstream, agent) == "review"
    deadline = time.monotonic() + 60
    while _readyz(sidecar)[0] != 200 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _readyz(sidecar)[0] == 200
    assert sidecar.terminate() == 0


STALL_DEADLINE_S = 1.5


def _stall(sidecar: Sidecar, buffer: Path) -> tuple[str, str]:
    """A sidecar grading a trace that takes several seconds (60,000 calls: 15 MB, under the
    HTTP body limit; about 5 s on a quiet 2-core machine of 2026-12, and grading gets faster,
    so the shutdown deadline is short: the stall must outlast the second before the trace is
    noted as slow plus the deadline), with a budget of a minute."""
    sidecar.config = {
        "grading": {"processes": 1, "budget_s": 60},
        "shutdown": {"deadline_s": STALL_DEADLINE_S},
    }
    sidecar.extra_args = ["--buffer-dir", str(buffer)]
    sidecar.start()
    slow, trace_id, agent = agent_trace(tools=60_000)
    post(sidecar, slow)
    marks = buffer / "quarantine"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # a second into its grading: noted as slow
        if marks.exists() and f"slow {trace_id}" in marks.read_text():
            break
        time.sleep(0.05)
    else:
        raise AssertionError(f"grading did not start:\n{sidecar.log()}")
    return trace_id, agent


def test_sigterm_wins_within_the_deadline_under_a_stall(
    sidecar: Sidecar, downstream: Downstream, tmp_path: Path
) -> None:
    trace_id, agent = _stall(sidecar, tmp_path / "buffer")
    started = time.monotonic()
    assert sidecar.terminate(timeout=10) == 0
    # The deadline, and the interpreter's own exit (slower on a loaded machine).
    assert time.monotonic() - started < STALL_DEADLINE_S + 3
    assert f"trace {trace_id} forwarded ungraded" in sidecar.log()
    if agent_span(downstream, agent) is None:
        # Not delivered before the deadline (a loaded machine): kept in the buffer dir, and
        # the next start forwards it flagged instead of grading it again.
        sidecar.start()
        assert downstream.wait_for(lambda d: verdict(d, agent) is not None, 20), sidecar.log()
        assert sidecar.terminate() == 0
    span = agent_span(downstream, agent)
    assert span is not None and verdict(downstream, agent) == "review"
    assert attr(span.attributes, "attest.tool_use.ungraded")


def test_kill_9_of_a_stalled_sidecar_leaves_no_process_and_the_restart_quarantines(
    sidecar: Sidecar, downstream: Downstream, tmp_path: Path
) -> None:
    _trace_id, agent = _stall(sidecar, tmp_path / "buffer")
    assert sidecar.proc is not None
    kids = _children(sidecar.proc.pid)
    assert kids
    try:
        sidecar.kill()
        deadline = time.monotonic() + 5
        while _alive(kids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _alive(kids) == set(), "a grading process outlived a kill -9 of the sidecar"
    finally:
        _reap(kids)
    assert agent not in downstream.span_ids()
    started = time.monotonic()
    sidecar.start()  # the same buffer dir: the trace is replayed, not graded again
    assert downstream.wait_for(lambda d: verdict(d, agent) is not None, 20), sidecar.log()
    assert time.monotonic() - started < 15
    span = agent_span(downstream, agent)
    assert verdict(downstream, agent) == "review"
    assert "ended while grading" in attr(span.attributes, "attest.tool_use.ungraded")
    graded_in_time(sidecar, downstream)  # and ordinary runs are graded again
    assert sidecar.terminate() == 0


# --- the buffer dir and the store -----------------------------------------------------------


def _second(tmp_path: Path, downstream: Downstream, buffer: Path) -> subprocess.CompletedProcess:
    other = Sidecar(tmp_path, downstream.endpoint)
    other.grpc_port, other.http_port = free_port(), free_port()
    other.extra_args = ["--buffer-dir", str(buffer)]
    other.start(wait=False)
    assert other.proc is not None
    code = other.proc.wait(30)
    return subprocess.CompletedProcess([], code, other.log())


def test_a_second_sidecar_on_one_buffer_dir_exits_2_naming_the_holder(
    sidecar: Sidecar, downstream: Downstream, tmp_path: Path
) -> None:
    buffer = tmp_path / "buffer"
    sidecar.extra_args = ["--buffer-dir", str(buffer)]
    sidecar.start()
    assert sidecar.proc is not None
    (tmp_path / "b").mkdir()
    done = _second(tmp_path / "b", downstream, buffer)
    assert done.returncode == 2
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    assert f"is in use by another sidecar (pid {sidecar.proc.pid})" in lines[-1], done.stdout
    assert "Traceback" not in done.stdout
    data = plain_pb(7)
    post(sidecar, data)  # the first goes on
    assert downstream.wait_spans(span_ids(data))
    assert sidecar.terminate() == 0


def test_a_buffer_dir_others_can_write_to_is_refused_a_new_one_is_0700(
    sidecar: Sidecar, downstream: Downstream, tmp_path: Path
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    (tmp_path / "b").mkdir()
    done = _second(tmp_path / "b", downstream, shared)
    assert done.returncode == 2 and "writable by others (mode 0777)" in done.stdout
    assert "Traceback" not in done.stdout
    fresh = tmp_path / "fresh"
    sidecar.extra_args = ["--buffer-dir", str(fresh)]
    sidecar.start()
    assert fresh.stat().st_mode & 0o777 == 0o700
    assert sidecar.terminate() == 0


@pytest.mark.skipif(os.geteuid() != 0, reason="planting another user's file needs root")
def test_planted_segments_and_symlinks_are_refused(
    sidecar: Sidecar, downstream: Downstream, tmp_path: Path
) -> None:
    buffer = tmp_path / "buffer"
    mine, planted = plain_pb(1), plain_pb(2)
    _write_segments(buffer, [[mine], [planted]])
    segments = sorted(buffer.glob("wal-*.log"))
    os.chown(segments[1], 65534, 65534)  # another user's (nobody's) segment
    target = tmp_path / "root-only"
    target.write_bytes(b"secret")
    target.chmod(0o600)
    (buffer / "wal-000000000777.log").symlink_to(target)
    sidecar.extra_args = ["--buffer-dir", str(buffer)]
    sidecar.start()
    assert downstream.wait_spans(span_ids(mine))
    time.sleep(1.0)
    assert not span_ids(planted) & set(downstream.span_ids())
    assert sidecar.terminate() == 0
    assert target.read_bytes() == b"secret" and target.stat().st_mode & 0o777 == 0o600
    log = sidecar.log()
    assert f"{segments[1].name} cannot be read" in log and "wal-000000000777.log" in log


def test_a_symlink_planted_where_the_next_ack_file_goes_is_refused(
    sidecar: Sidecar, downstream: Downstream, tmp_path: Path
) -> None:
    buffer = tmp_path / "buffer"
    _write_segments(buffer, [[plain_pb(1)]])
    last = sorted(buffer.glob("wal-*.log"))[-1]
    target = tmp_path / "root-only"
    target.write_bytes(b"secret")
    target.chmod(0o600)
    following = int(last.stem.split("-")[1]) + 1
    (buffer / f"wal-{following:012d}.ack").symlink_to(target)  # where the sidecar appends
    sidecar.grpc_port, sidecar.http_port = free_port(), free_port()
    sidecar.extra_args = ["--buffer-dir", str(buffer)]
    sidecar.start(wait=False)
    assert sidecar.proc is not None
    assert sidecar.proc.wait(30) == 2
    log = sidecar.log()
    assert f"wal-{following:012d}.ack is a symlink; refused" in log and "Traceback" not in log
    assert target.read_bytes() == b"secret"


def test_a_symlinked_store_path_is_refused_not_chmodded_through(
    sidecar: Sidecar, downstream: Downstream, tmp_path: Path
) -> None:
    target = tmp_path / "elsewhere.db"
    target.write_bytes(b"")
    target.chmod(0o644)
    (tmp_path / "store.db").symlink_to(target)  # the helper's --store path
    sidecar.grpc_port, sidecar.http_port = free_port(), free_port()
    sidecar.start(wait=False)
    assert sidecar.proc is not None
    assert sidecar.proc.wait(30) == 2
    assert "symlink" in sidecar.log() and "Traceback" not in sidecar.log()
    assert target.stat().st_mode & 0o777 == 0o644
