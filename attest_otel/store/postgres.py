"""The shared store: the SQLite store's traces and grades, in PostgreSQL, for a fleet.

With one sidecar per machine and the Collector's loadbalancing exporter routing by trace id,
each sidecar's SQLite file would hold a slice: `grade --trace-id` would have to know which
sidecar saw the trace, and `report` would see a tenth of the runs. Every sidecar of a fleet
writes here instead and every reader reads here; `open_store` picks it for a
`postgresql://` URL.

What a fleet adds to the single writer of the SQLite store:

- A trace whose spans reached two sidecars (the list of sidecars changed mid-trace) is one
  trace: each sidecar's part is stored once (keyed by its digest) and the trace is their
  union. Each grade records the parts it was graded from (`basis`); a write whose basis
  misses a part already stored is *stale*, and `put_many` returns its trace so the sidecar
  grades it again from the whole (`sidecar.regrade.Regrader.refresh`). The write takes the
  trace's row lock first, so of two sidecars writing one trace the second always sees the
  first's part. A grade never replaces one graded from more spans: last writer wins per run,
  among grades of the same span set or larger.
- Counting for `report` is SQL over `grade_calls` (see `migrations`), not Python over rows.
- Retention by age and by total size, as in SQLite; a prune another sidecar is already
  running is skipped, not waited for. The size is what the store's tables take in the
  database's files (`pg_total_relation_size`: rows, TOAST, indexes; not the server's own
  WAL), not the spans' bytes. A deletion frees space inside those files, not on the disk:
  `VACUUM` after a prune makes it reusable, so the files stop growing instead of shrinking.
  `docs/sizing.md` has the measured margin.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from attest_otel.errors import SourceError, UsageError
from attest_otel.store.base import (
    URL_SCHEMES,
    GradeSummary,
    ReviewRow,
    WorstRow,
    grade_facts,
    is_url,
    part_digest,
    redact,
    review_reasons,
    url_problem,
)
from attest_otel.store.migrations import LOCK_KEY, migrate
from attest_otel.store.records import StoredGrade, StoredTrace, grades_from_rows
from attest_otel.store.rollup import Deltas, edges, summary_sql
from attest_otel.store.sizing import TableBudget

__all__ = ["URL_SCHEMES", "PostgresStore", "PutItem", "Unreachable", "is_url", "redact"]

log = logging.getLogger(__name__)

Unreachable = (psycopg.OperationalError, psycopg.InterfaceError)
"""Errors that mean "the database cannot be asked now" (retry later), not "this write is
wrong". `psycopg_pool.PoolTimeout` is an OperationalError."""

PutItem = tuple[str, bytes, int, Sequence[StoredGrade], Sequence[str] | None, Sequence[str] | None]
"""(trace id, OTLP bytes, span count, grades, basis digests, every run's span id)."""


_TABLES = (
    "traces",
    "trace_parts",
    "grades",
    "grade_calls",
    "grade_recoveries",
    "rollup_agents",
    "rollup_calls",
    "rollup_recoveries",
)
_SIZE_SQL = (
    "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c"
    " WHERE c.relname = ANY(%s) AND c.relkind = 'r' AND pg_table_is_visible(c.oid)"
)

_TOAST_OVERHEAD = 1.06  # 4 chunks of 1996 bytes in an 8 KiB page, with their headers and index


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return text or type(error).__name__


