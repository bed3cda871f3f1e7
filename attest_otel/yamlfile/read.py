"""The YAML reading under every file a user writes, and the sidecar config's checker.

A file is read as a node tree (`yaml.compose`), not as loaded values, because the values
have lost their line numbers, and a user fixes a file in one pass only when every problem is
listed at once with its key path *and* line. The policy and its dialects are checked by
pydantic models over that tree (`yamlfile.model`); the sidecar's config still by `TreeChecker`
below, which walks the tree and adds problems instead of raising. Either way the caller
raises one `PolicyError` naming the file and listing them all.

`${env:NAME}` and `${env:NAME:-default}` in a value are replaced from the environment before
the check, as the OpenTelemetry Collector does, so a token or an endpoint need not be
written into a file that is committed or baked into an image:

- the default is used only when the variable is unset (set but empty gives "");
- an unset variable without a default is a problem naming the variable and the key path;
- `$$` is a literal `$` (so `$${env:X}` stays `${env:X}`); any other `${...}` is a problem;
- an unquoted value that came out of a variable is typed as YAML would type it
  (`timeout_s: ${env:T}` with T=5 is a number); a quoted one stays a string. A variable
  gives a single value, never a list or a mapping.

Keys are never expanded: the shape of a file is what its author wrote. In a flow list or
mapping (`[...]`, `{...}`) quote a reference, `["${env:TOOL}"]`: YAML reads an unquoted
`{` there as the start of a mapping.

The second half of this module maps a tree of dataclasses onto one file (the sidecar's
config), so that a field's default is the only default there is.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, dataclass, field
from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.resolver import Resolver

from attest_otel.errors import PolicyError

__all__ = [
    "NULL_TAG",
    "STR_TAG",
    "Checker",
    "Key",
    "Section",
    "TreeChecker",
    "TreeReader",
    "compose",
    "file_defaults",
    "header_problem",
    "is_null",
    "key",
    "kind",
    "parse_host_port",
    "put",
    "read_text",
    "section",
]

STR_TAG = "tag:yaml.org,2002:str"
NULL_TAG = "tag:yaml.org,2002:null"

_REFERENCE = re.compile(r"\$\$|\$\{([^}]*)\}")
_ENV_REFERENCE = re.compile(r"env:([A-Za-z_][A-Za-z0-9_]*)(?::-(.*))?", re.DOTALL)
_RESOLVER = Resolver()


def read_text(path: str | Path, what: str) -> str:
    """The file's text; PolicyError naming the file when it cannot be read as UTF-8."""
    p = Path(path)
    source = str(p)
    try:
        return p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PolicyError(source, ["no such file"]) from None
    except IsADirectoryError:
        raise PolicyError(source, [f"is a directory, not {what}"]) from None
    except UnicodeDecodeError as e:
        raise PolicyError(source, [f"not UTF-8 text ({e.reason} at byte {e.start})"]) from None
    except OSError as e:
        raise PolicyError(source, [e.strerror or str(e)]) from None


def _last_line_mark(text: str, mark: yaml.Mark) -> yaml.Mark:
    """`mark` moved back from past the end of the text to the end of its last line."""
    lines = text.rstrip().splitlines() or [""]
    return yaml.Mark(mark.name, len(text), len(lines) - 1, len(lines[-1]), None, 0)


def compose(text: str, source: str) -> Node | None:
    """The node tree (which keeps every line number), or None for an empty document.

    Invalid YAML is one PolicyError naming its line: nothing after it can be checked. So
    is a file whose aliases expand it past `MAX_EXPANDED_NODES` (`_check_expansion`).
    """
    if len(text) > MAX_TEXT_CHARS:
        raise PolicyError(source, [f"larger than {MAX_TEXT_CHARS} characters"])
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        problem = e.problem or e.context or "invalid YAML"
        if e.problem_mark is not None and e.problem_mark.index >= len(text.rstrip()):
            # "unexpected end of stream" points past the last line; where the unfinished
            # thing began (an open quote, a bracket) is where the user has to look.
            if e.context_mark is not None and e.context:
                mark, problem = e.context_mark, f"{problem} ({e.context} that starts here)"
            else:
                mark = _last_line_mark(text, e.problem_mark)
        if mark is None:
            raise PolicyError(source, [f"invalid YAML: {problem}"]) from None
        err = PolicyError(
            source, [f"line {mark.line + 1}, column {mark.column + 1}: invalid YAML: {problem}"]
        )
        err.line = mark.line + 1
        raise err from None
    except yaml.YAMLError as e:
        raise PolicyError(source, [f"invalid YAML: {e}"]) from None
    if node is None or is_null(node):
        return None
    _check_expansion(node, source)
    return node


