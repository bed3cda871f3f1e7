"""Builds the Grafana dashboard "Agent tool use" from code, with Grafana's typed SDK.

    .venv/bin/python tools/gen_dashboard.py           writes collector-config/grafana/dashboards/
                                                      agent-tool-use.json
    .venv/bin/python tools/gen_dashboard.py --check   exits 1 if that file is out of date

Why from code: every metric and label name below comes from `attest_otel.semconv`, so a
renamed metric breaks this script (and its test) instead of silently emptying a panel;
and the typed builders of `grafana-foundation-sdk` (Grafana's own, generated from its
schemas) reject fields a Grafana version does not have. The JSON is committed, so users
import it without installing anything.

Needs `grafana-foundation-sdk` (1769699379!11.6.0: the Grafana 11.6 schema build).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any, TypeVar

from grafana_foundation_sdk.builders import (
    bargauge,
    dashboard,
    prometheus,
    stat,
    table,
    tempo,
    timeseries,
)
from grafana_foundation_sdk.builders import common as common_builders
from grafana_foundation_sdk.builders import text as text_panel
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as model
from grafana_foundation_sdk.models.prometheus import PromQueryFormat
from grafana_foundation_sdk.models.tempo import SearchTableType

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from attest_otel import semconv  # noqa: E402

OUTPUT = ROOT / "collector-config" / "grafana" / "dashboards" / "agent-tool-use.json"
UID = "attest-otel-agent-tool-use"
TITLE = "Agent tool use"

FAILING_TOOL_SPANS = '{ span.attest.verdict =~ "error_.*|disallowed_tool" }'
"""TraceQL: tool spans the grader marked as failing (design: attributes are on the span)."""

PROM = model.DataSourceRef(type_val="prometheus", uid="${prometheus}")
TEMPO = model.DataSourceRef(type_val="tempo", uid="${tempo}")


def prom_label(attribute: str) -> str:
    """The Prometheus label the OpenTelemetry exporter makes of an attribute key: every
    character outside [a-zA-Z0-9] becomes `_` (`gen_ai.agent.name` -> `gen_ai_agent_name`)."""
    return re.sub(r"[^a-zA-Z0-9]", "_", attribute)


RUNS = semconv.PROMETHEUS_RUNS
CALLS = semconv.PROMETHEUS_CALLS
ERRORS = semconv.PROMETHEUS_ERRORS
SCORE_BUCKET = f"{semconv.PROMETHEUS_SCORE}_bucket"

AGENT = prom_label(semconv.GEN_AI_AGENT_NAME)
TOOL = prom_label(semconv.GEN_AI_TOOL_NAME)
RUN_VERDICT = prom_label(semconv.ATTEST_TOOL_USE_VERDICT)
CALL_VERDICT = prom_label(semconv.ATTEST_VERDICT)
SEVERITY = prom_label(semconv.ATTEST_SEVERITY)
RECOVERY = prom_label(semconv.ATTEST_RECOVERY)

RUNS_SEL = f'{RUNS}{{{AGENT}=~"$agent"}}'
# Passed as `report` and the exit codes count it: no failing call (`review` too, shown apart).
PASSED_SEL = f'{RUNS}{{{RUN_VERDICT}!="fail",{AGENT}=~"$agent"}}'
REVIEW_SEL = f'{RUNS}{{{RUN_VERDICT}="review",{AGENT}=~"$agent"}}'
CALLS_SEL = f'{CALLS}{{{AGENT}=~"$agent",{TOOL}=~"$tool"}}'
FAILED_CALLS_SEL = f'{CALLS}{{{SEVERITY}="fail",{AGENT}=~"$agent",{TOOL}=~"$tool"}}'
# The errors counter carries tool and recovery only (no agent: see semconv / export.metrics).
ERRORS_SEL = f'{ERRORS}{{{TOOL}=~"$tool"}}'
SCORE_SEL = f'{SCORE_BUCKET}{{{AGENT}=~"$agent"}}'


def _pass_ratio(window: str, by: str = "") -> str:
    """Passed runs / runs. `or ... * 0` keeps agents with no passed run at 0 instead of
    dropping them from the division (they are the ones a reader most needs to see)."""
    group = f" by ({by})" if by else ""
    passed = f"sum{group} (increase({PASSED_SEL}[{window}]))"
    total = f"sum{group} (increase({RUNS_SEL}[{window}]))"
    return f"({passed} or {total} * 0) / {total}"


def _query(
    expr: str,
    *,
    legend: str = "__auto",
    ref: str = "A",
    instant: bool = False,
    fmt: PromQueryFormat | None = None,
    exemplar: bool = False,
) -> prometheus.Dataquery:
    q = prometheus.Dataquery().expr(expr).legend_format(legend).ref_id(ref).datasource(PROM)
    q = q.instant() if instant else q.range()
    if fmt is not None:
        q = q.format(fmt)
    if exemplar:
        q = q.exemplar(True)
    return q


def _thresholds(*steps: tuple[float | None, str]) -> dashboard.ThresholdsConfig:
    return (
        dashboard.ThresholdsConfig()
        .mode(model.ThresholdsMode.ABSOLUTE)
        .steps([model.Threshold(value=v, color=c) for v, c in steps])
    )


def _stat(title: str, description: str, expr: str, unit: str) -> stat.Panel:
    return (
        stat.Panel()
        .title(title)
        .description(description)
        .datasource(PROM)
        .with_target(_query(expr, instant=True))
        .unit(unit)
        .height(4)
        .span(6)
        .graph_mode(common.BigValueGraphMode.NONE)
        .color_mode(common.BigValueColorMode.VALUE)
        .reduce_options(common_builders.ReduceDataOptions().calcs(["lastNotNull"]))
    )


def _series(title: str, description: str, *queries: prometheus.Dataquery) -> timeseries.Panel:
    panel = (
        timeseries.Panel()
        .title(title)
        .description(description)
        .datasource(PROM)
        .height(8)
        .span(12)
        .legend(
            common_builders.VizLegendOptions()
            .display_mode(common.LegendDisplayMode.LIST)
            .placement(common.LegendPlacement.BOTTOM)
            .show_legend(True)
        )
        .tooltip(
            common_builders.VizTooltipOptions()
            .mode(common.TooltipDisplayMode.MULTI)
            .sort(common.SortOrder.DESCENDING)
        )
    )
    for q in queries:
        panel = panel.with_target(q)
    return panel


def _stacked(panel: timeseries.Panel) -> timeseries.Panel:
    return (
        panel.draw_style(common.GraphDrawStyle.BARS)
        .fill_opacity(80)
        .stacking(common_builders.StackingConfig().mode(common.StackingMode.NORMAL))
    )


def _fixed_color(color: str) -> model.DynamicConfigValue:
    return model.DynamicConfigValue(id_val="color", value={"mode": "fixed", "fixedColor": color})


VERDICT_COLORS = {
    "pass": "green",
    "review": "yellow",
    "fail": "red",
    "correct": "green",
    "incorrect": "orange",
    "error_silent": "red",
    "error_claimed_success": "dark-red",
    "disallowed_tool": "purple",
}
RECOVERY_COLORS = {
    "retried": "green",
    "fallback": "blue",
    "acknowledged": "yellow",
    "claimed_success": "red",
    "silent": "orange",
    "unchecked": "gray",
}


PanelBuilder = stat.Panel | timeseries.Panel | bargauge.Panel | table.Panel | text_panel.Panel
Colorable = TypeVar("Colorable", timeseries.Panel, bargauge.Panel)


def _colored(panel: Colorable, colors: dict[str, str]) -> Colorable:
    for name, color in colors.items():
        panel = panel.override_by_name(name, [_fixed_color(color)])
    return panel


def _merge_table(title: str, description: str, *queries: prometheus.Dataquery) -> table.Panel:
    panel = table.Panel().title(title).description(description).datasource(PROM)
    for q in queries:
        panel = panel.with_target(q)
    return (
        panel.height(8)
        .span(12)
        .with_transformation(model.DataTransformerConfig(id_val="merge", options={}))
    )


def build() -> dashboard.Dashboard:
    variables = [
        dashboard.DatasourceVariable("prometheus").label("Prometheus").type("prometheus"),
        dashboard.DatasourceVariable("tempo").label("Traces (Tempo)").type("tempo"),
        dashboard.QueryVariable("agent")
        .label("Agent")
        .datasource(PROM)
        .query(f"label_values({RUNS}, {AGENT})")
        .refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(model.VariableSort.ALPHABETICAL_CASE_INSENSITIVE_ASC)
        .multi(True)
        .include_all(True)
        .all_value(".*"),
        dashboard.QueryVariable("tool")
        .label("Tool")
        .datasource(PROM)
        .query(f"label_values({CALLS}, {TOOL})")
        .refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(model.VariableSort.ALPHABETICAL_CASE_INSENSITIVE_ASC)
        .multi(True)
        .include_all(True)
        .all_value(".*"),
    ]

    overview: list[PanelBuilder] = [
        _stat(
            "Runs graded",
            "Agent runs graded in the time range.",
            f"sum(increase({RUNS_SEL}[$__range]))",
            "short",
        ),
        _stat(
            "Pass rate",
            "Runs with no failing tool call / all runs, over the time range. "
            "`attest-otel report` gives the same rate with a 95% interval.",
            _pass_ratio("$__range"),
            "percentunit",
        )
        .min(0)
        .max(1)
        .thresholds(_thresholds((None, "red"), (0.8, "orange"), (0.95, "green"))),
        _stat(
            "Runs to review",
            "Runs graded review, counted as passed above: runs that could not be read whole "
            "(the agent span's attest.tool_use.gaps says why) or whose check could not be made.",
            f"sum(increase({REVIEW_SEL}[$__range])) or vector(0)",
            "short",
        ).thresholds(_thresholds((None, "green"), (1, "yellow"))),
        _stat(
            "Median run score",
            "Correct calls / all calls of a run; the median over the time range "
            "(from the score histogram's buckets).",
            f"histogram_quantile(0.5, sum by (le) (increase({SCORE_SEL}[$__range])))",
            "percentunit",
        ).thresholds(_thresholds((None, "red"), (0.75, "orange"), (0.9, "green"))),
        _stat(
            "Failing tool calls",
            "Calls with severity fail (disallowed tool, unrecovered error, poor choice).",
            f"sum(increase({FAILED_CALLS_SEL}[$__range]))",
            "short",
        ).thresholds(_thresholds((None, "green"), (1, "red"))),
    ]

    over_time: list[PanelBuilder] = [
        _colored(
            _stacked(
                _series(
                    "Runs by verdict",
                    "Graded runs per minute by run verdict. Dots are exemplars: click one "
                    "to open that run's trace.",
                    _query(
                        f"sum by ({RUN_VERDICT}) (rate({RUNS_SEL}[$__rate_interval])) * 60",
                        legend=f"{{{{{RUN_VERDICT}}}}}",
                        exemplar=True,
                    ),
                )
            ).unit("short"),
            VERDICT_COLORS,
        ),
        _series(
            "Pass rate",
            "Share of runs that passed, per rate window.",
            _query(_pass_ratio("$__rate_interval"), legend="pass rate"),
        )
        .unit("percentunit")
        .min(0)
        .max(1),
        _series(
            "Run score quantiles",
            "10th, 50th and 90th percentile of run scores. Exemplars link to traces.",
            *[
                _query(
                    f"histogram_quantile({q}, sum by (le) (rate({SCORE_SEL}[$__rate_interval])))",
                    legend=f"p{int(q * 100)}",
                    ref=ref,
                    exemplar=True,
                )
                for q, ref in ((0.1, "A"), (0.5, "B"), (0.9, "C"))
            ],
        )
        .unit("percentunit")
        .min(0)
        .max(1),
        bargauge.Panel()
        .title("Score distribution")
        .description("Runs per score bucket over the time range (upper bound of each bucket).")
        .datasource(PROM)
        .with_target(
            _query(
                f"sum by (le) (increase({SCORE_SEL}[$__range]))",
                legend="{{le}}",
                instant=True,
                fmt=PromQueryFormat.HEATMAP,
            )
        )
        .display_mode(common.BarGaugeDisplayMode.GRADIENT)
        .orientation(common.VizOrientation.VERTICAL)
        .unit("short")
        .height(8)
        .span(12),
    ]

    calls: list[PanelBuilder] = [
        _colored(
            _stacked(
                _series(
                    "Tool calls by verdict",
                    "Graded tool calls per minute by call verdict.",
                    _query(
                        f"sum by ({CALL_VERDICT}) (rate({CALLS_SEL}[$__rate_interval])) * 60",
                        legend=f"{{{{{CALL_VERDICT}}}}}",
                        exemplar=True,
                    ),
                )
            ).unit("short"),
            VERDICT_COLORS,
        ),
        table.Panel()
        .title("Calls by tool and verdict")
        .description("Tool calls over the time range: one row per tool, one column per verdict.")
        .datasource(PROM)
        .with_target(
            _query(
                f"sum by ({TOOL}, {CALL_VERDICT}) (increase({CALLS_SEL}[$__range]))",
                instant=True,
                fmt=PromQueryFormat.TABLE,
            )
        )
        .with_transformation(
            model.DataTransformerConfig(
                id_val="groupingToMatrix",
                options={
                    "rowField": TOOL,
                    "columnField": CALL_VERDICT,
                    "valueField": "Value",
                    "emptyValue": "zero",
                },
            )
        )
        .height(8)
        .span(12),
        _colored(
            bargauge.Panel()
            .title("Error recoveries")
            .description(
                "Tool calls that returned an error, by what happened next: retried, fallback "
                "and acknowledged are handled; claimed_success and silent are not; unchecked "
                "means no model read the final answer."
            )
            .datasource(PROM)
            .with_target(
                _query(
                    f"sum by ({RECOVERY}) (increase({ERRORS_SEL}[$__range]))",
                    legend=f"{{{{{RECOVERY}}}}}",
                    instant=True,
                )
            )
            .display_mode(common.BarGaugeDisplayMode.BASIC)
            .orientation(common.VizOrientation.HORIZONTAL)
            .unit("short")
            .height(8)
            .span(12),
            RECOVERY_COLORS,
        ),
        _stacked(
            _series(
                "Errors by recovery",
                "Tool errors per minute by recovery.",
                _query(
                    f"sum by ({RECOVERY}) (rate({ERRORS_SEL}[$__rate_interval])) * 60",
                    legend=f"{{{{{RECOVERY}}}}}",
                    exemplar=True,
                ),
            )
        ).unit("short"),
    ]

    worst: list[PanelBuilder] = [
        _merge_table(
            "Worst agents",
            "Lowest pass rates over the time range, with their run counts (few runs: wide "
            "error bars; see `attest-otel report`).",
            _query(
                f"bottomk(10, {_pass_ratio('$__range', AGENT)})",
                instant=True,
                fmt=PromQueryFormat.TABLE,
            ),
            _query(
                f"sum by ({AGENT}) (increase({RUNS_SEL}[$__range]))",
                ref="B",
                instant=True,
                fmt=PromQueryFormat.TABLE,
            ),
        ).override_by_name("Value #A", [model.DynamicConfigValue("unit", "percentunit")]),
        _merge_table(
            "Worst tools",
            "Tools with the most failing calls over the time range, and all their calls.",
            _query(
                f"topk(10, sum by ({TOOL}) (increase({FAILED_CALLS_SEL}[$__range])))",
                instant=True,
                fmt=PromQueryFormat.TABLE,
            ),
            _query(
                f"sum by ({TOOL}) (increase({CALLS_SEL}[$__range]))",
                ref="B",
                instant=True,
                fmt=PromQueryFormat.TABLE,
            ),
        ),
    ]

    traces: list[PanelBuilder] = [
        table.Panel()
        .title("Failing tool calls (Tempo)")
        .description(
            "Tool spans graded error_* or disallowed_tool, newest first; click a trace id to "
            "open it. Needs graded spans in Tempo (the sidecar, or `grade --export`)."
        )
        .datasource(TEMPO)
        .with_target(
            tempo.TempoQuery()
            .ref_id("A")
            .datasource(TEMPO)
            .query_type("traceql")
            .query(FAILING_TOOL_SPANS)
            .table_type(SearchTableType.SPANS)
            .limit(50)
            .spss(10)
        )
        .height(10)
        .span(16),
        text_panel.Panel()
        .title("In Jaeger")
        .content(
            "Search **Tags** for a verdict on the tool spans:\n\n"
            "- `attest.verdict=error_silent`\n"
            "- `attest.verdict=error_claimed_success`\n"
            "- `attest.verdict=disallowed_tool`\n"
            "- `attest.severity=fail` (any failing call)\n\n"
            "Open a span's **Logs** for the `gen_ai.evaluation.result` event: the reason is "
            "`gen_ai.evaluation.explanation`."
        )
        .mode(text_panel_mode_markdown())
        .height(10)
        .span(8),
    ]

    board = (
        dashboard.Dashboard(TITLE)
        .uid(UID)
        .description(
            "Tool-use grades of AI agent runs by attest-otel: verdicts, pass rate, scores, "
            "error recoveries, and the traces behind them."
        )
        .tags(["attest-otel", "genai", "agents"])
        .editable()
        .tooltip(model.DashboardCursorSync.CROSSHAIR)
        .refresh("1m")
        .time("now-24h", "now")
        .timezone("browser")
        .variables(variables)
    )
    next_id = 1
    sections: tuple[tuple[str, list[PanelBuilder]], ...] = (
        ("Overview", overview),
        ("Runs over time", over_time),
        ("Tool calls and errors", calls),
        ("Worst agents and tools", worst),
        ("Traces", traces),
    )
    for title, panels in sections:
        # Explicit ids: Grafana keys panel state and links (`viewPanel=`) by them.
        board = board.with_row(dashboard.Row(title).id(next_id))
        next_id += 1
        for panel in panels:
            board = board.with_panel(panel.id(next_id))
            next_id += 1
    return board


def text_panel_mode_markdown() -> Any:
    from grafana_foundation_sdk.models.text import TextMode

    return TextMode.MARKDOWN


def render() -> str:
    """The dashboard JSON, stable byte for byte (sorted keys) so `--check` can compare."""
    built = build().build()
    data = json.loads(json.dumps(built, cls=JSONEncoder))
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="fail if the JSON is out of date")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = args.output.read_text() if args.output.exists() else ""
        if current != text:
            print(f"{args.output} is out of date: run tools/gen_dashboard.py", file=sys.stderr)
            return 1
        return 0
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
