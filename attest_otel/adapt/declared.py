"""Dialects declared in YAML: a user's own span vocabulary, read without writing code.

Most teams that instrument an agent by hand, or use a framework no module here knows, name
things their own way (`acme.kind = "tool"`, `acme.tool.args`). The generic reader guesses from
vocabulary; a declared dialect is told. The spec (checked and compiled by `dialect_config`)
is a list of rules, each a condition and the attributes to read; the first rule whose
condition holds decides the span's role, in the order the file lists them, so a user can
put a narrow rule (an output function that is no tool call) before a broad one.

Detection stays on the hot path's budget: conditions are dict lookups, string compares and
at most one precompiled regex on the span name (RE2, linear time: `linear_regex`); nothing
is decoded until a run needs it.
Values are decoded like the modules decode theirs (`loads_lenient`, `messages.py`), which is
what lets a YAML file read a framework's fixtures exactly as its module does.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from attest_otel.adapt import genai
from attest_otel.adapt import messages as m
from attest_otel.adapt.base import (
    ALL,
    ANSWER,
    INPUT,
    OUTPUT,
    SYSTEM,
    TASK,
    TOOLS,
    Exchange,
    Message,
    Role,
    ToolInfo,
    Want,
    captured,
    clean_id,
    loads_lenient,
)
from attest_otel.adapt.linear_regex import LinearRegex
from attest_otel.model import LogRecord, Span

__all__ = ["Cond", "DeclaredDialect", "Rule", "Source"]

_FALSE_WORDS = frozenset(("", "false", "0", "no", "off", "none", "null"))


@dataclass(frozen=True, slots=True)
class Cond:
    """What a span must show for a rule to hold; every part given must hold."""

    present: tuple[str, ...] = ()
    equals: tuple[tuple[str, frozenset[str]], ...] = ()
    """Attribute key -> the texts it may equal (see `_as_text`)."""
    starts: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """Attribute key -> prefixes its (string) value may start with."""
    names: frozenset[str] | None = None
    prefixes: tuple[str, ...] = ()
    regex: LinearRegex | None = None
    kinds: frozenset[int] | None = None
    scopes: frozenset[str] | None = None
    any: tuple[Cond, ...] = ()
    """At least one of these must hold as well."""

    def holds(self, span: Span) -> bool:
        attrs = span.attributes
        for key in self.present:
            if key not in attrs:
                return False
        for key, texts in self.equals:
            value = attrs.get(key)
            if value is None or _as_text(value) not in texts:
                return False
        for key, prefixes in self.starts:
            value = attrs.get(key)
            if not isinstance(value, str) or not value.startswith(prefixes):
                return False
        if self.scopes is not None and span.scope_name not in self.scopes:
            return False
        if self.kinds is not None and span.kind not in self.kinds:
            return False
        if self.names is not None and span.name not in self.names:
            return False
        if self.prefixes and not span.name.startswith(self.prefixes):
            return False
        if self.regex is not None and not self.regex.search(span.name):
            return False
        return not self.any or any(c.holds(span) for c in self.any)


def _as_text(value: Any) -> str:
    """An attribute value as the text a condition compares: MLflow JSON-quotes its strings
    (`"TOOL"`), booleans compare as `true` / `false`."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        if len(value) > 1 and value[0] == '"' and value[-1] == '"':
            try:
                inner = json.loads(value)
            except ValueError:
                return value
            return inner if isinstance(inner, str) else value
        return value
    return str(value)