class PostgresStore:
    """A pool of connections to one database; safe to share between threads."""

    def __init__(
        self,
        url: str,
        *,
        max_age_s: float | None = None,
        max_bytes: int | None = None,
        readonly: bool = False,
        pool_size: int = 4,
        connect_timeout_s: float = 5.0,
        wait_for_database: bool = False,
    ) -> None:
        """`wait_for_database`: start even when the database cannot be reached (the sidecar;
        its writer queues until it can), instead of failing (every reader, the CLI)."""
        self.url = url
        self.location = redact(url)
        self.max_age_s = max_age_s
        self.max_bytes = max_bytes
        self.readonly = readonly
        self._budget = TableBudget.for_cap(max_bytes) if max_bytes is not None else None
        problem = url_problem(url)
        try:
            psycopg.conninfo.conninfo_to_dict(url)
        except psycopg.ProgrammingError as e:
            problem = problem or _one_line(e)
        if problem is not None:
            raise UsageError(f"store {self.location}: {problem}")
        timeout = max(1, round(connect_timeout_s))
        self._migrated = readonly
        try:  # one direct try first: its error says why (the pool's only "timed out")
            with psycopg.connect(url, connect_timeout=timeout) as conn:
                if not readonly:
                    migrate(conn)
                    self._migrated = True
                elif conn.execute("SELECT to_regclass('grades')").fetchone() == (None,):
                    raise SourceError(
                        f"{self.location}: no attest-otel store in this "
                        "database (has a sidecar written to it?)"
                    )
        except psycopg.OperationalError as e:
            if readonly or not wait_for_database:
                raise SourceError(
                    f"store {self.location}: cannot connect: {_one_line(e)}"
                ) from None
            # A sidecar must not crash-loop while the database is away (a rollout, a
            # failover): it starts, its writer queues the grades, and the schema is brought
            # up to date by the first connection the pool makes once the database is back.
            log.warning(
                "store %s: cannot connect (%s); starting anyway, grades wait in the "
                "store queue until it is reachable",
                self.location,
                _one_line(e),
            )
        except psycopg.Error as e:
            raise SourceError(f"store {self.location}: cannot connect: {_one_line(e)}") from None

        def configure(conn: psycopg.Connection[Any]) -> None:
            if readonly:
                conn.execute("SET default_transaction_read_only = on")
            elif not self._migrated:
                migrate(conn)  # safe to race: migrations take an advisory lock
                self._migrated = True
            conn.commit()

        self._pool: ConnectionPool[psycopg.Connection[Any]] = ConnectionPool(
            # A connection is waited for at most 2 s: a database that is away shows at once
            # (the writer's queue holds the writes), not after each write's long wait.
            url,
            min_size=1,
            max_size=pool_size,
            timeout=min(2.0, connect_timeout_s),
            kwargs={"connect_timeout": timeout},
            configure=configure,
            check=ConnectionPool.check_connection,
            name="attest-otel-store",
            open=False,
        )
        self._pool.open(wait=False)

    def close(self) -> None:
        self._pool.close(timeout=2.0)

    def __enter__(self) -> PostgresStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- writing ---------------------------------------------------------------------------

    def put_trace(
        self,
        trace_id: str,
        data: bytes,
        span_count: int,
        grades: Sequence[StoredGrade] = (),
        *,
        now_ns: int | None = None,
        basis: Sequence[str] | None = None,
        runs: Sequence[str] | None = None,
    ) -> list[str]:
        return self.put_many([(trace_id, data, span_count, grades, basis, runs)], now_ns=now_ns)

    def put_many(self, items: Sequence[PutItem], *, now_ns: int | None = None) -> list[str]:
        """Every item in one transaction; the trace ids whose write was stale (module
        docstring), to be graded again from the whole trace.

        Traces are written in id order, so two sidecars writing overlapping batches lock
        their rows in the same order and never deadlock.
        """
        now = time.time_ns() if now_ns is None else now_ns
        stale: list[str] = []
        deltas = Deltas()
        with self._pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
            for item in sorted(items, key=lambda i: i[0]):
                if self._put(cur, *item, now=now, deltas=deltas):
                    stale.append(item[0])
            deltas.apply(cur)
        return stale

    def _put(
        self,
        cur: psycopg.Cursor[Any],
        trace_id: str,
        data: bytes,
        span_count: int,
        grades: Sequence[StoredGrade],
        basis: Sequence[str] | None,
        runs: Sequence[str] | None,
        *,
        now: int,
        deltas: Deltas,
    ) -> bool:
        if data or basis is None:
            cur.execute(  # takes the trace's row lock for the rest of the transaction
                "INSERT INTO traces (trace_id, first_ns, updated_ns) VALUES (%s, %s, %s)"
                " ON CONFLICT (trace_id) DO UPDATE SET updated_ns = EXCLUDED.updated_ns",
                (trace_id, now, now),
            )
        else:  # a regrade of what is stored: only if it still is
            cur.execute("SELECT 1 FROM traces WHERE trace_id = %s FOR UPDATE", (trace_id,))
            if cur.fetchone() is None:
                return False
        if data:
            digest = part_digest(data)
            cur.execute(
                "INSERT INTO trace_parts (trace_id, digest, added_ns, span_count, data)"
                " VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING RETURNING 1",
                (trace_id, digest, now, span_count, data),
            )
            if cur.fetchone() is not None:
                cur.execute(
                    "UPDATE traces SET span_count = span_count + %s,"
                    " size_bytes = size_bytes + %s WHERE trace_id = %s",
                    (span_count, len(data), trace_id),
                )
            basis = (*(basis or ()), digest)  # a write's grades include its own spans
        if not grades and runs is None:
            return False
        cur.execute("SELECT digest, span_count FROM trace_parts WHERE trace_id = %s", (trace_id,))
        stored = {str(d): int(n) for d, n in cur.fetchall()}
        wanted = set(stored) if basis is None else set(basis)  # None: no spans, all parts
        basis_spans = sum(n for d, n in stored.items() if d in wanted)
        is_stale = any(d not in wanted for d in stored)
        self._put_grades(cur, grades, basis_spans, deltas)
        if runs is not None and not is_stale:  # a grading of the whole trace: no others
            _delete_grades(
                cur, "trace_id = %s AND NOT (span_id = ANY(%s))", (trace_id, list(runs)), deltas
            )
        return is_stale

    def _put_grades(
        self,
        cur: psycopg.Cursor[Any],
        grades: Sequence[StoredGrade],
        basis_spans: int,
        deltas: Deltas,
    ) -> None:
        for g in grades:
            facts = grade_facts(g.result)
            key = (g.trace_id, g.span_id)
            cur.execute(
                "SELECT graded_ns, agent, passed, basis_spans FROM grades"
                " WHERE trace_id = %s AND span_id = %s FOR UPDATE",
                key,
            )
            old = cur.fetchone()
            if old is not None and old[3] > basis_spans:
                continue  # a grade from more spans is stored: it stays
            cur.execute(
                "INSERT INTO grades (trace_id, span_id, agent, graded_ns, passed, verdict,"
                " score, failed_calls, basis_spans, result)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
                " ON CONFLICT (trace_id, span_id) DO UPDATE SET agent = EXCLUDED.agent,"
                " graded_ns = EXCLUDED.graded_ns, passed = EXCLUDED.passed,"
                " verdict = EXCLUDED.verdict, score = EXCLUDED.score,"
                " failed_calls = EXCLUDED.failed_calls, basis_spans = EXCLUDED.basis_spans,"
                " result = EXCLUDED.result WHERE grades.basis_spans <= EXCLUDED.basis_spans"
                " RETURNING 1",
                (
                    g.trace_id,
                    g.span_id,
                    g.agent,
                    g.graded_ns,
                    facts.passed,
                    facts.verdict,
                    facts.score,
                    facts.failed_calls,
                    basis_spans,
                    g.result_json(),
                ),
            )
            if cur.fetchone() is None:
                continue
            if old is not None:  # what the replaced grade counted goes from the tallies
                deltas.grade(int(old[0]), old[1], bool(old[2]), -1)
                _delete_grades(
                    cur,
                    "trace_id = %s AND span_id = %s",
                    key,
                    deltas,
                    tables=("grade_calls", "grade_recoveries"),
                )
            deltas.grade(g.graded_ns, g.agent, facts.passed, +1)
            for c in facts.calls:
                deltas.call(
                    g.graded_ns,
                    c.tool,
                    c.verdict,
                    c.severity,
                    c.calls,
                    c.tool_first,
                    c.tool_failed,
                    +1,
                )
            for r, n in facts.recoveries:
                deltas.recovery(g.graded_ns, r, n, +1)
            if facts.calls:
                cur.executemany(
                    "INSERT INTO grade_calls (trace_id, span_id, graded_ns, tool, verdict,"
                    " severity, calls, tool_first, tool_failed)"
                    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                    [
                        (
                            *key,
                            g.graded_ns,
                            c.tool,
                            c.verdict,
                            c.severity,
                            c.calls,
                            c.tool_first,
                            c.tool_failed,
                        )
                        for c in facts.calls
                    ],
                )
            if facts.recoveries:
                cur.executemany(
                    "INSERT INTO grade_recoveries (trace_id, span_id, graded_ns, recovery,"
                    " calls) VALUES (%s, %s, %s, %s, %s)",
                    [(*key, g.graded_ns, r, n) for r, n in facts.recoveries],
                )

    def prune(self, *, now_ns: int | None = None) -> int:
        """Deletes traces past the age limit, then the oldest until under the size limit;
        0 at once when another sidecar holds the prune lock."""
        if self.max_age_s is None and self.max_bytes is None:
            return 0
        now = time.time_ns() if now_ns is None else now_ns
        doomed: list[str] = []
        deltas = Deltas()
        with self._pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
            cur.execute("SELECT pg_try_advisory_xact_lock(%s)", (LOCK_KEY + 1,))
            row = cur.fetchone()
            if row is None or not row[0]:
                return 0
            if self.max_age_s is not None:
                cutoff = now - int(self.max_age_s * 1e9)
                cur.execute(
                    "DELETE FROM traces WHERE updated_ns < %s RETURNING trace_id", (cutoff,)
                )
                doomed += [str(r[0]) for r in cur.fetchall()]
            if self._budget is not None:
                doomed += self._doomed_by_size(cur, self._budget)
            if doomed:
                _delete_grades(cur, "trace_id = ANY(%s)", (doomed,), deltas)
                deltas.apply(cur)
        if doomed:
            self._vacuum()
        return len(doomed)

    def disk_bytes(self) -> int:
        """What the store's tables take in the database's files, indexes and TOAST included."""
        return int(self._rows(_SIZE_SQL, (list(_TABLES),))[0][0] or 0)

    def over_cap(self) -> bool:
        """Whether a prune would delete for size now (one cheap query while under)."""
        budget = self._budget
        if budget is None:
            return False
        with self._pool.connection() as conn, conn.cursor() as cur:
            return self._live_bytes(cur, budget) > budget.high

    @staticmethod
    def _live_bytes(cur: psycopg.Cursor[Any], budget: TableBudget) -> int:
        """The tables' size less the free space a prune left in the spans' TOAST: the files
        do not shrink after a delete (VACUUM makes the space reusable), so their size alone
        would ask for a prune after every prune. The spans' bytes as stored, plus TOAST's
        page overhead, stand for what is in use there; the other tables count whole."""
        cur.execute(_SIZE_SQL, (list(_TABLES),))
        size = int(cur.fetchone()[0] or 0)  # type: ignore[index]
        if size <= budget.high:
            return size  # the files bound what is in use: nothing more to ask
        cur.execute(
            "SELECT pg_total_relation_size(reltoastrelid),"
            " (SELECT COALESCE(sum(pg_column_size(data)), 0) FROM trace_parts)"
            " FROM pg_class WHERE oid = 'trace_parts'::regclass"
        )
        toast, stored = (int(v or 0) for v in cur.fetchone() or (0, 0))
        return size - toast + min(toast, int(stored * _TOAST_OVERHEAD))

    def _doomed_by_size(self, cur: psycopg.Cursor[Any], budget: TableBudget) -> list[str]:
        live = self._live_bytes(cur, budget)
        if live <= budget.high:
            return []
        cur.execute("SELECT COALESCE(sum(size_bytes), 0) FROM traces")
        data = int(cur.fetchone()[0])  # type: ignore[index]
        # Grades, tallies, indexes and page slack scale with the spans: the ratio of what
        # is in use to span bytes says how much deleting a trace gives back.
        keep = int(budget.low / (live / data)) if data else 0
        cur.execute(
            "DELETE FROM traces WHERE trace_id IN (SELECT trace_id FROM ("
            " SELECT trace_id, sum(size_bytes) OVER (ORDER BY updated_ns DESC,"
            " trace_id DESC) AS newer FROM traces) t WHERE newer > %s)"
            " RETURNING trace_id",
            (keep,),
        )
        return [str(r[0]) for r in cur.fetchall()]

    def _vacuum(self) -> None:
        """Makes what a prune freed reusable now, not when autovacuum comes by (a minute
        or more, while the files would keep growing); outside a transaction, as VACUUM
        must be. A failure (not the tables' owner) is logged: autovacuum still comes."""
        try:
            with psycopg.connect(self.url, autocommit=True, connect_timeout=5) as conn:
                conn.execute("VACUUM " + ", ".join(_TABLES))
        except psycopg.Error as e:
            log.warning("store %s: VACUUM after a prune failed: %s", self.location, _one_line(e))

    # --- reading ---------------------------------------------------------------------------

    def _rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._pool.connection() as conn:
            return list(conn.execute(sql, params).fetchall())

    def get_trace(self, trace_id: str) -> StoredTrace | None:
        key = trace_id.strip().lower()
        with self._pool.connection() as conn:
            row = conn.execute(
                "SELECT trace_id, span_count, first_ns, updated_ns FROM traces WHERE trace_id = %s",
                (key,),
            ).fetchone()
            if row is None:
                return None
            parts = conn.execute(
                "SELECT digest, data FROM trace_parts WHERE trace_id = %s ORDER BY seq", (key,)
            ).fetchall()
            grades = conn.execute(
                "SELECT trace_id, span_id, agent, graded_ns, result FROM grades"
                " WHERE trace_id = %s ORDER BY graded_ns, span_id",
                (key,),
            ).fetchall()
        return StoredTrace(
            str(row[0]),
            b"".join(bytes(p[1]) for p in parts),
            int(row[1]),
            int(row[2]),
            int(row[3]),
            tuple(StoredGrade(r[0], r[1], r[2], int(r[3]), json.loads(r[4])) for r in grades),
            parts=tuple(str(p[0]) for p in parts),
        )

    def trace_ids_since(self, since_ns: int) -> list[str]:
        rows = self._rows(
            "SELECT trace_id FROM traces WHERE updated_ns >= %s ORDER BY updated_ns, trace_id",
            (since_ns,),
        )
        return [str(r[0]) for r in rows]

    def grades_since(self, since_ns: int | None = None) -> list[StoredGrade]:
        rows = self._rows(
            "SELECT trace_id, span_id, agent, graded_ns, result FROM grades"
            " WHERE graded_ns >= %s ORDER BY graded_ns, trace_id, span_id",
            (since_ns if since_ns is not None else -(2**63),),
        )
        return grades_from_rows(rows)

    def trace_ids(self, limit: int = 100) -> list[str]:
        rows = self._rows("SELECT trace_id FROM traces ORDER BY updated_ns DESC LIMIT %s", (limit,))
        return [str(r[0]) for r in rows]

    def stats(self) -> tuple[int, int]:
        row = self._rows("SELECT count(*), COALESCE(sum(size_bytes), 0) FROM traces")[0]
        return int(row[0]), int(row[1])

    def summary(self, since_ns: int | None, until_ns: int, limit: int = 10) -> GradeSummary:
        """What `report` shows of [since_ns, until_ns], counted here: the whole hours from
        the tallies, the partial hours at both ends from the rows (`rollup`)."""
        lo, hi, raw = edges(since_ns, until_ns)
        params = (lo, hi, *raw)
        window = (since_ns if since_ns is not None else -(2**63), until_ns)
        queries = summary_sql()
        with self._pool.connection() as conn:
            agents = conn.execute(queries["agents"], params).fetchall()
            calls = conn.execute(queries["calls"], params).fetchall()
            recoveries = conn.execute(queries["recoveries"], params).fetchall()
            hours = conn.execute(queries["hours"], params).fetchall()
            problems = sorted(
                ((int(c), int(r), str(v), str(t)) for t, v, s, c, r, _, _ in calls if s != "pass"),
                key=lambda p: (-p[0], -p[1], p[2], p[3]),
            )[:limit]
            examples = {}
            for _, _, verdict, tool in problems:  # the latest trace of each: one index probe
                row = conn.execute(
                    "SELECT trace_id FROM grade_calls WHERE verdict = %s AND tool = %s"
                    " AND severity <> 'pass' AND graded_ns BETWEEN %s AND %s"
                    " ORDER BY verdict, tool, graded_ns DESC, trace_id DESC, span_id DESC"
                    " LIMIT 1",
                    (verdict, tool, *window),
                ).fetchone()
                if row is not None:
                    examples[(verdict, tool)] = str(row[0])
            worst = conn.execute(
                "SELECT trace_id, span_id, agent, graded_ns, score, verdict, failed_calls,"
                " result FROM grades WHERE graded_ns BETWEEN %s AND %s"
                " AND NOT (passed AND verdict = 'pass')"
                " ORDER BY score, failed_calls DESC, graded_ns DESC, trace_id, span_id"
                " LIMIT %s",
                (*window, limit),
            ).fetchall()
            # Runs graded review count as passed: counted and listed apart (`grades_review`).
            review, unread = conn.execute(
                "SELECT count(*), count(*) FILTER (WHERE position('\"gaps\"' in result) > 0)"
                " FROM grades WHERE verdict = 'review' AND graded_ns BETWEEN %s AND %s",
                window,
            ).fetchone() or (0, 0)
            reviews = conn.execute(
                "SELECT trace_id, span_id, agent, graded_ns, result FROM grades"
                " WHERE verdict = 'review' AND graded_ns BETWEEN %s AND %s"
                " ORDER BY graded_ns DESC, trace_id, span_id LIMIT %s",
                (*window, limit),
            ).fetchall()
        return GradeSummary(
            agents=[(a, int(p), int(n)) for a, p, n in agents],
            calls=[
                (str(t), str(v), str(s), int(c), int(r), int(tr), int(tp))
                for t, v, s, c, r, tr, tp in calls
            ],
            examples=examples,
            recoveries=[(str(r), int(n)) for r, n in recoveries],
            hours=[(int(h), int(p), int(n)) for h, p, n in hours],
            worst=[
                WorstRow(str(t), str(s), a, int(g), float(sc), str(v), int(f), _summary_of(text))
                for t, s, a, g, sc, v, f, text in worst
            ],
            review=int(review),
            unread=int(unread),
            reviews=[_review_row(str(t), str(s), a, int(g), text) for t, s, a, g, text in reviews],
        )


