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

The file's shape is a set of pydantic models (`yamlfile.model` says how their problems keep key
path and line); `compile_dialects` turns the checked models into the `declared` types that
detection runs. The models are also the published JSON Schema (docs/schemas/).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BeforeValidator, PlainValidator, create_model, field_validator
from pydantic import Field as PydanticField

from attest_otel.adapt.base import Role
from attest_otel.adapt.declared import Cond, DeclaredDialect, Field, Rule, Source
from attest_otel.adapt.detect import BY_NAME
from attest_otel.adapt.generic import GENERIC
from attest_otel.adapt.linear_regex import LinearRegex, RegexError, compile_linear
from attest_otel.errors import PolicyError
from attest_otel.yamlfile.model import (
    FileModel,
    Loc,
    expect,
    fail,
    kind_of,
    one_or_many,
    read_model,
    refuse_null,
)
from attest_otel.yamlfile.read import read_text

__all__ = [
    "DialectFile",
    "DialectsSection",
    "compile_dialects",
    "load_dialects",
    "parse_dialects",
]

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
_PLACES = ("attribute", "event", "log", "span_name", "genai_events")
_KINDS = {"unspecified": 0, "internal": 1, "server": 2, "client": 3, "producer": 4, "consumer": 5}
_MESSAGE_ROLES = ("user", "assistant", "system", "tool")


# --- values ---------------------------------------------------------------------------------


def _text(value: Any) -> str:
    if not isinstance(value, str):
        fail(f"expected a string, got {kind_of(value)}")
    if not value.strip():
        fail("empty string")
    return value


def _flag(value: Any) -> bool:
    if not isinstance(value, bool):
        fail(f"expected true or false, got {kind_of(value)}")
    return value


def _regex(value: Any) -> LinearRegex:
    try:
        return compile_linear(_text(value))
    except RegexError as e:
        fail(f"invalid regular expression (RE2 syntax): {e}")


Text = Annotated[str, PlainValidator(_text, json_schema_input_type=str)]
Flag = Annotated[bool, PlainValidator(_flag, json_schema_input_type=bool)]
Regex = Annotated[LinearRegex, PlainValidator(_regex, json_schema_input_type=str)]
_texts = one_or_many(Text)
Texts = Annotated[tuple[str, ...], PlainValidator(_texts, json_schema_input_type=str | list[str])]
"""One string or a list of them."""


def _kinds(value: Any) -> frozenset[int]:
    words = _texts(value)
    bad = [w for w in words if w.lower() not in _KINDS]
    if bad:
        fail(f"unknown span kind {bad[0]!r} (expected one of: {', '.join(_KINDS)})")
    return frozenset(_KINDS[w.lower()] for w in words)


def _values(value: Any) -> frozenset[str]:
    """Values an attribute may equal, as `declared._as_text` shows attribute values."""
    out: set[str] = set()
    for item in value if isinstance(value, list) else [value]:
        if isinstance(item, bool):
            out.add("true" if item else "false")
        elif isinstance(item, str | int | float):
            out.add(str(item))
        else:
            fail(f"expected a string, number or boolean, got {kind_of(item)}")
    if not out:
        fail("empty list")
    return frozenset(out)


_Scalar = str | int | float | bool
SpanKind = Literal["unspecified", "internal", "server", "client", "producer", "consumer"]
Kinds = Annotated[
    frozenset[int], PlainValidator(_kinds, json_schema_input_type=SpanKind | list[SpanKind])
]
Values = Annotated[
    frozenset[str], PlainValidator(_values, json_schema_input_type=_Scalar | list[_Scalar])
]
_equals = one_or_many(dict[str, Values])


def _attribute(value: Any) -> tuple[str, ...] | dict[str, frozenset[str]]:
    """`attribute: key` (or a list of keys) is present; `attribute: {key: value}` equals."""
    if isinstance(value, dict):
        (found,) = _equals(value)
        return dict(found)
    return tuple(_texts(value))


# --- conditions -----------------------------------------------------------------------------


