"""Where `attest-otel grade --file FILE`'s CPU goes, stage by stage (issue 30's file goal).

    .venv/bin/python bench/grade_file_stages.py FILE [--repeat 3]

Each round runs the CLI's own `grade` in a fresh child process, whose stages are wrapped in
CPU timers (`time.process_time`, the whole process's, so a run graded on its own thread
counts): start-up (the interpreter and every import until the command reads the file),
read (`ingest.stream.iter_file`: the wire core's reading), assemble (`ByTrace`: traces
gathered, spilled past its hold, and handed back), adapt (`pipeline.read`: runs built from
spans), rules (grading each run, thread included), render (each trace's text), and the rest
(the command's own work, totals, the exit). Prints the best round's figures, in CPU seconds.
Not a test; the figures it gave are in docs/measurements.md.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import sys, time, json
spent = {}
def timed(name, fn):
    def wrapper(*a, **k):
        t = time.process_time()
        try:
            return fn(*a, **k)
        finally:
            spent[name] = spent.get(name, 0.0) + time.process_time() - t
    return wrapper
def timed_iter(name, fn):
    def wrapper(*a, **k):
        it = fn(*a, **k)
        while True:
            t = time.process_time()
            try:
                item = next(it)
            except StopIteration:
                spent[name] = spent.get(name, 0.0) + time.process_time() - t
                return
            spent[name] = spent.get(name, 0.0) + time.process_time() - t
            yield item
    return wrapper
import attest_otel.cli as cli
from attest_otel import pipeline
cli_grade = sys.modules['attest_otel.cli.grade']  # `cli.grade` is the command
from attest_otel.ingest import stream
from attest_otel.sidecar import bounded
stream.iter_file = timed_iter("read", stream.iter_file)
stream.ByTrace.__init__ = timed("assemble", stream.ByTrace.__init__)
stream.ByTrace.trace = timed("assemble", stream.ByTrace.trace)
pipeline.read = timed("adapt", pipeline.read)
original = bounded.run_grader
bounded.run_grader = lambda *a, **k: timed("rules", original(*a, **k))
cli_grade._Output.add = timed("render", cli_grade._Output.add)
cli_grade._Output.print = timed("render", cli_grade._Output.print)
first = {}
def first_read(fn):
    def wrapper(*a, **k):
        first.setdefault("t", time.process_time())
        return fn(*a, **k)
    return wrapper
stream.ByTrace.of_file = classmethod(first_read(stream.ByTrace.of_file.__func__))
try:
    cli.main(["grade", "--file", sys.argv[1]], standalone_mode=False)
except SystemExit:
    pass
end = time.process_time()
spent["assemble"] -= spent.get("read", 0.0)  # reading happens inside ByTrace.__init__
# the process's CPU until the file is opened, the command's own imports included
spent["start-up"] = first.get("t", end)
staged = sum(v for k, v in spent.items() if k != "start-up")
spent["rest"] = end - spent["start-up"] - staged
spent["total"] = end
sys.stderr.write(json.dumps(spent) + "\n")
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("file", type=Path)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--python", default=sys.executable)
    args = parser.parse_args()
    rounds = []
    for _ in range(args.repeat):
        done = subprocess.run(
            [args.python, "-c", CHILD, str(args.file)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            check=True,
        )
        rounds.append(json.loads(done.stderr.decode().strip().splitlines()[-1]))
    best = min(rounds, key=lambda r: r["total"])
    order = ["start-up", "read", "assemble", "adapt", "rules", "render", "rest", "total"]
    print(json.dumps({k: round(best[k], 3) for k in order if k in best}, indent=2))


if __name__ == "__main__":
    main()
