"""Every shipped Collector config, validated and started by the Collector that
collector-config/builder-config.yaml builds: the release the configs say they target, with
exactly the components they use, and no deprecation warning on start."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from tests.needs import peer
from tests.peers.configs import KINDS, manifest, shipped_configs, used_components
from tests.peers.otlp_http_sink import OtlpHttpSink
from tests.peers.servers import Collector, localize, validate
from tests.sidecar.downstream import Downstream
from tests.sidecar.helpers import REPO

CONFIGS = shipped_configs()
IDS = [str(p.relative_to(REPO)) for p in CONFIGS]


def test_the_shipped_configs_are_found() -> None:
    assert {"collector-config/otelcol.yaml", "collector-config/loadbalancing.yaml"} <= set(IDS)


def _built_components() -> set[tuple[str, str]]:
    done = subprocess.run(
        [peer("otelcol"), "components"], capture_output=True, text=True, timeout=60, check=True
    )
    listed = yaml.safe_load(done.stdout)
    return {(kind, entry["name"]) for kind in KINDS for entry in listed.get(kind) or []}


def test_the_collector_has_exactly_the_components_the_configs_use() -> None:
    used = set().union(*(used_components(p) for p in CONFIGS))
    built = _built_components()
    assert used == built


def test_one_release_for_every_module() -> None:
    release = "v" + manifest()["dist"]["version"]
    for kind in KINDS:
        for entry in manifest().get(kind) or []:
            assert entry["gomod"].split()[-1] == release, entry


def test_the_configs_and_compose_target_the_tested_release() -> None:
    version = manifest()["dist"]["version"]
    compose = yaml.safe_load((REPO / "deploy" / "compose.yaml").read_text())
    images = [s["image"] for s in compose["services"].values() if "image" in s]
    collectors = [i for i in images if "opentelemetry-collector" in i]
    assert collectors == [f"otel/opentelemetry-collector-contrib:{version}"]
    for path in CONFIGS:
        releases = set(re.findall(r"otelcol-contrib (\d+\.\d+\.\d+)", path.read_text()))
        assert releases == {version}, path


@pytest.mark.parametrize("path", CONFIGS, ids=IDS)
def test_every_shipped_config_validates(path: Path) -> None:
    done = validate(path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "deprecat" not in (done.stdout + done.stderr).lower()


@pytest.mark.parametrize("path", CONFIGS, ids=IDS)
def test_every_shipped_config_starts_without_a_warning(tmp_path: Path, path: Path) -> None:
    """Every peer a config names is one OTLP/gRPC or OTLP/HTTP server that keeps what it
    gets: a gRPC exporter connects at start, and a refused connection is a warning too."""
    grpc_peer, http_peer = Downstream().start(), OtlpHttpSink().start()
    text, _ = localize(
        path.read_text(), grpc_default=grpc_peer.endpoint, http_default=http_peer.host_port
    )
    collector = Collector(tmp_path, text, name=path.stem).start()
    try:
        time.sleep(1.0)  # connections made, first health checks done
        log = collector.log()
    finally:
        collector.stop()
        grpc_peer.stop()
        http_peer.stop()
    warnings = [
        line
        for line in log.splitlines()
        if "\twarn\t" in line.lower() or "deprecat" in line.lower()
    ]
    assert not warnings, "\n".join(warnings)