class CondModel(FileModel):
    """Which spans a rule (or a dialect's `match`) is about; every key given must hold."""

    what: ClassVar[str] = (
        "a condition (attribute, attribute_prefix, name, name_prefix, name_regex, kind, scope, any)"
    )

    attribute: Annotated[
        tuple[str, ...] | dict[str, frozenset[str]] | None,
        PlainValidator(
            _attribute, json_schema_input_type=str | list[str] | dict[str, _Scalar | list[_Scalar]]
        ),
    ] = PydanticField(
        None,
        description="The span has these attributes; {KEY: VALUE}: the attribute equals a value.",
    )
    attribute_prefix: Annotated[
        dict[str, Texts] | None, BeforeValidator(expect(dict, "attribute: prefixes"))
    ] = PydanticField(
        None,
        description="{KEY: PREFIX}: the attribute is a string starting with a prefix.",
    )
    name: Texts | None = PydanticField(
        None, description="The span name equals it (or one of a list)."
    )
    name_prefix: Texts | None = PydanticField(
        None, description="The span name starts with it (or one of a list)."
    )
    name_regex: Regex | None = PydanticField(
        None, description="The regular expression (RE2 syntax) is found in the span name."
    )
    kind: Kinds | None = PydanticField(None, description="The span kind (or one of a list).")
    scope: Texts | None = PydanticField(
        None, description="The instrumentation scope name equals it (or one of a list)."
    )
    any: Annotated[
        tuple[CondModel, ...] | None,
        BeforeValidator(expect(list, "a list of conditions", empty=False)),
    ] = PydanticField(None, description="At least one of these conditions holds.")

    @classmethod
    def check_raw(cls, data: Mapping[str, Any]) -> list[tuple[Loc, str]]:
        if not data:
            return [((), "empty condition (it would hold for every span)")]
        return []

    def compile(self) -> Cond:
        attribute = self.attribute
        return Cond(
            present=attribute if isinstance(attribute, tuple) else (),
            equals=tuple(attribute.items()) if isinstance(attribute, dict) else (),
            starts=tuple((self.attribute_prefix or {}).items()),
            names=None if self.name is None else frozenset(self.name),
            prefixes=self.name_prefix or (),
            regex=self.name_regex,
            kinds=self.kind,
            scopes=None if self.scope is None else frozenset(self.scope),
            any=tuple(c.compile() for c in self.any or ()),
        )


# --- where a field's value is read ----------------------------------------------------------


class SourceModel(FileModel):
    """One place a field is read from; a bare string is an attribute key."""

    what: ClassVar[str] = "an attribute key, or a mapping naming a source"
    content: ClassVar[bool] = False
    """`genai_events` applies (the content fields)."""
    message: ClassVar[bool] = False
    """`role` applies (input and output)."""
    raw: ClassVar[bool] = False
    """Not decoded as JSON unless `json: true` (`_RAW_FIELDS`)."""

    attribute: Text | None = PydanticField(
        None, description="A span attribute (with event or log: that record's attribute)."
    )
    event: Text | None = PydanticField(
        None,
        description="A span event's attributes (input/output take every such event, in order).",
    )
    log: Text | None = PydanticField(
        None,
        description="A log record with this event name tied to the span: its body or an attribute.",
    )
    span_name: Regex | None = PydanticField(
        None, description="The first group the regular expression captures from the span name."
    )
    genai_events: Flag | None = PydanticField(
        None,
        description="true (content fields only): the OTel GenAI events on the span or in its logs.",
    )
    json_: Flag | None = PydanticField(
        None, alias="json", description="false: keep a string as it is (JSON is decoded)."
    )
    path: Text | None = PydanticField(
        None,
        description="Walk into the decoded value: keys, list indexes, * for every item.",
    )
    args_kwargs: Flag | None = PydanticField(
        None, description="true: a Python call record {args, kwargs} becomes its keyword arguments."
    )
    unwrap: Texts | None = PydanticField(
        None, description="An object with one of these as its only key becomes that key's value."
    )
    role: Text | None = PydanticField(
        None,
        description="input/output only: the role of plain text and of messages that name none.",
    )

    @classmethod
    def scalar(cls, value: Any) -> dict[str, Any]:
        if isinstance(value, list):
            super().scalar(value)
        return {"attribute": _text(value)}

    @classmethod
    def check_raw(cls, data: Mapping[str, Any]) -> list[tuple[Loc, str]]:
        places = [p for p in _PLACES if p in data]
        if not places:
            return [((), f"names no place to read (one of: {', '.join(_PLACES)})")]
        if len(places) > 1 and places not in (["attribute", "event"], ["attribute", "log"]):
            return [((), f"names two places ({' and '.join(places)}); give one")]
        return []

    @field_validator("genai_events")
    @classmethod
    def _genai_events(cls, on: bool) -> bool:
        if not on:
            fail("only `true` means anything here")
        if not cls.content:
            fail(f"applies to {', '.join(_CONTENT)} only", "key_field")
        return on

    @field_validator("role")
    @classmethod
    def _role(cls, role: str) -> str:
        if not cls.message:
            fail("`role` applies to input and output only", "key_field")
        if role not in _MESSAGE_ROLES:
            fail(f"expected one of: {', '.join(_MESSAGE_ROLES)}")
        return role

    def compile(self) -> Source:
        return Source(
            attribute=self.attribute,
            event=self.event,
            log=self.log,
            span_name=self.span_name,
            decode=(not self.raw) if self.json_ is None else self.json_,
            path=tuple(self.path.split(".")) if self.path else (),
            args_kwargs=bool(self.args_kwargs),
            unwrap=frozenset(self.unwrap or ()),
            role=self.role,
            genai_events=bool(self.genai_events),
        )


