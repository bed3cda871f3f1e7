"""The sidecar's config: defaults, the whole file, flags over the file, env, every problem."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from attest_otel.errors import PolicyError
from attest_otel.sidecar.config import (
    DEFAULTS,
    FLAG_KEYS,
    MIB,
    config_lines,
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
        {
            "forward_endpoint": "other:4317",
            "forward_protocol": "grpc",
            "buffer_dir": "/tmp/b",
            "grpc_endpoint": "127.0.0.1:5317",
        },
        environ={},
    )
    assert (config.forward.endpoint, config.forward.protocol) == ("other:4317", "grpc")
    assert config.buffer.dir == Path("/tmp/b")
    assert config.receivers.grpc_endpoint == "127.0.0.1:5317"
    assert config.receivers.http_endpoint == "0.0.0.0:14318"  # from the file


def test_the_forward_endpoint_falls_back_to_the_otel_variables() -> None:
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://general:4317",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://traces:4318/v1/traces",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_EXPORTER_OTLP_HEADERS": "api-key=s3cr%20t",
    }
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
        "receivers.htp (line 3): unknown key (did you mean 'http'?)",
        "receivers.grpc.endpoint (line 2): 'no-port' is not host:port",
        "receivers.grpc.workers (line 2): must be at least 1",
        "forward.protocol (line 5): must be one of grpc, http/protobuf",
        "forward.timeout_s (line 6): must be greater than 0",
        "forward.endpoint: is required",
        "buffer.grace_s (line 8): must not exceed buffer.idle_timeout_s",
        "grading.model.enabled (line 11): expected true or false",
        "grading.model.sample_rate (line 11): must be at most 1",
        "grading.nice (line 12): must be at most 19",
        "store.max_age_h (line 14): expected a number",
    ):
        assert needle in text, (needle, problems)
    assert len(problems) == 11


def test_invalid_yaml_names_the_line() -> None:
    # The file is one line: the error points at the bracket left open, not past the end.
    with pytest.raises(PolicyError, match=r"line 1, column 21: .*flow sequence that starts here"):
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
        pytest.param(
            _mutate(("forward", "endpoint"), "127.0.0.1:4317"),
            "own receiver",
            id="forwarding to our own gRPC port would loop",
        ),
        pytest.param(
            _mutate(("receivers", "http", "endpoint"), "127.0.0.1:4317"),
            "same address",
            id="the two receivers on one address",
        ),
        pytest.param(
            _mutate(("forward", "max_batch_size_kib"), 8192),
            "must not exceed",
            id="a batch larger than a request",
        ),
        pytest.param(
            _mutate(("telemetry", "prometheus"), "9464"),
            "not host:port",
            id="a Prometheus address without a host",
        ),
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
    [
        ("127.0.0.1:4317", ("127.0.0.1", 4317)),
        ("http://collector:4318/v1/traces", ("collector", 4318)),
        ("[::1]:4317", ("::1", 4317)),
    ],
)
def test_host_port(text: str, expected: tuple[str, int]) -> None:
    assert parse_host_port(text) == expected


# --- one default per key, read by the file, the flags, --help and the README ----------------


def _readme_rows() -> dict[str, tuple[str, str]]:
    """`key` -> (default cell, flag cell) of collector-config/README.md's key table."""
    readme = (Path(__file__).parents[2] / "collector-config" / "README.md").read_text()
    rows: dict[str, tuple[str, str]] = {}
    for line in readme.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0].startswith("`") and cells[0].endswith("`"):
            rows[cells[0].strip("`")] = (cells[1], cells[2])
    return rows


