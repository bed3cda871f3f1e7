"""The policy file: what it means, and how it is refused when it is wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

from attest_otel.adapt.span_policy import parse_fallbacks_value, parse_tools_value
from attest_otel.errors import InputError, PolicyError
from attest_otel.policy import AgentPolicy, Policy, load_policy, parse_policy

EXAMPLE = """\
agents:
  billing_agent:            # the agent's name as the trace gives it
    allowed_tools: [charge_card, pay_with_paypal, lookup_invoice]
    tool_fallbacks: {charge_card: [pay_with_paypal]}
  "*":
    tool_fallbacks: {search: [search_backup]}
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_the_documented_example_loads(tmp_path: Path) -> None:
    policy = load_policy(write(tmp_path, EXAMPLE))
    assert policy.for_agent("billing_agent") == AgentPolicy(
        ["charge_card", "pay_with_paypal", "lookup_invoice"],
        {"charge_card": ["pay_with_paypal"]},
        "billing_agent",
    )
    assert policy.source == str(tmp_path / "policy.yaml")


def test_a_named_entry_replaces_the_any_agent_entry_whole() -> None:
    named = parse_policy(EXAMPLE).for_agent("billing_agent")
    assert "search" not in named.tool_fallbacks  # not merged from "*"


def test_an_agent_without_an_entry_gets_the_any_agent_entry() -> None:
    other = parse_policy(EXAMPLE).for_agent("support_agent")
    assert other == AgentPolicy(None, {"search": ["search_backup"]}, "*")


def test_an_agent_without_any_matching_entry_is_unrestricted_and_says_so() -> None:
    policy = parse_policy("agents:\n  billing_agent:\n    allowed_tools: []\n")
    assert policy.for_agent("other") == AgentPolicy(None, {}, None)
    assert policy.for_agent(None).entry is None
    assert policy.for_agent("billing_agent").allowed_tools == []


def test_the_empty_policy_has_no_entries() -> None:
    assert Policy.empty().for_agent("x") == AgentPolicy()
    assert parse_policy("").agents == {}


def test_every_problem_is_listed_with_its_key_path_and_line(tmp_path: Path) -> None:
    text = """\
agents:
  billing_agent:
    allowed_tools: charge_card
    tool_fallback: {}
  "":
    allowed_tools: [a]
  support:
    tool_fallbacks: {search: [1, ""]}
version: 2
"""
    with pytest.raises(PolicyError) as info:
        load_policy(write(tmp_path, text))
    assert info.value.problems == [
        "agents.billing_agent.allowed_tools (line 3): expected a list of strings, got a string",
        "agents.billing_agent.tool_fallback (line 4): unknown key (did you mean 'tool_fallbacks'?)",
        "agents.'' (line 5): empty agent name",
        "agents.support.tool_fallbacks.search[0] (line 8): expected a string, got a number",
        "agents.support.tool_fallbacks.search[1] (line 8): empty tool name",
        "version (line 9): unknown key (expected one of: agents, dialects)",
    ]
    assert str(info.value).startswith(f"{tmp_path / 'policy.yaml'}: agents.billing_agent")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        pytest.param(
            "- a\n- b\n",
            "<top> (line 1): expected a mapping with an `agents` key, got a list",
            id="a list instead of a mapping is refused",
        ),
        pytest.param(
            "agents: [a]\n",
            "agents (line 1): expected a mapping of agent name to its policy, got a list",
            id="agents as a list is refused",
        ),
        pytest.param(
            "agents:\n  a: [x]\n",
            "agents.a (line 2): expected a mapping with allowed_tools and/or "
            "tool_fallbacks, got a list",
            id="an entry that is not a mapping is refused",
        ),
        pytest.param(
            "agents:\n  a:\n    tool_fallbacks: [x]\n",
            "agents.a.tool_fallbacks (line 3): expected a mapping of tool name to a list "
            "of tool names, got a list",
            id="fallbacks as a list are refused",
        ),
        pytest.param(
            "agents:\n  a: {}\n  a: {}\n",
            "agents.a (line 3): duplicate key",
            id="a duplicate agent name is refused",
        ),
        pytest.param(
            "agents:\n  123: {}\n",
            "agents.123 (line 2): expected a string key (quote it to make it one)",
            id="a number as agent name is refused",
        ),
    ],
)
def test_wrong_shapes_are_refused(text: str, problem: str) -> None:
    with pytest.raises(PolicyError) as info:
        parse_policy(text, "p.yaml")
    assert info.value.problems == [problem]


