"""The shared store's queue in memory: filled to `store.max_queue_size_mib` while the
database is away, what the process's RSS grows by.

    .venv/bin/python bench/queue_rss.py [--cap-mib 64]

The queue counts each write's span bytes and its grades' text; this measures what the
Python objects behind them take (each write distinct: its own bytes and grade dicts).
"""

from __future__ import annotations

import argparse
import copy
import gc
import logging
import random
import socket
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from attest_otel.store import StoredGrade, open_store  # noqa: E402
from attest_otel.store.postgres import PostgresStore  # noqa: E402
from attest_otel.store.shared_writer import SharedStoreWriter  # noqa: E402


def rss_mib() -> float:
    return int(Path("/proc/self/statm").read_text().split()[1]) * 4096 / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cap-mib", type=int, default=64)
    args = parser.parse_args()
    logging.disable(logging.ERROR)
    with socket.socket() as s:  # a port nothing listens on: the database is away
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    store = open_store(f"postgresql://x:y@127.0.0.1:{port}/db", wait_for_database=True)
    rng = random.Random(1)
    result = {
        "check": "tool_use",
        "verdict": "fail",
        "score": 0.5,
        "summary": "the agent retried a failing tool " * 60,
        "findings": [{"rule": "retry", "call": i, "evidence": "x" * 200} for i in range(5)],
    }
    gc.collect()
    before = rss_mib()
    assert isinstance(store, PostgresStore)
    writer = SharedStoreWriter(store, max_bytes=args.cap_mib * 2**20)
    writer.start()
    i = 0
    while writer.dropped == 0:
        tid = f"{i:032x}"
        grade = StoredGrade(tid, "01" * 8, "agent", i, copy.deepcopy(result))
        writer.put(tid, rng.randbytes(rng.randint(8_000, 60_000)), 21, [grade])
        i += 1
    gc.collect()
    grown = rss_mib() - before
    print(
        f"queue full at {args.cap_mib} MiB: {writer.pending} writes waiting, "
        f"RSS grew {grown:.1f} MiB ({grown / args.cap_mib:.0%} of the cap)"
    )
    writer.close(timeout_s=0.1)


if __name__ == "__main__":
    main()
