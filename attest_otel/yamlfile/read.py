"""The YAML reading under every file a user writes.

A file is read as a node tree (`yaml.compose`), not as loaded values, because the values
have lost their line numbers, and a user fixes a file in one pass only when every problem is
listed at once with its key path *and* line. The policy, its dialects and the sidecar's
config are checked by pydantic models over that tree (`yamlfile.model`), and the caller
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

Also here, for every file that names an endpoint or headers: `parse_host_port` and
`header_problem`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.resolver import Resolver

from attest_otel.errors import PolicyError

__all__ = [
    "NULL_TAG",
    "STR_TAG",
    "Checker",
    "compose",
    "header_problem",
    "is_null",
    "parse_host_port",
    "read_text",
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


class Checker:
    """`${env:...}` expanded in a file's values, with the problems of those it cannot."""

    def __init__(self, problems: list[str] | None = None) -> None:
        self.problems: list[str] = [] if problems is None else problems
        self.unresolved: set[str] = set()
        """Key paths whose `${env:...}` could not be expanded: reported once, by
        `expand_env`; whatever the file's checker then thinks of them is not news."""

    def problem(self, path: str, node: Node, text: str) -> None:
        if path not in self.unresolved:
            self.problems.append(f"{path} (line {node.start_mark.line + 1}): {text}")

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
