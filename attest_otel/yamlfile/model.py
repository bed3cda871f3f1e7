"""A YAML file checked by a pydantic model, with the problems people get from `yamlfile.read`.

A user fixes a file in one pass only when every problem is listed at once with its key path
*and* line. pydantic lists every problem with its location in the data, but the data has
lost its lines; so the file is read as a node tree (`yamlfile.read.compose`), `${env:...}` is
expanded in its values (`yamlfile.read` says how), and the tree is turned into plain data while
each key path's line is noted (`Marks`). The model checks the data; `problems` turns its
ValidationError back into "key.path (line N): what is wrong", in the order of the file,
a node's own problems after those inside it.

`FileModel` is the base of every section: an unknown key is named with the nearest known one
(a typo, usually), and a section that is not a mapping says what it should have been.
"""

from __future__ import annotations

import datetime
import difflib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, NoReturn, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    PrivateAttr,
    TypeAdapter,
    ValidationError,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError
from pydantic_core.core_schema import ValidatorFunctionWrapHandler
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from attest_otel.errors import PolicyError
from attest_otel.yamlfile.read import STR_TAG, Checker, compose

__all__ = [
    "FileModel",
    "Loc",
    "Marks",
    "expect",
    "fail",
    "kind_of",
    "one_or_many",
    "problems",
    "read_data",
    "read_model",
    "refuse_null",
]

Loc = tuple[str | int, ...]
M = TypeVar("M", bound=BaseModel)

_KEY = "key_"
"""Error types starting so are about a key, and name the key's line, not its value's."""
_SELF = 1 << 30
"""Sorts a node's own problem after the problems inside it."""
_CONSTRUCTOR = SafeConstructor()


def fail(text: str, kind: str = "config") -> NoReturn:
    """Refuse a value from inside a validator; `text` is the problem as the user reads it."""
    raise PydanticCustomError(kind, "{text}", {"text": text})


def kind_of(value: object) -> str:
    """What a value is, in the words a problem uses (as `yamlfile.read.kind` says of a node)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, datetime.date):
        return "a timestamp"
    if isinstance(value, bytes):
        return "a binary"
    return f"a {type(value).__name__}"


def refuse_null(what: str) -> Callable[[Any], Any]:
    """A before-validator for a key that may be left out but not written empty: `key:` with
    nothing after it is a problem naming what belongs there, never "not set"."""

    def check(value: Any) -> Any:
        if value is None:
            fail(f"expected {what}, got null")
        return value

    return check


def expect(kind: type, what: str, *, empty: bool = True) -> Callable[[Any], Any]:
    """A before-validator: the value is a `kind` (list or dict), else a problem saying what
    belongs there (`empty=False`: an empty one too)."""

    def check(value: Any) -> Any:
        if not isinstance(value, kind) or not (empty or value):
            fail(f"expected {what}, got {kind_of(value)}")
        return value

    return check


def one_or_many(item: Any, *, empty: str | None = "empty list") -> Callable[[Any], Any]:
    """A plain validator for "one item, or a list of them" (a tuple either way): a list's
    problems name the index (`key[1]`), a single item's the key alone, as the file reads.
    `empty`: the problem with an empty list (None: an empty list is fine)."""
    built: list[tuple[TypeAdapter[Any], TypeAdapter[Any]]] = []

    def check(value: Any) -> Any:
        if not built:  # built when first asked, as `FileModel`'s schemas are
            built.append((TypeAdapter(item), TypeAdapter(tuple[item, ...])))
        one, many = built[0]
        if isinstance(value, list):
            if not value and empty is not None:
                fail(empty)
            return many.validate_python(value)
        return (one.validate_python(value),)

    return check


def _details(loc: Loc, kind: str, text: str, value: Any = None) -> InitErrorDetails:
    return {"type": PydanticCustomError(kind, "{text}", {"text": text}), "loc": loc, "input": value}


class _Known(dict[str, Any]):
    """A mapping's data once its unknown keys are taken out, handed on to pydantic."""


