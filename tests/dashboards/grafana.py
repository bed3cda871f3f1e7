"""The windows Grafana gives a dashboard's queries, from the shipped data source.

Grafana's `$__interval` is the dashboard's range over the panel's width in points, rounded,
and never below the data source's `timeInterval` (its "min interval"); `$__rate_interval`
is max($__interval + timeInterval, 4 x timeInterval), so that a rate window always holds
four samples *if* the data source's `timeInterval` is the series' sample interval.
"""

from __future__ import annotations

import re

from tests.dashboards.dashboard import load_dashboard, load_yaml

PANEL_POINTS = 1200
"""About the width in pixels of a full-width panel: Grafana's maxDataPoints."""

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def seconds(text: str) -> float:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([smhd])", text.strip())
    if match is None:
        raise ValueError(f"not a Grafana duration: {text!r}")
    return float(match[1]) * _UNITS[match[2]]


def time_interval_s() -> float:
    """The Prometheus data source's `timeInterval` (Grafana's default is 15 s)."""
    sources = load_yaml("datasources/attest-otel.yaml")["datasources"]
    prom = next(s for s in sources if s["type"] == "prometheus")
    return seconds(prom.get("jsonData", {}).get("timeInterval", "15s"))


def dashboard_range_s() -> float:
    start = load_dashboard()["time"]["from"]
    return seconds(start.removeprefix("now-"))


def windows(scale: float = 1.0) -> dict[str, float]:
    """`$__range`, `$__interval` and `$__rate_interval` in seconds for the dashboard's
    default range, all multiplied by `scale` (a test that runs the clock faster)."""
    t = time_interval_s()
    interval = max(dashboard_range_s() / PANEL_POINTS, t)
    return {
        "range": dashboard_range_s() * scale,
        "interval": interval * scale,
        "rate_interval": max(interval + t, 4 * t) * scale,
    }