@dataclass(frozen=True, slots=True)
class Source:
    """One place a value may be: an attribute, a span event's attribute, a log record's body
    or attribute, or a capture of the span name; then how to decode it."""

    attribute: str | None = None
    event: str | None = None
    log: str | None = None
    span_name: LinearRegex | None = None
    decode: bool = True
    path: tuple[str, ...] = ()
    args_kwargs: bool = False
    unwrap: frozenset[str] = frozenset()
    role: str | None = None
    """Message fields: the role of plain text and of messages that name none."""
    genai_events: bool = False
    """Content fields: the GenAI event conventions (per-message events, the operation-details
    event) on the span, else in its log records, read as `genai` reads them."""

    def raw(self, span: Span, logs: Sequence[LogRecord], every: bool = False) -> Any:
        """The undecoded value, None when absent; `every`: a list of all matching events."""
        if self.span_name is not None:
            return self.span_name.capture(span.name) or None
        if self.event is not None:
            values = [
                ev.attributes.get(self.attribute) if self.attribute else ev.attributes
                for ev in span.events
                if ev.name == self.event
            ]
            return _first_or_all(values, every)
        if self.log is not None:
            values = [
                (r.attributes.get(self.attribute) if self.attribute else r.body)
                for r in logs
                if r.event_name == self.log
            ]
            return _first_or_all(values, every)
        if self.attribute is None:
            return None  # genai_events: read whole by `_Reader`
        return span.attributes.get(self.attribute)

    def value(self, raw: Any) -> Any:
        value = loads_lenient(raw) if self.decode else raw
        for step in self.path:
            value = _step(value, step)
            if value is None:
                return None
        if self.args_kwargs:
            value = _call_arguments(value)
        if self.unwrap and isinstance(value, dict) and len(value) == 1:
            ((key, inner),) = value.items()
            if key in self.unwrap:
                value = inner
        return value


def _first_or_all(values: list[Any], every: bool) -> Any:
    values = [v for v in values if v is not None]
    if every:
        return values or None
    return values[0] if values else None


def _step(value: Any, step: str) -> Any:
    """One `path` step into decoded JSON: a key, a list index, or `*` for every item."""
    if isinstance(value, str):
        value = loads_lenient(value)
    if step == "*":
        if not isinstance(value, list):
            return None
        out: list[Any] = []
        for item in value:
            out.extend(item if isinstance(item, list) else [item])
        return out
    if isinstance(value, dict):
        return value.get(step)
    if isinstance(value, list):
        if step.lstrip("-").isdigit() and -len(value) <= int(step) < len(value):
            return value[int(step)]
        # a key after `*`: that key of every item
        picked = [item.get(step) for item in value if isinstance(item, dict)]
        return [p for p in picked if p is not None] or None
    return None


def _call_arguments(value: Any) -> Any:
    """A Python call recorded as `{"args": [...], "kwargs": {...}}`: the keyword arguments,
    or the one positional argument (OpenLLMetry's decorator spans)."""
    if isinstance(value, dict) and value and set(value) <= {"args", "kwargs"}:
        args = value.get("args") or []
        kwargs = value.get("kwargs") or {}
        if not args and isinstance(kwargs, dict):
            return kwargs
        if isinstance(args, list) and len(args) == 1 and not kwargs:
            return args[0]
    return value


Field = tuple[Source, ...]
"""Sources in order: the first that has a value wins."""


@dataclass(frozen=True, slots=True)
class Rule:
    """One role's reading: when it holds, and where each part of the span is."""

    label: str
    role: Role
    when: Cond
    fields: dict[str, Field] = field(default_factory=dict)


_DEFAULT_POLICY: dict[str, Field] = {
    "allowed_tools": (Source(attribute="attest.allowed_tools", decode=False),),
    "tool_fallbacks": (Source(attribute="attest.tool_fallbacks", decode=False),),
}


@dataclass(frozen=True, slots=True)
class Markers:
    keys: tuple[str, ...]
    scopes: tuple[str, ...]
    names: tuple[str, ...]
    """Span names or name prefixes; "" means any name."""


