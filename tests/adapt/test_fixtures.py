"""Every real-framework fixture trace, rebuilt and graded offline, against its label.

The label says what the framework did (runs, agents, calls, errors) and what grading with the
rules must conclude. A trace that carries its policy (span attributes) is graded with it; a
trace that does not gets the label's policy, per agent when the label gives one per run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from attest_otel.adapt import runs_from_file
from attest_otel.config import AgentPolicy, Policy
from attest_otel.grade import grader, rules
from attest_otel.model import Run

FIXTURES = Path(__file__).parent.parent / "fixtures" / "traces"
LABELS = sorted(FIXTURES.glob("*.labels.json"))


def _case_id(path: Path) -> str:
    framework, _, scenario = path.name.removesuffix(".labels.json").partition("__")
    return f"{framework} {scenario.replace('_', ' ')} rebuilds and grades as labelled"


def _carries_policy(label: dict[str, Any]) -> bool:
    return label.get("policy_source") == "agent_span_attributes" or "policy_attributes" in label


def _rebuild(label_path: Path, label: dict[str, Any]) -> list[Run]:
    trace = label_path.with_name(label_path.name.replace(".labels.json", ".json"))
    kwargs: dict[str, Any] = {}
    if not _carries_policy(label):
        per_run = [r for r in label["runs"] if "policy" in r]
        if per_run and len(per_run) == len(label["runs"]):
            kwargs["policy"] = Policy(
                {
                    r["agent"]: AgentPolicy(
                        r["policy"].get("allowed_tools"),
                        r["policy"].get("tool_fallbacks") or {},
                        r["agent"],
                    )
                    for r in per_run
                }
            )
        else:
            kwargs["allowed_tools"] = label["policy"].get("allowed_tools")
            kwargs["fallbacks"] = label["policy"].get("tool_fallbacks") or None
    return [run for t in runs_from_file(trace, **kwargs) for run in t.runs]


def test_the_labelled_fixtures_are_there() -> None:
    assert len(LABELS) >= 90, "tests/fixtures/traces lost its labelled traces (make fixtures)"


@pytest.mark.parametrize("label_path", LABELS, ids=[_case_id(p) for p in LABELS])
def test_fixture(label_path: Path) -> None:
    label = json.loads(label_path.read_text(encoding="utf-8"))
    runs = _rebuild(label_path, label)
    expected_runs = label["runs"]
    assert [r.agent for r in runs] == [r["agent"] for r in expected_runs]
    for run, want in zip(runs, expected_runs, strict=True):
        who = f"run of {want['agent']}"
        assert [c.name for _, c in run.tool_calls] == [c["name"] for c in want["calls"]], who
        assert run.task == want["task"], who
        assert run.final_answer == want["final_answer"], who
        if "system_prompt" in want:
            assert run.system_prompt == want["system_prompt"], who
        result = grader.tool_use(run)
        assert result.verdict == want["verdict_offline"], f"{who}: {result.summary}"
        for (step, call), finding, expected in zip(
            run.tool_calls, result.findings, want["calls"], strict=True
        ):
            where = f"{who}, step {step} ({call.name})"
            assert rules.is_error(call) == expected["is_error"], where
            assert finding.metadata["recovery"] == expected["recovery"], where
            assert finding.metadata["recovered_at"] == expected["recovered_at"], where
            assert finding.verdict == expected["verdict_offline"], where
