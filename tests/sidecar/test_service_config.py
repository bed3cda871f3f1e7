"""The sidecar's config: defaults, the whole file, flags over the file, env, every problem."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from attest_otel.errors import PolicyError
from attest_otel.sidecar.config import (
    DEFAULTS,
    MIB,
    default_store_path,
    load_service_config,
    parse_host_port,
)

DATA = Path(__file__).parents[1] / "fixtures" / "sidecar"


def test_the_default_config_is_valid_once_a_forward_endpoint_is_given() -> None:
    config = load_service_config(None, {"forward_endpoint": "collector:14317"}, environ={})
    assert config.receivers.grpc_endpoint == "127.0.0.1:4317"
    assert config.receivers.http_endpoint == "127.0.0.1:4318"
    assert config.receivers.grpc_max_recv_bytes == 4 * MIB
    assert config.receivers.http_max_body_bytes == 20 * MIB
    assert config.forward.protocol == "grpc"
    assert (config.buffer.grace_s, config.buffer.idle_timeout_s) == (1.0, 10.0)
    assert config.buffer.dir is None and not config.grading.model.enabled
    assert config.store.path == default_store_path()


def test_the_full_file_loads_into_exactly_these_values() -> None:
    config = load_service_config(DATA / "valid_full.yaml", environ={})
    assert config.forward.endpoint == "collector:24317"
    assert config.forward.protocol == "http/protobuf"
    assert dict(config.forward.headers) == {"authorization": "Bearer x"}
    assert config.forward.max_batch_bytes == 512 * 1024
    assert config.buffer.dir == Path("/var/lib/attest-otel/buffer")
    assert config.buffer.max_bytes == 64 * MIB
    assert config.grading.model.sample_rate == 0.25 and config.grading.model.appropriate
    assert config.store.max_age_s == 24 * 3600
    assert config.telemetry.prometheus == "127.0.0.1:9464" and not config.telemetry.logs
    assert config.shutdown_deadline_s == 15


def test_flags_override_the_file_which_overrides_the_defaults() -> None:
    config = load_service_config(
        DATA / "valid_full.yaml",
        {"forward_endpoint": "other:4317", "forward_protocol": "grpc", "buffer_dir": "/tmp/b",
         "grpc_endpoint": "127.0.0.1:5317"},
        environ={},
    )
    assert (config.forward.endpoint, config.forward.protocol) == ("other:4317", "grpc")
    assert config.buffer.dir == Path("/tmp/b")
    assert config.receivers.grpc_endpoint == "127.0.0.1:5317"
    assert config.receivers.http_endpoint == "0.0.0.0:14318"  # from the file


def test_the_forward_endpoint_falls_back_to_the_otel_variables() -> None:
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://general:4317",
           "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://traces:4318/v1/traces",
           "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
           "OTEL_EXPORTER_OTLP_HEADERS": "api-key=s3cr%20t"}
    config = load_service_config(None, {}, environ=env)
    assert config.forward.endpoint == "http://traces:4318/v1/traces"
    assert config.forward.protocol == "http/protobuf"
    assert dict(config.forward.headers) == {"api-key": "s3cr t"}


def test_every_problem_of_a_file_is_listed_at_once_with_its_line() -> None:
    with pytest.raises(PolicyError) as err:
        load_service_config(DATA / "invalid_every_problem.yaml", environ={})
    problems = err.value.problems
    text = "\n".join(problems)
    for needle in (
        "receivers.htp (line 3): unknown key",
        "receivers.grpc.endpoint (line 2): 'no-port' is not host:port",
        "receivers.grpc.workers (line 2): must be at least 1",
        "forward.protocol (line 5): must be one of grpc, http/protobuf",
        "forward.timeout_s (line 6): must be greater than 0",
        "forward.endpoint: is required",
        "buffer.grace_s (line 8): must not exceed buffer.idle_timeout_s",
        "grading.model.enabled (line 11): expected true or false",
        "grading.model.sample_rate (line 11): must be at most 1",
        "store.max_age_h (line 13): expected a number",
    ):
        assert needle in text, (needle, problems)
    assert len(problems) == 10


def test_invalid_yaml_names_the_line() -> None:
    with pytest.raises(PolicyError, match="line 2"):
        load_service_config(DATA / "invalid_yaml.yaml", environ={})


def _mutate(path: tuple[str, ...], value: Any) -> Callable[[dict[str, Any]], None]:
    def apply(tree: dict[str, Any]) -> None:
        node = tree
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value
    return apply


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        pytest.param(_mutate(("forward", "endpoint"), "127.0.0.1:4317"), "own receiver",
                     id="forwarding to our own gRPC port would loop"),
        pytest.param(_mutate(("receivers", "http", "endpoint"), "127.0.0.1:4317"),
                     "same address", id="the two receivers on one address"),
        pytest.param(_mutate(("forward", "max_batch_size_kib"), 8192), "must not exceed",
                     id="a batch larger than a request"),
        pytest.param(_mutate(("grading", "policy"), "/nonexistent/policy.yaml"), "no such file",
                     id="a policy file that is not there"),
        pytest.param(_mutate(("telemetry", "prometheus"), "9464"), "not host:port",
                     id="a Prometheus address without a host"),
    ],
)
def test_cross_field_problems(
    tmp_path: Path, mutate: Callable[[dict[str, Any]], None], message: str
) -> None:
    import yaml

    tree: dict[str, Any] = {"forward": {"endpoint": "collector:14317"}}
    mutate(tree)
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(tree))
    with pytest.raises(PolicyError, match=message):
        load_service_config(path, environ={})


def test_every_default_key_is_documented_in_the_collector_readme() -> None:
    readme = (Path(__file__).parents[2] / "collector-config" / "README.md").read_text()

    def keys(node: dict[str, Any], prefix: str = "") -> list[str]:
        out: list[str] = []
        for key, value in node.items():
            full = f"{prefix}.{key}" if prefix else key
            if isinstance(value, dict) and key != "headers":
                out += keys(value, full)
            else:
                out.append(full)
        return out

    missing = [k for k in keys(DEFAULTS) if f"`{k}`" not in readme]
    assert missing == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [("127.0.0.1:4317", ("127.0.0.1", 4317)), ("http://collector:4318/v1/traces",
                                                ("collector", 4318)),
     ("[::1]:4317", ("::1", 4317))],
)
def test_host_port(text: str, expected: tuple[str, int]) -> None:
    assert parse_host_port(text) == expected
