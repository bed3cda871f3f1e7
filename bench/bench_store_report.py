"""`report` over a fleet's shared store: a million graded runs, counted in SQL.

Bulk-loads synthetic grades with COPY (runs of 20 agents calling 1-4 of 30 tools, about one
run in six failing a call, spread over the last week) and their hourly tallies (what the
sidecars' writes keep up to date, `store.rollup`), then times the report: the store's
`summary` (the SQL) and the whole `attest-otel report --json` command (process start,
connection, SQL, rendering).

    .venv/bin/python bench/bench_store_report.py                 # a throwaway server (tests/pg.py)
    .venv/bin/python bench/bench_store_report.py --url postgresql://...   # an empty database
"""

from __future__ import annotations

import argparse
import io
import json
import random
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TOOLS = [f"tool_{i:02d}" for i in range(30)]
AGENTS = [f"agent_{i:02d}" for i in range(20)]
VERDICTS_OK = ("correct",)
VERDICTS_BAD = (
    ("incorrect", "fail"),
    ("error_silent", "fail"),
    ("review", "review"),
    ("disallowed_tool", "fail"),
)


def load(url: str, runs: int, seed: int = 7) -> int:
    import psycopg

    from attest_otel.store import open_store
    from attest_otel.store.rollup import backfill_sql

    open_store(url).close()  # migrated
    rng = random.Random(seed)
    now = time.time_ns()
    week = 7 * 86400 * 10**9
    calls_rows = 0
    with psycopg.connect(url) as conn:
        grades = io.StringIO()
        calls = io.StringIO()
        recov = io.StringIO()
        for n in range(runs):
            trace_id, span_id = f"{n:032x}", f"{n:016x}"
            graded = now - rng.randrange(week)
            agent = rng.choice(AGENTS)
            failed = 0
            findings = []
            for tool in rng.sample(TOOLS, rng.randint(1, 4)):
                k = rng.randint(1, 3)
                if rng.random() < 0.05:
                    verdict, severity = rng.choice(VERDICTS_BAD)
                else:
                    verdict, severity = "correct", "pass"
                failed_tool = severity == "fail"
                failed += k if failed_tool else 0
                calls.write(
                    f"{trace_id}\t{span_id}\t{graded}\t{tool}\t{verdict}\t{severity}\t"
                    f"{k}\tt\t{'t' if failed_tool else 'f'}\n"
                )
                calls_rows += 1
                if verdict == "error_silent":
                    recov.write(f"{trace_id}\t{span_id}\t{graded}\tsilent\t{k}\n")
                findings.append({"subject": tool, "verdict": verdict, "severity": severity})
            passed = failed == 0
            verdict = "pass" if passed else "fail"
            score = 1.0 if passed else round(rng.random(), 3)
            result = json.dumps(
                {
                    "check": "tool_use",
                    "passed": passed,
                    "verdict": verdict,
                    "score": score,
                    "summary": f"run {n}",
                    "findings": findings,
                }
            )
            result = result.replace("\\", "\\\\").replace("\t", "\\t")
            grades.write(
                f"{trace_id}\t{span_id}\t{agent}\t{graded}\t{'t' if passed else 'f'}\t"
                f"{verdict}\t{score}\t{failed}\t1\t{result}\n"
            )
        for table, buf in (("grades", grades), ("grade_calls", calls), ("grade_recoveries", recov)):
            buf.seek(0)
            with conn.cursor().copy(f"COPY {table} FROM STDIN") as copy:
                while chunk := buf.read(1 << 20):
                    copy.write(chunk)
        conn.execute(backfill_sql())  # the hourly tallies the sidecars keep as they write
        conn.commit()
        conn.autocommit = True
        conn.execute("VACUUM ANALYZE grades")
        conn.execute("VACUUM ANALYZE grade_calls")
        conn.execute("VACUUM ANALYZE grade_recoveries")
        conn.execute("VACUUM ANALYZE rollup_calls")
    return calls_rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--url", help="an empty PostgreSQL database (default: a throwaway server from tests/pg.py)"
    )
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    server = None
    url = args.url
    if url is None:
        from tests.pg import start_postgres

        server = start_postgres()
        url = server.database()
    try:
        t0 = time.perf_counter()
        rows = load(url, args.runs)
        print(
            f"loaded {args.runs:,} runs ({rows:,} grade_calls rows) with COPY in "
            f"{time.perf_counter() - t0:.1f}s"
        )
        from attest_otel.report.stats import report_from_counts
        from attest_otel.store.postgres import PostgresStore

        store = PostgresStore(url, readonly=True)
        sql = []
        for _ in range(args.repeat):
            t = time.perf_counter()
            now = time.time_ns()
            built = report_from_counts(
                store.summary(now - 30 * 86400 * 10**9, now), since_ns=None, until_ns=now
            )
            sql.append(time.perf_counter() - t)
        store.close()
        print(
            f"summary + report_from_counts: best {min(sql) * 1000:.0f} ms, "
            f"median {sorted(sql)[len(sql) // 2] * 1000:.0f} ms "
            f"({built.overall.total:,} runs, {len(built.tools)} tools)"
        )
        cli = []
        for _ in range(args.repeat):
            t = time.perf_counter()
            out = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "attest_otel.cli",
                    "report",
                    "--json",
                    "--since",
                    "30d",
                    "--from",
                    f"store:{url}",
                ],
                capture_output=True,
                text=True,
                cwd=ROOT,
                check=True,
            )
            cli.append(time.perf_counter() - t)
        total = json.loads(out.stdout)["runs"]["total"]
        print(
            f"attest-otel report --json --since 30d --from store:URL: best "
            f"{min(cli) * 1000:.0f} ms, median {sorted(cli)[len(cli) // 2] * 1000:.0f} ms "
            f"(whole process; {total:,} runs)"
        )
    finally:
        if server is not None:
            from tests.pg import stop_postgres

            stop_postgres(server)


if __name__ == "__main__":
    main()
