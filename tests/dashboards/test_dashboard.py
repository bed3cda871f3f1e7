"""The "Agent tool use" dashboard: generated from code, names only from `semconv`, exemplar
links to traces, a TraceQL table of failing tool spans, and provisioning that fits."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

from tests.dashboards.dashboard import (
    DASHBOARD,
    load_dashboard,
    load_yaml,
    panels,
    prometheus_targets,
    semconv_label_names,
    semconv_metric_names,
)
from tests.dashboards.promql import label_names, metric_names

ROOT = Path(__file__).resolve().parents[2]


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gen_dashboard", ROOT / "tools" / "gen_dashboard.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gen_dashboard"] = module
    spec.loader.exec_module(module)
    return module


def test_the_committed_json_is_exactly_what_the_generator_builds() -> None:
    assert DASHBOARD.read_text() == _generator().render(), "run tools/gen_dashboard.py"


def test_every_promql_expression_uses_only_metric_names_from_semconv() -> None:
    used = {
        (title, name)
        for title, target in prometheus_targets(load_dashboard())
        for name in metric_names(target["expr"])
    }
    assert used, "the dashboard has Prometheus queries"
    assert {(t, n) for t, n in used if n not in semconv_metric_names()} == set()


def test_every_label_in_queries_legends_and_variables_comes_from_semconv() -> None:
    board = load_dashboard()
    labels: set[str] = set()
    for _, target in prometheus_targets(board):
        labels |= label_names(target["expr"])
        labels |= set(re.findall(r"\{\{\s*(\w+)\s*\}\}", target.get("legendFormat", "")))
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":
            match = re.fullmatch(r"label_values\((\w+),\s*(\w+)\)", variable["query"])
            assert match, variable["query"]
            assert match.group(1) in semconv_metric_names()
            labels.add(match.group(2))
    for panel in panels(board):
        for transformation in panel.get("transformations", []):
            options = transformation.get("options", {})
            labels |= {options[k] for k in ("rowField", "columnField") if k in options}
    assert labels - semconv_label_names() == set()


def test_time_series_of_runs_calls_and_scores_ask_for_exemplars() -> None:
    board = load_dashboard()
    with_exemplars = {
        title for title, target in prometheus_targets(board) if target.get("exemplar") is True
    }
    assert {"Runs by verdict", "Tool calls by verdict", "Run score quantiles"} <= with_exemplars


def test_exemplars_link_to_a_provisioned_trace_data_source() -> None:
    sources = load_yaml("datasources/attest-otel.yaml")["datasources"]
    by_uid = {s["uid"]: s for s in sources}
    (prom,) = [s for s in sources if s["type"] == "prometheus"]
    destinations = prom["jsonData"]["exemplarTraceIdDestinations"]
    assert {d["name"] for d in destinations} == {"trace_id"}
    internal = [d["datasourceUid"] for d in destinations if "datasourceUid" in d]
    assert internal and all(by_uid[uid]["type"] in ("tempo", "jaeger") for uid in internal)
    # `$$` keeps Grafana's provisioning from expanding `${__value.raw}` as an env variable.
    assert all("$${__value.raw}" in d["url"] for d in destinations if "url" in d)


def test_the_tempo_table_lists_failing_tool_spans_with_traceql() -> None:
    (panel,) = [
        p for p in panels(load_dashboard()) if p.get("datasource", {}).get("type") == "tempo"
    ]
    (target,) = panel["targets"]
    assert panel["type"] == "table"
    assert target["queryType"] == "traceql"
    assert target["query"] == '{ span.attest.verdict =~ "error_.*|disallowed_tool" }'
    assert target["tableType"] == "spans"


def test_the_dashboard_shows_each_view_the_issue_asks_for() -> None:
    titles = {p["title"] for p in panels(load_dashboard())}
    assert {
        "Runs by verdict",
        "Pass rate",
        "Score distribution",
        "Tool calls by verdict",
        "Calls by tool and verdict",
        "Error recoveries",
        "Worst agents",
        "Worst tools",
        "Failing tool calls (Tempo)",
    } <= titles


def test_panel_ids_are_unique_and_datasources_come_from_variables() -> None:
    board = load_dashboard()
    ids = [p["id"] for p in panels(board)]
    assert len(ids) == len(set(ids))
    variables = {v["name"]: v for v in board["templating"]["list"]}
    for panel in panels(board):
        uid = panel.get("datasource", {}).get("uid")
        if uid:
            name = uid.strip("${}")
            assert variables[name]["type"] == "datasource"
            assert variables[name]["query"] == panel["datasource"]["type"]


def test_provisioning_loads_the_dashboards_folder_and_every_data_source_type_it_needs() -> None:
    (provider,) = load_yaml("dashboards/attest-otel.yaml")["providers"]
    assert provider["type"] == "file"
    assert provider["options"]["path"] == "/etc/grafana/provisioning/dashboards"
    provisioned = {s["type"] for s in load_yaml("datasources/attest-otel.yaml")["datasources"]}
    wanted = {
        v["query"] for v in load_dashboard()["templating"]["list"] if v["type"] == "datasource"
    }
    assert wanted <= provisioned
    assert {"prometheus", "tempo", "jaeger"} <= provisioned