class PlainSource(SourceModel):
    pass


class RawSource(SourceModel):
    raw: ClassVar[bool] = True


class ContentSource(SourceModel):
    content: ClassVar[bool] = True


class MessageSource(SourceModel):
    content: ClassVar[bool] = True
    message: ClassVar[bool] = True


def _source_model(name: str) -> type[SourceModel]:
    if name in _MESSAGE_FIELDS:
        return MessageSource
    if name in _CONTENT:
        return ContentSource
    if name in _RAW_FIELDS:
        return RawSource
    return PlainSource


# --- rules and dialects ---------------------------------------------------------------------


class RuleModel(FileModel):
    """What a span of one role is (`when`) and where each of its fields is read."""

    what: ClassVar[str] = "a mapping with `when` and the fields to read"
    required: ClassVar[Mapping[str, str]] = {"when": "missing `when` (the condition for this rule)"}
    role: ClassVar[Role] = Role.OTHER

    rule: Text | None = PydanticField(
        None, description="The name inspect shows (default: the role, or role[i] in a list)."
    )
    when: CondModel = PydanticField(description="The condition a span must meet for this rule.")

    @classmethod
    def unknown_key(cls, name: str) -> str:
        if any(name in f for f in FIELDS.values()):
            which = ", ".join(FIELDS[cls.role]) or "none"
            return f"not a field of a {cls.role.value} rule (fields: {which})"
        return super().unknown_key(name)

    def compile(self, label: str) -> Rule:
        fields: dict[str, Field] = {}
        for name in FIELDS[self.role]:
            sources: tuple[SourceModel, ...] | None = getattr(self, name)
            if sources is not None:
                fields[name] = tuple(s.compile() for s in sources)
        return Rule(self.rule or label, self.role, self.when.compile(), fields)


def _written(source: type[SourceModel]) -> Any:
    """How a field's sources may be written: an attribute key, a mapping, or a list of them
    (for the published JSON Schema)."""
    one: Any = str | source
    return one | list[one]


def _rule_model(key: str, role: Role) -> type[RuleModel]:
    fields: dict[str, Any] = {}
    for name in FIELDS[role]:
        source = _source_model(name)
        check = one_or_many(source, empty="empty list of sources")
        fields[name] = (
            Annotated[
                tuple[source, ...] | None,  # type: ignore[valid-type]
                PlainValidator(check, json_schema_input_type=_written(source)),
            ],
            None,
        )
    model: type[RuleModel] = create_model(f"{key.title()}Rule", __base__=RuleModel, **fields)
    model.role = role
    return model


_RULES = {key: _rule_model(key, role) for key, role in ROLES.items()}