MAX_TEXT_CHARS = 4 * 1024 * 1024
MAX_EXPANDED_NODES = 100_000
"""What a file may expand to once its aliases are followed. A checker walks values as a
tree, and nine aliases of nine aliases (a "billion laughs") make a small file a tree of
a billion nodes: the command hung. A real policy or config holds a few hundred."""


def _check_expansion(root: Node, source: str) -> None:
    """PolicyError when the tree under `root`, with every alias followed, has more than
    `MAX_EXPANDED_NODES` nodes or refers to itself. Counted per distinct node (shared
    nodes are counted once, then multiplied), so the count itself is linear in the file."""
    sizes: dict[int, int] = {}
    open_: set[int] = set()
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        children = _children(node)
        if done:
            open_.discard(key)
            total = 1 + sum(sizes[id(c)] for c in children)
            sizes[key] = total
            if total > MAX_EXPANDED_NODES:
                raise PolicyError(
                    source,
                    [
                        f"line {node.start_mark.line + 1}: expands to more than "
                        f"{MAX_EXPANDED_NODES} values through its aliases (*name); "
                        "write the values out"
                    ],
                )
            continue
        if key in sizes:
            continue
        if key in open_:
            raise PolicyError(
                source, [f"line {node.start_mark.line + 1}: an alias refers to itself"]
            )
        open_.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in children if id(c) not in sizes)


def _children(node: Node) -> list[Node]:
    if isinstance(node, MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, SequenceNode):
        return list(node.value)
    return []


def is_null(node: Node) -> bool:
    return isinstance(node, ScalarNode) and node.tag == NULL_TAG


def kind(node: Node) -> str:
    """What a node is, in the words a problem uses ("a list", "a number", ...)."""
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