def _leaves(node: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in node.items():
        full = f"{prefix}.{key}" if prefix else key
        if isinstance(value, dict) and key != "headers":
            out.update(_leaves(value, full))
        else:
            out[full] = value
    return out


def test_the_readme_table_states_each_default_as_the_dataclasses_define_it() -> None:
    rows = _readme_rows()
    wrong = []
    for key, value in _leaves(DEFAULTS).items():
        cell = rows[key][0]
        if value is None or not cell.startswith("`"):
            continue  # "off", "none", "from OTEL_...": words for "not set"
        shown = json.dumps(value) if isinstance(value, bool | dict) else value
        if isinstance(shown, float) and shown.is_integer():
            shown = int(shown)
        if cell != f"`{shown}`":
            wrong.append((key, cell, shown))
    assert wrong == []


def test_every_serve_flag_is_a_config_key_and_the_readme_names_it() -> None:
    from attest_otel.cli.serve import serve

    flags = {p.name for p in serve.params} - {"config_path", "log_level"}
    assert flags == set(FLAG_KEYS)
    rows = _readme_rows()
    for flag, keys in FLAG_KEYS.items():
        assert rows[".".join(keys)][1] == f"`--{flag.replace('_', '-')}`", flag


def test_the_forward_protocol_written_in_the_file_wins_over_the_otel_variable(
    tmp_path: Path,
) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("forward: {endpoint: 'collector:4317', protocol: grpc, compression: none}\n")
    env = {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip"}
    config = load_service_config(path, environ=env)
    assert (config.forward.protocol, config.forward.compression) == ("grpc", "none")
    unset = load_service_config(None, {"forward_endpoint": "collector:4317"}, environ=env)
    assert (unset.forward.protocol, unset.forward.compression) == ("http/protobuf", "gzip")


# --- ${env:NAME} in the file --------------------------------------------------------------------

ENV_CONFIG = """\
forward:
  endpoint: ${env:NEXT_HOP}
  headers:
    authorization: "Bearer ${env:TOKEN}"
  timeout_s: ${env:TIMEOUT_S:-7}
telemetry:
  prometheus: "127.0.0.1:$${env:NOT_EXPANDED}"
"""


def test_tokens_and_endpoints_come_from_the_environment_typed_as_yaml_would_type_them(
    tmp_path: Path,
) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(ENV_CONFIG.replace("  prometheus", "  endpoint"))
    config = load_service_config(path, environ={"NEXT_HOP": "collector:4317", "TOKEN": "s3cr3t"})
    assert config.forward.endpoint == "collector:4317"
    assert dict(config.forward.headers) == {"authorization": "Bearer s3cr3t"}
    assert config.forward.timeout_s == 7.0  # the default, a number: it was unquoted
    assert config.telemetry.endpoint == "127.0.0.1:${env:NOT_EXPANDED}"  # $$ is a literal $
    assert "s3cr3t" not in "\n".join(config_lines(config))


def test_an_unset_variable_is_one_problem_naming_the_variable_key_and_line(
    tmp_path: Path,
) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(ENV_CONFIG)
    with pytest.raises(PolicyError) as err:
        load_service_config(path, environ={"TIMEOUT_S": "soon"})
    assert err.value.problems == [
        "forward.endpoint (line 2): ${env:NEXT_HOP}: NEXT_HOP is not set "
        "(set it, or give a default: ${env:NEXT_HOP:-value})",
        "forward.headers.authorization (line 4): ${env:TOKEN}: TOKEN is not set "
        "(set it, or give a default: ${env:TOKEN:-value})",
        "forward.timeout_s (line 5): expected a number, got 'soon'",
        "telemetry.prometheus (line 7): '127.0.0.1:${env:NOT_EXPANDED}' has no numeric port",
    ]


# --- the load-time factory: the policy, the model, the content mode ----------------------------


def test_build_service_lists_every_problem_of_what_the_config_names_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from attest_otel.sidecar.service import build_service

    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    policy = tmp_path / "policy.yaml"
    policy.write_text("agents:\n  billing:\n    allowed_tool: [a]\n")
    path = tmp_path / "c.yaml"
    path.write_text(
        f"forward: {{endpoint: 'collector:4317'}}\n"
        f"grading: {{policy: '{policy}', model: {{enabled: true}}}}\n"
    )
    config = load_service_config(path, environ={})
    with pytest.raises(PolicyError) as err:
        build_service(config)
    assert err.value.problems == [
        f"grading.policy: {policy}: agents.billing.allowed_tool (line 3): unknown key "
        "(did you mean 'allowed_tools'?)",
        "grading.model.enabled: true, but no model is available (set ANTHROPIC_API_KEY)",
    ]
    assert str(err.value).startswith(f"{path}: grading.policy: ")


def test_a_policy_file_that_is_not_there_is_refused_by_the_factory(tmp_path: Path) -> None:
    from attest_otel.sidecar.service import build_service

    config = load_service_config(
        None,
        {"forward_endpoint": "collector:4317", "policy": str(tmp_path / "nope.yaml")},
        environ={},
    )
    with pytest.raises(PolicyError, match=r"grading\.policy: .*nope\.yaml: no such file"):
        build_service(config)


@pytest.mark.parametrize(
    "policy_text",
    [
        pytest.param(None, id="a policy path that is not there"),
        pytest.param("agents: [unclosed\n", id="a policy that is not YAML"),
    ],
)
def test_serve_with_a_bad_policy_exits_2_with_one_line_and_listens_on_nothing(
    tmp_path: Path, policy_text: str | None
) -> None:
    import socket
    import subprocess
    import sys

    from tests.sidecar.helpers import REPO, free_port

    policy = tmp_path / "policy.yaml"
    if policy_text is not None:
        policy.write_text(policy_text)
    grpc_port, http_port = free_port(), free_port()
    # Our own listener on the gRPC port: a sidecar that tried to bind it before checking
    # the policy would fail with "address in use" (exit 5), not with the policy (exit 2).
    with socket.socket() as held:
        held.bind(("127.0.0.1", grpc_port))
        held.listen()
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "attest_otel.cli",
                "serve",
                "--grpc-endpoint",
                f"127.0.0.1:{grpc_port}",
                "--http-endpoint",
                f"127.0.0.1:{http_port}",
                "--forward-endpoint",
                "127.0.0.1:1",
                "--store",
                str(tmp_path / "store.db"),
                "--policy",
                str(policy),
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("attest-otel: error: <flags>: grading.policy: ")
    assert str(policy) in lines[0]
    with socket.socket() as probe:  # the HTTP port was never taken either
        probe.bind(("127.0.0.1", http_port))
    assert not (tmp_path / "store.db").exists()


def test_the_judge_the_environment_makes_takes_the_sidecars_model_settings(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The content policy and the concurrency of `grading.model` reach the judge the
    environment made (its client kept), through its public `configured`."""
    from attest_otel.grade.llm import AnthropicJudge
    from attest_otel.sidecar.loading import load_grading

    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    path = tmp_path / "c.yaml"
    path.write_text(
        "forward: {endpoint: 'collector:4317'}\n"
        "grading: {model: {enabled: true, model: claude-test, max_concurrency: 3}}\n"
        "content: {mode: truncate, max_chars: 40}\n"
    )
    _, judge = load_grading(load_service_config(path, environ={}))
    assert isinstance(judge, AnthropicJudge)
    assert judge.model == "claude-test"
    assert (judge.content.mode, judge.content.max_chars) == ("truncate", 40)
    assert "max_concurrency=3" in repr(judge)