def test_a_yaml_syntax_error_names_the_line() -> None:
    with pytest.raises(PolicyError) as info:
        parse_policy("agents:\n  a:\n    allowed_tools: [a, b\n", "p.yaml")
    assert info.value.line is not None
    assert "invalid YAML" in info.value.problems[0]
    assert info.value.problems[0].startswith(f"line {info.value.line},")


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ('agents:\n  a:\n    allowed_tools: "a\n  b:\n', 3),  # an open quote
        ("agents:\n  a:\n    allowed_tools: [a, b\n", 3),  # an open bracket
    ],
)
def test_yaml_that_ends_too_soon_points_at_what_was_left_open_not_past_the_end(
    text: str, line: int
) -> None:
    with pytest.raises(PolicyError) as info:
        parse_policy(text, "p.yaml")
    assert info.value.line == line <= len(text.splitlines())
    assert "that starts here" in info.value.problems[0]


def test_a_missing_file_is_an_input_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(PolicyError) as info:
        load_policy(tmp_path / "nope.yaml")
    assert isinstance(info.value, InputError)
    assert str(info.value) == f"{tmp_path / 'nope.yaml'}: no such file"


def test_null_values_mean_no_restriction() -> None:
    policy = parse_policy("agents:\n  a:\n    allowed_tools: null\n  b:\n")
    assert policy.for_agent("a") == AgentPolicy(None, {}, "a")
    assert policy.for_agent("b") == AgentPolicy(None, {}, "b")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param(["a", "b"], ["a", "b"], id="a string array is the list"),
        pytest.param('["a"]', ["a"], id="a JSON string of an array is accepted"),
        pytest.param("not json", None, id="text that is not JSON is ignored"),
        pytest.param([1, 2], None, id="an array of numbers is ignored"),
    ],
)
def test_allowed_tools_attribute_values(value: object, expected: list[str] | None) -> None:
    assert parse_tools_value(value) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param('{"a": ["b"]}', {"a": ["b"]}, id="a JSON object string is the mapping"),
        pytest.param({"a": ["b"]}, {"a": ["b"]}, id="a decoded map is accepted"),
        pytest.param('{"a": "b"}', {"a": ["b"]}, id="a single fallback name becomes a list"),
        pytest.param("[1]", None, id="a JSON array is ignored"),
    ],
)
def test_tool_fallbacks_attribute_values(value: object, expected: object) -> None:
    assert parse_fallbacks_value(value) == expected


def test_cached_attribute_parses_hand_out_independent_copies() -> None:
    first = parse_tools_value('["a"]')
    assert first is not None
    first.append("b")
    assert parse_tools_value('["a"]') == ["a"]


# --- ${env:NAME} in values --------------------------------------------------------------------

ENV_POLICY = """\
agents:
  ${env:NOT_A_KEY}:
    allowed_tools:
      - ${env:PAY}
      - "${env:BACKUP:-pay_with_paypal}"
      - lookup_$${env:X}
"""


def test_values_name_environment_variables_and_dollar_dollar_is_a_dollar() -> None:
    policy = parse_policy(ENV_POLICY, environ={"PAY": "charge_card"})
    # Keys are never expanded: the file's shape is what its author wrote.
    assert policy.for_agent("${env:NOT_A_KEY}").allowed_tools == [
        "charge_card",
        "pay_with_paypal",
        "lookup_${env:X}",
    ]


def test_a_default_applies_only_when_the_variable_is_unset_not_when_it_is_empty() -> None:
    with pytest.raises(PolicyError) as info:
        parse_policy(ENV_POLICY, "p.yaml", environ={"PAY": "charge_card", "BACKUP": ""})
    assert info.value.problems == [
        "agents.${env:NOT_A_KEY}.allowed_tools[1] (line 5): empty tool name"
    ]


def test_an_unset_variable_without_a_default_is_one_problem_naming_it_and_its_key() -> None:
    text = "agents:\n  a:\n    allowed_tools:\n      - ${env:PAY}\n    tool_fallbacks: ${env:FB}\n"
    with pytest.raises(PolicyError) as info:
        parse_policy(text, "p.yaml", environ={})
    assert info.value.problems == [
        "agents.a.allowed_tools[0] (line 4): ${env:PAY}: PAY is not set "
        "(set it, or give a default: ${env:PAY:-value})",
        "agents.a.tool_fallbacks (line 5): ${env:FB}: FB is not set "
        "(set it, or give a default: ${env:FB:-value})",
    ]


def test_a_reference_other_than_env_is_refused() -> None:
    with pytest.raises(
        PolicyError,
        match=r"allowed_tools\[0\] \(line 3\): unsupported "
        r"reference \$\{file:/etc/x\}",
    ):
        parse_policy("agents:\n  a:\n    allowed_tools: ['${file:/etc/x}']\n", environ={})


def test_load_policy_reads_the_environment_it_is_given(tmp_path: Path) -> None:
    path = write(tmp_path, "agents:\n  a:\n    allowed_tools: ['${env:TOOL}']\n")
    assert load_policy(path, {"TOOL": "t"}).for_agent("a").allowed_tools == ["t"]