class Checker:
    """Problems with key path and line, shared by every file's own checker."""

    def __init__(self, problems: list[str] | None = None) -> None:
        self.problems: list[str] = [] if problems is None else problems
        self.unresolved: set[str] = set()
        """Key paths whose `${env:...}` could not be expanded: reported once, by
        `expand_env`; whatever the file's checker then thinks of them is not news."""

    def problem(self, path: str, node: Node, text: str) -> None:
        if path not in self.unresolved:
            self.problems.append(f"{path} (line {node.start_mark.line + 1}): {text}")

    def unknown(self, path: str, node: Node, allowed: Sequence[str]) -> None:
        """An unknown key, with the nearest known one when there is one (a typo, usually)."""
        name = path.rpartition(".")[2]
        close = difflib.get_close_matches(name, allowed, n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"expected one of: {', '.join(allowed)}"
        self.problem(path, node, f"unknown key ({hint})")

    def mapping(self, path: str, node: Node, what: str) -> list[tuple[ScalarNode, Node]] | None:
        """The key/value pairs of a mapping node; duplicate and non-string keys are problems."""
        if not isinstance(node, MappingNode):
            self.problem(path, node, f"expected {what}, got {kind(node)}")
            return None
        seen: set[str] = set()
        pairs: list[tuple[ScalarNode, Node]] = []
        for key, value in node.value:
            if not isinstance(key, ScalarNode) or key.tag != STR_TAG:
                shown = key.value if isinstance(key, ScalarNode) else kind(key)
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

    def expand_env(
        self, node: Node, environ: Mapping[str, str] | None = None, path: str = ""
    ) -> None:
        """Replaces `${env:...}` in every value under `node`, in place (module docstring)."""
        env = os.environ if environ is None else environ
        if isinstance(node, MappingNode):
            for key, value in node.value:
                name = key.value if isinstance(key, ScalarNode) else "?"
                self.expand_env(value, env, f"{path}.{name}" if path else str(name))
        elif isinstance(node, SequenceNode):
            for i, item in enumerate(node.value):
                self.expand_env(item, env, f"{path}[{i}]")
        elif isinstance(node, ScalarNode) and "$" in node.value:
            self.expand_scalar(node, env, path or "<top>")

    def expand_scalar(self, node: ScalarNode, environ: Mapping[str, str] | None, path: str) -> None:
        """Replaces `${env:...}` in one value, in place; a problem when it cannot."""
        env = os.environ if environ is None else environ
        missing = False

        def replace(match: re.Match[str]) -> str:
            nonlocal missing
            if match.group(0) == "$$":
                return "$"
            ref = _ENV_REFERENCE.fullmatch(match.group(1))
            if ref is None:
                self.problem(
                    path,
                    node,
                    f"unsupported reference {match.group(0)} (use "
                    "${env:NAME} or ${env:NAME:-default}; $$ is a "
                    "literal $)",
                )
                missing = True
                return match.group(0)
            name, default = ref.group(1), ref.group(2)
            value = env.get(name)
            if value is not None:
                return value
            if default is not None:
                return default
            self.problem(
                path,
                node,
                f"${{env:{name}}}: {name} is not set (set it, or give a "
                f"default: ${{env:{name}:-value}})",
            )
            missing = True
            return match.group(0)

        expanded = _REFERENCE.sub(replace, node.value)
        if missing:
            self.unresolved.add(path)
            return
        node.value = expanded
        node.tag = (
            str(_RESOLVER.resolve(ScalarNode, expanded, (True, False)))  # type: ignore[no-untyped-call]
            if node.style is None
            else STR_TAG
        )


# --- a tree of dataclasses written as one YAML file (the sidecar's config) -----------------
#
# Each field says where it lives in the file and how it is read (`key`), and a nested
# dataclass is a `section`; the field's own default is the only default there is. The file
# is merged over `file_defaults(cls)` (`TreeChecker`), flags are laid over that, and
# `TreeReader` reads the merged tree back into the dataclasses, checking every value.


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


def _meta(f: dataclasses.Field[Any], keys: Mapping[str, Key] | None) -> Key | Section | None:
    found = f.metadata.get("yaml")
    if isinstance(found, Key | Section):
        return found
    return None if keys is None else keys.get(f.name)


def _file_default(f: dataclasses.Field[Any], spec: Key) -> Any:
    """A field's default in the file's unit; None means "not set"."""
    if spec.computed or (f.default is MISSING and f.default_factory is MISSING):
        return None
    value = _default_of(f)
    if value is None or spec.scale == 1.0:
        return value
    return value / spec.scale


def _default_of(f: dataclasses.Field[Any]) -> Any:
    if f.default is not MISSING:
        return f.default
    factory: Callable[[], Any] = f.default_factory  # type: ignore[assignment]
    return factory()


def put(tree: dict[str, Any], path: str, value: Any) -> None:
    """Sets a dotted key path in a nested dict, making the mappings on the way."""
    *parents, last = path.split(".")
    for name in parents:
        tree = tree.setdefault(name, {})
    tree[last] = value


def file_defaults(cls: type[Any], keys: Mapping[str, Key] | None = None) -> dict[str, Any]:
    """The file's tree with every default, read from the dataclasses' fields."""
    tree: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        meta = _meta(f, keys)
        if isinstance(meta, Section):
            put(tree, meta.path, file_defaults(meta.type, meta.keys))
        elif meta is not None:
            put(tree, meta.path, _file_default(f, meta))
    return tree


_CONSTRUCTOR = SafeConstructor()


class TreeChecker(Checker):
    """Merges a file's node tree over the defaults; remembers each value's line."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: dict[str, int] = {}
        self.given: set[str] = set()
        """Keys the file (or, once the caller adds them, a flag) set, even to the default."""

    def merge(
        self, target: dict[str, Any], schema: Mapping[str, Any], node: Node, path: str = ""
    ) -> None:
        for key_node, value_node in self.mapping(path or "<top>", node, "a mapping") or ():
            name = key_node.value
            full = f"{path}.{name}" if path else name
            if name not in schema:
                self.unknown(full, key_node, list(schema))
                continue
            expected = schema[name]
            if isinstance(expected, dict) and name != "headers":
                if not is_null(value_node):
                    self.merge(target[name], expected, value_node, full)
                continue
            self.lines[full] = value_node.start_mark.line + 1
            self.given.add(full)
            try:
                target[name] = _value(value_node, headers=name == "headers")
            except ValueError as e:
                self.problem(full, value_node, str(e))


def _value(node: Node, *, headers: bool) -> Any:
    if headers:
        if is_null(node):
            return {}
        if not isinstance(node, MappingNode):
            raise ValueError("expected a mapping of header name to value")
        out: dict[str, str] = {}
        for k, v in node.value:
            if not isinstance(k, ScalarNode) or not isinstance(v, ScalarNode):
                raise ValueError("header names and values must be strings")
            out[str(k.value).lower()] = str(v.value)
        return out
    if isinstance(node, MappingNode | SequenceNode):
        raise ValueError(f"expected a single value, got {kind(node)}")
    return _CONSTRUCTOR.construct_object(node, deep=True)


_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


def header_problem(name: str, value: object) -> str | None:
    """Why `name: value` cannot be sent as an HTTP header / gRPC metadata entry (None: it can).

    Checked when the config is loaded: a CR or LF in a value would make every request that
    carries it fail (spans dropped as errors), or split it into two headers. Names are RFC
    9110 tokens; values printable ASCII (and tab), since gRPC metadata allows no more for
    text keys."""
    if not _HEADER_NAME.fullmatch(name):
        return f"header name {name!r} is not a valid HTTP token"
    if name.lower().endswith("-bin"):
        return f"header name {name!r}: binary (-bin) metadata cannot be configured as text"
    if not isinstance(value, str | int | float) or isinstance(value, bool):
        return f"header {name!r}: expected a string value, got {value!r}"
    text = str(value)
    bad = next((c for c in text if not (c == "\t" or 32 <= ord(c) < 127)), None)
    if bad is not None:
        return (
            f"header {name!r}: value holds {bad!r} (only printable ASCII is allowed; "
            "a CR or LF would break every request)"
        )
    return None


def parse_host_port(text: str) -> tuple[str, int]:
    """`host:port` (IPv6 in brackets) -> (host, port); ValueError naming what is wrong."""
    value = text.strip()
    if "://" in value:
        value = value.split("://", 1)[1]
    value = value.split("/", 1)[0]
    if value.startswith("["):
        host, sep, rest = value[1:].partition("]")
        if not sep or not rest.startswith(":"):
            raise ValueError(f"{text!r} is not [host]:port")
        port_text = rest[1:]
    else:
        host, sep, port_text = value.rpartition(":")
        if not sep:
            raise ValueError(f"{text!r} is not host:port")
    if not host:
        raise ValueError(f"{text!r} has no host")
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(f"{text!r} has no numeric port") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"{text!r}: port must be 0..65535")
    return host, port


class TreeReader:
    """Typed reads from the merged tree into the dataclasses; a wrong value is a problem
    (with its line when it came from the file), never an exception."""

    def __init__(self, tree: Mapping[str, Any], checker: TreeChecker) -> None:
        self.tree = tree
        self.checker = checker

    def get(self, path: str) -> Any:
        node: Any = self.tree
        for name in path.split("."):
            node = node[name]
        return node

    def problem(self, path: str, text: str) -> None:
        if path in self.checker.unresolved:
            return  # its ${env:...} was reported already
        line = self.checker.lines.get(path)
        where = f"{path} (line {line})" if line else path
        self.checker.problems.append(f"{where}: {text}")

    def section(
        self, cls: type[Any], prefix: str = "", keys: Mapping[str, Key] | None = None, **extra: Any
    ) -> Any:
        """One section's dataclass, every field read as its `Key` says."""
        values: dict[str, Any] = dict(extra)
        for f in dataclasses.fields(cls):
            meta = _meta(f, keys)
            if meta is None:
                continue
            path = f"{prefix}.{meta.path}" if prefix else meta.path
            if isinstance(meta, Section):
                values[f.name] = self.section(meta.type, path, meta.keys)
            else:
                values[f.name] = self.read(path, meta, f)
        return cls(**values)

    def read(self, path: str, spec: Key, f: dataclasses.Field[Any]) -> Any:
        kind = spec.kind
        if kind in ("number", "size"):
            value = self.number(
                path, minimum=spec.minimum or 0.0, exclusive=spec.exclusive, maximum=spec.maximum
            )
            return int(value * spec.scale) if kind == "size" else value * spec.scale
        if kind == "int":
            return self.integer(
                path, 1 if spec.minimum is None else int(spec.minimum), maximum=spec.maximum
            )
        if kind == "flag":
            return self.flag(path)
        if kind == "text":
            return self.text(path, optional=spec.optional)
        if kind == "choice":
            if spec.optional and self.get(path) is None:
                return None
            return self.choice(path, spec.choices)
        if kind == "address":
            return self.address(path, optional=spec.optional)
        if kind == "file":
            return self.file(path)
        if kind == "path":
            text = self.text(path, optional=True)
            if text is not None:
                return Path(text).expanduser()
            return _default_of(f) if spec.computed else None
        if kind == "headers":
            value = self.get(path)
            if not isinstance(value, Mapping):
                self.problem(path, f"expected a mapping of header names to values, got {value!r}")
                return {}
            out: dict[str, str] = {}
            for name, text in value.items():
                problem = header_problem(str(name), text)
                if problem:
                    self.problem(f"{path}.{name}", problem)
                else:
                    out[str(name)] = str(text)
            return out
        raise AssertionError(f"unknown key kind {kind!r}")  # a bug in the dataclass

    def number(
        self,
        path: str,
        *,
        minimum: float = 0.0,
        exclusive: bool = True,
        integer: bool = False,
        maximum: float | None = None,
    ) -> float:
        value = self.get(path)
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.problem(path, f"expected a number, got {value!r}")
            return 1.0
        if integer and not (isinstance(value, int) or float(value).is_integer()):
            self.problem(path, f"expected a whole number, got {value!r}")
            return 1.0
        if (value <= minimum) if exclusive else (value < minimum):
            relation = "greater than" if exclusive else "at least"
            self.problem(path, f"must be {relation} {minimum:g}, got {value!r}")
            return 1.0
        if maximum is not None and value > maximum:
            self.problem(path, f"must be at most {maximum:g}, got {value!r}")
            return 1.0
        return float(value)

    def integer(self, path: str, minimum: int = 1, maximum: float | None = None) -> int:
        return int(
            self.number(path, minimum=minimum, exclusive=False, integer=True, maximum=maximum)
        )

    def flag(self, path: str) -> bool:
        value = self.get(path)
        if not isinstance(value, bool):
            self.problem(path, f"expected true or false, got {value!r}")
            return False
        return value

    def text(self, path: str, *, optional: bool = False) -> str | None:
        value = self.get(path)
        if value is None:
            if not optional:
                self.problem(path, "is required")
            return None
        if not isinstance(value, str | Path) or not str(value).strip():
            self.problem(path, f"expected a non-empty string, got {value!r}")
            return None
        return str(value).strip()

    def choice(self, path: str, choices: tuple[str, ...]) -> str:
        value = self.text(path) or choices[0]
        if value not in choices:
            self.problem(path, f"must be one of {', '.join(choices)}, got {value!r}")
            return choices[0]
        return value

    def file(self, path: str) -> Path | None:
        """An optional path to a readable, non-empty file."""
        value = self.text(path, optional=True)
        if value is None:
            return None
        file = Path(value).expanduser()
        try:
            if file.stat().st_size == 0:
                self.problem(path, f"{file} is empty")
            with file.open("rb"):
                pass
        except OSError as e:
            self.problem(path, f"cannot read {file}: {e.strerror or e}")
        return file

    def address(self, path: str, *, optional: bool = False) -> str | None:
        value = self.text(path, optional=optional)
        if value is None:
            return None
        try:
            parse_host_port(value)
        except ValueError as e:
            self.problem(path, str(e))
        return value
