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
key path and line, so a user fixes a file in one pass instead of one error per run. Values
may name environment variables, `${env:NAME}` or `${env:NAME:-default}`, as in a Collector
config (`yamlcheck` says how).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from yaml.nodes import Node, ScalarNode, SequenceNode

from attest_otel.adapt.dialect_config import DialectChecker
from attest_otel.adapt.span_policy import from_span
from attest_otel.errors import PolicyError
from attest_otel.yamlcheck import STR_TAG, Checker, compose, is_null, kind, read_text

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


def load_policy(path: str | Path, environ: Mapping[str, str] | None = None) -> Policy:
    """Read and check a policy file; raises PolicyError listing every problem found.

    `environ` is where `${env:...}` references are looked up (default: `os.environ`).
    """
    return parse_policy(read_text(path, "a policy file"), str(Path(path)), environ)


def parse_policy(
    text: str, source: str = "<policy>", environ: Mapping[str, str] | None = None
) -> Policy:
    """Check a policy document given as text; `source` is what errors name."""
    root = compose(text, source)
    if root is None:
        return Policy(source=source)
    checker = _Checker()
    checker.expand_env(root, environ)
    agents = checker.document(root)
    dialects: tuple[DeclaredDialect, ...] = ()
    if checker.dialects_node is not None:
        dialects = DialectChecker(checker.problems, source).section(checker.dialects_node)
    if checker.problems:
        raise PolicyError(source, checker.problems)
    return Policy(agents=agents, source=source, dialects=dialects)


class _Checker(Checker):
    """Walks the node tree of a policy (`yamlcheck` says why nodes, not values)."""

    def __init__(self) -> None:
        super().__init__()
        self.dialects_node: Node | None = None
        """The `dialects:` section, checked by `dialect_config` (kept out of this module)."""

    def document(self, root: Node) -> dict[str, AgentPolicy]:
        pairs = self.mapping("<top>", root, "a mapping with an `agents` key")
        if pairs is None:
            return {}
        agents: dict[str, AgentPolicy] = {}
        for key, value in pairs:
            if key.value not in _TOP_KEYS:
                self.unknown(key.value, key, _TOP_KEYS)
                continue
            if is_null(value):
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
        if is_null(node):
            return AgentPolicy(entry=name)
        pairs = self.mapping(path, node, "a mapping with allowed_tools and/or tool_fallbacks")
        if pairs is None:
            return None
        allowed: list[str] | None = None
        fallbacks: dict[str, list[str]] = {}
        ok = True
        for key, value in pairs:
            if key.value == "allowed_tools":
                if is_null(value):
                    continue
                tools = self.names(f"{path}.allowed_tools", value)
                ok = ok and tools is not None
                allowed = tools
            elif key.value == "tool_fallbacks":
                if is_null(value):
                    continue
                fb = self.fallbacks(f"{path}.tool_fallbacks", value)
                ok = ok and fb is not None
                fallbacks = fb or {}
            else:
                self.unknown(f"{path}.{key.value}", key, _AGENT_KEYS)
                ok = False
        return AgentPolicy(allowed, fallbacks, name) if ok else None

    def names(self, path: str, node: Node) -> list[str] | None:
        if not isinstance(node, SequenceNode):
            self.problem(path, node, f"expected a list of strings, got {kind(node)}")
            return None
        out: list[str] = []
        ok = True
        for i, item in enumerate(node.value):
            if not isinstance(item, ScalarNode) or item.tag != STR_TAG:
                self.problem(f"{path}[{i}]", item, f"expected a string, got {kind(item)}")
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
