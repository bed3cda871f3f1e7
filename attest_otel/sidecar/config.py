"""The sidecar's configuration: one YAML file, flags over it, defaults under it.

Each part of the sidecar is built from its own section: the Forwarder from `ForwardConfig`,
the TraceBuffer from `BufferConfig`, the content rules from `content.ContentPolicy`. Each
section's dataclass is where its defaults are written, once: a field's metadata (`_key`)
names its key in the file and the unit the file uses (`max_queue_size_mib` in the file,
`max_queue_bytes` at run time, where bytes are what is counted). `DEFAULTS`, the same tree
as the file, is derived from those fields; `serve --help`, the shipped
collector-config/attest-otel.yaml and the README's key table are tested against it.

`load_service_config` reads the file (expanding `${env:NAME}` / `${env:NAME:-default}` as
`yamlcheck` says), lays the flags over it, fills the forward endpoint, protocol, headers and
compression from `OTEL_EXPORTER_OTLP_*` where neither gave them, and checks the result
whole: every problem at once with its key path (and line, when it came from the file), in
one `PolicyError`. What needs more than this file to check (the policy file it names, a
model to call) is checked by `service.build_service`, still before anything starts.

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

# Every field here is declared through yamlcheck.key/section, which return dataclasses.field.
# ruff: noqa: RUF009

from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from attest_otel.content import CONTENT_MODES, ContentPolicy
from attest_otel.errors import PolicyError
from attest_otel.store.base import redact, url_problem
from attest_otel.yamlcheck import (
    Key,
    TreeChecker,
    TreeReader,
    compose,
    file_defaults,
    header_problem,
    parse_host_port,
    put,
    read_text,
)
from attest_otel.yamlcheck import key as _key
from attest_otel.yamlcheck import section as _section

__all__ = [
    "DEFAULTS",
    "FLAG_KEYS",
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

MIB = 1024 * 1024
KIB = 1024
PROTOCOLS = ("grpc", "http/protobuf")
_COMPRESSIONS = ("none", "gzip")


def default_store_path() -> Path:
    """`$XDG_DATA_HOME/attest-otel/store.db`, else `~/.local/share/attest-otel/store.db`."""
    base = os.environ.get("XDG_DATA_HOME", "").strip()
    root = Path(base) if base else Path.home() / ".local" / "share"
    return root / "attest-otel" / "store.db"


# --- how a field is written in the file ----------------------------------------------------


_SIZE_MIB: dict[str, Any] = {"kind": "size", "scale": float(MIB)}
_CONTENT_KEYS = {
    "mode": Key("mode", "choice", choices=CONTENT_MODES),
    "max_chars": Key("max_chars", "int", minimum=16),
}
"""How the `content:` section writes `ContentPolicy`, whose defaults live in `content`."""

# --- the sections ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ReceiversConfig:
    grpc_endpoint: str = _key("grpc.endpoint", "address", "127.0.0.1:4317")
    grpc_max_recv_bytes: int = _key("grpc.max_recv_msg_size_mib", default=4 * MIB, **_SIZE_MIB)
    """The Collector's OTLP receiver default (configgrpc: grpc-go's 4 MiB)."""
    grpc_read_cap_bytes: int = _key("grpc.read_cap_mib", default=64 * MIB, **_SIZE_MIB)
    """gRPC requests up to this are read, so one over `max_recv_msg_size_mib` is counted,
    logged with its sender and its traces told before it is refused; past it grpcio
    refuses alone (counted by the sender only). Memory: one such request per gRPC worker."""
    grpc_workers: int = _key("grpc.workers", "int", 8)
    """gRPC threads for OTLP Export; the Grader API has its own on top (`grader_workers`)."""
    grader_workers: int = _key("grpc.grader_workers", "int", 2)
    """Grader API calls at once (GradeRun may wait on the model); more are refused at once
    with RESOURCE_EXHAUSTED, so they never take the threads Export needs."""
    http_endpoint: str = _key("http.endpoint", "address", "127.0.0.1:4318")
    http_max_body_bytes: int = _key("http.max_request_body_size_mib", default=20 * MIB, **_SIZE_MIB)
    http_max_json_bytes: int = _key("http.max_json_body_size_mib", default=4 * MIB, **_SIZE_MIB)
    """OTLP/JSON costs far more than protobuf to parse (docs/measurements.md, "Parse cost per
    encoding"): its own, lower cap."""
    http_workers: int = _key("http.workers", "int", 32)
    """Threads working on whole HTTP requests; connections wait on the event loop, not here."""
    http_max_connections: int = _key("http.max_connections", "int", 4096)
    """Open connections at once; at the cap the one idle longest is closed for a new one."""
    http_max_per_peer: int = _key("http.max_connections_per_peer", "int", 1024)
    """Open connections from one address; past it a new one is closed at once."""
    http_header_timeout_s: float = _key("http.header_timeout_s", "number", 5.0)
    """A request line and headers (or a kept-alive connection's next one) must arrive
    within this, or the connection is closed."""
    http_body_timeout_s: float = _key("http.body_timeout_s", "number", 30.0)
    max_concurrent_decodes: int = _key("http.max_concurrent_decodes", "int", 2)
    """Gunzip and JSON conversions at once, per kind (one sender: half of them); others
    wait, then get 503 + Retry-After."""
    tls_cert_file: Path | None = _key("tls.cert_file", "file", None)
    tls_key_file: Path | None = _key("tls.key_file", "file", None)
    tls_client_ca_file: Path | None = _key("tls.client_ca_file", "file", None)
    """Set: clients must present a certificate this CA signed."""
    auth_token_file: Path | None = _key("auth_token_file", "file", None)
    """Ingest token: sending spans (OTLP on both ports)."""
    grader_token_file: Path | None = _key("grader_token_file", "file", None)
    """Read token of the Grader API (GradeTrace returns stored content, GradeRun spends the
    model budget). Unset: the API is closed whenever an ingest token is set, and open
    (loopback, like everything else) when none is."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ForwardConfig:
    """The next hop, and the queue and retries in front of it (`forward.Forwarder`)."""

    endpoint: str = _key("endpoint", "text", optional=True)
    protocol: str = _key("protocol", "choice", "grpc", choices=PROTOCOLS)
    """Unless the file or a flag sets it: OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL, else this."""
    headers: Mapping[str, str] = _key("headers", "headers", factory=dict)
    compression: str = _key("compression", "choice", "none", choices=_COMPRESSIONS)
    timeout_s: float = _key("timeout_s", "number", 10.0)
    workers: int = _key("workers", "int", 4)
    max_queue_spans: int = _key("max_queue_spans", "int", 200_000)
    max_queue_bytes: int = _key("max_queue_size_mib", default=256 * MIB, **_SIZE_MIB)
    max_batch_bytes: int = _key("max_batch_size_kib", "size", 1024 * KIB, scale=float(KIB))
    max_request_bytes: int = _key("max_request_size_mib", default=4 * MIB, **_SIZE_MIB)
    initial_backoff_s: float = _key("initial_backoff_s", "number", 0.5)
    max_backoff_s: float = _key("max_backoff_s", "number", 30.0)
    retry_after_s: float = _key("retry_after_s", "number", 1.0)
    unready_after_s: float = _key("unready_after_s", "number", 30.0)
    """/readyz says 503 once forwarding has failed this long."""
    tls_ca_file: Path | None = _key("tls.ca_file", "file", None)
    """Trusted CA certificates (PEM) of the next hop; else the system's. Any tls key set (or
    an https:// endpoint) turns TLS on."""
    tls_cert_file: Path | None = _key("tls.cert_file", "file", None)
    """Client certificate (PEM) for mTLS, with `tls_key_file`."""
    tls_key_file: Path | None = _key("tls.key_file", "file", None)

    @property
    def tls_files(self) -> bool:
        return any(f is not None for f in (self.tls_ca_file, self.tls_cert_file, self.tls_key_file))


@dataclass(frozen=True, slots=True, kw_only=True)
class BufferConfig:
    """How long and how much `buffer.TraceBuffer` holds, and where `wal` writes."""

    grace_s: float = _key("grace_s", "number", 1.0, exclusive=False)
    idle_timeout_s: float = _key("idle_timeout_s", "number", 10.0)
    max_traces: int = _key("max_traces", "int", 10_000)
    max_spans: int = _key("max_spans", "int", 200_000)
    max_bytes: int = _key("max_size_mib", default=256 * MIB, **_SIZE_MIB)
    late_cache_traces: int = _key("late_cache_traces", "int", 100_000, minimum=0)
    tick_s: float = _key("tick_s", "number", 0.05)
    dir: Path | None = _key("dir", "path", None)
    segment_bytes: int = _key("segment_size_mib", default=64 * MIB, **_SIZE_MIB)
    max_dir_bytes: int = _key("max_dir_size_mib", default=2048 * MIB, **_SIZE_MIB)
    """The durable log's cap: past it requests are answered "retry later", not written."""
    max_hold_s: float = _key("max_hold_s", "number", 300.0)
    """A trace still receiving spans after this is graded as it is (late spans regrade it):
    one trace kept alive cannot pin memory and the durable log for ever."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelConfig:
    enabled: bool = _key("enabled", "flag", False)
    model: str | None = _key("model", "text", None, optional=True)
    """None: $ATTEST_OTEL_MODEL, else the judge's default model."""
    sample_rate: float = _key("sample_rate", "number", 1.0, exclusive=False, maximum=1.0)
    calls_per_minute: int = _key("calls_per_minute", "int", 60, minimum=0)
    max_concurrency: int = _key("max_concurrency", "int", 4)
    appropriate: bool = _key("appropriate", "flag", False)
    budget_s: float = _key("budget_s", "number", 60.0)
    """How long grading one trace may take with model checks on (in this process, model
    calls included): past it the trace goes on ungraded and flagged (`bounded`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GradingConfig:
    policy: Path | None = _key("policy", "path", None)
    workers: int = _key("workers", "int", 2)
    processes: int = _key("processes", "int", 1, minimum=0)
    nice: int = _key("nice", "int", 0, minimum=0, maximum=19)
    """Added to the grading processes' niceness: where grading and the receivers want the
    same cores, the receivers run first. Plain spans wait less, graded spans wait longer at
    capacity (the measured trade is in collector-config/README.md's sizing notes)."""
    max_backlog_spans: int = _key("max_backlog_spans", "int", 200_000)
    max_trace_bytes: int = _key("max_trace_size_mib", default=32 * MIB, **_SIZE_MIB)
    """A held trace larger than this is forwarded ungraded (counted): grading takes many
    times a trace's bytes (docs/measurements.md, "Grading memory per trace"), so this bounds a
    grading worker's memory."""
    budget_s: float = _key("budget_s", "number", 10.0)
    """How long a grading process may grade one trace: past it the process is killed and
    replaced, the trace forwarded ungraded, flagged and quarantined (`workers`)."""
    max_memory_bytes: int = _key("max_memory_mib", default=4096 * MIB, exclusive=False, **_SIZE_MIB)
    """Memory a grading process may take beyond its imports (RLIMIT_DATA); past it the
    trace is forwarded ungraded and flagged. 0: no bound."""
    model: ModelConfig = _section("model", ModelConfig)


@dataclass(frozen=True, slots=True, kw_only=True)
class StoreConfig:
    enabled: bool = _key("enabled", "flag", True)
    path: Path = _key("path", "path", factory=default_store_path, computed=True)
    url: str | None = _key("url", "text", None, optional=True)
    """Set: the fleet's shared PostgreSQL store (postgresql://USER:PASSWORD@HOST/DB, the
    password from ${env:...}) instead of the SQLite file at `path`."""
    max_age_s: float = _key("max_age_h", "number", 168 * 3600.0, scale=3600.0)
    max_bytes: int = _key("max_size_mib", default=512 * MIB, **_SIZE_MIB)
    max_queue_bytes: int = _key("max_queue_size_mib", default=64 * MIB, **_SIZE_MIB)
    """Writes waiting for the shared store (on disk under buffer.dir when set); past it a
    write is refused, counted, and /readyz answers 503."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TelemetryConfig:
    endpoint: str | None = _key("endpoint", "text", None, optional=True)
    """None: the forward endpoint."""
    protocol: str | None = _key("protocol", "choice", None, choices=PROTOCOLS, optional=True)
    """None: the forward protocol."""
    logs: bool = _key("logs", "flag", True)
    metrics: bool = _key("metrics", "flag", True)
    prometheus: str | None = _key("prometheus", "address", None, optional=True)
    headers: Mapping[str, str] = _key("headers", "headers", factory=dict)
    """Headers of the log-event and metric exporters. Unset: forward.headers when they go
    to the forward endpoint, none otherwise (one host's credentials never go to another)."""
    label_cap: int = _key("label_cap", "int", 100)
    label_max_chars: int = _key("label_max_chars", "int", 128, minimum=8)
    label_ttl_s: float = _key("label_ttl_s", "number", 3600.0)
    """A label value not seen for this long gives its place to a new one."""
    timeout_s: float = _key("timeout_s", "number", 5.0)


@dataclass(frozen=True, slots=True, kw_only=True)
class ServiceConfig:
    receivers: ReceiversConfig = _section("receivers", ReceiversConfig)
    forward: ForwardConfig = _section("forward", ForwardConfig, required=True)
    buffer: BufferConfig = _section("buffer", BufferConfig)
    grading: GradingConfig = _section("grading", GradingConfig)
    store: StoreConfig = _section("store", StoreConfig)
    telemetry: TelemetryConfig = _section("telemetry", TelemetryConfig)
    shutdown_deadline_s: float = _key("shutdown.deadline_s", "number", 20.0)
    """SIGTERM: grade, forward and flush within this."""
    content: ContentPolicy = _section("content", ContentPolicy, keys=_CONTENT_KEYS)
    source: str = "<defaults>"
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    """The merged tree the values were read from (file units), for the start-up log."""


DEFAULTS: dict[str, Any] = file_defaults(ServiceConfig)
"""Every key the file may have, with its default in the file's unit (None: not set), read
from the dataclasses above. Do not edit: change a field's default instead."""


def default(path: str) -> Any:
    """The default of one key (`"receivers.grpc.endpoint"`), for help texts."""
    node: Any = DEFAULTS
    for name in path.split("."):
        node = node[name]
    return node


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
    checker = TreeChecker()
    tree = copy.deepcopy(DEFAULTS)
    if path is not None:
        node = compose(read_text(path, "a config file"), source)
        if node is not None:
            checker.expand_env(node, env)
            checker.merge(tree, DEFAULTS, node)
    for flag, value in (flags or {}).items():
        if value is None:
            continue
        keys = FLAG_KEYS.get(flag)
        if flag == "store" and "://" in str(value):  # --store postgresql://...: the URL key
            keys = ("store", "url")
        if keys is None:
            checker.problems.append(f"--{flag.replace('_', '-')}: unknown flag")
            continue
        put(tree, ".".join(keys), value)
        checker.given.add(".".join(keys))
        checker.lines.pop(".".join(keys), None)
    _from_otel_env(tree["forward"], checker, env)
    config = _build(tree, source, checker)
    if checker.problems or config is None:
        raise PolicyError(source, checker.problems)
    return config


def _from_otel_env(forward: dict[str, Any], checker: TreeChecker, env: Mapping[str, str]) -> None:
    """The standard exporter variables fill what neither the file nor a flag set."""
    given = checker.given
    if forward["endpoint"] is None:
        forward["endpoint"] = _env_first(
            env, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"
        )
    if "forward.protocol" not in given or forward["protocol"] is None:
        forward["protocol"] = _env_first(
            env, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"
        ) or default("forward.protocol")
    if "forward.headers" not in given:
        raw_headers = _env_first(
            env, "OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS"
        )
        if raw_headers:
            forward["headers"] = _parse_headers(raw_headers, checker.problems)
    if "forward.compression" not in given:
        compression = _env_first(
            env, "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "OTEL_EXPORTER_OTLP_COMPRESSION"
        )
        if compression:
            forward["compression"] = compression


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


# --- reading the merged tree into the sections ---------------------------------------------


def _build(tree: dict[str, Any], source: str, checker: TreeChecker) -> ServiceConfig | None:
    """The sections read from the merged tree, then the checks across fields."""
    f = TreeReader(tree, checker)
    config: ServiceConfig = f.section(ServiceConfig, source=source, raw=tree)
    receivers, forward, buffer = config.receivers, config.forward, config.buffer
    if (receivers.tls_cert_file is None) != (receivers.tls_key_file is None):
        f.problem("receivers.tls", "cert_file and key_file go together: set both or neither")
    if receivers.tls_client_ca_file is not None and receivers.tls_cert_file is None:
        f.problem("receivers.tls.client_ca_file", "needs receivers.tls.cert_file and key_file")
    if receivers.auth_token_file is not None and not _token_ok(receivers.auth_token_file):
        f.problem("receivers.auth_token_file", "must hold one token of printable ASCII (no spaces)")
    if receivers.grader_token_file is not None and not _token_ok(receivers.grader_token_file):
        f.problem(
            "receivers.grader_token_file", "must hold one token of printable ASCII (no spaces)"
        )
    if (
        receivers.grader_token_file is not None
        and receivers.auth_token_file is not None
        and _same_token(receivers.grader_token_file, receivers.auth_token_file)
    ):
        f.problem("receivers.grader_token_file", "must differ from receivers.auth_token_file")
    # Port 0 asks the kernel for a free port each time, so two of them never collide.
    if (
        receivers.grpc_endpoint
        and receivers.grpc_endpoint == receivers.http_endpoint
        and not receivers.grpc_endpoint.endswith(":0")
    ):
        f.problem("receivers.http.endpoint", "is the same address as receivers.grpc.endpoint")
    if forward.endpoint is None:
        f.problem(
            "forward.endpoint",
            "is required (set it in the file, with --forward-endpoint, or with "
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT / OTEL_EXPORTER_OTLP_ENDPOINT)",
        )
    else:
        _check_not_self(f, forward.endpoint, receivers)
    if (forward.tls_cert_file is None) != (forward.tls_key_file is None):
        f.problem("forward.tls", "cert_file and key_file go together: set both or neither")
    if forward.max_batch_bytes > forward.max_request_bytes:
        f.problem("forward.max_batch_size_kib", "must not exceed forward.max_request_size_mib")
    if forward.initial_backoff_s > forward.max_backoff_s:
        f.problem("forward.initial_backoff_s", "must not exceed forward.max_backoff_s")
    if buffer.grace_s > buffer.idle_timeout_s:
        f.problem("buffer.grace_s", "must not exceed buffer.idle_timeout_s")
    _check_store(f, config.store, tree)
    return None if checker.problems else config


def _check_store(f: TreeReader, store: StoreConfig, tree: Mapping[str, Any]) -> None:
    """A URL must be PostgreSQL's, and one given as `store.path` belongs in `store.url`."""

    raw_path = tree.get("store", {}).get("path")
    if isinstance(raw_path, str) and "://" in raw_path:
        f.problem("store.path", f"{redact(raw_path)} is a URL: put it in store.url")
    problem = url_problem(store.url) if store.url is not None else None
    if problem is not None:
        f.problem("store.url", f"{redact(store.url)}: {problem}")


def read_token(path: Path) -> str:
    """The bearer token in `path`: its text, stripped of surrounding whitespace."""
    return path.read_text(encoding="ascii", errors="replace").strip()


def _token_ok(path: Path) -> bool:
    try:
        token = read_token(path)
    except OSError:
        return True  # already reported by TreeReader.file
    return bool(token) and all(33 <= ord(c) < 127 for c in token)


def _same_token(a: Path, b: Path) -> bool:
    try:
        return read_token(a) == read_token(b)
    except OSError:
        return False


def _check_not_self(f: TreeReader, endpoint: str, receivers: ReceiversConfig) -> None:
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
