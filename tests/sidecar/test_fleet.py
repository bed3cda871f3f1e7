"""A fleet: three `attest-otel serve` processes sharing one PostgreSQL store, behind a router
that sends each trace's spans by trace-id hash (what the Collector's loadbalancing exporter
does). One sidecar is killed with `kill -9` midway and restarted on its --buffer-dir; the
database is stopped and started under load; a trace split between two sidecars is stored
once and graded from the union. Afterwards every run is graded exactly once in the shared
store, and `report` over it says what grading the fixtures from their files says.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
import zlib
from pathlib import Path
from typing import Any

import grpc
import psycopg
import pytest
from click.testing import CliRunner
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from attest_otel.cli import main
from attest_otel.pipeline import Reading, read_file
from attest_otel.policy import load_policy
from tests.pg import PASSWORD, USER, Postgres
from tests.sidecar.downstream import Downstream
from tests.sidecar.helpers import Sidecar
from tests.sidecar.test_agreement import _fixtures, _policy
from tests.sidecar.test_wire import _fixture_requests

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


def _span_ids(body: bytes) -> set[str]:
    req = ExportTraceServiceRequest.FromString(body)
    return {
        sp.span_id.hex() for rs in req.resource_spans for ss in rs.scope_spans for sp in ss.spans
    }


def _by_trace(body: bytes) -> dict[str, bytes]:
    """One request split into one request per trace, as the loadbalancing exporter does."""
    request = ExportTraceServiceRequest.FromString(body)
    out: dict[str, ExportTraceServiceRequest] = {}
    for rs in request.resource_spans:
        for ss in rs.scope_spans:
            for span in ss.spans:
                part = out.setdefault(span.trace_id.hex(), ExportTraceServiceRequest())
                if not part.resource_spans or part.resource_spans[-1].resource != rs.resource:
                    new = part.resource_spans.add()
                    new.resource.CopyFrom(rs.resource)
                    new.scope_spans.add().scope.CopyFrom(ss.scope)
                target = part.resource_spans[-1].scope_spans[-1]
                if target.scope != ss.scope:
                    target = part.resource_spans[-1].scope_spans.add()
                    target.scope.CopyFrom(ss.scope)
                target.spans.add().CopyFrom(span)
    return {tid: r.SerializeToString() for tid, r in out.items()}


class Router:
    """Sends each trace's part to `sidecars[crc32(trace id) % n]`, retrying (as the
    exporter's retry_on_failure does) while that sidecar is down or says "later"."""

    def __init__(self, sidecars: list[Sidecar]) -> None:
        self.sidecars = sidecars
        self.retries = 0

    def pick(self, trace_id: str) -> int:
        return zlib.crc32(bytes.fromhex(trace_id)) % len(self.sidecars)

    def send(self, trace_id: str, body: bytes, to: int | None = None) -> None:
        target = self.sidecars[self.pick(trace_id) if to is None else to]
        deadline = time.monotonic() + 60
        while True:
            try:
                with grpc.insecure_channel(target.grpc_endpoint) as channel:
                    export = channel.unary_unary(
                        EXPORT, request_serializer=None, response_deserializer=None
                    )
                    export(body, timeout=5)
                return
            except grpc.RpcError:
                if time.monotonic() > deadline:
                    raise
                self.retries += 1
                time.sleep(0.1)


Runs = dict[tuple[str, str], tuple[str | None, str, bool]]
"""(trace id, agent span id) -> (agent, verdict, passed)."""


def _expected(fixtures: list[Path], policy: Path) -> Runs:
    """Every run of the fixtures, graded from their files."""
    from attest_otel.grade.grader import grade

    reading = Reading(load_policy(policy))
    out = {}
    for path in fixtures:
        for trace in read_file(path, reading):
            for run in trace.runs:
                result = grade(run, judge=None)
                out[(run.trace_id or "", run.span_id or "")] = (
                    run.agent,
                    result.verdict,
                    result.passed,
                )
    return out


def _stored(url: str) -> Runs:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT trace_id, span_id, agent, verdict, passed FROM grades"
        ).fetchall()
    return {(t, s): (a, v, p) for t, s, a, v, p in rows}