class DeclaredDialect:
    """A `Dialect` read from a YAML spec (`dialect_config.parse_dialects` builds them)."""

    def __init__(
        self,
        name: str,
        rules: Sequence[Rule],
        match: Cond | None = None,
        source: str = "",
        *,
        capture: str | None = None,
    ) -> None:
        self.name = name
        self.rules = tuple(rules)
        self.match = match
        self.source = source
        """The file that declared it, for messages."""
        self.capture = capture
        """The setting that turns its content capture on (a built-in's `DialectSpec.capture`)."""

    def __repr__(self) -> str:
        return f"DeclaredDialect({self.name!r}, {len(self.rules)} rules)"

    def _rule(self, span: Span) -> Rule | None:
        if self.match is not None and not self.match.holds(span):
            return None
        for rule in self.rules:
            if rule.when.holds(span):
                return rule
        return None

    def markers(self) -> Markers:
        """What any span of this dialect must show, for a test that cannot decode spans (the
        sidecar decides on the raw bytes which traces to hold): the attribute keys, scope
        names and span names its conditions look at. A span that shows none of them cannot
        match, so holding every trace that shows one is enough."""
        conds = [r.when for r in self.rules]
        if self.match is not None:
            conds = [self.match]  # every span of the dialect passes `match` first
        keys: set[str] = set()
        scopes: set[str] = set()
        names: set[str] = set()
        while conds:
            cond = conds.pop()
            keys.update(cond.present)
            keys.update(k for k, _ in cond.equals)
            keys.update(k for k, _ in cond.starts)
            scopes.update(cond.scopes or ())
            names.update(cond.names or ())
            names.update(cond.prefixes)
            if cond.regex is not None:
                names.add("")  # any name may match: only keys and scopes can narrow it
            conds.extend(cond.any)
        return Markers(tuple(sorted(keys)), tuple(sorted(scopes)), tuple(sorted(names)))

    def rule_for(self, span: Span) -> str | None:
        """The label of the rule that decides the span, for `inspect`; `match` when only the
        dialect's `match` holds (the span is the dialect's, but no run needs it)."""
        rule = self._rule(span)
        if rule is not None:
            return rule.label
        if self.match is not None and self.match.holds(span):
            return "match"
        return None

    def detect(self, span: Span) -> Role | None:
        rule = self._rule(span)
        if rule is not None:
            return rule.role
        if self.match is not None and self.match.holds(span):
            return Role.OTHER
        return None

    def agent_name(self, span: Span) -> str | None:
        rule = self._rule(span)
        return _text(_read(rule, "name", span)) if rule is not None else None

    def tool(self, span: Span) -> ToolInfo:
        rule = self._rule(span)
        if rule is None:
            return ToolInfo(name=None)
        raw_args = _raw(rule, "arguments", span)
        raw_out = _raw(rule, "result", span)
        flag = _truthy(_raw(rule, "error", span))
        error_text = _text(_read(rule, "error_message", span))
        return ToolInfo(
            name=_text(_read(rule, "name", span)),
            call_id=clean_id(_read(rule, "call_id", span)),
            arguments=_decoded(raw_args),
            arguments_captured=captured(raw_args[1]) if raw_args else False,
            output=_decoded(raw_out),
            output_captured=captured(raw_out[1]) if raw_out else False,
            handoff_target=_text(_read(rule, "target", span)),
            is_error=True if flag else None,
            error_text=error_text,
        )

    def exchange(self, span: Span, logs: Sequence[LogRecord], want: Want = ALL) -> Exchange:
        rule = self._rule(span)
        ex = Exchange()
        if rule is None:
            return ex
        read = _Reader(rule, span, logs, want)
        if TASK in want:
            ex.task = _text(read.value("task", TASK))
        if ANSWER in want:
            ex.answer = _text(read.value("answer", ANSWER))
        if SYSTEM in want:
            ex.system = _system(read.value("system", SYSTEM))
        if TOOLS in want:
            tools = read.value("tools", TOOLS)
            ex.tools = m.parse_tool_definitions(tools) if tools is not None else None
        need_in = (
            INPUT in want
            or (TASK in want and ex.task is None)
            or (SYSTEM in want and ex.system is None)
        )
        if need_in:
            ex.input = read.messages("input", INPUT, "user")
        if OUTPUT in want or (ANSWER in want and ex.answer is None):
            ex.output = read.messages("output", OUTPUT, "assistant")
        if TASK in want and ex.task is None:
            ex.task = m.last_user_text(ex.input)
        if ANSWER in want and ex.answer is None:
            ex.answer = m.assistant_text(ex.output)
        if SYSTEM in want and ex.system is None:
            ex.system = m.system_text(ex.input)
        return ex

    def policy_values(self, span: Span) -> tuple[Any, Any]:
        rule = self._rule(span)
        fields = rule.fields if rule is not None else {}
        allowed = fields.get("allowed_tools", _DEFAULT_POLICY["allowed_tools"])
        fallbacks = fields.get("tool_fallbacks", _DEFAULT_POLICY["tool_fallbacks"])
        return _first_raw(allowed, span, ()), _first_raw(fallbacks, span, ())


