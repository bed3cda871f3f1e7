"""The sidecar's configuration: one YAML file, flags over it, defaults under it.

Each part of the sidecar is built from its own section (`parts`): the Forwarder from
`ForwardConfig`, the TraceBuffer from `BufferConfig`, the content rules from
`content.ContentPolicy`. Each section's dataclass is where its defaults are written, once: a
field's metadata (`_key`, `config_keys`) names its key in the file and the unit the file
uses (`max_queue_size_mib` in the file, `max_queue_bytes` at run time, where bytes are what
is counted). From those fields come `DEFAULTS`, the same tree as the file (`serve --help`,
the shipped collector-config/attest-otel.yaml and the README's key table are tested against
it), and the pydantic models that check the file (`config_keys.file_model`, whose JSON
Schema is docs/schemas/sidecar.schema.json).

`load_service_config` reads the file (expanding `${env:NAME}` / `${env:NAME:-default}` as
`yamlfile.read` says), lays the flags over it, fills the forward endpoint, protocol, headers
and compression from `OTEL_EXPORTER_OTLP_*` where neither gave them, and checks the result
whole with the model, then across fields: every problem at once with its key path (and
line, when the file gave the value), in one `PolicyError`. What needs more than this file
to check (the policy file it names, a model to call) is checked by `service.build_service`,
still before anything starts.

    receivers:
      grpc: {endpoint: 127.0.0.1:4317, max_recv_msg_size_mib: 4, workers: 8}
      http: {endpoint: 127.0.0.1:4318, max_request_body_size_mib: 20}
    forward:
      endpoint: ${env:NEXT_HOP}        # or --forward-endpoint, or OTEL_EXPORTER_OTLP_*
      protocol: grpc                   # or http/protobuf
      headers: {authorization: "Bearer ${env:TOKEN}"}
    buffer: {grace_s: 1, idle_timeout_s: 10, max_traces: 10000, dir: null}
    grading: {policy: null, model: {enabled: false}}
    store: {path: null, max_age_h: 168, max_size_mib: 512}
    telemetry: {logs: true, metrics: true, prometheus: null}
"""

from __future__ import annotations

import copy
import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from pydantic import ValidationError

from attest_otel.errors import PolicyError
from attest_otel.sidecar.config_keys import Section, check_value, fields_of, file_model, runtime
from attest_otel.sidecar.config_sections import (
    DEFAULTS,
    FLAG_KEYS,
    KIB,
    MIB,
    PROTOCOLS,
    BufferConfig,
    ForwardConfig,
    GradingConfig,
    ModelConfig,
    ReceiversConfig,
    ServiceConfig,
    StoreConfig,
    TelemetryConfig,
    default,
    default_store_path,
)
from attest_otel.store.base import redact, url_problem
from attest_otel.yamlfile.model import Loc, Marks, key_path, read_data
from attest_otel.yamlfile.read import header_problem, parse_host_port, read_text

__all__ = [
    "DEFAULTS",
    "FLAG_KEYS",
    "KIB",
    "MIB",
    "PROTOCOLS",
    "BufferConfig",
    "ForwardConfig",
    "GradingConfig",
    "ModelConfig",
    "ReceiversConfig",
    "ServiceConfig",
    "StoreConfig",
    "TelemetryConfig",
    "config_lines",
    "default",
    "default_store_path",
    "load_service_config",
    "parse_host_port",
    "read_token",
]

# --- loading -------------------------------------------------------------------------------