def _wait_for(url: str, want: int, timeout: float, logs: Any) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if len(_stored(url)) >= want:
                return
        except psycopg.errors.UndefinedTable:
            pass  # a sidecar that started while the database was away: no schema yet
        time.sleep(0.2)
    raise AssertionError(f"{len(_stored(url))} of {want} runs stored:\n{logs()}")


def _fleet(tmp: Path, url: str, downstream: Downstream, policy: Path, n: int) -> list[Sidecar]:
    """`n` sidecars, each with its own --buffer-dir, the store URL in the YAML with the
    password from ${env:...}."""
    port = url.rsplit(":", 1)[1].split("/", 1)[0]
    db = url.rsplit("/", 1)[1]
    sidecars = []
    for i in range(n):
        home = tmp / f"sidecar{i}"
        home.mkdir()
        sidecars.append(
            Sidecar(
                home,
                downstream.endpoint,
                config={
                    "store": {
                        "url": f"postgresql://{USER}:${{env:FLEET_PG_PASSWORD}}"
                        f"@127.0.0.1:{port}/{db}"
                    },
                    "buffer": {"grace_s": 0.2},
                },
                extra_args=["--policy", str(policy), "--buffer-dir", str(home / "buffer")],
                env={"FLEET_PG_PASSWORD": PASSWORD},
            )
        )
    threads = [threading.Thread(target=s.start) for s in sidecars]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sidecars


def _report(url: str) -> dict[str, Any]:
    result = CliRunner().invoke(
        main, ["report", "--json", "--since", "1h", "--limit", "50", "--from", f"store:{url}"]
    )
    assert result.exit_code == 0, result.output
    report: dict[str, Any] = json.loads(result.stdout)
    return report


@pytest.mark.timeout(120)
def test_three_sidecars_one_killed_midway_every_run_graded_once(
    tmp_path: Path, downstream: Downstream, postgres: Postgres
) -> None:
    url = postgres.database()
    policy = _policy(tmp_path)
    fixtures = _fixtures(tmp_path)[::5]
    expected = _expected(fixtures, policy)
    assert len(expected) >= 60
    sidecars = _fleet(tmp_path, url, downstream, policy, 3)
    router = Router(sidecars)
    try:
        parts = [
            (tid, body)
            for path in fixtures
            for request in _fixture_requests(path)
            for tid, body in _by_trace(request).items()
        ]
        half = len(parts) // 2
        for tid, body in parts[:half]:
            router.send(tid, body)
        victim = sidecars[router.pick(parts[half - 1][0])]  # it holds spans now
        victim.kill()
        restart = threading.Thread(target=victim.start)  # back on the same ports and dir
        restart.start()
        for tid, body in parts[half:]:
            router.send(tid, body)
        restart.join()
        assert router.retries > 0  # the victim's traces waited for it
        _wait_for(url, len(expected), 60, lambda: "\n".join(s.log() for s in sidecars))
        time.sleep(1.0)  # nothing more arrives: no run graded twice, under two keys
        assert _stored(url) == expected
        report = _report(url)
        agents = {a["name"]: (a["passed"], a["total"]) for a in report["agents"]}
        want: dict[str, list[int]] = {}
        for agent, _, passed in expected.values():
            c = want.setdefault(agent or "(no agent)", [0, 0])
            c[0] += passed
            c[1] += 1
        assert agents == {k: tuple(v) for k, v in want.items()}
        assert report["runs"]["total"] == len(expected)
    finally:
        for s in sidecars:
            s.stop_quietly()


