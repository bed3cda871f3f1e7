"""The sections of the sidecar's config, one dataclass each, where every default is written.

A field's metadata (`_key`, `config_keys`) names its key in the file and the unit the file
uses (`max_queue_size_mib` in the file, `max_queue_bytes` at run time, where bytes are what
is counted). `DEFAULTS`, the same tree as the file, is derived from the fields; so are the
models that check the file (`config_keys.file_model`). `config` loads the file into them.
"""

# Every field here is declared through config_keys.key/section, which return dataclasses.field.
# ruff: noqa: RUF009

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attest_otel.content import CONTENT_MODES, ContentPolicy
from attest_otel.sidecar.config_keys import Key, file_defaults
from attest_otel.sidecar.config_keys import key as _key
from attest_otel.sidecar.config_keys import section as _section

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
    "default",
    "default_store_path",
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
