"""How the sidecar's config sections are written in the file: one key per field, and the
pydantic models that check the file, generated from those keys.

Each field of a section (`config.ForwardConfig`, ...) says where it lives in the file and
how its value is read (`key`); a nested section is a `section`. The field's own default is
the only default there is: the file's defaults (`file_defaults`, in the file's units) and
the models (`file_model`) are read from the fields. A model checks the file as
`yamlfile.model` checks the policy, every problem with its key path and line; its values
are in the file's units (`max_queue_size_mib`), and `runtime` turns one into the field's
(`max_queue_bytes`). The models' JSON Schema is published for editors (docs/schemas/).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field
from functools import cache
from pathlib import Path
from typing import Annotated, Any, ClassVar

from pydantic import Field, PlainValidator, WithJsonSchema, create_model

from attest_otel.yamlfile.model import FileModel, fail
from attest_otel.yamlfile.read import header_problem, parse_host_port

__all__ = [
    "Key",
    "Section",
    "check_value",
    "file_defaults",
    "file_model",
    "key",
    "put",
    "runtime",
    "section",
]


@dataclass(frozen=True, slots=True)
class Key:
    """Where a field lives (dotted, under its section) and how its value is read.

    `kind`: number | size (a number times `scale`, as whole bytes) | int | flag | text |
    choice | address (host:port) | file (a readable, non-empty file) | path | headers.
    `scale`: file unit -> the field's unit (MiB -> bytes, hours -> seconds).
    `computed`: the default depends on the environment (`default_factory`), so the file's
    default is "not set".
    """

    path: str
    kind: str
    scale: float = 1.0
    minimum: float | None = None
    """None: a number must be greater than 0, an int at least 1."""
    maximum: float | None = None
    """None: no upper bound."""
    exclusive: bool = True
    choices: tuple[str, ...] = ()
    optional: bool = False
    computed: bool = False


@dataclass(frozen=True, slots=True)
class Section:
    """A nested dataclass at `path`. `keys` describes the fields of a dataclass that lives
    in a module below the config (its defaults stay there, e.g. `content.ContentPolicy`)."""

    path: str
    type: type[Any]
    keys: Mapping[str, Key] | None = None


def key(
    path: str,
    kind: str,
    default: Any = MISSING,
    *,
    factory: Callable[[], Any] | None = None,
    **how: Any,
) -> Any:
    """A dataclass field written in the file at `path` (see `Key`)."""
    meta = {"yaml": Key(path, kind, **how)}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


def section(
    path: str, cls: type[Any], *, keys: Mapping[str, Key] | None = None, required: bool = False
) -> Any:
    """A dataclass field holding a nested section of the file."""
    meta = {"yaml": Section(path, cls, keys)}
    if required:
        return field(metadata=meta)
    return field(default_factory=cls, metadata=meta)


def fields_of(
    cls: type[Any], keys: Mapping[str, Key] | None = None
) -> list[tuple[dataclasses.Field[Any], Key | Section]]:
    """The fields of a section written in the file, with how."""
    out: list[tuple[dataclasses.Field[Any], Key | Section]] = []
    for f in dataclasses.fields(cls):
        found = f.metadata.get("yaml")
        meta = found if isinstance(found, Key | Section) else (keys or {}).get(f.name)
        if meta is not None:
            out.append((f, meta))
    return out


def default_of(f: dataclasses.Field[Any]) -> Any:
    if f.default is not MISSING:
        return f.default
    factory: Callable[[], Any] = f.default_factory  # type: ignore[assignment]
    return factory()


def _file_default(f: dataclasses.Field[Any], spec: Key) -> Any:
    """A field's default in the file's unit; None means "not set"."""
    if spec.computed or (f.default is MISSING and f.default_factory is MISSING):
        return None
    value = default_of(f)
    if value is None or spec.scale == 1.0:
        return value
    return value / spec.scale


def put(tree: dict[str, Any], path: str, value: Any) -> None:
    """Sets a dotted key path in a nested dict, making the mappings on the way."""
    *parents, last = path.split(".")
    for name in parents:
        tree = tree.setdefault(name, {})
    tree[last] = value


def file_defaults(cls: type[Any], keys: Mapping[str, Key] | None = None) -> dict[str, Any]:
    """The file's tree with every default, read from the dataclasses' fields."""
    tree: dict[str, Any] = {}
    for f, meta in fields_of(cls, keys):
        if isinstance(meta, Section):
            put(tree, meta.path, file_defaults(meta.type, meta.keys))
        else:
            put(tree, meta.path, _file_default(f, meta))
    return tree


# --- one value, checked as its key says (in the file's unit) --------------------------------


def _number(value: Any, spec: Key, *, integer: bool) -> float:
    minimum = (1 if spec.minimum is None else spec.minimum) if integer else (spec.minimum or 0.0)
    exclusive = spec.exclusive and not integer
    if isinstance(value, bool) or not isinstance(value, int | float):
        fail(f"expected a number, got {value!r}")
    if integer and not (isinstance(value, int) or float(value).is_integer()):
        fail(f"expected a whole number, got {value!r}")
    if (value <= minimum) if exclusive else (value < minimum):
        relation = "greater than" if exclusive else "at least"
        fail(f"must be {relation} {minimum:g}, got {value!r}")
    if spec.maximum is not None and value > spec.maximum:
        fail(f"must be at most {spec.maximum:g}, got {value!r}")
    return float(value)


def _text(value: Any, *, optional: bool) -> str | None:
    if value is None:
        if not optional:
            fail("is required")
        return None
    if not isinstance(value, str | Path) or not str(value).strip():
        fail(f"expected a non-empty string, got {value!r}")
    return str(value).strip()


def _file(value: Any) -> Path | None:
    """An optional path to a readable, non-empty file."""
    text = _text(value, optional=True)
    if text is None:
        return None
    file = Path(text).expanduser()
    try:
        empty = file.stat().st_size == 0
        with file.open("rb"):
            pass
    except OSError as e:
        fail(f"cannot read {file}: {e.strerror or e}")
    if empty:
        fail(f"{file} is empty")
    return file


def header_value(value: Any) -> Any:
    """A header value as the file's scalar reads (`5` is "5", `true` is "true")."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int | float):
        return str(value)
    return value


