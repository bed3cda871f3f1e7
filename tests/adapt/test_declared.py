"""Dialects declared in YAML (issue 15): read like the modules they stand in for, checked whole.

The strongest test of the YAML shape is that two existing dialect modules can be written in
it and read their real fixtures exactly as the modules do; the rest pins the vocabulary a
hand-instrumented agent needs and the load-time checking a user relies on.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from attest_otel.adapt import Role
from attest_otel.adapt.declared import DeclaredDialect
from attest_otel.adapt.dialect_config import load_dialects, parse_dialects
from attest_otel.errors import PolicyError
from attest_otel.grade import grader
from attest_otel.pipeline import Reading, read_file
from attest_otel.policy import Policy, parse_policy
from tests.adapt import test_fixtures
from tests.adapt.spans import Trace, calls, event, js, names

ROOT = Path(__file__).parent.parent
TRACES = ROOT / "fixtures" / "traces"
DIALECTS = ROOT / "fixtures" / "dialects"

EXPRESSED = {
    # YAML file: (fixture prefixes, the module's dialect name)
    "openllmetry.yaml": (("anthropic_openllmetry",), "openllmetry"),
    "pydantic_ai.yaml": (("pydantic_ai",), "pydantic-ai"),
}


def _traces(prefixes: tuple[str, ...]) -> list[Path]:
    return sorted(
        p
        for p in TRACES.glob("*.json")
        if p.name.startswith(prefixes) and not p.name.endswith(".labels.json")
    )


_SAME_WAY = [
    pytest.param(yaml_file, path, module, id=f"{yaml_file} reads {path.stem} as {module} does")
    for yaml_file, (prefixes, module) in EXPRESSED.items()
    for path in _traces(prefixes)
]


@pytest.mark.parametrize(("yaml_file", "path", "module"), _SAME_WAY)
def test_an_existing_dialect_in_yaml_reads_its_fixture_as_the_module_does(
    yaml_file: str, path: Path, module: str
) -> None:
    declared = load_dialects(DIALECTS / yaml_file)
    by_module = read_file(path)
    by_yaml = read_file(path, Reading(Policy(dialects=tuple(declared))))
    # The declared dialect claims every span the module read (asked first, it wins).
    assert any(module in t.dialects for t in by_module)
    assert not any(module in t.dialects for t in by_yaml)
    assert any(declared[0].name in t.dialects for t in by_yaml)
    runs_module = [r for t in by_module for r in t.runs]
    runs_yaml = [r for t in by_yaml for r in t.runs]
    assert runs_module, path.name
    # Whole runs: agent, task, answer, system prompt, offered tools, policy, and every call
    # with its name, arguments, output, error flag and ids.
    assert runs_yaml == runs_module
    verdicts = [grader.tool_use(r).verdict for r in runs_module]
    assert [grader.tool_use(r).verdict for r in runs_yaml] == verdicts


_LABELLED = [
    pytest.param(p, id=p.name.removesuffix(".labels.json"))
    for p in sorted(TRACES.glob("*.labels.json"))
    if p.name.startswith(("haystack__", "mlflow__"))
]


@pytest.mark.parametrize("label_path", _LABELLED)
def test_haystack_and_mlflow_grade_as_labelled_through_their_yaml(
    label_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prefix = label_path.name.split("__")[0]
    trace = label_path.with_name(label_path.name.replace(".labels.json", ".json"))
    declared = tuple(load_dialects(DIALECTS / f"{prefix}.yaml"))
    traces = read_file(trace, Reading(Policy(dialects=declared)))
    assert [t.dialects for t in traces] == [[prefix]]  # no guessing by the generic reader
    monkeypatch.setitem(test_fixtures.DECLARED, prefix, f"{prefix}.yaml")
    test_fixtures.test_fixture(label_path)  # the labelled check, through the YAML dialect


# --- the vocabulary, on hand-built spans ------------------------------------------------------

ACME = """
dialects:
  acme:
    match: {attribute: acme.kind}
    other:
      rule: health-check
      when: {attribute: {acme.kind: tool}, name_prefix: health}
    agent:
      when: {attribute: {acme.kind: agent}}
      name: [acme.agent.name, {span_name: '^agent (.+)$'}]
      task: {attribute: acme.input, path: request.text}
      answer: acme.output
      system: {event: acme.instructions, attribute: text}
    model:
      when: {attribute: {acme.kind: llm}}
      input: {log: acme.prompt}
      output: {attribute: acme.completion, path: 'choices.*.message'}
    tool:
      when: {attribute: {acme.kind: tool}}
      name: [acme.tool.name, {span_name: '^tool:(\\w+)'}]
      call_id: acme.call
      arguments: {attribute: acme.args, args_kwargs: true}
      result: {attribute: acme.result, unwrap: [result]}
      error: acme.failed
      error_message: acme.failed.why
