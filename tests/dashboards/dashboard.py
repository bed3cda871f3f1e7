"""The committed dashboard and provisioning files, read the way Grafana reads them."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from attest_otel import semconv

GRAFANA = Path(__file__).resolve().parents[2] / "collector-config" / "grafana"
DASHBOARD = GRAFANA / "dashboards" / "agent-tool-use.json"


def load_dashboard() -> dict[str, Any]:
    return dict(json.loads(DASHBOARD.read_text()))


def load_yaml(relative: str) -> dict[str, Any]:
    return dict(yaml.safe_load((GRAFANA / relative).read_text()))


def panels(board: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in board["panels"]:
        yield panel
        yield from panel.get("panels", [])  # panels inside collapsed rows


def prometheus_targets(board: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for panel in panels(board):
        for target in panel.get("targets", []):
            if target.get("datasource", {}).get("type") == "prometheus":
                yield panel["title"], target


def semconv_metric_names() -> set[str]:
    """Every Prometheus series name `semconv` defines (a histogram is three series)."""
    score = semconv.PROMETHEUS_SCORE
    return {
        semconv.PROMETHEUS_RUNS,
        semconv.PROMETHEUS_CALLS,
        semconv.PROMETHEUS_ERRORS,
        f"{score}_bucket",
        f"{score}_sum",
        f"{score}_count",
    }


def semconv_label_names() -> set[str]:
    """Attribute names from `semconv` as Prometheus labels (the exporter's rule: anything
    outside [a-zA-Z0-9] becomes `_`), plus the histogram's `le`."""
    attributes = {
        value
        for name, value in vars(semconv).items()
        if name.isupper() and isinstance(value, str) and "." in value
    }
    return {re.sub(r"[^a-zA-Z0-9]", "_", a) for a in attributes} | {"le"}