def check_value(value: Any, spec: Key) -> Any:
    """The value in the file's unit, or a problem (`yamlfile.model.fail`)."""
    kind = spec.kind
    if kind in ("number", "size"):
        return _number(value, spec, integer=False)
    if kind == "int":
        return int(_number(value, spec, integer=True))
    if kind == "flag":
        if not isinstance(value, bool):
            fail(f"expected true or false, got {value!r}")
        return value
    if kind == "text":
        return _text(value, optional=spec.optional)
    if kind == "choice":
        if spec.optional and value is None:
            return None
        choice = _text(value, optional=False) or spec.choices[0]
        if choice not in spec.choices:
            fail(f"must be one of {', '.join(spec.choices)}, got {choice!r}")
        return choice
    if kind == "address":
        address = _text(value, optional=spec.optional)
        if address is not None:
            try:
                parse_host_port(address)
            except ValueError as e:
                fail(str(e))
        return address
    if kind == "file":
        return _file(value)
    if kind == "path":
        path = _text(value, optional=True)
        return Path(path).expanduser() if path is not None else None
    if kind == "headers":
        if value is None:
            return {}
        if not isinstance(value, dict):
            fail(f"expected a mapping of header names to values, got {value!r}")
        return {str(k).lower(): str(header_value(v)) for k, v in value.items()}
    raise AssertionError(f"unknown key kind {kind!r}")  # a bug in the dataclass


def runtime(value: Any, spec: Key, f: dataclasses.Field[Any]) -> Any:
    """A checked value (the file's unit) as the field holds it."""
    if spec.kind == "size":
        return int(value * spec.scale)
    if spec.kind == "number":
        return value * spec.scale
    if spec.kind == "path" and value is None:
        return default_of(f) if spec.computed else None
    return value


# --- the models ------------------------------------------------------------------------------


