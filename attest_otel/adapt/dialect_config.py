"""The `dialects:` section of a policy file, or of a file of its own: checked, then compiled.

    dialects:
      acme-agents:
        match: {attribute: acme.kind}          # the dialect's spans; optional
        agent:
          when: {attribute: {acme.kind: agent}}
          name: acme.agent.name
          task: acme.input
          answer: acme.output
        tool:
          when: {attribute: {acme.kind: tool}}
          name: acme.tool.name
          arguments: acme.tool.args
          result: acme.tool.result
          error: acme.error

A mistake in a dialect does not fail loudly at read time; it silently reads nothing, and a
run then grades as if its agent never called a tool. So the file is checked whole when it
loads, like the policy (every problem with its key path and line, unknown keys with the
nearest known one), and regexes are compiled here, once, so a bad one is a load error and
detection never compiles anything. The README's "Teach it a dialect" documents every key.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from attest_otel.adapt.base import Role
from attest_otel.adapt.declared import Cond, DeclaredDialect, Field, Rule, Source
from attest_otel.adapt.detect import BY_NAME
from attest_otel.adapt.generic import GENERIC
from attest_otel.adapt.linear_regex import LinearRegex, RegexError, compile_linear
from attest_otel.errors import PolicyError
from attest_otel.yamlcheck import BOOL_TAG, STR_TAG, Checker, compose, is_null, kind, read_text

__all__ = ["DialectChecker", "load_dialects", "parse_dialects"]

ROLES: dict[str, Role] = {
    "agent": Role.AGENT,
    "tool": Role.TOOL,
    "model": Role.MODEL,
    "handoff": Role.HANDOFF,
    "workflow": Role.WORKFLOW,
    "other": Role.OTHER,
}
_CONTENT = ("task", "answer", "system", "input", "output", "tools")
_TOOL = ("name", "call_id", "arguments", "result", "error", "error_message")
FIELDS: dict[Role, tuple[str, ...]] = {
    Role.AGENT: ("name", *_CONTENT, "allowed_tools", "tool_fallbacks"),
    Role.MODEL: _CONTENT,
    Role.TOOL: _TOOL,
    Role.HANDOFF: (*_TOOL, "target"),
    Role.WORKFLOW: (),
    Role.OTHER: (),
}
"""What a rule of each role may read; `rule` (its label) and `when` go with every one."""
_RAW_FIELDS = frozenset(("allowed_tools", "tool_fallbacks", "error"))
"""Kept as the span has them: the policy parser and the error flag read raw values."""
_MESSAGE_FIELDS = frozenset(("input", "output"))
COND_KEYS = (
    "attribute",
    "attribute_prefix",
    "name",
    "name_prefix",
    "name_regex",
    "kind",
    "scope",
    "any",
)
SOURCE_KEYS = (
    "attribute",
    "event",
    "log",
    "span_name",
    "genai_events",
    "json",
    "path",
    "args_kwargs",
    "unwrap",
    "role",
)
_PLACES = ("attribute", "event", "log", "span_name", "genai_events")
_KINDS = {"unspecified": 0, "internal": 1, "server": 2, "client": 3, "producer": 4, "consumer": 5}
_MESSAGE_ROLES = ("user", "assistant", "system", "tool")
_SCALAR_TAGS = frozenset((STR_TAG, BOOL_TAG, "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"))


def load_dialects(
    path: str | Path, environ: Mapping[str, str] | None = None
) -> tuple[DeclaredDialect, ...]:
    """A file of dialects (`dialects:` at its top, nothing else); PolicyError lists every
    problem, so `grade --dialects` fails in one line naming the file."""
    return parse_dialects(read_text(path, "a dialect file"), str(Path(path)), environ)


def parse_dialects(
    text: str, source: str = "<dialects>", environ: Mapping[str, str] | None = None
) -> tuple[DeclaredDialect, ...]:
    root = compose(text, source)
    checker = DialectChecker([], source)
    found: tuple[DeclaredDialect, ...] = ()
    if root is None:
        checker.problems.append("<top>: empty file (expected a `dialects:` mapping)")
    else:
        checker.expand_env(root, environ)
        for key, value in checker.mapping("<top>", root, "a mapping with a `dialects` key") or ():
            if key.value != "dialects":
                checker.unknown(key.value, key, ("dialects",))
            else:
                found = checker.section(value)
    if checker.problems:
        raise PolicyError(source, checker.problems)
    if not found:
        raise PolicyError(source, ["declares no dialect"])
    return found


class DialectChecker(Checker):
    """Builds `DeclaredDialect`s from the node tree, adding problems to a shared list."""

    def __init__(self, problems: list[str], source: str) -> None:
        super().__init__(problems)
        self.source = source

    def section(self, node: Node) -> tuple[DeclaredDialect, ...]:
        if is_null(node):
            return ()
        out: list[DeclaredDialect] = []
        builtin = _builtin_names()
        pairs = self.mapping("dialects", node, "a mapping of dialect name to its rules")
        for key, value in pairs or ():
            name = key.value.strip()
            path = f"dialects.{key.value}"
            if not name:
                self.problem(f"dialects.{key.value!r}", key, "empty dialect name")
            elif name in builtin:
                self.problem(path, key, "a built-in dialect has this name; choose another")
            else:
                dialect = self.dialect(path, name, value)
                if dialect is not None:
                    out.append(dialect)
        return tuple(out)

    def dialect(self, path: str, name: str, node: Node) -> DeclaredDialect | None:
        pairs = self.mapping(path, node, "a mapping of `match` and role rules")
        if pairs is None:
            return None
        before = len(self.problems)
        match: Cond | None = None
        rules: list[Rule] = []
        for key, value in pairs:
            where = f"{path}.{key.value}"
            if key.value == "match":
                match = self.cond(where, value)
            elif key.value in ROLES:
                items = value.value if isinstance(value, SequenceNode) else [value]
                for i, item in enumerate(items):
                    at = f"{where}[{i}]" if isinstance(value, SequenceNode) else where
                    label = key.value if len(items) == 1 else f"{key.value}[{i}]"
                    rule = self.rule(at, ROLES[key.value], label, item)
                    if rule is not None:
                        rules.append(rule)
            else:
                self.unknown(where, key, ("match", *ROLES))
        if not rules and len(self.problems) == before:
            self.problem(path, node, f"no rules (give at least one of: {', '.join(ROLES)})")
        labels = [r.label for r in rules]
        for label in {x for x in labels if labels.count(x) > 1}:
            self.problem(path, node, f"two rules are labelled {label!r}")
        if len(self.problems) != before:
            return None
        return DeclaredDialect(name, rules, match, self.source)

    def rule(self, path: str, role: Role, label: str, node: Node) -> Rule | None:
        pairs = self.mapping(path, node, "a mapping with `when` and the fields to read")
        if pairs is None:
            return None
        allowed = FIELDS[role]
        when: Cond | None = None
        fields: dict[str, Field] = {}
        for key, value in pairs:
            where = f"{path}.{key.value}"
            if key.value == "when":
                when = self.cond(where, value)
            elif key.value == "rule":
                text = self.text(where, value)
                label = text or label
            elif key.value in allowed:
                found = self.field(where, value, key.value)
                if found:
                    fields[key.value] = found
            elif any(key.value in f for f in FIELDS.values()):
                which = ", ".join(allowed) or "none"
                self.problem(where, key, f"not a field of a {role.value} rule (fields: {which})")
            else:
                self.unknown(where, key, ("rule", "when", *allowed))
        if when is None:
            if not any(k.value == "when" for k, _ in pairs):
                self.problem(path, node, "missing `when` (the condition for this rule)")
            return None
        return Rule(label, role, when, fields)

    # --- conditions ---------------------------------------------------------------------

    def cond(self, path: str, node: Node) -> Cond | None:
        pairs = self.mapping(path, node, f"a condition ({', '.join(COND_KEYS)})")
        if pairs is None:
            return None
        if not pairs:
            self.problem(path, node, "empty condition (it would hold for every span)")
            return None
        present: tuple[str, ...] = ()
        equals: list[tuple[str, frozenset[str]]] = []
        starts: list[tuple[str, tuple[str, ...]]] = []
        names = scopes = None
        kinds: frozenset[int] | None = None
        prefixes: tuple[str, ...] = ()
        regex: LinearRegex | None = None
        alternatives: list[Cond] = []
        ok = True
        for key, value in pairs:
            where = f"{path}.{key.value}"
            k = key.value
            if k == "attribute" and isinstance(value, MappingNode):
                for attr, wanted in self.mapping(where, value, "attribute: values") or ():
                    texts = self.values(f"{where}.{attr.value}", wanted)
                    ok = ok and texts is not None
                    if texts is not None:
                        equals.append((attr.value, texts))
            elif k == "attribute_prefix":
                for attr, wanted in self.mapping(where, value, "attribute: prefixes") or ():
                    got = self.texts(f"{where}.{attr.value}", wanted)
                    ok = ok and got is not None
                    if got is not None:
                        starts.append((attr.value, tuple(got)))
            elif k == "attribute":
                got = self.texts(where, value)
                ok = ok and got is not None
                present = tuple(got or ())
            elif k in ("name", "scope"):
                got = self.texts(where, value)
                ok = ok and got is not None
                if k == "name":
                    names = frozenset(got or ())
                else:
                    scopes = frozenset(got or ())
            elif k == "name_prefix":
                got = self.texts(where, value)
                ok = ok and got is not None
                prefixes = tuple(got or ())
            elif k == "name_regex":
                regex = self.regex(where, value)
                ok = ok and regex is not None
            elif k == "kind":
                kinds = self.kinds(where, value)
                ok = ok and kinds is not None
            elif k == "any":
                if not isinstance(value, SequenceNode) or not value.value:
                    self.problem(where, value, f"expected a list of conditions, got {kind(value)}")
                    ok = False
                    continue
                for i, item in enumerate(value.value):
                    alt = self.cond(f"{where}[{i}]", item)
                    ok = ok and alt is not None
                    if alt is not None:
                        alternatives.append(alt)
            else:
                self.unknown(where, key, COND_KEYS)
                ok = False
        if not ok:
            return None
        return Cond(
            present,
            tuple(equals),
            tuple(starts),
            names,
            prefixes,
            regex,
            kinds,
            scopes,
            tuple(alternatives),
        )

    def kinds(self, path: str, node: Node) -> frozenset[int] | None:
        words = self.texts(path, node)
        if words is None:
            return None
        bad = [w for w in words if w.lower() not in _KINDS]
        if bad:
            self.problem(
                path, node, f"unknown span kind {bad[0]!r} (expected one of: {', '.join(_KINDS)})"
            )
            return None
        return frozenset(_KINDS[w.lower()] for w in words)

    def regex(self, path: str, node: Node) -> LinearRegex | None:
        text = self.text(path, node)
        if text is None:
            return None
        try:
            return compile_linear(text)
        except RegexError as e:
            self.problem(path, node, f"invalid regular expression (RE2 syntax): {e}")
            return None

    # --- fields ---------------------------------------------------------------------------

    def field(self, path: str, node: Node, name: str) -> Field | None:
        items = node.value if isinstance(node, SequenceNode) else [node]
        if not items:
            self.problem(path, node, "empty list of sources")
            return None
        out: list[Source] = []
        for i, item in enumerate(items):
            at = f"{path}[{i}]" if isinstance(node, SequenceNode) else path
            src = self.source_of(at, item, name)
            if src is not None:
                out.append(src)
        return tuple(out) if len(out) == len(items) else None

    def source_of(self, path: str, node: Node, name: str) -> Source | None:
        decode = name not in _RAW_FIELDS
        if isinstance(node, ScalarNode):
            attr = self.text(path, node)
            return Source(attribute=attr, decode=decode) if attr else None
        pairs = self.mapping(path, node, "an attribute key, or a mapping naming a source")
        if pairs is None:
            return None
        got: dict[str, object] = {}
        ok = True
        for key, value in pairs:
            where = f"{path}.{key.value}"
            k = key.value
            if k in ("attribute", "event", "log"):
                got[k] = self.text(where, value)
            elif k == "span_name":
                got[k] = self.regex(where, value)
            elif k in ("json", "args_kwargs"):
                got[k] = self.flag(where, value)
            elif k == "genai_events":
                on = self.flag(where, value)
                if on is False:
                    self.problem(where, value, "only `true` means anything here")
                elif on and name not in _CONTENT:
                    self.problem(where, key, f"applies to {', '.join(_CONTENT)} only")
                got[k] = True if on and name in _CONTENT else None
            elif k == "path":
                text = self.text(where, value)
                got[k] = tuple(text.split(".")) if text else None
            elif k == "unwrap":
                got[k] = frozenset(self.texts(where, value) or ()) or None
            elif k == "role":
                role = self.text(where, value)
                if role is not None and name not in _MESSAGE_FIELDS:
                    self.problem(where, key, "`role` applies to input and output only")
                    role = None
                elif role is not None and role not in _MESSAGE_ROLES:
                    self.problem(where, value, f"expected one of: {', '.join(_MESSAGE_ROLES)}")
                    role = None
                got[k] = role
            else:
                self.unknown(where, key, SOURCE_KEYS)
                ok = False
                continue
            ok = ok and got[k] is not None
        places = [p for p in _PLACES if p in got]
        if not places:
            self.problem(path, node, f"names no place to read (one of: {', '.join(_PLACES)})")
            return None
        if len(places) > 1 and places != ["attribute", "event"] and places != ["attribute", "log"]:
            self.problem(path, node, f"names two places ({' and '.join(places)}); give one")
            return None
        if not ok:
            return None
        return Source(
            attribute=_opt(got.get("attribute")),
            event=_opt(got.get("event")),
            log=_opt(got.get("log")),
            span_name=got.get("span_name"),  # type: ignore[arg-type]
            decode=bool(got.get("json", decode)),
            path=got.get("path", ()),  # type: ignore[arg-type]
            args_kwargs=bool(got.get("args_kwargs", False)),
            unwrap=got.get("unwrap", frozenset()),  # type: ignore[arg-type]
            role=_opt(got.get("role")),
            genai_events=bool(got.get("genai_events", False)),
        )

    # --- scalars ----------------------------------------------------------------------------

    def text(self, path: str, node: Node) -> str | None:
        if not isinstance(node, ScalarNode) or node.tag != STR_TAG:
            self.problem(path, node, f"expected a string, got {kind(node)}")
            return None
        if not node.value.strip():
            self.problem(path, node, "empty string")
            return None
        return str(node.value)

    def texts(self, path: str, node: Node) -> list[str] | None:
        """One string or a list of them."""
        if isinstance(node, SequenceNode):
            got = [self.text(f"{path}[{i}]", item) for i, item in enumerate(node.value)]
            if not got:
                self.problem(path, node, "empty list")
                return None
            return None if any(g is None for g in got) else [g for g in got if g]
        one = self.text(path, node)
        return None if one is None else [one]

    def values(self, path: str, node: Node) -> frozenset[str] | None:
        """Values an attribute may equal, as `declared._as_text` shows attribute values."""
        items = node.value if isinstance(node, SequenceNode) else [node]
        out: set[str] = set()
        for item in items:
            if not isinstance(item, ScalarNode) or item.tag not in _SCALAR_TAGS:
                self.problem(path, item, f"expected a string, number or boolean, got {kind(item)}")
                return None
            if item.tag == BOOL_TAG:
                out.add("true" if item.value.lower() in ("true", "yes", "on") else "false")
            else:
                out.add(str(item.value))
        if not out:
            self.problem(path, node, "empty list")
            return None
        return frozenset(out)

    def flag(self, path: str, node: Node) -> bool | None:
        if not isinstance(node, ScalarNode) or node.tag != BOOL_TAG:
            self.problem(path, node, f"expected true or false, got {kind(node)}")
            return None
        return node.value.lower() in ("true", "yes", "on")


def _opt(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _builtin_names() -> frozenset[str]:
    return frozenset((*BY_NAME, GENERIC.name))