def load_service_config(
    path: str | Path | None = None,
    flags: Mapping[str, Any] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
) -> ServiceConfig:
    """The effective config: defaults < file < flags (< env only where both are silent).

    `environ` is read for `${env:...}` in the file and for `OTEL_EXPORTER_OTLP_*`
    (default: `os.environ`). Raises PolicyError (source = the file, or `<flags>`) listing
    every problem found.
    """
    env = os.environ if environ is None else environ
    source = str(path) if path is not None else "<flags>"
    data: Any = {}
    marks = Marks()
    if path is not None:
        read = read_data(read_text(path, "a config file"), source, env)
        if read is not None:
            data, marks = read
    found: list[tuple[tuple[int, ...], str]] = list(marks.found)
    if isinstance(data, dict):
        for flag, value in (flags or {}).items():
            if value is None:
                continue
            keys = FLAG_KEYS.get(flag)
            if flag == "store" and "://" in str(value):  # --store postgresql://...: the URL key
                keys = ("store", "url")
            if keys is None:
                found.append(((_LAST,), f"--{flag.replace('_', '-')}: unknown flag"))
                continue
            _put_flag(data, keys, value, marks)
        found += [((_LAST,), text) for text in _from_otel_env(data, env)]
    try:
        checked = file_model(ServiceConfig).model_validate(data)
    except ValidationError as e:
        found += _problems(e, marks)
        tree = _merged(DEFAULTS, data if isinstance(data, dict) else {})
    else:
        tree = _merged(DEFAULTS, checked.model_dump(by_alias=True))
    config: ServiceConfig = _sections(ServiceConfig, tree, "", None)
    config = dataclasses.replace(config, source=source, raw=_merged(DEFAULTS, data))
    for loc, text in _cross_problems(config, tree):
        if key_path(loc) not in marks.unresolved:  # its ${env:...} was reported already
            found.append((marks.order.get(loc, (_LAST,)), _where(loc, data, marks) + text))
    if found:
        found.sort(key=lambda item: item[0])
        raise PolicyError(source, [text for _, text in found])
    return config


_LAST = 1 << 30
"""Sorts a problem that is not in the file (a flag, the environment) after those that are."""


def _put_flag(data: dict[str, Any], keys: tuple[str, ...], value: Any, marks: Marks) -> None:
    """A flag's value over the file's: where it came from is no longer a line of the file."""
    node = data
    for name in keys[:-1]:
        node = node.setdefault(name, {})
        if not isinstance(node, dict):
            return  # the file's section is not a mapping: its own problem says so
    node[keys[-1]] = value
    marks.lines.pop(keys, None)
    marks.key_lines.pop(keys, None)


def _from_otel_env(data: dict[str, Any], env: Mapping[str, str]) -> list[str]:
    """The standard exporter variables fill what neither the file nor a flag set; their
    problems."""
    forward = data.setdefault("forward", {})
    if forward is None:
        forward = data["forward"] = {}
    if not isinstance(forward, dict):
        return []
    problems: list[str] = []
    if forward.get("endpoint") is None:
        endpoint = _env_first(
            env, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"
        )
        if endpoint is not None:
            forward["endpoint"] = endpoint
    if forward.get("protocol") is None:
        protocol = _env_first(
            env, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"
        )
        forward["protocol"] = protocol or default("forward.protocol")
    if "headers" not in forward:
        raw_headers = _env_first(
            env, "OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS"
        )
        if raw_headers:
            forward["headers"] = _parse_headers(raw_headers, problems)
    if "compression" not in forward:
        compression = _env_first(
            env, "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "OTEL_EXPORTER_OTLP_COMPRESSION"
        )
        if compression:
            forward["compression"] = compression
    return problems


def _env_first(env: Mapping[str, str], *names: str) -> str | None:
    for name in names:
        value = env.get(name, "").strip()
        if value:
            return value
    return None


def _parse_headers(text: str, problems: list[str]) -> dict[str, str]:
    """OTEL_EXPORTER_OTLP_(TRACES_)HEADERS, checked like headers in the file."""

    out: dict[str, str] = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if sep and key.strip():
            name, decoded = unquote(key.strip()).lower(), unquote(value.strip())
            problem = header_problem(name, decoded)
            if problem:
                problems.append(f"OTEL_EXPORTER_OTLP_HEADERS: {problem}")
            else:
                out[name] = decoded
    return out