def _schema(spec: Key, default: Any) -> dict[str, Any]:
    """What an editor is told of a key (the model checks more: a file must be readable)."""
    kind = spec.kind
    out: dict[str, Any]
    if kind in ("number", "size", "int"):
        out = {"type": "integer" if kind == "int" else "number"}
        low = (1 if spec.minimum is None else spec.minimum) if kind == "int" else spec.minimum or 0
        exclusive = spec.exclusive and kind != "int"
        out["exclusiveMinimum" if exclusive else "minimum"] = low
        if spec.maximum is not None:
            out["maximum"] = spec.maximum
    elif kind == "flag":
        out = {"type": "boolean"}
    elif kind == "choice":
        out = {"enum": list(spec.choices)}
    elif kind == "headers":
        out = {"type": ["object", "null"], "additionalProperties": {"type": "string"}}
    else:
        out = {"type": "string", "minLength": 1}
        if kind == "address":
            out["description"] = "host:port"
    if default is None and kind != "headers":
        out = {"anyOf": [out, {"type": "null"}]}
    return out


class _SectionModel(FileModel):
    """A section of the sidecar's config; written empty (`buffer:`), it takes the defaults."""

    what: ClassVar[str] = "a mapping"

    @classmethod
    def scalar(cls, value: Any) -> dict[str, Any]:
        if value is None:
            return {}
        return super().scalar(value)


class _ForwardModel(_SectionModel):
    """`forward:` (and `telemetry:`): each header checked apart, named by its own key."""

    @classmethod
    def check_raw(cls, data: Mapping[str, Any]) -> list[tuple[tuple[str | int, ...], str]]:
        headers = data.get("headers")
        if not isinstance(headers, dict):
            return []
        out: list[tuple[tuple[str | int, ...], str]] = []
        for name, value in headers.items():
            problem = header_problem(str(name).lower(), header_value(value))
            if problem:
                out.append((("headers", str(name)), problem))
        return out


def _field(spec: Key, default: Any) -> Any:
    def check(value: Any) -> Any:
        return check_value(value, spec)

    annotated = Annotated[Any, PlainValidator(check), WithJsonSchema(_schema(spec, default))]
    return (annotated, Field(default=default, alias=spec.path.rpartition(".")[2]))


def _model(name: str, nodes: dict[str, Any], base: type[FileModel]) -> type[FileModel]:
    """A model over one mapping of the file: `nodes` maps a key to (Key, default), to a
    nested mapping (dict), or to a section's model."""
    fields: dict[str, Any] = {}
    for part, node in nodes.items():
        if isinstance(node, dict):
            sub = _model(name + part.title().replace("_", ""), node, _SectionModel)
            fields[f"k_{part}"] = (sub, Field(default_factory=sub, alias=part))
        elif isinstance(node, type):
            fields[f"k_{part}"] = (node, Field(default_factory=node, alias=part))
        else:
            spec, default = node
            fields[f"k_{part}"] = _field(spec, default)
    model: type[FileModel] = create_model(name, __base__=base, **fields)
    return model


@cache
def file_model(cls: type[Any]) -> type[FileModel]:
    """The model of the file a section is written as (see the module docstring)."""
    return _section_model(cls, None, cls.__name__.removesuffix("Config") + "File")


def _section_model(cls: type[Any], keys: Mapping[str, Key] | None, name: str) -> type[FileModel]:
    nodes: dict[str, Any] = {}
    for f, meta in fields_of(cls, keys):
        *parents, last = meta.path.split(".")
        node = nodes
        for part in parents:
            node = node.setdefault(part, {})
        if isinstance(meta, Section):
            node[last] = _section_model(
                meta.type,
                meta.keys,
                meta.type.__name__.removesuffix("Config").removesuffix("Policy") + "File",
            )
        else:
            node[last] = (meta, _file_default(f, meta))
    has_headers = any(isinstance(m, Key) and m.kind == "headers" for _, m in fields_of(cls, keys))
    return _model(name, nodes, _ForwardModel if has_headers else _SectionModel)
