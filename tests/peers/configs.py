"""The Collector configs the project ships, found the way a reader would: every YAML file under
collector-config/ and deploy/ with a `service.pipelines` section."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.sidecar.helpers import REPO

KINDS = ("receivers", "processors", "exporters", "connectors", "extensions")
MANIFEST = REPO / "collector-config" / "builder-config.yaml"


def shipped_configs() -> list[Path]:
    found = []
    for folder in ("collector-config", "deploy"):
        for path in sorted((REPO / folder).rglob("*.y*ml")):
            try:
                data = yaml.safe_load(path.read_text())
            except yaml.YAMLError:
                continue
            service = data.get("service") if isinstance(data, dict) else None
            if isinstance(service, dict) and "pipelines" in service:
                found.append(path)
    return found


def used_components(path: Path) -> set[tuple[str, str]]:
    """(kind, type) of every component a config defines: `otlp_grpc/attest` is otlp_grpc."""
    data: dict[str, Any] = yaml.safe_load(path.read_text())
    return {(kind, name.split("/", 1)[0]) for kind in KINDS for name in data.get(kind) or {}}


def manifest() -> dict[str, Any]:
    return dict(yaml.safe_load(MANIFEST.read_text()))
