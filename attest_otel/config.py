"""The tool-use policy: which tools each agent may call, and which tools may stand in for which.

The file is YAML, keyed by the agent's name as the trace gives it (`gen_ai.agent.name`,
`agent.name`, ...), with `"*"` for any agent:

    agents:
      billing_agent:
        allowed_tools: [charge_card, pay_with_paypal, lookup_invoice]
        tool_fallbacks: {charge_card: [pay_with_paypal]}
      "*":
        tool_fallbacks: {search: [search_backup]}

A named agent's entry replaces the `"*"` entry as a whole; the two are never merged key by
key. Merging would let a `"*"` allow-list silently constrain an agent whose own entry only
meant to declare fallbacks, and "the entry under my name is all that applies to me" is the
rule a reader of the file can check by eye.

Where the values come from, first match wins (`resolve_policy`):
  1. one-off overrides (CLI `--allowed-tools`, `--fallback`);
  2. this file's entry for the agent, else its `"*"` entry;
  3. `attest.allowed_tools` / `attest.tool_fallbacks` on the agent span;
  4. nothing: every tool allowed, no fallbacks.

The file is checked whole when it loads and every problem is listed at once, each naming its
key path and line, so a user fixes a file in one pass instead of one error per run.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from attest_otel.adapt.span_policy import from_span
from attest_otel.errors import PolicyError

if TYPE_CHECKING:
    from attest_otel.adapt.declared import DeclaredDialect

__all__ = [
    "ANY_AGENT",
    "AgentPolicy",
    "Policy",
    "load_policy",
]

log = logging.getLogger(__name__)

ANY_AGENT = "*"
"""The policy entry that applies to an agent without an entry of its own."""

_TOP_KEYS = ("agents", "dialects")
_AGENT_KEYS = ("allowed_tools", "tool_fallbacks")
_STR_TAG = "tag:yaml.org,2002:str"
_NULL_TAG = "tag:yaml.org,2002:null"


@dataclass(frozen=True, slots=True)
class AgentPolicy:
    """What one agent may call. `allowed_tools` None allows every tool; `[]` allows none.

    `entry` names the policy entry this came from (the agent's name or `"*"`), or is None
    when the policy has nothing for the agent, so the caller knows to look at the span.
    """

    allowed_tools: list[str] | None = None
    tool_fallbacks: dict[str, list[str]] = field(default_factory=dict)
    entry: str | None = None


@dataclass(frozen=True, slots=True)
class Policy:
    agents: Mapping[str, AgentPolicy] = field(default_factory=dict)
    source: str | None = None
    dialects: tuple[DeclaredDialect, ...] = ()
    """The file's `dialects:` (see `dialect_config`); callers pass them to the assembler."""

    @classmethod
    def empty(cls) -> Policy:
        return cls()

    def for_agent(self, name: str | None) -> AgentPolicy:
        """The agent's own entry, else `"*"`, else an unrestricted policy with `entry=None`."""
        if name is not None:
            own = self.agents.get(name)
            if own is not None:
                return own
        fallback = self.agents.get(ANY_AGENT)
        if fallback is not None:
            return fallback
        return AgentPolicy()

    def resolve(
        self,
        agent: str | None,
        on_span: tuple[Any, Any],
        allowed_override: list[str] | None,
        fallbacks_override: dict[str, list[str]] | None,
    ) -> tuple[list[str] | None, dict[str, list[str]]]:
        """`resolve_policy` for this policy: what the run assembler asks of a policy."""
        return resolve_policy(self, agent, on_span, allowed_override, fallbacks_override)


def load_policy(path: str | Path) -> Policy:
    """Read and check a policy file; raises PolicyError listing every problem found."""
    p = Path(path)
    source = str(p)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PolicyError(source, ["no such file"]) from None
    except IsADirectoryError:
        raise PolicyError(source, ["is a directory, not a policy file"]) from None
    except UnicodeDecodeError as e:
        raise PolicyError(source, [f"not UTF-8 text ({e.reason} at byte {e.start})"]) from None
    except OSError as e:
        raise PolicyError(source, [e.strerror or str(e)]) from None
    return parse_policy(text, source)


def parse_policy(text: str, source: str = "<policy>") -> Policy:
    """Check a policy document given as text; `source` is what errors name."""
    root = compose(text, source)
    if root is None or (isinstance(root, ScalarNode) and root.tag == _NULL_TAG):
        return Policy(source=source)
    checker = _Checker()
    agents = checker.document(root)
    dialects: tuple[DeclaredDialect, ...] = ()
    if checker.dialects_node is not None:
        from attest_otel.dialect_config import DialectChecker

        dialects = DialectChecker(checker.problems, source).section(checker.dialects_node)
    if checker.problems:
        raise PolicyError(source, checker.problems)
    return Policy(agents=agents, source=source, dialects=dialects)


def compose(text: str, source: str) -> Node | None:
    """The YAML node tree (which keeps every line number); invalid YAML is one PolicyError."""
    try:
        return yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        problem = e.problem or e.context or "invalid YAML"
        if mark is None:
            raise PolicyError(source, [f"invalid YAML: {problem}"]) from None
        err = PolicyError(
            source, [f"line {mark.line + 1}, column {mark.column + 1}: invalid YAML: {problem}"]
        )
        err.line = mark.line + 1
        raise err from None
    except yaml.YAMLError as e:
        raise PolicyError(source, [f"invalid YAML: {e}"]) from None


class _Checker:
    """Walks the YAML node tree (not the loaded values) so every problem can carry its line."""

    def __init__(self, problems: list[str] | None = None) -> None:
        self.problems: list[str] = [] if problems is None else problems
        self.dialects_node: Node | None = None
        """The `dialects:` section, checked by `dialect_config` (kept out of this module)."""

    def problem(self, path: str, node: Node, text: str) -> None:
        self.problems.append(f"{path} (line {node.start_mark.line + 1}): {text}")

    def mapping(self, path: str, node: Node, what: str) -> list[tuple[ScalarNode, Node]] | None:
        """The key/value pairs of a mapping node; duplicate and non-string keys are problems."""
        if not isinstance(node, MappingNode):
            self.problem(path, node, f"expected {what}, got {_kind(node)}")
            return None
        seen: set[str] = set()
        pairs: list[tuple[ScalarNode, Node]] = []
        for key, value in node.value:
            if not isinstance(key, ScalarNode) or key.tag != _STR_TAG:
                shown = key.value if isinstance(key, ScalarNode) else _kind(key)
                self.problem(
                    f"{path}.{shown}", key, "expected a string key (quote it to make it one)"
                )
                continue
            if key.value in seen:
                self.problem(f"{path}.{key.value}", key, "duplicate key")
                continue
            seen.add(key.value)
            pairs.append((key, value))
        return pairs

    def document(self, root: Node) -> dict[str, AgentPolicy]:
        pairs = self.mapping("<top>", root, "a mapping with an `agents` key")
        if pairs is None:
            return {}
        agents: dict[str, AgentPolicy] = {}
        for key, value in pairs:
            if key.value not in _TOP_KEYS:
                expected = ", ".join(_TOP_KEYS)
                self.problem(key.value, key, f"unknown key (expected one of: {expected})")
                continue
            if _is_null(value):
                continue
            if key.value == "dialects":
                self.dialects_node = value
                continue
            entries = self.mapping("agents", value, "a mapping of agent name to its policy")
            for name_node, entry in entries or ():
                name = name_node.value
                if not name.strip():
                    self.problem(f"agents.{name!r}", name_node, "empty agent name")
                    continue
                agent = self.agent(f"agents.{name}", entry, name)
                if agent is not None:
                    agents[name] = agent
        return agents

    def agent(self, path: str, node: Node, name: str) -> AgentPolicy | None:
        if _is_null(node):
            return AgentPolicy(entry=name)
        pairs = self.mapping(path, node, "a mapping with allowed_tools and/or tool_fallbacks")
        if pairs is None:
            return None
        allowed: list[str] | None = None
        fallbacks: dict[str, list[str]] = {}
        ok = True
        for key, value in pairs:
            if key.value == "allowed_tools":
                if _is_null(value):
                    continue
                tools = self.names(f"{path}.allowed_tools", value)
                ok = ok and tools is not None
                allowed = tools
            elif key.value == "tool_fallbacks":
                if _is_null(value):
                    continue
                fb = self.fallbacks(f"{path}.tool_fallbacks", value)
                ok = ok and fb is not None
                fallbacks = fb or {}
            else:
                self.problem(
                    f"{path}.{key.value}",
                    key,
                    f"unknown key (expected one of: {', '.join(_AGENT_KEYS)})",
                )
                ok = False
        return AgentPolicy(allowed, fallbacks, name) if ok else None

    def names(self, path: str, node: Node) -> list[str] | None:
        if not isinstance(node, SequenceNode):
            self.problem(path, node, f"expected a list of strings, got {_kind(node)}")
            return None
        out: list[str] = []
        ok = True
        for i, item in enumerate(node.value):
            if not isinstance(item, ScalarNode) or item.tag != _STR_TAG:
                self.problem(f"{path}[{i}]", item, f"expected a string, got {_kind(item)}")
                ok = False
            elif not item.value.strip():
                self.problem(f"{path}[{i}]", item, "empty tool name")
                ok = False
            else:
                out.append(item.value)
        return out if ok else None

    def fallbacks(self, path: str, node: Node) -> dict[str, list[str]] | None:
        pairs = self.mapping(path, node, "a mapping of tool name to a list of tool names")
        if pairs is None:
            return None
        out: dict[str, list[str]] = {}
        ok = True
        for key, value in pairs:
            if not key.value.strip():
                self.problem(f"{path}.{key.value!r}", key, "empty tool name")
                ok = False
                continue
            alts = self.names(f"{path}.{key.value}", value)
            if alts is None:
                ok = False
            else:
                out[key.value] = alts
        return out if ok else None


def _is_null(node: Node) -> bool:
    return isinstance(node, ScalarNode) and node.tag == _NULL_TAG


def _kind(node: Node) -> str:
    if isinstance(node, MappingNode):
        return "a mapping"
    if isinstance(node, SequenceNode):
        return "a list"
    if isinstance(node, ScalarNode):
        tag = node.tag.rsplit(":", 1)[-1]
        return {
            "null": "null",
            "bool": "a boolean",
            "int": "a number",
            "float": "a number",
            "str": "a string",
        }.get(tag, f"a {tag}")
    return "something else"


# --- the same settings carried on a span ----------------------------------------------------


def resolve_policy(
    policy: Policy,
    agent: str | None,
    on_span: tuple[Any, Any],
    allowed_override: list[str] | None,
    fallbacks_override: dict[str, list[str]] | None,
) -> tuple[list[str] | None, dict[str, list[str]]]:
    """One run's (allowed_tools, tool_fallbacks), by the order in this module's docstring.

    `on_span` holds the raw `attest.allowed_tools` / `attest.tool_fallbacks` values of the
    run's agent span. Every run gets lists of its own, whatever later code does with them.
    """
    entry = policy.for_agent(agent)
    allowed = None if entry.allowed_tools is None else list(entry.allowed_tools)
    fallbacks = {tool: list(alts) for tool, alts in entry.tool_fallbacks.items()}
    if entry.entry is None:
        return from_span(on_span, allowed_override, fallbacks_override)
    if allowed_override is not None:
        allowed = list(allowed_override)
    if fallbacks_override is not None:
        fallbacks = {k: list(v) for k, v in fallbacks_override.items()}
    return allowed, fallbacks