def _delete_grades(
    cur: psycopg.Cursor[Any],
    where: str,
    params: Sequence[Any],
    deltas: Deltas,
    *,
    tables: Sequence[str] = ("grades", "grade_calls", "grade_recoveries"),
) -> None:
    """Deletes grade rows, taking what they counted from the tallies (`rollup`)."""
    returning = {
        "grades": "graded_ns, agent, passed",
        "grade_calls": "graded_ns, tool, verdict, severity, calls, tool_first, tool_failed",
        "grade_recoveries": "graded_ns, recovery, calls",
    }
    for table in tables:
        cur.execute(f"DELETE FROM {table} WHERE {where} RETURNING {returning[table]}", params)
        for row in cur.fetchall():
            if table == "grades":
                deltas.grade(int(row[0]), row[1], bool(row[2]), -1)
            elif table == "grade_calls":
                deltas.call(int(row[0]), row[1], row[2], row[3], int(row[4]), row[5], row[6], -1)
            else:
                deltas.recovery(int(row[0]), row[1], int(row[2]), -1)


def _review_row(
    trace_id: str, span_id: str, agent: str | None, graded_ns: int, text: str
) -> ReviewRow:
    try:
        result = json.loads(text)
    except (TypeError, ValueError):
        result = {}
    unread, reasons = review_reasons(result if isinstance(result, dict) else {})
    return ReviewRow(trace_id, span_id, agent, graded_ns, unread, reasons)


def _summary_of(text: str) -> str:
    try:
        result = json.loads(text)
    except (TypeError, ValueError):
        return ""
    return str(result.get("summary") or "") if isinstance(result, dict) else ""
