"""The little PromQL reader the dashboard tests rely on, on expressions of each shape."""

from __future__ import annotations

import pytest

from tests.dashboards.promql import label_names, metric_names

CASES = [
    pytest.param(
        'sum by (a_b) (rate(m_total{x="1",y=~"$v"}[$__rate_interval])) * 60',
        {"m_total"},
        {"a_b", "x", "y"},
        id="an aggregation over a rate with matchers",
    ),
    pytest.param(
        '(sum by (g) (increase(p{v="pass"}[5m])) or sum by (g) (increase(p[5m])) * 0)'
        " / sum by (g) (increase(p[5m]))",
        {"p"},
        {"g", "v"},
        id="a ratio kept alive with or and a zero",
    ),
    pytest.param(
        'histogram_quantile(0.5, sum by (le) (increase(s_bucket{a=~"x|y{z}"}[1h])))',
        {"s_bucket"},
        {"le", "a"},
        id="a quantile whose regex holds braces",
    ),
    pytest.param("bottomk(10, m1 / on (k) m2)", {"m1", "m2"}, {"k"}, id="two metrics joined on"),
]


@pytest.mark.parametrize(("expr", "metrics", "labels"), CASES)
def test_metric_and_label_names_are_read_out_of_expressions(
    expr: str, metrics: set[str], labels: set[str]
) -> None:
    assert metric_names(expr) == metrics
    assert label_names(expr) == labels
