"""A policy entry whose agent never shows is said once, after the first runs graded, in the
log and in /readyz's answer (the CLI says it after grading a file)."""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

from attest_otel.policy import parse_policy
from attest_otel.sidecar.policy_watch import PolicyWatch
from tests.sidecar.downstream import Downstream
from tests.sidecar.helpers import Sidecar, agent_run, provider

pytestmark = pytest.mark.timeout(90)

POLICY = "agents:\n  billing_agnet:\n    allowed_tools: [lookup_invoice]\n"


def test_the_watch_says_an_unused_entry_once_after_enough_runs() -> None:
    now = [0.0]
    watch = PolicyWatch(parse_policy(POLICY, "p.yaml"), after_runs=3, clock=lambda: now[0])
    watch.saw("billing_agent")
    watch.saw("billing_agent")
    assert watch.detail == ""  # not yet: two runs, no time passed
    watch.saw("billing_agent")
    assert "'billing_agnet' matches no run (did you mean 'billing_agent'?)" in watch.detail
    said = watch.detail
    watch.saw("billing_agnet")  # said once: a later run does not change it
    assert watch.detail == said


def test_a_quiet_sidecar_says_it_after_a_minute_of_few_runs() -> None:
    now = [0.0]
    watch = PolicyWatch(parse_policy(POLICY, "p.yaml"), after_runs=10, clock=lambda: now[0])
    watch.saw("billing_agent")
    now[0] = 61.0
    watch.saw("billing_agent")
    assert "billing_agnet" in watch.detail


def test_an_entry_every_run_uses_is_not_said() -> None:
    good = parse_policy("agents:\n  billing_agent:\n    allowed_tools: [a]\n", "p.yaml")
    watch = PolicyWatch(good, after_runs=1)
    watch.saw("billing_agent")
    assert watch.detail == ""


def test_serve_says_the_unused_entry_in_its_log_and_readyz(
    tmp_path: Path, sidecar: Sidecar, downstream: Downstream
) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    sidecar.extra_args = ["--policy", str(policy)]
    sidecar.start()
    tp = provider(OTLPSpanExporter(endpoint=sidecar.grpc_endpoint, insecure=True))
    tracer = tp.get_tracer("tests.sidecar")
    ids = []
    for _ in range(10):
        _, made = agent_run(tracer)
        ids += made
    tp.force_flush()
    assert downstream.wait_spans(set(ids), timeout=60), sidecar.log()
    deadline = time.monotonic() + 10
    while "matches no run" not in sidecar.log() and time.monotonic() < deadline:
        time.sleep(0.1)
    said = [line for line in sidecar.log().splitlines() if "matches no run" in line]
    assert len(said) == 1, sidecar.log()
    assert "did you mean 'billing_agent'?" in said[0] and "warn" in said[0].lower()
    with urllib.request.urlopen(f"{sidecar.http_url}/readyz", timeout=5) as answer:
        body = answer.read().decode()
    assert answer.status == 200
    assert body.startswith("ready; ") and "'billing_agnet' matches no run" in body
    tp.shutdown()
