"""The PostgreSQL store's schema, as numbered migrations applied at start.

A fleet's sidecars start together (a rollout, a node drain) and each applies what the
database lacks. They take one transaction-scoped advisory lock first, so one applies and the
others wait, then find the versions recorded and apply nothing: DDL inside the transaction
means a migration is all there or not at all. A migration, once shipped, never changes: a
new need is a new number. A database migrated further than this attest-otel knows (a newer
sidecar ran) is used as it is, with a warning: migrations only add.

Why these tables: `traces` holds one row per trace (its age and size, for retention);
`trace_parts` the OTLP bytes each grading wrote, keyed by their digest, so the same spans
written twice are stored once and a trace split between two sidecars is the union of their
parts; `grades` one row per run, keyed by its agent span; `grade_calls` and
`grade_recoveries` the counts `report` sums, one row per run, tool and verdict, written with
the grade, so a report is a few aggregate scans instead of parsing a million JSON documents;
the `rollup_*` tables tally them by hour (`rollup`), so it scans thousands, not millions.
"""

from __future__ import annotations

import logging
from typing import Any

from attest_otel.store.rollup import backfill_sql

__all__ = ["LOCK_KEY", "MIGRATIONS", "migrate"]

log = logging.getLogger(__name__)

LOCK_KEY = 0x617474657374  # "attest": the advisory lock every migrating sidecar takes

MIGRATIONS: tuple[tuple[int, str, str], ...] = (
    (
        1,
        "traces, parts, grades and the report's tallies",
        """
CREATE TABLE traces (
    trace_id    text PRIMARY KEY,
    first_ns    bigint NOT NULL,
    updated_ns  bigint NOT NULL,
    span_count  integer NOT NULL DEFAULT 0,
    size_bytes  bigint NOT NULL DEFAULT 0
);
CREATE INDEX traces_by_age ON traces (updated_ns, trace_id);
CREATE TABLE trace_parts (
    trace_id    text NOT NULL REFERENCES traces ON DELETE CASCADE,
    digest      text NOT NULL,
    seq         bigserial,
    added_ns    bigint NOT NULL,
    span_count  integer NOT NULL,
    data        bytea NOT NULL,
    PRIMARY KEY (trace_id, digest)
);
CREATE TABLE grades (
    trace_id     text NOT NULL,
    span_id      text NOT NULL,
    agent        text,
    graded_ns    bigint NOT NULL,
    passed       boolean NOT NULL,
    verdict      text NOT NULL,
    score        double precision NOT NULL,
    failed_calls integer NOT NULL,
    basis_spans  integer NOT NULL,
    result       text NOT NULL,
    PRIMARY KEY (trace_id, span_id)
);
CREATE INDEX grades_by_time ON grades (graded_ns) INCLUDE (agent, passed);
CREATE INDEX grades_worst ON grades (score, failed_calls DESC, graded_ns DESC, trace_id, span_id)
    WHERE NOT (passed AND verdict = 'pass');
CREATE TABLE grade_calls (
    trace_id    text NOT NULL,
    span_id     text NOT NULL,
    graded_ns   bigint NOT NULL,
    tool        text NOT NULL,
    verdict     text NOT NULL,
    severity    text NOT NULL,
    calls       integer NOT NULL,
    tool_first  boolean NOT NULL,
    tool_failed boolean NOT NULL
);
CREATE INDEX grade_calls_by_run ON grade_calls (trace_id, span_id);
CREATE INDEX grade_calls_by_time ON grade_calls (graded_ns)
    INCLUDE (tool, verdict, severity, calls, tool_first, tool_failed);
CREATE TABLE grade_recoveries (
    trace_id    text NOT NULL,
    span_id     text NOT NULL,
    graded_ns   bigint NOT NULL,
    recovery    text NOT NULL,
    calls       integer NOT NULL
);
CREATE INDEX grade_recoveries_by_run ON grade_recoveries (trace_id, span_id);
CREATE INDEX grade_recoveries_by_time ON grade_recoveries (graded_ns);
""",
    ),
    (
        2,
        "hourly tallies for report, and an index for each problem's latest trace",
        """
CREATE TABLE rollup_agents (
    bucket bigint NOT NULL, agent text NOT NULL, passed bigint NOT NULL, runs bigint NOT NULL,
    PRIMARY KEY (bucket, agent)
);
CREATE TABLE rollup_calls (
    bucket bigint NOT NULL, tool text NOT NULL, verdict text NOT NULL, severity text NOT NULL,
    calls bigint NOT NULL, runs bigint NOT NULL, tool_runs bigint NOT NULL,
    tool_passed bigint NOT NULL,
    PRIMARY KEY (bucket, tool, verdict, severity)
);
CREATE TABLE rollup_recoveries (
    bucket bigint NOT NULL, recovery text NOT NULL, calls bigint NOT NULL,
    PRIMARY KEY (bucket, recovery)
);
CREATE INDEX grade_calls_problems
    ON grade_calls (verdict, tool, graded_ns DESC, trace_id DESC, span_id DESC)
    WHERE severity <> 'pass';
"""
        + backfill_sql(),
    ),
    (
        3,
        "an index of the runs graded review, which report counts and lists apart",
        "CREATE INDEX grades_review ON grades (graded_ns DESC) WHERE verdict = 'review';",
    ),
)


def migrate(conn: Any) -> list[int]:
    """Applies the migrations `conn`'s database lacks, under the advisory lock; the versions
    applied (none when another sidecar got there first)."""
    applied: list[int] = []
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_KEY,))
        conn.execute(
            "CREATE TABLE IF NOT EXISTS attest_schema ("
            " version integer PRIMARY KEY, description text NOT NULL,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        have = {int(r[0]) for r in conn.execute("SELECT version FROM attest_schema")}
        for version, description, sql in MIGRATIONS:
            if version in have:
                continue
            conn.execute(sql)
            conn.execute(
                "INSERT INTO attest_schema (version, description) VALUES (%s, %s)",
                (version, description),
            )
            applied.append(version)
        newest = max((v for v, _, _ in MIGRATIONS), default=0)
        ahead = sorted(v for v in have if v > newest)
        if ahead:
            log.warning(
                "store: schema has migrations %s this attest-otel does not know "
                "(a newer version ran); using it as it is",
                ahead,
            )
    if applied:
        log.info("store: schema migrated", extra={"versions": ",".join(map(str, applied))})
    return applied