"""


def _acme() -> DeclaredDialect:
    (dialect,) = parse_dialects(ACME)
    return dialect


def test_a_hand_instrumented_agent_is_read_through_its_declared_dialect() -> None:
    t = Trace(scope="acme")
    agent = t.span(
        "agent billing",
        {
            "acme.kind": "agent",
            "acme.input": js({"request": {"text": "Charge order 42."}}),
            "acme.output": "Charged.",
        },
        start=0,
        end=100,
        events=[event("acme.instructions", text="You bill customers.")],
    )
    model = t.span(
        "llm",
        {
            "acme.kind": "llm",
            "acme.completion": js(
                {
                    "choices": [
                        {
                            "message": {
                                "role": "assistant",
                                "tool_calls": [
                                    {
                                        "id": "c1",
                                        "type": "function",
                                        "function": {"name": "charge_card", "arguments": "{}"},
                                    }
                                ],
                            }
                        }
                    ]
                }
            ),
        },
        parent=agent,
        start=1,
        end=2,
    )
    t.log(model, "acme.prompt", js([{"role": "user", "content": "Charge order 42."}]))
    t.span(
        "tool:charge_card",
        {
            "acme.kind": "tool",
            "acme.call": "c1",
            "acme.args": js({"args": [], "kwargs": {"order": 42}}),
            "acme.failed": "true",
            "acme.failed.why": "declined",
        },
        parent=agent,
        start=3,
        end=4,
    )
    t.span(
        "tool:charge_card",
        {
            "acme.kind": "tool",
            "acme.args": js({"args": [42]}),
            "acme.result": js({"result": "ok"}),
            "acme.failed": False,
        },
        parent=agent,
        start=5,
        end=6,
    )
    t.span("health.ping", {"acme.kind": "tool"}, parent=agent, start=7, end=8)
    run = t.run(dialects=(_acme(),))
    assert run.agent == "billing"  # captured from the span name
    assert run.task == "Charge order 42."  # `path` into the JSON
    assert run.system_prompt == "You bill customers."  # from a span event
    assert names(run) == ["charge_card", "charge_card"]  # the health check is no call
    first, second = calls(run)
    assert (first.is_error, first.error_text, first.arguments) == (True, "declined", {"order": 42})
    assert first.call_id == "c1"
    assert (second.is_error, second.arguments, second.output) == (None, 42, "ok")
    assert grader.tool_use(run).verdict == "pass"  # the failed charge was retried


def test_conditions_compare_json_quoted_and_boolean_values_and_check_kind_and_scope() -> None:
    (dialect,) = parse_dialects("""
dialects:
  d:
    tool: {when: {attribute: {mlflow.spanType: TOOL}, kind: internal, scope: [a, b]}}
    agent: {when: {attribute: {flag: true}}}
    model: {when: {any: [{name: chat}, {name_regex: '^gen_'}]}}
