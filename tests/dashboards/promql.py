"""Just enough PromQL reading to list the metric and label names an expression uses.

Not a parser: the dashboard's expressions are ours and simple (selectors, aggregations,
functions, binary operators). Strings, ranges and `by (...)` clauses are cut out first, so
what is left that looks like a name and is not a function call or a keyword is a metric.
"""

from __future__ import annotations

import re

KEYWORDS = frozenset(
    {
        "and",
        "or",
        "unless",
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "bool",
        "offset",
        "inf",
        "nan",
    }
)
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_MATCHERS = re.compile(r"\{([^}]*)\}")
_RANGE = re.compile(r"\[[^\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_MATCHER_LABEL = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)")


def metric_names(expr: str) -> set[str]:
    text = _STRING.sub('""', expr)
    text = _MATCHERS.sub("", text)
    text = _RANGE.sub("", text)
    text = _GROUPING.sub("", text)
    names = set()
    for match in _NAME.finditer(text):
        word = match.group()
        if word.lower() in KEYWORDS or text[match.end() :].lstrip().startswith("("):
            continue
        names.add(word)
    return names


def label_names(expr: str) -> set[str]:
    text = _STRING.sub('""', expr)
    labels: set[str] = set()
    for body in _MATCHERS.findall(text):
        labels.update(_MATCHER_LABEL.findall(body))
    for body in _GROUPING.findall(text):
        labels.update(part.strip() for part in body.split(",") if part.strip())
    return labels


def substitute(expr: str, *, range_: str = "5m", rate_interval: str = "15s") -> str:
    """Grafana's macros and the dashboard's variables at their "All" values."""
    return (
        expr.replace("$__rate_interval", rate_interval)
        .replace("$__range", range_)
        .replace("$__interval", "5s")
        .replace("$agent", ".*")
        .replace("$tool", ".*")
    )