def _rules(key: str) -> Any:
    model = _RULES[key]
    return Annotated[
        tuple[model, ...] | None,  # type: ignore[valid-type]
        PlainValidator(
            one_or_many(model, empty=None),
            json_schema_input_type=model | list[model],  # type: ignore[valid-type]
        ),
    ]


class DialectModel(FileModel):
    """One declared dialect: the spans it owns (`match`) and a rule per role it reads."""

    what: ClassVar[str] = "a mapping of `match` and role rules"

    match: Annotated[CondModel | None, BeforeValidator(refuse_null(CondModel.what))] = (
        PydanticField(None, description="The dialect's spans: matched by no rule, read as nothing.")
    )
    agent: _rules("agent") = None  # type: ignore[valid-type]
    tool: _rules("tool") = None  # type: ignore[valid-type]
    model: _rules("model") = None  # type: ignore[valid-type]
    handoff: _rules("handoff") = None  # type: ignore[valid-type]
    workflow: _rules("workflow") = None  # type: ignore[valid-type]
    other: _rules("other") = None  # type: ignore[valid-type]

    def labelled(self) -> list[tuple[str, RuleModel]]:
        """Each rule with its label: the role, `role[i]` in a list, or its own `rule:`."""
        out: list[tuple[str, RuleModel]] = []
        for key in (k for k in self._given if k in ROLES):
            rules: tuple[RuleModel, ...] = getattr(self, key) or ()
            for i, rule in enumerate(rules):
                label = key if len(rules) == 1 else f"{key}[{i}]"
                out.append((rule.rule or label, rule))
        return out

    def check_whole(self) -> list[tuple[Loc, str]]:
        labels = [label for label, _ in self.labelled()]
        if not labels:
            return [((), f"no rules (give at least one of: {', '.join(ROLES)})")]
        twice = sorted({x for x in labels if labels.count(x) > 1})
        return [((), f"two rules are labelled {label!r}") for label in twice]

    def compile(self, name: str, source: str) -> DeclaredDialect:
        rules = [rule.compile(label) for label, rule in self.labelled()]
        match = None if self.match is None else self.match.compile()
        return DeclaredDialect(name, rules, match, source)


def _dialect_name(name: Any) -> str:
    if not str(name).strip():
        fail("empty dialect name")
    if str(name).strip() in frozenset((*BY_NAME, GENERIC.name)):
        fail("a built-in dialect has this name; choose another")
    return str(name)


DialectName = Annotated[str, PlainValidator(_dialect_name, json_schema_input_type=str)]
DialectsSection = Annotated[
    dict[DialectName, DialectModel],
    BeforeValidator(expect(dict, "a mapping of dialect name to its rules")),
]
"""The `dialects:` section, of a dialect file or of a policy."""


class DialectFile(FileModel):
    """A file of dialects: `dialects:` at its top, nothing else."""

    what: ClassVar[str] = "a mapping with a `dialects` key"

    dialects: DialectsSection | None = PydanticField(
        None, description="Dialect name -> its `match` and rules by role."
    )


def compile_dialects(
    section: Mapping[str, DialectModel] | None, source: str
) -> tuple[DeclaredDialect, ...]:
    """The checked section as the dialects detection runs; `source` names the file."""
    return tuple(model.compile(name.strip(), source) for name, model in (section or {}).items())


def load_dialects(
    path: str | Path, environ: Mapping[str, str] | None = None
) -> tuple[DeclaredDialect, ...]:
    """A file of dialects (`dialects:` at its top, nothing else); PolicyError lists every
    problem, so `grade --dialects` fails in one line naming the file."""
    return parse_dialects(read_text(path, "a dialect file"), str(Path(path)), environ)


def parse_dialects(
    text: str, source: str = "<dialects>", environ: Mapping[str, str] | None = None
) -> tuple[DeclaredDialect, ...]:
    empty = ["<top>: empty file (expected a `dialects:` mapping)"]
    checked = read_model(DialectFile, text, source, environ, empty=empty)
    found = compile_dialects(checked.dialects if checked else None, source)
    if not found:
        raise PolicyError(source, ["declares no dialect"])
    return found
