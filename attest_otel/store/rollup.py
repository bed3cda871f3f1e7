"""Hourly tallies of the shared store's grades, kept with the grades, so `report` over a
million runs reads a few thousand rows instead of scanning millions.

Every change to `grades`, `grade_calls` and `grade_recoveries` (a new grade, one replaced
by a regrade, a partial run's grade deleted, retention) goes through `Deltas`: what it adds
and what it takes away, per hour of `graded_ns`. They are applied once per transaction, in
key order, so two sidecars updating the same hour's rows lock them in the same order and
never deadlock (their trace rows are locked first, also in order).

`report` adds the whole hours inside its window from the tallies to the rows of the partial
hours at its two ends, counted from the tables themselves (an index range each), so a
window's edges are exact to the nanosecond. Why not triggers: a trigger per statement would
lock the tally rows statement by statement, in whatever order the grades come.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

__all__ = ["HOUR_NS", "Deltas", "backfill_sql", "edges", "summary_sql"]

HOUR_NS = 3600 * 10**9


class Deltas:
    """What one transaction adds to (+1) and takes from (-1) the hourly tallies."""

    def __init__(self) -> None:
        self.agents: defaultdict[tuple[int, str], list[int]] = defaultdict(lambda: [0, 0])
        self.calls: defaultdict[tuple[int, str, str, str], list[int]] = defaultdict(
            lambda: [0, 0, 0, 0]
        )
        self.recoveries: defaultdict[tuple[int, str], list[int]] = defaultdict(lambda: [0])

    def grade(self, graded_ns: int, agent: str | None, passed: bool, sign: int) -> None:
        c = self.agents[(graded_ns // HOUR_NS, agent or "")]
        c[0] += sign * bool(passed)
        c[1] += sign

    def call(
        self,
        graded_ns: int,
        tool: str,
        verdict: str,
        severity: str,
        calls: int,
        tool_first: bool,
        tool_failed: bool,
        sign: int,
    ) -> None:
        c = self.calls[(graded_ns // HOUR_NS, tool, verdict, severity)]
        c[0] += sign * calls
        c[1] += sign
        c[2] += sign * bool(tool_first)
        c[3] += sign * bool(tool_first and not tool_failed)

    def recovery(self, graded_ns: int, recovery: str, calls: int, sign: int) -> None:
        self.recoveries[(graded_ns // HOUR_NS, recovery)][0] += sign * calls

    def apply(self, cur: Any) -> None:
        """The deltas upserted in key order (see the module docstring); zeros skipped."""
        for table, keys, values, deltas in (
            ("rollup_agents", ("bucket", "agent"), ("passed", "runs"), self.agents),
            (
                "rollup_calls",
                ("bucket", "tool", "verdict", "severity"),
                ("calls", "runs", "tool_runs", "tool_passed"),
                self.calls,
            ),
            ("rollup_recoveries", ("bucket", "recovery"), ("calls",), self.recoveries),
        ):
            rows = [(*k, *v) for k, v in sorted(deltas.items()) if any(v)]
            if not rows:
                continue
            columns = ", ".join((*keys, *values))
            marks = ", ".join(["%s"] * (len(keys) + len(values)))
            sets = ", ".join(f"{v} = {table}.{v} + EXCLUDED.{v}" for v in values)
            cur.executemany(
                f"INSERT INTO {table} ({columns}) VALUES ({marks})"
                f" ON CONFLICT ({', '.join(keys)}) DO UPDATE SET {sets}",
                rows,
            )
        self.__init__()  # type: ignore[misc]


def backfill_sql(where: str = "TRUE") -> str:
    """Tallies of the rows matching `where`, added to the tally tables (a migration fills
    them from grades stored before they existed; the benchmark after its COPY)."""
    h = HOUR_NS
    return f"""
INSERT INTO rollup_agents (bucket, agent, passed, runs)
  SELECT graded_ns / {h}, COALESCE(agent, ''), count(*) FILTER (WHERE passed), count(*)
  FROM grades WHERE {where} GROUP BY 1, 2 ORDER BY 1, 2
  ON CONFLICT (bucket, agent) DO UPDATE SET passed = rollup_agents.passed + EXCLUDED.passed,
  runs = rollup_agents.runs + EXCLUDED.runs;
