"""One lifecycle for the sidecar's components: start in order, shut down in reverse within one
deadline, a failed start undone (docs/architecture.md, "The sidecar's components")."""

from __future__ import annotations

import dataclasses
import socket
import threading
from pathlib import Path

import pytest

from attest_otel.sidecar.buffer_dir import claim, release
from attest_otel.sidecar.lifecycle import Hook, Lifecycle, Part
from attest_otel.sidecar.service import build_service
from tests.sidecar.downstream import Downstream
from tests.sidecar.test_service import _config


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Recorder:
    """A component that notes its starts and shutdowns (with the time it was given), and
    can be told to fail or to take time."""

    def __init__(
        self,
        name: str,
        seen: list[str],
        clock: Clock,
        *,
        fail_start: bool = False,
        takes_s: float = 0.0,
        delivered: bool = True,
    ) -> None:
        self.name, self.seen, self.clock = name, seen, clock
        self.fail_start, self.takes_s, self.delivered = fail_start, takes_s, delivered
        self.given: float | None = None

    def start(self) -> None:
        if self.fail_start:
            raise OSError(f"{self.name} cannot start")
        self.seen.append(f"start {self.name}")

    def shutdown(self, timeout_s: float) -> bool:
        self.given = timeout_s
        self.clock.now += self.takes_s
        self.seen.append(f"shutdown {self.name}")
        return self.delivered


def test_parts_start_in_order_and_shut_down_in_reverse_once() -> None:
    seen: list[str] = []
    clock = Clock()
    parts = [Recorder(n, seen, clock) for n in ("dir", "forwarder", "receiver")]
    life = Lifecycle([Part(p.name, p) for p in parts], clock=clock)
    life.start()
    assert life.started == ("dir", "forwarder", "receiver")
    assert life.shutdown(10.0)
    assert life.shutdown(10.0)  # a second time: nothing left to shut down
    assert seen == [
        "start dir",
        "start forwarder",
        "start receiver",
        "shutdown receiver",
        "shutdown forwarder",
        "shutdown dir",
    ]


def test_a_failed_start_shuts_down_what_started_before_it_and_raises_its_error() -> None:
    seen: list[str] = []
    clock = Clock()
    parts = [
        Recorder("dir", seen, clock),
        Recorder("store", seen, clock),
        Recorder("receiver", seen, clock, fail_start=True),
        Recorder("intake", seen, clock),
    ]
    life = Lifecycle([Part(p.name, p) for p in parts], clock=clock)
    with pytest.raises(OSError, match="receiver cannot start"):
        life.start()
    assert seen == ["start dir", "start store", "shutdown store", "shutdown dir"]
    assert life.started == ()


def test_each_part_gets_what_is_left_of_one_deadline_and_at_least_its_minimum() -> None:
    seen: list[str] = []
    clock = Clock()
    telemetry = Recorder("telemetry", seen, clock)
    forwarder = Recorder("forwarder", seen, clock, takes_s=7.0, delivered=False)
    grading = Recorder("grading", seen, clock, takes_s=2.0)
    life = Lifecycle(
        [Part("telemetry", telemetry, 1.0), Part("forwarder", forwarder), Part("grading", grading)],
        clock=clock,
    )
    life.start()
    assert not life.shutdown(8.0)  # the forwarder did not deliver everything
    assert grading.given == 8.0
    assert forwarder.given == 6.0
    assert telemetry.given == 1.0  # the deadline has passed: its minimum


def test_a_part_whose_shutdown_raises_does_not_keep_the_others_up(
    caplog: pytest.LogCaptureFixture,
) -> None:
    seen: list[str] = []

    def broken(_timeout_s: float) -> bool:
        raise RuntimeError("close failed")

    first = Recorder("first", seen, Clock())
    life = Lifecycle([Part("first", first), Part("broken", Hook(shutdown=broken))])
    life.start()
    assert not life.shutdown(1.0)
    assert seen == ["start first", "shutdown first"]
    assert "broken: shutdown failed" in caplog.text


def test_a_service_whose_receiver_cannot_listen_leaves_no_lock_thread_or_port(
    tmp_path: Path, downstream: Downstream
) -> None:
    """The gRPC port is taken: the start fails with that one error, and everything started
    before it (the buffer dir's lock, the store, forwarders, grading) is undone."""
    before = set(threading.enumerate())  # an earlier test's threads in this worker are not ours
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        config = _config(
            tmp_path,
            downstream,
            buffer={"grace_s": 0.1, "idle_timeout_s": 0.5, "dir": str(tmp_path / "buf")},
        )
        config = dataclasses.replace(
            config,
            receivers=dataclasses.replace(config.receivers, grpc_endpoint=f"127.0.0.1:{port}"),
        )
        service = build_service(config)
        with pytest.raises(Exception, match="cannot listen"):
            service.start()
    assert service.lifecycle.started == ()
    assert not [
        t.name
        for t in set(threading.enumerate()) - before
        if t.name.startswith("attest-otel") and t.is_alive()
    ]
    release(claim(tmp_path / "buf"))  # the lock was given back: another sidecar may take it
    assert service.shutdown(1.0)  # after a failed start: nothing to do