def _problems(error: ValidationError, marks: Marks) -> list[tuple[tuple[int, ...], str]]:
    """The model's problems: key path, the line when the file gave the value, what."""
    out: list[tuple[tuple[int, ...], str]] = []
    for d in error.errors(include_url=False):
        loc: Loc = tuple(d["loc"])
        path = key_path(loc)
        if path in marks.unresolved:
            continue  # its ${env:...} was reported already
        lines = marks.key_lines if d["type"].startswith("key_") else marks.lines
        line = lines.get(loc) or marks.lines.get(loc)
        where = f"{path} (line {line})" if line else path
        out.append((marks.order.get(loc, (_LAST,)), f"{where}: {d['msg']}"))
    return out


def _where(loc: Loc, data: Any, marks: Marks) -> str:
    """`key.path (line N): ` for a value the file gave, `key.path: ` for anything else (a
    section, a default, a flag)."""
    node = data
    for part in loc:
        node = node.get(part) if isinstance(node, dict) else None
    line = marks.lines.get(loc) if not isinstance(node, dict) else None
    return f"{key_path(loc)} (line {line}): " if line else f"{key_path(loc)}: "


def _merged(base: Mapping[str, Any], over: Any) -> dict[str, Any]:
    """`over` laid on the defaults' tree, key by key (unknown keys left out, a section
    written empty keeps its defaults)."""
    tree = copy.deepcopy(dict(base))
    if not isinstance(over, dict):
        return tree
    for name, value in over.items():
        if name not in tree:
            continue
        if isinstance(tree[name], dict) and name != "headers":
            tree[name] = _merged(tree[name], value)
        else:
            tree[name] = value
    return tree


def _sections(cls: type[Any], tree: Mapping[str, Any], prefix: str, keys: Any) -> Any:
    """A section's dataclass from the merged tree (the file's units): a value its key
    refuses (reported by the model) stands at its default, so the checks across fields
    still see every other value."""
    values: dict[str, Any] = {}
    for f, meta in fields_of(cls, keys):
        path = f"{prefix}.{meta.path}" if prefix else meta.path
        if isinstance(meta, Section):
            values[f.name] = _sections(meta.type, tree, path, meta.keys)
            continue
        node: Any = tree
        for part in path.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        try:
            values[f.name] = runtime(check_value(node, meta), meta, f)
        except ValueError:
            values[f.name] = runtime(check_value(_at(DEFAULTS, path), meta), meta, f)
    return cls(**values)


def _at(tree: Mapping[str, Any], path: str) -> Any:
    node: Any = tree
    for part in path.split("."):
        node = node[part]
    return node