INSERT INTO rollup_calls (bucket, tool, verdict, severity, calls, runs, tool_runs, tool_passed)
  SELECT graded_ns / {h}, tool, verdict, severity, sum(calls), count(*),
    count(*) FILTER (WHERE tool_first), count(*) FILTER (WHERE tool_first AND NOT tool_failed)
  FROM grade_calls WHERE {where} GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4
  ON CONFLICT (bucket, tool, verdict, severity) DO UPDATE SET
  calls = rollup_calls.calls + EXCLUDED.calls, runs = rollup_calls.runs + EXCLUDED.runs,
  tool_runs = rollup_calls.tool_runs + EXCLUDED.tool_runs,
  tool_passed = rollup_calls.tool_passed + EXCLUDED.tool_passed;
INSERT INTO rollup_recoveries (bucket, recovery, calls)
  SELECT graded_ns / {h}, recovery, sum(calls) FROM grade_recoveries WHERE {where}
  GROUP BY 1, 2 ORDER BY 1, 2
  ON CONFLICT (bucket, recovery) DO UPDATE SET calls = rollup_recoveries.calls
  + EXCLUDED.calls;
"""


def edges(since_ns: int | None, until_ns: int) -> tuple[int, int, tuple[int, int, int, int]]:
    """(first whole hour, end of whole hours, raw ranges [a, b) and [c, d]) of a window:
    the hours [lo, hi) come from the tallies, the two raw ranges from the rows."""
    since = since_ns if since_ns is not None else 0
    lo = -(-since // HOUR_NS)
    hi = (until_ns + 1) // HOUR_NS
    if hi <= lo:  # no whole hour inside: all from the rows
        return 0, 0, (since, until_ns + 1, 1, 0)
    return lo, hi, (since, lo * HOUR_NS, hi * HOUR_NS, until_ns)


def summary_sql() -> dict[str, str]:
    """The report's counting queries; parameters (lo, hi, a, b, c, d) as from `edges`."""
    raw = "((graded_ns >= %s AND graded_ns < %s) OR (graded_ns >= %s AND graded_ns <= %s))"
    return {
        "agents": f"""
SELECT agent, sum(passed), sum(runs) FROM (
  SELECT agent, passed, runs FROM rollup_agents WHERE bucket >= %s AND bucket < %s
  UNION ALL
  SELECT COALESCE(agent, ''), count(*) FILTER (WHERE passed), count(*) FROM grades
  WHERE {raw} GROUP BY 1) t GROUP BY agent HAVING sum(runs) > 0""",
        "calls": f"""
SELECT tool, verdict, severity, sum(calls), sum(runs), sum(tool_runs), sum(tool_passed) FROM (
  SELECT tool, verdict, severity, calls, runs, tool_runs, tool_passed FROM rollup_calls
  WHERE bucket >= %s AND bucket < %s
  UNION ALL
  SELECT tool, verdict, severity, sum(calls), count(*), count(*) FILTER (WHERE tool_first),
    count(*) FILTER (WHERE tool_first AND NOT tool_failed)
  FROM grade_calls WHERE {raw} GROUP BY 1, 2, 3) t GROUP BY tool, verdict, severity
HAVING sum(runs) > 0""",
        "hours": f"""
SELECT hour, sum(passed), sum(runs) FROM (
  SELECT bucket AS hour, passed, runs FROM rollup_agents WHERE bucket >= %s AND bucket < %s
  UNION ALL
  SELECT graded_ns / {HOUR_NS}, count(*) FILTER (WHERE passed), count(*) FROM grades
  WHERE {raw} GROUP BY 1) t GROUP BY hour HAVING sum(runs) > 0""",
        "recoveries": f"""
SELECT recovery, sum(calls) FROM (
  SELECT recovery, calls FROM rollup_recoveries WHERE bucket >= %s AND bucket < %s
  UNION ALL
  SELECT recovery, sum(calls) FROM grade_recoveries WHERE {raw} GROUP BY 1) t
GROUP BY recovery HAVING sum(calls) > 0""",
    }