""")
    t = Trace(scope="a")
    quoted = t.span("x", {"mlflow.spanType": '"TOOL"'})
    quoted.kind = 1
    server = t.span("x", {"mlflow.spanType": "TOOL"})
    server.kind = 2
    other_scope = t.span("x", {"mlflow.spanType": "TOOL"}, scope="c")
    other_scope.kind = 1
    assert dialect.detect(quoted) is Role.TOOL
    assert dialect.detect(server) is None  # kind must be internal
    assert dialect.detect(other_scope) is None
    assert dialect.detect(t.span("x", {"flag": True})) is Role.AGENT
    assert dialect.detect(t.span("x", {"flag": "true"})) is Role.AGENT
    assert dialect.detect(t.span("x", {"flag": False})) is None
    assert dialect.detect(t.span("gen_text")) is Role.MODEL
    assert dialect.detect(t.span("chat")) is Role.MODEL
    assert dialect.detect(t.span("chat2")) is None


def test_rule_for_names_the_rule_that_decided_for_inspect() -> None:
    dialect = _acme()
    t = Trace()
    assert dialect.rule_for(t.span("tool:x", {"acme.kind": "tool"})) == "tool"
    assert dialect.rule_for(t.span("health", {"acme.kind": "tool"})) == "health-check"
    assert dialect.rule_for(t.span("x", {"acme.kind": "queue"})) == "match"
    assert dialect.detect(t.span("x", {"acme.kind": "queue"})) is Role.OTHER
    assert dialect.rule_for(t.span("x", {"http.method": "GET"})) is None


def test_a_span_outside_the_declared_dialect_is_left_to_the_built_in_readers() -> None:
    t = Trace()
    agent = t.span(
        "invoke_agent billing",
        {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.provider.name": "openai",
            "gen_ai.agent.name": "billing",
        },
        end=10,
    )
    t.span("tool:lookup", {"acme.kind": "tool", "acme.result": "ok"}, parent=agent, start=1)
    traces = t.traces(dialects=(_acme(),))
    assert traces[0].dialects == ["genai", "acme"]
    assert names(traces[0].runs[0]) == ["lookup"]


# --- checking the file --------------------------------------------------------------------


def _problems(text: str) -> list[str]:
    with pytest.raises(PolicyError) as info:
        parse_dialects(text, "d.yaml")
    return info.value.problems


def test_every_problem_in_a_dialect_file_is_listed_with_its_key_path_and_line() -> None:
    problems = _problems("""dialects:
  acme:
    match: {atribute: acme.kind}
    agent:
      when: {attribute: {acme.kind: agent}}
      nme: acme.agent.name
      arguments: acme.args
    tool:
      name: acme.tool.name
      result: {attribute: acme.result, path: 3}
    model:
      when: {name_regex: '(unclosed'}
      input: {attribute: a, event: b, log: c}
  genai:
    tool: {when: {name: x}}
