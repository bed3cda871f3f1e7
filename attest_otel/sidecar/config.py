"""The sidecar's configuration: one YAML file, flags over it, defaults under it.

Every default lives in `DEFAULTS` below (the same tree as the file), so the README table,
`--help` and the code cannot disagree. `load_service_config` reads the file, lays the
flags over it, fills the forward endpoint from `OTEL_EXPORTER_OTLP_*` when neither gave
one, and checks the result whole: every problem is listed at once, each with its key path
(and line, when it came from the file), in one `PolicyError`.

    receivers:
      grpc: {endpoint: 127.0.0.1:4317, max_recv_msg_size_mib: 4, workers: 8}
      http: {endpoint: 127.0.0.1:4318, max_request_body_size_mib: 20}
    forward:
      endpoint: collector:14317        # or --forward-endpoint, or OTEL_EXPORTER_OTLP_*
      protocol: grpc                   # or http/protobuf
    buffer: {grace_s: 1, idle_timeout_s: 10, max_traces: 10000, dir: null}
    grading: {policy: null, model: {enabled: false}}
    store: {path: null, max_age_h: 168, max_size_mib: 512}
    telemetry: {logs: true, metrics: true, prometheus: null}
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from attest_otel.errors import PolicyError

__all__ = [
    "CONTENT_MODES",
    "DEFAULTS",
    "BufferConfig",
    "ContentConfig",
    "ForwardConfig",
    "GradingConfig",
    "ModelConfig",
    "ReceiversConfig",
    "ServiceConfig",
    "StoreConfig",
    "TelemetryConfig",
    "default_store_path",
    "load_service_config",
    "parse_host_port",
]

MIB = 1024 * 1024

DEFAULTS: dict[str, Any] = {
    "receivers": {
        "grpc": {
            "endpoint": "127.0.0.1:4317",
            "max_recv_msg_size_mib": 4.0,
            "workers": 8,
        },
        "http": {
            "endpoint": "127.0.0.1:4318",
            "max_request_body_size_mib": 20.0,
        },
        "tls": {
            "cert_file": None,
            "key_file": None,
            "client_ca_file": None,  # set: clients must present a certificate it signed
        },
        "auth_token_file": None,
    },
    "forward": {
        "endpoint": None,
        "protocol": None,  # None: OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL, else grpc
        "headers": {},
        "compression": "none",
        "timeout_s": 10.0,
        "workers": 4,
        "max_queue_spans": 200_000,
        "max_queue_size_mib": 256.0,
        "max_batch_size_kib": 1024.0,
        "max_request_size_mib": 4.0,
        "initial_backoff_s": 0.5,
        "max_backoff_s": 30.0,
        "retry_after_s": 1.0,
        "unready_after_s": 30.0,  # /readyz says 503 once forwarding has failed this long
        "tls": {
            "ca_file": None,  # any tls key set (or an https:// endpoint): TLS to the next hop
            "cert_file": None,
            "key_file": None,
        },
    },
    "buffer": {
        "grace_s": 1.0,
        "idle_timeout_s": 10.0,
        "max_traces": 10_000,
        "max_spans": 200_000,
        "max_size_mib": 256.0,
        "late_cache_traces": 100_000,
        "tick_s": 0.05,
        "dir": None,
        "segment_size_mib": 64.0,
    },
    "grading": {
        "policy": None,
        "workers": 2,
        "processes": 1,
        "max_backlog_spans": 200_000,
        "model": {
            "enabled": False,
            "model": None,
            "sample_rate": 1.0,
            "calls_per_minute": 60,
            "max_concurrency": 4,
            "appropriate": False,
        },
    },
    "store": {
        "enabled": True,
        "path": None,
        "max_age_h": 168.0,
        "max_size_mib": 512.0,
    },
    "telemetry": {
        "endpoint": None,  # None: the forward endpoint
        "protocol": None,  # None: the forward protocol
        "logs": True,
        "metrics": True,
        "prometheus": None,
        "label_cap": 100,
        "timeout_s": 5.0,
    },
    "shutdown": {
        "deadline_s": 20.0,
    },
    "content": {
        "mode": "keep",  # keep | truncate | drop: run content in events, logs, model prompts
        "max_chars": 256,
    },
}
"""Every key the file may have, with its default. A None default means "not set"."""


def default_store_path() -> Path:
    """`$XDG_DATA_HOME/attest-otel/store.db`, else `~/.local/share/attest-otel/store.db`."""
    base = os.environ.get("XDG_DATA_HOME", "").strip()
    root = Path(base) if base else Path.home() / ".local" / "share"
    return root / "attest-otel" / "store.db"


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


# --- the typed view the runtime reads ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReceiversConfig:
    grpc_endpoint: str
    grpc_max_recv_bytes: int
    grpc_workers: int
    http_endpoint: str
    http_max_body_bytes: int
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    tls_client_ca_file: Path | None = None
    auth_token_file: Path | None = None


@dataclass(frozen=True, slots=True)
class ForwardConfig:
    endpoint: str
    protocol: str
    headers: Mapping[str, str]
    compression: str
    timeout_s: float
    workers: int
    max_queue_spans: int
    max_queue_bytes: int
    max_batch_bytes: int
    max_request_bytes: int
    initial_backoff_s: float
    max_backoff_s: float
    retry_after_s: float
    tls_ca_file: Path | None = None
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    unready_after_s: float = 30.0


@dataclass(frozen=True, slots=True)
class BufferConfig:
    grace_s: float
    idle_timeout_s: float
    max_traces: int
    max_spans: int
    max_bytes: int
    late_cache_traces: int
    tick_s: float
    dir: Path | None
    segment_bytes: int


@dataclass(frozen=True, slots=True)
class ModelConfig:
    enabled: bool
    model: str | None
    sample_rate: float
    calls_per_minute: int
    max_concurrency: int
    appropriate: bool


@dataclass(frozen=True, slots=True)
class GradingConfig:
    policy: Path | None
    workers: int
    processes: int
    max_backlog_spans: int
    model: ModelConfig


@dataclass(frozen=True, slots=True)
class StoreConfig:
    enabled: bool
    path: Path
    max_age_s: float
    max_bytes: int


@dataclass(frozen=True, slots=True)
class TelemetryConfig:
    endpoint: str | None
    protocol: str | None
    logs: bool
    metrics: bool
    prometheus: str | None
    label_cap: int
    timeout_s: float


@dataclass(frozen=True, slots=True)
class ContentConfig:
    mode: str = "keep"
    max_chars: int = 256


@dataclass(frozen=True, slots=True)
class ServiceConfig:
    receivers: ReceiversConfig
    forward: ForwardConfig
    buffer: BufferConfig
    grading: GradingConfig
    store: StoreConfig
    telemetry: TelemetryConfig
    shutdown_deadline_s: float
    content: ContentConfig = field(default_factory=ContentConfig)
    source: str = "<defaults>"
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)


# --- loading -------------------------------------------------------------------------------

FLAG_KEYS: dict[str, tuple[str, ...]] = {
    "grpc_endpoint": ("receivers", "grpc", "endpoint"),
    "http_endpoint": ("receivers", "http", "endpoint"),
    "forward_endpoint": ("forward", "endpoint"),
    "forward_protocol": ("forward", "protocol"),
    "store": ("store", "path"),
    "policy": ("grading", "policy"),
    "prometheus": ("telemetry", "prometheus"),
    "buffer_dir": ("buffer", "dir"),
    "tls_cert_file": ("receivers", "tls", "cert_file"),
    "tls_key_file": ("receivers", "tls", "key_file"),
    "tls_client_ca_file": ("receivers", "tls", "client_ca_file"),
    "auth_token_file": ("receivers", "auth_token_file"),
    "forward_ca_file": ("forward", "tls", "ca_file"),
    "forward_cert_file": ("forward", "tls", "cert_file"),
    "forward_key_file": ("forward", "tls", "key_file"),
    "content": ("content", "mode"),
}
"""`serve` flag -> the config key it overrides."""

_PROTOCOLS = ("grpc", "http/protobuf")
_COMPRESSIONS = ("none", "gzip")
CONTENT_MODES = ("keep", "truncate", "drop")


def load_service_config(
    path: str | Path | None = None,
    flags: Mapping[str, Any] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
) -> ServiceConfig:
    """The effective config: defaults < file < flags (< env only where both are silent).

    Raises PolicyError (source = the file, or `<flags>`) listing every problem found.
    """
    env = os.environ if environ is None else environ
    source = str(path) if path is not None else "<flags>"
    checker = _Checker()
    tree = copy.deepcopy(DEFAULTS)
    lines: dict[str, int] = {}
    if path is not None:
        node = _compose(Path(path))
        if node is not None:
            checker.merge(tree, DEFAULTS, node, "", lines)
    for flag, value in (flags or {}).items():
        if value is None:
            continue
        keys = FLAG_KEYS.get(flag)
        if keys is None:
            checker.problems.append(f"--{flag.replace('_', '-')}: unknown flag")
            continue
        target = tree
        for key in keys[:-1]:
            target = target[key]
        target[keys[-1]] = value
        lines.pop(".".join(keys), None)
    forward = tree["forward"]
    if forward["endpoint"] is None:
        forward["endpoint"] = _env_first(
            env, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"
        )
    if forward["protocol"] is None:
        forward["protocol"] = (
            _env_first(env, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
            or "grpc"
        )
    if not forward["headers"]:
        raw_headers = _env_first(
            env, "OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS"
        )
        if raw_headers:
            forward["headers"] = _parse_headers(raw_headers)
    if forward["compression"] == "none":
        compression = _env_first(
            env, "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "OTEL_EXPORTER_OTLP_COMPRESSION"
        )
        if compression:
            forward["compression"] = compression
    config = _build(tree, source, checker, lines)
    if checker.problems or config is None:
        raise PolicyError(source, checker.problems)
    return config


def _env_first(env: Mapping[str, str], *names: str) -> str | None:
    for name in names:
        value = env.get(name, "").strip()
        if value:
            return value
    return None


def _parse_headers(text: str) -> dict[str, str]:
    from urllib.parse import unquote

    out: dict[str, str] = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if sep and key.strip():
            out[unquote(key.strip()).lower()] = unquote(value.strip())
    return out


def _compose(path: Path) -> Node | None:
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PolicyError(source, ["no such file"]) from None
    except IsADirectoryError:
        raise PolicyError(source, ["is a directory, not a config file"]) from None
    except UnicodeDecodeError as e:
        raise PolicyError(source, [f"not UTF-8 text ({e.reason} at byte {e.start})"]) from None
    except OSError as e:
        raise PolicyError(source, [e.strerror or str(e)]) from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise PolicyError(source, [f"{where}invalid YAML: {e.problem or e.context}"]) from None
    except yaml.YAMLError as e:
        raise PolicyError(source, [f"invalid YAML: {e}"]) from None
    if node is None or (isinstance(node, ScalarNode) and node.tag.endswith(":null")):
        return None
    return node


class _Checker:
    """Merges the YAML node tree into the defaults, recording problems with key and line."""

    def __init__(self) -> None:
        self.problems: list[str] = []

    def merge(
        self,
        target: dict[str, Any],
        schema: Mapping[str, Any],
        node: Node,
        path: str,
        lines: dict[str, int],
    ) -> None:
        if not isinstance(node, MappingNode):
            self.problems.append(
                f"{path or '<top>'} (line {node.start_mark.line + 1}): expected a mapping"
            )
            return
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, ScalarNode) else "?"
            full = f"{path}.{key}" if path else key
            line = key_node.start_mark.line + 1
            if key in seen:
                self.problems.append(f"{full} (line {line}): duplicate key")
                continue
            seen.add(key)
            if key not in schema:
                known = ", ".join(schema)
                self.problems.append(
                    f"{full} (line {line}): unknown key (expected one of: {known})"
                )
                continue
            default = schema[key]
            if isinstance(default, dict) and key != "headers":
                if _is_null(value_node):
                    continue
                self.merge(target[key], default, value_node, full, lines)
                continue
            lines[full] = value_node.start_mark.line + 1
            try:
                target[key] = _scalar(value_node, key == "headers")
            except ValueError as e:
                self.problems.append(f"{full} (line {lines[full]}): {e}")


def _is_null(node: Node) -> bool:
    return isinstance(node, ScalarNode) and node.tag.endswith(":null")


def _scalar(node: Node, mapping: bool) -> Any:
    if mapping:
        if _is_null(node):
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
        raise ValueError("expected a single value, got a " + (
            "mapping" if isinstance(node, MappingNode) else "list"))
    return yaml.safe_load(yaml.serialize(node))


# --- checking the merged tree --------------------------------------------------------------


class _Fields:
    """Typed reads from the merged tree; a wrong value is a problem, not an exception."""

    def __init__(self, tree: Mapping[str, Any], checker: _Checker, lines: Mapping[str, int]):
        self.tree = tree
        self.checker = checker
        self.lines = lines

    def _get(self, path: str) -> Any:
        node: Any = self.tree
        for key in path.split("."):
            node = node[key]
        return node

    def problem(self, path: str, text: str) -> None:
        line = self.lines.get(path)
        where = f"{path} (line {line})" if line else path
        self.checker.problems.append(f"{where}: {text}")

    def number(
        self, path: str, *, minimum: float = 0.0, exclusive: bool = True, integer: bool = False
    ) -> float:
        value = self._get(path)
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
        return float(value)

    def integer(self, path: str, minimum: int = 1) -> int:
        return int(self.number(path, minimum=minimum, exclusive=False, integer=True))

    def flag(self, path: str) -> bool:
        value = self._get(path)
        if not isinstance(value, bool):
            self.problem(path, f"expected true or false, got {value!r}")
            return False
        return value

    def text(self, path: str, *, optional: bool = False) -> str | None:
        value = self._get(path)
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


def _build(
    tree: Mapping[str, Any], source: str, checker: _Checker, lines: Mapping[str, int]
) -> ServiceConfig | None:
    f = _Fields(tree, checker, lines)
    mib = float(MIB)
    receivers = ReceiversConfig(
        grpc_endpoint=f.address("receivers.grpc.endpoint") or "",
        grpc_max_recv_bytes=int(f.number("receivers.grpc.max_recv_msg_size_mib") * mib),
        grpc_workers=f.integer("receivers.grpc.workers"),
        http_endpoint=f.address("receivers.http.endpoint") or "",
        http_max_body_bytes=int(f.number("receivers.http.max_request_body_size_mib") * mib),
        tls_cert_file=f.file("receivers.tls.cert_file"),
        tls_key_file=f.file("receivers.tls.key_file"),
        tls_client_ca_file=f.file("receivers.tls.client_ca_file"),
        auth_token_file=f.file("receivers.auth_token_file"),
    )
    if (receivers.tls_cert_file is None) != (receivers.tls_key_file is None):
        f.problem("receivers.tls", "cert_file and key_file go together: set both or neither")
    if receivers.tls_client_ca_file is not None and receivers.tls_cert_file is None:
        f.problem("receivers.tls.client_ca_file", "needs receivers.tls.cert_file and key_file")
    if receivers.auth_token_file is not None and not _token_ok(receivers.auth_token_file):
        f.problem("receivers.auth_token_file",
                  "must hold one token of printable ASCII (no spaces)")
    if receivers.grpc_endpoint and receivers.grpc_endpoint == receivers.http_endpoint:
        f.problem("receivers.http.endpoint", "is the same address as receivers.grpc.endpoint")
    endpoint = f.text("forward.endpoint", optional=True)
    if endpoint is None:
        f.problem(
            "forward.endpoint",
            "is required (set it in the file, with --forward-endpoint, or with "
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT / OTEL_EXPORTER_OTLP_ENDPOINT)",
        )
    else:
        _check_not_self(f, endpoint, receivers)
    forward = ForwardConfig(
        endpoint=endpoint or "",
        protocol=f.choice("forward.protocol", _PROTOCOLS),
        headers=dict(tree["forward"]["headers"]),
        compression=f.choice("forward.compression", _COMPRESSIONS),
        timeout_s=f.number("forward.timeout_s"),
        workers=f.integer("forward.workers"),
        max_queue_spans=f.integer("forward.max_queue_spans"),
        max_queue_bytes=int(f.number("forward.max_queue_size_mib") * mib),
        max_batch_bytes=int(f.number("forward.max_batch_size_kib") * 1024),
        max_request_bytes=int(f.number("forward.max_request_size_mib") * mib),
        initial_backoff_s=f.number("forward.initial_backoff_s"),
        max_backoff_s=f.number("forward.max_backoff_s"),
        retry_after_s=f.number("forward.retry_after_s"),
        tls_ca_file=f.file("forward.tls.ca_file"),
        tls_cert_file=f.file("forward.tls.cert_file"),
        tls_key_file=f.file("forward.tls.key_file"),
        unready_after_s=f.number("forward.unready_after_s"),
    )
    if (forward.tls_cert_file is None) != (forward.tls_key_file is None):
        f.problem("forward.tls", "cert_file and key_file go together: set both or neither")
    if forward.max_batch_bytes > forward.max_request_bytes:
        f.problem("forward.max_batch_size_kib", "must not exceed forward.max_request_size_mib")
    if forward.initial_backoff_s > forward.max_backoff_s:
        f.problem("forward.initial_backoff_s", "must not exceed forward.max_backoff_s")
    buffer_dir = f.text("buffer.dir", optional=True)
    buffer = BufferConfig(
        grace_s=f.number("buffer.grace_s", exclusive=False),
        idle_timeout_s=f.number("buffer.idle_timeout_s"),
        max_traces=f.integer("buffer.max_traces"),
        max_spans=f.integer("buffer.max_spans"),
        max_bytes=int(f.number("buffer.max_size_mib") * mib),
        late_cache_traces=f.integer("buffer.late_cache_traces", minimum=0),
        tick_s=f.number("buffer.tick_s"),
        dir=Path(buffer_dir).expanduser() if buffer_dir else None,
        segment_bytes=int(f.number("buffer.segment_size_mib") * mib),
    )
    if buffer.grace_s > buffer.idle_timeout_s:
        f.problem("buffer.grace_s", "must not exceed buffer.idle_timeout_s")
    policy = f.text("grading.policy", optional=True)
    model = ModelConfig(
        enabled=f.flag("grading.model.enabled"),
        model=f.text("grading.model.model", optional=True),
        sample_rate=f.number("grading.model.sample_rate", exclusive=False),
        calls_per_minute=f.integer("grading.model.calls_per_minute", minimum=0),
        max_concurrency=f.integer("grading.model.max_concurrency"),
        appropriate=f.flag("grading.model.appropriate"),
    )
    if model.sample_rate > 1:
        f.problem("grading.model.sample_rate", f"must be at most 1, got {model.sample_rate:g}")
    grading = GradingConfig(
        policy=Path(policy).expanduser() if policy else None,
        workers=f.integer("grading.workers"),
        processes=f.integer("grading.processes", minimum=0),
        max_backlog_spans=f.integer("grading.max_backlog_spans"),
        model=model,
    )
    if grading.policy is not None and not grading.policy.is_file():
        f.problem("grading.policy", f"no such file: {grading.policy}")
    store_path = f.text("store.path", optional=True)
    store = StoreConfig(
        enabled=f.flag("store.enabled"),
        path=Path(store_path).expanduser() if store_path else default_store_path(),
        max_age_s=f.number("store.max_age_h") * 3600.0,
        max_bytes=int(f.number("store.max_size_mib") * mib),
    )
    telemetry = TelemetryConfig(
        endpoint=f.text("telemetry.endpoint", optional=True),
        protocol=(
            f.choice("telemetry.protocol", _PROTOCOLS)
            if tree["telemetry"]["protocol"] is not None
            else None
        ),
        logs=f.flag("telemetry.logs"),
        metrics=f.flag("telemetry.metrics"),
        prometheus=f.address("telemetry.prometheus", optional=True),
        label_cap=f.integer("telemetry.label_cap"),
        timeout_s=f.number("telemetry.timeout_s"),
    )
    deadline = f.number("shutdown.deadline_s")
    content = ContentConfig(
        mode=f.choice("content.mode", CONTENT_MODES),
        max_chars=f.integer("content.max_chars", minimum=16),
    )
    if checker.problems:
        return None
    return ServiceConfig(
        receivers=receivers,
        forward=forward,
        buffer=buffer,
        grading=grading,
        store=store,
        telemetry=telemetry,
        shutdown_deadline_s=deadline,
        content=content,
        source=source,
        raw=tree,
    )


def read_token(path: Path) -> str:
    """The bearer token in `path`: its text, stripped of surrounding whitespace."""
    return path.read_text(encoding="ascii", errors="replace").strip()


def _token_ok(path: Path) -> bool:
    try:
        token = read_token(path)
    except OSError:
        return True  # already reported by _Fields.file
    return bool(token) and all(33 <= ord(c) < 127 for c in token)


def _check_not_self(f: _Fields, endpoint: str, receivers: ReceiversConfig) -> None:
    """Forwarding to our own receiver would loop every span forever."""
    try:
        host, port = parse_host_port(endpoint)
    except ValueError as e:
        f.problem("forward.endpoint", str(e))
        return
    for own in (receivers.grpc_endpoint, receivers.http_endpoint):
        try:
            own_host, own_port = parse_host_port(own)
        except ValueError:
            continue
        same_host = host == own_host or {host, own_host} <= {"127.0.0.1", "localhost"}
        if own_port != 0 and port == own_port and same_host:
            f.problem("forward.endpoint", f"{endpoint} is this sidecar's own receiver ({own})")


def config_lines(config: ServiceConfig) -> list[str]:
    """`key = value` lines of the effective config, for the start-up log."""
    out: list[str] = []

    def walk(node: Mapping[str, Any], prefix: str) -> None:
        for key, value in node.items():
            full = f"{prefix}.{key}" if prefix else key
            if isinstance(value, dict) and key != "headers":
                walk(value, full)
            elif key == "headers":
                out.append(f"{full} = {sorted(value)}")
            else:
                out.append(f"{full} = {value}")

    walk(config.raw, "")
    return out

