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
config (`yamlfile.read` says how). The file's shape is `PolicyFile`, a pydantic model
(`yamlfile.model` says how its problems keep their key path and line), published as a JSON
Schema for editors in docs/schemas/.
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar

from pydantic import BeforeValidator, PlainValidator
from pydantic import Field as PydanticField

from attest_otel.adapt.dialect_config import DialectsSection, compile_dialects
from attest_otel.adapt.span_policy import from_span
from attest_otel.yamlfile.model import FileModel, expect, fail, kind_of, read_model
from attest_otel.yamlfile.read import read_text

if TYPE_CHECKING:
    from attest_otel.adapt.declared import DeclaredDialect

__all__ = [
    "ANY_AGENT",
    "AgentPolicy",
    "Policy",
    "PolicyFile",
    "load_policy",
]

log = logging.getLogger(__name__)

ANY_AGENT = "*"
"""The policy entry that applies to an agent without an entry of its own."""


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

    def unused(self, seen: Iterable[str]) -> list[str]:
        """One line per entry whose agent no run had (`billing_agnet`), with the closest
        name seen: such an entry grades nothing, and its agent runs with every tool
        allowed. The CLI says it after grading, the sidecar once its first runs are graded."""
        names = sorted(set(seen))
        lines = []
        for name in self.agents:
            if name == ANY_AGENT or name in names:
                continue
            close = difflib.get_close_matches(name, names, n=1)
            hint = (
                f"did you mean {close[0]!r}?"
                if close
                else f"agents seen: {', '.join(names) or 'none'}"
            )
            lines.append(f"policy {self.source}: agent {name!r} matches no run ({hint})")
        return lines

    def resolve(
        self,
        agent: str | None,
        on_span: tuple[Any, Any],
        allowed_override: list[str] | None,
        fallbacks_override: dict[str, list[str]] | None,
    ) -> tuple[list[str] | None, dict[str, list[str]]]:
        """`resolve_policy` for this policy: what the run assembler asks of a policy."""
        return resolve_policy(self, agent, on_span, allowed_override, fallbacks_override)


# --- the file -------------------------------------------------------------------------------


def _name(empty: str) -> Any:
    def check(value: Any) -> str:
        if not isinstance(value, str):
            fail(f"expected a string, got {kind_of(value)}")
        if not value.strip():
            fail(empty)
        return value

    return PlainValidator(check, json_schema_input_type=str)


ToolName = Annotated[str, _name("empty tool name")]
ToolNames = Annotated[list[ToolName], BeforeValidator(expect(list, "a list of strings"))]
Fallbacks = Annotated[
    dict[ToolName, ToolNames],
    BeforeValidator(expect(dict, "a mapping of tool name to a list of tool names")),
]


class AgentEntry(FileModel):
    """One agent's entry; an empty entry (`billing_agent:`) restricts nothing."""

    what: ClassVar[str] = "a mapping with allowed_tools and/or tool_fallbacks"

    allowed_tools: ToolNames | None = PydanticField(
        None, description="The tools the agent may call; [] allows none, absent allows all."
    )
    tool_fallbacks: Fallbacks | None = PydanticField(
        None, description="Tool name -> the tools that may stand in for it when it fails."
    )


class PolicyFile(FileModel):
    """A policy file: agents by name (`"*"` for any), and dialects (`dialect_config`)."""

    what: ClassVar[str] = "a mapping with an `agents` key"

    agents: (
        Annotated[
            dict[Annotated[str, _name("empty agent name")], AgentEntry | None],
            BeforeValidator(expect(dict, "a mapping of agent name to its policy")),
        ]
        | None
    ) = PydanticField(None, description='Agent name (as the trace gives it; "*" for any) -> entry.')
    dialects: DialectsSection | None = PydanticField(
        None, description="Declared dialects (README, 'Teach it a dialect')."
    )


def load_policy(path: str | Path, environ: Mapping[str, str] | None = None) -> Policy:
    """Read and check a policy file; raises PolicyError listing every problem found.

    `environ` is where `${env:...}` references are looked up (default: `os.environ`).
    """
    return parse_policy(read_text(path, "a policy file"), str(Path(path)), environ)


def parse_policy(
    text: str, source: str = "<policy>", environ: Mapping[str, str] | None = None
) -> Policy:
    """Check a policy document given as text; `source` is what errors name."""
    checked = read_model(PolicyFile, text, source, environ)
    if checked is None:
        return Policy(source=source)
    agents: dict[str, AgentPolicy] = {}
    for name, entry in (checked.agents or {}).items():
        if entry is None:
            agents[name] = AgentPolicy(entry=name)
        else:
            allowed = None if entry.allowed_tools is None else list(entry.allowed_tools)
            fallbacks = {k: list(v) for k, v in (entry.tool_fallbacks or {}).items()}
            agents[name] = AgentPolicy(allowed, fallbacks, name)
    dialects = compile_dialects(checked.dialects, source)
    return Policy(agents=agents, source=source, dialects=dialects)


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