""")
    assert problems == [
        "dialects.acme.match.atribute (line 3): unknown key (did you mean 'attribute'?)",
        "dialects.acme.agent.nme (line 6): unknown key (did you mean 'name'?)",
        "dialects.acme.agent.arguments (line 7): not a field of a agent rule (fields: name, "
        "task, answer, system, input, output, tools, allowed_tools, tool_fallbacks)",
        "dialects.acme.tool.result.path (line 10): expected a string, got a number",
        "dialects.acme.tool (line 9): missing `when` (the condition for this rule)",
        "dialects.acme.model.when.name_regex (line 12): invalid regular expression (RE2 "
        "syntax): missing ): (unclosed",
        "dialects.acme.model.input (line 13): names two places (attribute and event and log); "
        "give one",
        "dialects.genai (line 14): a built-in dialect has this name; choose another",
    ]


def test_the_error_names_the_file_on_one_line() -> None:
    with pytest.raises(PolicyError) as info:
        parse_dialects("dialects:\n  x:\n    tool: {when: {}}\n", "d.yaml")
    assert str(info.value) == (
        "d.yaml: dialects.x.tool.when (line 3): empty condition (it would hold for every span)"
    )


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        pytest.param("", "<top>: empty file (expected a `dialects:` mapping)", id="empty file"),
        pytest.param(
            "agents: {}\n",
            "agents (line 1): unknown key (expected one of: dialects)",
            id="a policy is not a dialect file",
        ),
        pytest.param(
            "dialects:\n  x: {match: {attribute: a}}\n",
            "dialects.x (line 2): no rules (give at least one of: agent, tool, model, "
            "handoff, workflow, other)",
            id="a dialect with no rules",
        ),
        pytest.param(
            "dialects:\n  x:\n    tool: {when: {kind: sever}}\n",
            "dialects.x.tool.when.kind (line 3): unknown span kind 'sever' (expected "
            "one of: unspecified, internal, server, client, producer, consumer)",
            id="an unknown span kind",
        ),
        pytest.param(
            "dialects:\n  x:\n    tool: {when: {name: a}, name: {json: false}}\n",
            "dialects.x.tool.name (line 3): names no place to read (one of: attribute,"
            " event, log, span_name, genai_events)",
            id="a source with no place",
        ),
        pytest.param(
            "dialects:\n  x:\n    tool: {when: {name: a}, name: {genai_events: true}}\n",
            "dialects.x.tool.name.genai_events (line 3): applies to task, answer, "
            "system, input, output, tools only",
            id="genai events on a tool field",
        ),
    ],
)
def test_a_bad_dialect_file_is_refused_with_the_reason(text: str, problem: str) -> None:
    assert _problems(text) == [problem]


def test_a_policy_file_declares_dialects_beside_its_agents_and_lists_both_kinds_of_problem() -> (
    None
):
    policy = parse_policy(
        "agents:\n  billing: {allowed_tools: [a]}\n"
        "dialects:\n  acme:\n    tool: {when: {attribute: acme.tool}, name: acme.tool}\n"
    )
    assert [d.name for d in policy.dialects] == ["acme"]
    assert policy.agents["billing"].allowed_tools == ["a"]
    with pytest.raises(PolicyError) as info:
        parse_policy("agents:\n  billing: {allowed: [a]}\ndialects:\n  acme:\n    tol: {}\n")
    assert info.value.problems == [
        "agents.billing.allowed (line 2): unknown key (did you mean 'allowed_tools'?)",
        "dialects.acme.tol (line 5): unknown key (did you mean 'tool'?)",
    ]


def test_every_shipped_dialect_file_loads() -> None:
    for path in sorted(DIALECTS.glob("*.yaml")):
        assert load_dialects(path), path.name


# --- the CLI ----------------------------------------------------------------------------------


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "attest_otel.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_grade_with_dialects_reads_the_trace_through_the_declared_dialect(tmp_path: Path) -> None:
    # The generic reader names this agent `billing_agent` too; naming it by its whole span
    # name shows the run came through the file.
    text = (DIALECTS / "handmade.yaml").read_text(encoding="utf-8")
    changed = text.replace("name: acme.agent.name", "name: {span_name: '^(.*)$'}")
    assert changed != text
    (tmp_path / "d.yaml").write_text(changed, encoding="utf-8")
    out = _cli(
        "grade",
        "--dialects",
        str(tmp_path / "d.yaml"),
        "--file",
        str(TRACES / "handmade__all_ok.json"),
        "--json",
    )
    assert out.returncode == 0, out.stderr
    (trace,) = json.loads(out.stdout)["traces"]
    assert [r["agent"] for r in trace["runs"]] == ["agent billing_agent"]
    assert trace["runs"][0]["result"]["verdict"] == "pass"


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        pytest.param(
            "dialects:\n  x:\n    tool: {when: {nme: a}}\n",
            "x.yaml: dialects.x.tool.when.nme (line 3): unknown key (did you mean 'name'?)",
            id="a bad dialect file",
        ),
        pytest.param(None, "x.yaml: no such file", id="a missing dialect file"),
        pytest.param("dialects: [\n", "x.yaml: line 2, column 1: invalid YAML", id="bad YAML"),
    ],
)
def test_a_bad_dialect_file_is_one_error_line_and_exit_2(
    tmp_path: Path, content: str | None, problem: str
) -> None:
    path = tmp_path / "x.yaml"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    out = _cli("grade", "--dialects", str(path), "--file", str(TRACES / "handmade__retry.json"))
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith(f"attest-otel: error: {tmp_path}/"), lines[0]
    assert problem.replace("x.yaml", "") in lines[0]


def test_a_dialect_file_reads_attribute_names_from_the_environment() -> None:
    text = (
        "dialects:\n  acme:\n    tool:\n      when: {attribute: acme.tool}\n"
        "      name: ${env:ACME_TOOL_NAME:-acme.tool.name}\n"
    )
    (default,) = parse_dialects(text, "d.yaml", environ={})
    (named,) = parse_dialects(text, "d.yaml", environ={"ACME_TOOL_NAME": "acme.name"})
    assert default.rules[0].fields["name"][0].attribute == "acme.tool.name"
    assert named.rules[0].fields["name"][0].attribute == "acme.name"
    with pytest.raises(
        PolicyError,
        match=r"dialects\.acme\.tool\.name \(line 5\): "
        r"\$\{env:X\}: X is not set",
    ):
        parse_dialects(text.replace("ACME_TOOL_NAME:-acme.tool.name", "X"), "d.yaml", environ={})