def _first_raw(sources: Field, span: Span, logs: Sequence[LogRecord]) -> Any:
    for source in sources:
        raw = source.raw(span, logs)
        if raw is not None:
            return raw
    return None


def _raw(
    rule: Rule, name: str, span: Span, logs: Sequence[LogRecord] = ()
) -> tuple[Source, Any] | None:
    """The first source of a field that has a value, with that value undecoded."""
    for source in rule.fields.get(name, ()):
        raw = source.raw(span, logs)
        if raw is not None:
            return source, raw
    return None


def _decoded(found: tuple[Source, Any] | None) -> Any:
    if found is None or not captured(found[1]):
        return None
    return found[0].value(found[1])


def _read(rule: Rule, name: str, span: Span, logs: Sequence[LogRecord] = ()) -> Any:
    return _decoded(_raw(rule, name, span, logs))


def _truthy(found: tuple[Source, Any] | None) -> bool:
    """An error flag: `true`, a non-zero number, or any text but `false` / `0` / `no`."""
    if found is None:
        return False
    value = found[1]
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return value != 0
    return str(value).strip().lower() not in _FALSE_WORDS


def _text(value: Any) -> str | None:
    """Text as a run shows it: a string, a number, or the one text of a one-key object
    (`{"task": "..."}`); anything else is no text."""
    if isinstance(value, str):
        return value or None
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, dict) and len(value) == 1:
        only = next(iter(value.values()))
        if isinstance(only, str) and only:
            return only
    return None


def _system(value: Any) -> str | None:
    """System instructions as text, parts, or a message list (its system messages)."""
    if isinstance(value, list) and any(isinstance(v, dict) and "role" in v for v in value):
        return m.system_text(m.parse_messages(value))
    return m.parse_system(value)


class _Reader:
    """One span's content fields, the GenAI events parsed at most once for all of them."""

    def __init__(self, rule: Rule, span: Span, logs: Sequence[LogRecord], want: Want) -> None:
        self.rule, self.span, self.logs, self.want = rule, span, logs, want
        self._events: Exchange | None = None

    def events(self) -> Exchange:
        if self._events is None:
            span, logs = self.span, self.logs
            found = Exchange()
            if span.events:
                genai.fill_from_events(
                    found, ((e.name, e.attributes) for e in span.events), self.want
                )
            if logs and (found.input is None or found.output is None):
                genai.fill_from_events(
                    found, ((r.event_name, genai._log_body(r)) for r in logs), self.want
                )
            self._events = genai.finish(found, self.want)
        return self._events

    def value(self, name: str, part: str) -> Any:
        for source in self.rule.fields.get(name, ()):
            if source.genai_events:
                found = getattr(self.events(), part)
                if found is not None:
                    return found
                continue
            raw = source.raw(self.span, self.logs)
            if raw is not None:
                return source.value(raw) if captured(raw) else None
        return None

    def messages(self, name: str, part: str, default_role: str) -> list[Message] | None:
        for source in self.rule.fields.get(name, ()):
            if source.genai_events:
                found: list[Message] | None = getattr(self.events(), part)
                if found is not None:
                    return found
                continue
            raws = source.raw(self.span, self.logs, every=True)
            if raws is None:
                continue
            if source.event is None and source.log is None:
                raws = [raws]  # one attribute holds the whole list
            out: list[Message] = []
            role = source.role or default_role
            for raw in raws:
                if captured(raw):
                    out.extend(_as_messages(source.value(raw), role))
            return out
        return None


def _as_messages(value: Any, role: str) -> list[Message]:
    """Messages in a value; plain text is one message of the source's role, and messages
    that name no role take it (a completion kept as `[{"content": ...}]`)."""
    if value is None:
        return []
    if isinstance(value, str):
        parsed = m.parse_messages(value) if value.lstrip()[:1] in ("[", "{") else None
        if parsed is None:
            return [Message(role, value)] if value else []
        value = parsed
    if isinstance(value, dict) and "role" not in value and "messages" not in value:
        return []
    msgs = (
        value
        if isinstance(value, list) and all(isinstance(v, Message) for v in value)
        else (m.parse_messages(value) or [])
    )
    for msg in msgs:
        if not msg.role:
            msg.role = role
    return msgs