@pytest.mark.timeout(120)
def test_a_trace_split_between_two_sidecars_is_graded_from_the_union(
    tmp_path: Path, downstream: Downstream, postgres: Postgres
) -> None:
    url = postgres.database()
    policy = _policy(tmp_path)
    path = next(p for p in _fixtures(tmp_path) if p.name == "adk__multi_agent.json")
    expected = _expected([path], policy)
    sidecars = _fleet(tmp_path, url, downstream, policy, 2)
    try:
        request = ExportTraceServiceRequest()
        for body in _fixture_requests(path):
            request.MergeFromString(body)
        spans = [
            (rs, ss, sp)
            for rs in request.resource_spans
            for ss in rs.scope_spans
            for sp in ss.spans
        ]
        halves = [ExportTraceServiceRequest(), ExportTraceServiceRequest()]
        for i, (rs, ss, sp) in enumerate(spans):  # the routing changed mid-trace
            out = halves[i % 2].resource_spans.add()
            out.resource.CopyFrom(rs.resource)
            scope = out.scope_spans.add()
            scope.scope.CopyFrom(ss.scope)
            scope.spans.add().CopyFrom(sp)
        router = Router(sidecars)
        tid = spans[0][2].trace_id.hex()
        threads = [
            threading.Thread(target=router.send, args=(tid, h.SerializeToString(), i))
            for i, h in enumerate(halves)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

        def parts() -> Any:
            with psycopg.connect(url) as conn:
                return conn.execute("SELECT count(*), sum(span_count) FROM trace_parts").fetchone()

        # The half without an agent span is held until the idle timeout, then graded and
        # stored; its write finds the other half stored and the trace is graded again whole.
        deadline = time.monotonic() + 30
        while (
            parts() != (2, len(spans)) or _stored(url) != expected
        ) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert parts() == (2, len(spans))
        assert _stored(url) == expected, "\n".join(s.log() for s in sidecars)
        for s in sidecars:
            assert s.terminate() == 0
        assert sum("traces_regraded=1" in s.log() for s in sidecars) == 1  # the later writer
    finally:
        for s in sidecars:
            s.stop_quietly()


def _ready(sidecar: Sidecar) -> int:
    try:
        with urllib.request.urlopen(f"{sidecar.http_url}/readyz", timeout=2) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


@pytest.mark.timeout(120)
def test_the_database_stopped_and_restarted_under_load_loses_nothing(
    tmp_path: Path, downstream: Downstream, postgres: Postgres
) -> None:
    url = postgres.database()
    policy = _policy(tmp_path)
    fixtures = _fixtures(tmp_path)[1::6]
    expected = _expected(fixtures, policy)
    (sidecar,) = _fleet(tmp_path, url, downstream, policy, 1)
    router = Router([sidecar])
    try:
        parts = [
            (tid, body)
            for path in fixtures
            for request in _fixture_requests(path)
            for tid, body in _by_trace(request).items()
        ]
        third = len(parts) // 3
        for tid, body in parts[:third]:
            router.send(tid, body)
        postgres.stop()
        try:
            for tid, body in parts[third : 2 * third]:
                router.send(tid, body)
            time.sleep(3.0)  # graded while the database is away: they wait in the queue
            assert _ready(sidecar) == 200  # the queue has room: still ready
        finally:
            postgres.start()
        for tid, body in parts[2 * third :]:
            router.send(tid, body)
        _wait_for(url, len(expected), 60, sidecar.log)
        assert _stored(url) == expected
        assert "cannot reach" in sidecar.log() and "reachable again" in sidecar.log()
    finally:
        sidecar.stop_quietly()


@pytest.mark.timeout(120)
def test_a_sidecar_started_while_the_database_is_away_forwards_and_stores_later(
    tmp_path: Path, downstream: Downstream, postgres: Postgres
) -> None:
    """A rollout or a failover must not crash-loop the sidecars, nor cost telemetry: the
    sidecar starts, forwards, queues its grades, and writes them (schema first) once the
    database is back."""
    url = postgres.database()
    policy = _policy(tmp_path)
    fixtures = _fixtures(tmp_path)[2::9]
    expected = _expected(fixtures, policy)
    postgres.stop()
    try:
        (sidecar,) = _fleet(tmp_path, url, downstream, policy, 1)
        router = Router([sidecar])
        sent: set[str] = set()
        for path in fixtures:
            for request in _fixture_requests(path):
                for tid, body in _by_trace(request).items():
                    router.send(tid, body)
                    sent.update(_span_ids(body))
        assert downstream.wait_spans(sent, timeout=30), sidecar.log()
        assert _ready(sidecar) == 200
        assert "starting anyway" in sidecar.log()
    finally:
        postgres.start()
    try:
        _wait_for(url, len(expected), 60, sidecar.log)
        assert _stored(url) == expected
    finally:
        sidecar.stop_quietly()