def _cross_problems(config: ServiceConfig, tree: Mapping[str, Any]) -> list[tuple[Loc, str]]:
    """The checks across fields, on values each valid alone."""
    out: list[tuple[Loc, str]] = []

    def problem(path: str, text: str) -> None:
        out.append((tuple(path.split(".")), text))

    receivers, forward, buffer = config.receivers, config.forward, config.buffer
    if (_raw(tree, "receivers.tls.cert_file") is None) != (
        _raw(tree, "receivers.tls.key_file") is None
    ):
        problem("receivers.tls", "cert_file and key_file go together: set both or neither")
    if (
        _raw(tree, "receivers.tls.client_ca_file") is not None
        and _raw(tree, "receivers.tls.cert_file") is None
    ):
        problem("receivers.tls.client_ca_file", "needs receivers.tls.cert_file and key_file")
    auth, grader = (
        _raw_path(tree, "receivers.auth_token_file"),
        _raw_path(tree, "receivers.grader_token_file"),
    )
    if auth is not None and not _token_ok(auth):
        problem("receivers.auth_token_file", "must hold one token of printable ASCII (no spaces)")
    if grader is not None and not _token_ok(grader):
        problem("receivers.grader_token_file", "must hold one token of printable ASCII (no spaces)")
    if grader is not None and auth is not None and _same_token(grader, auth):
        problem("receivers.grader_token_file", "must differ from receivers.auth_token_file")
    # Port 0 asks the kernel for a free port each time, so two of them never collide.
    if (
        receivers.grpc_endpoint
        and receivers.grpc_endpoint == receivers.http_endpoint
        and not receivers.grpc_endpoint.endswith(":0")
    ):
        problem("receivers.http.endpoint", "is the same address as receivers.grpc.endpoint")
    if forward.endpoint is None:
        problem(
            "forward.endpoint",
            "is required (set it in the file, with --forward-endpoint, or with "
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT / OTEL_EXPORTER_OTLP_ENDPOINT)",
        )
    else:
        for path, text in _not_self(forward.endpoint, receivers):
            problem(path, text)
    if (_raw(tree, "forward.tls.cert_file") is None) != (
        _raw(tree, "forward.tls.key_file") is None
    ):
        problem("forward.tls", "cert_file and key_file go together: set both or neither")
    if forward.max_batch_bytes > forward.max_request_bytes:
        problem("forward.max_batch_size_kib", "must not exceed forward.max_request_size_mib")
    if forward.initial_backoff_s > forward.max_backoff_s:
        problem("forward.initial_backoff_s", "must not exceed forward.max_backoff_s")
    if buffer.grace_s > buffer.idle_timeout_s:
        problem("buffer.grace_s", "must not exceed buffer.idle_timeout_s")
    # A URL must be PostgreSQL's, and one given as `store.path` belongs in `store.url`.
    raw_path = _raw(tree, "store.path")
    if isinstance(raw_path, str) and "://" in raw_path:
        problem("store.path", f"{redact(raw_path)} is a URL: put it in store.url")
    url = config.store.url
    url_wrong = url_problem(url) if url is not None else None
    if url is not None and url_wrong is not None:
        problem("store.url", f"{redact(url)}: {url_wrong}")
    return out


def _raw(tree: Mapping[str, Any], path: str) -> Any:
    node: Any = tree
    for part in path.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def _raw_path(tree: Mapping[str, Any], path: str) -> Path | None:
    value = _raw(tree, path)
    if isinstance(value, str | Path) and str(value).strip():
        return Path(str(value).strip()).expanduser()
    return None


def read_token(path: Path) -> str:
    """The bearer token in `path`: its text, stripped of surrounding whitespace."""
    return path.read_text(encoding="ascii", errors="replace").strip()


def _token_ok(path: Path) -> bool:
    try:
        token = read_token(path)
    except OSError:
        return True  # already reported by the model (`config_keys.check_value`)
    return bool(token) and all(33 <= ord(c) < 127 for c in token)


def _same_token(a: Path, b: Path) -> bool:
    try:
        return read_token(a) == read_token(b)
    except OSError:
        return False


def _not_self(endpoint: str, receivers: ReceiversConfig) -> list[tuple[str, str]]:
    """Forwarding to our own receiver would loop every span forever."""
    try:
        host, port = parse_host_port(endpoint)
    except ValueError as e:
        return [("forward.endpoint", str(e))]
    out: list[tuple[str, str]] = []
    for own in (receivers.grpc_endpoint, receivers.http_endpoint):
        try:
            own_host, own_port = parse_host_port(own)
        except ValueError:
            continue
        same_host = host == own_host or {host, own_host} <= {"127.0.0.1", "localhost"}
        if own_port != 0 and port == own_port and same_host:
            out.append(("forward.endpoint", f"{endpoint} is this sidecar's own receiver ({own})"))
    return out


def config_lines(config: ServiceConfig) -> list[str]:
    """`key = value` lines of the effective config, for the start-up log (header values,
    which hold tokens, and the store URL's password are left out)."""
    out: list[str] = []

    def walk(node: Mapping[str, Any], prefix: str) -> None:
        for key, value in node.items():
            full = f"{prefix}.{key}" if prefix else key
            if isinstance(value, dict) and key != "headers":
                walk(value, full)
            elif key == "headers":
                out.append(f"{full} = {sorted(value)}")
            elif full == "store.url" and value is not None:
                out.append(f"{full} = {redact(value)}")  # the password stays out of logs
            else:
                out.append(f"{full} = {value}")

    walk(config.raw, "")
    return out