class FileModel(BaseModel):
    """A mapping in a user's file. Subclasses say what they are (`what`), which missing keys
    are problems of their own (`required`), and may add checks of the whole mapping."""

    # `defer_build`: a schema is built when a file is first checked against it, not at
    # import; most commands read no policy, dialect or config file at all.
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, defer_build=True)

    _given: tuple[str, ...] = PrivateAttr(default=())
    """The keys the file gave, in its order (rules are tried in the order they are written)."""

    what: ClassVar[str] = "a mapping"
    required: ClassVar[Mapping[str, str]] = {}
    """A required key -> the problem when it is left out (named at the mapping's line)."""

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        return tuple(f.alias or name for name, f in cls.model_fields.items())

    @classmethod
    def unknown_key(cls, name: str) -> str:
        """The problem with a key this mapping does not take."""
        allowed = cls.keys()
        close = difflib.get_close_matches(name, allowed, n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"expected one of: {', '.join(allowed)}"
        return f"unknown key ({hint})"

    @classmethod
    def scalar(cls, value: Any) -> dict[str, Any]:
        """The mapping a value that is not one stands for; by default a problem."""
        fail(f"expected {cls.what}, got {kind_of(value)}")

    @classmethod
    def check_raw(cls, data: Mapping[str, Any]) -> list[tuple[Loc, str]]:
        """Problems of the mapping as written, found whatever else is wrong in it."""
        return []

    def check_whole(self) -> list[tuple[Loc, str]]:
        """Problems of the mapping once every value in it is valid."""
        return []

    @model_validator(mode="wrap")
    @classmethod
    def _every_problem(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        if isinstance(data, cls):
            return data
        if isinstance(data, _Known):
            return handler(data)  # a model that refers to itself may see its data twice
        if not isinstance(data, dict):
            data = cls.scalar(data)
        keys = cls.keys()
        found = [
            _details((k,), f"{_KEY}unknown", cls.unknown_key(k), v)
            for k, v in data.items()
            if k not in keys
        ]
        found += [_details(loc, "config", text) for loc, text in cls.check_raw(data)]
        model = None
        try:
            model = handler(_Known((k, v) for k, v in data.items() if k in keys))
        except ValidationError as e:
            for d in e.errors(include_url=False):
                loc = tuple(d["loc"])
                if d["type"] == "missing" and len(loc) == 1 and loc[0] in cls.required:
                    found.append(_details((), "config", cls.required[str(loc[0])]))
                else:
                    found.append(_details(loc, d["type"], d["msg"], d.get("input")))
        if model is not None and not found:
            model._given = tuple(data)
            found += [_details(loc, "config", text) for loc, text in model.check_whole()]
        if found:
            raise ValidationError.from_exception_data(cls.__name__, found)
        return model


# --- the file as plain data, each key path's line noted ------------------------------------


@dataclass
class Marks:
    """Where each key path (a pydantic `loc`) is in the file; `order` sorts problems as the
    file reads."""

    lines: dict[Loc, int] = field(default_factory=dict)
    key_lines: dict[Loc, int] = field(default_factory=dict)
    order: dict[Loc, tuple[int, ...]] = field(default_factory=dict)
    found: list[tuple[tuple[int, ...], str]] = field(default_factory=list)
    """Problems of the YAML itself (duplicate keys, unset variables), with their order."""
    unresolved: set[str] = field(default_factory=set)


def key_path(loc: Iterable[str | int]) -> str:
    """`agents.billing.allowed_tools[0]`; a blank key is shown quoted, `agents.''`."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            shown = part if part.strip() else repr(part)
            out = f"{out}.{shown}" if out else shown
    return out or "<top>"


class _Reader:
    def __init__(self, environ: Mapping[str, str] | None) -> None:
        self.marks = Marks()
        self.environ = environ
        self.checker = Checker()

    def problem(self, loc: Loc, node: Node, text: str) -> None:
        where = f"{key_path(loc)} (line {node.start_mark.line + 1})"
        self.marks.found.append(((*self.marks.order.get(loc, ()), _SELF), f"{where}: {text}"))

    def value(self, node: Node, loc: Loc, order: tuple[int, ...]) -> Any:
        self.marks.lines[loc] = node.start_mark.line + 1
        self.marks.order[loc] = order
        if isinstance(node, MappingNode):
            out: dict[str, Any] = {}
            for i, (key, item) in enumerate(node.value):
                here: Loc = (*loc, str(getattr(key, "value", "?")))
                self.marks.order.setdefault(here, (*order, i))
                self.marks.key_lines.setdefault(here, key.start_mark.line + 1)
                if not isinstance(key, ScalarNode) or key.tag != STR_TAG:
                    text = "expected a string key (quote it to make it one)"
                    self.problem(here, key, text)
                elif key.value in out:
                    self.problem(here, key, "duplicate key")
                else:
                    out[key.value] = self.value(item, here, (*order, i))
            return out
        if isinstance(node, SequenceNode):
            return [self.value(item, (*loc, i), (*order, i)) for i, item in enumerate(node.value)]
        if isinstance(node, ScalarNode) and "$" in node.value:
            path = key_path(loc)
            before = len(self.checker.problems)
            self.checker.expand_scalar(node, self.environ, path)
            for text in self.checker.problems[before:]:
                self.marks.found.append(((*order, _SELF), text))
            self.marks.unresolved |= self.checker.unresolved
        return _CONSTRUCTOR.construct_object(node, deep=True)


def problems(error: ValidationError, marks: Marks) -> list[str]:
    """The model's ValidationError as the project's problems: key path, line, what is wrong;
    with the YAML's own problems, in the file's order."""
    found = list(marks.found)
    for d in error.errors(include_url=False):
        loc: Loc = tuple(d["loc"])
        about_key = d["type"].startswith(_KEY) or (bool(loc) and loc[-1] == "[key]")
        if loc and loc[-1] == "[key]":
            loc = loc[:-1]
        path = key_path(loc)
        if path in marks.unresolved:
            continue  # its ${env:...} was reported already
        known = loc
        while known and known not in marks.lines:
            known = known[:-1]
        line = (marks.key_lines if about_key else marks.lines).get(known) or marks.lines.get(known)
        where = f"{path} (line {line})" if line else path
        found.append(((*marks.order.get(known, ()), _SELF), f"{where}: {d['msg']}"))
    found.sort(key=lambda item: item[0])
    return [text for _, text in found]


def read_data(
    text: str, source: str, environ: Mapping[str, str] | None = None
) -> tuple[Any, Marks] | None:
    """The file as plain data with `${env:...}` expanded, and where each key path is in it;
    None for an empty document. For a file whose data is merged with more (flags, the
    environment) before its model checks it; `read_model` for one checked as it is."""
    root = compose(text, source)
    if root is None:
        return None
    reader = _Reader(environ)
    return reader.value(root, (), ()), reader.marks


def read_model(
    model: type[M],
    text: str,
    source: str,
    environ: Mapping[str, str] | None = None,
    *,
    empty: Sequence[str] | None = None,
) -> M | None:
    """The file checked by `model`; PolicyError listing every problem. An empty document is
    None, or the problems `empty` when the file must say something."""
    root = compose(text, source)
    if root is None:
        if empty:
            raise PolicyError(source, list(empty))
        return None
    reader = _Reader(environ)
    data = reader.value(root, (), ())
    try:
        checked = model.model_validate(data)
    except ValidationError as e:
        raise PolicyError(source, problems(e, reader.marks)) from None
    if reader.marks.found:
        raise PolicyError(source, [text for _, text in sorted(reader.marks.found)])
    return checked
